//! The transaction of one side-effecting request: the idempotency layer opens it, the handler writes
//! through it (the [`Tx`] extractor), and the layer ends it, with the idempotency completion in the
//! same message as the `COMMIT` (`docs/design.md`, "One transaction").

use std::{
    ops::{Deref, DerefMut},
    sync::Arc,
};

use axum::{extract::FromRequestParts, http::request::Parts};
use sqlx::PgConnection;
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::{
    db::{CommitError, OpenTransaction, Pool, PooledConnection},
    error::ApiError,
};

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
