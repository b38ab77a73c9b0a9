-- Orders (docs/settlement.md, "Orders and options"): an intent priced in a currency, with the
-- payment options (chain, token, amount in its base units, way to pay) fixed when it was made.
-- Until an option is chosen (a payer's confirm, or the first deposit at an option's address)
-- the intent names no chain, token, base-unit amount or way to pay; choosing writes them, once.
ALTER TABLE payment_intents
    ALTER COLUMN chain DROP NOT NULL,
    ALTER COLUMN token DROP NOT NULL,
    ALTER COLUMN amount DROP NOT NULL,
    ALTER COLUMN payment_method DROP NOT NULL,
    ALTER COLUMN payment_method DROP DEFAULT,
    ADD COLUMN currency        text  CHECK (currency IN ('usd', 'eur')),
    -- The price as the merchant gave it: at most two fraction digits.
    ADD COLUMN price           text  CHECK (price ~ '^(0|[1-9][0-9]{0,12})(\.[0-9]{1,2})?$'),
    ADD COLUMN payment_options jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(payment_options) = 'array'),
    ADD COLUMN selected_option text,
    ADD CONSTRAINT payment_intents_order CHECK ((currency IS NULL) = (price IS NULL)),
    -- An intent priced in token units names its payment from the start; an order once chosen.
    ADD CONSTRAINT payment_intents_chosen CHECK (
        CASE WHEN currency IS NULL THEN selected_option IS NULL AND chain IS NOT NULL
             ELSE (selected_option IS NULL) = (chain IS NULL) END
        AND (chain IS NULL) = (token IS NULL)
        AND (chain IS NULL) = (amount IS NULL)
        AND (chain IS NULL) = (payment_method IS NULL));

-- The payer of an authorization may be named only when it pays (its confirm): until then the
-- intent waits for whoever signs.
ALTER TABLE payment_intents DROP CONSTRAINT payment_intents_method_fields;
ALTER TABLE payment_intents ADD CONSTRAINT payment_intents_method_fields CHECK (
    (payment_method IS NULL AND payer IS NULL AND deposit_address IS NULL)
    OR (payment_method = 'authorization' AND deposit_address IS NULL
        AND (payer IS NOT NULL OR state IN ('created', 'canceled')))
    OR (payment_method = 'deposit_address' AND payer IS NULL AND deposit_address IS NOT NULL));

-- The deposit addresses of orders' options, chosen or not: the deposit watch matches a block's
-- transfers against them as against deposit intents' own.
CREATE TABLE payment_option_addresses (
    chain           text NOT NULL,
    deposit_address text NOT NULL,
    merchant_id     text NOT NULL,
    intent_id       text NOT NULL,
    option_id       text NOT NULL CHECK (option_id ~ '^po_[0-9a-f]{24}$'),
    token           text NOT NULL,
    payee           text NOT NULL,
    PRIMARY KEY (chain, deposit_address),
    FOREIGN KEY (merchant_id, intent_id) REFERENCES payment_intents (merchant_id, id)
);
CREATE INDEX payment_option_addresses_intent ON payment_option_addresses (intent_id);
