-- The dashboard (docs/dashboard.md): the people behind a merchant, their sessions, and the audit
-- log of every change made from the dashboard or the CLI.

-- A person who signs in to one merchant's dashboard. The email is stored lower-cased and is the
-- sign-in name, so it is unique across merchants. No password until the person sets one through
-- their one-time link.
CREATE TABLE dashboard_users (
    id            text        PRIMARY KEY CHECK (id ~ '^usr_[0-9a-f]{24}$'),
    merchant_id   text        NOT NULL CHECK (merchant_id ~ '^[A-Za-z0-9_-]{1,64}$'),
    email         text        NOT NULL UNIQUE
                  CHECK (email = lower(email) AND char_length(email) BETWEEN 3 AND 254),
    role          text        NOT NULL CHECK (role IN ('owner', 'developer', 'viewer')),
    -- argon2id, in the PHC string format.
    password_hash text,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX dashboard_users_of_merchant ON dashboard_users (merchant_id, created_at);

-- One-time links to set a password: only the token's hash is kept; a link works once, for 24 h.
CREATE TABLE dashboard_password_links (
    token_sha256 bytea       PRIMARY KEY CHECK (octet_length(token_sha256) = 32),
    user_id      text        NOT NULL REFERENCES dashboard_users (id) ON DELETE CASCADE,
    expires_at   timestamptz NOT NULL,
    used_at      timestamptz
);
CREATE INDEX dashboard_password_links_of_user ON dashboard_password_links (user_id);

-- Signed-in sessions, in the database so every replica knows them and a sign-out ends one
-- everywhere. The cookie holds the id; only its hash is kept. The CSRF token is the session's.
CREATE TABLE dashboard_sessions (
    id_sha256    bytea       PRIMARY KEY CHECK (octet_length(id_sha256) = 32),
    user_id      text        NOT NULL REFERENCES dashboard_users (id) ON DELETE CASCADE,
    csrf_token   text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX dashboard_sessions_of_user ON dashboard_sessions (user_id);

-- Failed sign-ins, by account (`email:<email>`) and by address (`address:<ip>`): what slows and
-- then refuses the next attempts. Rows older than the window are deleted as they are read.
CREATE TABLE dashboard_sign_in_failures (
    subject text        NOT NULL,
    at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX dashboard_sign_in_failures_recent ON dashboard_sign_in_failures (subject, at);

-- Every change made from the dashboard or the CLI: who (`user:<email>` or `cli`), what, to what,
-- when, from which address. Never a secret. Rows cannot be changed, and are deleted only once a
-- year old.
CREATE TABLE audit_log (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    merchant_id text        NOT NULL,
    actor       text        NOT NULL,
    action      text        NOT NULL,
    target      text,
    address     text,
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_log_listing ON audit_log (merchant_id, id DESC);

CREATE FUNCTION audit_log_is_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND OLD.at < now() - interval '1 year' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'audit_log rows are kept for a year and never changed';
END $$;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_is_append_only();

-- The dashboard's payments search: by payer (stored checksummed, as the search is), and by
-- transaction hash.
CREATE INDEX payment_intents_by_payer ON payment_intents (merchant_id, payer, created_at DESC);
CREATE INDEX payment_intents_by_transaction
    ON payment_intents (merchant_id, (settlement ->> 'transaction_hash'))
    WHERE settlement IS NOT NULL;
CREATE INDEX payment_intents_by_deposit_address ON payment_intents (merchant_id, deposit_address)
    WHERE deposit_address IS NOT NULL;
-- A payment's page shows its ledger entries.
CREATE INDEX ledger_entries_of_intent ON ledger_entries (merchant_id, intent_id);
-- The dashboard's export of ledger entries by date.
CREATE INDEX ledger_entries_by_merchant ON ledger_entries (merchant_id, created_at, id);

-- A dashboard form that must act once (a refund): its one-time id, claimed in the transaction that
-- acts, and what it made, so a second submit of the same form shows the first one's result.
CREATE TABLE dashboard_form_uses (
    form_id text        PRIMARY KEY CHECK (form_id ~ '^[0-9a-f]{32}$'),
    user_id text        NOT NULL REFERENCES dashboard_users (id) ON DELETE CASCADE,
    made    text        NOT NULL,
    at      timestamptz NOT NULL DEFAULT now()
);
