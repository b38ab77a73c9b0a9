//! Background sweepers, run by every replica: expiring intents whose `expires_at` passed, and
//! deleting idempotency records and events past their retention. Both work in bounded batches with
//! `FOR UPDATE SKIP LOCKED`, so replicas share the work instead of colliding.

use std::time::Duration;

use sqlx::PgConnection;

use crate::{
    db::Pool, events, idempotency, intents, intents::repo::Expiry, telemetry::metrics as names,
};

/// Rows per statement: small enough to keep each transaction short.
pub const BATCH: i64 = 500;
/// Batches per tick, so one tick is bounded even after a long outage; the rest waits a tick.
const MAX_BATCHES_PER_TICK: usize = 20;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SweepReport {
    pub intents_expired: u64,
    pub keys_deleted: u64,
    pub events_deleted: u64,
}

/// One round of both sweepers. Intents on `settled_chains` are left to their chain's listener,
/// which expires them by the chain's time, not ours (`docs/settlement.md`, "Expiry").
pub async fn sweep_once(
    conn: &mut PgConnection,
    settled_chains: &[String],
) -> Result<SweepReport, sqlx::Error> {
    let mut report = SweepReport::default();
    let expiry = Expiry::Clock { settled_chains };
    for _ in 0..MAX_BATCHES_PER_TICK {
        let expired = intents::repo::expire_due(conn, BATCH, &expiry).await?;
        report.intents_expired += expired;
        if expired < BATCH as u64 {
            break;
        }
    }
    for _ in 0..MAX_BATCHES_PER_TICK {
        let deleted = idempotency::delete_expired(conn, BATCH).await?;
        report.keys_deleted += deleted;
        if deleted < BATCH as u64 {
            break;
        }
    }
    for _ in 0..MAX_BATCHES_PER_TICK {
        let deleted = events::delete_expired(conn, BATCH).await?;
        report.events_deleted += deleted;
        if deleted < BATCH as u64 {
            break;
        }
    }
    Ok(report)
}

/// Sweeps every `interval` until the task is dropped. A failed round (database down) is logged
/// and retried next tick; it never stops the loop.
pub async fn run(pool: Pool, interval: Duration, settled_chains: Vec<String>) {
    // The first round comes one interval after start, not at once: a replica starting up has
    // better things to do, and the rounds of all replicas spread out.
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let round = async { sweep_once(&mut *pool.acquire().await?, &settled_chains).await }.await;
        metrics::counter!(names::SWEEP_RUNS, "result" => if round.is_ok() { "ok" } else { "error" }).increment(1);
        if let Ok(report) = &round {
            metrics::counter!(names::SWEEP_INTENTS_EXPIRED).increment(report.intents_expired);
            metrics::counter!(names::SWEEP_KEYS_DELETED).increment(report.keys_deleted);
            metrics::counter!(names::SWEEP_EVENTS_DELETED).increment(report.events_deleted);
        }
        match round {
            Ok(report) if report != SweepReport::default() => {
                tracing::info!(
                    intents_expired = report.intents_expired,
                    keys_deleted = report.keys_deleted,
                    events_deleted = report.events_deleted,
                    "swept"
                );
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "sweep failed; retrying next tick"),
        }
    }
}
