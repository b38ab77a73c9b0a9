//! The one error type of the API. Every error body is `{"error":"<code>","detail":"<sentence>"}`
//! (`docs/api.md`, "Errors"); internals are logged by the access log, never sent.

use std::sync::Arc;

use axum::{
    Json,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Serialize;

use crate::db::{CommitError, Failure};

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
    /// An order is being paid by one of its options: no other can pay it.
    #[error("{0}")]
    PaymentInProgress(String),
    /// A refund would take back more than its intent was paid, counting the refunds before it.
    #[error("{0}")]
    RefundExceedsPayment(String),
    /// Too many requests: a merchant's past its limits, or a checkout page's confirms of one
    /// intent; nothing was done.
    #[error("{reason}; retry after {retry_after_seconds} s")]
    RateLimited {
        retry_after_seconds: u64,
        reason: &'static str,
    },
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
    /// An x402 payment identifier (the settle's key) sent before with another payload.
    #[error("{0}")]
    PaymentIdentifierReused(String),
    /// A bug or an unexpected state; the cause is logged, never sent.
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
    /// The database could not be reached or failed the request; nothing was committed.
    #[error("database error")]
    Database(#[source] sqlx::Error),
    /// The `COMMIT` was sent and the connection failed before its answer came back: the request
    /// may or may not have been applied. `key` is the request's Idempotency-Key, if it had one.
    #[error("the outcome of the commit is unknown")]
    CommitOutcomeUnknown {
        key: Option<String>,
        #[source]
        cause: sqlx::Error,
    },
    #[error(
        "the request did not finish within {seconds} s and whether it was applied is unknown: {}",
        retry_advice(*keyed)
    )]
    Timeout { seconds: u64, keyed: bool },
    /// The client did not send its whole body within the request timeout.
    #[error("the request body did not arrive within {seconds} s")]
    BodyTimeout { seconds: u64 },
    /// Not ready to serve (readiness probe).
    #[error("{0}")]
    Unready(String),
    /// The intent's token does not implement EIP-3009, so it cannot be paid by authorization.
    #[error("{0}")]
    TokenNotSupported(String),
    /// The intent names a chain this server is not configured to settle (`CHAINS`).
    #[error("{0}")]
    ChainNotSettled(String),
    /// A Permit2 payment whose payer has not let Permit2 move the amount: it approves Permit2
    /// for the token first, then confirms again.
    #[error("{0}")]
    Permit2AllowanceRequired(String),
    /// The chain's node did not answer what this request needs from it; nothing was changed.
    #[error("{0}")]
    ChainUnavailable(String),
    /// What the request was made from changed under it more than once; nothing was changed, and
    /// the same request sent again is made from what holds then.
    #[error("{0}; nothing was done, so the request may be sent again")]
    ChangedMeanwhile(String),
}

/// What a client whose request timed out should do, with or without an Idempotency-Key.
fn retry_advice(keyed: bool) -> &'static str {
    if keyed {
        "retry with the same Idempotency-Key to learn the outcome"
    } else {
        "check before sending it again (an Idempotency-Key makes retries safe)"
    }
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

/// Every database error a request meets passes here on its way to an answer, so this is where the
/// pool hears that connections are dying ([`crate::db::observe`]).
impl From<sqlx::Error> for ApiError {
    fn from(error: sqlx::Error) -> Self {
        crate::db::observe(&error);
        Self::Database(error)
    }
}

/// The error a response was rendered from, attached to it so that what wraps the handler can act
/// on it (the idempotency layer rolls back, the access log logs the cause) without parsing bodies.
#[derive(Debug, Clone)]
pub struct RenderedError(pub Arc<ApiError>);

impl ApiError {
    /// A bug or an impossible state, described for the log.
    pub fn internal(what: &str) -> Self {
        Self::Internal(anyhow::anyhow!("{what}"))
    }

    /// The error `response` was rendered from, if it was rendered from one.
    pub fn of(response: &Response) -> Option<&ApiError> {
        response
            .extensions()
            .get::<RenderedError>()
            .map(|rendered| &*rendered.0)
    }

