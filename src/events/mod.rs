//! Events: what changed, for the merchant to hear about (`docs/design.md`, "Events and webhooks").
//! Every state change writes its event in the change's own transaction (the outbox), so a crash
//! leaves both or neither; the webhook deliveries the event owes are queued by the same statement.
//!
//! - `store`: record, read and expire events
//! - `routes`: `GET /v1/events`, `GET /v1/events/{id}`, `GET /v1/events/{id}/deliveries`

pub mod routes;
pub mod store;

pub use routes::router;
pub use store::{NewEvent, delete_expired, record};

/// The channel a change of an intent notifies with the intent's id (`store::record`).
pub const CHANGED_CHANNEL: &str = "subject_changed";

/// Every event type there is. Endpoints may subscribe to any of them.
pub const TYPES: &[&str] = &[
    "payment_intent.created",
    "payment_intent.canceled",
    "payment_intent.processing",
    "payment_intent.succeeded",
    "payment_intent.failed",
    "payment_intent.paid_after_cancel",
    "payment_intent.payment_pending",
    "payment_intent.partially_paid",
    "payment_intent.overpaid",
    "payment_intent.paid_after_expiry",
    "payment_intent.duplicate_payment",
    "refund.created",
    "refund.processing",
    "refund.succeeded",
    "refund.failed",
];
