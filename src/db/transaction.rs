//! The transaction of one side-effecting request: the idempotency layer opens it, the handler writes
//! through it (the [`Tx`] extractor), and the layer ends it, with the idempotency completion in the
//! same message as the `COMMIT` (`docs/design.md`, "One transaction").

use std::{
    ops::{Deref, DerefMut},
    sync::Arc,
    time::Duration,
};

use axum::{extract::FromRequestParts, http::request::Parts};
use sqlx::{Executor, PgConnection};
use tokio::sync::{Mutex, OwnedMutexGuard};

use super::pool::{Pool, PooledConnection, settled};
use crate::error::ApiError;

/// The transaction of one side-effecting request, shared between the layer that opens it (and
/// later ends it) and the handler that writes through it.
#[derive(Clone)]
pub struct RequestTransaction(Arc<Mutex<Slot>>);

/// Where the request's transaction is: open, or between atomic phases (`docs/design.md`,
/// "Atomic phases").
struct Slot {
    open: Option<OpenTransaction>,
    /// Whether a phase committed: what the request wrote so far stays, whatever comes next.
    phased: bool,
    /// Where a resumed phase begins its transaction.
    pool: Pool,
    /// The statement that records a committed phase's recovery point (a keyed request's), sent
    /// with its `COMMIT`.
    checkpoint: Option<Checkpoint>,
}

/// Given a recovery point, the SQL text (ending in `;`, every value a safe literal) that records
/// it: the idempotency layer's, so this base knows nothing of keys.
pub type Checkpoint = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// The request's transaction as the layer takes it back once the handler returned.
pub struct Taken {
    /// Still open: what the handler wrote since its last phase, if any.
    pub open: Option<OpenTransaction>,
    pub phased: bool,
}

impl RequestTransaction {
    pub async fn begin(pool: &Pool) -> Result<Self, sqlx::Error> {
        Self::begin_on(pool.acquire().await?, pool, None).await
    }

    /// Begins on a connection the request already holds (the one its key was claimed on), so a
    /// keyed request takes one connection from the pool, not two.
    pub async fn begin_on(
        connection: PooledConnection,
        pool: &Pool,
        checkpoint: Option<Checkpoint>,
    ) -> Result<Self, sqlx::Error> {
        let transaction = OpenTransaction::begin(connection).await?;
        Ok(Self(Arc::new(Mutex::new(Slot {
            open: Some(transaction),
            phased: false,
            pool: pool.clone(),
            checkpoint,
        }))))
    }

    /// Takes the transaction back after the handler returned, to complete and commit it; `None`
    /// if a handler still holds it.
    pub async fn take(&self) -> Option<Taken> {
        let mut slot = self.0.try_lock().ok()?;
        Some(Taken {
            open: slot.open.take(),
            phased: slot.phased,
        })
    }
}

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

    async fn begin(mut connection: PooledConnection) -> Result<Self, sqlx::Error> {
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

/// The request's transaction, as a handler extracts it. Whatever a handler writes through it
/// commits together with the stored response, or not at all, unless it commits a phase first.
pub struct Tx(OwnedMutexGuard<Slot>);

impl<S: Send + Sync> FromRequestParts<S> for Tx {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let slot = parts
            .extensions
            .get::<RequestTransaction>()
            .ok_or_else(|| ApiError::internal("route is not wrapped by the idempotency layer"))?;
        let guard = slot.0.clone().lock_owned().await;
        if guard.open.is_none() {
            return Err(ApiError::internal("request transaction already taken"));
        }
        Ok(Self(guard))
    }
}

impl Tx {
    /// Commits what the request wrote so far as one atomic phase, with `point` as its recovery
    /// point when the request is keyed (`docs/design.md`, "Atomic phases"), and gives the
    /// connection back: a handler commits before it waits, so what it queued is visible to the
    /// workers it waits for. [`Phase::resume`] opens the next phase's transaction.
    pub async fn commit_phase(mut self, point: &str) -> Result<Phase, CommitError> {
        let open = self.0.open.take().expect("checked when extracted");
        let checkpoint = self
            .0
            .checkpoint
            .as_ref()
            .map(|c| c(point))
            .unwrap_or_default();
        open.commit_after(checkpoint).await?;
        self.0.phased = true;
        Ok(Phase(OwnedMutexGuard::mutex(&self.0).clone()))
    }
}

/// Between two phases of a request: nothing open, no connection held.
pub struct Phase(Arc<Mutex<Slot>>);

impl Phase {
    /// Begins the next phase's transaction, on a connection from the pool.
    pub async fn resume(self) -> Result<Tx, sqlx::Error> {
        let mut guard = self.0.lock_owned().await;
        let connection = guard.pool.acquire().await?;
        guard.open = Some(OpenTransaction::begin(connection).await?);
        Ok(Tx(guard))
    }
}

impl Deref for Tx {
    type Target = PgConnection;
    fn deref(&self) -> &PgConnection {
        self.0.open.as_deref().expect("checked when extracted")
    }
}

impl DerefMut for Tx {
    fn deref_mut(&mut self) -> &mut PgConnection {
        self.0.open.as_deref_mut().expect("checked when extracted")
    }
}
