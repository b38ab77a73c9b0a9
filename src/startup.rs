//! Wires settings, database and router into a running server.

use std::net::SocketAddr;

use anyhow::Context;
use sqlx::PgPool;
use tokio::net::TcpListener;

use crate::{auth, config::Settings, db, http, sweeper};

pub struct Application {
    listener: TcpListener,
    router: axum::Router,
    pool: PgPool,
    sweep_interval: std::time::Duration,
}

impl Application {
    /// Connects, bootstraps API keys and binds the listener (port 0 picks a free port).
    pub async fn build(settings: &Settings) -> anyhow::Result<Self> {
        let pool = db::pool(&settings.database_url, settings.db_max_connections)?;
        if !settings.bootstrap_api_keys.is_empty() {
            auth::bootstrap(&pool, &settings.bootstrap_api_keys)
                .await
                .context("cannot store BOOTSTRAP_API_KEYS")?;
        }
        let listener = TcpListener::bind(settings.bind_addr)
            .await
            .with_context(|| format!("cannot listen on {}", settings.bind_addr))?;
        let router = http::router(pool.clone(), settings);
        Ok(Self {
            listener,
            router,
            pool,
            sweep_interval: settings.sweep_interval,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Serves until SIGINT or SIGTERM, then stops accepting and lets in-flight requests finish.
    pub async fn run_until_stopped(self) -> anyhow::Result<()> {
        tracing::info!(addr = %self.local_addr(), "listening");
        let sweeper = tokio::spawn(sweeper::run(self.pool.clone(), self.sweep_interval));
        let served = axum::serve(self.listener, self.router)
            .with_graceful_shutdown(shutdown_signal())
            .await;
        // A sweep cut short rolls back; the next replica or start finishes it.
        sweeper.abort();
        served.context("server failed")?;
        self.pool.close().await;
        tracing::info!("stopped");
        Ok(())
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
