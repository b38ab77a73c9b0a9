-- What a merchant accepts: its payout address on every EVM chain, and the assets (a token on a
-- served chain, for a currency) an order priced in that currency can be paid with, each with the
-- units read from the token when it was set (an order is priced without asking the chain).
-- A merchant may set these before, or without, a display name.
ALTER TABLE merchants
    ALTER COLUMN display_name DROP NOT NULL,
    ADD COLUMN payout_address  text CHECK (payout_address ~ '^0x[0-9a-fA-F]{40}$'),
    ADD COLUMN accepted_assets jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(accepted_assets) = 'array');
