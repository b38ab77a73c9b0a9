//! Wires settings, database and router into a running server.

use std::{net::SocketAddr, time::Duration};

use anyhow::Context;
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    server::graceful::GracefulShutdown,
    service::TowerToHyperService,
};
use tokio::net::TcpListener;

use crate::{
    auth,
    checkout::{self, changes::ChangesWorker},
    config::{Settings, WebhookSettings},
    db,
    housekeeping::SweepWorker,
    http, rails,
    tenants::{self, RegistryWorker},
    ways_to_pay,
    webhooks::delivery::DeliveryWorker,
    workers::{Failed, Next, Schedule, Worker, Workers},
};

pub struct Application {
    listener: TcpListener,
    router: axum::Router,
    /// The requests' pool.
    pool: db::Pool,
    /// The background work's own pool: merchant traffic never makes a worker wait.
    background: db::Pool,
    limiter: tenants::Limiter,
    limits_refresh: Duration,
    sweep_interval: Duration,
    request_timeout: Duration,
    webhooks: WebhookSettings,
    settlement: rails::Chains,
    relayer_keys: Vec<rails::relayer::Key>,
    /// What open checkout pages of this replica follow.
    changes: checkout::changes::Changes,
    bootstrap: auth::Bootstrap,
    workers: Workers,
    database_url: String,
}

