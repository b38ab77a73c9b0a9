//! The noisy-neighbour workload (`docs/design.md`, "Per-merchant limits"): merchant A sends ten
//! times what the API can serve while merchant B sends a steady 5% of it. Measured: B's latency
//! and statuses with and without A, what A gets (429s, never timeouts), what the API still serves,
//! what the limiter itself costs a fresh create, and, as a control, B beside an A that is offered
//! only a share of the peak and refused nothing.
//!
//! Each phase runs on one API process with the default limits (`MERCHANT_RATE_LIMIT=100`); the
//! phases that need A unlimited or limited otherwise set A's own limits with `payments-api limits
//! set`, which every replica applies within a refresh.

use std::{
    path::Path,
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use hyper::header::HeaderValue;
use serde::Serialize;

use crate::{ApiProcess, HttpConnection, RssSampler, Tally, Workload};

const A_TOKEN: &str = "merchant-demo";
const A: &str = "merchant_demo";
const B_TOKEN: &str = "merchant-other";
const B: &str = "merchant_other";
/// A's clients: enough connections that A alone can offer ten times the API's rate.
const A_CONNECTIONS: usize = 64;
const B_CONNECTIONS: usize = 4;
/// The shares of the peak A is allowed in the contests below the peak: where the workload's two
/// targets (B's p99 within 2× of its own, the API within a tenth of its peak) meet, if they do.
const A_SHARES_BELOW_PEAK: [f64; 2] = [0.7, 0.8];
/// A's concurrency in the last contest: below `DB_MAX_CONNECTIONS` (16).
const A_CONCURRENCY_BELOW_POOL: u32 = 12;
/// What A is offered to send in the control contest, unlimited, over the peak: with B's 5%, near
/// nine tenths of the peak (A's niced client falls a little behind; the report says what it sent).
pub const A_SHARE_IN_CONTROL: f64 = 0.85;

#[derive(Debug, Serialize)]
pub struct NoisyNeighbourReport {
    /// Fresh creates per second of one merchant, unlimited, 32 clients: what the API can serve
    /// (the median of the rounds).
    pub peak_creates_per_second: f64,
    /// The same with the merchant limited far above what it sends: the limiter's bucket,
    /// semaphore and headers on every request, over unlimited. Median of the rounds' ratios.
    pub limiter_cost_ratio: f64,
    /// The API process's CPU time per fresh create, limited over unlimited: the same cost seen
    /// where it is spent, steadier than throughput on a machine the load generator shares.
    /// Median of the rounds' ratios.
    pub limiter_cpu_ratio: f64,
    /// Per round, unlimited then limited: (fresh creates per second, API CPU µs per create).
    pub limiter_cost_rounds: Vec<[(f64, f64); 2]>,
    /// What the limiter's admission of one request costs on its own (bucket, in-flight count,
    /// both header fields), timed in this process over many admissions: what the two ratios
    /// above cannot resolve on a shared machine.
    pub limiter_admission_ns: f64,
    /// That admission over the API's CPU per fresh create unlimited (median of the rounds).
    pub limiter_admission_share_of_create: f64,
    /// B alone at 5% of the peak.
    pub b_alone: Workload,
    /// A offering ten times the peak at the default limits, B as before.
    pub with_a_limited: Contest,
    /// A allowed a share of the peak rate (its bucket's one-second burst on top), still
    /// offering ten times the peak: how much of the peak the API can serve with B's latency
    /// kept, the room left being B's.
    pub with_a_below_peak: Vec<ContestAtShare>,
    /// A allowed the whole peak rate (its own limit), B as before: whether B keeps its
    /// latency while A takes everything else, and whether the API still serves its peak.
    pub with_a_at_peak: Contest,
    /// The same with A's concurrency below the request pool's 16 connections, so that B always
    /// finds one free.
    pub with_a_at_peak_fewer_at_once: Contest,
    /// The control: A unlimited and offered only `A_SHARE_IN_CONTROL` of the peak, so nothing
    /// is refused and no limit is at work. B's latency here is what the load itself does to it,
    /// to compare with the contests where A's excess is refused.
    pub control_with_a_unrefused: Contest,
    /// B alone again at the end: how much the baseline moved over the run.
    pub b_alone_after: Workload,
}

/// Rounds of each contest, B alone then B with A, in turn. One phase's p99 is one of B's ten
/// slowest answers, which one hiccup of the machine (a checkpoint, the generator descheduled)
/// moves by more than A does; pooled over rounds that alternate, it is steadier and drifts cancel.
const CONTEST_ROUNDS: usize = 3;

#[derive(Debug, Serialize)]
pub struct ContestAtShare {
    /// A's rate limit over the peak.
    pub share: f64,
    pub contest: Contest,
}

#[derive(Debug, Serialize)]
pub struct Contest {
    pub a_offered_per_second: f64,
    /// B alone just before each round with A, pooled: the baseline of this contest (the
    /// machine's noise moves it between phases more than anything A does to it within one).
    pub b_before: Workload,
    /// A's and B's answers in the rounds with A, pooled.
    pub a: Workload,
    pub b: Workload,
    /// B's pooled p99 with A over its pooled p99 alone (target ≤ 2).
    pub b_p99_factor: f64,
    /// The same factor in each round.
    pub b_p99_factor_rounds: Vec<f64>,
    /// Creates answered 201 per second, A and B together, over the peak.
    pub served_over_peak: f64,
    /// A's requests that took longer than 5 s or failed without an answer.
    pub a_timeouts: u64,
    /// The API process's CPU time (user and system) over every answer it gave, A's and B's.
    pub api_cpu_us_per_answer: f64,
}

pub async fn run(
    api_bin: &Path,
    database_url: &str,
    api_env: &[(String, String)],
    duration: Duration,
) -> anyhow::Result<NoisyNeighbourReport> {
    let mut env = vec![
        (
            "BOOTSTRAP_API_KEYS".to_owned(),
            format!("{A_TOKEN}={A},{B_TOKEN}={B}"),
        ),
        ("MERCHANT_RATE_LIMIT".to_owned(), "100".to_owned()),
        ("MERCHANT_CONCURRENCY_LIMIT".to_owned(), "100".to_owned()),
    ];
    env.extend(api_env.iter().cloned());
    let server = ApiProcess::start(api_bin, database_url, &env).await?;
    let set = |merchant: &'static str, rate: u32, concurrency: u32| {
        set_limits(api_bin, database_url, &server, merchant, rate, concurrency)
    };
    // B is a merchant well within its own limits: what it sends is never refused for itself.
    set(B, 10_000, 100).await?;

    // The peak and the limiter's cost: a warm-up, then unlimited and limited rounds in turn,
    // each pair in the other order from the last, on the same process.
    set(A, 0, 0).await?;
    paced(Target::of(&server), A_TOKEN, 32, None, duration / 2).await;
    let mut rounds = Vec::new();
    for round in 0..4 {
        let mut pair = [(0.0, 0.0); 2];
        for limited in [round % 2 == 1, round % 2 == 0] {
            match limited {
                true => set(A, 1_000_000, 1_000_000).await?,
                false => set(A, 0, 0).await?,
            }
            let cpu_before = server.cpu_seconds();
            let measured = paced(Target::of(&server), A_TOKEN, 32, None, duration / 2).await;
            let cpu = server.cpu_seconds() - cpu_before;
            let created = measured.workload.statuses.get(&201).copied().unwrap_or(0);
            pair[usize::from(limited)] = (measured.rps, cpu * 1e6 / created.max(1) as f64);
        }
        rounds.push(pair);
    }
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        (values[values.len() / 2 - 1] + values[values.len() / 2]) / 2.0
    };
    let peak = median(rounds.iter().map(|[unlimited, _]| unlimited.0).collect());
    let limiter_cost_ratio = median(rounds.iter().map(|[u, l]| l.0 / u.0).collect());
    let limiter_cpu_ratio = median(rounds.iter().map(|[u, l]| l.1 / u.1).collect());
    let limiter_admission_ns = admission_ns();
    let create_cpu_ns = median(rounds.iter().map(|[unlimited, _]| unlimited.1).collect()) * 1e3;

    let b_rate = peak * 0.05;
    eprintln!("loadgen: noisy neighbour: peak {peak:.0}/s, B at {b_rate:.0}/s");
    let b_alone = named(
        b_client(Target::of(&server), b_rate, duration).await,
        "tenants_b_alone",
    );

    let flood = peak * 10.0;
    set(A, 100, 100).await?;
    let with_a_limited = contest(&server, peak, flood, b_rate, duration, "limited").await;
    let mut with_a_below_peak = Vec::new();
    for share in A_SHARES_BELOW_PEAK {
        set(A, (peak * share).ceil() as u32, 100).await?;
        let label = format!("at_{:.0}_percent", share * 100.0);
        let contest = contest(&server, peak, flood, b_rate, duration, &label).await;
        with_a_below_peak.push(ContestAtShare { share, contest });
    }
    set(A, peak.ceil() as u32, 100).await?;
    let with_a_at_peak = contest(&server, peak, flood, b_rate, duration, "at_peak").await;
    set(A, peak.ceil() as u32, A_CONCURRENCY_BELOW_POOL).await?;
    let with_a_at_peak_fewer_at_once =
        contest(&server, peak, flood, b_rate, duration, "at_peak_12").await;
    set(A, 0, 0).await?;
    let a_share = peak * A_SHARE_IN_CONTROL;
    let control_with_a_unrefused =
        contest(&server, peak, a_share, b_rate, duration, "control").await;
    let b_alone_after = named(
        b_client(Target::of(&server), b_rate, duration).await,
        "tenants_b_alone_after",
    );
    Ok(NoisyNeighbourReport {
        peak_creates_per_second: peak,
        limiter_cost_ratio,
        limiter_cpu_ratio,
        limiter_cost_rounds: rounds,
        limiter_admission_ns,
        limiter_admission_share_of_create: limiter_admission_ns / create_cpu_ns,
        b_alone,
        with_a_limited,
        with_a_below_peak,
        with_a_at_peak,
        with_a_at_peak_fewer_at_once,
        control_with_a_unrefused,
        b_alone_after,
    })
}

