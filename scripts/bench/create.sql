-- An idempotent create at its least: the claim commits on its own, then the intent, its event and
-- the stored answer (~900 bytes, a real answer's size) commit together. Keys and ids are drawn from
-- 10^15 numbers per client: a collision is a one in a million chance even at a million creates per
-- client.
\set id random(1, 1000000000000000)
INSERT INTO idempotency_records (scope, key, fingerprint, state, attempt, lease_until, expires_at)
VALUES ('merchant-demo', :client_id || '-' || :id, '\x00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff',
        'in_flight', 1, now() + interval '30 s', now() + interval '24 h')
ON CONFLICT (scope, key) DO UPDATE SET attempt = idempotency_records.attempt + 1
 WHERE idempotency_records.lease_until < now()
RETURNING attempt;
BEGIN;
INSERT INTO intents (id, merchant, chain, token, payer, payee, amount, state, version, expires_at)
VALUES ('pi_' || :client_id || '-' || :id, 'merchant-demo', 'evm:31337', '0x5FbDB2315678afecb367f032d93F642f64180aa3',
        '0x70997970C51812dc3A010C7d01b50e0d17dc79C8', '0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC',
        100000000, 'created', 1, now() + interval '900 s');
INSERT INTO events (merchant, id, type, subject, subject_version, object)
VALUES ('merchant-demo', 'evt_' || :client_id || '-' || :id, 'payment_intent.created', 'pi_' || :client_id || '-' || :id, 1,
        json_build_object('id', 'pi_' || :client_id || '-' || :id, 'pad', repeat('x', 850)));
UPDATE idempotency_records
   SET state = 'completed', status = 201, headers = '{"content-type":"application/json"}',
       body = convert_to(repeat('x', 900), 'UTF8')
 WHERE scope = 'merchant-demo' AND key = :client_id || '-' || :id AND attempt = 1;
COMMIT;
