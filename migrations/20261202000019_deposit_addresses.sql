-- Deposit addresses (docs/settlement.md, "Deposit addresses"): an intent paid by plain transfers
-- to an address of its own, the CREATE2 address of its forwarder for (merchant, token, intent).
-- Whoever sends pays, so such an intent names no payer; what it received is summed from the
-- confirmed transfers of its token to its address.
ALTER TABLE payment_intents
    ADD COLUMN payment_method  text          NOT NULL DEFAULT 'authorization'
                               CHECK (payment_method IN ('authorization', 'deposit_address')),
    ADD COLUMN deposit_address text,
    ADD COLUMN amount_received numeric(78,0) NOT NULL DEFAULT 0 CHECK (amount_received >= 0),
    -- What a paid intent received beyond its amount.
    ADD COLUMN amount_overpaid numeric(78,0) NOT NULL DEFAULT 0 CHECK (amount_overpaid >= 0),
    ALTER COLUMN payer DROP NOT NULL,
    ADD CONSTRAINT payment_intents_method_fields CHECK (
        (payment_method = 'authorization' AND payer IS NOT NULL AND deposit_address IS NULL)
        OR (payment_method = 'deposit_address' AND payer IS NULL AND deposit_address IS NOT NULL));
-- The follower matches the recipients of a block's transfers against it.
CREATE UNIQUE INDEX payment_intents_deposit_address ON payment_intents (chain, deposit_address)
    WHERE deposit_address IS NOT NULL;

-- The tokens whose transfers the follower reads on each chain: every token a deposit intent was
-- made for. Kept once written, since late payments to an old address are still recorded.
CREATE TABLE deposit_tokens (
    chain text NOT NULL,
    token text NOT NULL,
    PRIMARY KEY (chain, token)
);

-- A transfer to a deposit address, and one that leaves it (its sweep to the merchant).
ALTER TABLE chain_observations DROP CONSTRAINT chain_observations_kind;
ALTER TABLE chain_observations ADD CONSTRAINT chain_observations_kind
    CHECK (kind IN ('authorization_used', 'authorization_canceled',
                    'refund_authorization_used', 'refund_authorization_canceled',
                    'deposit_received', 'deposit_swept'));

-- The relayer deploys a forwarder and flushes it, or flushes a deployed one.
ALTER TABLE chain_submissions DROP CONSTRAINT chain_submissions_kind;
ALTER TABLE chain_submissions ADD CONSTRAINT chain_submissions_kind
    CHECK (kind IN ('intent_payment', 'refund_payment', 'deposit_sweep'));

-- Two entries per deposit: payer to the deposit address when it arrives, the deposit address to
-- the merchant when it is swept.
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_kind_check;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_kind_check
    CHECK (kind IN ('payment', 'refund', 'deposit', 'sweep') AND (kind = 'refund') = (refund_id IS NOT NULL));
