//! The one error type of the API. Every error body is `{"error":"<code>","detail":"<sentence>"}`
//! (SPEC §4); internals are logged, never sent.

use axum::{
    Json,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Serialize;

/// Marks a response whose handler transaction failed at the database: the idempotency layer must
/// roll back and not store it (SPEC §5.5), since provably nothing was written.
#[derive(Debug, Clone, Copy)]
pub struct TransactionFailed;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error("{0}")]
    IdempotencyKeyInvalid(String),
    #[error("this endpoint requires an Idempotency-Key header")]
    IdempotencyKeyMissing,
    #[error("a valid API key is required: send Authorization: Bearer <token>")]
    Unauthorized,
    #[error("this endpoint does not accept that method")]
    MethodNotAllowed,
    #[error("{0}")]
    NotFound(String),
    #[error(
        "a request with Idempotency-Key \"{key}\" is still being processed; retry after {retry_after_seconds} s"
    )]
    IdempotencyKeyInFlight {
        key: String,
        retry_after_seconds: u64,
    },
    #[error(
        "this attempt for Idempotency-Key \"{key}\" ran past its lease and another attempt took over; its work was rolled back. Retry with the same key to get the result"
    )]
    IdempotencyKeyLeaseLost { key: String },
    #[error("{0}")]
    InvalidStateTransition(String),
    #[error("the request body is larger than the limit of {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error(
        "Idempotency-Key \"{key}\" was already used for a different request (fingerprint {stored}, got {got})"
    )]
    IdempotencyKeyReused {
        key: String,
        stored: String,
        got: String,
    },
    /// A bug or an unexpected state; the cause is logged, never sent.
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
    /// The database could not be reached or failed the request; nothing was committed.
    #[error("database error")]
    Database(#[from] sqlx::Error),
    #[error("the request did not finish within {seconds} s; retry with the same Idempotency-Key")]
    Timeout { seconds: u64 },
    /// The client did not send its whole body within the request timeout.
    #[error("the request body did not arrive within {seconds} s")]
    BodyTimeout { seconds: u64 },
    /// Not ready to serve (readiness probe).
    #[error("{0}")]
    Unready(String),
}

/// The body of every error response.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// A stable, machine-readable code, e.g. `idempotency_key_reused`.
    pub error: &'static str,
    /// A sentence for humans; its wording may change.
    pub detail: String,
}

/// How long clients should wait before retrying when the database is unreachable.
const UNAVAILABLE_RETRY_AFTER_SECONDS: u64 = 1;

impl ApiError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidRequest(_) => "invalid_request",
            Self::IdempotencyKeyInvalid(_) => "idempotency_key_invalid",
            Self::IdempotencyKeyMissing => "idempotency_key_missing",
            Self::Unauthorized => "unauthorized",
            Self::NotFound(_) => "not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::BodyTimeout { .. } => "request_timeout",
            Self::IdempotencyKeyInFlight { .. } => "idempotency_key_in_flight",
            Self::IdempotencyKeyLeaseLost { .. } => "idempotency_key_lease_lost",
            Self::InvalidStateTransition(_) => "invalid_state_transition",
            Self::PayloadTooLarge { .. } => "payload_too_large",
            Self::IdempotencyKeyReused { .. } => "idempotency_key_reused",
            Self::Internal(_) => "internal_error",
            Self::Database(e) if !is_unavailable(e) => "internal_error",
            Self::Database(_) | Self::Timeout { .. } | Self::Unready(_) => "unavailable",
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidRequest(_)
            | Self::IdempotencyKeyInvalid(_)
            | Self::IdempotencyKeyMissing => StatusCode::BAD_REQUEST,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::IdempotencyKeyInFlight { .. }
            | Self::IdempotencyKeyLeaseLost { .. }
            | Self::InvalidStateTransition(_) => StatusCode::CONFLICT,
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::IdempotencyKeyReused { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Database(e) if !is_unavailable(e) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Database(_) | Self::Timeout { .. } | Self::Unready(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
        }
    }

    fn detail(&self) -> String {
        match self {
            Self::Internal(_) => "an internal error occurred; it has been logged".to_owned(),
            Self::Database(e) if !is_unavailable(e) => {
                "an internal error occurred; nothing was committed, the request may be retried".to_owned()
            }
            Self::Database(_) => {
                "the database is unavailable; nothing was committed, retry with the same Idempotency-Key".to_owned()
            }
            other => other.to_string(),
        }
    }
}

/// Errors of reaching the database, as opposed to errors of the statement itself.
pub fn is_unavailable(error: &sqlx::Error) -> bool {
    if crate::db::is_connection_lost(error) {
        return true;
    }
    match error {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Tls(_) => true,
        // 53xxx (insufficient resources), 40001/40P01 (serialization failure, deadlock): all say
        // "try again", none says the request was wrong.
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|code| code.starts_with("53") || code == "40001" || code == "40P01"),
        _ => false,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        match &self {
            Self::Internal(e) => tracing::error!(error = ?e, "internal error"),
            Self::Database(e) => {
                tracing::error!(error = %e, "database error");
                if crate::db::is_connection_lost(e) {
                    crate::db::distrust_idle_connections();
                }
            }
            _ => {}
        }
        let body = ErrorBody {
            error: self.code(),
            detail: self.detail(),
        };
        let mut response = (status, Json(body)).into_response();
        let headers = response.headers_mut();
        match &self {
            Self::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            Self::IdempotencyKeyInFlight {
                retry_after_seconds,
                ..
            } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_seconds));
            }
            _ if status == StatusCode::SERVICE_UNAVAILABLE => {
                headers.insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(UNAVAILABLE_RETRY_AFTER_SECONDS),
                );
            }
            _ => {}
        }
        if matches!(self, Self::Database(_)) {
            response.extensions_mut().insert(TransactionFailed);
        }
        response
    }
}
