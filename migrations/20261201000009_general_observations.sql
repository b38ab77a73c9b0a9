-- Observations become general (docs/settlement.md, "Follower and watches"): what a watch saw in
-- a log, as its kind, the subject it concerns (for an intent's payment: the intent's id, unique
-- across merchants as its chain nonce is) and a payload only that watch reads. Still unique by
-- (chain, transaction, log index); `applied_at` still marks the confirmed ones that took effect.
ALTER TABLE chain_observations
    ADD COLUMN kind    text,
    ADD COLUMN subject text,
    ADD COLUMN payload jsonb;

UPDATE chain_observations
   SET kind = 'authorization_used',
       subject = intent_id,
       payload = jsonb_build_object(
           'merchant_id', merchant_id,
           'intent_id', intent_id,
           'token', token,
           'transfer', CASE WHEN transfer_from IS NULL THEN NULL
                            ELSE jsonb_build_object('from', transfer_from, 'to', transfer_to,
                                                    'value', transfer_value::text) END,
           'pays_intent', pays_intent);

ALTER TABLE chain_observations
    ALTER COLUMN kind SET NOT NULL,
    ALTER COLUMN subject SET NOT NULL,
    ALTER COLUMN payload SET NOT NULL,
    ADD CONSTRAINT chain_observations_kind
        CHECK (kind IN ('authorization_used', 'authorization_canceled'));

DROP INDEX chain_observations_intent;
ALTER TABLE chain_observations
    DROP COLUMN merchant_id,
    DROP COLUMN intent_id,
    DROP COLUMN token,
    DROP COLUMN transfer_from,
    DROP COLUMN transfer_to,
    DROP COLUMN transfer_value,
    DROP COLUMN pays_intent;
CREATE INDEX chain_observations_subject ON chain_observations (kind, subject);
