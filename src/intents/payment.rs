//! An intent's payment, whichever way to pay made it (the payer's authorization, an x402 settle
//! by EIP-3009 or Permit2): its submission as the outbox sends it, while it is wanted, how a hold
//! shows on the intent, and what a use of its nonce seen on chain makes of the intent
//! ([`apply_nonce_use`]).

use serde::{Deserialize, Serialize};
use sqlx::PgConnection;

use super::{
    domain::Address,
    order::{DuplicatePayment, DuplicateReason},
    repo::{self, Settlement, TransitionError},
    state::{Action, Actor, IntentState},
};
use crate::{
    config::ChainEndpoint,
    ledger,
    rails::{
        eip3009::Transfer,
        follower::{Observation, Outcome, WatchError},
        outbox::{BoxFuture, Hold, Revert, SubmissionKind, Wanted},
    },
};

/// The outbox kind of an intent's payment: its subject is the intent's id.
pub const KIND: &str = "intent_payment";

/// An intent's payment is wanted while the intent is `processing`: once the payment watch (or
/// expiry) moved it, there is nothing left to send.
pub struct IntentPayment;

impl SubmissionKind for IntentPayment {
    fn name(&self) -> &'static str {
        KIND
    }

    /// An intent's payment is an EIP-3009 transfer or a settle through x402's Permit2 proxy: the
    /// revert is read as either says it.
    fn classify(&self, reason: &str) -> Revert {
        crate::rails::evm::permit2::revert_of(reason).unwrap_or_else(|| Revert::of_eip3009(reason))
    }

    fn still_wanted<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        subject: &'a str,
    ) -> BoxFuture<'a, Result<Wanted, sqlx::Error>> {
        Box::pin(async move {
            let state = sqlx::query_scalar!(
                r#"SELECT state AS "state: IntentState" FROM payment_intents WHERE id = $1"#,
                subject
            )
            .fetch_optional(conn)
            .await?;
            Ok(match state {
                Some(IntentState::Processing) => Wanted::Yes,
                Some(other) => Wanted::No(format!("intent_{other}")),
                None => Wanted::No("intent_missing".to_owned()),
            })
        })
    }

    /// The intent says why it waits (`pending_reason`, an event once per change).
    fn held<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        subject: &'a str,
        hold: Hold,
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            let intent = sqlx::query!(
                r#"SELECT merchant_id, state AS "state: IntentState", pending_reason
                     FROM payment_intents WHERE id = $1"#,
                subject
            )
            .fetch_optional(&mut *conn)
            .await?;
            let Some(intent) = intent else { return Ok(()) };
            if intent.state != IntentState::Processing
                || intent.pending_reason.as_deref() == Some(hold.code())
            {
                return Ok(());
            }
            let moved = repo::apply_with(
                conn,
                &intent.merchant_id,
                subject,
                Action::Hold,
                &Actor::Chain,
                None,
                Some(hold.code()),
            )
            .await;
            match moved {
                Ok(_) | Err(TransitionError::NotFound | TransitionError::Forbidden { .. }) => {
                    Ok(())
                }
                Err(TransitionError::Database(e)) => Err(e),
            }
        })
    }
}

/// An intent's signed payment seen on chain, whichever way to pay watched for it: its nonce used
/// (by the token for an EIP-3009 authorization, by Permit2 for a permit) or canceled, and what the
/// same transaction moved. The subject of its observation is the intent's id.
#[derive(Debug, Serialize, Deserialize)]
pub struct NonceUse {
    pub merchant_id: String,
    pub intent_id: String,
    pub token: String,
    /// What the same transaction's `Transfer` of the token that the use made moved, if any.
    pub transfer: Option<Transfer>,
    /// Whether that transfer is the intent's payment: its payer, payee and amount.
    pub pays_intent: bool,
    /// The order's option whose authorization it is, when it is not the one paying the order.
    #[serde(default)]
    pub option_id: Option<String>,
    /// Who signed it.
    #[serde(default)]
    pub authorizer: Option<String>,
}

impl NonceUse {
    /// The use of `intent`'s nonce by `authorizer` on `token`, which made `transfer`.
    pub fn of(
        intent: repo::NonceOwner,
        token: String,
        authorizer: String,
        transfer: Option<Transfer>,
    ) -> Self {
        // Its token too: a Permit2 nonce may be used on another token than the intent's.
        let pays_intent = intent.token.as_deref() == Some(token.as_str())
            && transfer.as_ref().is_some_and(|t| {
                t.moves(
                    intent.payer.as_deref().unwrap_or_default(),
                    &intent.payee,
                    &intent.amount,
                )
            });
        Self {
            merchant_id: intent.merchant_id,
            intent_id: intent.id,
            token,
            transfer,
            pays_intent,
            option_id: intent.option_id,
            authorizer: Some(authorizer),
        }
    }
}

/// How a payment's nonce was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    Used,
    /// Canceled by its signer (EIP-3009's `cancelAuthorization`): never payable with it.
    Canceled,
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

/// `succeeded` (or recorded on a canceled intent) if the transfer paid the intent, `failed`
/// if the nonce was burned otherwise or the authorization canceled; a payment is booked in
/// the ledger whatever the intent could still do, since the money moved.
pub async fn apply_nonce_use(
    tx: &mut PgConnection,
    chain: &ChainEndpoint,
    o: &Observation,
    seen: Seen,
    used: &NonceUse,
) -> Result<PaymentOutcome, WatchError> {
    if let Some(option_id) = &used.option_id {
        return apply_option(tx, chain, o, seen, used, option_id).await;
    }
    let (action, outcome) = match (seen, used.pays_intent) {
        (Seen::Canceled, _) => (
            Action::CancelAuthorization,
            PaymentOutcome::AuthorizationCanceled,
        ),
        (Seen::Used, true) => (Action::Settle, PaymentOutcome::Succeeded),
        (Seen::Used, false) => (Action::BurnNonce, PaymentOutcome::NonceUsedOtherwise),
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
    book(tx, chain, o, used).await?;
    Ok(outcome)
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

/// The authorization of an order's option, used without a confirm of it: it chooses the
/// option and pays the order if the order has none yet, and is a duplicate payment if it has
/// another (`docs/settlement.md`, "Orders and options"). A cancellation, or a use that moved
/// something else, leaves the order as it is: only the chosen option's nonce is the order's.
async fn apply_option(
    tx: &mut PgConnection,
    chain: &ChainEndpoint,
    o: &Observation,
    seen: Seen,
    used: &NonceUse,
    option_id: &str,
) -> Result<PaymentOutcome, WatchError> {
    let (Seen::Used, true, Some(transfer), Some(authorizer)) =
        (seen, used.pays_intent, &used.transfer, &used.authorizer)
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
