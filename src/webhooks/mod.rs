//! Webhooks: endpoints a merchant registers, and the delivery of every event to them, signed as
//! the Standard Webhooks specification says, at least once (`docs/design.md`, "Events and
//! webhooks").
//!
//! - `endpoints`: `/v1/webhook_endpoints` (create, list, get, delete, rotate the secret)
//! - `secret`: secrets and signatures
//! - `address`: where a webhook may go (https, public addresses)
//! - `delivery`: the worker every replica runs

pub mod address;
pub mod delivery;
pub mod endpoints;
pub mod secret;

use crate::{config::WebhookSettings, db::Pool};

pub use endpoints::router;

/// What the endpoint routes need.
#[derive(Clone)]
pub struct WebhookState {
    pub pool: Pool,
    pub settings: WebhookSettings,
}
