-- A replay at its least: one read of a completed record.
\set n random(1, 1000)
SELECT state, attempt, fingerprint, status, headers, body
  FROM idempotency_records WHERE scope = 'merchant-demo' AND key = 'completed-' || :n;
