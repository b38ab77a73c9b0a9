-- Any token sent to a deposit address is recorded (docs/settlement.md, "Deposit addresses"): the
-- follower reads every contract's transfers to the addresses made lately, found by when they were
-- made.
ALTER TABLE payment_option_addresses ADD COLUMN created_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX payment_option_addresses_recent ON payment_option_addresses (chain, created_at);
CREATE INDEX payment_intents_deposit_address_recent ON payment_intents (chain, created_at)
    WHERE deposit_address IS NOT NULL;