async fn contest(
    server: &ApiProcess,
    peak: f64,
    a_offered: f64,
    b_rate: f64,
    duration: Duration,
    label: &str,
) -> Contest {
    let (mut alone, mut with_a, mut a_rounds) = (Vec::new(), Vec::new(), Vec::new());
    let mut cpu = 0.0;
    for _ in 0..CONTEST_ROUNDS {
        alone.push(b_client(Target::of(server), b_rate, duration).await);
        let cpu_before = server.cpu_seconds();
        let (a, b) = tokio::join!(
            a_client(Target::of(server), a_offered, duration),
            b_client(Target::of(server), b_rate, duration),
        );
        cpu += server.cpu_seconds() - cpu_before;
        a_rounds.push(a);
        with_a.push(b);
    }
    let b_p99_factor_rounds = alone
        .iter()
        .zip(&with_a)
        .map(|(alone, with_a)| with_a.workload.p99_ms / alone.workload.p99_ms)
        .collect();
    let a_timeouts = a_rounds.iter().map(|a| a.slow).sum();
    let seconds_with_a: f64 = a_rounds.iter().map(|a| a.elapsed.as_secs_f64()).sum();
    let (b_before, a, b) = (
        pooled(alone, &format!("tenants_b_before_{label}")),
        pooled(a_rounds, &format!("tenants_a_{label}")),
        pooled(with_a, &format!("tenants_b_with_a_{label}")),
    );
    let created = |w: &Workload| w.statuses.get(&201).copied().unwrap_or(0) as f64;
    Contest {
        a_offered_per_second: a_offered,
        b_p99_factor: b.p99_ms / b_before.p99_ms,
        b_p99_factor_rounds,
        b_before,
        served_over_peak: (created(&a) + created(&b)) / seconds_with_a / peak,
        a_timeouts,
        api_cpu_us_per_answer: cpu * 1e6 / (a.requests + b.requests).max(1) as f64,
        a,
        b,
    }
}

