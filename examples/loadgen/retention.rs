//! Retention at sustained peak (`docs/design.md`, "Sweepers"): fresh creates and replays against
//! a database that already holds millions of idempotency records, a fifth of them past retention,
//! while the sweeper deletes; beside the same workloads on an empty database earlier in the run.
//! The sweeper must delete faster than the API creates, or the table grows without bound.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use serde::Serialize;
use sqlx::{Connection as _, PgConnection};

use crate::{ApiProcess, HttpConnection, Op, Workload, run};

#[derive(Debug, Serialize)]
pub struct RetentionReport {
    pub stored_keys: u64,
    /// Of those, past retention when the load starts.
    pub due_keys: u64,
    pub create_rps: f64,
    pub replay_rps: f64,
    /// Over the same workloads on the empty database.
    pub create_vs_empty: Option<f64>,
    pub replay_vs_empty: Option<f64>,
    /// Records the sweeper deleted per second while the creates and replays ran.
    pub deleted_per_second: f64,
    /// Over the create rate: above 1 keeps up.
    pub deletion_vs_create: f64,
}

/// Records written per fill statement.
const FILL_CHUNK: u64 = 1_000_000;

pub async fn run_retention(
    api_bin: &std::path::Path,
    server_url: &str,
    stored: u64,
    clients: usize,
    duration: Duration,
    empty: (Option<f64>, Option<f64>),
    api_env: &[(String, String)],
) -> anyhow::Result<(RetentionReport, Vec<Workload>)> {
    let database_url = format!("{server_url}/payments_retention");
    let mut admin = PgConnection::connect(&format!("{server_url}/postgres")).await?;
    sqlx::query("DROP DATABASE IF EXISTS payments_retention WITH (FORCE)")
        .execute(&mut admin)
        .await?;
    sqlx::query("CREATE DATABASE payments_retention")
        .execute(&mut admin)
        .await?;
    // A first start migrates and seeds the keys to replay; it stops before the fill, so no
    // sweeper runs until the measured start.
    let hot: Vec<String> = (0..1000).map(|i| format!("hot-{i}")).collect();
    {
        let server = ApiProcess::start(api_bin, &database_url, api_env).await?;
        let mut seeder = HttpConnection::open(server.addr).await?;
        for key in &hot {
            anyhow::ensure!(
                seeder.post(Some(key)).await? == 201,
                "seeding the hot keys failed"
            );
        }
    }
    let due = stored / 5;
    fill(&database_url, stored, due).await?;

    let mut env = api_env.to_vec();
    // A round every two seconds (at most one second of it sweeping), so the window sees several.
    env.push(("SWEEP_INTERVAL_SECONDS".to_owned(), "2".to_owned()));
    let server = ApiProcess::start(api_bin, &database_url, &env).await?;
    let mut seeder = HttpConnection::open(server.addr).await?;
    let deleted_before = deleted(&mut seeder).await?;
    let window = std::time::Instant::now();
    let create = run(
        &server,
        "create_fresh_10m_keys",
        clients,
        duration,
        Op::CreateFresh,
    )
    .await;
    let replay = run(
        &server,
        "replay_10m_keys",
        clients,
        duration,
        Op::Replay(Arc::new(hot)),
    )
    .await;
    let deleted_per_second =
        (deleted(&mut seeder).await? - deleted_before) / window.elapsed().as_secs_f64();
    let ratio = |with: f64, without: Option<f64>| without.filter(|w| *w > 0.0).map(|w| with / w);
    let report = RetentionReport {
        stored_keys: stored,
        due_keys: due,
        create_rps: create.rps,
        replay_rps: replay.rps,
        create_vs_empty: ratio(create.rps, empty.0),
        replay_vs_empty: ratio(replay.rps, empty.1),
        deleted_per_second,
        deletion_vs_create: deleted_per_second / create.rps.max(1.0),
    };
    Ok((report, vec![create, replay]))
}

/// Writes `stored` completed records straight into the table, `due` of them past retention and
/// the rest kept for a day, each with a response the size of a real intent's.
async fn fill(database_url: &str, stored: u64, due: u64) -> anyhow::Result<()> {
    let mut conn = PgConnection::connect(database_url).await?;
    let started = std::time::Instant::now();
    let mut from = 0;
    while from < stored {
        let to = (from + FILL_CHUNK).min(stored);
        sqlx::query(
            "INSERT INTO idempotency_keys (scope, key, fingerprint, state, attempt, lease_expires_at, \
                                           created_at, expires_at, completed_at, response_status, \
                                           response_headers, response_body) \
             SELECT 'merchant_demo', 'stored-' || i, sha256(i::text::bytea), 'completed', 1, now(), \
                    now() - interval '1 day', \
                    CASE WHEN i < $3 THEN now() - interval '1 second' ELSE now() + interval '1 day' END, \
                    now(), 201, '{\"content-type\": \"application/json\"}', convert_to(repeat('x', 640), 'UTF8') \
               FROM generate_series($1::bigint, $2::bigint - 1) AS i",
        )
        .bind(from as i64)
        .bind(to as i64)
        .bind(due as i64)
        .execute(&mut conn)
        .await
        .context("filling idempotency_keys")?;
        from = to;
        eprintln!(
            "loadgen: {from} of {stored} records stored ({:.0} s)",
            started.elapsed().as_secs_f64()
        );
    }
    sqlx::query("VACUUM ANALYZE idempotency_keys")
        .execute(&mut conn)
        .await?;
    Ok(())
}

/// The sweeper's count of deleted records, from the API's metrics.
async fn deleted(connection: &mut HttpConnection) -> anyhow::Result<f64> {
    let text = connection.get_text("/metrics").await?;
    Ok(text
        .lines()
        .find_map(|line| line.strip_prefix("sweeper_keys_deleted_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0))
}
