-- A submission may have to wait for another: an undeployed wallet's deployment (ERC-6492) before
-- the payment it signed. No relayer claims it until that one is done.
ALTER TABLE chain_submissions ADD COLUMN after_id uuid REFERENCES chain_submissions (id);

ALTER TABLE chain_submissions DROP CONSTRAINT chain_submissions_kind;
ALTER TABLE chain_submissions ADD CONSTRAINT chain_submissions_kind
    CHECK (kind IN ('intent_payment', 'refund_payment', 'deposit_sweep', 'wallet_deployment'));
