//! Talking to EVM chains: a node over JSON-RPC, following a chain for what watches want, the
//! EIP-3009 token's bindings, the EIP-712 authorization an intent is paid with, and the devnet
//! set-up. It knows nothing of intents; `settlement` builds on it (`docs/settlement.md`).
//!
//! - `follower`: the cursor, block ranges of logs, reorgs, halting, confirmations; a `Watch`
//!   says what to look for and what a confirmed log changes
//! - `rpc`: a provider per chain, with timeouts, and how its failures read
//! - `token`: the token's ABI (from the committed artifact), its EIP-712 domain
//! - `authorization`: the typed data a payer signs, its digest, signature checks, calldata
//! - `deposit`: deposit addresses, the CREATE2 address of an intent's forwarder, and its factory
//! - `devnet`: `payments-api devnet`, the devnet token, USDC and the deposit factory on anvil
//! - `fiat_token`: Circle's USDC (FiatTokenV2_2 behind its proxy), built from Circle's source

pub mod authorization;
pub mod deposit;
pub mod devnet;
pub mod fiat_token;
pub mod follower;
pub mod rpc;
pub mod token;

pub use alloy::primitives::{Address, B256, U256};
