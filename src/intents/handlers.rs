//! HTTP handlers for `/v1/payment_intents`. They know nothing of idempotency: the layer around
//! them claims keys and stores whatever they answer.

use axum::{
    Extension, Json, Router,
    extract::{Path, State},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::Deserialize;
use sqlx::PgPool;

use super::{
    domain::{Address, Amount, Chain, ExpiresIn, IntentId},
    repo::{self, NewIntent},
};
use crate::{
    auth::MerchantId,
    http::{
        errors::ApiError,
        extractors::{JsonBody, Tx},
    },
};

pub fn router() -> Router<PgPool> {
    Router::new()
        .route("/v1/payment_intents", post(create))
        .route("/v1/payment_intents/{id}", get(show))
}

/// The create request (SPEC §3). Unknown fields are rejected: a misspelt `expires_in_secs` must
/// not silently become the default.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateIntentRequest {
    pub chain: Chain,
    pub token: Address,
    pub payer: Address,
    pub merchant: Address,
    pub amount: Amount,
    #[serde(default)]
    pub expires_in_seconds: Option<ExpiresIn>,
}

async fn create(
    Extension(merchant): Extension<MerchantId>,
    mut tx: Tx,
    JsonBody(request): JsonBody<CreateIntentRequest>,
) -> Result<Response, ApiError> {
    let new = NewIntent {
        chain: request.chain,
        token: request.token,
        payer: request.payer,
        payee: request.merchant,
        amount: request.amount,
        expires_in: request.expires_in_seconds.unwrap_or_default(),
    };
    let intent = repo::insert(&mut tx, &merchant, &IntentId::generate(), &new).await?;
    let location = HeaderValue::try_from(format!("/v1/payment_intents/{}", intent.id))
        .map_err(|e| ApiError::Internal(e.into()))?;
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(intent),
    )
        .into_response())
}

async fn show(
    State(pool): State<PgPool>,
    Extension(merchant): Extension<MerchantId>,
    Path(id): Path<String>,
) -> Result<Json<repo::PaymentIntent>, ApiError> {
    let intent_id = IntentId::parse(&id)
        .ok_or_else(|| ApiError::NotFound("no payment intent with that id".to_owned()))?;
    repo::find(&pool, &merchant, &intent_id)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("no payment intent {}", intent_id.as_str())))
}
