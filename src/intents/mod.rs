//! Payment intents: the domain types, their states, storage and routes.

pub mod domain;
pub mod expiry;
pub mod order;
pub mod payment;
pub mod repo;
pub mod routes;
pub mod state;

pub use routes::router;