    /// Whether the handler failed on something outside it (the database, a chain, a payer's Permit2
    /// approval still to come) before changing anything: its transaction is rolled back and nothing is stored for replay.
    pub fn changed_nothing(&self) -> bool {
        matches!(
            self,
            Self::Database(_)
                | Self::ChainUnavailable(_)
                | Self::Permit2AllowanceRequired(_)
                | Self::RateLimited { .. }
                | Self::ChangedMeanwhile(_)
        )
    }

    /// Whether the database failed in a way no retry fixes (a 500), as opposed to being
    /// unreachable for now (a 503).
    fn is_database_bug(&self) -> bool {
        matches!(self, Self::Database(e) if !Failure::of(e).is_transient())
    }

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
            Self::PaymentInProgress(_) => "payment_in_progress",
            Self::RefundExceedsPayment(_) => "refund_exceeds_payment",
            Self::PayloadTooLarge { .. } => "payload_too_large",
            Self::RateLimited { .. } => "rate_limited",
            Self::IdempotencyKeyReused { .. } => "idempotency_key_reused",
            Self::PaymentIdentifierReused(_) => "payment_identifier_reused",
            Self::TokenNotSupported(_) => "token_not_supported",
            Self::ChainNotSettled(_) => "chain_not_settled",
            Self::Permit2AllowanceRequired(_) => "permit2_allowance_required",
            Self::Internal(_) => "internal_error",
            _ if self.is_database_bug() => "internal_error",
            Self::Database(_)
            | Self::CommitOutcomeUnknown { .. }
            | Self::Timeout { .. }
            | Self::Unready(_)
            | Self::ChainUnavailable(_)
            | Self::ChangedMeanwhile(_) => "unavailable",
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
            | Self::InvalidStateTransition(_)
            | Self::PaymentInProgress(_)
            | Self::RefundExceedsPayment(_)
            | Self::PaymentIdentifierReused(_) => StatusCode::CONFLICT,
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::IdempotencyKeyReused { .. }
            | Self::TokenNotSupported(_)
            | Self::ChainNotSettled(_)
            | Self::Permit2AllowanceRequired(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            _ if self.is_database_bug() => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Database(_)
            | Self::CommitOutcomeUnknown { .. }
            | Self::Timeout { .. }
            | Self::Unready(_)
            | Self::ChainUnavailable(_)
            | Self::ChangedMeanwhile(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn detail(&self) -> String {
        match self {
            Self::Internal(_) => "an internal error occurred; it has been logged".to_owned(),
            _ if self.is_database_bug() => {
                "an internal error occurred; nothing was committed, the request may be retried".to_owned()
            }
            Self::Database(e) if let Some(advice) = crate::db::advice(e) => {
                format!("{advice}; nothing was committed")
            }
            Self::Database(_) => {
                "the database is unavailable; nothing was committed, so the request may be sent again (with the same Idempotency-Key, if it had one)".to_owned()
            }
            Self::CommitOutcomeUnknown { key: Some(key), .. } => format!(
                "the connection to the database was lost after the commit was sent, so whether this request was applied is unknown; retry with the same Idempotency-Key \"{key}\" to learn the outcome"
            ),
            Self::CommitOutcomeUnknown { key: None, .. } => {
                "the connection to the database was lost after the commit was sent: the request may have been applied; check before sending it again (an Idempotency-Key makes retries safe)".to_owned()
            }
            other => other.to_string(),
        }
    }
}

/// A `COMMIT` of a transaction without an Idempotency-Key (the idempotency layer maps its own).
impl From<CommitError> for ApiError {
    fn from(error: CommitError) -> Self {
        match error {
            CommitError::RolledBack(e) => e.into(),
            CommitError::OutcomeUnknown(cause) => Self::CommitOutcomeUnknown { key: None, cause },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
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
            }
            | Self::RateLimited {
                retry_after_seconds,
                ..
            } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_seconds));
            }
            // The body was not read to its end: the connection cannot carry another request, and
            // a client that pools connections must hear so rather than send its next call on it.
            Self::PayloadTooLarge { .. } | Self::BodyTimeout { .. } => {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ if status == StatusCode::SERVICE_UNAVAILABLE => {
                headers.insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(UNAVAILABLE_RETRY_AFTER_SECONDS),
                );
            }
            _ => {}
        }
        response
            .extensions_mut()
            .insert(RenderedError(Arc::new(self)));
        response
    }
}
