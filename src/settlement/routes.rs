//! `GET /v1/payment_intents/{id}/authorization` and `POST /v1/payment_intents/{id}/confirm`: what
//! the payer signs, and the signature that moves the intent to `processing` with its submission
//! queued, in one transaction (`docs/settlement.md`).

use alloy::primitives::{Address, B256, U256};
use axum::{
    Extension, Json, Router,
    extract::State,
    routing::{get, post},
};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use utoipa::ToSchema;

use super::{
    Chains,
    tokens::{self, ResolveError},
};
use crate::{
    auth::MerchantId,
    chain::{
        authorization::{Authorization, PayerSignature},
        token::TokenSupport,
    },
    db::{Pool, Tx},
    error::{ApiError, ErrorBody},
    extract::{JsonBody, PathParam},
    intents::{
        domain::{self, IntentId},
        repo::{self, PaymentIntent, TransitionError},
        state::{Action, Actor},
    },
};

pub fn router(chains: Chains) -> Router<Pool> {
    Router::new()
        .route("/v1/payment_intents/{id}/authorization", get(authorization))
        .route("/v1/payment_intents/{id}/confirm", post(confirm))
        .layer(Extension(chains))
}

/// What the payer signs to pay an intent.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuthorizationDocument {
    /// The EIP-712 document exactly as `eth_signTypedData_v4` takes it.
    #[schema(value_type = Object)]
    pub typed_data: serde_json::Value,
    /// Its EIP-712 digest, `0x` + 64 hex digits.
    pub digest: String,
}

/// The EIP-3009 authorization that pays a `created` intent.
#[utoipa::path(
    get,
    path = "/v1/payment_intents/{id}/authorization",
    operation_id = "get_payment_intent_authorization",
    tag = "settlement",
    params(("id" = String, Path, description = "The intent id")),
    responses(
        (status = 200, description = "What the payer signs", body = AuthorizationDocument),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`invalid_state_transition`: not `created`", body = ErrorBody),
        (status = 422, description = "`token_not_supported`: the token does not implement EIP-3009; `chain_not_settled`: this server is not configured to settle the intent's chain (`CHAINS`)", body = ErrorBody),
        (status = 503, description = "`unavailable`: the chain is unreachable and the token unknown", body = ErrorBody),
    )
)]
pub async fn authorization(
    State(pool): State<Pool>,
    Extension(chains): Extension<Chains>,
    Extension(merchant): Extension<MerchantId>,
    PathParam(id): PathParam,
) -> Result<Json<AuthorizationDocument>, ApiError> {
    let mut conn = pool.acquire().await?;
    let intent = payable(&mut conn, &chains, &merchant, &id).await?;
    let authorization = authorization_of(&mut conn, &chains, &intent).await?;
    Ok(Json(AuthorizationDocument {
        typed_data: authorization.typed_data(),
        digest: authorization.digest().to_string(),
    }))
}

/// The confirm request: the payer's signature of the authorization's digest.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfirmRequest {
    /// `0x` + 130 hex digits: r, s, v (27/28 or 0/1), s in the lower half (EIP-2).
    #[schema(pattern = "^0x[0-9a-fA-F]{130}$")]
    pub signature: String,
}

