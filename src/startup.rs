//! Wires settings, database and router into a running server.

use std::{future::IntoFuture, net::SocketAddr, time::Duration};

use anyhow::Context;
use sqlx::PgPool;
use tokio::net::TcpListener;

use crate::{auth, config::Settings, db, http, sweeper};

pub struct Application {
    listener: TcpListener,
    router: axum::Router,
    pool: PgPool,
    sweep_interval: Duration,
    request_timeout: Duration,
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
        // Installed before serving so every series exists from the first request on.
        crate::telemetry::metrics::handle();
        let claims = db::claims_pool(
            &settings.database_url,
            (settings.db_max_connections / 2).max(2),
        )?;
        let router = http::router(pool.clone(), claims, settings);
        Ok(Self {
            listener,
            router,
            pool,
            sweep_interval: settings.sweep_interval,
            request_timeout: settings.request_timeout,
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

    /// Serves until SIGINT or SIGTERM, then stops accepting and gives in-flight requests up to the
    /// request timeout to finish (their own timeout rolls back any that run longer).
    pub async fn run_until_stopped(self) -> anyhow::Result<()> {
        tracing::info!(addr = %self.local_addr(), "listening");
        let sweeper = tokio::spawn(sweeper::run(self.pool.clone(), self.sweep_interval));
        let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel::<()>();
        let server = axum::serve(self.listener, self.router).with_graceful_shutdown(async move {
            shutdown_signal().await;
            let _ = stopping_tx.send(());
        });
        // Idle keep-alive connections or a client that never reads must not hold the exit.
        let grace = self.request_timeout + Duration::from_secs(1);
        let deadline = async move {
            if stopping_rx.await.is_ok() {
                tokio::time::sleep(grace).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        let served = tokio::select! {
            served = server.into_future() => served,
            () = deadline => {
                tracing::warn!("connections still open after the grace period; exiting anyway");
                Ok(())
            }
        };
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
