//! Tenants' fair share of the API (`docs/design.md`, "Per-merchant limits"): each merchant's
//! request rate and concurrency, applied after authentication and before the idempotency layer,
//! so a merchant's runaway retry loop is answered 429 without touching the database, and a
//! refused request leaves nothing behind that its retry would meet.
//!
//! - `policy`: what a merchant may do: the defaults, its own limits, split between the replicas
//! - `limiter`: this replica's buckets and in-flight counts, and the layer that applies them
//! - `turns`: the merchants' turns at the database when more requests want it than the pool has
//!   connections
//! - `registry`: the worker that counts the live replicas and reads the merchants' own limits,
//!   and the commands that set them

pub mod limiter;
pub mod policy;
pub mod registry;
pub mod turns;

pub use limiter::{Limiter, RefusedByLimits, limit};
pub use policy::{Allowance, OwnLimits, Policy};
pub use registry::RegistryWorker;
pub use turns::{TurnGate, Turns, take_turn};

/// `rate_limited_requests_total{merchant,reason}`: requests refused with 429, `reason` being
/// `rate` or `concurrency`.
pub const RATE_LIMITED: &str = "rate_limited_requests_total";
/// `merchant_limit_replicas`: the live replicas this one splits every merchant's limits with.
pub const LIMIT_REPLICAS: &str = "merchant_limit_replicas";
