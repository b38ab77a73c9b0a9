//! What every background loop shares (`docs/design.md`, "Background work").
//!
//! - `outage`: a failing loop says so once, backs off, and says when it recovered

mod outage;

pub use outage::{Outage, REMIND_EVERY};
