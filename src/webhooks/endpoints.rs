//! `/v1/webhook_endpoints`: where a merchant wants its events, and the secret that signs them.

use axum::{
    Extension, Json, Router,
    extract::{FromRef, State},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use time::OffsetDateTime;
use utoipa::ToSchema;

use super::{
    WebhookState,
    address::{check_resolves, check_url},
    secret::Secret,
};
use crate::{
    auth::MerchantId,
    config::WebhookSettings,
    error::{ApiError, ErrorBody},
    events,
    extract::{JsonBody, PathParam},
    idempotency::Tx,
    ids,
};

pub fn router<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    WebhookState: FromRef<S>,
{
    Router::new()
        .route("/v1/webhook_endpoints", post(create).get(list))
        .route("/v1/webhook_endpoints/{id}", get(show).delete(remove))
        .route(
            "/v1/webhook_endpoints/{id}/rotate_secret",
            post(rotate_secret),
        )
}

/// A webhook endpoint as the API shows it; field order is the response's key order.
#[derive(Debug, Serialize, ToSchema)]
pub struct Endpoint {
    /// `we_` + 24 lowercase hex digits.
    pub id: String,
    pub url: String,
    pub description: Option<String>,
    /// The event types sent here; `null` means every type.
    pub event_types: Option<Vec<String>>,
    /// `enabled`, or `disabled` once every attempt failed for 5 days.
    pub state: String,
    #[serde(with = "time::serde::rfc3339::option")]
    pub disabled_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// `whsec_` + base64 of 32 random bytes: shown only when the endpoint is created and when the
    /// secret is rotated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

struct EndpointRow {
    id: String,
    url: String,
    description: Option<String>,
    event_types: Option<Vec<String>>,
    disabled_at: Option<OffsetDateTime>,
    created_at: OffsetDateTime,
    secret: String,
}

impl EndpointRow {
    fn shown(self, with_secret: bool) -> Endpoint {
        Endpoint {
            id: self.id,
            url: self.url,
            description: self.description,
            event_types: self.event_types,
            state: if self.disabled_at.is_some() {
                "disabled"
            } else {
                "enabled"
            }
            .to_owned(),
            disabled_at: self.disabled_at,
            created_at: self.created_at,
            secret: with_secret.then_some(self.secret),
        }
    }
}

/// The create request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateEndpoint {
    /// `https://…` (or `http://…` where the server allows it), on a public address.
    pub url: String,
    /// The event types to send here; absent means every type.
    pub event_types: Option<Vec<String>>,
    /// For you; at most 500 characters.
    pub description: Option<String>,
}

/// Create a webhook endpoint. The answer is the only one that shows the secret (and its replays).
#[utoipa::path(
    post,
    path = "/v1/webhook_endpoints",
    operation_id = "create_webhook_endpoint",
    tag = "webhooks",
    request_body(content = CreateEndpoint, content_type = "application/json"),
    responses(
        (status = 201, description = "Created, with its secret", body = Endpoint,
         headers(("Location" = String, description = "/v1/webhook_endpoints/{id}"))),
        (status = 400, description = "`invalid_request`", body = ErrorBody),
    )
)]
pub async fn create(
    State(state): State<WebhookState>,
    Extension(merchant): Extension<MerchantId>,
    mut tx: Tx,
    JsonBody(request): JsonBody<CreateEndpoint>,
) -> Result<Response, ApiError> {
    let endpoint = add(&mut tx, &state.settings, &merchant, request).await?;
    let location = HeaderValue::try_from(format!("/v1/webhook_endpoints/{}", endpoint.id))
        .map_err(|e| ApiError::Internal(e.into()))?;
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(endpoint),
    )
        .into_response())
}

