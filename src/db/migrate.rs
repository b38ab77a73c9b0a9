//! The schema: `migrations/`, embedded in the binary.

use anyhow::Context as _;
use sqlx::{
    Postgres,
    migrate::{MigrateDatabase, Migrator},
    postgres::PgPoolOptions,
};

pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

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
