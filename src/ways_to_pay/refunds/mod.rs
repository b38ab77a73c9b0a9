//! Refunds (`docs/refunds.md`): money a merchant sends back to the payer of a paid intent. The
//! merchant signs an EIP-3009 authorization from the address the intent paid to the payer; it is
//! confirmed, relayed and seen on chain by the same outbox, relayer and follower as a payment, and
//! booked by a reversing ledger entry. Funds never pass through an account of ours.
//!
//! - `domain`: a refund's id, its nonce, its reason
//! - `state`: the refund state machine
//! - `repo`: SQL on `refunds`: the create under the intent's lock, transitions with their events
//! - `payments`: the rules: what may be refunded, the document the merchant signs, its confirm,
//!   and the outbox kind of a refund's submission
//! - `watch`: what the follower looks for on behalf of refunds
//! - `routes`: the HTTP shape of the above

pub mod domain;
pub mod payments;
pub mod repo;
pub mod routes;
pub mod state;
pub mod watch;

use std::sync::Arc;

use axum::extract::FromRef;

use super::{Routes, WayToPay};
use crate::{
    config::SettlementSettings,
    db::Pool,
    idempotency::IdempotencyState,
    ledger,
    rails::{Chains, outbox::SubmissionKind},
};

/// Paying a payer back.
pub struct Refunds;

impl WayToPay for Refunds {
    type Watch = watch::RefundWatch;

    fn watch(_: &SettlementSettings) -> Self::Watch {
        watch::RefundWatch
    }

    fn submission_kinds() -> Vec<Arc<dyn SubmissionKind>> {
        vec![Arc::new(payments::RefundPayment)]
    }

    fn ledger_kinds() -> Vec<ledger::Kind> {
        vec![ledger::Kind::Refund]
    }

    fn routes<S>(_: &IdempotencyState, _: &Chains) -> Routes<S>
    where
        S: Clone + Send + Sync + 'static,
        Pool: FromRef<S>,
        Chains: FromRef<S>,
    {
        Routes::api(routes::router())
    }
}
