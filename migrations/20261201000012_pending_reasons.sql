-- A payment that cannot go through says why (docs/settlement.md, "When the token refuses"): the
-- intent's `pending_reason` while it stays `processing` (the payer's balance is short, the token
-- is paused, an account is blacklisted), which becomes its `failure_reason` if it expires so. The
-- relayer tries such a submission again after `not_before`, with backoff, instead of every tick.
ALTER TABLE payment_intents ADD COLUMN pending_reason text;
ALTER TABLE chain_submissions
    ADD COLUMN not_before    timestamptz NOT NULL DEFAULT '-infinity',
    ADD COLUMN held_attempts integer     NOT NULL DEFAULT 0;
