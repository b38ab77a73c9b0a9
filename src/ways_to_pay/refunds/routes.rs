//! `POST /v1/payment_intents/{id}/refunds`, `GET /v1/refunds`, `GET /v1/refunds/{id}`,
//! `GET /v1/refunds/{id}/authorization` and `POST /v1/refunds/{id}/confirm`: the HTTP shape of
//! [`super::payments`], which holds the rules (`docs/refunds.md`).

use axum::{
    Extension, Json, Router,
    extract::{FromRef, State},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use super::{
    domain::{Reason, RefundId},
    payments,
    repo::{self, NewRefund, Refund},
};
use crate::{
    auth::MerchantId,
    db::Pool,
    error::{ApiError, ErrorBody},
    extract::{JsonBody, Page, PathParam, QueryParams, page_limit},
    idempotency::Tx,
    intents::domain::{Address, Amount, ExpiresIn, IntentId},
    rails::{
        Chains,
        eip3009::{AuthorizationDocument, ConfirmRequest},
    },
};

pub fn router<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Pool: FromRef<S>,
    Chains: FromRef<S>,
{
    Router::new()
        .route("/v1/payment_intents/{id}/refunds", post(create))
        .route("/v1/refunds", get(list))
        .route("/v1/refunds/{id}", get(show))
        .route("/v1/refunds/{id}/authorization", get(authorization))
        .route("/v1/refunds/{id}/confirm", post(confirm))
}

/// The refund request. Unknown fields are rejected.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRefundRequest {
    /// Token base units as a decimal string; all that is left to refund if absent.
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^[1-9][0-9]{0,77}$", example = "25000000")]
    pub amount: Option<Amount>,
    #[serde(default)]
    pub reason: Option<Reason>,
    /// Seconds the merchant has to sign and confirm (the authorization's `validBefore`); a day
    /// by default, so a multisig's signers have time.
    #[serde(default)]
    #[schema(value_type = Option<i64>, minimum = 60, maximum = 86400, default = 86400)]
    pub expires_in_seconds: Option<ExpiresIn>,
    /// One of the order's `duplicate_payments` (`dp_…`) to pay back, on its chain and token,
    /// instead of the order's payment.
    #[serde(default)]
    #[schema(example = "dp_0b5e6c1d2f3a4b5c6d7e8f90")]
    pub duplicate_payment: Option<String>,
    /// Where a duplicate payment goes back to: its sender when absent (an exchange's deposit
    /// address may not credit it back; name the payer's own wallet then).
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^0x[0-9a-fA-F]{40}$")]
    pub destination: Option<Address>,
}

/// Refund a paid payment intent, in whole or in part, or one of an order's duplicate payments.
#[utoipa::path(
    post,
    path = "/v1/payment_intents/{id}/refunds",
    operation_id = "create_refund",
    tag = "refunds",
    params(("id" = String, Path, description = "The paid intent's id")),
    request_body(content = CreateRefundRequest, content_type = "application/json"),
    responses(
        (status = 201, description = "Created: the merchant signs its authorization next", body = Refund,
         headers(("Location" = String, description = "/v1/refunds/{id}"))),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`invalid_state_transition`: the intent was never paid; `refund_exceeds_payment`: more than is left to refund", body = ErrorBody),
        (status = 422, description = "`chain_not_settled`", body = ErrorBody),
    )
)]
pub async fn create(
    State(chains): State<Chains>,
    Extension(merchant): Extension<MerchantId>,
    mut tx: Tx,
    PathParam(intent): PathParam,
    JsonBody(request): JsonBody<CreateRefundRequest>,
) -> Result<Response, ApiError> {
    let new = NewRefund {
        amount: request.amount.as_ref(),
        reason: request.reason,
        expires_in: request
            .expires_in_seconds
            .unwrap_or_else(|| ExpiresIn::parse(ExpiresIn::MAX).expect("the maximum is valid")),
        duplicate_payment: request.duplicate_payment.as_deref(),
        destination: request.destination,
    };
    let refund = payments::create(&mut tx, &chains, &merchant, &intent, &new).await?;
    let location = HeaderValue::try_from(format!("/v1/refunds/{}", refund.id))
        .map_err(|e| ApiError::Internal(e.into()))?;
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(refund),
    )
        .into_response())
}

