-- Every table's primary key leads with the merchant (scope) id, so the schema can be distributed
-- by merchant without change (SPEC §6).

-- API tokens, stored only as SHA-256 hashes (SPEC §2). Looked up by hash alone, so the unique
-- index on token_sha256 serves authentication (a distributed deployment makes this a reference table).
CREATE TABLE api_keys (
    merchant_id  text        NOT NULL CHECK (merchant_id ~ '^[A-Za-z0-9_-]{1,64}$'),
    token_sha256 bytea       NOT NULL CHECK (octet_length(token_sha256) = 32),
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (merchant_id, token_sha256)
);
CREATE UNIQUE INDEX api_keys_token_sha256_key ON api_keys (token_sha256);

CREATE TABLE payment_intents (
    merchant_id         text          NOT NULL,
    id                  text          NOT NULL CHECK (id ~ '^pi_[0-9a-f]{24}$'),
    state               text          NOT NULL,
    version             integer       NOT NULL CHECK (version >= 1),
    amount              numeric(78,0) NOT NULL CHECK (amount >= 1 AND amount < 2::numeric ^ 256),
    chain               text          NOT NULL,
    token               text          NOT NULL,
    payer               text          NOT NULL,
    payee               text          NOT NULL,
    expires_at          timestamptz   NOT NULL,
    created_at          timestamptz   NOT NULL DEFAULT now(),
    updated_at          timestamptz   NOT NULL DEFAULT now(),
    canceled_at         timestamptz,
    cancellation_reason text,
    PRIMARY KEY (merchant_id, id)
);

-- One row per (scope, key): the claim, its lease and, once completed, the stored response (SPEC §5).
CREATE TABLE idempotency_keys (
    scope            text        NOT NULL,
    key              text        NOT NULL CHECK (octet_length(key) BETWEEN 1 AND 255),
    fingerprint      bytea       NOT NULL CHECK (octet_length(fingerprint) = 32),
    state            text        NOT NULL CHECK (state IN ('in_flight', 'completed')),
    attempt          integer     NOT NULL CHECK (attempt >= 1),
    lease_expires_at timestamptz NOT NULL,
    created_at       timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL,
    completed_at     timestamptz,
    response_status  smallint,
    response_headers jsonb,
    response_body    bytea,
    PRIMARY KEY (scope, key),
    CHECK ((state = 'completed') = (response_status IS NOT NULL AND response_headers IS NOT NULL AND response_body IS NOT NULL))
);
