-- Events (the outbox) and webhooks: what a merchant hears about every change, and how.

-- Free-form key/value pairs a merchant attaches to an intent, carried by every event about it.
ALTER TABLE payment_intents ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}';

-- One row per state change of an intent, creation included, written in the change's own
-- transaction. `object` is the intent exactly as the API showed it right after the change (json,
-- not jsonb, so its key order is kept). Immutable; deleted after 30 days by the sweeper.
CREATE TABLE events (
    merchant_id    text        NOT NULL,
    id             text        NOT NULL CHECK (id ~ '^evt_[0-9a-f]{24}$'),
    type           text        NOT NULL,
    subject_id     text        NOT NULL,
    subject_version integer    NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    object         json        NOT NULL,
    PRIMARY KEY (merchant_id, id),
    -- One event per state change: a change is one version of its subject.
    UNIQUE (merchant_id, subject_id, subject_version)
);
CREATE INDEX events_listing ON events (merchant_id, created_at DESC, id DESC);
-- The retention sweeper's work list. Events arrive in created_at order, so a BRIN index serves it
-- at a fraction of a B-tree's cost per insert.
CREATE INDEX events_expiring ON events USING brin (created_at);

CREATE TABLE webhook_endpoints (
    merchant_id     text        NOT NULL,
    id              text        NOT NULL CHECK (id ~ '^we_[0-9a-f]{24}$'),
    url             text        NOT NULL,
    description     text,
    -- NULL: every type.
    event_types     text[],
    secret          text        NOT NULL,
    -- After a rotation the old secret keeps signing until this time.
    previous_secret text,
    previous_secret_until timestamptz,
    -- Since when every attempt to this endpoint failed; NULL while it answers.
    failing_since   timestamptz,
    disabled_at     timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (merchant_id, id)
);

-- The work queue: one row per event and endpoint subscribed to it, written with the event.
-- A replica takes due rows with SKIP LOCKED and leases them by moving next_attempt_at forward, so
-- a crash mid-delivery means a redelivery by someone else once the lease passes, never a loss.
CREATE TABLE webhook_deliveries (
    merchant_id     text        NOT NULL,
    event_id        text        NOT NULL,
    endpoint_id     text        NOT NULL,
    state           text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    PRIMARY KEY (merchant_id, event_id, endpoint_id),
    FOREIGN KEY (merchant_id, event_id) REFERENCES events (merchant_id, id) ON DELETE CASCADE
    -- No foreign key to webhook_endpoints: its check would lock the endpoint's row (FOR KEY SHARE)
    -- in every transaction that writes an event, all of them the same row, and PostgreSQL then
    -- has to build multixacts. Deleting an endpoint deletes its deliveries in the same statement.
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';

-- Every attempt, as `GET /v1/events/{id}/deliveries` shows it.
CREATE TABLE webhook_attempts (
    merchant_id  text        NOT NULL,
    event_id     text        NOT NULL,
    endpoint_id  text        NOT NULL,
    attempt      integer     NOT NULL,
    started_at   timestamptz NOT NULL,
    status_code  smallint,
    error        text,
    latency_ms   integer     NOT NULL,
    PRIMARY KEY (merchant_id, event_id, endpoint_id, attempt),
    FOREIGN KEY (merchant_id, event_id, endpoint_id)
        REFERENCES webhook_deliveries (merchant_id, event_id, endpoint_id) ON DELETE CASCADE
);
