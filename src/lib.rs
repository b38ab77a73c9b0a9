//! payments-api: a PostgreSQL-backed payment-intent API whose promise is that a retried, replayed
//! or racing request is executed once and always answered the same way.
//!
//! Modules by capability:
//! - [`idempotency`]: one key, one execution, one answer (key, fingerprint, store, layer)
//! - [`intents`]: payment intents (domain types, states, storage, routes, the payment the outbox sends)
//! - [`events`]: what changed, written with the change (the outbox), and its API
//! - [`webhooks`]: endpoints, and the signed, at-least-once delivery of every event to them
//! - [`rails`]: what every way to pay rides and none owns: the served chains and their nodes, the
//!   follower and its watches, the outbox and relayers, wake-ups, token readings, EIP-3009
//!   authorizations and the EVM encodings (USDC among the tokens, contract wallets, the devnet)
//! - [`ways_to_pay`]: one folder each: `authorization` (the payer's EIP-3009 signature),
//!   `deposit_address` (plain transfers to an address of the intent's own), `x402` (the
//!   facilitator: verify and settle), `refunds` (money back to the payer, signed by the merchant)
//! - [`checkout`]: the page a payer opens from an intent's `checkout_url`, and its API, opened
//!   by the intent's client secret
//! - [`dashboard`]: pages for the people behind a merchant (sign-in, roles, payments, keys, team)
//! - [`audit`]: the log of every change made from the dashboard or the CLI
//! - [`merchants`]: the merchant's own settings (the name payers see)
//! - [`tenants`]: each merchant's fair share: request rate and concurrency limits per merchant
//! - [`ledger`]: the double-entry record of every confirmed payment and refund, and balances
//! - [`http`]: the router, OpenAPI and health probes: the top, which nothing else imports
//! - [`auth`]: bearer tokens and merchant scope
//! - [`housekeeping`]: expiry of intents by the clock, and retention of keys and events, in the
//!   background
//! - [`error`], [`extract`], [`deadline`], [`ids`], [`db`], [`config`], [`workers`],
//!   [`languages`]: the shared base every capability uses
//! - [`telemetry`], [`startup`]: running it
//! - [`reconcile`]: the operator's comparison of the ledger with a chain
//!
//! Dependencies point down: `http` and `startup` use the capabilities, the capabilities use the
//! base, never the other way round (`docs/design.md`, "Layout").

pub mod audit;
pub mod auth;
pub mod checkout;
pub mod config;
pub mod dashboard;
pub mod db;
pub mod deadline;
pub mod error;
pub mod events;
pub mod extract;
pub mod housekeeping;
pub mod http;
pub mod idempotency;
pub mod ids;
pub mod intents;
pub mod languages;
pub mod ledger;
pub mod merchants;
pub mod rails;
pub mod reconcile;
pub mod startup;
pub mod telemetry;
pub mod tenants;
pub mod ways_to_pay;
pub mod webhooks;
pub mod workers;
