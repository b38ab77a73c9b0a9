//! Atomic phases (`docs/design.md`, "Atomic phases"): a handler that must commit before it waits
//! commits a phase with a recovery point, and an attempt that takes its key over is told where the
//! abandoned one got to, so it resumes there instead of running the request again.

use axum::{extract::FromRequestParts, http::request::Parts, response::Response};

use super::IdempotencyKey;
use crate::{
    db::CommitError,
    error::ApiError,
    idempotency::{Phase, Tx},
};

/// What a handler knows of its request's phases: its key, if it has one, and the recovery point an
/// earlier attempt of the same key committed, if any. Unkeyed requests have neither.
#[derive(Debug, Clone, Default)]
pub struct Phases {
    key: Option<IdempotencyKey>,
    recovery_point: Option<String>,
}

impl Phases {
    pub(super) fn new(key: Option<IdempotencyKey>, recovery_point: Option<String>) -> Self {
        Self {
            key,
            recovery_point,
        }
    }

    /// The recovery point to resume at: `None` runs the request from the start.
    pub fn recovery_point(&self) -> Option<&str> {
        self.recovery_point.as_deref()
    }

    /// The request's Idempotency-Key, if it carries one.
    pub fn key(&self) -> Option<&IdempotencyKey> {
        self.key.as_ref()
    }

    /// Commits `tx` as a phase that reached `point` ([`Tx::commit_phase`]), answering as the layer
    /// would when the commit fails: 409 when another attempt took the key over (the phase rolled
    /// back), 503 when whether it committed is unknown (a retry resumes or starts, as it did).
    pub async fn commit(&self, tx: Tx, point: &str) -> Result<Phase, ApiError> {
        tx.commit_phase(point).await.map_err(|e| match e {
            CommitError::RolledBack(e) if super::store::is_lease_lost(&e) => {
                ApiError::IdempotencyKeyLeaseLost {
                    key: self
                        .key
                        .as_ref()
                        .map(ToString::to_string)
                        .unwrap_or_default(),
                }
            }
            CommitError::RolledBack(e) => e.into(),
            CommitError::OutcomeUnknown(cause) => ApiError::CommitOutcomeUnknown {
                key: self.key.as_ref().map(ToString::to_string),
                cause,
            },
        })
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Phases {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parts
            .extensions
            .get::<Phases>()
            .cloned()
            .ok_or_else(|| ApiError::internal("route is not wrapped by the idempotency layer"))
    }
}

/// Marks an answer that says "not yet" after a phase committed (an x402 settle whose transfer is
/// not in a block by the deadline): it is sent, but not stored as the key's answer. The lease ends
/// at once, so a retry with the same key takes over at the recovery point and learns the outcome.
#[derive(Debug, Clone, Copy)]
pub struct Provisional;

/// `response`, marked [`Provisional`].
pub fn provisional(mut response: Response) -> Response {
    response.extensions_mut().insert(Provisional);
    response
}

/// Whether `response` is marked [`Provisional`].
pub fn is_provisional(response: &Response) -> bool {
    response.extensions().get::<Provisional>().is_some()
}