/// One workload of every round's answers, over the rounds' time.
fn pooled(rounds: Vec<Measured>, name: &str) -> Workload {
    let elapsed = rounds.iter().map(|m| m.elapsed).sum();
    let clients = rounds.first().map_or(0, |m| m.workload.clients);
    let peak_rss_kib = rounds
        .iter()
        .map(|m| (m.workload.peak_rss_mib * 1024.0) as u64)
        .max()
        .unwrap_or(0);
    let mut all = Tally::default();
    for round in rounds {
        all.latencies_us.extend(round.tally.latencies_us);
        for (status, n) in round.tally.statuses {
            *all.statuses.entry(status).or_insert(0) += n;
        }
        all.errors += round.tally.errors;
    }
    all.summarize(name, clients, elapsed, peak_rss_kib)
}

fn named(measured: Measured, name: &str) -> Workload {
    let mut workload = measured.workload;
    workload.name = name.to_owned();
    workload
}

/// Nanoseconds of one admission by a limiter of the API's own code, a merchant limited far above
/// what it is sent: the best of five batches, each admission's answer fields written and its
/// in-flight slot given back as a request's would be.
fn admission_ns() -> f64 {
    const BATCH: u32 = 100_000;
    let limiter = payments_api::tenants::Limiter::new(payments_api::config::MerchantLimits {
        rate_per_second: 1_000_000_000,
        concurrency: 1_000_000,
        ..payments_api::config::MerchantLimits::unlimited()
    });
    (0..5)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..BATCH {
                let admission = limiter.admit(A).ok().expect("far below the limits");
                let mut headers = hyper::HeaderMap::new();
                admission.write_headers(&mut headers);
                std::hint::black_box(headers);
            }
            started.elapsed().as_nanos() as f64 / f64::from(BATCH)
        })
        .fold(f64::INFINITY, f64::min)
}

