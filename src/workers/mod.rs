//! Background work (`docs/design.md`, "Background work"): every loop a replica runs besides
//! requests (webhook delivery, the sweepers, per chain a listener and a relayer, the pool's
//! keeper) is a [`Worker`], whose unit of work is [`Worker::run_once`], started through
//! [`Workers`], which schedules, supervises and stops it.
//!
//! - `outage`: a failing loop says so once, backs off, and says when it recovered
//! - `runtime`: the schedule, a panic restarting the worker, heartbeats (`/readyz`, metrics),
//!   graceful shutdown

mod outage;
mod runtime;

use std::{future::Future, time::Duration};

pub use outage::Outage;
pub use runtime::{Heartbeats, Schedule, WORKER_UNITS_CUT, Workers};

/// `worker_last_tick_seconds{worker}`: the Unix time at which the worker last finished a unit.
pub const WORKER_LAST_TICK: &str = "worker_last_tick_seconds";
/// `worker_restarts_total{worker}`: how often the worker panicked and was made anew.
pub const WORKER_RESTARTS: &str = "worker_restarts_total";

/// When a worker wants its next unit of work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// At once: there is more to do (a full batch came back).
    Again,
    /// After the worker's period, counted from the start of the unit that just ended.
    Wait,
    /// After this long (a halted listener looks again each minute).
    WaitFor(Duration),
}

/// A unit of work that failed: the error, and what an operator can do about it, if anything.
#[derive(Debug)]
pub struct Failed {
    pub error: Box<dyn std::error::Error + Send + Sync>,
    pub advice: Option<&'static str>,
}

impl Failed {
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self {
            error: Box::new(error),
            advice: None,
        }
    }
}

impl From<anyhow::Error> for Failed {
    fn from(error: anyhow::Error) -> Self {
        Self {
            error: error.into(),
            advice: None,
        }
    }
}

/// A database error is seen by the pool (`db::observe`), and carries the command to run when the
/// database is missing or not migrated.
impl From<sqlx::Error> for Failed {
    fn from(error: sqlx::Error) -> Self {
        crate::db::observe(&error);
        Self {
            advice: crate::db::advice(&error),
            error: Box::new(error),
        }
    }
}

/// A loop of background work, one unit at a time. All its state that matters lives in
/// PostgreSQL, so a unit cut short (a crash, a panic, a shutdown) is simply done again.
pub trait Worker: Send + 'static {
    /// One unit: a claim of due deliveries, a sweep round, a listener or relayer tick. Tests call
    /// it directly to move a worker step by step.
    fn run_once(&mut self) -> impl Future<Output = Result<Next, Failed>> + Send;
}
