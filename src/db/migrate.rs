//! The schema: `migrations/`, embedded in the binary.

use anyhow::Context as _;
use sqlx::{
    PgConnection, Postgres,
    migrate::{MigrateDatabase, Migrator},
    postgres::PgPoolOptions,
};

pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// Creates the database if it does not exist, then applies pending migrations; on the server
/// that takes writes when `DATABASE_URL` lists several.
pub async fn migrate(database_url: &str) -> anyhow::Result<()> {
    let servers: super::servers::Servers = database_url.parse()?;
    let database_url = servers.writable_url().await?;
    let database_url = database_url.as_str();
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

/// How many of this binary's migrations the database has not applied (all of them when it has
/// never been migrated).
pub async fn pending(conn: &mut PgConnection) -> Result<usize, sqlx::Error> {
    let applied = sqlx::query_scalar!("SELECT version FROM _sqlx_migrations WHERE success")
        .fetch_all(conn)
        .await;
    let applied = match applied {
        Ok(applied) => applied,
        Err(e) if super::Failure::of(&e) == super::Failure::NotMigrated => Vec::new(),
        Err(e) => return Err(e),
    };
    Ok(MIGRATOR
        .iter()
        .filter(|m| !applied.contains(&m.version))
        .count())
}

/// What an operator must do about `pending` migrations.
pub fn advice(pending: usize) -> String {
    format!(
        "{pending} migration(s) not applied: run `payments-api migrate` (or start with `payments-api serve --migrate`)"
    )
}
