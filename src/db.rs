//! Connection pool, migrations, and the request-scoped transaction that the idempotency layer
//! opens and a handler writes through.

use std::{
    ops::{Deref, DerefMut},
    pin::pin,
    str::FromStr,
    sync::{
        Arc, LazyLock,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll, Waker},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use deadpool::managed::{self, Metrics, PoolError, RecycleError, RecycleResult, TimeoutType};
use sqlx::{
    Connection, Executor, PgConnection, Postgres,
    migrate::{MigrateDatabase, Migrator},
    postgres::{PgConnectOptions, PgPoolOptions},
};
use tokio::sync::{Mutex, OwnedMutexGuard};

pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// The connection pool.
///
/// Not sqlx's own pool: sqlx 0.8 pings every connection as it takes it back (`return_to_pool` in
/// sqlx-core 0.8.6, with no option to skip it), a round trip after every request; without it,
/// replays measured 16–33% more throughput and GETs 25–35% (README, Benchmark). deadpool hands
/// connections back as they are, serves waiters first come, first served, and checks a connection
/// before use only when [`Connector::recycle`] says so.
#[derive(Clone)]
pub struct Pool(managed::Pool<Connector>);

/// What the [`Pool`] holds right now.
pub struct PoolUsage {
    pub in_use: usize,
    pub idle: usize,
    /// Requests waiting for a connection: the first sign that the pool is too small.
    pub waiting: usize,
}

/// A connection checked out of the [`Pool`]; dropping it gives it back.
pub type PooledConnection = managed::Object<Connector>;

/// Builds the pool. Connections open on first use, so the server starts (and `/healthz` answers)
/// while the database is down.
pub fn pool(database_url: &str, max_connections: u32) -> anyhow::Result<Pool> {
    let connector = Connector {
        options: connect_options(database_url)?,
    };
    let pool = managed::Pool::builder(connector)
        .max_size(max_connections as usize)
        // A request waiting longer than this for a connection gets 503 rather than hanging.
        .wait_timeout(Some(ACQUIRE_TIMEOUT))
        .create_timeout(Some(ACQUIRE_TIMEOUT))
        .recycle_timeout(Some(ACQUIRE_TIMEOUT))
        // The connection given back last goes out first: it is the one least likely to need a
        // ping, and its backend process is the warmest.
        .queue_mode(managed::QueueMode::Lifo)
        .runtime(deadpool::Runtime::Tokio1)
        .build()
        .context("cannot build the connection pool")?;
    Ok(Pool(pool))
}

impl Pool {
    pub async fn acquire(&self) -> Result<PooledConnection, sqlx::Error> {
        self.0.get().await.map_err(|error| match error {
            PoolError::Backend(error) => error,
            PoolError::Timeout(TimeoutType::Wait | TimeoutType::Create | TimeoutType::Recycle) => {
                sqlx::Error::PoolTimedOut
            }
            PoolError::Closed => sqlx::Error::PoolClosed,
            other => sqlx::Error::Configuration(other.to_string().into()),
        })
    }

    pub fn usage(&self) -> PoolUsage {
        let status = self.0.status();
        PoolUsage {
            in_use: status.size - status.available,
            idle: status.available,
            waiting: status.waiting,
        }
    }

    /// Closes the idle connections politely (the server sees a goodbye, not a dropped socket),
    /// then stops handing out connections; any still in use close as they come back.
    pub async fn close(&self) {
        let idle = self.0.retain(|_, _| false);
        self.0.close();
        for connection in idle.removed {
            let _ = connection.close().await;
        }
    }
}

fn connect_options(database_url: &str) -> anyhow::Result<PgConnectOptions> {
    PgConnectOptions::from_str(database_url)
        .context("DATABASE_URL is not a valid PostgreSQL connection string")
}

const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens connections for the [`Pool`] and decides which ones to check before reuse.
pub struct Connector {
    options: PgConnectOptions,
}

/// A connection this old is replaced rather than reused (as sqlx's pool does by default), so
/// server-side memory a long-lived backend accumulates is returned now and then.
const MAX_LIFETIME: Duration = Duration::from_secs(30 * 60);

impl managed::Manager for Connector {
    type Type = PgConnection;
    type Error = sqlx::Error;

    /// A database that refuses connections for a moment (restarting, at its connection limit) is
    /// retried, as sqlx's own pool does, until the pool's create timeout: a request rides through a
    /// short restart instead of failing at once. Any other error (bad password, no such database)
    /// is final.
    async fn create(&self) -> Result<PgConnection, sqlx::Error> {
        let mut backoff = Duration::from_millis(10);
        loop {
            match PgConnection::connect_with(&self.options).await {
                Err(error) if is_connection_lost(&error) || is_overloaded(&error) => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                connected => return connected,
            }
        }
    }

    /// Decides, at checkout, whether a pooled connection may be used; one that may not is closed
    /// and the next one tried (or a new one opened). Replaced: one past its lifetime, one given
    /// back with a statement unanswered ([`settled`]). Pinged first: one unused for a while, or any
    /// while connections are known to be dying. A connection in steady use has just proved itself;
    /// pinging each one would put a round trip in front of every request.
    async fn recycle(
        &self,
        connection: &mut PgConnection,
        metrics: &Metrics,
    ) -> RecycleResult<sqlx::Error> {
        if metrics.age() >= MAX_LIFETIME {
            return Err(RecycleError::message("past its lifetime"));
        }
        if !settled(connection) {
            return Err(RecycleError::message(
                "given back with a statement still outstanding",
            ));
        }
        if metrics.last_used() >= IDLE_BEFORE_PING || idle_connections_distrusted() {
            connection.ping().await?;
        }
        Ok(())
    }
}

/// Whether the connection has nothing outstanding. One given back while a statement was still out
/// (its request was cancelled: the client hung up, a probe timed out) would make its next user wait
/// for an answer nobody wants, possibly behind a lock for as long as the lock is held; it is closed
/// instead (sqlx's own pool would have waited for that answer on its release ping). The check is
/// sqlx's `flush`, which reads outstanding answers and completes at once, without any I/O, when there
/// are none; it is polled exactly once, so it never waits. (`Connection::flush` is public but
/// `#[doc(hidden)]` in sqlx-core 0.8.6, pinned by Cargo.lock; an upgrade that drops it fails to
/// compile, and `a_connection_given_back_mid_statement_is_not_handed_to_the_next_request` pins
/// the behaviour.)
fn settled(connection: &mut PgConnection) -> bool {
    let mut flush = pin!(connection.flush());
    matches!(
        flush.as_mut().poll(&mut Context::from_waker(Waker::noop())),
        Poll::Ready(Ok(()))
    )
}

/// How long since a connection was last handed out before it is pinged first.
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

/// SQLSTATE 53300: too many connections.
fn is_overloaded(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.code().as_deref() == Some("53300"))
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
/// later ends it, with the idempotency completion) and the handler that writes through it.
#[derive(Clone)]
pub struct RequestTransaction(Arc<Mutex<Option<OpenTransaction>>>);

impl RequestTransaction {
    pub async fn begin(pool: &Pool) -> Result<Self, sqlx::Error> {
        Self::begin_on(pool.acquire().await?).await
    }

    /// Begins on a connection the request already holds (the one its key was claimed on), so a
    /// keyed request takes one connection from the pool, not two.
    pub async fn begin_on(connection: PooledConnection) -> Result<Self, sqlx::Error> {
        Ok(Self::from(OpenTransaction::begin(connection).await?))
    }

    /// Exclusive use of the transaction; `None` once the layer has taken it back.
    pub async fn lock(&self) -> OwnedMutexGuard<Option<OpenTransaction>> {
        self.0.clone().lock_owned().await
    }

    /// Takes the transaction back after the handler returned, to complete and commit it.
    pub async fn take(&self) -> Option<OpenTransaction> {
        self.0.lock().await.take()
    }
}

impl From<OpenTransaction> for RequestTransaction {
    fn from(transaction: OpenTransaction) -> Self {
        Self(Arc::new(Mutex::new(Some(transaction))))
    }
}

/// A transaction on a pooled connection, begun and ended by plain `BEGIN`/`COMMIT` statements of
/// our own rather than by `sqlx::Transaction`, whose commit is a round trip of its own: ending it
/// with [`OpenTransaction::commit_after`] sends the last statements and the `COMMIT` in one simple
/// query message, so they cost one round trip together. PostgreSQL skips the rest of such a message
/// after the first error, so a failing statement never lets the `COMMIT` behind it run.
///
/// Dropped while open (a handler panicked, the request timed out), it rolls back before the
/// connection goes back to the pool, as `sqlx::Transaction` does.
pub struct OpenTransaction {
    /// `None` once committed or rolled back.
    connection: Option<PooledConnection>,
}

impl OpenTransaction {
    async fn begin(mut connection: PooledConnection) -> Result<Self, sqlx::Error> {
        connection.execute("BEGIN").await?;
        Ok(Self {
            connection: Some(connection),
        })
    }

    /// Runs `statements` (SQL text ending in `;`, with every value already a safe literal, or
    /// empty) and then commits, in one round trip. On any error the transaction is rolled back
    /// (nothing it wrote stays), unless the connection itself was lost during the `COMMIT`: then
    /// whether it committed is unknown, and the caller must treat it so.
    pub async fn commit_after(mut self, statements: String) -> Result<(), sqlx::Error> {
        let mut connection = self.connection.take().expect("open until consumed");
        let mut message = statements;
        message.push_str("COMMIT");
        // A query without arguments goes out as one simple-query message (sqlx's `raw_sql`).
        match connection.execute(message.as_str()).await {
            Ok(_) => Ok(()),
            Err(error) => {
                Self::end(connection).await;
                Err(error)
            }
        }
    }

    pub async fn commit(self) -> Result<(), sqlx::Error> {
        self.commit_after(String::new()).await
    }

    pub async fn rollback(mut self) {
        if let Some(connection) = self.connection.take() {
            Self::end(connection).await;
        }
    }

    /// Rolls back whatever is open (after a failed statement, PostgreSQL only accepts that) and
    /// returns the connection to the pool, or closes it when even that fails.
    async fn end(mut connection: PooledConnection) {
        if connection.execute("ROLLBACK").await.is_err() {
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
