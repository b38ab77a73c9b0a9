//! `GET /v1/payment_intents/{id}/authorization` and `POST /v1/payment_intents/{id}/confirm`: the
//! HTTP shape of [`super::payments`], which holds the rules (`docs/settlement.md`).

use super::payments::{self, Choose, PayRequest};
use crate::{
    auth::MerchantId,
    db::Pool,
    error::{ApiError, ErrorBody},
    extract::{JsonBody, PathParam, QueryParams},
    idempotency::Tx,
    intents::{repo::PaymentIntent, state::Actor},
    rails::{Chains, eip3009::AuthorizationDocument},
};
use axum::{
    Extension, Json, Router,
    extract::{FromRef, State},
    routing::{get, post},
};

pub fn router<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Pool: FromRef<S>,
    Chains: FromRef<S>,
{
    Router::new()
        .route("/v1/payment_intents/{id}/authorization", get(authorization))
        .route("/v1/payment_intents/{id}/confirm", post(confirm))
}

/// The EIP-3009 authorization that pays a `created` intent: for an order, with the option and
/// payer the parameters name.
#[utoipa::path(
    get,
    path = "/v1/payment_intents/{id}/authorization",
    operation_id = "get_payment_intent_authorization",
    tag = "settlement",
    params(("id" = String, Path, description = "The intent id"), Choose),
    responses(
        (status = 200, description = "What the payer signs", body = AuthorizationDocument),
        (status = 400, description = "`invalid_request`: an option or payer it cannot be paid with (the message names which)", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`invalid_state_transition`: not `created`; `payment_in_progress`: an order being paid by one of its options", body = ErrorBody),
        (status = 422, description = "`token_not_supported`: the token does not implement EIP-3009; `chain_not_settled`: this server is not configured to settle the intent's chain (`CHAINS`)", body = ErrorBody),
        (status = 503, description = "`unavailable`: the chain is unreachable and the token unknown", body = ErrorBody),
    )
)]
pub async fn authorization(
    State(pool): State<Pool>,
    State(chains): State<Chains>,
    Extension(merchant): Extension<MerchantId>,
    PathParam(id): PathParam,
    QueryParams(choose): QueryParams<Choose>,
) -> Result<Json<AuthorizationDocument>, ApiError> {
    let mut conn = pool.acquire().await?;
    let document = payments::authorization(&mut conn, &chains, &merchant, &id, &choose).await?;
    Ok(Json(document))
}

/// Confirm a `created` intent with the payer's signature: it becomes `processing` (an order's
/// option chosen, its payer named) and its authorization is queued for the chain.
#[utoipa::path(
    post,
    path = "/v1/payment_intents/{id}/confirm",
    operation_id = "confirm_payment_intent",
    tag = "settlement",
    params(("id" = String, Path, description = "The intent id")),
    request_body(content = PayRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Processing: the authorization is queued", body = PaymentIntent),
        (status = 400, description = "`invalid_request`: the signature is malformed or not the payer's, or an option or payer it cannot be paid with", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`invalid_state_transition`; `payment_in_progress`: another option of the order is being paid", body = ErrorBody),
        (status = 422, description = "`token_not_supported`, `chain_not_settled`, or `permit2_allowance_required`: a Permit2 payment whose payer has not approved Permit2 for the amount (not stored: the same key confirms once it has)", body = ErrorBody),
    )
)]
pub async fn confirm(
    State(chains): State<Chains>,
    Extension(merchant): Extension<MerchantId>,
    mut tx: Tx,
    PathParam(id): PathParam,
    JsonBody(request): JsonBody<PayRequest>,
) -> Result<Json<PaymentIntent>, ApiError> {
    let actor = Actor::Merchant(merchant.as_str().to_owned());
    let confirmed = payments::confirm(&mut tx, &chains, &merchant, &id, &request, &actor).await?;
    Ok(Json(confirmed))
}
