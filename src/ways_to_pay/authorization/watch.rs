//! The payment watch: what the chain follower looks for on behalf of intents, and what a confirmed
//! log changes (`docs/settlement.md`, "Follower and watches"). It wants `AuthorizationUsed` and
//! `AuthorizationCanceled` of the EIP-3009 tokens read on that chain; a use of an intent's nonce
//! by its payer settles the intent if the same transaction's transfer paid it and fails it
//! otherwise; a cancellation fails it. Either holds the intent's expiry off (`ExpiryHolds`).
//! An authorization of an order's option that its payer submitted without a confirm chooses
//! that option if the order has none yet, and is a duplicate payment if it has another.

use alloy::rpc::types::Log;
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;

use crate::{
    config::ChainEndpoint,
    intents::{
        domain::Address,
        order::{DuplicatePayment, DuplicateReason},
        repo::{self, Settlement, TransitionError},
        state::{Action, Actor},
    },
    ledger,
    rails::{
        eip3009::{Transfer, nonce_interest, nonce_log, transfer_after},
        follower::{
            FollowError, Interest, Observation, ObservationKind, Observed, Outcome, Watch,
            WatchError,
        },
        rpc::Node,
    },
};

/// What the payment watch records of an intent's nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonceKind {
    /// Used by its payer (`AuthorizationUsed`).
    Used,
    /// Canceled by its payer (`AuthorizationCanceled`): the intent can never be paid with it.
    Canceled,
}

impl ObservationKind for NonceKind {
    const ALL: &'static [Self] = &[Self::Used, Self::Canceled];

    fn as_str(self) -> &'static str {
        match self {
            Self::Used => "authorization_used",
            Self::Canceled => "authorization_canceled",
        }
    }
}

/// What a confirmed nonce use or cancellation did to its intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaymentOutcome {
    Succeeded,
    NonceUsedOtherwise,
    AuthorizationCanceled,
    /// The intent had already moved (an earlier observation of the nonce) or is final.
    Ignored,
    /// An order's other option paid it again: booked and listed, not counted.
    DuplicatePayment,
}

impl Outcome for PaymentOutcome {
    fn label(&self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::NonceUsedOtherwise => "nonce_used_otherwise",
            Self::AuthorizationCanceled => "authorization_canceled",
            Self::Ignored => "ignored",
            Self::DuplicatePayment => "duplicate_payment",
        }
    }
}

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
    /// The order's option whose authorization it is, when it is not the one paying the order.
    #[serde(default)]
    option_id: Option<String>,
    /// Who signed it.
    #[serde(default)]
    authorizer: Option<String>,
}

#[derive(Debug, Clone, Copy)]
pub struct PaymentWatch;

impl Watch for PaymentWatch {
    type Outcome = PaymentOutcome;

    fn applies(&self, kind: &str) -> bool {
        NonceKind::parse(kind).is_some()
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
        let Some((kind, authorizer, nonce)) = nonce_log(log, NonceKind::Used, NonceKind::Canceled)
        else {
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
            NonceKind::Used => transfer_after(node, log).await?,
            NonceKind::Canceled => None,
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
            option_id: intent.option_id,
            authorizer: Some(authorizer.to_checksum(None)),
        };
        Observed::new(kind, intent.id, &payload).map(Some)
    }

