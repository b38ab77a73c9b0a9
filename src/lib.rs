//! payments-api: a PostgreSQL-backed payment-intent API whose promise is that a retried, replayed
//! or racing request is executed once and always answered the same way.
//!
//! Modules by capability:
//! - [`idempotency`]: the generic layer of SPEC §5 (key, fingerprint, store, layer)
//! - [`intents`]: payment intents (domain types, states, storage, handlers)
//! - [`http`]: the router, the error type, shared extractors
//! - [`auth`]: bearer tokens and merchant scope
//! - [`sweeper`]: expiry of intents and retention of keys, in the background
//! - [`config`], [`telemetry`], [`db`], [`startup`]: running it

pub mod auth;
pub mod config;
pub mod db;
pub mod http;
pub mod idempotency;
pub mod intents;
pub mod startup;
pub mod sweeper;
pub mod telemetry;
