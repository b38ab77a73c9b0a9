//! Background sweepers, run by every replica: expiring intents whose `expires_at` passed, and
//! deleting idempotency records and events past their retention. They work in batches with
//! `FOR UPDATE SKIP LOCKED`, so replicas share the work instead of colliding; a batch's size
//! follows how long its statement takes, so the lock time stays bounded while the rate keeps up
//! with the create rate (`docs/design.md`, "Sweepers").

use std::time::{Duration, Instant};

use sqlx::PgConnection;

use crate::{
    db::Pool,
    events, idempotency, intents,
    intents::{expiry::ExpiryHolds, repo::Expiry},
    telemetry::metrics as names,
    ways_to_pay,
    workers::{Failed, Next, Schedule, Worker},
};

/// Rows per statement a sweep starts with (and the chain listener's expiry uses).
pub const BATCH: i64 = 500;
/// Bounds of a batch. The lower keeps a slow database from being swept one row at a time; the
/// upper keeps one statement's memory and WAL small whatever its speed.
const MIN_BATCH: i64 = 100;
const MAX_BATCH: i64 = 20_000;
/// How long one statement may take, and so hold its rows' locks: a batch grows while its
/// statements finish in under half of this, and shrinks when one takes longer.
const TARGET_STATEMENT: Duration = Duration::from_millis(100);

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SweepReport {
    pub intents_expired: u64,
    pub keys_deleted: u64,
    pub events_deleted: u64,
}

/// The three sweeps a round runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sweep {
    ExpireIntents,
    DeleteKeys,
    DeleteEvents,
}

/// A replica's sweepers: what they leave alone, how long a round may run, and each sweep's batch
/// size, carried from round to round (`docs/design.md`, "Sweepers").
pub struct Sweeper {
    settled_chains: Vec<String>,
    /// What the ways to pay observed that holds an intent off expiring: an order no option was
    /// chosen for expires by the clock, but not while a deposit at an option's address waits.
    holds: ExpiryHolds,
    budget: Duration,
    batches: [(Sweep, i64); 3],
}

impl Sweeper {
    /// Intents on `settled_chains` are left to their chain's listener, which expires them by the
    /// chain's time, not ours (`docs/settlement.md`, "Expiry"). A round stops after `budget`;
    /// what is left waits for the next.
    pub fn new(settled_chains: Vec<String>, budget: Duration) -> Self {
        Self {
            settled_chains,
            holds: ways_to_pay::expiry_holds(),
            budget,
            batches: [
                (Sweep::ExpireIntents, BATCH),
                (Sweep::DeleteKeys, BATCH),
                (Sweep::DeleteEvents, BATCH),
            ],
        }
    }

    /// One round: each sweep runs a batch in turn until every one came back short (nothing more
    /// is due) or the budget is spent, so a backlog of one kind never starves the others.
    pub async fn sweep_once(
        &mut self,
        conn: &mut PgConnection,
    ) -> Result<SweepReport, sqlx::Error> {
        let mut report = SweepReport::default();
        let deadline = Instant::now() + self.budget;
        let mut done = [false; 3];
        while !done.iter().all(|d| *d) && Instant::now() < deadline {
            for (i, (sweep, batch)) in self.batches.iter_mut().enumerate() {
                if done[i] {
                    continue;
                }
                let started = Instant::now();
                let n = match sweep {
                    Sweep::ExpireIntents => {
                        let expiry = Expiry::Clock {
                            settled_chains: &self.settled_chains,
                            holds: &self.holds,
                        };
                        let n = intents::repo::expire_due(conn, *batch, &expiry).await?;
                        report.intents_expired += n;
                        n
                    }
                    Sweep::DeleteKeys => {
                        let n = idempotency::delete_expired(conn, *batch).await?;
                        report.keys_deleted += n;
                        n
                    }
                    Sweep::DeleteEvents => {
                        let n = events::delete_expired(conn, *batch).await?;
                        report.events_deleted += n;
                        n
                    }
                };
                let full = n >= *batch as u64;
                *batch = next_batch(*batch, full, started.elapsed());
                done[i] = !full;
            }
        }
        Ok(report)
    }
}

/// The next batch size: doubled after a full batch that was quick, halved after a slow one.
fn next_batch(batch: i64, full: bool, took: Duration) -> i64 {
    if took > TARGET_STATEMENT {
        (batch / 2).max(MIN_BATCH)
    } else if full && took < TARGET_STATEMENT / 2 {
        (batch * 2).min(MAX_BATCH)
    } else {
        batch
    }
}

/// The sweepers as a [`Worker`]: one round per unit, every `SWEEP_INTERVAL_SECONDS`.
pub struct SweepWorker {
    pool: Pool,
    sweeper: Sweeper,
}

impl SweepWorker {
    pub fn new(pool: Pool, interval: Duration, settled_chains: Vec<String>) -> Self {
        // A quarter of each interval at most: a replica working off a backlog leaves most of its
        // time (and the database's) to requests, and still deletes many times the create rate.
        Self {
            pool,
            sweeper: Sweeper::new(settled_chains, interval / 4),
        }
    }

    /// The first round comes one interval after start, not at once: a replica starting up has
    /// better things to do, and the rounds of all replicas spread out.
    pub fn schedule(interval: Duration) -> Schedule {
        Schedule {
            first_after: interval,
            ..Schedule::every(interval)
        }
    }
}

impl Worker for SweepWorker {
    async fn run_once(&mut self) -> Result<Next, Failed> {
        let round = async {
            self.sweeper
                .sweep_once(&mut *self.pool.acquire().await?)
                .await
        }
        .await;
        metrics::counter!(names::SWEEP_RUNS, "result" => if round.is_ok() { "ok" } else { "error" }).increment(1);
        let report = round?;
        metrics::counter!(names::SWEEP_INTENTS_EXPIRED).increment(report.intents_expired);
        metrics::counter!(names::SWEEP_KEYS_DELETED).increment(report.keys_deleted);
        metrics::counter!(names::SWEEP_EVENTS_DELETED).increment(report.events_deleted);
        if report != SweepReport::default() {
            tracing::info!(
                intents_expired = report.intents_expired,
                keys_deleted = report.keys_deleted,
                events_deleted = report.events_deleted,
                "swept"
            );
        }
        Ok(Next::Wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_grow_while_quick_and_full_and_shrink_when_slow() {
        let quick = TARGET_STATEMENT / 4;
        let slow = TARGET_STATEMENT * 2;
        assert_eq!(next_batch(500, true, quick), 1000);
        assert_eq!(
            next_batch(500, false, quick),
            500,
            "a short batch says nothing of speed"
        );
        assert_eq!(next_batch(500, true, TARGET_STATEMENT * 3 / 4), 500);
        assert_eq!(next_batch(500, true, slow), 250);
        assert_eq!(next_batch(MAX_BATCH, true, quick), MAX_BATCH);
        assert_eq!(next_batch(MIN_BATCH, true, slow), MIN_BATCH);
    }
}
