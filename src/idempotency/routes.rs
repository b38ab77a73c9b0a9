//! Reconciliation for clients whose retries ran out: what happened to my key?

use axum::{Extension, Json, Router, extract::FromRef, extract::State, routing::get};
use serde::Serialize;
use time::OffsetDateTime;

use super::{IdempotencyKey, Scope, store};
use crate::{
    db::Pool,
    error::{ApiError, ErrorBody},
    extract::PathParam,
};

pub fn router<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Pool: FromRef<S>,
{
    Router::new().route("/v1/idempotency_keys/{key}", get(show))
}

/// What the server knows of one of your keys.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct KeyRecord {
    key: String,
    state: String,
    attempt: i32,
    #[serde(with = "time::serde::rfc3339")]
    created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    expires_at: OffsetDateTime,
    /// The first 16 hex digits of SHA-256(method, path, body) of the request that owns the key.
    fingerprint: String,
    /// The stored response's status, once completed.
    response_status: Option<u16>,
    /// The `id` in the stored response body, if any: the resource this key created.
    resource_id: Option<String>,
}

/// The caller's record for a key, or 404; never another scope's (the scope is the credential's).
#[utoipa::path(
    get,
    path = "/v1/idempotency_keys/{key}",
    operation_id = "retrieve_idempotency_key",
    tag = "idempotency",
    params(("key" = String, Path, pattern = "^[!#-~][!-~]{0,254}$", description = "The Idempotency-Key, percent-encoded")),
    responses(
        (status = 200, description = "Your record of this key", body = KeyRecord),
        (status = 400, description = "`idempotency_key_invalid`", body = ErrorBody),
        (status = 404, description = "`not_found`: never used, past its retention, or not yours", body = ErrorBody),
    )
)]
pub async fn show(
    State(pool): State<Pool>,
    Extension(scope): Extension<Scope>,
    PathParam(raw): PathParam,
) -> Result<Json<KeyRecord>, ApiError> {
    let key = IdempotencyKey::parse_bytes(raw.as_bytes())
        .map_err(|e| ApiError::IdempotencyKeyInvalid(e.to_string()))?;
    let record = store::find(&mut *pool.acquire().await?, &scope, &key)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no record of Idempotency-Key \"{key}\"")))?;
    Ok(Json(KeyRecord {
        key: key.to_string(),
        state: record.state,
        attempt: record.attempt,
        created_at: record.created_at,
        expires_at: record.expires_at,
        fingerprint: record.fingerprint.short(),
        response_status: record.response_status,
        resource_id: record.resource_id,
    }))
}
