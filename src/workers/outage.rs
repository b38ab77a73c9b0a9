//! A loop's run of consecutive failures: said once, reminded each minute, ended once.

use std::{
    fmt::Display,
    time::{Duration, Instant},
};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// While an outage lasts, it is said again this often, so a reader of a recent log sees it too.
pub const REMIND_EVERY: Duration = Duration::from_secs(60);

/// The longest wait between two tries of a failing loop: short enough that it resumes within
/// seconds of a database coming back.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(5);

/// A background loop's run of consecutive failures: the first is logged as a change of state,
/// then a reminder every [`REMIND_EVERY`], and the recovery once; between tries the loop waits
/// longer and longer, up to [`MAX_RETRY_DELAY`].
pub struct Outage {
    worker: String,
    first_retry: Duration,
    backoff: ExponentialBackoff,
    started: Option<Instant>,
    failures: u64,
    last_said: Instant,
}

impl Outage {
    /// For the loop named `worker` (it names the log lines), whose first retry comes after
    /// `first_retry` (its usual period, so a single failure changes nothing of its pace).
    pub fn new(worker: impl Into<String>, first_retry: Duration) -> Self {
        Self {
            worker: worker.into(),
            first_retry,
            backoff: backoff(first_retry),
            started: None,
            failures: 0,
            last_said: Instant::now(),
        }
    }

    /// Records a failed round, logs it if it starts an outage or a reminder is due, and answers
    /// how long to wait before the next try. `advice` says what an operator can do about it.
    pub fn failed(&mut self, error: &dyn Display, advice: Option<&str>) -> Duration {
        self.failures += 1;
        let now = Instant::now();
        let advice = advice.unwrap_or("retrying with backoff");
        match self.started {
            None => {
                self.started = Some(now);
                self.last_said = now;
                tracing::warn!(worker = %self.worker, error = %error, "{} is failing: {advice}", self.worker);
            }
            Some(started) if now.duration_since(self.last_said) >= REMIND_EVERY => {
                self.last_said = now;
                tracing::warn!(
                    worker = %self.worker,
                    error = %error,
                    failures = self.failures,
                    for_seconds = started.elapsed().as_secs(),
                    "{} is still failing: {advice}",
                    self.worker
                );
            }
            Some(_) => {}
        }
        self.backoff.next().unwrap_or(MAX_RETRY_DELAY)
    }

    /// Records a round that worked: the end of an outage is logged once.
    pub fn recovered(&mut self) {
        if let Some(started) = self.started.take() {
            tracing::info!(
                worker = %self.worker,
                failures = self.failures,
                for_seconds = started.elapsed().as_secs(),
                "{} recovered",
                self.worker
            );
            self.failures = 0;
            self.backoff = backoff(self.first_retry);
        }
    }

    /// Whether the last round failed.
    pub fn is_failing(&self) -> bool {
        self.started.is_some()
    }
}

fn backoff(first_retry: Duration) -> ExponentialBackoff {
    ExponentialBuilder::default()
        .with_min_delay(first_retry.min(MAX_RETRY_DELAY))
        .with_max_delay(MAX_RETRY_DELAY)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_to_the_cap_and_start_over_after_a_recovery() {
        let mut outage = Outage::new("test", Duration::from_millis(250));
        let waits: Vec<Duration> = (0..12)
            .map(|_| outage.failed(&"database down", None))
            .collect();
        assert!(waits[0] >= Duration::from_millis(250), "{waits:?}");
        assert!(waits[0] < Duration::from_millis(1000), "{waits:?}");
        assert!(waits.iter().all(|w| *w <= MAX_RETRY_DELAY * 2), "{waits:?}");
        assert!(waits[11] >= MAX_RETRY_DELAY, "{waits:?}");
        assert!(outage.is_failing());
        outage.recovered();
        assert!(!outage.is_failing());
        assert!(outage.failed(&"again", None) < Duration::from_millis(1000));
    }
}
