//! The database: the connection pool and when it trusts a connection ([`pool`]), what a database
//! error means for the request that met it ([`failure`]), a transaction whose last statements go
//! with its `COMMIT` ([`transaction`]), the schema's migrations ([`migrate`]), and the servers a
//! `DATABASE_URL` names ([`servers`]).
//! The policy behind the pool is argued in `docs/design.md` ("The connection pool").

pub mod failure;
pub mod migrate;
pub mod pool;
pub mod servers;
pub mod transaction;

pub use failure::{Failure, advice, observe};
pub use migrate::{MIGRATOR, migrate};
pub use pool::{Background, DB_POOL_WAIT, Pool, PoolUsage, PooledConnection, pool, request_pool};
pub use transaction::{CommitError, OpenTransaction};
