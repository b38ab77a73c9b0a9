//! x402 (HTTP 402 Payment Required, v2): payments-api as the **facilitator** a resource server
//! asks to verify and settle a client's payment (`docs/x402.md`). Mounted under `/x402`, so
//! `@x402/core`'s `HTTPFacilitatorClient` works with `url: "http://host:8080/x402"` and the
//! merchant's API key as its bearer. The protocol's messages are `x402-types`'s; this module holds
//! the scheme served, `exact` on EVM chains by EIP-3009 and by Permit2, and its routes.
//!
//! - `exact_evm`: the `exact` scheme's payload and its verification, with the reference
//!   facilitator's reasons
//! - `exact_permit2`: the same scheme by Permit2, for tokens without EIP-3009
//! - `eip2612_gas_sponsoring`: x402's extension of a Permit2 payment by the token's EIP-2612
//!   permit for Permit2, submitted with the settle
//! - `erc6492`: payers whose smart wallet is not deployed yet, and the deployment the settle queues
//! - `settle`: one payment, one success: store, submit, wait, claim the success
//! - `payment_identifier`: x402's `payment-identifier` extension, the settle's idempotency key
//! - `routes`: `GET /x402/supported`, `POST /x402/verify`, `POST /x402/settle`, and the lookup of a
//!   payment by its key

pub mod eip2612_gas_sponsoring;
pub mod erc6492;
pub mod exact_evm;
pub mod exact_permit2;
pub mod payment_identifier;
pub mod routes;
pub mod settle;

use axum::extract::FromRef;

use super::{Routes, WayToPay};
use crate::{config::SettlementSettings, db::Pool, idempotency::IdempotencyState, rails::Chains};

/// payments-api as an x402 facilitator. A settle queues an intent's payment (the authorization's
/// submission kind), after its payer's wallet's deployment when it is not deployed yet; the
/// authorization's watches see it, by EIP-3009 or by Permit2.
pub struct X402;

impl WayToPay for X402 {
    type Watch = ();

    fn watch(_: &SettlementSettings) -> Self::Watch {}

    /// An undeployed payer's wallet, deployed before its payment (ERC-6492).
    fn submission_kinds() -> Vec<std::sync::Arc<dyn crate::rails::outbox::SubmissionKind>> {
        vec![std::sync::Arc::new(erc6492::WalletDeployment)]
    }

    /// Under `/x402`, with idempotency on settle only and no turn (`docs/x402.md`).
    fn routes<S>(idempotency: &IdempotencyState, chains: &Chains) -> Routes<S>
    where
        S: Clone + Send + Sync + 'static,
        Pool: FromRef<S>,
        Chains: FromRef<S>,
    {
        Routes {
            api: axum::Router::new(),
            own: routes::router(idempotency.clone(), chains.clone()),
        }
    }
}
