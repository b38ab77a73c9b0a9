-- Keys a merchant controls (docs/api.md, "Authentication"): a key can be listed by its prefix
-- (never its secret), revoked, and rotated with an overlap (the old key expires later). Keys made
-- before this have no prefix: they are listed as such, and still work.
ALTER TABLE api_keys
    ADD COLUMN prefix       text CHECK (prefix ~ '^[A-Za-z0-9_]{8,32}$'),
    ADD COLUMN expires_at   timestamptz,
    ADD COLUMN revoked_at   timestamptz,
    ADD COLUMN last_used_at timestamptz;
CREATE UNIQUE INDEX api_keys_prefix ON api_keys (prefix);
