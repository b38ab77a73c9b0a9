-- x402 payments by Permit2 (docs/x402.md, "Permit2"): the intent an x402 settle makes for one is
-- paid by a Permit2 signature through x402's exact proxy. Its payer is the permit's owner, its
-- nonce the permit's.
ALTER TABLE payment_intents DROP CONSTRAINT payment_intents_payment_method_check;
ALTER TABLE payment_intents ADD CONSTRAINT payment_intents_payment_method_check
    CHECK (payment_method IN ('authorization', 'deposit_address', 'permit2'));
ALTER TABLE payment_intents DROP CONSTRAINT payment_intents_method_fields;
ALTER TABLE payment_intents ADD CONSTRAINT payment_intents_method_fields CHECK (
    (payment_method IS NULL AND payer IS NULL AND deposit_address IS NULL)
    OR (payment_method = 'authorization' AND deposit_address IS NULL
        AND (payer IS NOT NULL OR state IN ('created', 'canceled')))
    OR (payment_method = 'deposit_address' AND payer IS NULL AND deposit_address IS NOT NULL)
    OR (payment_method = 'permit2' AND payer IS NOT NULL AND deposit_address IS NULL));

-- An x402 payment's key is what spends its nonce once: the token for EIP-3009, Permit2 (whose
-- nonces are the owner's across every token) for a permit. `asset` is the token it moves.
ALTER TABLE x402_payments ADD COLUMN asset text;
UPDATE x402_payments SET asset = token;
ALTER TABLE x402_payments ALTER COLUMN asset SET NOT NULL;

-- A permit seen settled through x402's exact proxy (ways_to_pay/x402/watch.rs).
ALTER TABLE chain_observations DROP CONSTRAINT chain_observations_kind;
ALTER TABLE chain_observations ADD CONSTRAINT chain_observations_kind
    CHECK (kind IN ('authorization_used', 'authorization_canceled',
                    'refund_authorization_used', 'refund_authorization_canceled',
                    'refund_transfer_seen', 'deposit_received', 'deposit_swept',
                    'permit2_used'));

-- A submission only one key may send (docs/x402.md, "upto"): x402's upto proxy settles only for
-- the facilitator its payer named. NULL: any relayer key of the chain.
ALTER TABLE chain_submissions ADD COLUMN sender text;

-- EIP-3009 nonces are a token's, Permit2's the owner's: the same bytes in both are two nonces.
DROP INDEX payment_intents_chain_nonce;
CREATE UNIQUE INDEX payment_intents_chain_nonce
    ON payment_intents (chain_nonce, chain, token, payer, payment_method);
