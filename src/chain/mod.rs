//! Talking to EVM chains: a node over JSON-RPC, the EIP-3009 token's bindings, the EIP-712
//! authorization an intent is paid with, and the devnet set-up. It knows nothing of intents or
//! the database; `settlement` builds on it (`docs/settlement.md`).
//!
//! - `rpc`: a provider per chain, with timeouts, and how its failures read
//! - `token`: the token's ABI (from the committed artifact), its EIP-712 domain
//! - `authorization`: the typed data a payer signs, its digest, signature checks, calldata
//! - `devnet`: `payments-api devnet`, the token deployed on anvil

pub mod authorization;
pub mod devnet;
pub mod rpc;
pub mod token;

pub use alloy::primitives::{Address, B256, U256};
