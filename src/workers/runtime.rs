//! Runs workers: on their schedule, restarted after a panic, watched by heartbeats, stopped
//! between two units of work.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use backon::{BackoffBuilder, ExponentialBuilder};
use tokio::{
    sync::{Notify, watch},
    task::JoinHandle,
};

use super::{Next, Outage, WORKER_LAST_TICK, WORKER_RESTARTS, Worker};

/// When a worker runs.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// From the start of one unit to the start of the next, when the worker says [`Next::Wait`].
    pub period: Duration,
    /// Before the first unit (the sweepers wait one interval, so replicas starting together
    /// spread out).
    pub first_after: Duration,
    /// How long one unit may take before `/readyz` says the worker stopped ticking.
    pub patience: Duration,
    /// How long one unit may run before it is cut short, as a request is at its deadline: a
    /// statement on a connection that went silent would otherwise hold the worker, and its pool
    /// slot, until TCP gives up. A unit cut short is a crash of that unit (its transaction rolls
    /// back, its connection is closed, not reused) and the worker is made anew.
    pub deadline: Duration,
}

impl Schedule {
    /// What a unit may take beyond its period before it is cut short: far above any round of
    /// statements on a database that answers, far below TCP's minutes.
    pub const DEADLINE_MARGIN: Duration = Duration::from_secs(10);

    pub fn every(period: Duration) -> Self {
        Self {
            period,
            first_after: Duration::ZERO,
            patience: period + Duration::from_secs(60),
            deadline: period + Self::DEADLINE_MARGIN,
        }
    }
}

/// `worker_units_cut_total{worker}`: units cut short at their deadline.
pub const WORKER_UNITS_CUT: &str = "worker_units_cut_total";

/// How a worker's loop ended.
enum Ended {
    /// Asked to stop between two units.
    Stopped,
    /// A unit ran past its deadline: the worker is made anew.
    CutShort,
}

/// By when each worker must next be heard from: what `/readyz` reads.
#[derive(Clone, Default)]
pub struct Heartbeats(Arc<Mutex<BTreeMap<String, Instant>>>);

impl Heartbeats {
    fn expect_by(&self, worker: &str, deadline: Instant) {
        let mut beats = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        beats.insert(worker.to_owned(), deadline);
    }

    fn forget(&self, worker: &str) {
        let mut beats = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        beats.remove(worker);
    }

    /// The workers that missed their deadline: a unit running longer than its patience, or a
    /// worker that never came back to run the next.
    pub fn stalled(&self) -> Vec<String> {
        let now = Instant::now();
        let beats = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        beats
            .iter()
            .filter(|(_, deadline)| **deadline < now)
            .map(|(worker, _)| worker.clone())
            .collect()
    }
}

/// The workers of one server: started by [`Workers::spawn`], stopped together by
/// [`Workers::shut_down`].
pub struct Workers {
    stop: watch::Sender<bool>,
    tasks: Vec<(String, JoinHandle<()>)>,
    heartbeats: Heartbeats,
}

impl Default for Workers {
    fn default() -> Self {
        Self::new()
    }
}

impl Workers {
    pub fn new() -> Self {
        Self {
            stop: watch::channel(false).0,
            tasks: Vec::new(),
            heartbeats: Heartbeats::default(),
        }
    }

    pub fn heartbeats(&self) -> Heartbeats {
        self.heartbeats.clone()
    }

    /// Runs the worker `make` makes on `schedule`. A failed unit is retried with backoff (its
    /// [`Outage`] says so); a panic is logged, counted, and the worker made anew after a pause.
    pub fn spawn<W, F>(&mut self, name: impl Into<String>, schedule: Schedule, make: F)
    where
        W: Worker,
        F: FnMut() -> W + Send + 'static,
    {
        self.spawn_woken(name, schedule, Arc::new(Notify::new()), make);
    }

    /// [`Workers::spawn`], for a worker that `wake` can call to its next unit before its wait
    /// is over (new work was committed for it).
    pub fn spawn_woken<W, F>(
        &mut self,
        name: impl Into<String>,
        schedule: Schedule,
        wake: Arc<Notify>,
        make: F,
    ) where
        W: Worker,
        F: FnMut() -> W + Send + 'static,
    {
        let name = name.into();
        let task = tokio::spawn(supervise(
            name.clone(),
            schedule,
            make,
            Waits {
                stop: self.stop.subscribe(),
                wake,
            },
            self.heartbeats.clone(),
        ));
        self.tasks.push((name, task));
    }

