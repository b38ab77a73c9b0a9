//! Paying an intent by EIP-3009 authorization: which intents may be paid, the document the payer
//! signs, the confirm that checks the signature and queues the submission in the caller's
//! transaction, and the submission kind that says when it is no longer wanted. The routes and the
//! checkout page call these, so each rule is in one place (`docs/settlement.md`); what any
//! EIP-3009 authorization shares is `rails::eip3009`.

use sqlx::PgConnection;

use crate::{
    auth::MerchantId,
    error::ApiError,
    intents::payment::KIND,
    intents::{
        domain::{self, IntentId, PaymentMethod},
        repo::{self, PaymentIntent, TransitionError},
        state::{Action, Actor, IntentState},
    },
    rails::{
        Chains,
        eip3009::{
            Terms, authorization_for, authorizer_proof, queue_authorization, served, valid_before,
        },
        evm::{authorization::Authorization, token::TokenSupport},
    },
};

/// The authorization that pays the merchant's intent `raw_id`, if it can be paid now.
pub async fn authorization(
    conn: &mut PgConnection,
    chains: &Chains,
    merchant: &MerchantId,
    raw_id: &str,
) -> Result<Authorization, ApiError> {
    let intent = payable(conn, chains, merchant, raw_id).await?;
    Ok(authorization_of(conn, chains, &intent).await?.0)
}

/// Confirms the intent with the payer's `signature` of its authorization: `created` →
/// `processing` and the submission queued, both in `tx`, or nothing. `actor` is who sent it (the
/// merchant, or the payer through the checkout page).
pub async fn confirm(
    tx: &mut PgConnection,
    chains: &Chains,
    merchant: &MerchantId,
    raw_id: &str,
    signature: &str,
    actor: &Actor,
) -> Result<PaymentIntent, ApiError> {
    let intent = payable(tx, chains, merchant, raw_id).await?;
    let (authorization, token) = authorization_of(tx, chains, &intent).await?;
    let proof = authorizer_proof(
        chains,
        &intent.chain,
        &authorization,
        &token,
        signature,
        "payer",
    )
    .await?;
    let confirmed = repo::apply_paid(
        tx,
        merchant.as_str(),
        &intent.id,
        Action::Confirm,
        actor,
        None,
    )
    .await
    .map_err(|e| transition_error(&intent.id, e))?;
    queue_authorization(tx, KIND, &intent.id, &authorization, &proof).await?;
    Ok(confirmed)
}

/// The intent, if it can be paid by authorization now: it exists, is `created`, and its chain is
/// settled here.
async fn payable(
    conn: &mut PgConnection,
    chains: &Chains,
    merchant: &MerchantId,
    raw_id: &str,
) -> Result<PaymentIntent, ApiError> {
    let not_found = || ApiError::NotFound("no payment intent with that id".to_owned());
    let id = IntentId::parse(raw_id).ok_or_else(not_found)?;
    let intent = repo::find(conn, merchant, &id)
        .await?
        .ok_or_else(not_found)?;
    if intent.payment_method != PaymentMethod::Authorization {
        return Err(ApiError::InvalidRequest(format!(
            "payment intent {}: it is paid by transfers to its deposit_address, not by an authorization",
            intent.id
        )));
    }
    if intent.state != IntentState::Created {
        return Err(ApiError::InvalidStateTransition(format!(
            "payment intent {}: a {} payment intent cannot be paid",
            intent.id, intent.state
        )));
    }
    served(
        chains,
        &intent.chain,
        &format!("payment intent {}", intent.id),
    )?;
    Ok(intent)
}

/// The authorization that pays `intent`, under its token's EIP-712 domain, and what the token is.
async fn authorization_of(
    conn: &mut PgConnection,
    chains: &Chains,
    intent: &PaymentIntent,
) -> Result<(Authorization, TokenSupport), ApiError> {
    let terms = Terms {
        chain: &intent.chain,
        token: &intent.token,
        from: intent.payer.as_deref().unwrap_or_default(),
        to: &intent.merchant,
        value: &intent.amount,
        valid_before: valid_before(intent.expires_at),
        nonce: domain::chain_nonce(&intent.id),
    };
    authorization_for(conn, chains, &terms).await
}

fn transition_error(id: &str, error: TransitionError) -> ApiError {
    match error {
        TransitionError::NotFound => ApiError::NotFound(format!("no payment intent {id}")),
        e @ TransitionError::Forbidden { .. } => {
            ApiError::InvalidStateTransition(format!("payment intent {id}: {e}"))
        }
        TransitionError::Database(e) => e.into(),
    }
}
