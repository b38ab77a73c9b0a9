-- The tables the reference needs, each with only the columns any design stores: an intent, an
-- idempotency record, and the intent's event, which every change of an intent writes in the same
-- transaction (webhooks read it), with the indexes its listing and its retention need. 1000
-- completed keys, each with an answer of a real answer's size (~900 bytes), are there for the
-- replay workload to read.
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
CREATE TABLE events (
    merchant        text NOT NULL,
    id              text NOT NULL,
    type            text NOT NULL,
    subject         text NOT NULL,
    subject_version integer NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    object          json NOT NULL,
    PRIMARY KEY (merchant, id),
    UNIQUE (merchant, subject, subject_version)
);
CREATE INDEX events_listing ON events (merchant, created_at DESC, id DESC);
CREATE INDEX events_expiring ON events USING brin (created_at);
INSERT INTO idempotency_records
SELECT 'merchant-demo', 'completed-' || n, '\x00', 'completed', 1, now(), now() + interval '1 day',
       201, '{}', convert_to(repeat('x', 900), 'UTF8')
  FROM generate_series(1, 1000) AS n;
