//! An intent paid by a transfer its payer signs (`docs/settlement.md`): an EIP-3009 authorization
//! of the token, or a Permit2 permit for any ERC-20. The document, the confirm that checks the
//! signature and queues the submission, and the watches that settle the intent once the chain
//! used its nonce.
//!
//! - `payments`: the rules of paying an intent (what may be paid, the document, the confirm)
//! - `permit2`: the same by Permit2: the permit, its checks and its submission
//! - `routes`: `GET …/authorization`, `POST …/confirm`, over `payments`
//! - `watch`: what the follower looks for (EIP-3009 nonce uses), and the settlement one makes
//! - `permit2_watch`: permits settled through x402's exact proxy, an intent's or an x402 client's

pub mod payments;
pub mod permit2;
pub mod permit2_watch;
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

/// Paying an intent by its payer's signature. Its submission, the intent's payment, is also what
/// x402's settle queues; its watches see both.
pub struct Authorization;

impl WayToPay for Authorization {
    type Watch = (watch::PaymentWatch, permit2_watch::Permit2Watch);

    fn watch(_: &SettlementSettings) -> Self::Watch {
        (watch::PaymentWatch, permit2_watch::Permit2Watch)
    }

    fn submission_kinds() -> Vec<Arc<dyn SubmissionKind>> {
        vec![Arc::new(IntentPayment)]
    }

    /// A nonce use or cancellation seen on chain, or a permit seen settled, decides what the
    /// intent becomes.
    fn expiry_holds() -> ExpiryHolds {
        let mut observed = watch::NonceKind::names();
        observed.extend(permit2_watch::PermitKind::names());
        ExpiryHolds {
            observed,
            unapplied: vec![],
        }
    }

    fn ledger_kinds() -> Vec<ledger::Kind> {
        vec![ledger::Kind::Payment]
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
