//! Retention at sustained peak (`docs/design.md`, "Sweepers"): fresh creates and replays against
//! a database that already holds millions of idempotency records, while records come due for
//! deletion at twice the create rate and the sweeper deletes them; beside the same workloads on
//! an empty database earlier in the run. The sweeper must keep up, or the table grows without
//! bound.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use serde::Serialize;
use sqlx::{Connection as _, PgConnection};

use crate::{ApiProcess, HttpConnection, Op, Workload, empty_database, run};

#[derive(Debug, Serialize)]
pub struct RetentionReport {
    pub stored_keys: u64,
    /// Records coming due per second while the load runs.
    pub due_per_second: f64,
    pub create_rps: f64,
    pub replay_rps: f64,
    /// Over the same workloads on the empty database.
    pub create_vs_empty: Option<f64>,
    pub replay_vs_empty: Option<f64>,
    /// Records the sweeper deleted per second while the creates and replays ran.
    pub deleted_per_second: f64,
    /// Over the create rate: above 1 keeps up with the creates.
    pub deletion_vs_create: f64,
    /// Records past retention and not yet deleted when the load ended: near zero keeps up.
    pub backlog_at_end: i64,
}

/// Records written per fill statement.
const FILL_CHUNK: u64 = 1_000_000;
/// The due records keep coming due for this long, longer than the measured window.
const DUE_FOR: Duration = Duration::from_secs(600);
/// The first record comes due this long after the fill's last statement, later than that
/// statement and the start of the API take.
const LEAD: Duration = Duration::from_secs(60);

pub async fn run_retention(
    api_bin: &std::path::Path,
    server_url: &str,
    stored: u64,
    clients: usize,
    duration: Duration,
    empty: (Option<f64>, Option<f64>),
    api_env: &[(String, String)],
) -> anyhow::Result<(RetentionReport, Vec<Workload>)> {
    let database_url = empty_database(server_url, "payments_retention").await?;
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
    let due_per_second = (2.0 * empty.0.unwrap_or(1000.0)).round();
    let due = ((due_per_second * DUE_FOR.as_secs_f64()) as u64).min(stored / 2);
    let mut db = PgConnection::connect(&database_url).await?;
    fill(&mut db, stored, due, due_per_second).await?;

    let mut env = api_env.to_vec();
    // A round every two seconds (half a second of it sweeping at most), so the window sees
    // several.
    env.push(("SWEEP_INTERVAL_SECONDS".to_owned(), "2".to_owned()));
    let server = ApiProcess::start(api_bin, &database_url, &env).await?;
    let mut seeder = HttpConnection::open(server.addr).await?;
    let until_due: f64 = sqlx::query_scalar(
        "SELECT greatest(extract(epoch FROM min(expires_at) - now()), 0)::float8 FROM idempotency_keys",
    )
    .fetch_one(&mut db)
    .await?;
    eprintln!("loadgen: records start coming due in {until_due:.0} s");
    tokio::time::sleep(Duration::from_secs_f64(until_due)).await;
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
    let backlog_at_end: i64 =
        sqlx::query_scalar("SELECT count(*) FROM idempotency_keys WHERE expires_at <= now()")
            .fetch_one(&mut db)
            .await?;
    let ratio = |with: f64, without: Option<f64>| without.filter(|w| *w > 0.0).map(|w| with / w);
    let report = RetentionReport {
        stored_keys: stored,
        due_per_second,
        create_rps: create.rps,
        replay_rps: replay.rps,
        create_vs_empty: ratio(create.rps, empty.0),
        replay_vs_empty: ratio(replay.rps, empty.1),
        deleted_per_second,
        deletion_vs_create: deleted_per_second / create.rps.max(1.0),
        backlog_at_end,
    };
    Ok((report, vec![create, replay]))
}

/// Writes `stored` completed records straight into the table, each with a response the size of a
/// real intent's: first those kept for a day, then `due` that come due `due_per_second` from
/// [`LEAD`] after the last statement on.
async fn fill(
    conn: &mut PgConnection,
    stored: u64,
    due: u64,
    due_per_second: f64,
) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let first_due = stored - due;
    let mut due_from = None;
    let mut from = 0;
    while from < stored {
        let to = (from + FILL_CHUNK).min(stored);
        // Fixed by the first statement that writes due records, from how long the fill took so
        // far: after the fill and the API's start, not long after.
        if to > first_due && due_from.is_none() {
            due_from = Some(
                time::OffsetDateTime::now_utc()
                    + estimated_rest(started.elapsed(), from, stored)
                    + LEAD,
            );
        }
        // The last `due` records come due one after another, starting at the lead.
        sqlx::query(
            "INSERT INTO idempotency_keys (scope, key, fingerprint, state, attempt, lease_expires_at, \
                                           created_at, expires_at, completed_at, response_status, \
                                           response_headers, response_body) \
             SELECT 'merchant_demo', 'stored-' || i, sha256(i::text::bytea), 'completed', 1, now(), \
                    now() - interval '1 day', \
                    CASE WHEN i >= $3 \
                         THEN $5::timestamptz + make_interval(secs => (i - $3) / $4::float8) \
                         ELSE now() + interval '1 day' END, \
                    now(), 201, '{\"content-type\": \"application/json\"}', convert_to(repeat('x', 640), 'UTF8') \
               FROM generate_series($1::bigint, $2::bigint - 1) AS i",
        )
        .bind(from as i64)
        .bind(to as i64)
        .bind(first_due as i64)
        .bind(due_per_second)
        .bind(due_from.unwrap_or_else(time::OffsetDateTime::now_utc))
        .execute(&mut *conn)
        .await
        .context("filling idempotency_keys")?;
        from = to;
        eprintln!(
            "loadgen: {from} of {stored} records stored ({:.0} s)",
            started.elapsed().as_secs_f64()
        );
    }
    sqlx::query("ANALYZE idempotency_keys")
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// How much longer the fill will take, from how long it took so far (a chunk's worth at first).
fn estimated_rest(elapsed: Duration, done: u64, total: u64) -> Duration {
    if done == 0 {
        return Duration::from_secs(60);
    }
    elapsed.mul_f64((total - done) as f64 / done as f64)
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
