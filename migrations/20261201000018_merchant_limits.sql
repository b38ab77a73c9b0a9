-- Tenants' fair share (docs/design.md, "Per-merchant limits"). A merchant's own request rate and
-- concurrency, where it differs from MERCHANT_RATE_LIMIT and MERCHANT_CONCURRENCY_LIMIT; NULL keeps
-- the default, 0 means unlimited. Every replica reads the whole table every few seconds.
CREATE TABLE merchant_limits (
    merchant_id       text        PRIMARY KEY
                                  CHECK (merchant_id ~ '^[A-Za-z0-9_-]{1,64}$'),
    rate_per_second   integer     CHECK (rate_per_second >= 0),
    concurrency       integer     CHECK (concurrency >= 0),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- The replicas serving now, each seen every few seconds: the limits are split between them.
CREATE TABLE replicas (
    id      uuid        PRIMARY KEY,
    seen_at timestamptz NOT NULL
);
