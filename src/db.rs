//! Connection pool, migrations, and the request-scoped transaction that the idempotency layer
//! opens and a handler writes through.

use std::{
    str::FromStr,
    sync::{
        Arc, LazyLock,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use sqlx::{
    Connection, PgPool, Postgres, Transaction,
    migrate::{MigrateDatabase, Migrator},
    pool::PoolConnection,
    postgres::{PgConnectOptions, PgPoolOptions},
};
use tokio::sync::{Mutex, OwnedMutexGuard};

pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

pub type PgTransaction = Transaction<'static, Postgres>;

/// Builds the pool lazily so the server starts (and `/healthz` answers) while the database is down.
pub fn pool(database_url: &str, max_connections: u32) -> anyhow::Result<PgPool> {
    Ok(pool_options(max_connections).connect_lazy_with(connect_options(database_url)?))
}

fn connect_options(database_url: &str) -> anyhow::Result<PgConnectOptions> {
    PgConnectOptions::from_str(database_url)
        .context("DATABASE_URL is not a valid PostgreSQL connection string")
}

const IDLE_BEFORE_PING: Duration = Duration::from_secs(1);

/// How long after a statement failed on a lost connection every checkout pings first. A database
/// restart or `pg_terminate_backend` closes every pooled connection at once; without this, each
/// dead one would fail a request of its own before the pool replaced it.
const DISTRUST_FOR: Duration = Duration::from_secs(5);

/// When a statement last failed on a lost connection, in milliseconds after [`CLOCK_START`]
/// (a monotonic clock: a wall-clock jump must not open or close the window); 0 means never.
static CONNECTION_LOST_AT_MS: AtomicU64 = AtomicU64::new(0);
static CLOCK_START: LazyLock<Instant> = LazyLock::new(Instant::now);

fn millis_since_start() -> u64 {
    // +1 so that a loss in the very first millisecond is not mistaken for "never".
    CLOCK_START.elapsed().as_millis() as u64 + 1
}

/// Whether `error` says the connection itself is gone (the server closed it or went away).
pub fn is_connection_lost(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => true,
        // Class 08: connection exception; 57P01-57P03: admin or crash shutdown, cannot connect.
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|code| code.starts_with("08") || code.starts_with("57P")),
        _ => false,
    }
}

/// Reported by whoever saw [`is_connection_lost`]: for a while, pooled connections are pinged
/// before use, so the rest of the dead ones are replaced without failing a request each.
pub fn distrust_idle_connections() {
    CONNECTION_LOST_AT_MS.store(millis_since_start(), Ordering::Relaxed);
}

fn idle_connections_distrusted() -> bool {
    let lost_at = CONNECTION_LOST_AT_MS.load(Ordering::Relaxed);
    lost_at != 0 && millis_since_start().saturating_sub(lost_at) < DISTRUST_FOR.as_millis() as u64
}

fn pool_options(max_connections: u32) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max_connections)
        // A request waiting longer than this for a connection gets 503 rather than hanging.
        .acquire_timeout(Duration::from_secs(5))
        // By default sqlx pings every connection it hands out: one more round trip in front of
        // every request, the single largest cost of a replay. A connection in steady use has just
        // proved itself (sqlx also pings each one as it comes back to the pool), so only one that
        // sat idle for a while, or any while connections are known to be dying, is checked first.
        .test_before_acquire(false)
        .before_acquire(|connection, meta| {
            Box::pin(async move {
                if meta.idle_for >= IDLE_BEFORE_PING || idle_connections_distrusted() {
                    connection.ping().await?;
                }
                Ok(true)
            })
        })
}

/// Creates the database if it does not exist, then applies pending migrations.
pub async fn migrate(database_url: &str) -> anyhow::Result<()> {
    if !Postgres::database_exists(database_url)
        .await
        .context("cannot reach PostgreSQL at DATABASE_URL")?
    {
        Postgres::create_database(database_url)
            .await
            .context("cannot create the database")?;
        tracing::info!("created the database");
    }
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(database_url)
        .await
        .context("cannot connect to the database")?;
    MIGRATOR.run(&pool).await.context("migrations failed")?;
    pool.close().await;
    Ok(())
}

/// The transaction of one side-effecting request, shared between the layer that opens it (and
/// later writes the idempotency completion into it) and the handler that writes through it.
#[derive(Clone)]
pub struct RequestTransaction(Arc<Mutex<Option<PgTransaction>>>);

impl RequestTransaction {
    pub async fn begin(pool: &PgPool) -> Result<Self, sqlx::Error> {
        Ok(Self::from(pool.begin().await?))
    }

    /// Begins on a connection the request already holds (the one its key was claimed on), so a
    /// keyed request takes one connection from the pool, not two. `Transaction::begin` is what
    /// `Pool::begin` runs after acquiring; like it, dropping the transaction rolls it back.
    pub async fn begin_on(connection: PoolConnection<Postgres>) -> Result<Self, sqlx::Error> {
        Ok(Self::from(Transaction::begin(connection, None).await?))
    }

    /// Exclusive use of the transaction; `None` once the layer has taken it back.
    pub async fn lock(&self) -> OwnedMutexGuard<Option<PgTransaction>> {
        self.0.clone().lock_owned().await
    }

    /// Takes the transaction back after the handler returned, to complete and commit it.
    pub async fn take(&self) -> Option<PgTransaction> {
        self.0.lock().await.take()
    }
}

impl From<PgTransaction> for RequestTransaction {
    fn from(transaction: PgTransaction) -> Self {
        Self(Arc::new(Mutex::new(Some(transaction))))
    }
}