/// Confirm a `created` intent with the payer's signature: it becomes `processing` and its
/// authorization is queued for the chain.
#[utoipa::path(
    post,
    path = "/v1/payment_intents/{id}/confirm",
    operation_id = "confirm_payment_intent",
    tag = "settlement",
    params(("id" = String, Path, description = "The intent id")),
    request_body(content = ConfirmRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Processing: the authorization is queued", body = PaymentIntent),
        (status = 400, description = "`invalid_request`: the signature is malformed or not the payer's", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`invalid_state_transition`", body = ErrorBody),
        (status = 422, description = "`token_not_supported`, or `chain_not_settled`", body = ErrorBody),
    )
)]
pub async fn confirm(
    Extension(chains): Extension<Chains>,
    Extension(merchant): Extension<MerchantId>,
    mut tx: Tx,
    PathParam(id): PathParam,
    JsonBody(request): JsonBody<ConfirmRequest>,
) -> Result<Json<PaymentIntent>, ApiError> {
    let signature = PayerSignature::parse(&request.signature)
        .map_err(|why| ApiError::InvalidRequest(format!("signature: {why}")))?;
    let intent = payable(&mut tx, &chains, &merchant, &id).await?;
    let authorization = authorization_of(&mut tx, &chains, &intent).await?;
    let signer = signature
        .signer(&authorization.digest())
        .map_err(|why| ApiError::InvalidRequest(format!("signature: {why}")))?;
    if signer != authorization.from {
        return Err(ApiError::InvalidRequest(format!(
            "signature: signed by {signer}, not by the payer {}",
            authorization.from
        )));
    }
    let actor = Actor::Merchant(merchant.as_str().to_owned());
    let confirmed = repo::apply_paid(
        &mut tx,
        merchant.as_str(),
        &intent.id,
        Action::Confirm,
        &actor,
        None,
    )
    .await
    .map_err(|e| transition_error(&intent.id, e))?;
    queue_submission(
        &mut tx,
        merchant.as_str(),
        &intent.id,
        &authorization,
        signature,
    )
    .await?;
    Ok(Json(confirmed))
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
    if intent.state != "created" {
        return Err(ApiError::InvalidStateTransition(format!(
            "payment intent {}: a {} payment intent cannot be paid",
            intent.id, intent.state
        )));
    }
    if chains.get(&intent.chain).is_none() {
        let why = if chains.is_on() {
            "its CHAINS setting does not name it"
        } else {
            "settlement is off: CHAINS is not set"
        };
        return Err(ApiError::ChainNotSettled(format!(
            "payment intent {}: this server does not settle {} ({why}), so the intent cannot be paid through it",
            intent.id, intent.chain
        )));
    }
    Ok(intent)
}

/// The authorization that pays `intent`, under its token's EIP-712 domain.
async fn authorization_of(
    conn: &mut PgConnection,
    chains: &Chains,
    intent: &PaymentIntent,
) -> Result<Authorization, ApiError> {
    let (endpoint, node) = chains
        .get(&intent.chain)
        .ok_or_else(|| ApiError::internal("payable() checked the chain"))?;
    let address = |raw: &str| {
        raw.parse::<Address>()
            .map_err(|e| ApiError::Internal(anyhow::anyhow!("stored address {raw}: {e}")))
    };
    let token = address(&intent.token)?;
    let (name, version) = match tokens::resolve(conn, endpoint, node, token).await {
        Ok(TokenSupport::Eip3009 { name, version }) => (name, version),
        Ok(TokenSupport::NotSupported(why)) => {
            return Err(ApiError::TokenNotSupported(format!(
                "token {token} on {} cannot be paid by EIP-3009 authorization: {why}",
                intent.chain
            )));
        }
        Err(ResolveError::Database(e)) => return Err(e.into()),
        Err(ResolveError::Chain(e)) => {
            return Err(ApiError::ChainUnavailable(format!(
                "token {token} on {} is not known yet and its chain did not answer ({e}); nothing was changed, retry later",
                intent.chain
            )));
        }
    };
    let value = intent
        .amount
        .parse::<U256>()
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("stored amount: {e}")))?;
    Ok(Authorization {
        chain_id: endpoint.id,
        token,
        token_name: name,
        token_version: version,
        from: address(&intent.payer)?,
        to: address(&intent.merchant)?,
        value,
        valid_before: valid_before(intent),
        nonce: B256::from(domain::chain_nonce(&intent.id)),
    })
}

/// The authorization is valid before the intent's expiry, in whole seconds rounded down.
pub fn valid_before(intent: &PaymentIntent) -> u64 {
    intent.expires_at.unix_timestamp().max(0) as u64
}

async fn queue_submission(
    conn: &mut PgConnection,
    merchant: &str,
    intent: &str,
    authorization: &Authorization,
    signature: PayerSignature,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        INSERT INTO chain_submissions
            (merchant_id, intent_id, chain_id, token, payer, payee, amount, valid_before, nonce, signature)
        VALUES ($1, $2, $3, $4, $5, $6, $7::text::numeric, $8, $9, $10)
        "#,
        merchant,
        intent,
        authorization.chain_id as i64,
        authorization.token.to_checksum(None),
        authorization.from.to_checksum(None),
        authorization.to.to_checksum(None),
        authorization.value.to_string(),
        authorization.valid_before as i64,
        authorization.nonce.as_slice(),
        &signature.to_bytes()[..],
    )
    .execute(conn)
    .await?;
    Ok(())
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
