-- Checkout (docs/checkout.md): a page per intent that its payer opens and pays from.
-- The client secret lets its holder read the intent's public fields and confirm it, nothing else;
-- the checkout URL carries it in the fragment, which browsers never send to a server. Intents
-- created before this migration get a secret but no URL (the public base URL is a setting the
-- database does not know); their page is `/checkout/<id>#<client_secret>` on any replica.
ALTER TABLE payment_intents ADD COLUMN client_secret text, ADD COLUMN checkout_url text;
UPDATE payment_intents SET client_secret = id || '_secret_' || replace(gen_random_uuid()::text, '-', '');
ALTER TABLE payment_intents ALTER COLUMN client_secret SET NOT NULL;

-- What the page shows of the token: its symbol and decimals (ERC-20's optional metadata), read
-- with its domain; NULL when the token does not answer them (the page then shows base units).
ALTER TABLE chain_tokens ADD COLUMN symbol text, ADD COLUMN decimals smallint
    CHECK (decimals BETWEEN 0 AND 77);

-- A merchant's own settings: the name its payers see on the checkout page.
CREATE TABLE merchants (
    id           text        PRIMARY KEY,
    display_name text        NOT NULL CHECK (char_length(display_name) BETWEEN 1 AND 100),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
