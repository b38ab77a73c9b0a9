//! The connection pool, and when it trusts a connection (`docs/design.md`, "The connection pool").

use std::{
    pin::pin,
    sync::{
        LazyLock,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    task::{Context, Poll, Waker},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use backon::{ExponentialBuilder, Retryable};
use deadpool::managed::{
    self, Metrics, PoolError, RecycleError, RecycleResult, TimeoutType, Timeouts,
};
use sqlx::{Connection, PgConnection};

use super::{
    Failure,
    servers::{self, Servers},
};

/// The connection pool: deadpool over sqlx's connections rather than sqlx's own pool, which pings
/// every connection it takes back. Waiters are served first come, first served, and a connection
/// is checked before use only when [`Connector::recycle`] says so. A replica has two: one for
/// requests, one for its background work, so merchant traffic never makes a worker wait.
#[derive(Clone)]
pub struct Pool {
    inner: managed::Pool<Connector>,
    /// `requests` or `background`: the `pool` label of its metrics.
    name: &'static str,
}

/// The background work's pool, as routes that must not wait behind requests find it (`/readyz`,
/// `/metrics`).
#[derive(Clone)]
pub struct Background(pub Pool);

/// `db_pool_wait_seconds{pool}`: how long each checkout waited for a connection (a histogram).
pub const DB_POOL_WAIT: &str = "db_pool_wait_seconds";

/// What the [`Pool`] holds right now.
pub struct PoolUsage {
    pub in_use: usize,
    pub idle: usize,
    /// Requests waiting for a connection: the first sign that the pool is too small.
    pub waiting: usize,
}

/// A connection checked out of the [`Pool`]; dropping it gives it back.
pub type PooledConnection = managed::Object<Connector>;

/// Builds a pool for background work and commands: a checkout waits up to the acquire timeout for
/// a free connection. Connections open on first use, so the server starts (and `/healthz`
/// answers) while the database is down.
pub fn pool(database_url: &str, max_connections: u32) -> anyhow::Result<Pool> {
    build(database_url, max_connections, ACQUIRE_TIMEOUT, "background")
}

/// Builds the pool requests use: a request that would wait longer than `wait` for a free
/// connection gets 503 with `Retry-After` instead (shed, don't queue: `docs/design.md`, "The
/// connection pool"). Opening a connection still has the whole acquire timeout, so a request
/// rides through a short database restart.
pub fn request_pool(
    database_url: &str,
    max_connections: u32,
    wait: Duration,
) -> anyhow::Result<Pool> {
    build(database_url, max_connections, wait, "requests")
}

fn build(
    database_url: &str,
    max_connections: u32,
    wait: Duration,
    name: &'static str,
) -> anyhow::Result<Pool> {
    let connector = Connector {
        servers: database_url.parse()?,
        preferred: AtomicUsize::new(0),
    };
    let pool = managed::Pool::builder(connector)
        .max_size(max_connections as usize)
        .wait_timeout(Some(wait))
        // Opening a connection keeps its own time, so it can say why it failed.
        .recycle_timeout(Some(ACQUIRE_TIMEOUT))
        // The connection given back last goes out first: it is the one least likely to need a
        // ping, and its backend process is the warmest.
        .queue_mode(managed::QueueMode::Lifo)
        .runtime(deadpool::Runtime::Tokio1)
        .build()
        .context("cannot build the connection pool")?;
    Ok(Pool { inner: pool, name })
}

impl Pool {
    pub async fn acquire(&self) -> Result<PooledConnection, sqlx::Error> {
        let started = Instant::now();
        let got = self.inner.get().await;
        metrics::histogram!(DB_POOL_WAIT, "pool" => self.name).record(started.elapsed());
        got.map_err(|error| match error {
            PoolError::Backend(error) => error,
            PoolError::Timeout(TimeoutType::Wait | TimeoutType::Create | TimeoutType::Recycle) => {
                sqlx::Error::PoolTimedOut
            }
            PoolError::Closed => sqlx::Error::PoolClosed,
            other => sqlx::Error::Configuration(other.to_string().into()),
        })
    }

    /// A connection if one is free now (idle, or room to open one), without waiting behind
    /// others: for work that can go on with fewer connections when the pool is busy.
    pub async fn acquire_if_free(&self) -> Option<PooledConnection> {
        let now = Timeouts {
            wait: Some(Duration::ZERO),
            create: Some(ACQUIRE_TIMEOUT),
            recycle: Some(ACQUIRE_TIMEOUT),
        };
        self.inner.timeout_get(&now).await.ok()
    }

    /// `requests` or `background`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn usage(&self) -> PoolUsage {
        let status = self.inner.status();
        PoolUsage {
            in_use: status.size - status.available,
            idle: status.available,
            waiting: status.waiting,
        }
    }

    /// Checks the idle connections, as TCP keepalive would, so that a connection the network
    /// silently dropped is found by this check (run every few seconds by the pool's keeper)
    /// rather than by a request: each one unused for a while is pinged ([`Connector::recycle`]),
    /// and one that does not answer in time gets every connection opened before it replaced.
    /// Never opens a connection, never waits for one.
    pub async fn check_idle(&self) {
        let only_idle = Timeouts {
            wait: Some(Duration::ZERO),
            create: Some(Duration::ZERO),
            recycle: Some(PING_TIMEOUT * 2),
        };
        let idle = self.inner.status().available;
        let mut checked = Vec::with_capacity(idle);
        for _ in 0..idle {
            match self.inner.timeout_get(&only_idle).await {
                Ok(connection) => checked.push(connection),
                Err(_) => break,
            }
        }
    }

    /// Closes the idle connections politely (the server sees a goodbye, not a dropped socket),
    /// then stops handing out connections; any still in use close as they come back.
    pub async fn close(&self) {
        let idle = self.inner.retain(|_, _| false);
        self.inner.close();
        for connection in idle.removed {
            let _ = connection.close().await;
        }
    }
}

const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a ping may take before its connection is taken for dead: far above a round trip on
/// any network a database should be reached over.
const PING_TIMEOUT: Duration = Duration::from_secs(1);

/// Opens connections for the [`Pool`] and decides which ones to check before reuse.
pub struct Connector {
    servers: Servers,
    /// The server the last connection was opened to, tried first: after a failover the pool
    /// does not knock at the old primary before every new connection.
    preferred: AtomicUsize,
}

impl Connector {
    /// One connection to the first server that takes it (and, if the URL asks, takes writes),
    /// starting with the preferred one. All refusing: the last refusal.
    async fn connect(&self) -> Result<PgConnection, sqlx::Error> {
        let candidates = &self.servers.candidates;
        let first = self.preferred.load(Ordering::Relaxed);
        let mut refusal = None;
        for i in (0..candidates.len()).map(|k| (first + k) % candidates.len()) {
            match servers::open(&candidates[i], self.servers.read_write).await {
                Ok(connection) => {
                    self.preferred.store(i, Ordering::Relaxed);
                    return Ok(connection);
                }
                Err(e) => refusal = Some(e),
            }
        }
        Err(refusal.expect("a DATABASE_URL names at least one server"))
    }
}

/// A connection this old is replaced rather than reused (as sqlx's pool does by default), so
/// server-side memory a long-lived backend accumulates is returned now and then.
const MAX_LIFETIME: Duration = Duration::from_secs(30 * 60);

impl managed::Manager for Connector {
    type Type = PgConnection;
    type Error = sqlx::Error;

    /// A database that refuses connections for a moment (restarting, at its connection limit) is
    /// retried until the acquire timeout: a request rides through a short restart instead of
    /// failing at once. Any other error (bad password, no such database) is final. A timeout says
    /// what the last try met, so an operator reads "connection refused", not "timed out".
    async fn create(&self) -> Result<PgConnection, sqlx::Error> {
        let last_error = std::sync::Mutex::new(None::<String>);
        let connect = || self.connect();
        let retried = connect
            .retry(
                ExponentialBuilder::default()
                    .with_min_delay(Duration::from_millis(10))
                    .with_max_delay(Duration::from_secs(1))
                    .without_max_times(),
            )
            .when(|e| {
                matches!(
                    Failure::of(e),
                    Failure::ConnectionLost | Failure::Overloaded
                )
            })
            .notify(|e, _| {
                // sqlx prefixes I/O errors with a sentence of its own; the cause is enough here.
                let cause = match e {
                    sqlx::Error::Io(io) => io.to_string(),
                    other => other.to_string(),
                };
                *last_error.lock().expect("not poisoned") = Some(cause);
            });
        match tokio::time::timeout(ACQUIRE_TIMEOUT, retried).await {
            Ok(connected) => connected,
            Err(_) => {
                let last = last_error.lock().expect("not poisoned").take();
                let reason = last.unwrap_or_else(|| "the database did not answer".to_owned());
                Err(sqlx::Error::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "cannot connect within {} s: {reason}",
                        ACQUIRE_TIMEOUT.as_secs()
                    ),
                )))
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
        if opened_before_silence(metrics) {
            return Err(RecycleError::message(
                "opened before a connection went silent",
            ));
        }
        if !settled(connection) {
            return Err(RecycleError::message(
                "given back with a statement still outstanding",
            ));
        }
        if metrics.last_used() >= IDLE_BEFORE_PING || idle_connections_distrusted() {
            match tokio::time::timeout(PING_TIMEOUT, connection.ping()).await {
                Ok(answered) => answered?,
                Err(_) => {
                    // A network that drops one connection silently usually dropped its siblings.
                    replace_connections_opened_until_now();
                    return Err(RecycleError::message("did not answer a ping in time"));
                }
            }
        }
        Ok(())
    }
}

