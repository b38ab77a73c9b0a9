-- The largest values a create writes (its stored answer, its event, an order's options) are
-- compressed with lz4 rather than pglz when a row outgrows a page's quarter: an order's are, and
-- pglz was most of what PostgreSQL spent on them beyond a fixed intent (docs/bench/history.md).
-- Only values written from now on; older ones stay as they are and read the same.
ALTER TABLE idempotency_keys ALTER COLUMN response_body SET COMPRESSION lz4;
ALTER TABLE events ALTER COLUMN object SET COMPRESSION lz4;
ALTER TABLE payment_intents ALTER COLUMN payment_options SET COMPRESSION lz4;
ALTER TABLE payment_intents ALTER COLUMN duplicate_payments SET COMPRESSION lz4;
ALTER TABLE payment_intents ALTER COLUMN metadata SET COMPRESSION lz4;
