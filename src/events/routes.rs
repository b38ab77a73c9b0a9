//! `GET /v1/events`, `GET /v1/events/{id}` and `GET /v1/events/{id}/deliveries`: the merchant's own
//! events only.

use axum::{Extension, Json, Router, extract::FromRef, extract::State, routing::get};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::store::{self, DeliveryAttempt, Event};
use crate::{
    auth::MerchantId,
    db::Pool,
    error::{ApiError, ErrorBody},
    extract::{Page, PathParam, QueryParams, page_limit},
    ids,
};

pub fn router<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Pool: FromRef<S>,
{
    Router::new()
        .route("/v1/events", get(list))
        .route("/v1/events/{id}", get(show))
        .route("/v1/events/{id}/deliveries", get(deliveries))
}

/// `GET /v1/events` parameters.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Page size, 1..=100.
    #[param(minimum = 1, maximum = 100, default = 10)]
    limit: Option<i64>,
    /// An event id: the page starts right after it.
    starting_after: Option<String>,
    /// Only events of this type, e.g. `payment_intent.canceled`.
    #[serde(rename = "type")]
    #[param(rename = "type")]
    kind: Option<String>,
}

/// List events, newest first, in cursor pages.
#[utoipa::path(
    get,
    path = "/v1/events",
    operation_id = "list_events",
    tag = "events",
    params(ListParams),
    responses(
        (status = 200, description = "One page", body = Page<Event>),
        (status = 400, description = "`invalid_request`", body = ErrorBody),
    )
)]
pub async fn list(
    State(pool): State<Pool>,
    Extension(merchant): Extension<MerchantId>,
    QueryParams(params): QueryParams<ListParams>,
) -> Result<Json<Page<Event>>, ApiError> {
    let limit = page_limit(params.limit)?;
    let mut conn = pool.acquire().await?;
    let cursor = match params.starting_after {
        None => None,
        Some(id) => Some(
            store::cursor(&mut conn, merchant.as_str(), &id)
                .await?
                .ok_or_else(|| {
                    ApiError::InvalidRequest("starting_after: no such event".to_owned())
                })?,
        ),
    };
    let rows = store::list(
        &mut conn,
        merchant.as_str(),
        params.kind.as_deref(),
        cursor.as_ref(),
        limit + 1,
    )
    .await?;
    Ok(Json(Page::of(rows, limit)))
}

/// Retrieve an event.
#[utoipa::path(
    get,
    path = "/v1/events/{id}",
    operation_id = "retrieve_event",
    tag = "events",
    params(("id" = String, Path, description = "The event id, evt_ + 24 hex digits")),
    responses(
        (status = 200, description = "The event", body = Event),
        (status = 404, description = "`not_found`: absent, expired, or another merchant's", body = ErrorBody),
    )
)]
pub async fn show(
    State(pool): State<Pool>,
    Extension(merchant): Extension<MerchantId>,
    PathParam(id): PathParam,
) -> Result<Json<Event>, ApiError> {
    let id = parse_id(&id)?;
    store::find(&mut *pool.acquire().await?, merchant.as_str(), id)
        .await?
        .map(Json)
        .ok_or_else(|| not_found(id))
}

/// Every attempt to deliver an event.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryList {
    data: Vec<DeliveryAttempt>,
}

/// List the attempts to deliver an event to your webhook endpoints, oldest first.
#[utoipa::path(
    get,
    path = "/v1/events/{id}/deliveries",
    operation_id = "list_event_deliveries",
    tag = "events",
    params(("id" = String, Path, description = "The event id")),
    responses(
        (status = 200, description = "Every attempt so far", body = DeliveryList),
        (status = 404, description = "`not_found`", body = ErrorBody),
    )
)]
pub async fn deliveries(
    State(pool): State<Pool>,
    Extension(merchant): Extension<MerchantId>,
    PathParam(id): PathParam,
) -> Result<Json<DeliveryList>, ApiError> {
    let id = parse_id(&id)?;
    let mut conn = pool.acquire().await?;
    if store::find(&mut conn, merchant.as_str(), id)
        .await?
        .is_none()
    {
        return Err(not_found(id));
    }
    let data = store::attempts(&mut conn, merchant.as_str(), id).await?;
    Ok(Json(DeliveryList { data }))
}

fn parse_id(raw: &str) -> Result<&str, ApiError> {
    if ids::is_valid("evt_", raw) {
        Ok(raw)
    } else {
        Err(ApiError::NotFound("no event with that id".to_owned()))
    }
}

fn not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("no event {id}"))
}
