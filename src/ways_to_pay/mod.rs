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
