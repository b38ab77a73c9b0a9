//! This replica's share of each merchant's limits: a GCRA bucket (governor) for the rate and a
//! count of the requests in flight, both in memory, so admitting a request costs no round
//! trip and a refusal costs microseconds.

use std::{
    fmt::Write as _,
    num::NonZeroU32,
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    extract::{Request, State},
    http::{HeaderMap, HeaderName, HeaderValue},
    middleware::Next,
    response::{IntoResponse, Response},
};
use governor::{
    Quota, RateLimiter,
    clock::{Clock, DefaultClock},
    middleware::StateInformationMiddleware,
    state::{InMemoryState, NotKeyed},
};
use rand::Rng as _;

use super::{Allowance, Policy, RATE_LIMITED};
use crate::{auth::MerchantId, config::MerchantLimits, error::ApiError};

type Bucket = RateLimiter<NotKeyed, InMemoryState, DefaultClock, StateInformationMiddleware>;

/// One merchant's state in this replica, made for one allowance: when the allowance changes (a
/// replica came or went, the merchant's limits were set) the next request makes a new one, with a
/// full bucket and the same count of requests in flight.
struct MerchantState {
    allowance: Allowance,
    rate: Option<Bucket>,
    /// The merchant's requests running on this replica, limited or not: carried over to the
    /// state of a new allowance, so that the requests already running count under it too.
    in_flight: Arc<AtomicUsize>,
    /// Refusals since the last summary in the log, and when that was: a runaway loop is logged
    /// as one line per merchant every [`SUMMARY_EVERY`], not one line per refused request.
    refused: AtomicU64,
    summarized_at: Mutex<Instant>,
    /// `rate_limited_requests_total{merchant,reason}` for this merchant, registered once: a
    /// runaway loop is refused thousands of times a second.
    refused_for_rate: metrics::Counter,
    refused_for_concurrency: metrics::Counter,
}

/// How often a merchant's refusals are summarized in the log while they go on.
const SUMMARY_EVERY: Duration = Duration::from_secs(10);

impl MerchantState {
    fn new(merchant: &str, allowance: Allowance, in_flight: Arc<AtomicUsize>) -> Self {
        let refused = |reason: Reason| {
            metrics::counter!(
                RATE_LIMITED,
                "merchant" => merchant.to_owned(),
                "reason" => reason.as_str(),
            )
        };
        Self {
            refused_for_rate: refused(Reason::Rate),
            refused_for_concurrency: refused(Reason::Concurrency),
            allowance,
            rate: allowance
                .rate_share()
                .map(|share| RateLimiter::direct(Quota::per_second(share)).with_middleware()),
            in_flight,
            refused: AtomicU64::new(0),
            // The first refusal is logged at once.
            summarized_at: Mutex::new(Instant::now() - SUMMARY_EVERY),
        }
    }

    /// Counts a refusal; the refusals to log now, if a summary is due.
    fn refusal_to_report(&self, reason: Reason) -> Option<u64> {
        match reason {
            Reason::Rate => self.refused_for_rate.increment(1),
            Reason::Concurrency => self.refused_for_concurrency.increment(1),
        }
        self.refused.fetch_add(1, Ordering::Relaxed);
        let mut at = self.summarized_at.try_lock().ok()?;
        if at.elapsed() < SUMMARY_EVERY {
            return None;
        }
        *at = Instant::now();
        Some(self.refused.swap(0, Ordering::Relaxed))
    }
}

/// Every merchant's limits in this replica, and the policy they come from (which the registry
/// worker replaces every few seconds). Behind one `Arc`, as axum clones it for every request.
#[derive(Clone)]
pub struct Limiter(Arc<Limits>);

struct Limits {
    policy: RwLock<Arc<Policy>>,
    /// A merchant idle for a minute is forgotten: its next request finds a full bucket, as it
    /// would have anyway.
    merchants: moka::sync::Cache<String, Arc<MerchantState>>,
    clock: DefaultClock,
    /// The longest a refused request waits before its 429 is sent; each waits between half of
    /// it and all of it (`limit`).
    refusal_pause: Duration,
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Rate,
    Concurrency,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rate => "rate",
            Self::Concurrency => "concurrency",
        }
    }
}