/// Sets a merchant's own limits (0: unlimited) and waits until the API answers under them.
async fn set_limits(
    api_bin: &Path,
    database_url: &str,
    server: &ApiProcess,
    merchant: &'static str,
    rate: u32,
    concurrency: u32,
) -> anyhow::Result<()> {
    let token = if merchant == A { A_TOKEN } else { B_TOKEN };
    let output = Command::new(api_bin)
        .args(["limits", "set", "--merchant", merchant, "--rate"])
        .arg(rate.to_string())
        .arg("--concurrency")
        .arg(concurrency.to_string())
        .env("DATABASE_URL", database_url)
        .output()?;
    anyhow::ensure!(
        output.status.success(),
        "limits set: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let wanted = format!("\"rate\";q={rate};w=1");
    let mut connection = HttpConnection::open_as(server.addr, token).await?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let policy = connection.policy_of("/v1/payment_intents?limit=1").await?;
        let applied = match rate {
            0 => !policy.contains("\"rate\""),
            _ => policy.contains(&wanted),
        } && policy.contains(&format!("\"concurrency\";q={concurrency};"))
            == (concurrency > 0);
        if applied {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "the API never applied {wanted}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct Measured {
    workload: Workload,
    rps: f64,
    /// Requests that failed without an answer or took longer than 5 s.
    slow: u64,
    /// What the workload was made of, and how long it took, for pooling rounds.
    tally: Tally,
    elapsed: Duration,
}

/// The API process the clients send to.
#[derive(Clone, Copy)]
struct Target {
    addr: std::net::SocketAddr,
    pid: u32,
}

impl Target {
    fn of(server: &ApiProcess) -> Self {
        Self {
            addr: server.addr,
            pid: server.pid(),
        }
    }
}

/// B's steady load, sent from a thread and runtime of its own: B is another client than A, and
/// B's answers must not wait in the load generator's run queue behind A's thousands (on another
/// machine they would not).
async fn b_client(target: Target, rate: f64, duration: Duration) -> Measured {
    let b = paced(target, B_TOKEN, B_CONNECTIONS, Some(rate), duration);
    on_runtime_of_its_own("B", 1, false, b).await
}

/// A's flood, from a runtime of its own whose threads run at the lowest priority (nice 19): A's
/// client would be another machine, and here it shares the two cores with the API and
/// PostgreSQL; niced, it takes what they leave. What A sent is measured, and reported beside
/// what it was to offer.
async fn a_client(target: Target, rate: f64, duration: Duration) -> Measured {
    let a = paced(target, A_TOKEN, A_CONNECTIONS, Some(rate), duration);
    on_runtime_of_its_own("A", 2, true, a).await
}

async fn on_runtime_of_its_own(
    client: &'static str,
    threads: usize,
    niced: bool,
    work: impl std::future::Future<Output = Measured> + Send + 'static,
) -> Measured {
    // On Linux a thread's nice value is its own: each thread of the runtime sets it.
    let nice = move || {
        if niced {
            // SAFETY: setpriority only reads its integer arguments; 0 is the calling thread.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
        }
    };
    let (sender, receiver) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        nice();
        let runtime = match threads {
            1 => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build(),
            n => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(n)
                .on_thread_start(nice)
                .enable_all()
                .build(),
        }
        .unwrap_or_else(|e| panic!("a runtime for {client}'s client: {e}"));
        let _ = sender.send(runtime.block_on(work));
    });
    receiver
        .await
        .unwrap_or_else(|_| panic!("{client}'s client answers"))
}

