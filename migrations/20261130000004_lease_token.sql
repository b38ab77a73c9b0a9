-- A random token chosen by the API for each claim that takes a key (fresh or takeover), so the API
-- can end that attempt's lease even when the claim's answer was lost and it never learnt the
-- attempt number.
ALTER TABLE idempotency_keys ADD COLUMN lease_token bigint;
