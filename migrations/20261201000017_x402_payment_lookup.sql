-- The lookup of an x402 payment by its key (GET /x402/payments/...) filters on our chain name, not
-- the CAIP-2 network: its index must name the column it filters on.
DROP INDEX x402_payments_lookup;
CREATE INDEX x402_payments_lookup ON x402_payments (merchant_id, chain, authorizer, nonce);
