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
