-- Settlement on chain (docs/settlement.md): the intent's nonce, what was paid, the tokens read
-- from chains, the relayer's queue and lease, and the listener's cursor, blocks and observations.

-- The intent's key on chain: keccak256("payments-api:" || id), the EIP-3009 nonce of its
-- authorization. Unique, so an observed nonce names one intent.
ALTER TABLE payment_intents
    ADD COLUMN chain_nonce    bytea CHECK (octet_length(chain_nonce) = 32),
    ADD COLUMN failure_reason text,
    -- {"transaction_hash", "block_number", "block_timestamp"} once a confirmed block paid it.
    ADD COLUMN settlement     jsonb;
CREATE UNIQUE INDEX payment_intents_chain_nonce ON payment_intents (chain_nonce);

-- A token as read from its chain: its EIP-712 domain (checked against DOMAIN_SEPARATOR), or the
-- fact that it does not implement EIP-3009. Read once, so an authorization needs no chain later.
CREATE TABLE chain_tokens (
    chain_id         bigint      NOT NULL,
    address          text        NOT NULL,
    supports_eip3009 boolean     NOT NULL,
    name             text,
    version          text,
    checked_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (chain_id, address)
);

-- A payer's signed authorization, queued by confirm in the intent's own transaction, and what the
-- relayer did with it. `done` says why it stopped: the receipt is confirmed away by the listener,
-- or the chain refused it (used, expired).
CREATE TABLE chain_submissions (
    merchant_id              text          NOT NULL,
    intent_id                text          NOT NULL,
    chain_id                 bigint        NOT NULL,
    token                    text          NOT NULL,
    payer                    text          NOT NULL,
    payee                    text          NOT NULL,
    amount                   numeric(78,0) NOT NULL,
    valid_before             bigint        NOT NULL,
    nonce                    bytea         NOT NULL,
    signature                bytea         NOT NULL CHECK (octet_length(signature) = 65),
    state                    text          NOT NULL DEFAULT 'queued' CHECK (state IN ('queued', 'sent', 'done')),
    outcome                  text,
    relayer                  text,
    tx_nonce                 bigint,
    tx_hashes                text[]        NOT NULL DEFAULT '{}',
    max_fee_per_gas          numeric(78,0),
    max_priority_fee_per_gas numeric(78,0),
    sent_at_block            bigint,
    attempts                 integer       NOT NULL DEFAULT 0,
    last_error               text,
    created_at               timestamptz   NOT NULL DEFAULT now(),
    updated_at               timestamptz   NOT NULL DEFAULT now(),
    PRIMARY KEY (merchant_id, intent_id),
    FOREIGN KEY (merchant_id, intent_id) REFERENCES payment_intents (merchant_id, id)
);
CREATE INDEX chain_submissions_open ON chain_submissions (chain_id, created_at) WHERE state <> 'done';

-- One relayer per (chain, key) at a time across replicas: whoever holds the unexpired lease.
CREATE TABLE relayer_leases (
    chain_id   bigint      NOT NULL,
    relayer    text        NOT NULL,
    holder     text        NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (chain_id, relayer)
);

-- How far the listener followed each chain. `halted` says why it stopped (a chain reset under it).
CREATE TABLE chain_cursors (
    chain_id     bigint      PRIMARY KEY,
    block_number bigint      NOT NULL,
    block_hash   text        NOT NULL,
    halted       text,
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- The blocks the listener followed, kept while a reorg could still replace them: a new block's
-- parent hash is checked against the stored one.
CREATE TABLE chain_blocks (
    chain_id    bigint NOT NULL,
    number      bigint NOT NULL,
    hash        text   NOT NULL,
    parent_hash text   NOT NULL,
    timestamp   bigint NOT NULL,
    PRIMARY KEY (chain_id, number)
);

-- Each use of an intent's nonce seen on chain, once (unique by chain, transaction, log index),
-- with what the same transaction's Transfer moved. `applied_at` is set when a confirmed one moved
-- its intent; until then a reorg deletes it with its block.
CREATE TABLE chain_observations (
    chain_id         bigint        NOT NULL,
    transaction_hash text          NOT NULL,
    log_index        integer       NOT NULL,
    block_number     bigint        NOT NULL,
    block_hash       text          NOT NULL,
    block_timestamp  bigint        NOT NULL,
    merchant_id      text          NOT NULL,
    intent_id        text          NOT NULL,
    token            text          NOT NULL,
    transfer_from    text,
    transfer_to      text,
    transfer_value   numeric(78,0),
    pays_intent      boolean       NOT NULL,
    applied_at       timestamptz,
    PRIMARY KEY (chain_id, transaction_hash, log_index),
    FOREIGN KEY (merchant_id, intent_id) REFERENCES payment_intents (merchant_id, id)
);
CREATE INDEX chain_observations_pending ON chain_observations (chain_id, block_number) WHERE applied_at IS NULL;
CREATE INDEX chain_observations_intent ON chain_observations (merchant_id, intent_id);
