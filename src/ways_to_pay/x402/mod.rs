//! x402 (HTTP 402 Payment Required, v2): payments-api as the **facilitator** a resource server
//! asks to verify and settle a client's payment (`docs/x402.md`). Mounted under `/x402`, so
//! `@x402/core`'s `HTTPFacilitatorClient` works with `url: "http://host:8080/x402"` and the
//! merchant's API key as its bearer. The protocol's messages are `x402-types`'s; this module holds
//! the one scheme served, `exact` on EVM chains by EIP-3009, and its routes.
//!
//! - `exact_evm`: the `exact` scheme's payload and its verification, with the reference
//!   facilitator's reasons
//! - `settle`: one payment, one success: store, submit, wait, claim the success
//! - `routes`: `GET /x402/supported`, `POST /x402/verify`, `POST /x402/settle`, and the lookup of a
//!   payment by its key

pub mod exact_evm;
pub mod routes;
pub mod settle;

pub use routes::router;
