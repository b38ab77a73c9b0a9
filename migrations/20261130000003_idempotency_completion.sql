-- The completion's compare-and-set (SPEC §5.4) as a function, so that the layer can send it and the
-- COMMIT behind it as one message: one round trip instead of two. When the attempt that claimed the
-- key no longer holds it (another attempt took it over), the function raises; PostgreSQL then skips
-- the COMMIT in the same message and the handler's writes roll back with the transaction.
CREATE FUNCTION idempotency_complete(
    p_scope   text,
    p_key     text,
    p_attempt integer,
    p_status  smallint,
    p_headers jsonb,
    p_body    bytea
) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- The parameters take the collation of the caller's arguments (text built by convert_from has
    -- collation "C"), and a comparison in another collation than the primary key's cannot use it:
    -- that would be a sequential scan per completion. So the keys are compared in the columns' own.
    UPDATE idempotency_keys
       SET state = 'completed', completed_at = now(),
           response_status = p_status, response_headers = p_headers, response_body = p_body
     WHERE scope = p_scope COLLATE "default" AND key = p_key COLLATE "default"
       AND attempt = p_attempt AND state = 'in_flight';
    IF NOT FOUND THEN
        -- SQLSTATE PA409 is ours (class PA is unused by PostgreSQL): the layer answers 409
        -- idempotency_key_lease_lost when it sees it.
        RAISE EXCEPTION 'attempt % of this idempotency key was taken over', p_attempt
              USING ERRCODE = 'PA409';
    END IF;
END
$$;