/// A request let through: the slot it holds while it runs, and the headers its answer carries.
pub struct Admission {
    _in_flight: InFlight,
    headers: RateLimitHeaders,
}

impl Admission {
    /// The `RateLimit` and `RateLimit-Policy` fields of the request's answer.
    pub fn write_headers(&self, headers: &mut HeaderMap) {
        self.headers.write(headers);
    }
}

/// A request counted in its merchant's requests in flight until it ends.
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A request refused, and what its 429 says.
pub struct Refusal {
    pub reason: Reason,
    pub retry_after: Duration,
    headers: RateLimitHeaders,
    /// Refusals of this merchant to summarize in the log now, if a summary is due.
    report: Option<u64>,
}

/// On a 429 the merchant's limits gave: the access log leaves it out, since a runaway loop's
/// refusals are summarized once per merchant every few seconds instead.
#[derive(Debug, Clone, Copy)]
pub struct RefusedByLimits;

impl Limiter {
    pub fn new(defaults: MerchantLimits) -> Self {
        Self(Arc::new(Limits {
            policy: RwLock::new(Arc::new(Policy::new(defaults))),
            merchants: moka::sync::Cache::builder()
                .max_capacity(100_000)
                .time_to_idle(Duration::from_secs(60))
                .build(),
            clock: DefaultClock::default(),
            refusal_pause: defaults.refusal_pause,
        }))
    }

    pub fn policy(&self) -> Arc<Policy> {
        self.0
            .policy
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Applies from the next request on.
    pub fn publish(&self, policy: Policy) {
        *self
            .0
            .policy
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(policy);
    }

    fn state(&self, merchant: &str) -> Arc<MerchantState> {
        let allowance = self.policy().allowance(merchant);
        let state = self.0.merchants.get_with_by_ref(merchant, || {
            Arc::new(MerchantState::new(merchant, allowance, Arc::default()))
        });
        if state.allowance == allowance {
            return state;
        }
        let fresh = Arc::new(MerchantState::new(
            merchant,
            allowance,
            state.in_flight.clone(),
        ));
        self.0.merchants.insert(merchant.to_owned(), fresh.clone());
        fresh
    }

    /// The rule: a free slot in flight first (a request refused for concurrency spends no part
    /// of the rate), then a token of the rate.
    pub fn admit(&self, merchant: &str) -> Result<Admission, Refusal> {
        let state = self.state(merchant);
        let allowance = state.allowance;
        let mut headers = RateLimitHeaders::new(allowance);
        let share = allowance
            .concurrency_share()
            .map_or(usize::MAX, |share| share.get() as usize);
        let Ok(before) = state
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < share).then_some(n + 1)
            })
        else {
            headers.concurrency_remaining(0);
            return Err(Refusal {
                reason: Reason::Concurrency,
                retry_after: Duration::from_secs(1),
                headers,
                report: state.refusal_to_report(Reason::Concurrency),
            });
        };
        let in_flight = InFlight(state.in_flight.clone());
        headers.concurrency_remaining(share - before - 1);
        if let Some(bucket) = &state.rate {
            match bucket.check() {
                Ok(snapshot) => headers.rate_remaining(snapshot.remaining_burst_capacity(), 1),
                Err(not_until) => {
                    let retry_after = not_until.wait_time_from(self.0.clock.now());
                    headers.rate_remaining(0, whole_seconds(retry_after));
                    return Err(Refusal {
                        reason: Reason::Rate,
                        retry_after,
                        headers,
                        report: state.refusal_to_report(Reason::Rate),
                    });
                }
            }
        }
        Ok(Admission {
            _in_flight: in_flight,
            headers,
        })
    }
}

/// At least 1: `Retry-After: 0` would invite the retry loop we are refusing.
fn whole_seconds(wait: Duration) -> u64 {
    wait.as_secs_f64().ceil().max(1.0) as u64
}