    /// `succeeded` (or recorded on a canceled intent) if the transfer paid the intent, `failed`
    /// if the nonce was burned otherwise or the authorization canceled; a payment is booked in
    /// the ledger whatever the intent could still do, since the money moved.
    async fn apply(
        &self,
        tx: &mut PgConnection,
        chain: &ChainEndpoint,
        o: &Observation,
    ) -> Result<PaymentOutcome, WatchError> {
        let (kind, used): (NonceKind, NonceUse) = o.read()?;
        if let Some(option_id) = &used.option_id {
            return self
                .apply_option(tx, chain, o, kind, &used, option_id)
                .await;
        }
        let (action, outcome) = match (kind, used.pays_intent) {
            (NonceKind::Canceled, _) => (
                Action::CancelAuthorization,
                PaymentOutcome::AuthorizationCanceled,
            ),
            (NonceKind::Used, true) => (Action::Settle, PaymentOutcome::Succeeded),
            (NonceKind::Used, false) => (Action::BurnNonce, PaymentOutcome::NonceUsedOtherwise),
        };
        let settlement = Settlement::observed(o)?;
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
                PaymentOutcome::Ignored
            }
            Err(TransitionError::NotFound) => PaymentOutcome::Ignored,
            Err(TransitionError::Database(e)) => return Err(e.into()),
        };
        book(tx, chain, o, &used).await?;
        Ok(outcome)
    }
}

/// Books a payment the transfer made to the merchant, whatever the intent could still do, since
/// the money moved.
async fn book(
    tx: &mut PgConnection,
    chain: &ChainEndpoint,
    o: &Observation,
    used: &NonceUse,
) -> Result<(), WatchError> {
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
    Ok(())
}

impl PaymentWatch {
    /// The authorization of an order's option, used without a confirm of it: it chooses the
    /// option and pays the order if the order has none yet, and is a duplicate payment if it has
    /// another (`docs/settlement.md`, "Orders and options"). A cancellation, or a use that moved
    /// something else, leaves the order as it is: only the chosen option's nonce is the order's.
    async fn apply_option(
        &self,
        tx: &mut PgConnection,
        chain: &ChainEndpoint,
        o: &Observation,
        kind: NonceKind,
        used: &NonceUse,
        option_id: &str,
    ) -> Result<PaymentOutcome, WatchError> {
        let (NonceKind::Used, true, Some(transfer), Some(authorizer)) =
            (kind, used.pays_intent, &used.transfer, &used.authorizer)
        else {
            return Ok(PaymentOutcome::Ignored);
        };
        let option = repo::option_of(tx, &used.merchant_id, &used.intent_id, option_id)
            .await?
            .ok_or_else(|| {
                WatchError::unreadable(format!(
                    "payment intent {} has no option {option_id}",
                    used.intent_id
                ))
            })?;
        let payer = Address::parse(authorizer).map_err(WatchError::unreadable)?;
        let choice = repo::choose_option(
            tx,
            &used.merchant_id,
            &used.intent_id,
            &option,
            Some(&payer),
        )
        .await?;
        book(tx, chain, o, used).await?;
        let moved = match choice {
            repo::Choice::Chosen => {
                let settlement = Settlement::observed(o)?;
                repo::apply_paid(
                    tx,
                    &used.merchant_id,
                    &used.intent_id,
                    Action::Settle,
                    &Actor::Chain,
                    Some(&settlement),
                )
                .await
                .map(|_| PaymentOutcome::Succeeded)
            }
            repo::Choice::Taken { .. } => {
                let duplicate = DuplicatePayment {
                    id: DuplicatePayment::new_id(),
                    chain: chain.name.clone(),
                    token: used.token.clone(),
                    amount: transfer.value.clone(),
                    transaction_hash: o.transaction_hash.clone(),
                    from: transfer.from.clone(),
                    deposit_address: None,
                    reason: DuplicateReason::PaidOtherwise,
                };
                tracing::warn!(chain = %chain.name, intent = %used.intent_id, option = %option_id, tx = %o.transaction_hash, "an order paid again by another option's authorization: booked and listed as a duplicate payment");
                repo::record_duplicate(tx, &used.merchant_id, &used.intent_id, &duplicate)
                    .await
                    .map(|_| PaymentOutcome::DuplicatePayment)
            }
        };
        match moved {
            Ok(outcome) => Ok(outcome),
            Err(TransitionError::Database(e)) => Err(e.into()),
            Err(e) => {
                tracing::warn!(chain = %chain.name, intent = %used.intent_id, error = %e, "an option's payment for an order that cannot move");
                Ok(PaymentOutcome::Ignored)
            }
        }
    }
}