/// Retrieve a refund.
#[utoipa::path(
    get,
    path = "/v1/refunds/{id}",
    operation_id = "retrieve_refund",
    tag = "refunds",
    params(("id" = String, Path, description = "The refund id, re_ + 24 hex digits")),
    responses(
        (status = 200, description = "The refund now", body = Refund),
        (status = 404, description = "`not_found`", body = ErrorBody),
    )
)]
pub async fn show(
    State(pool): State<Pool>,
    Extension(merchant): Extension<MerchantId>,
    PathParam(id): PathParam,
) -> Result<Json<Refund>, ApiError> {
    let not_found = || ApiError::NotFound("no refund with that id".to_owned());
    let id = RefundId::parse(&id).ok_or_else(not_found)?;
    repo::find(&mut *pool.acquire().await?, &merchant, &id)
        .await?
        .map(Json)
        .ok_or_else(not_found)
}

/// `GET /v1/refunds` parameters.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Only the refunds of this intent.
    payment_intent: Option<String>,
    /// Page size, 1..=100.
    #[param(minimum = 1, maximum = 100, default = 10)]
    limit: Option<i64>,
    /// A refund id: the page starts right after it.
    starting_after: Option<String>,
}

/// List refunds, newest first, in cursor pages.
#[utoipa::path(
    get,
    path = "/v1/refunds",
    operation_id = "list_refunds",
    tag = "refunds",
    params(ListParams),
    responses(
        (status = 200, description = "One page", body = Page<Refund>),
        (status = 400, description = "`invalid_request`", body = ErrorBody),
    )
)]
pub async fn list(
    State(pool): State<Pool>,
    Extension(merchant): Extension<MerchantId>,
    QueryParams(params): QueryParams<ListParams>,
) -> Result<Json<Page<Refund>>, ApiError> {
    let limit = page_limit(params.limit)?;
    let intent = params
        .payment_intent
        .map(|raw| {
            IntentId::parse(&raw).ok_or_else(|| {
                ApiError::InvalidRequest(
                    "payment_intent: must be an intent id, pi_ + 24 hex digits".to_owned(),
                )
            })
        })
        .transpose()?;
    let mut conn = pool.acquire().await?;
    let cursor = match params.starting_after {
        None => None,
        Some(raw) => {
            let unknown = || ApiError::InvalidRequest("starting_after: no such refund".to_owned());
            let id = RefundId::parse(&raw).ok_or_else(unknown)?;
            Some(
                repo::cursor(&mut conn, &merchant, &id)
                    .await?
                    .ok_or_else(unknown)?,
            )
        }
    };
    let rows = repo::list(
        &mut conn,
        &merchant,
        intent.as_ref(),
        cursor.as_ref(),
        limit + 1,
    )
    .await?;
    Ok(Json(Page::of(rows, limit)))
}

/// The EIP-3009 authorization the merchant signs to pay a `created` refund: from the address the
/// intent paid, to its payer.
#[utoipa::path(
    get,
    path = "/v1/refunds/{id}/authorization",
    operation_id = "get_refund_authorization",
    tag = "refunds",
    params(("id" = String, Path, description = "The refund id")),
    responses(
        (status = 200, description = "What the merchant signs", body = AuthorizationDocument),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`invalid_state_transition`: not `created`", body = ErrorBody),
        (status = 422, description = "`token_not_supported`, or `chain_not_settled`", body = ErrorBody),
        (status = 503, description = "`unavailable`: the chain is unreachable and the token unknown", body = ErrorBody),
    )
)]
pub async fn authorization(
    State(pool): State<Pool>,
    State(chains): State<Chains>,
    Extension(merchant): Extension<MerchantId>,
    PathParam(id): PathParam,
) -> Result<Json<AuthorizationDocument>, ApiError> {
    let mut conn = pool.acquire().await?;
    let authorization = payments::authorization(&mut conn, &chains, &merchant, &id).await?;
    Ok(Json(AuthorizationDocument::of(&authorization)))
}

/// Confirm a `created` refund with the merchant's signature: it becomes `processing` and its
/// transfer is queued for the chain.
#[utoipa::path(
    post,
    path = "/v1/refunds/{id}/confirm",
    operation_id = "confirm_refund",
    tag = "refunds",
    params(("id" = String, Path, description = "The refund id")),
    request_body(content = ConfirmRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Processing: the transfer is queued", body = Refund),
        (status = 400, description = "`invalid_request`: the signature is malformed or not the merchant address's", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`invalid_state_transition`", body = ErrorBody),
        (status = 422, description = "`token_not_supported`, or `chain_not_settled`", body = ErrorBody),
    )
)]
pub async fn confirm(
    State(chains): State<Chains>,
    Extension(merchant): Extension<MerchantId>,
    mut tx: Tx,
    PathParam(id): PathParam,
    JsonBody(request): JsonBody<ConfirmRequest>,
) -> Result<Json<Refund>, ApiError> {
    let confirmed = payments::confirm(&mut tx, &chains, &merchant, &id, &request.signature).await?;
    Ok(Json(confirmed))
}