    /// Asks every worker to stop once its current unit is done, and waits up to `grace` for
    /// them; one still busy then is dropped (its unit rolls back and is done again later).
    pub async fn shut_down(self, grace: Duration) {
        self.stop.send_replace(true);
        let deadline = tokio::time::Instant::now() + grace;
        for (name, mut task) in self.tasks {
            if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
                tracing::warn!(worker = %name, "worker still busy at shutdown; stopped mid-unit");
                task.abort();
                self.heartbeats.forget(&name);
            }
        }
    }
}

/// A worker that ran this long without panicking starts its restart backoff over.
const STEADY_AFTER: Duration = Duration::from_secs(60);

async fn supervise<W, F>(
    name: String,
    schedule: Schedule,
    mut make: F,
    mut waits: Waits,
    heartbeats: Heartbeats,
) where
    W: Worker,
    F: FnMut() -> W + Send + 'static,
{
    let mut restarts = restart_backoff();
    loop {
        let started = Instant::now();
        let mut run = AbortOnDrop(tokio::spawn(drive(
            name.clone(),
            schedule,
            make(),
            waits.clone(),
            heartbeats.clone(),
        )));
        let panic = match (&mut run.0).await {
            Ok(Ended::Stopped) => break,
            Ok(Ended::CutShort) => None,
            Err(e) if e.is_panic() => Some(panic_message(e.into_panic())),
            Err(_) => break,
        };
        if started.elapsed() >= STEADY_AFTER {
            restarts = restart_backoff();
        }
        let pause = restarts.next().unwrap_or(Duration::from_secs(30));
        match panic {
            Some(panic) => {
                metrics::counter!(WORKER_RESTARTS, "worker" => name.clone()).increment(1);
                tracing::error!(worker = %name, panic = %panic, "{name} panicked; restarting it in {} ms", pause.as_millis());
            }
            None => {
                metrics::counter!(WORKER_UNITS_CUT, "worker" => name.clone()).increment(1);
                tracing::warn!(
                    worker = %name,
                    "a unit of {name} ran past its deadline of {} s (a database or node that stopped answering?); cut short, making it anew in {} ms",
                    schedule.deadline.as_secs(),
                    pause.as_millis()
                );
            }
        }
        heartbeats.expect_by(&name, Instant::now() + pause + schedule.patience);
        // A wake-up does not cut a pause short: a worker that panics on new work would spin.
        if waits.stopped_within(pause, false).await {
            break;
        }
    }
    heartbeats.forget(&name);
}

/// A supervisor stopped mid-unit takes its worker down with it.
struct AbortOnDrop(JoinHandle<Ended>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The worker's loop: wait, run a unit, say how it went, until asked to stop between two units.
async fn drive<W: Worker>(
    name: String,
    schedule: Schedule,
    mut worker: W,
    mut waits: Waits,
    heartbeats: Heartbeats,
) -> Ended {
    let mut outage = Outage::new(name.clone(), schedule.period);
    let mut wait = schedule.first_after;
    loop {
        heartbeats.expect_by(&name, Instant::now() + wait + schedule.patience);
        if waits.stopped_within(wait, true).await {
            return Ended::Stopped;
        }
        let started = Instant::now();
        heartbeats.expect_by(&name, started + schedule.patience);
        let Ok(ran) = tokio::time::timeout(schedule.deadline, worker.run_once()).await else {
            return Ended::CutShort;
        };
        metrics::gauge!(WORKER_LAST_TICK, "worker" => name.clone()).set(unix_now());
        wait = match ran {
            Ok(next) => {
                outage.recovered();
                match next {
                    Next::Again => Duration::ZERO,
                    Next::Wait => schedule.period.saturating_sub(started.elapsed()),
                    Next::WaitFor(wait) => wait,
                }
            }
            Err(failed) => outage.failed(&failed.error, failed.advice),
        };
    }
}

/// What ends a worker's wait early: a stop, or a wake-up.
#[derive(Clone)]
struct Waits {
    stop: watch::Receiver<bool>,
    wake: Arc<Notify>,
}

impl Waits {
    /// Waits `wait`, or less if asked to stop (or woken, if `wakeable`); whether it was asked
    /// to stop.
    async fn stopped_within(&mut self, wait: Duration, wakeable: bool) -> bool {
        if *self.stop.borrow() {
            return true;
        }
        if wait.is_zero() {
            return false;
        }
        let wake = self.wake.clone();
        let woken = async move {
            if wakeable {
                wake.notified().await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            // A dropped sender is a stop too: nobody is left to run for.
            changed = self.stop.changed() => changed.is_err() || *self.stop.borrow(),
            () = woken => *self.stop.borrow(),
            () = tokio::time::sleep(wait) => *self.stop.borrow(),
        }
    }
}

fn restart_backoff() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(30))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .build()
}

fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::workers::Failed;

    /// Panics in its first unit of each life until `lives` lives were lost; then counts its units.
    struct Flaky {
        units: Arc<AtomicU32>,
        lives_left_to_lose: Arc<AtomicU32>,
    }

    impl Worker for Flaky {
        async fn run_once(&mut self) -> Result<Next, Failed> {
            let left = self.lives_left_to_lose.load(Ordering::SeqCst);
            if left > 0 {
                self.lives_left_to_lose.store(left - 1, Ordering::SeqCst);
                panic!("flaky worker panics");
            }
            self.units.fetch_add(1, Ordering::SeqCst);
            Ok(Next::Wait)
        }
    }

    async fn until(what: &str, condition: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !condition() {
            assert!(Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_worker_that_panics_is_made_anew_and_a_stop_waits_for_its_unit() {
        let units = Arc::new(AtomicU32::new(0));
        let lives = Arc::new(AtomicU32::new(2));
        let mut workers = Workers::new();
        let (u, l) = (units.clone(), lives.clone());
        workers.spawn(
            "flaky",
            Schedule::every(Duration::from_millis(5)),
            move || Flaky {
                units: u.clone(),
                lives_left_to_lose: l.clone(),
            },
        );
        until("the worker runs again after two panics", || {
            units.load(Ordering::SeqCst) >= 3
        })
        .await;
        assert_eq!(lives.load(Ordering::SeqCst), 0);
        assert!(workers.heartbeats().stalled().is_empty());
        workers.shut_down(Duration::from_secs(5)).await;
        let after_stop = units.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            units.load(Ordering::SeqCst),
            after_stop,
            "no unit after a stop"
        );
    }

    /// Never finishes its unit.
    struct Stuck;

    impl Worker for Stuck {
        async fn run_once(&mut self) -> Result<Next, Failed> {
            std::future::pending().await
        }
    }

    #[tokio::test]
    async fn a_unit_running_past_its_deadline_is_cut_short_and_the_worker_made_anew() {
        let made = Arc::new(AtomicU32::new(0));
        let mut workers = Workers::new();
        let schedule = Schedule {
            deadline: Duration::from_millis(20),
            ..Schedule::every(Duration::from_millis(5))
        };
        let counted = made.clone();
        workers.spawn("stuck until cut", schedule, move || {
            counted.fetch_add(1, Ordering::SeqCst);
            Stuck
        });
        until("the stuck worker is made anew twice", || {
            made.load(Ordering::SeqCst) >= 3
        })
        .await;
        workers.shut_down(Duration::from_millis(50)).await;
    }

    #[tokio::test]
    async fn a_unit_running_past_its_patience_is_named_stalled() {
        let mut workers = Workers::new();
        let schedule = Schedule {
            period: Duration::from_millis(10),
            first_after: Duration::ZERO,
            patience: Duration::from_millis(50),
            deadline: Duration::from_secs(3600),
        };
        workers.spawn("stuck", schedule, || Stuck);
        let heartbeats = workers.heartbeats();
        until("the stuck worker is named", || {
            heartbeats.stalled() == vec!["stuck".to_owned()]
        })
        .await;
        workers.shut_down(Duration::from_millis(50)).await;
        assert!(
            heartbeats.stalled().is_empty(),
            "a stopped worker is forgotten"
        );
    }
}