/// Fresh creates as `token` over `connections` connections: at `rate` per second in all, each
/// connection sending on its own schedule (and at once when it falls behind), or as fast as the
/// API answers when `rate` is `None`. Latency counts from each request's actual send.
async fn paced(
    server: Target,
    token: &'static str,
    connections: usize,
    rate: Option<f64>,
    duration: Duration,
) -> Measured {
    let stop = Arc::new(AtomicBool::new(false));
    let slow = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..connections)
        .map(|i| {
            let (stop, slow, addr) = (stop.clone(), slow.clone(), server.addr);
            tokio::spawn(async move {
                let mut tally = Tally::default();
                let Ok(mut connection) = HttpConnection::open_as(addr, token).await else {
                    tally.errors += 1;
                    return tally;
                };
                let interval = rate.map(|r| Duration::from_secs_f64(connections as f64 / r));
                let mut next = Instant::now()
                    + interval.map_or(Duration::ZERO, |d| d.mul_f64(i as f64 / connections as f64));
                while !stop.load(Ordering::Relaxed) {
                    if let Some(interval) = interval {
                        tokio::time::sleep_until(next.into()).await;
                        next += interval;
                    }
                    let key = format!(
                        "noisy-{token}-{}-{}",
                        std::process::id(),
                        crate::SEQUENCE.fetch_add(1, Ordering::Relaxed)
                    );
                    let t = Instant::now();
                    let result =
                        tokio::time::timeout(Duration::from_secs(30), connection.post(Some(&key)))
                            .await
                            .unwrap_or_else(|_| Err(anyhow::anyhow!("no answer in 30 s")));
                    if result.is_err() || t.elapsed() > Duration::from_secs(5) {
                        slow.fetch_add(1, Ordering::Relaxed);
                    }
                    tally.record(t, result);
                }
                tally
            })
        })
        .collect();
    let sampler = RssSampler::of(server.pid);
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let tally = Tally::gather(tasks).await;
    let elapsed = started.elapsed();
    let workload = tally
        .clone()
        .summarize("paced", connections, elapsed, sampler.stop().await);
    let created = workload.statuses.get(&201).copied().unwrap_or(0);
    Measured {
        rps: created as f64 / elapsed.as_secs_f64(),
        workload,
        slow: slow.load(Ordering::Relaxed),
        tally,
        elapsed,
    }
}

impl HttpConnection {
    /// A connection authenticated as another merchant's token.
    async fn open_as(addr: std::net::SocketAddr, token: &str) -> anyhow::Result<Self> {
        let mut connection = Self::open(addr).await?;
        connection.authorization = HeaderValue::try_from(format!("Bearer {token}"))?;
        Ok(connection)
    }

    /// The `RateLimit-Policy` of a GET's answer ("" without one).
    async fn policy_of(&mut self, path: &str) -> anyhow::Result<String> {
        let request = self
            .request(hyper::Method::GET, path)
            .body(http_body_util::Full::new(bytes::Bytes::new()))?;
        if self.sender.is_closed() {
            let authorization = self.authorization.clone();
            *self = Self::open(self.addr).await?;
            self.authorization = authorization;
        }
        self.sender.ready().await?;
        let response = self.sender.send_request(request).await?;
        let policy = response
            .headers()
            .get("ratelimit-policy")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let _ = http_body_util::BodyExt::collect(response.into_body()).await?;
        Ok(policy)
    }
}
