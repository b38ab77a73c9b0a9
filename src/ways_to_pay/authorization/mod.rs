//! An intent paid by an EIP-3009 authorization its payer signs (`docs/settlement.md`): the
//! document, the confirm that checks the signature and queues the submission, and the watch that
//! settles the intent once the chain used its nonce.
//!
//! - `payments`: the rules of paying an intent (what may be paid, the document, the confirm) and
//!   the submission kind that says when its payment is no longer wanted
//! - `routes`: `GET …/authorization`, `POST …/confirm`, over `payments`
//! - `watch`: what the follower looks for (nonce uses), and the settlement a confirmed one makes

pub mod payments;
pub mod routes;
pub mod watch;

use std::sync::Arc;

use axum::extract::FromRef;

use super::{Routes, WayToPay};
use crate::{
    config::SettlementSettings,
    db::Pool,
    idempotency::IdempotencyState,
    intents::expiry::ExpiryHolds,
    intents::payment::IntentPayment,
    ledger,
    rails::{Chains, follower::ObservationKind, outbox::SubmissionKind},
};

/// Paying an intent by its payer's authorization. Its submission, the intent's payment, is also
/// what x402's settle queues; its watch sees both.
pub struct Authorization;

impl WayToPay for Authorization {
    type Watch = watch::PaymentWatch;

    fn watch(_: &SettlementSettings) -> Self::Watch {
        watch::PaymentWatch
    }

    fn submission_kinds() -> Vec<Arc<dyn SubmissionKind>> {
        vec![Arc::new(IntentPayment)]
    }

    /// A nonce use or cancellation seen on chain decides what the intent becomes.
    fn expiry_holds() -> ExpiryHolds {
        ExpiryHolds {
            observed: watch::NonceKind::names(),
            unapplied: vec![],
        }
    }

    fn ledger_kinds() -> Vec<ledger::Kind> {
        vec![ledger::Kind::Payment]
    }

    fn routes<S>(_: &IdempotencyState) -> Routes<S>
    where
        S: Clone + Send + Sync + 'static,
        Pool: FromRef<S>,
        Chains: FromRef<S>,
    {
        Routes::api(routes::router())
    }
}
