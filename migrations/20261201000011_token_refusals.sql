-- What was read of a token is not trusted forever (docs/settlement.md, "The token's domain"): a
-- refusal keeps the reason it was refused for, so every later answer gives the same detail, and
-- `checked_at` says when it is read again. A refusal stored without its reason is read again at
-- once.
ALTER TABLE chain_tokens ADD COLUMN refusal text;
UPDATE chain_tokens SET checked_at = '-infinity' WHERE NOT supports_eip3009;
