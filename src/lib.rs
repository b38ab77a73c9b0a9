//! payments-api: a PostgreSQL-backed payment-intent API whose promise is that a retried, replayed
//! or racing request is executed once and always answered the same way.
//!
//! Modules by capability:
//! - [`idempotency`]: one key, one execution, one answer (key, fingerprint, store, layer)
//! - [`intents`]: payment intents (domain types, states, storage, handlers)
//! - [`events`]: what changed, written with the change (the outbox), and its API
//! - [`webhooks`]: endpoints, and the signed, at-least-once delivery of every event to them
//! - [`chain`]: EVM chains: nodes, the follower and its watches, EIP-3009 tokens (USDC among them),
//!   authorizations, contract wallets, the devnet
//! - [`settlement`]: intents paid on chain: authorization and confirm, the outbox and relayer,
//!   the payment watch
//! - [`refunds`]: money paid back to an intent's payer, signed by the merchant, through the same
//!   outbox, relayer and follower
//! - [`deposits`]: intents paid by plain transfers to an address of their own, watched, counted
//!   and swept to the merchant through the same follower, relayer and ledger
//! - [`checkout`]: the page a payer opens from an intent's `checkout_url`, and its API, opened
//!   by the intent's client secret
//! - [`x402`]: payments-api as an x402 facilitator (`/x402/supported`, `/x402/verify`)
//! - [`merchants`]: the merchant's own settings (the name payers see)
//! - [`tenants`]: each merchant's fair share: request rate and concurrency limits per merchant
//! - [`ledger`]: the double-entry record of every confirmed payment and refund, and balances
//! - [`http`]: the router, OpenAPI and health probes: the top, which nothing else imports
//! - [`auth`]: bearer tokens and merchant scope
//! - [`sweeper`]: expiry of intents and retention of keys, in the background
//! - [`error`], [`extract`], [`deadline`], [`ids`], [`db`], [`config`], [`workers`]: the shared
//!   base every capability uses
//! - [`telemetry`], [`startup`]: running it
//!
//! Dependencies point down: `http` and `startup` use the capabilities, the capabilities use the
//! base, never the other way round (`docs/design.md`, "Layout").

pub mod auth;
pub mod chain;
pub mod checkout;
pub mod config;
pub mod db;
pub mod deadline;
pub mod deposits;
pub mod error;
pub mod events;
pub mod extract;
pub mod http;
pub mod idempotency;
pub mod ids;
pub mod intents;
pub mod ledger;
pub mod merchants;
pub mod refunds;
pub mod settlement;
pub mod startup;
pub mod sweeper;
pub mod telemetry;
pub mod tenants;
pub mod webhooks;
pub mod workers;
pub mod x402;
