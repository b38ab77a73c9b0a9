-- The double-entry ledger (docs/settlement.md, "Ledger"): one entry per confirmed payment of an
-- intent, written in the transaction that settles it; its postings move the amount from the
-- payer's account to the merchant's and sum to zero per chain and token. Entries are immutable.
CREATE TABLE ledger_entries (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    merchant_id      text        NOT NULL,
    intent_id        text        NOT NULL,
    chain            text        NOT NULL,
    transaction_hash text        NOT NULL,
    log_index        integer     NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    -- One entry per payment seen on chain.
    UNIQUE (chain, transaction_hash, log_index),
    FOREIGN KEY (merchant_id, intent_id) REFERENCES payment_intents (merchant_id, id)
);

CREATE TABLE ledger_postings (
    entry_id bigint        NOT NULL REFERENCES ledger_entries (id),
    -- `payer:<address>` or `merchant:<merchant id>`.
    account  text          NOT NULL,
    chain    text          NOT NULL,
    token    text          NOT NULL,
    -- Signed: what the account received (positive) or gave (negative), in token base units.
    amount   numeric(79,0) NOT NULL CHECK (amount <> 0),
    PRIMARY KEY (entry_id, account, chain, token)
);
CREATE INDEX ledger_postings_balances ON ledger_postings (account, chain, token);

-- Every entry balances. Checked at commit (a deferred constraint trigger), once all of an entry's
-- postings are written, so no code path can leave a one-sided entry behind.
CREATE FUNCTION ledger_entry_balances() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM ledger_postings WHERE entry_id = NEW.entry_id
                GROUP BY chain, token HAVING sum(amount) <> 0) THEN
        RAISE EXCEPTION 'ledger entry % does not sum to zero per chain and token', NEW.entry_id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER ledger_postings_balance AFTER INSERT ON ledger_postings
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ledger_entry_balances();

CREATE FUNCTION ledger_is_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the ledger is append-only: % on % is refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'check_violation';
END $$;
CREATE TRIGGER ledger_entries_append_only BEFORE UPDATE OR DELETE ON ledger_entries
    FOR EACH ROW EXECUTE FUNCTION ledger_is_append_only();
CREATE TRIGGER ledger_postings_append_only BEFORE UPDATE OR DELETE ON ledger_postings
    FOR EACH ROW EXECUTE FUNCTION ledger_is_append_only();
