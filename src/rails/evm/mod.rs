//! EVM encodings, without the database: the EIP-3009 token's bindings, the EIP-712 authorization
//! a payer or merchant signs, deposit addresses, and the devnet set-up. It knows nothing of
//! intents; the rest of `rails` and the ways to pay build on it (`docs/settlement.md`).
//!
//! - `token`: the token's ABI (from the committed artifact), its EIP-712 domain
//! - `authorization`: the typed data a payer signs, its digest, signature checks, calldata
//! - `deposit`: deposit addresses, the CREATE2 address of an intent's forwarder, and its factory
//! - `eip2612`: a token's EIP-2612 permit, which lets Permit2 move a payer's tokens by signature
//! - `erc6492`: an undeployed contract wallet's signature, its deployment and its simulation
//! - `devnet`: `payments-api devnet`, the devnet token, USDC and the deposit factory on anvil
//! - `fiat_token`: Circle's USDC (FiatTokenV2_2 behind its proxy), built from Circle's source
//! - `permit2`: Permit2 and x402's Permit2 proxies at their canonical addresses, on a devnet

pub mod authorization;
pub mod deposit;
pub mod devnet;
pub mod eip2612;
pub mod erc6492;
pub mod fiat_token;
pub mod permit2;
pub mod token;

pub use alloy::primitives::{Address, B256, U256};
