//! The ways to pay, each a folder of its own riding the shared rails (`crate::rails`), never a
//! sibling (`docs/design.md`, "How to add a way to pay"):
//!
//! - `authorization`: an intent paid by its payer's EIP-3009 authorization, confirmed through the
//!   API or the checkout page
//! - `deposit_address`: an intent paid by plain transfers to an address of its own
//! - `x402`: payments-api as an x402 facilitator (`exact` on EVM chains)
//! - `refunds`: money a merchant sends back to the payer of a paid intent

pub mod authorization;
pub mod deposit_address;
pub mod refunds;
pub mod x402;

use std::sync::Arc;

use crate::{
    config::SettlementSettings,
    intents::payment::IntentPayment,
    rails::{follower::Watch, outbox},
};

/// What the relayer sends: every way to pay's submission kinds (x402's settle queues an intent's
/// payment, as the authorization does).
pub fn submission_kinds() -> outbox::Kinds {
    outbox::Kinds::new(vec![
        Arc::new(IntentPayment),
        Arc::new(refunds::payments::RefundPayment),
        Arc::new(deposit_address::sweep::DepositSweep),
    ])
}

/// What the chain follower looks for: every way to pay's watch, on one cursor per chain (x402's
/// payments are intents' nonce uses, which the authorization's watch sees).
pub fn chain_watch(settings: &SettlementSettings) -> impl Watch + Clone {
    let deposits = deposit_address::watch::DepositWatch {
        underpayment_tolerance_bps: settings.underpayment_tolerance_bps,
    };
    (
        (
            authorization::watch::PaymentWatch,
            refunds::watch::RefundWatch,
        ),
        deposits,
    )
}
