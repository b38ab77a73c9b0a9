-- A duplicate payment in a token without EIP-3009 is refunded by a plain transfer the merchant
-- sends from its address (docs/refunds.md, "Refunds by transfer"): nothing to sign, and the refund
-- watch matches the transfer (token, from, to, amount) to the oldest open refund it pays.
ALTER TABLE refunds
    ADD COLUMN payment_method text NOT NULL DEFAULT 'authorization'
        CHECK (payment_method IN ('authorization', 'transfer')),
    ADD CONSTRAINT refunds_transfer_of_duplicate
        CHECK (payment_method = 'authorization' OR duplicate_payment IS NOT NULL);
CREATE INDEX refunds_open_transfers ON refunds (chain, token, payee, payer, amount, created_at)
    WHERE payment_method = 'transfer' AND state = 'created';

ALTER TABLE chain_observations DROP CONSTRAINT chain_observations_kind;
ALTER TABLE chain_observations ADD CONSTRAINT chain_observations_kind
    CHECK (kind IN ('authorization_used', 'authorization_canceled',
                    'refund_authorization_used', 'refund_authorization_canceled',
                    'refund_transfer_seen', 'deposit_received', 'deposit_swept'));
