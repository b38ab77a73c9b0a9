-- What was read of a token is not trusted forever (docs/settlement.md, "The token's domain"): a
-- refusal keeps the reason it was refused for, so every later answer gives the same detail, and
-- `checked_at` says when it is read again. `contract_signatures` says whether the token has the
-- `bytes signature` form smart-contract wallets pay through. Every token stored before is read
-- again at once.
ALTER TABLE chain_tokens
    ADD COLUMN refusal text,
    ADD COLUMN contract_signatures boolean NOT NULL DEFAULT false;
UPDATE chain_tokens SET checked_at = '-infinity';
