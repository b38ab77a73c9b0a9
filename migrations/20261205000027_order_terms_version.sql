-- The version of a merchant's order terms (payout address, accepted assets), bumped by every
-- change of its settings: each replica makes orders from the terms it read last, and the order's
-- insert checks in the same statement that they are still this version (docs/settlement.md,
-- "Orders and options").
ALTER TABLE merchants ADD COLUMN terms_version bigint NOT NULL DEFAULT 1;

-- The tokens of accepted assets are followed from when they are accepted (an order no longer
-- writes them): those accepted before.
INSERT INTO deposit_tokens (chain, token)
SELECT DISTINCT a->>'chain', a->>'token'
  FROM merchants, jsonb_array_elements(accepted_assets) AS a
ON CONFLICT DO NOTHING;
