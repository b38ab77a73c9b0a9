//! Deposit addresses (`docs/settlement.md`, "Deposit addresses"): an intent paid by plain
//! transfers of its token, from anyone, to an address of its own. The address is its forwarder's
//! (`rails::evm::deposit`), computed when the intent is made; nothing is deployed until money is there,
//! and what reaches it can only leave for the merchant.
//!
//! - `watch`: what the follower looks for (transfers to and from deposit addresses), and what a
//!   confirmed one changes: the amount received, the intent's state, the ledger, a sweep
//! - `sweep`: the relayer's submission that deploys the forwarder and flushes it to the merchant

pub mod sweep;
pub mod watch;

use std::sync::Arc;

use super::WayToPay;
use crate::{
    config::SettlementSettings,
    intents::expiry::ExpiryHolds,
    ledger,
    rails::{follower::ObservationKind, outbox::SubmissionKind},
};

/// Paying an intent by transfers to its deposit address.
pub struct DepositAddress;

impl WayToPay for DepositAddress {
    type Watch = watch::DepositWatch;

    fn watch(settings: &SettlementSettings) -> Self::Watch {
        watch::DepositWatch {
            underpayment_tolerance_bps: settings.underpayment_tolerance_bps,
        }
    }

    fn submission_kinds() -> Vec<Arc<dyn SubmissionKind>> {
        vec![Arc::new(sweep::DepositSweep)]
    }

    /// A deposit seen and not yet applied: applied, it judges by its own block whether it came in
    /// time.
    fn expiry_holds() -> ExpiryHolds {
        ExpiryHolds {
            observed: vec![],
            unapplied: vec![watch::DepositKind::Received.as_str()],
        }
    }

    fn ledger_kinds() -> Vec<ledger::Kind> {
        vec![ledger::Kind::Deposit, ledger::Kind::Sweep]
    }
}
