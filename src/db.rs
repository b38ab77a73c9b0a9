//! Connection pool, migrations, and the request-scoped transaction that the idempotency layer
//! opens and a handler writes through.

use std::{str::FromStr, sync::Arc, time::Duration};

use anyhow::Context;
use sqlx::{
    PgPool, Postgres, Transaction,
    migrate::{MigrateDatabase, Migrator},
    postgres::{PgConnectOptions, PgPoolOptions},
};
use tokio::sync::{Mutex, OwnedMutexGuard};

pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

pub type PgTransaction = Transaction<'static, Postgres>;

/// Builds the pool lazily so the server starts (and `/healthz` answers) while the database is down.
pub fn pool(database_url: &str, max_connections: u32) -> anyhow::Result<PgPool> {
    Ok(pool_options(max_connections).connect_lazy_with(connect_options(database_url)?))
}

/// The pool that claims (and releases) Idempotency-Keys. Its commits do not wait for their WAL
/// flush (`synchronous_commit = off`): a claim lost in a database crash is harmless, because the
/// only write that matters after it, the handler's transaction with the completion, commits
/// durably, and flushing its commit flushes the WAL, claim included, up to that point. So a claim
/// can only vanish together with everything it led to, and the retry simply claims afresh.
pub fn claims_pool(database_url: &str, max_connections: u32) -> anyhow::Result<PgPool> {
    let options = connect_options(database_url)?.options([("synchronous_commit", "off")]);
    Ok(pool_options(max_connections).connect_lazy_with(options))
}

fn connect_options(database_url: &str) -> anyhow::Result<PgConnectOptions> {
    PgConnectOptions::from_str(database_url)
        .context("DATABASE_URL is not a valid PostgreSQL connection string")
}

fn pool_options(max_connections: u32) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max_connections)
        // A request waiting longer than this for a connection gets 503 rather than hanging.
        .acquire_timeout(Duration::from_secs(5))
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
        Ok(Self(Arc::new(Mutex::new(Some(pool.begin().await?)))))
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
