//! The refund watch: what the follower looks for on behalf of refunds (`docs/refunds.md`). The
//! same logs as the payment watch (`ways_to_pay::authorization::watch`): a use of a refund's nonce by the
//! merchant's address settles the refund if the same transaction's transfer paid the payer back,
//! and fails it otherwise; a cancellation fails it; a confirmed block's time expires it. A refund
//! by transfer is settled by the merchant's own `Transfer` of its amount to its payer, whatever
//! contract emits it, if it is the refund's token.

use alloy::{rpc::types::Log, sol_types::SolEvent};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;

use super::{
    repo::{self, TransitionError},
    state::Action,
};
use crate::{
    config::ChainEndpoint,
    intents::repo::Settlement,
    ledger,
    rails::{
        eip3009::{Transfer, nonce_interest, nonce_log, transfer_after},
        evm::token::Eip3009,
        follower::{
            ConfirmedBlock, FollowError, Interest, Observation, ObservationKind, Observed, Outcome,
            SentTo, Watch, WatchError,
        },
        rpc::Node,
    },
    telemetry::metrics as names,
};

/// What the refund watch records of a refund's nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefundNonceKind {
    /// Used by the merchant's address.
    Used,
    /// Canceled by the merchant's address: the refund can never be paid with it.
    Canceled,
}

impl ObservationKind for RefundNonceKind {
    const ALL: &'static [Self] = &[Self::Used, Self::Canceled];

    fn as_str(self) -> &'static str {
        match self {
            Self::Used => "refund_authorization_used",
            Self::Canceled => "refund_authorization_canceled",
        }
    }
}

/// What the refund watch records of a plain transfer that pays a refund by transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefundTransferKind {
    Seen,
}

impl ObservationKind for RefundTransferKind {
    const ALL: &'static [Self] = &[Self::Seen];

    fn as_str(self) -> &'static str {
        match self {
            Self::Seen => "refund_transfer_seen",
        }
    }
}

/// What a confirmed use or cancellation of a refund's nonce did to the refund.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefundOutcome {
    Succeeded,
    NonceUsedOtherwise,
    Canceled,
    /// The refund had already moved or is final.
    Ignored,
}

impl Outcome for RefundOutcome {
    fn label(&self) -> &'static str {
        match self {
            Self::Succeeded => "refund_succeeded",
            Self::NonceUsedOtherwise => "refund_nonce_used_otherwise",
            Self::Canceled => "refund_canceled",
            Self::Ignored => "ignored",
        }
    }
}

/// What an observation of a refund's plain transfer holds; its subject is the refund's id.
#[derive(Debug, Serialize, Deserialize)]
struct TransferSeen {
    merchant_id: String,
    refund_id: String,
    intent_id: String,
    token: String,
    payer: String,
    value: String,
}

/// Refunds failed per confirmed block at most; the rest wait for the next one.
const EXPIRY_BATCH: i64 = 500;

/// What an observation of a refund's nonce holds; its subject is the refund's id.
#[derive(Debug, Serialize, Deserialize)]
struct NonceUse {
    merchant_id: String,
    refund_id: String,
    intent_id: String,
    token: String,
    payer: String,
    transfer: Option<Transfer>,
    /// Whether that transfer is the refund: from the merchant's address to the payer, its amount.
    pays_refund: bool,
}

#[derive(Debug, Clone, Copy)]
pub struct RefundWatch;

impl Watch for RefundWatch {
    type Outcome = RefundOutcome;

    fn applies(&self, kind: &str) -> bool {
        RefundNonceKind::parse(kind).is_some() || RefundTransferKind::parse(kind).is_some()
    }

    async fn interest(
        &self,
        conn: &mut PgConnection,
        chain: &ChainEndpoint,
    ) -> Result<Interest, sqlx::Error> {
        let mut interest = nonce_interest(conn, chain).await?;
        let recipients = repo::transfer_recipients_on(conn, &chain.name).await?;
        if !recipients.is_empty() {
            interest.sent_to.push(SentTo {
                event: Eip3009::Transfer::SIGNATURE_HASH,
                recipients: recipients.iter().filter_map(|r| r.parse().ok()).collect(),
            });
        }
        Ok(interest)
    }

