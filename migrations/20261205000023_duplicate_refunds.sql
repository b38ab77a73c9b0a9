-- A refund of an order's duplicate payment: paid back on the duplicate's chain and token, to its
-- sender or a destination the merchant names, never counted against what the order was paid.
ALTER TABLE refunds
    ADD COLUMN duplicate_payment text CHECK (duplicate_payment ~ '^dp_[0-9a-f]{24}$');
