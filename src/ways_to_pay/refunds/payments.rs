//! The rules of a refund (`docs/refunds.md`): which intents can be refunded and how much, the
//! authorization the merchant signs (from the address the intent paid, to its payer), and the
//! confirm that checks the signature and queues the transfer in the caller's transaction, through
//! the same pieces as an intent's payment (`ways_to_pay::authorization::payments`).

use sqlx::PgConnection;

use super::{
    domain::{RefundId, RefundMethod},
    repo::{self, CreateError, NewRefund, Refund, TransitionError},
    state::{Action, RefundState},
};
use crate::{
    auth::MerchantId,
    error::ApiError,
    intents::{
        domain::{IntentId, PaymentMethod},
        repo as intents,
    },
    rails::{
        Chains,
        eip3009::{self, Terms},
        evm::{authorization::Authorization, token::TokenSupport},
        outbox::{BoxFuture, Hold, SubmissionKind, Wanted},
        tokens::{self, ResolveError},
    },
};

/// Creates a refund of the merchant's paid intent `raw_intent`, in `tx`.
pub async fn create(
    tx: &mut PgConnection,
    chains: &Chains,
    merchant: &MerchantId,
    raw_intent: &str,
    new: &NewRefund<'_>,
) -> Result<Refund, ApiError> {
    let not_found = || ApiError::NotFound("no payment intent with that id".to_owned());
    let id = IntentId::parse(raw_intent).ok_or_else(not_found)?;
    let intent = intents::find(tx, merchant, &id)
        .await?
        .ok_or_else(not_found)?;
    let invalid = |field: &str, why: String| ApiError::InvalidRequest(format!("{field}: {why}"));
    // An order's duplicate payment is paid back on its own chain and token, to its sender unless
    // the merchant names where (`docs/settlement.md`, "Orders and options").
    let duplicate = match new.duplicate_payment {
        Some(raw) => Some(
            intent
                .duplicate_payments
                .iter()
                .find(|d| d.id == raw)
                .ok_or_else(|| {
                    invalid(
                        "duplicate_payment",
                        format!(
                            "payment intent {} has no duplicate payment {raw:?}",
                            intent.id
                        ),
                    )
                })?,
        ),
        None if new.destination.is_some() => {
            return Err(invalid(
                "destination",
                "only a duplicate_payment's refund goes elsewhere than to the intent's payer"
                    .to_owned(),
            ));
        }
        None => None,
    };
    // Whoever sent to a deposit address may be an exchange's hot wallet: paying it back could
    // lose the money, so such an intent is refunded by the merchant, outside (`docs/refunds.md`).
    if duplicate.is_none() && intent.payment_method == Some(PaymentMethod::DepositAddress) {
        return Err(ApiError::InvalidRequest(format!(
            "payment intent {}: a deposit_address intent has no payer to refund; refund its sender yourself",
            intent.id
        )));
    }
    // The refund is paid on the chain of what it pays back, so this server must settle it. An
    // order no option was chosen for was not paid: the refund's own check says so.
    let chain = duplicate.map(|d| &d.chain).or(intent.chain.as_ref());
    if let Some(chain) = chain {
        eip3009::served(chains, chain, &format!("payment intent {}", intent.id))?;
    }
    // A payment by Permit2 may be in any ERC-20, as a duplicate may: paid back by transfer unless
    // its token has EIP-3009.
    let method = match (
        duplicate,
        intent.payment_method,
        &intent.chain,
        &intent.token,
    ) {
        (Some(duplicate), ..) => method_for(tx, chains, &duplicate.chain, &duplicate.token).await?,
        (None, Some(PaymentMethod::Permit2), Some(chain), Some(token)) => {
            method_for(tx, chains, chain, token).await?
        }
        (None, ..) => RefundMethod::Authorization,
    };
    repo::create(tx, merchant, &id, new, duplicate, method)
        .await
        .map_err(|e| match e {
            CreateError::NoIntent => not_found(),
            e @ CreateError::NotPaid(_) => {
                ApiError::InvalidStateTransition(format!("payment intent {}: {e}", intent.id))
            }
            e @ CreateError::Exceeds { .. } => {
                ApiError::RefundExceedsPayment(format!("payment intent {}: {e}", intent.id))
            }
            CreateError::Database(e) => e.into(),
        })
}

/// How a payment in `token` on `chain` is paid back: by the merchant's authorization where the
/// token has EIP-3009, else by a transfer the merchant sends (`docs/refunds.md`, "Refunds by
/// transfer").
async fn method_for(
    conn: &mut PgConnection,
    chains: &Chains,
    chain: &str,
    token: &str,
) -> Result<RefundMethod, ApiError> {
    let (endpoint, node) = chains
        .get(chain)
        .ok_or_else(|| ApiError::internal("the caller checked the chain"))?;
    let token = token
        .parse()
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("stored token {token}: {e}")))?;
    match tokens::resolve(conn, endpoint, node, token).await {
        Ok(TokenSupport::Eip3009 { .. }) => Ok(RefundMethod::Authorization),
        Ok(TokenSupport::NotSupported(_)) => Ok(RefundMethod::Transfer),
        Err(ResolveError::Database(e)) => Err(e.into()),
        Err(ResolveError::Chain(e)) => Err(ApiError::ChainUnavailable(format!(
            "token {token} on {chain} is not known yet and its chain did not answer ({e}); nothing was changed, retry later"
        ))),
    }
}

