-- Ledger entries of every shape (docs/settlement.md, "Ledger"): an entry has a kind, a payment
-- now, refunds, sweeps and gas as they come, each kind allowed here when its code lands. Its
-- subject is the object of ours it books, by a foreign key of that object's own (an intent for a
-- payment). The zero-sum and append-only rules stay as they are, for every kind. Entries written
-- so far are payments; from now on every writer names the kind.
ALTER TABLE ledger_entries ADD COLUMN kind text NOT NULL DEFAULT 'payment' CHECK (kind IN ('payment'));
ALTER TABLE ledger_entries ALTER COLUMN kind DROP DEFAULT;
CREATE INDEX ledger_entries_by_kind ON ledger_entries (chain, kind);