impl Application {
    /// Checks what configuration is left to check, connects, bootstraps API keys and binds the
    /// listener (port 0 picks a free port). A database that is not there yet is not an error: the
    /// keys are stored once it is, and requests get 503 meanwhile.
    pub async fn build(settings: &Settings) -> anyhow::Result<Self> {
        let settlement = rails::Chains::new(&settings.settlement);
        let relayer_keys = settlement.relayer_keys()?;
        let bootstrap = auth::Bootstrap::new(&settings.bootstrap_api_keys)?;
        let pool = db::request_pool(
            &settings.database_url,
            settings.db_max_connections,
            settings.db_wait_timeout,
        )?;
        let background = db::pool(&settings.database_url, settings.db_background_connections)?;
        match bootstrap.store(&background).await {
            Ok(()) => {}
            // Said by the retrying task; `/readyz` says it too.
            Err(e) if db::Failure::of(&e).is_transient() => {}
            Err(e) => return Err(e).context("cannot store BOOTSTRAP_API_KEYS"),
        }
        let listener = TcpListener::bind(settings.bind_addr)
            .await
            .with_context(|| format!("cannot listen on {}", settings.bind_addr))?;
        // Installed before serving so every series exists from the first request on.
        crate::telemetry::metrics::handle();
        let workers = Workers::new();
        let changes = checkout::changes::Changes::default();
        let limiter = tenants::Limiter::new(settings.merchant_limits);
        let router = http::router(
            settings,
            http::Shared {
                pool: pool.clone(),
                background: background.clone(),
                chains: settlement.clone(),
                bootstrap: bootstrap.clone(),
                heartbeats: workers.heartbeats(),
                changes: changes.clone(),
                limiter: limiter.clone(),
            },
        );
        Ok(Self {
            listener,
            router,
            pool,
            background,
            limiter,
            limits_refresh: settings.merchant_limits.refresh_every,
            sweep_interval: settings.sweep_interval,
            request_timeout: settings.request_timeout,
            webhooks: settings.webhooks,
            settlement,
            relayer_keys,
            bootstrap,
            workers,
            database_url: settings.database_url.clone(),
            changes,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Serves until SIGINT or SIGTERM, then stops accepting and gives in-flight requests up to the
    /// request timeout to finish (their own timeout rolls back any that run longer), and the
    /// workers their current unit.
    pub async fn run_until_stopped(mut self) -> anyhow::Result<()> {
        tracing::info!(addr = %self.local_addr(), "listening");
        self.spawn_workers();
        let bootstrap = (!self.bootstrap.is_done())
            .then(|| tokio::spawn(self.bootstrap.store_when_possible(self.background.clone())));
        tokio::spawn(report_database(self.background.clone()));
        let changes = self.changes.clone();
        serve(
            self.listener,
            self.router,
            self.request_timeout,
            move || changes.stop(),
        )
        .await;
        bootstrap.iter().for_each(|task| task.abort());
        // Every worker keeps its state in PostgreSQL: a unit cut short rolls back and is done
        // again by the next replica or start (a delivery once its lease passes).
        self.workers.shut_down(self.request_timeout).await;
        self.pool.close().await;
        self.background.close().await;
        tracing::info!("stopped");
        Ok(())
    }

    /// Every background loop of this replica, started through one place (`docs/design.md`,
    /// "Background work").
    fn spawn_workers(&mut self) {
        let (pool, workers) = (&self.background, &mut self.workers);
        let (interval, chains) = (self.sweep_interval, self.settlement.settings.chain_names());
        workers.spawn("sweeper", SweepWorker::schedule(interval), {
            let pool = pool.clone();
            move || SweepWorker::new(pool.clone(), interval, chains.clone())
        });
        workers.spawn("pool keeper", Schedule::every(KEEP_CHECKED_EVERY), {
            let pools = [self.pool.clone(), pool.clone()];
            move || PoolKeeper(pools.clone())
        });
        let replica = uuid::Uuid::new_v4();
        let schedule = RegistryWorker::schedule(self.limits_refresh);
        workers.spawn("merchant limits", schedule, {
            let (pool, limiter) = (pool.clone(), self.limiter.clone());
            move || RegistryWorker::new(pool.clone(), limiter.clone(), replica)
        });
        if self.webhooks.deliver {
            let settings = self.webhooks;
            workers.spawn("webhook delivery", DeliveryWorker::schedule(&settings), {
                let pool = pool.clone();
                move || DeliveryWorker::new(pool.clone(), settings)
            });
        }
        if self.settlement.is_on() {
            let (database_url, changes) = (self.database_url.clone(), self.changes.clone());
            workers.spawn("checkout changes", ChangesWorker::schedule(), move || {
                ChangesWorker::new(database_url.clone(), changes.clone())
            });
        }
        rails::spawn(
            workers,
            pool,
            &self.database_url,
            &self.settlement,
            std::mem::take(&mut self.relayer_keys),
            ways_to_pay::submission_kinds(),
            ways_to_pay::chain_watch(&self.settlement.settings),
        );
    }
}

/// Checks both pools' idle connections (`db::Pool::check_idle`).
struct PoolKeeper([db::Pool; 2]);

impl Worker for PoolKeeper {
    async fn run_once(&mut self) -> Result<Next, Failed> {
        for pool in &self.0 {
            pool.check_idle().await;
        }
        Ok(Next::Wait)
    }
}

/// How often idle pooled connections are checked for a network that silently dropped them.
const KEEP_CHECKED_EVERY: Duration = Duration::from_secs(5);

/// Says at start what stands between this server and serving: an unreachable database (with the
/// real cause) or missing migrations (with what to run). Requests get 503 with the same reason.
async fn report_database(pool: db::Pool) {
    match async { db::migrate::pending(&mut *pool.acquire().await?).await }.await {
        Ok(0) => {}
        Ok(pending) => tracing::error!("{}", db::migrate::advice(pending)),
        Err(e) => tracing::error!(
            error = %e,
            "cannot reach the database; requests get 503 until it answers"
        ),
    }
}

/// The accept loop. It is `axum::serve` plus what that lacks: a deadline for reading a request's
/// headers (hyper only enforces one when given a timer, which `axum::serve` never does), so a
/// client that trickles its headers (slow loris) is cut off after the request timeout instead of
/// holding a connection forever. The body has the same deadline in the idempotency layer.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// `stopping` runs once the server stops accepting, before it waits for open connections.
async fn serve(
    listener: TcpListener,
    router: axum::Router,
    request_timeout: Duration,
    stopping: impl FnOnce(),
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(request_timeout)
        // Our requests carry a few small headers; a 64 KiB head is already absurd (431 beyond).
        .max_buf_size(MAX_HEAD_BYTES);
    let connections = GracefulShutdown::new();
    let signal = shutdown_signal();
    tokio::pin!(signal);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut signal => break,
        };
        let (stream, peer) = stream;
        let _ = stream.set_nodelay(true);
        // The peer's address, for what the dashboard's audit log records.
        let service = tower::util::MapRequest::new(
            router.clone(),
            move |mut request: hyper::Request<hyper::body::Incoming>| {
                request
                    .extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                request
            },
        );
        let connection =
            http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let connection = connections.watch(connection);
        tokio::spawn(async move {
            // Errors here are a client's (reset, malformed, too slow): nothing to report.
            let _ = connection.await;
        });
    }
    drop(listener);
    stopping();
    // Idle keep-alive connections are closed at once; busy ones finish their request, within the
    // request timeout plus a little, or are dropped (their transactions roll back).
    tokio::select! {
        () = connections.shutdown() => {}
        () = tokio::time::sleep(request_timeout + Duration::from_secs(1)) => {
            tracing::warn!("connections still open after the grace period; exiting anyway");
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down: finishing in-flight requests");
}
