-- Intent lifecycle (state machine, expiry, listing) and idempotency-key retention.

-- Every state change of an intent, and who made it. The primary key makes a version's transition
-- unique, so two writers can never both record the change from the same version.
CREATE TABLE payment_intent_transitions (
    merchant_id  text        NOT NULL,
    intent_id    text        NOT NULL,
    version      integer     NOT NULL CHECK (version >= 2),
    from_state   text        NOT NULL,
    to_state     text        NOT NULL,
    action       text        NOT NULL,
    actor        text        NOT NULL,
    occurred_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (merchant_id, intent_id, version),
    FOREIGN KEY (merchant_id, intent_id) REFERENCES payment_intents (merchant_id, id)
);

-- Newest-first cursor pages of one merchant's intents.
CREATE INDEX payment_intents_listing ON payment_intents (merchant_id, created_at DESC, id DESC);

-- The expiry sweeper's work list (by state, so any state the machine lets expire is served).
CREATE INDEX payment_intents_expiring ON payment_intents (state, expires_at);

-- The retention sweeper's work list.
CREATE INDEX idempotency_keys_expiring ON idempotency_keys (expires_at);
