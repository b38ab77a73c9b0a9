-- The two tables the reference needs: an intent and an idempotency record, each with only the
-- columns any design stores. 1000 completed keys are there for the replay workload to read.
CREATE TABLE intents (
    id         text PRIMARY KEY,
    merchant   text NOT NULL,
    chain      text NOT NULL,
    token      text NOT NULL,
    payer      text NOT NULL,
    payee      text NOT NULL,
    amount     numeric(78,0) NOT NULL,
    state      text NOT NULL,
    version    integer NOT NULL,
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE idempotency_records (
    scope       text NOT NULL,
    key         text NOT NULL,
    fingerprint bytea NOT NULL,
    state       text NOT NULL,
    attempt     integer NOT NULL,
    lease_until timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    status      integer,
    headers     jsonb,
    body        bytea,
    PRIMARY KEY (scope, key)
);
INSERT INTO idempotency_records
SELECT 'merchant-demo', 'completed-' || n, '\x00', 'completed', 1, now(), now() + interval '1 day',
       201, '{}', '\x7b7d'
  FROM generate_series(1, 1000) AS n;