/// Runs after authentication, before the idempotency layer: a refused request is answered
/// `429 rate_limited` with `Retry-After` before any record is written, so a retry with the same
/// key later runs as the first attempt would have.
///
/// The 429 is sent after a random time between half of `MERCHANT_REFUSAL_PAUSE_MS` and all of it,
/// which caps what each connection of a retry loop can make us refuse (`docs/design.md`,
/// "Refusals take their time").
pub async fn limit(State(limiter): State<Limiter>, request: Request, next: Next) -> Response {
    let Some(merchant) = request.extensions().get::<MerchantId>().cloned() else {
        return next.run(request).await;
    };
    match limiter.admit(merchant.as_str()) {
        Ok(admission) => {
            let mut response = next.run(request).await;
            admission.write_headers(response.headers_mut());
            response
        }
        Err(refusal) => {
            if let Some(refused) = refusal.report {
                tracing::warn!(
                    merchant = merchant.as_str(),
                    refused,
                    reason = refusal.reason.as_str(),
                    "requests refused by the merchant's limits (summarized every {} s while it lasts)",
                    SUMMARY_EVERY.as_secs()
                );
            }
            // Holds no slot, turn or pool connection: only the client's socket and a timer.
            tokio::time::sleep(refusal_pause(limiter.0.refusal_pause)).await;
            let mut response = ApiError::RateLimited {
                retry_after_seconds: whole_seconds(refusal.retry_after),
                reason: match refusal.reason {
                    Reason::Rate => "more requests per second than this merchant's limit",
                    Reason::Concurrency => "more requests at once than this merchant's limit",
                },
            }
            .into_response();
            refusal.headers.write(response.headers_mut());
            response.extensions_mut().insert(RefusedByLimits);
            response
        }
    }
}

/// A time between half of `pause` and all of it: a loop's connections, refused at once, are
/// answered spread over the pause instead of all together, and so send their next requests spread
/// out too rather than in one burst each pause (`docs/design.md`, "Refusals take their time").
fn refusal_pause(pause: Duration) -> Duration {
    if pause.is_zero() {
        return pause;
    }
    rand::rng().random_range(pause / 2..=pause)
}

const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

/// The IETF `RateLimit-Policy` and `RateLimit` fields (draft-ietf-httpapi-ratelimit-headers):
/// the merchant's limits across every replica, and what is left of them, estimated from this
/// replica's share (exact when the load balancer spreads requests evenly).
struct RateLimitHeaders {
    allowance: Allowance,
    rate: Option<(u32, u64)>,
    concurrency: Option<u32>,
}

impl RateLimitHeaders {
    fn new(allowance: Allowance) -> Self {
        Self {
            allowance,
            rate: None,
            concurrency: None,
        }
    }

    fn scaled(&self, local: u32, limit: NonZeroU32) -> u32 {
        local
            .saturating_mul(self.allowance.replicas.get())
            .min(limit.get())
    }

    fn rate_remaining(&mut self, local: u32, reset_seconds: u64) {
        if let Some(limit) = self.allowance.rate_per_second {
            self.rate = Some((self.scaled(local, limit), reset_seconds));
        }
    }

    fn concurrency_remaining(&mut self, local: usize) {
        if let Some(limit) = self.allowance.concurrency {
            self.concurrency = Some(self.scaled(local.try_into().unwrap_or(u32::MAX), limit));
        }
    }