/// Whether the connection has nothing outstanding: one given back while a statement was still out
/// (its request was cancelled) would make its next user wait for an answer nobody wants. Polls
/// sqlx's `flush` exactly once; why that is enough is in `docs/design.md` ("The connection pool").
pub(super) fn settled(connection: &mut PgConnection) -> bool {
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

/// For a while, pooled connections are pinged before use, so the rest of the dead ones are replaced
/// without failing a request each. Called by [`super::observe`] when a connection was lost.
pub(super) fn distrust_idle_connections() {
    CONNECTION_LOST_AT_MS.store(millis_since_start(), Ordering::Relaxed);
}

fn idle_connections_distrusted() -> bool {
    let lost_at = CONNECTION_LOST_AT_MS.load(Ordering::Relaxed);
    lost_at != 0 && millis_since_start().saturating_sub(lost_at) < DISTRUST_FOR.as_millis() as u64
}

/// Connections opened at or before this instant (milliseconds after [`CLOCK_START`]) are replaced
/// rather than reused; 0 means none.
static SILENT_SINCE_MS: AtomicU64 = AtomicU64::new(0);

pub(super) fn replace_connections_opened_until_now() {
    SILENT_SINCE_MS.store(millis_since_start(), Ordering::Relaxed);
}

fn opened_before_silence(metrics: &Metrics) -> bool {
    let silent_since = SILENT_SINCE_MS.load(Ordering::Relaxed);
    let opened = metrics
        .created
        .checked_duration_since(*CLOCK_START)
        .map_or(0, |since| since.as_millis() as u64 + 1);
    silent_since != 0 && opened <= silent_since
}
