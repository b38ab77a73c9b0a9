-- The floor: one intent inserted and committed, with no idempotency at all.
\set id random(1, 1000000000000000)
INSERT INTO intents (id, merchant, chain, token, payer, payee, amount, state, version, expires_at)
VALUES ('pj_' || :client_id || '-' || :id, 'merchant-demo', 'evm:31337', '0x5FbDB2315678afecb367f032d93F642f64180aa3',
        '0x70997970C51812dc3A010C7d01b50e0d17dc79C8', '0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC',
        100000000, 'created', 1, now() + interval '900 s');
