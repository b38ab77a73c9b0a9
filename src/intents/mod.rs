//! Payment intents: the domain types, their states, storage and HTTP handlers.

pub mod domain;
pub mod handlers;
pub mod repo;
pub mod state;

pub use handlers::router;
