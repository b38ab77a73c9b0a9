//! The ways to pay, each a folder of its own riding the shared rails (`crate::rails`), never a
//! sibling (`docs/design.md`, "How to add a way to pay"):
//!
//! - `authorization`: an intent paid by its payer's EIP-3009 authorization, confirmed through the
//!   API or the checkout page
//! - `deposit_address`: an intent paid by plain transfers to an address of its own
//! - `x402`: payments-api as an x402 facilitator (`exact` on EVM chains)
//! - `refunds`: money a merchant sends back to the payer of a paid intent
//!
//! Each registers once, as a [`WayToPay`] in [`Registered`]; startup and the router ask
//! [`Registered`] for the submission kinds, the watch, the expiry holds and the routes.

pub mod authorization;
pub mod deposit_address;
pub mod refunds;
pub mod x402;

use std::sync::Arc;

use axum::{Router, extract::FromRef};

use crate::{
    config::SettlementSettings,
    db::Pool,
    idempotency::IdempotencyState,
    intents::expiry::{ChainTimeExpiry, ExpiryHolds},
    ledger,
    rails::{Chains, follower::Watch, outbox},
};

/// A pair of ways, nested to the right: `ways![A, B, C]` is `(A, (B, C))`.
macro_rules! ways {
    ($one:ty) => { $one };
    ($first:ty, $($rest:ty),+) => { ($first, ways!($($rest),+)) };
}

/// Every way to pay this server serves, each named once.
pub type Registered = ways![
    authorization::Authorization,
    deposit_address::DepositAddress,
    x402::X402,
    refunds::Refunds
];

/// Where a way to pay's routes are served.
pub struct Routes<S> {
    /// Behind every `/v1` layer: the merchant's key and limits, a turn at the database, and the
    /// idempotency layer on every POST.
    pub api: Router<S>,
    /// Behind the merchant's key, its limits and the deadline only: the way to pay applies
    /// idempotency itself and takes no turn (x402's settle waits for its block holding none).
    pub own: Router<S>,
}

impl<S: Clone + Send + Sync + 'static> Routes<S> {
    pub fn api(api: Router<S>) -> Self {
        Self {
            api,
            own: Router::new(),
        }
    }

    fn merge(self, other: Self) -> Self {
        Self {
            api: self.api.merge(other.api),
            own: self.own.merge(other.own),
        }
    }
}

/// A way to pay: all that the rails, the intents, the ledger and the router need of it. What it
/// does not provide it has none of.
pub trait WayToPay {
    /// What it looks for on every settled chain; `()` for a way whose payments another's watch
    /// sees.
    type Watch: Watch + Clone;

    fn watch(settings: &SettlementSettings) -> Self::Watch;

    /// What it queues for the relayer to send.
    fn submission_kinds() -> Vec<Arc<dyn outbox::SubmissionKind>> {
        Vec::new()
    }

    /// The observations of an intent that keep it from expiring while the chain settles it.
    fn expiry_holds() -> ExpiryHolds {
        ExpiryHolds::default()
    }

    /// The ledger entries its watch books.
    fn ledger_kinds() -> Vec<ledger::Kind> {
        Vec::new()
    }

    fn routes<S>(idempotency: &IdempotencyState, chains: &Chains) -> Routes<S>
    where
        S: Clone + Send + Sync + 'static,
        Pool: FromRef<S>,
        Chains: FromRef<S>,
    {
        let _ = (idempotency, chains);
        Routes::api(Router::new())
    }
}

/// Two ways to pay as one: their watches joined on one follower per chain, everything else listed
/// side by side.
impl<A: WayToPay, B: WayToPay> WayToPay for (A, B) {
    type Watch = (A::Watch, B::Watch);

    fn watch(settings: &SettlementSettings) -> Self::Watch {
        (A::watch(settings), B::watch(settings))
    }

    fn submission_kinds() -> Vec<Arc<dyn outbox::SubmissionKind>> {
        let mut kinds = A::submission_kinds();
        kinds.extend(B::submission_kinds());
        kinds
    }

    fn expiry_holds() -> ExpiryHolds {
        A::expiry_holds().join(B::expiry_holds())
    }

    fn ledger_kinds() -> Vec<ledger::Kind> {
        let mut kinds = A::ledger_kinds();
        kinds.extend(B::ledger_kinds());
        kinds
    }

    fn routes<S>(idempotency: &IdempotencyState, chains: &Chains) -> Routes<S>
    where
        S: Clone + Send + Sync + 'static,
        Pool: FromRef<S>,
        Chains: FromRef<S>,
    {
        A::routes(idempotency, chains).merge(B::routes(idempotency, chains))
    }
}

/// What the relayer sends: every way to pay's submission kinds.
pub fn submission_kinds() -> outbox::Kinds {
    outbox::Kinds::new(Registered::submission_kinds())
}

/// What the chain follower looks for: every way to pay's watch on one cursor per chain, and the
/// intents' expiry by the confirmed chain's time, held off by what they observed.
pub fn chain_watch(settings: &SettlementSettings) -> impl Watch + Clone {
    let expiry = ChainTimeExpiry {
        holds: Arc::new(expiry_holds()),
    };
    (Registered::watch(settings), expiry)
}

/// What every way to pay observed that holds an intent off expiring.
pub fn expiry_holds() -> ExpiryHolds {
    Registered::expiry_holds()
}

/// Every way to pay's routes.
pub fn routes<S>(idempotency: &IdempotencyState, chains: &Chains) -> Routes<S>
where
    S: Clone + Send + Sync + 'static,
    Pool: FromRef<S>,
    Chains: FromRef<S>,
{
    Registered::routes(idempotency, chains)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each ledger kind is booked by one way to pay, and every one by some.
    #[test]
    fn every_ledger_kind_has_one_way_to_pay() {
        let mut booked: Vec<&str> = Registered::ledger_kinds()
            .into_iter()
            .map(ledger::Kind::as_str)
            .collect();
        booked.sort();
        assert_eq!(booked, ["deposit", "payment", "refund", "sweep"]);
    }

    /// No two ways to pay make the same kind of observation or submission.
    #[test]
    fn kinds_are_each_one_ways() {
        let names: Vec<&str> = Registered::submission_kinds()
            .iter()
            .map(|k| k.name())
            .collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        let holds = Registered::expiry_holds();
        assert!(!holds.observed.is_empty() && !holds.unapplied.is_empty());
    }
}