/// The authorization the merchant signs to pay refund `raw_id`, if it can be signed now.
pub async fn authorization(
    conn: &mut PgConnection,
    chains: &Chains,
    merchant: &MerchantId,
    raw_id: &str,
) -> Result<Authorization, ApiError> {
    let refund = signable(conn, chains, merchant, raw_id).await?;
    Ok(authorization_of(conn, chains, &refund).await?.0)
}

/// Confirms refund `raw_id` with the merchant's `signature` of its authorization: `created` →
/// `processing` and the transfer queued, both in `tx`, or nothing.
pub async fn confirm(
    tx: &mut PgConnection,
    chains: &Chains,
    merchant: &MerchantId,
    raw_id: &str,
    signature: &str,
) -> Result<Refund, ApiError> {
    let refund = signable(tx, chains, merchant, raw_id).await?;
    let (authorization, token) = authorization_of(tx, chains, &refund).await?;
    let proof = eip3009::authorizer_proof(
        chains,
        &refund.chain,
        &authorization,
        &token,
        signature,
        "merchant",
    )
    .await?;
    let confirmed = repo::apply(tx, merchant.as_str(), &refund.id, Action::Confirm, None)
        .await
        .map_err(|e| transition_error(&refund.id, e))?;
    eip3009::queue_authorization(tx, KIND, &refund.id, &authorization, &proof).await?;
    Ok(confirmed)
}

/// The refund, if its authorization can be signed now: it exists and is `created`.
async fn signable(
    conn: &mut PgConnection,
    chains: &Chains,
    merchant: &MerchantId,
    raw_id: &str,
) -> Result<Refund, ApiError> {
    let not_found = || ApiError::NotFound("no refund with that id".to_owned());
    let id = RefundId::parse(raw_id).ok_or_else(not_found)?;
    let refund = repo::find(conn, merchant, &id)
        .await?
        .ok_or_else(not_found)?;
    if refund.payment_method == RefundMethod::Transfer {
        return Err(ApiError::InvalidRequest(format!(
            "refund {}: paid by a transfer you send from {} (payment_method transfer); there is nothing to sign",
            refund.id, refund.merchant
        )));
    }
    if refund.state != RefundState::Created {
        return Err(ApiError::InvalidStateTransition(format!(
            "refund {}: a {} refund cannot be signed again",
            refund.id, refund.state
        )));
    }
    eip3009::served(chains, &refund.chain, &format!("refund {}", refund.id))?;
    Ok(refund)
}

/// The refund's authorization: the merchant's address pays its amount back to the payer.
async fn authorization_of(
    conn: &mut PgConnection,
    chains: &Chains,
    refund: &Refund,
) -> Result<(Authorization, crate::rails::evm::token::TokenSupport), ApiError> {
    let terms = Terms {
        chain: &refund.chain,
        token: &refund.token,
        from: &refund.merchant,
        to: &refund.payer,
        value: &refund.amount,
        valid_before: eip3009::valid_before(refund.expires_at),
        nonce: super::domain::chain_nonce(&refund.id),
    };
    eip3009::authorization_for(conn, chains, &terms).await
}

fn transition_error(id: &str, error: TransitionError) -> ApiError {
    match error {
        TransitionError::NotFound => ApiError::NotFound(format!("no refund {id}")),
        e @ TransitionError::Forbidden { .. } => {
            ApiError::InvalidStateTransition(format!("refund {id}: {e}"))
        }
        TransitionError::Database(e) => e.into(),
    }
}

/// The outbox kind of a refund's transfer: its subject is the refund's id.
pub const KIND: &str = "refund_payment";

/// A refund's transfer is wanted while the refund is `processing`.
pub struct RefundPayment;

impl SubmissionKind for RefundPayment {
    fn name(&self) -> &'static str {
        KIND
    }

    fn still_wanted<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        subject: &'a str,
    ) -> BoxFuture<'a, Result<Wanted, sqlx::Error>> {
        Box::pin(async move {
            let state = sqlx::query_scalar!(
                r#"SELECT state AS "state: RefundState" FROM refunds WHERE id = $1"#,
                subject
            )
            .fetch_optional(conn)
            .await?;
            Ok(match state {
                Some(RefundState::Processing) => Wanted::Yes,
                Some(other) => Wanted::No(format!("refund_{other}")),
                None => Wanted::No("refund_missing".to_owned()),
            })
        })
    }

    /// The refund says why it waits (`pending_reason`).
    fn held<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        subject: &'a str,
        hold: Hold,
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(repo::hold(conn, subject, hold.code()))
    }
}
