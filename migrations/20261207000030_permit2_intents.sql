-- Intents paid by Permit2 (docs/settlement.md, "Permit2"): as with an EIP-3009 authorization, the
-- payer may be left open at creation and named by the confirm; an x402 settle names it at once.
ALTER TABLE payment_intents DROP CONSTRAINT payment_intents_method_fields;
ALTER TABLE payment_intents ADD CONSTRAINT payment_intents_method_fields CHECK (
    (payment_method IS NULL AND payer IS NULL AND deposit_address IS NULL)
    OR (payment_method IN ('authorization', 'permit2') AND deposit_address IS NULL
        AND (payer IS NOT NULL OR state IN ('created', 'canceled')))
    OR (payment_method = 'deposit_address' AND payer IS NULL AND deposit_address IS NOT NULL));

-- An intent paid by Permit2 in a token without EIP-3009 is refunded by the merchant's own
-- transfer, as such a duplicate payment is (docs/refunds.md, "Refunds by transfer").
ALTER TABLE refunds DROP CONSTRAINT refunds_transfer_of_duplicate;