    /// Each log as [`Watch::observe`] reads it, except that a refund by transfer is paid by one
    /// transfer only: two alike in one range pay two refunds, or one and nothing.
    async fn observe_all(
        &self,
        conn: &mut PgConnection,
        chain: &ChainEndpoint,
        node: &Node,
        logs: &[Log],
    ) -> Result<Vec<Option<Observed>>, FollowError> {
        let mut taken = Vec::new();
        let mut observed = Vec::with_capacity(logs.len());
        for log in logs {
            let seen = match transfer_seen(conn, chain, log, &taken).await? {
                Some(seen) => {
                    taken.push(seen.refund_id.clone());
                    Some(Observed::new(
                        RefundTransferKind::Seen,
                        seen.refund_id.clone(),
                        &seen,
                    )?)
                }
                None => self.observe(conn, chain, node, log).await?,
            };
            observed.push(seen);
        }
        Ok(observed)
    }

    async fn observe(
        &self,
        conn: &mut PgConnection,
        chain: &ChainEndpoint,
        node: &Node,
        log: &Log,
    ) -> Result<Option<Observed>, FollowError> {
        let Some((kind, authorizer, nonce)) =
            nonce_log(log, RefundNonceKind::Used, RefundNonceKind::Canceled)
        else {
            return Ok(None);
        };
        let token = log.address().to_checksum(None);
        let refund = repo::by_chain_nonce(conn, &chain.name, &token, nonce.as_slice()).await?;
        // A nonce belongs to its authorizer: the same bytes used by another address are not ours.
        let Some(refund) = refund.filter(|r| r.payee == authorizer.to_checksum(None)) else {
            return Ok(None);
        };
        let transfer = match kind {
            RefundNonceKind::Used => transfer_after(node, log).await?,
            RefundNonceKind::Canceled => None,
        };
        let pays_refund = transfer
            .as_ref()
            .is_some_and(|t| t.moves(&refund.payee, &refund.payer, &refund.amount));
        let payload = NonceUse {
            merchant_id: refund.merchant_id,
            refund_id: refund.id.clone(),
            intent_id: refund.intent_id,
            token,
            payer: refund.payer,
            transfer,
            pays_refund,
        };
        Observed::new(kind, refund.id, &payload).map(Some)
    }

    /// `succeeded` if the transfer paid the payer back, `failed` otherwise; a refund that moved
    /// money is booked whatever the refund could still do.
    async fn apply(
        &self,
        tx: &mut PgConnection,
        chain: &ChainEndpoint,
        o: &Observation,
    ) -> Result<RefundOutcome, WatchError> {
        if RefundTransferKind::parse(&o.kind).is_some() {
            return apply_transfer(tx, chain, o).await;
        }
        let (kind, used): (RefundNonceKind, NonceUse) = o.read()?;
        let (action, outcome) = match (kind, used.pays_refund) {
            (RefundNonceKind::Canceled, _) => {
                (Action::CancelAuthorization, RefundOutcome::Canceled)
            }
            (RefundNonceKind::Used, true) => (Action::Settle, RefundOutcome::Succeeded),
            (RefundNonceKind::Used, false) => {
                (Action::BurnNonce, RefundOutcome::NonceUsedOtherwise)
            }
        };
        let settlement = Settlement::observed(o)?;
        let paid = used.pays_refund.then_some(&settlement);
        let outcome = match repo::apply(tx, &used.merchant_id, &used.refund_id, action, paid).await
        {
            Ok(refund) => {
                tracing::info!(chain = %chain.name, refund = %refund.id, state = %refund.state, tx = %o.transaction_hash, "refund settled on chain");
                outcome
            }
            Err(TransitionError::Forbidden { from, .. }) => {
                tracing::warn!(chain = %chain.name, refund = %used.refund_id, %from, tx = %o.transaction_hash, "confirmed nonce use for a refund that cannot move");
                RefundOutcome::Ignored
            }
            Err(TransitionError::NotFound) => RefundOutcome::Ignored,
            Err(TransitionError::Database(e)) => return Err(e.into()),
        };
        if let (true, Some(transfer)) = (used.pays_refund, &used.transfer) {
            let event = ledger::ChainEvent {
                chain: &chain.name,
                transaction_hash: &o.transaction_hash,
                log_index: o.log_index,
            };
            let refund = ledger::Entry::refund(
                &used.merchant_id,
                &used.intent_id,
                &used.refund_id,
                &used.payer,
                event,
                &used.token,
                &transfer.value,
            );
            ledger::post(tx, &refund).await?;
        }
        Ok(outcome)
    }

