-- Refunds (docs/refunds.md): money a merchant sends back to the payer of a paid intent, by an
-- EIP-3009 authorization the merchant signs, relayed by the outbox and seen by the follower like a
-- payment. A refund's amount is reserved while it may still move money (`created`,
-- `processing`, `succeeded`); the sum never exceeds what the intent was paid, which the create
-- checks under a lock on the intent.
CREATE TABLE refunds (
    merchant_id     text          NOT NULL,
    id              text          NOT NULL CHECK (id ~ '^re_[0-9a-f]{24}$'),
    intent_id       text          NOT NULL,
    state           text          NOT NULL
                    CHECK (state IN ('created', 'processing', 'succeeded', 'failed')),
    version         integer       NOT NULL CHECK (version >= 1),
    amount          numeric(78,0) NOT NULL CHECK (amount >= 1 AND amount < 2::numeric ^ 256),
    chain           text          NOT NULL,
    token           text          NOT NULL,
    -- The merchant's address the intent paid, which pays the refund.
    payee           text          NOT NULL,
    -- The intent's payer, who receives it.
    payer           text          NOT NULL,
    reason          text          CHECK (reason IN ('duplicate', 'fraudulent', 'requested_by_customer')),
    -- keccak256("payments-api:refund:" || id): the authorization's nonce.
    chain_nonce     bytea         NOT NULL CHECK (octet_length(chain_nonce) = 32),
    -- In whole seconds: the authorization's validBefore.
    expires_at      timestamptz   NOT NULL CHECK (expires_at = date_trunc('second', expires_at)),
    failure_reason  text,
    pending_reason  text,
    settlement      jsonb,
    created_at      timestamptz   NOT NULL DEFAULT now(),
    updated_at      timestamptz   NOT NULL DEFAULT now(),
    PRIMARY KEY (merchant_id, id),
    UNIQUE (id),
    FOREIGN KEY (merchant_id, intent_id) REFERENCES payment_intents (merchant_id, id)
);
CREATE INDEX refunds_of_intent ON refunds (merchant_id, intent_id, created_at DESC, id DESC);
CREATE INDEX refunds_listed ON refunds (merchant_id, created_at DESC, id DESC);
CREATE INDEX refunds_by_nonce ON refunds (chain_nonce);
CREATE INDEX refunds_open ON refunds (chain, expires_at) WHERE state IN ('created', 'processing');

-- What the intent's payer got back: the sum of its succeeded refunds, kept by the transaction that
-- settles each one.
ALTER TABLE payment_intents ADD COLUMN amount_refunded numeric(78,0) NOT NULL DEFAULT 0
    CHECK (amount_refunded >= 0 AND amount_refunded <= amount);

-- A refund's authorization, used or canceled on chain, is an observation of its own kind.
ALTER TABLE chain_observations DROP CONSTRAINT chain_observations_kind;
ALTER TABLE chain_observations ADD CONSTRAINT chain_observations_kind
    CHECK (kind IN ('authorization_used', 'authorization_canceled',
                    'refund_authorization_used', 'refund_authorization_canceled'));

ALTER TABLE chain_submissions DROP CONSTRAINT chain_submissions_kind;
ALTER TABLE chain_submissions ADD CONSTRAINT chain_submissions_kind
    CHECK (kind IN ('intent_payment', 'refund_payment'));

-- A refund is booked as its own entry, merchant to payer, with the refund as its subject.
ALTER TABLE ledger_entries ADD COLUMN refund_id text REFERENCES refunds (id);
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_kind_check;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_kind_check
    CHECK (kind IN ('payment', 'refund') AND (kind = 'refund') = (refund_id IS NOT NULL));
