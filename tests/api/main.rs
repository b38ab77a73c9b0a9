//! Integration tests: real PostgreSQL, real HTTP, real concurrency. One binary, one module per
//! capability.

mod auth_and_scope;
mod checkout;
mod crash;
mod dashboard;
mod deposits;
mod events;
mod helpers;
mod idempotency;
mod intents;
mod leases;
mod lifecycle;
mod merchants;
mod network;
mod operations;
mod orders;
mod permit2;
mod pool;
mod refunds;
mod security;
mod settlement;
mod settlement_faults;
mod tenants;
mod usdc;
mod webhooks;
mod x402;