/// Checks a new endpoint (its URL on a public address, its event types, its description) and
/// stores it with a new secret, shown in the answer: the API's create and the dashboard's come
/// here.
pub async fn add(
    conn: &mut PgConnection,
    settings: &WebhookSettings,
    merchant: &MerchantId,
    request: CreateEndpoint,
) -> Result<Endpoint, ApiError> {
    let invalid = |field: &str, why: String| ApiError::InvalidRequest(format!("{field}: {why}"));
    let url = check_url(&request.url, settings).map_err(|e| invalid("url", e))?;
    check_resolves(&url, settings)
        .await
        .map_err(|e| invalid("url", e))?;
    if let Some(types) = &request.event_types {
        if types.is_empty() {
            return Err(invalid(
                "event_types",
                "leave it out for every type".to_owned(),
            ));
        }
        if let Some(unknown) = types.iter().find(|t| !events::TYPES.contains(&t.as_str())) {
            let known = events::TYPES.join(", ");
            return Err(invalid(
                "event_types",
                format!("unknown type {unknown:?}; known: {known}"),
            ));
        }
    }
    if request
        .description
        .as_ref()
        .is_some_and(|d| d.chars().count() > 500)
    {
        return Err(invalid(
            "description",
            "longer than 500 characters".to_owned(),
        ));
    }
    let secret = Secret::generate();
    let row = sqlx::query_as!(
        EndpointRow,
        r#"
        INSERT INTO webhook_endpoints (merchant_id, id, url, description, event_types, secret)
        VALUES ($1, $2, $3, $4, $5, $6)
        RETURNING id, url, description, event_types, disabled_at, created_at, secret
        "#,
        merchant.as_str(),
        ids::generate("we_"),
        url.as_str(),
        request.description,
        request.event_types.as_deref(),
        secret.as_str(),
    )
    .fetch_one(conn)
    .await?;
    Ok(row.shown(true))
}

/// Every endpoint of yours.
#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointList {
    data: Vec<Endpoint>,
}

/// List your webhook endpoints, newest first (secrets are not shown).
#[utoipa::path(
    get,
    path = "/v1/webhook_endpoints",
    operation_id = "list_webhook_endpoints",
    tag = "webhooks",
    responses((status = 200, description = "Every endpoint", body = EndpointList))
)]
pub async fn list(
    State(state): State<WebhookState>,
    Extension(merchant): Extension<MerchantId>,
) -> Result<Json<EndpointList>, ApiError> {
    let data = endpoints_of(&mut *state.pool.acquire().await?, &merchant).await?;
    Ok(Json(EndpointList { data }))
}

/// The merchant's endpoints, newest first, without their secrets.
pub async fn endpoints_of(
    conn: &mut PgConnection,
    merchant: &MerchantId,
) -> Result<Vec<Endpoint>, sqlx::Error> {
    let rows = sqlx::query_as!(
        EndpointRow,
        r#"
        SELECT id, url, description, event_types, disabled_at, created_at, secret
          FROM webhook_endpoints WHERE merchant_id = $1
         ORDER BY created_at DESC, id DESC
        "#,
        merchant.as_str(),
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|row| row.shown(false)).collect())
}

/// Retrieve a webhook endpoint (its secret is not shown).
#[utoipa::path(
    get,
    path = "/v1/webhook_endpoints/{id}",
    operation_id = "retrieve_webhook_endpoint",
    tag = "webhooks",
    params(("id" = String, Path, description = "The endpoint id, we_ + 24 hex digits")),
    responses(
        (status = 200, description = "The endpoint", body = Endpoint),
        (status = 404, description = "`not_found`", body = ErrorBody),
    )
)]
pub async fn show(
    State(state): State<WebhookState>,
    Extension(merchant): Extension<MerchantId>,
    PathParam(id): PathParam,
) -> Result<Json<Endpoint>, ApiError> {
    let id = parse_id(&id)?;
    find(&mut *state.pool.acquire().await?, &merchant, id)
        .await?
        .map(|row| Json(row.shown(false)))
        .ok_or_else(|| not_found(id))
}

/// `merchant`'s endpoint `id`, shown without its secret.
pub async fn endpoint_of(
    conn: &mut PgConnection,
    merchant: &MerchantId,
    id: &str,
) -> Result<Option<Endpoint>, sqlx::Error> {
    Ok(find(conn, merchant, id).await?.map(|row| row.shown(false)))
}

async fn find(
    conn: &mut PgConnection,
    merchant: &MerchantId,
    id: &str,
) -> Result<Option<EndpointRow>, sqlx::Error> {
    sqlx::query_as!(
        EndpointRow,
        r#"
        SELECT id, url, description, event_types, disabled_at, created_at, secret
          FROM webhook_endpoints WHERE merchant_id = $1 AND id = $2
        "#,
        merchant.as_str(),
        id,
    )
    .fetch_optional(conn)
    .await
}

