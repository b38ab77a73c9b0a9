//! A transaction on a pooled connection whose last statements travel with its `COMMIT` in one
//! message, and what a `COMMIT` that did not succeed means. The request's transaction built on it
//! lives with the idempotency layer (`idempotency::transaction`).

use std::{
    ops::{Deref, DerefMut},
    time::Duration,
};

use sqlx::{Executor, PgConnection};

use super::pool::{Pool, PooledConnection, settled};

/// A transaction on a pooled connection, begun and ended by plain `BEGIN`/`COMMIT` statements of
/// our own rather than by `sqlx::Transaction`, whose commit is a round trip of its own:
/// [`OpenTransaction::commit_after`] sends the last statements and the `COMMIT` as one message.
///
/// Dropped while open (a handler panicked, the request timed out), it rolls back before the
/// connection goes back to the pool, as `sqlx::Transaction` does.
pub struct OpenTransaction {
    /// `None` once committed or rolled back.
    connection: Option<PooledConnection>,
}

/// How long a `ROLLBACK` may take before its connection is closed instead (which rolls back too).
const ROLLBACK_TIMEOUT: Duration = Duration::from_secs(1);

/// How a `COMMIT` that did not succeed ended.
#[derive(Debug)]
pub enum CommitError {
    /// The server answered with an error: the transaction rolled back, nothing it wrote stays.
    RolledBack(sqlx::Error),
    /// The connection failed while the `COMMIT` was on its way or its answer was: whether it
    /// committed is unknown (`docs/design.md`, "When the answer to a COMMIT is lost").
    OutcomeUnknown(sqlx::Error),
}

impl OpenTransaction {
    /// Begins on a connection from `pool`.
    pub async fn begin_on_pool(pool: &Pool) -> Result<Self, sqlx::Error> {
        Self::begin(pool.acquire().await?).await
    }

    /// Begins on a connection the caller already holds.
    pub async fn begin(mut connection: PooledConnection) -> Result<Self, sqlx::Error> {
        connection.execute("BEGIN").await?;
        Ok(Self {
            connection: Some(connection),
        })
    }

    /// Runs `statements` (SQL text ending in `;`, every value already a safe literal) and then
    /// commits, in one simple-query message: one round trip. PostgreSQL skips the rest of such a
    /// message after the first error, so a failing statement never lets the `COMMIT` behind it run.
    pub async fn commit_after(mut self, statements: String) -> Result<(), CommitError> {
        let mut connection = self.connection.take().expect("open until consumed");
        let mut message = statements;
        message.push_str("COMMIT");
        match connection.execute(message.as_str()).await {
            Ok(_) => Ok(()),
            Err(error) if super::observe(&error) == super::Failure::ConnectionLost => {
                drop(PooledConnection::take(connection));
                Err(CommitError::OutcomeUnknown(error))
            }
            Err(error) => {
                Self::end(connection).await;
                Err(CommitError::RolledBack(error))
            }
        }
    }

    pub async fn commit(self) -> Result<(), CommitError> {
        self.commit_after(String::new()).await
    }

    pub async fn rollback(mut self) {
        if let Some(connection) = self.connection.take() {
            Self::end(connection).await;
        }
    }

    /// Rolls back whatever is open (after a failed statement, PostgreSQL only accepts that) and
    /// returns the connection to the pool, or closes it when even that fails or takes too long.
    /// A connection still waiting for an answer (the deadline cut a statement short) is closed
    /// at once: a `ROLLBACK` sent into a silent network would hold its pool slot for as long.
    async fn end(mut connection: PooledConnection) {
        if !settled(&mut connection) {
            drop(PooledConnection::take(connection));
            return;
        }
        let rolled_back = tokio::time::timeout(ROLLBACK_TIMEOUT, connection.execute("ROLLBACK"));
        if !matches!(rolled_back.await, Ok(Ok(_))) {
            drop(PooledConnection::take(connection));
        }
    }
}

impl Deref for OpenTransaction {
    type Target = PgConnection;
    fn deref(&self) -> &PgConnection {
        self.connection.as_ref().expect("open until consumed")
    }
}

impl DerefMut for OpenTransaction {
    fn deref_mut(&mut self) -> &mut PgConnection {
        self.connection.as_mut().expect("open until consumed")
    }
}

impl Drop for OpenTransaction {
    fn drop(&mut self) {
        let Some(connection) = self.connection.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(Self::end(connection));
            }
            // No runtime left to roll back on: never hand an open transaction to the pool.
            Err(_) => drop(PooledConnection::take(connection)),
        }
    }
}
