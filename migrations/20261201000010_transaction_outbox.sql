-- chain_submissions becomes the outbox of chain transactions (docs/settlement.md, "Relayer"):
-- each row is a call to send (`target`, `calldata`) of a `kind` about a `subject`, unique per
-- chain by its `dedupe_key` (for an intent's payment: token, authorizer and nonce, the facts that
-- make the chain accept it once). `relayer` is the key that claimed it; a sent one stays with the
-- key whose account nonce it used.
ALTER TABLE chain_submissions
    ADD COLUMN id         uuid NOT NULL DEFAULT gen_random_uuid(),
    ADD COLUMN kind       text,
    ADD COLUMN subject    text,
    ADD COLUMN dedupe_key text,
    ADD COLUMN target     text,
    ADD COLUMN calldata   bytea;

-- The calldata of the rows queued before: transferWithAuthorization(from, to, value, 0,
-- validBefore, nonce, v, r, s), ABI-encoded as the relayer encodes it (a test checks the two agree).
CREATE FUNCTION pg_temp.abi_uint(n numeric) RETURNS bytea LANGUAGE plpgsql AS $$
DECLARE
    hex text := '';
BEGIN
    FOR i IN 1..32 LOOP
        hex := lpad(to_hex(mod(n, 256)::int), 2, '0') || hex;
        n := div(n, 256);
    END LOOP;
    RETURN decode(hex, 'hex');
END
$$;
CREATE FUNCTION pg_temp.abi_address(a text) RETURNS bytea LANGUAGE sql AS $$
    SELECT decode(repeat('00', 12) || substr(lower(a), 3), 'hex')
$$;

UPDATE chain_submissions
   SET kind = 'intent_payment',
       subject = intent_id,
       dedupe_key = token || ':' || payer || ':0x' || encode(nonce, 'hex'),
       target = token,
       calldata = '\xe3ee160e'::bytea
           || pg_temp.abi_address(payer) || pg_temp.abi_address(payee)
           || pg_temp.abi_uint(amount) || pg_temp.abi_uint(0) || pg_temp.abi_uint(valid_before)
           || nonce
           || pg_temp.abi_uint(CASE WHEN get_byte(signature, 64) < 27 THEN get_byte(signature, 64) + 27
                                    ELSE get_byte(signature, 64) END)
           || substring(signature FROM 1 FOR 32) || substring(signature FROM 33 FOR 32);

ALTER TABLE chain_submissions
    ALTER COLUMN kind SET NOT NULL,
    ALTER COLUMN subject SET NOT NULL,
    ALTER COLUMN dedupe_key SET NOT NULL,
    ALTER COLUMN target SET NOT NULL,
    ALTER COLUMN calldata SET NOT NULL,
    ADD CONSTRAINT chain_submissions_kind CHECK (kind IN ('intent_payment')),
    DROP CONSTRAINT chain_submissions_pkey,
    ADD PRIMARY KEY (id),
    ADD CONSTRAINT chain_submissions_dedupe UNIQUE (chain_id, dedupe_key),
    DROP COLUMN merchant_id,
    DROP COLUMN intent_id,
    DROP COLUMN token,
    DROP COLUMN payer,
    DROP COLUMN payee,
    DROP COLUMN amount,
    DROP COLUMN valid_before,
    DROP COLUMN nonce,
    DROP COLUMN signature;
CREATE INDEX chain_submissions_subject ON chain_submissions (kind, subject);
-- Queued work not yet claimed by a key, oldest first.
CREATE INDEX chain_submissions_queued ON chain_submissions (chain_id, created_at) WHERE state = 'queued';
