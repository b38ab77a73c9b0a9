//! The payment watch: what the chain follower looks for on behalf of intents, and what a confirmed
//! log changes (`docs/settlement.md`, "Follower and watches"). It wants `AuthorizationUsed` and
//! `AuthorizationCanceled` of the EIP-3009 tokens read on that chain; a use of an intent's nonce
//! by its payer settles the intent if the same transaction's transfer paid it and fails it
//! otherwise; a cancellation fails it; and the newest confirmed block's time expires intents.

use alloy::rpc::types::Log;
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use time::OffsetDateTime;

use crate::{
    config::ChainEndpoint,
    intents::{
        repo::{self, Expiry, Settlement, TransitionError},
        state::{Action, Actor},
    },
    ledger,
    rails::{
        eip3009::{Transfer, nonce_interest, nonce_log, transfer_after},
        follower::{
            ConfirmedBlock, FollowError, Interest, Observation, Observed, Watch, WatchError,
        },
        rpc::Node,
    },
    telemetry::metrics as names,
};

/// An intent's nonce used by its payer (`AuthorizationUsed`).
pub const USED: &str = "authorization_used";
/// An intent's nonce canceled by its payer (`AuthorizationCanceled`): it can never pay.
pub const CANCELED: &str = "authorization_canceled";

/// What an observation of an intent's nonce holds; its subject is the intent's id.
#[derive(Debug, Serialize, Deserialize)]
struct NonceUse {
    merchant_id: String,
    intent_id: String,
    token: String,
    /// What the same transaction's next `Transfer` of the token moved, if any.
    transfer: Option<Transfer>,
    /// Whether that transfer is the intent's payment: its payer, payee and amount.
    pays_intent: bool,
}

#[derive(Debug, Clone, Copy)]
pub struct PaymentWatch;

impl Watch for PaymentWatch {
    fn applies(&self, kind: &str) -> bool {
        [USED, CANCELED].contains(&kind)
    }

    async fn interest(
        &self,
        conn: &mut PgConnection,
        chain: &ChainEndpoint,
    ) -> Result<Interest, sqlx::Error> {
        nonce_interest(conn, chain).await
    }

    async fn observe(
        &self,
        conn: &mut PgConnection,
        chain: &ChainEndpoint,
        node: &Node,
        log: &Log,
    ) -> Result<Option<Observed>, FollowError> {
        let Some((kind, authorizer, nonce)) = nonce_log(log, USED, CANCELED) else {
            return Ok(None);
        };
        let token = log.address().to_checksum(None);
        let intent = repo::by_chain_nonce(
            conn,
            &chain.name,
            &token,
            &authorizer.to_checksum(None),
            nonce.as_slice(),
        )
        .await?;
        let Some(intent) = intent else {
            return Ok(None);
        };
        let transfer = match kind {
            USED => transfer_after(node, log).await?,
            _ => None,
        };
        let pays_intent = transfer.as_ref().is_some_and(|t| {
            t.moves(
                intent.payer.as_deref().unwrap_or_default(),
                &intent.payee,
                &intent.amount,
            )
        });
        let payload = NonceUse {
            merchant_id: intent.merchant_id,
            intent_id: intent.id.clone(),
            token,
            transfer,
            pays_intent,
        };
        Ok(Some(Observed {
            kind,
            subject: intent.id,
            payload: serde_json::to_value(payload)
                .map_err(|e| FollowError::Watch(e.to_string()))?,
        }))
    }

    /// `succeeded` (or recorded on a canceled intent) if the transfer paid the intent, `failed`
    /// if the nonce was burned otherwise or the authorization canceled; a payment is booked in
    /// the ledger whatever the intent could still do, since the money moved.
    async fn apply(
        &self,
        tx: &mut PgConnection,
        chain: &ChainEndpoint,
        o: &Observation,
    ) -> Result<&'static str, WatchError> {
        let used: NonceUse =
            serde_json::from_value(o.payload.clone()).map_err(WatchError::unreadable)?;
        let (action, outcome) = match (o.kind.as_str(), used.pays_intent) {
            (CANCELED, _) => (Action::CancelAuthorization, "authorization_canceled"),
            (_, true) => (Action::Settle, "succeeded"),
            (_, false) => (Action::BurnNonce, "nonce_used_otherwise"),
        };
        let settlement = Settlement {
            transaction_hash: o.transaction_hash.clone(),
            block_number: o.block_number as u64,
            block_timestamp: OffsetDateTime::from_unix_timestamp(o.block_timestamp)
                .map_err(WatchError::unreadable)?,
        };
        let paid = used.pays_intent.then_some(&settlement);
        let outcome = match repo::apply_paid(
            tx,
            &used.merchant_id,
            &used.intent_id,
            action,
            &Actor::Chain,
            paid,
        )
        .await
        {
            Ok(intent) => {
                tracing::info!(chain = %chain.name, intent = %intent.id, state = %intent.state, tx = %o.transaction_hash, "settled on chain");
                outcome
            }
            // Already moved by an earlier observation of the same nonce, or final: nothing to do.
            Err(TransitionError::Forbidden { from, .. }) => {
                tracing::warn!(chain = %chain.name, intent = %used.intent_id, %from, tx = %o.transaction_hash, "confirmed nonce use for an intent that cannot move");
                "ignored"
            }
            Err(TransitionError::NotFound) => "ignored",
            Err(TransitionError::Database(e)) => return Err(e.into()),
        };
        if let (true, Some(transfer)) = (used.pays_intent, &used.transfer) {
            let event = ledger::ChainEvent {
                chain: &chain.name,
                transaction_hash: &o.transaction_hash,
                log_index: o.log_index,
            };
            let payment = ledger::Entry::payment(
                &used.merchant_id,
                &used.intent_id,
                &transfer.from,
                event,
                &used.token,
                &transfer.value,
            );
            ledger::post(tx, &payment).await?;
        }
        Ok(outcome)
    }

    /// Expires intents whose authorization the newest confirmed block's time has passed.
    async fn confirmed(
        &self,
        conn: &mut PgConnection,
        chain: &ChainEndpoint,
        block: ConfirmedBlock,
    ) -> Result<(), sqlx::Error> {
        let expiry = Expiry::ChainTime {
            chain: &chain.name,
            block_timestamp: block.timestamp,
        };
        let expired = repo::expire_due(conn, crate::housekeeping::BATCH, &expiry).await?;
        if expired > 0 {
            metrics::counter!(names::SETTLEMENTS, "chain" => chain.name.clone(), "outcome" => "expired").increment(expired);
            tracing::info!(chain = %chain.name, expired, block.timestamp, "expired by chain time");
        }
        Ok(())
    }
}