/// What a delete answers.
#[derive(Debug, Serialize, ToSchema)]
pub struct Deleted {
    id: String,
    deleted: bool,
}

/// Delete a webhook endpoint: nothing more is sent to it, and its pending deliveries are dropped.
#[utoipa::path(
    delete,
    path = "/v1/webhook_endpoints/{id}",
    operation_id = "delete_webhook_endpoint",
    tag = "webhooks",
    params(("id" = String, Path, description = "The endpoint id")),
    responses(
        (status = 200, description = "Deleted", body = Deleted),
        (status = 404, description = "`not_found`", body = ErrorBody),
    )
)]
pub async fn remove(
    State(state): State<WebhookState>,
    Extension(merchant): Extension<MerchantId>,
    PathParam(id): PathParam,
) -> Result<Json<Deleted>, ApiError> {
    let id = parse_id(&id)?;
    if !delete(&mut *state.pool.acquire().await?, &merchant, id).await? {
        return Err(not_found(id));
    }
    Ok(Json(Deleted {
        id: id.to_owned(),
        deleted: true,
    }))
}

/// Deletes an endpoint and its deliveries; whether it was there.
pub async fn delete(
    conn: &mut PgConnection,
    merchant: &MerchantId,
    id: &str,
) -> Result<bool, sqlx::Error> {
    let deleted = sqlx::query!(
        r#"
        WITH deliveries AS (
            DELETE FROM webhook_deliveries WHERE merchant_id = $1 AND endpoint_id = $2
        )
        DELETE FROM webhook_endpoints WHERE merchant_id = $1 AND id = $2
        "#,
        merchant.as_str(),
        id,
    )
    .execute(conn)
    .await?;
    Ok(deleted.rows_affected() == 1)
}

/// How long the previous secret keeps signing after a rotation, so receivers can switch over.
const PREVIOUS_SECRET_SIGNS_FOR_HOURS: i32 = 24;

/// Replace the endpoint's secret. For 24 hours deliveries carry two signatures, one by each secret.
#[utoipa::path(
    post,
    path = "/v1/webhook_endpoints/{id}/rotate_secret",
    operation_id = "rotate_webhook_endpoint_secret",
    tag = "webhooks",
    params(("id" = String, Path, description = "The endpoint id")),
    request_body(content = Option<Object>, content_type = "application/json", description = "Empty, or `{}`"),
    responses(
        (status = 200, description = "The endpoint with its new secret", body = Endpoint),
        (status = 404, description = "`not_found`", body = ErrorBody),
    )
)]
pub async fn rotate_secret(
    Extension(merchant): Extension<MerchantId>,
    mut tx: Tx,
    PathParam(id): PathParam,
) -> Result<Json<Endpoint>, ApiError> {
    let id = parse_id(&id)?;
    rotate(&mut tx, &merchant, id)
        .await?
        .map(Json)
        .ok_or_else(|| not_found(id))
}

/// A new secret for the endpoint, shown in the answer; the old one signs beside it for a day.
pub async fn rotate(
    conn: &mut PgConnection,
    merchant: &MerchantId,
    id: &str,
) -> Result<Option<Endpoint>, sqlx::Error> {
    let secret = Secret::generate();
    Ok(sqlx::query_as!(
        EndpointRow,
        r#"
        UPDATE webhook_endpoints
           SET previous_secret = secret,
               previous_secret_until = now() + make_interval(hours => $4),
               secret = $3
         WHERE merchant_id = $1 AND id = $2
        RETURNING id, url, description, event_types, disabled_at, created_at, secret
        "#,
        merchant.as_str(),
        id,
        secret.as_str(),
        PREVIOUS_SECRET_SIGNS_FOR_HOURS,
    )
    .fetch_optional(conn)
    .await?
    .map(|row| row.shown(true)))
}

fn parse_id(raw: &str) -> Result<&str, ApiError> {
    if ids::is_valid("we_", raw) {
        Ok(raw)
    } else {
        Err(ApiError::NotFound(
            "no webhook endpoint with that id".to_owned(),
        ))
    }
}

fn not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("no webhook endpoint {id}"))
}
