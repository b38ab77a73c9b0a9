-- Money that reached an order another way than the option that pays it (another option's deposit
-- address, on any chain, or an order that left `created` unchosen): booked and swept as every
-- deposit, never counted, and listed on the intent (docs/settlement.md, "Orders and options").
ALTER TABLE payment_intents
    ADD COLUMN duplicate_payments jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(duplicate_payments) = 'array');
