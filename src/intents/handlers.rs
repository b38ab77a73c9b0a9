//! HTTP handlers for `/v1/payment_intents`. They know nothing of idempotency: the layer around
//! them claims keys and stores whatever they answer.

use axum::{
    Extension, Json, Router,
    body::Bytes,
    extract::{Path, State},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use super::{
    domain::{Address, Amount, Chain, ExpiresIn, IntentId},
    repo::{self, NewIntent, PaymentIntent, TransitionError},
    state::{Action, Actor, IntentState},
};
use crate::{
    auth::MerchantId,
    http::{
        errors::ApiError,
        extractors::{JsonBody, QueryParams, Tx, parse_json},
    },
};

pub fn router() -> Router<PgPool> {
    Router::new()
        .route("/v1/payment_intents", post(create).get(list))
        .route("/v1/payment_intents/{id}", get(show))
        .route("/v1/payment_intents/{id}/cancel", post(cancel))
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
) -> Result<Json<PaymentIntent>, ApiError> {
    let id = parse_id(&id)?;
    repo::find(&pool, &merchant, &id)
        .await?
        .map(Json)
        .ok_or_else(|| not_found(&id))
}

/// The cancel request: no parameters today, so the body is empty or `{}`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CancelRequest {}

async fn cancel(
    Extension(merchant): Extension<MerchantId>,
    mut tx: Tx,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<PaymentIntent>, ApiError> {
    if !body.iter().all(u8::is_ascii_whitespace) {
        parse_json::<CancelRequest>(&body)?;
    }
    let id = parse_id(&id)?;
    let actor = Actor::Merchant(merchant.as_str().to_owned());
    match repo::apply(&mut tx, &merchant, &id, Action::Cancel, &actor).await {
        Ok(intent) => Ok(Json(intent)),
        Err(TransitionError::NotFound) => Err(not_found(&id)),
        Err(e @ TransitionError::Forbidden { .. }) => Err(ApiError::InvalidStateTransition(
            format!("payment intent {}: {e}", id.as_str()),
        )),
        Err(TransitionError::Database(e)) => Err(e.into()),
    }
}

/// `GET /v1/payment_intents` parameters (SPEC §3).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    limit: Option<i64>,
    starting_after: Option<String>,
    state: Option<String>,
}

#[derive(Debug, Serialize)]
struct Page {
    data: Vec<PaymentIntent>,
    has_more: bool,
}

const DEFAULT_PAGE: i64 = 10;
const MAX_PAGE: i64 = 100;

async fn list(
    State(pool): State<PgPool>,
    Extension(merchant): Extension<MerchantId>,
    QueryParams(params): QueryParams<ListParams>,
) -> Result<Json<Page>, ApiError> {
    let limit = params.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::InvalidRequest(format!(
            "limit: must be between 1 and {MAX_PAGE}, got {limit}"
        )));
    }
    let state = params
        .state
        .map(|raw| {
            IntentState::parse(&raw).ok_or_else(|| {
                let known: Vec<&str> = IntentState::ALL.iter().map(|s| s.as_str()).collect();
                ApiError::InvalidRequest(format!("state: must be one of {}", known.join(", ")))
            })
        })
        .transpose()?;
    let cursor = match params.starting_after {
        None => None,
        Some(raw) => {
            let unknown =
                || ApiError::InvalidRequest("starting_after: no such payment intent".to_owned());
            let id = IntentId::parse(&raw).ok_or_else(unknown)?;
            Some(
                repo::cursor(&pool, &merchant, &id)
                    .await?
                    .ok_or_else(unknown)?,
            )
        }
    };
    // One extra row tells whether another page follows.
    let mut data = repo::list(&pool, &merchant, state, cursor.as_ref(), limit + 1).await?;
    let has_more = data.len() as i64 > limit;
    data.truncate(limit as usize);
    Ok(Json(Page { data, has_more }))
}

/// Any string that could not be an id is simply not found: a path is not validated input.
fn parse_id(raw: &str) -> Result<IntentId, ApiError> {
    IntentId::parse(raw)
        .ok_or_else(|| ApiError::NotFound("no payment intent with that id".to_owned()))
}

fn not_found(id: &IntentId) -> ApiError {
    ApiError::NotFound(format!("no payment intent {}", id.as_str()))
}
