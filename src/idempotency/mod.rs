//! The idempotency layer: one Idempotency-Key, one execution, one answer (`docs/design.md`). Generic
//! over routes: it knows requests and responses, never what a handler does with them.
//!
//! - `key`: the header's grammar
//! - `fingerprint`: what "the same request" means
//! - `store`: claim / complete / release on `idempotency_keys`
//! - `stored`: a handler's answer as it is stored and replayed
//! - `phases`: atomic phases of one request, their recovery points, and "not yet" answers
//! - `transaction`: the request's transaction, which the layer opens and ends and a handler
//!   writes through (`Tx`)
//! - `layer`: the middleware that ties them to a request's transaction
//! - `routes`: `GET /v1/idempotency_keys/{key}`, reconciliation for clients whose retries ran out

mod fingerprint;
mod key;
mod layer;
mod phases;
pub mod routes;
mod store;
mod stored;
pub mod transaction;

pub use fingerprint::Fingerprint;
pub use key::{IdempotencyKey, KeyError};
pub use layer::{IdempotencyOutcome, IdempotencyState, KeyInBody, OutcomeKind, idempotency_layer};
pub use phases::{Phases, Provisional, is_provisional, provisional};
pub use routes::router;
pub use store::{Claim, Lease, LeaseToken, answered_intent, completion_statement, delete_expired};
pub use stored::StoredResponse;
pub use transaction::{Checkpoint, Phase, RequestTransaction, Taken, Tx};

/// Whose keys these are: the authenticated merchant. Keys are unique only within a
/// scope, and the scope comes from credentials, never from the body, so nobody can read or block
/// another merchant's keys by guessing them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scope(String);

impl Scope {
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}