    /// Fails refunds whose authorization the newest confirmed block's time has passed.
    async fn confirmed(
        &self,
        conn: &mut PgConnection,
        chain: &ChainEndpoint,
        block: ConfirmedBlock,
    ) -> Result<(), sqlx::Error> {
        let expired = repo::expire_due(conn, &chain.name, block.timestamp, EXPIRY_BATCH).await?;
        if expired > 0 {
            metrics::counter!(names::SETTLEMENTS, "chain" => chain.name.clone(), "outcome" => "refund_expired").increment(expired);
            tracing::info!(chain = %chain.name, expired, block.timestamp, "refunds expired by chain time");
        }
        Ok(())
    }
}

/// The open refund by transfer that `log` pays, other than `taken`: an ERC-20 `Transfer` of its
/// amount of its token from the merchant's address to its payer.
async fn transfer_seen(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
    log: &Log,
    taken: &[String],
) -> Result<Option<TransferSeen>, FollowError> {
    if log.topics().first() != Some(&Eip3009::Transfer::SIGNATURE_HASH) {
        return Ok(None);
    }
    let Ok(sent) = Eip3009::Transfer::decode_log_data(log.data()) else {
        return Ok(None);
    };
    let (token, from, to, value) = (
        log.address().to_checksum(None),
        sent.from.to_checksum(None),
        sent.to.to_checksum(None),
        sent.value.to_string(),
    );
    let refund =
        repo::paid_by_transfer(conn, &chain.name, &token, &from, &to, &value, taken).await?;
    Ok(refund.map(|refund| TransferSeen {
        merchant_id: refund.merchant_id,
        refund_id: refund.id,
        intent_id: refund.intent_id,
        token,
        payer: to,
        value,
    }))
}

/// A confirmed transfer that pays a refund by transfer: the refund succeeds and is booked, once.
/// One that finds the refund already moved (expired first) was the merchant's own transfer to
/// the payer, not ours to book.
async fn apply_transfer(
    tx: &mut PgConnection,
    chain: &ChainEndpoint,
    o: &Observation,
) -> Result<RefundOutcome, WatchError> {
    let (_, seen): (RefundTransferKind, TransferSeen) = o.read()?;
    let settlement = Settlement::observed(o)?;
    match repo::apply(
        tx,
        &seen.merchant_id,
        &seen.refund_id,
        Action::Settle,
        Some(&settlement),
    )
    .await
    {
        Ok(refund) => {
            tracing::info!(chain = %chain.name, refund = %refund.id, tx = %o.transaction_hash, "refund paid by the merchant's transfer");
        }
        Err(TransitionError::Forbidden { from, .. }) => {
            tracing::warn!(chain = %chain.name, refund = %seen.refund_id, %from, tx = %o.transaction_hash, "a transfer for a refund that cannot move: not booked");
            return Ok(RefundOutcome::Ignored);
        }
        Err(TransitionError::NotFound) => return Ok(RefundOutcome::Ignored),
        Err(TransitionError::Database(e)) => return Err(e.into()),
    }
    let event = ledger::ChainEvent {
        chain: &chain.name,
        transaction_hash: &o.transaction_hash,
        log_index: o.log_index,
    };
    let entry = ledger::Entry::refund(
        &seen.merchant_id,
        &seen.intent_id,
        &seen.refund_id,
        &seen.payer,
        event,
        &seen.token,
        &seen.value,
    );
    ledger::post(tx, &entry).await?;
    Ok(RefundOutcome::Succeeded)
}
