-- Atomic phases of a keyed request (docs/design.md, "Atomic phases"): a handler that must commit
-- before it waits (an x402 settle commits its payment, then waits for the chain) records how far it
-- got in the same COMMIT, and an attempt that takes the key over resumes there instead of running
-- again from the start.
ALTER TABLE idempotency_keys ADD COLUMN recovery_point text;

-- The checkpoint's compare-and-set, sent with the COMMIT of the phase as one message, as
-- idempotency_complete is: when the attempt no longer holds the key it raises PA409, PostgreSQL skips
-- the COMMIT, and the phase's writes roll back.
CREATE FUNCTION idempotency_checkpoint(
    p_scope   text,
    p_key     text,
    p_attempt integer,
    p_point   text
) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE idempotency_keys
       SET recovery_point = p_point
     WHERE scope = p_scope COLLATE "default" AND key = p_key COLLATE "default"
       AND attempt = p_attempt AND state = 'in_flight';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'attempt % of this idempotency key was taken over', p_attempt
              USING ERRCODE = 'PA409';
    END IF;
END
$$;

-- An intent's nonce is unique per authorizer and token, as the token sees it: an x402 payer chooses
-- its own nonce, and another payer choosing the same bytes must not collide with it.
DROP INDEX payment_intents_chain_nonce;
CREATE UNIQUE INDEX payment_intents_chain_nonce ON payment_intents (chain_nonce, chain, token, payer);

-- One row per x402 payment (docs/x402.md, "Settle"): the token's (chain, token, authorizer, nonce),
-- which the client chose, is the key. The payment is an intent of the merchant that settled it.
CREATE TABLE x402_payments (
    chain            text        NOT NULL,
    token            text        NOT NULL,
    authorizer       text        NOT NULL,
    nonce            bytea       NOT NULL CHECK (octet_length(nonce) = 32),
    merchant_id      text        NOT NULL,
    intent_id        text        NOT NULL,
    -- CAIP-2, as the client named it.
    network          text        NOT NULL,
    -- What the payment says (authorization, signature, asset): the same nonce with another payload
    -- is another payment, and refused.
    fingerprint      bytea       NOT NULL CHECK (octet_length(fingerprint) = 32),
    created_at       timestamptz NOT NULL DEFAULT now(),
    -- The one settle answered `success: true`, once one was: when, with which transaction, and the
    -- Idempotency-Key it carried (scope and key), if any, so that only its retries may say it again.
    succeeded_at     timestamptz,
    success_tx       text,
    success_key      text,
    PRIMARY KEY (chain, token, authorizer, nonce),
    FOREIGN KEY (merchant_id, intent_id) REFERENCES payment_intents (merchant_id, id)
        DEFERRABLE INITIALLY DEFERRED,
    CHECK ((succeeded_at IS NULL) = (success_tx IS NULL))
);

CREATE INDEX x402_payments_lookup ON x402_payments (merchant_id, network, authorizer, nonce);