    fn write(&self, headers: &mut HeaderMap) {
        let mut policy = String::new();
        let mut now = String::new();
        if let Some(limit) = self.allowance.rate_per_second {
            let _ = write!(policy, "\"rate\";q={limit};w=1");
            if let Some((remaining, reset)) = self.rate {
                let _ = write!(now, "\"rate\";r={remaining};t={reset}");
            }
        }
        if let Some(limit) = self.allowance.concurrency {
            let sep = if policy.is_empty() { "" } else { ", " };
            let _ = write!(
                policy,
                "{sep}\"concurrency\";q={limit};qu=\"concurrent-requests\""
            );
            if let Some(remaining) = self.concurrency {
                let sep = if now.is_empty() { "" } else { ", " };
                let _ = write!(now, "{sep}\"concurrency\";r={remaining}");
            }
        }
        for (name, value) in [(RATELIMIT_POLICY, policy), (RATELIMIT, now)] {
            if let Ok(value) = HeaderValue::try_from(value)
                && !value.is_empty()
            {
                headers.insert(name, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_pauses_spread_between_half_the_pause_and_all_of_it() {
        let pause = Duration::from_millis(100);
        let pauses: Vec<_> = (0..1000).map(|_| refusal_pause(pause)).collect();
        assert!(pauses.iter().all(|p| (pause / 2..=pause).contains(p)));
        // Spread, not one value: the chance that none of a thousand falls in a fifth is 0.8^1000.
        assert!(pauses.iter().any(|p| *p < pause * 6 / 10));
        assert!(pauses.iter().any(|p| *p > pause * 9 / 10));
        assert_eq!(refusal_pause(Duration::ZERO), Duration::ZERO);
    }

    fn limiter(rate: u32, concurrency: u32) -> Limiter {
        Limiter::new(MerchantLimits {
            rate_per_second: rate,
            concurrency,
            ..MerchantLimits::unlimited()
        })
    }

    #[test]
    fn a_burst_past_the_rate_is_refused_with_a_wait_and_other_merchants_are_untouched() {
        let limiter = limiter(3, 0);
        for _ in 0..3 {
            assert!(limiter.admit("a").is_ok());
        }
        let refused = limiter.admit("a").err().expect("the fourth is refused");
        assert_eq!(refused.reason, Reason::Rate);
        assert!(
            refused.retry_after > Duration::ZERO && refused.retry_after <= Duration::from_secs(1)
        );
        assert!(limiter.admit("b").is_ok());
    }

    #[test]
    fn a_slot_in_flight_is_given_back_when_its_request_ends() {
        let limiter = limiter(0, 1);
        let first = limiter.admit("a").ok().expect("the first runs");
        let refused = limiter
            .admit("a")
            .err()
            .expect("a second at once is refused");
        assert_eq!(refused.reason, Reason::Concurrency);
        drop(first);
        assert!(limiter.admit("a").is_ok());
    }

    /// A new allowance (a replica came or went, the merchant's limits were set) applies to the
    /// requests already running: they are not forgotten, so the limit is never exceeded across
    /// the change, and a lower limit refuses until enough of them have ended.
    #[test]
    fn requests_in_flight_count_under_a_new_allowance() {
        let limiter = limiter(0, 2);
        let running = [limiter.admit("a"), limiter.admit("a")].map(|a| a.ok().unwrap());

        limiter.publish(Policy::new(MerchantLimits {
            concurrency: 3,
            ..MerchantLimits::unlimited()
        }));
        let third = limiter.admit("a").ok().expect("one more under three");
        let refused = limiter.admit("a").err().expect("a fourth is over three");
        assert_eq!(refused.reason, Reason::Concurrency);

        limiter.publish(Policy::new(MerchantLimits {
            concurrency: 2,
            ..MerchantLimits::unlimited()
        }));
        drop(third);
        assert!(
            limiter.admit("a").is_err(),
            "two still run, the limit is two"
        );
        drop(running);
        assert!(limiter.admit("a").is_ok());
    }

    #[test]
    fn the_headers_name_the_whole_limit_and_what_is_left() {
        let limiter = limiter(10, 4);
        let admission = limiter.admit("a").ok().unwrap();
        let mut headers = HeaderMap::new();
        admission.headers.write(&mut headers);
        assert_eq!(
            headers["ratelimit-policy"],
            "\"rate\";q=10;w=1, \"concurrency\";q=4;qu=\"concurrent-requests\""
        );
        assert_eq!(
            headers["ratelimit"],
            "\"rate\";r=9;t=1, \"concurrency\";r=3"
        );
        let mut unlimited = HeaderMap::new();
        limiter_unlimited()
            .admit("a")
            .ok()
            .unwrap()
            .headers
            .write(&mut unlimited);
        assert!(unlimited.is_empty());
    }

    fn limiter_unlimited() -> Limiter {
        limiter(0, 0)
    }
}
