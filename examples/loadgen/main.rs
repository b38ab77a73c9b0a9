//! `make bench`: HTTP load against a release build of payments-api on the local PostgreSQL,
//! measured beside `scripts/bench/reference.sh` (pgbench on the least SQL an idempotent create
//! or replay must run) in the same run, so the ratios hold on a noisy machine.
//!
//! Writes `target/bench/results.json` and `target/bench/chart.svg`.

mod dashboard;
mod deposits;
mod endpoint_cost;
mod follower;
mod orders;
mod retention;
#[path = "../../tests/api/helpers/rpc_fault.rs"]
#[allow(dead_code)]
mod rpc_fault;
mod settlement;
mod tenants;
mod x402;

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, client::conn::http1, header, header::HeaderValue};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use sqlx::{Connection as _, PgConnection};
use tokio::{net::TcpStream, sync::Barrier};

#[derive(Parser, Debug)]
struct Args {
    /// Concurrent keep-alive clients.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Seconds per workload.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// PostgreSQL server (the bench database is created anew on it).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432")]
    server: String,
    /// The reference script; skipped if absent.
    #[arg(long, default_value = "scripts/bench/reference.sh")]
    reference: PathBuf,
    /// The payments-api binary (default: the release build next to this example).
    #[arg(long)]
    api: Option<PathBuf>,
    /// Where results.json and chart.svg go.
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
    /// Run only these workloads (comma-separated names), for profiling one path.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Intents confirmed at once in the settlement workload.
    #[arg(long, default_value_t = 100)]
    settlement_intents: usize,
    /// Relayer keys in the settlement workload (1 or 2).
    #[arg(long, default_value_t = 1)]
    settlement_relayer_keys: usize,
    /// Payments settled at once in the x402 workload's burst.
    #[arg(long, default_value_t = 450)]
    x402_burst: usize,
    /// Idempotency records stored before the retention workload (a fifth of them past retention).
    #[arg(long, default_value_t = 10_000_000)]
    stored_keys: u64,
    /// Extra environment for the API, e.g. DB_MAX_CONNECTIONS=32.
    #[arg(long = "api-env", value_parser = parse_env)]
    api_env: Vec<(String, String)>,
}

fn parse_env(raw: &str) -> Result<(String, String), String> {
    raw.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| "NAME=VALUE".to_owned())
}

const TOKEN: &str = "merchant-demo";
const BODY: &str = r#"{"chain":"evm:31337","token":"0x5FbDB2315678afecb367f032d93F642f64180aa3","payer":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","merchant":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC","amount":"100000000","expires_in_seconds":900}"#;

#[derive(Debug, Clone, Serialize)]
struct Workload {
    name: String,
    clients: usize,
    requests: u64,
    errors: u64,
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    peak_rss_mib: f64,
    /// The API process's CPU (user and system) per measured request, microseconds; where the
    /// workload measures it.
    api_cpu_us: Option<f64>,
    statuses: BTreeMap<u16, u64>,
}

#[derive(Debug, Clone, Serialize)]
struct Reference {
    name: String,
    tps: f64,
    latency_ms: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    clients: usize,
    seconds: u64,
    api: Vec<Workload>,
    reference: Vec<Reference>,
    create_ratio: Option<f64>,
    replay_ratio: Option<f64>,
    plain_ratio: Option<f64>,
    keyed_vs_unkeyed_latency_at_1_client: Option<f64>,
    webhooks: Option<WebhookReport>,
    endpoint_cost: Option<endpoint_cost::EndpointCostReport>,
    settlement: Option<settlement::SettlementReport>,
    deposits: Option<deposits::DepositReport>,
    follower: Option<follower::CatchUpReport>,
    orders: Option<orders::OrderReport>,
    x402: Option<x402::X402Report>,
    retention: Option<retention::RetentionReport>,
    noisy_neighbour: Option<tenants::NoisyNeighbourReport>,
}

/// Deliveries to a local receiver while `clients` clients create intents (one event each).
#[derive(Debug, Serialize)]
struct WebhookReport {
    events_delivered: u64,
    events_per_second: f64,
    /// From the commit of a change (its event's `created_at`) to the receiver's first sight of it.
    lag_p50_ms: f64,
    lag_p99_ms: f64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let api_bin = match &args.api {
        Some(path) => path.clone(),
        None => std::env::current_exe()?
            .parent()
            .and_then(Path::parent)
            .context("cannot locate the target directory")?
            .join("payments-api"),
    };
    if !api_bin.exists() {
        bail!(
            "{} not found: build it with `cargo build --release --bin payments-api`",
            api_bin.display()
        );
    }

    let database_url = empty_database(&args.server, "payments_bench").await?;

    let server = ApiProcess::start(&api_bin, &database_url, &args.api_env).await?;
    let mut seeder = HttpConnection::open(server.addr).await?;
    let duration = Duration::from_secs(args.seconds);
    let mut workloads = Vec::new();

    let wanted = |name: &str| args.only.is_empty() || args.only.iter().any(|w| w == name);
    let clients = args.clients;
    // At one client first: what the idempotency machinery adds to a single create's latency.
    let plan: [(&str, usize, Duration); 7] = [
        ("create_keyed_1_client", 1, duration / 2),
        ("create_unkeyed_1_client", 1, duration / 2),
        ("create_fresh", clients, duration),
        ("replay", clients, duration),
        ("create_unkeyed", clients, duration),
        ("get", clients, duration),
        ("contention_64_one_key", 64, duration),
    ];
    for (name, clients, duration) in plan.into_iter().filter(|(name, ..)| wanted(name)) {
        let op = match name {
            "create_keyed_1_client" | "create_fresh" => Op::CreateFresh,
            "create_unkeyed_1_client" | "create_unkeyed" => Op::CreateUnkeyed,
            "replay" => {
                eprintln!("loadgen: seeding 1000 completed keys");
                let hot: Vec<String> = (0..1000).map(|i| format!("hot-{i}")).collect();
                for key in &hot {
                    anyhow::ensure!(
                        seeder.post(Some(key)).await? == 201,
                        "seeding the hot keys failed"
                    );
                }
                Op::Replay(Arc::new(hot))
            }
            "get" => {
                seeder.post(None).await?;
                Op::Get(Arc::new(existing_ids(&database_url).await?))
            }
            _ => {
                workloads.push(contention(&server, clients, duration).await?);
                continue;
            }
        };
        workloads.push(run(&server, name, clients, duration, op).await);
    }
    let receiver = Receiver::start().await?;
    let webhooks = if wanted("create_fresh_webhook") {
        let (workload, report) =
            webhook_delivery(&server, &database_url, &receiver, clients, duration).await?;
        workloads.push(workload);
        Some(report)
    } else {
        None
    };
    let p50 = |name: &str| workloads.iter().find(|w| w.name == name).map(|w| w.p50_ms);
    let latency_factor = match (p50("create_keyed_1_client"), p50("create_unkeyed_1_client")) {
        (Some(keyed), Some(unkeyed)) if unkeyed > 0.0 => Some(keyed / unkeyed),
        _ => None,
    };
    drop(server);
    // The empty database's rates, the baselines of the workloads below.
    let rps = |name: &str| workloads.iter().find(|w| w.name == name).map(|w| w.rps);
    let (empty_create, empty_replay) = (rps("create_fresh"), rps("replay"));
    let endpoint_cost = if wanted("endpoint_cost") {
        let on = endpoint_cost::Database {
            api_bin: &api_bin,
            url: &database_url,
            api_env: &args.api_env,
            receiver_url: &receiver.url,
        };
        Some(endpoint_cost::measure(&on, clients, duration).await?)
    } else {
        None
    };
    let retention = if wanted("retention") {
        let (report, measured) = retention::run_retention(
            &api_bin,
            &args.server,
            args.stored_keys,
            clients,
            duration,
            (empty_create, empty_replay),
            &args.api_env,
        )
        .await?;
        workloads.extend(measured);
        Some(report)
    } else {
        None
    };
    let settlement = if wanted("settlement") {
        Some(
            settlement::run(
                &api_bin,
                &args.server,
                args.settlement_intents,
                args.settlement_relayer_keys,
            )
            .await?,
        )
    } else {
        None
    };
    let deposits = if wanted("deposits") {
        Some(deposits::run(&api_bin, &args.server, &[1_000, 100_000], 1_000).await?)
    } else {
        None
    };
    let follower = if wanted("follower") {
        Some(follower::run(&api_bin, &args.server).await?)
    } else {
        None
    };
    let orders = if wanted("orders") {
        let (report, measured) =
            orders::run(&api_bin, &args.server, &args.api_env, clients, duration).await?;
        workloads.extend(measured);
        Some(report)
    } else {
        None
    };
    if wanted("dashboard") {
        let workload = dashboard::run_list(
            &api_bin,
            &args.server,
            &args.api_env,
            1_000_000,
            8,
            duration,
        )
        .await?;
        workloads.push(workload);
    }
    let x402 = if wanted("x402") {
        Some(
            x402::run(
                &api_bin,
                &args.server,
                clients,
                args.seconds,
                args.x402_burst,
            )
            .await?,
        )
    } else {
        None
    };

    let noisy_neighbour = if wanted("tenants") {
        let url = empty_database(&args.server, "payments_bench_tenants").await?;
        Some(tenants::run(&api_bin, &url, &args.api_env, duration).await?)
    } else {
        None
    };

    let reference = if args.reference.exists() {
        reference(&args.reference, clients, args.seconds)?
    } else {
        eprintln!(
            "loadgen: {} not found; no reference run",
            args.reference.display()
        );
        Vec::new()
    };
    let ratio = |api: &str, reference_name: &str| {
        let api = workloads.iter().find(|w| w.name == api)?.rps;
        let reference = reference.iter().find(|r| r.name == reference_name)?.tps;
        (reference > 0.0).then(|| api / reference)
    };
    let report = Report {
        clients,
        seconds: args.seconds,
        create_ratio: ratio("create_fresh", "create"),
        replay_ratio: ratio("replay", "replay"),
        plain_ratio: ratio("create_fresh", "plain"),
        keyed_vs_unkeyed_latency_at_1_client: latency_factor,
        webhooks,
        endpoint_cost,
        settlement,
        deposits,
        follower,
        orders,
        x402,
        retention,
        noisy_neighbour,
        api: workloads,
        reference,
    };
    print_report(&report);
    std::fs::create_dir_all(&args.out)?;
    std::fs::write(
        args.out.join("results.json"),
        serde_json::to_string_pretty(&report)? + "\n",
    )?;
    std::fs::write(args.out.join("chart.svg"), chart(&report))?;
    println!(
        "\nwrote {0}/results.json and {0}/chart.svg",
        args.out.display()
    );
    Ok(())
}

/// Drops and creates `name` on `server`; returns its URL.
async fn empty_database(server: &str, name: &str) -> anyhow::Result<String> {
    let mut admin = PgConnection::connect(&format!("{server}/postgres")).await?;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&mut admin)
        .await?;
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await?;
    Ok(format!("{server}/{name}"))
}

#[derive(Clone)]
enum Op {
    CreateFresh,
    /// A fresh order priced in a currency ([`orders::ORDER_BODY`]).
    CreateOrder,
    CreateUnkeyed,
    Replay(Arc<Vec<String>>),
    Get(Arc<Vec<String>>),
    /// The dashboard's pages, signed in by [`dashboard::SESSION`].
    Dashboard(Arc<Vec<String>>),
}

/// One keep-alive HTTP/1.1 connection, driven by hyper's client connection API without a pool or
/// URL parsing: the load generator shares the machine with the API and PostgreSQL, so it must
/// spend as little CPU as it can (the reference's client, pgbench, is lean C).
struct HttpConnection {
    sender: http1::SendRequest<Full<Bytes>>,
    addr: SocketAddr,
    /// Built once per connection, not per request.
    host: HeaderValue,
    authorization: HeaderValue,
}

impl HttpConnection {
    async fn open(addr: SocketAddr) -> anyhow::Result<Self> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        let host = HeaderValue::try_from(addr.to_string())?;
        let authorization = HeaderValue::try_from(format!("Bearer {TOKEN}"))?;
        Ok(Self {
            sender,
            addr,
            host,
            authorization,
        })
    }

    /// A request with the headers every one carries.
    fn request(&self, method: Method, path: &str) -> hyper::http::request::Builder {
        Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, self.host.clone())
            .header(header::AUTHORIZATION, self.authorization.clone())
    }

    /// Sends one request and reads the whole answer; reconnects first if the server closed.
    async fn send(&mut self, request: Request<Full<Bytes>>) -> anyhow::Result<u16> {
        Ok(self.exchange(request).await?.0)
    }

    async fn exchange(&mut self, request: Request<Full<Bytes>>) -> anyhow::Result<(u16, Bytes)> {
        if self.sender.is_closed() {
            let authorization = self.authorization.clone();
            *self = Self::open(self.addr).await?;
            self.authorization = authorization;
        }
        self.sender.ready().await?;
        let response = self.sender.send_request(request).await?;
        let status = response.status().as_u16();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }

    async fn post(&mut self, key: Option<&str>) -> anyhow::Result<u16> {
        self.post_body(key, BODY).await
    }

    async fn post_body(&mut self, key: Option<&str>, body: &'static str) -> anyhow::Result<u16> {
        let mut request = self
            .request(Method::POST, "/v1/payment_intents")
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        self.send(request.body(Full::new(Bytes::from_static(body.as_bytes())))?)
            .await
    }

    async fn get(&mut self, path: &str) -> anyhow::Result<u16> {
        let request = self
            .request(Method::GET, path)
            .body(Full::new(Bytes::new()))?;
        self.send(request).await
    }

    /// A dashboard page as the signed-in bench person: its status and body.
    async fn dashboard(&mut self, path: &str) -> anyhow::Result<(u16, Bytes)> {
        let request = self
            .request(Method::GET, path)
            .header(
                header::COOKIE,
                format!("dashboard_session={}", dashboard::SESSION),
            )
            .body(Full::new(Bytes::new()))?;
        self.exchange(request).await
    }

    async fn get_dashboard(&mut self, path: &str) -> anyhow::Result<String> {
        let (_, body) = self.dashboard(path).await?;
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    async fn get_text(&mut self, path: &str) -> anyhow::Result<String> {
        let request = self
            .request(Method::GET, path)
            .body(Full::new(Bytes::new()))?;
        let (_, body) = self.exchange(request).await?;
        Ok(String::from_utf8_lossy(&body).into_owned())
    }
}

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

async fn once(op: &Op, connection: &mut HttpConnection, rng: &mut u64) -> anyhow::Result<u16> {
    // xorshift: cheap per-client randomness for picking keys and ids.
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    match op {
        Op::CreateFresh => {
            let key = format!(
                "bench-{}-{}",
                std::process::id(),
                SEQUENCE.fetch_add(1, Ordering::Relaxed)
            );
            connection.post(Some(&key)).await
        }
        Op::CreateOrder => {
            let key = format!(
                "bench-order-{}-{}",
                std::process::id(),
                SEQUENCE.fetch_add(1, Ordering::Relaxed)
            );
            connection.post_body(Some(&key), orders::ORDER_BODY).await
        }
        Op::CreateUnkeyed => connection.post(None).await,
        Op::Replay(keys) => {
            connection
                .post(Some(&keys[(*rng as usize) % keys.len()]))
                .await
        }
        Op::Get(ids) => {
            let id = &ids[(*rng as usize) % ids.len()];
            connection.get(&format!("/v1/payment_intents/{id}")).await
        }
        Op::Dashboard(paths) => {
            let path = &paths[(*rng as usize) % paths.len()];
            Ok(connection.dashboard(path).await?.0)
        }
    }
}

async fn run(
    server: &ApiProcess,
    name: &str,
    clients: usize,
    duration: Duration,
    op: Op,
) -> Workload {
    eprintln!("loadgen: {name} with {clients} client(s) for {duration:?}");
    // A short warm-up fills the connection pools on both sides.
    let stop = Arc::new(AtomicBool::new(false));
    let warmup = Duration::from_millis(500);
    let sampler = server.rss_sampler();
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            let (op, stop, addr) = (op.clone(), stop.clone(), server.addr);
            tokio::spawn(async move {
                let mut tally = Tally::default();
                let mut connection = match HttpConnection::open(addr).await {
                    Ok(connection) => connection,
                    Err(_) => {
                        tally.errors += 1;
                        return tally;
                    }
                };
                let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (i as u64 + 1);
                let measure_from = Instant::now() + warmup;
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let result = once(&op, &mut connection, &mut rng).await;
                    if t >= measure_from {
                        tally.record(t, result);
                    }
                }
                tally
            })
        })
        .collect();
    tokio::time::sleep(warmup).await;
    let cpu_from = server.cpu_seconds();
    tokio::time::sleep(duration).await;
    let cpu = server.cpu_seconds() - cpu_from;
    stop.store(true, Ordering::Relaxed);
    let tally = Tally::gather(tasks).await;
    let elapsed = started.elapsed().saturating_sub(warmup);
    let mut workload = tally.summarize(name, clients, elapsed, sampler.stop().await);
    workload.api_cpu_us = (workload.requests > 0).then(|| cpu * 1e6 / workload.requests as f64);
    workload
}

/// 64 clients fire the same new key at once, round after round: one execution per round.
async fn contention(
    server: &ApiProcess,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<Workload> {
    // Connected up front: a task that failed later would leave the others waiting at a barrier.
    let mut connections = Vec::with_capacity(clients);
    for _ in 0..clients {
        connections.push(HttpConnection::open(server.addr).await?);
    }
    let sampler = server.rss_sampler();
    let barrier = Arc::new(Barrier::new(clients));
    let go_on = Arc::new(AtomicBool::new(true));
    let deadline = Instant::now() + duration;
    let started = Instant::now();
    let tasks: Vec<_> = connections
        .into_iter()
        .map(|mut connection| {
            let (barrier, go_on) = (barrier.clone(), go_on.clone());
            tokio::spawn(async move {
                let mut tally = Tally::default();
                for round in 0.. {
                    // One task decides whether another round starts and all read that decision
                    // after a second barrier: deciding apart, some would wait for a round
                    // the others skipped.
                    if barrier.wait().await.is_leader() {
                        go_on.store(Instant::now() < deadline, Ordering::SeqCst);
                    }
                    barrier.wait().await;
                    if !go_on.load(Ordering::SeqCst) {
                        break;
                    }
                    let key = format!("contended-{}-{round}", std::process::id());
                    let t = Instant::now();
                    tally.record(t, connection.post(Some(&key)).await);
                }
                tally
            })
        })
        .collect();
    let tally = Tally::gather(tasks).await;
    let name = format!("contention_{clients}_one_key");
    Ok(tally.summarize(&name, clients, started.elapsed(), sampler.stop().await))
}

/// What the clients of one workload saw.
#[derive(Default, Clone)]
struct Tally {
    latencies_us: Vec<u64>,
    statuses: BTreeMap<u16, u64>,
    errors: u64,
}

impl Tally {
    fn record(&mut self, started: Instant, result: anyhow::Result<u16>) {
        match result {
            Ok(status) => {
                self.latencies_us.push(started.elapsed().as_micros() as u64);
                *self.statuses.entry(status).or_insert(0) += 1;
                if status >= 500 {
                    self.errors += 1;
                }
            }
            Err(_) => self.errors += 1,
        }
    }

    async fn gather(tasks: Vec<tokio::task::JoinHandle<Tally>>) -> Tally {
        let mut all = Tally::default();
        for task in tasks {
            let tally = task.await.expect("client task");
            all.latencies_us.extend(tally.latencies_us);
            for (status, n) in tally.statuses {
                *all.statuses.entry(status).or_insert(0) += n;
            }
            all.errors += tally.errors;
        }
        all
    }

    fn summarize(
        mut self,
        name: &str,
        clients: usize,
        elapsed: Duration,
        peak_rss_kib: u64,
    ) -> Workload {
        self.latencies_us.sort_unstable();
        let latencies = &self.latencies_us;
        let pct = |p: f64| {
            if latencies.is_empty() {
                return 0.0;
            }
            let i = ((latencies.len() as f64 * p).ceil() as usize).clamp(1, latencies.len()) - 1;
            latencies[i] as f64 / 1000.0
        };
        let requests = latencies.len() as u64;
        Workload {
            name: name.to_owned(),
            clients,
            requests,
            errors: self.errors,
            rps: requests as f64 / elapsed.as_secs_f64(),
            p50_ms: pct(0.50),
            p99_ms: pct(0.99),
            p999_ms: pct(0.999),
            peak_rss_mib: peak_rss_kib as f64 / 1024.0,
            api_cpu_us: None,
            statuses: self.statuses,
        }
    }
}

async fn existing_ids(database_url: &str) -> anyhow::Result<Vec<String>> {
    let mut conn = PgConnection::connect(database_url).await?;
    let ids: Vec<String> = sqlx::query_scalar("SELECT id FROM payment_intents LIMIT 10000")
        .fetch_all(&mut conn)
        .await?;
    anyhow::ensure!(!ids.is_empty(), "no intents to read");
    Ok(ids)
}

fn reference(script: &Path, clients: usize, seconds: u64) -> anyhow::Result<Vec<Reference>> {
    // A run that fails (pgbench aborted by the machine, a database restarting) is run again: a
    // rerun is an honest measurement.
    const ATTEMPTS: usize = 3;
    let mut attempt = 1;
    let output = loop {
        println!("running {} {clients} {seconds}", script.display());
        let output = Command::new("bash")
            .arg(script)
            .arg(clients.to_string())
            .arg(seconds.to_string())
            .output()?;
        if output.status.success() {
            break output;
        }
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let lines: Vec<&str> = said.lines().collect();
        let tail = lines[lines.len().saturating_sub(5)..].join("\n");
        if attempt == ATTEMPTS {
            bail!("reference.sh failed {ATTEMPTS} times; last output:\n{tail}");
        }
        eprintln!(
            "loadgen: reference.sh failed ({}), running it again:\n{tail}",
            output.status
        );
        attempt += 1;
    };
    // Lines: `<name> clients=<c> tps=<n> latency_ms=<avg>`
    let text = String::from_utf8(output.stdout)?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let name = words.next()?.to_owned();
            let field = |key: &str| {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix(key))
                    .and_then(|v| v.parse::<f64>().ok())
            };
            Some(Reference {
                name,
                tps: field("tps=")?,
                latency_ms: field("latency_ms=").unwrap_or(0.0),
            })
        })
        .collect())
}

fn print_report(report: &Report) {
    println!(
        "\n{:<26} {:>7} {:>9} {:>10} {:>8} {:>8} {:>9} {:>7} {:>9} {:>10}",
        "workload",
        "clients",
        "requests",
        "req/s",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
        "errors",
        "RSS MiB",
        "CPU µs/req"
    );
    for w in &report.api {
        println!(
            "{:<26} {:>7} {:>9} {:>10.0} {:>8.2} {:>8.2} {:>9.2} {:>7} {:>9.1} {:>10}",
            w.name,
            w.clients,
            w.requests,
            w.rps,
            w.p50_ms,
            w.p99_ms,
            w.p999_ms,
            w.errors,
            w.peak_rss_mib,
            w.api_cpu_us
                .map_or_else(String::new, |us| format!("{us:.0}"))
        );
    }
    for r in &report.reference {
        println!(
            "{:<26} {:>7} {:>9} {:>10.0} {:>8.2}",
            format!("reference {}", r.name),
            report.clients,
            "",
            r.tps,
            r.latency_ms
        );
    }
    let show = |v: Option<f64>| v.map_or("n/a".to_owned(), |v| format!("{v:.2}"));
    println!("\ncreate_ratio = {}", show(report.create_ratio));
    println!("replay_ratio = {}", show(report.replay_ratio));
    println!(
        "plain_ratio  = {}  (fresh creates / one bare durable insert)",
        show(report.plain_ratio)
    );
    println!(
        "keyed/unkeyed p50 latency at 1 client = {}",
        show(report.keyed_vs_unkeyed_latency_at_1_client)
    );
    if let Some(w) = &report.webhooks {
        println!(
            "webhooks: {} events delivered, {:.0}/s; commit-to-delivery lag p50 {:.1} ms, p99 {:.1} ms",
            w.events_delivered, w.events_per_second, w.lag_p50_ms, w.lag_p99_ms,
        );
    }
    if let Some(c) = &report.endpoint_cost {
        for (what, cost) in [
            ("delivery on other replicas", &c.delivery_elsewhere),
            ("delivery on the same replica", &c.same_replica_delivers),
        ] {
            let rounds: Vec<String> = cost
                .rounds
                .iter()
                .map(|(without, with)| format!("{with:.0}/{without:.0}"))
                .collect();
            println!(
                "fresh creates with an endpoint / without, {what}: median {:.2} of {} rounds \
                 (range {:.2}-{:.2}; with/without req/s: {})",
                cost.median_ratio,
                cost.rounds.len(),
                cost.min_ratio,
                cost.max_ratio,
                rounds.join(", ")
            );
        }
    }
    if let Some(report) = &report.x402 {
        let runs = [
            ("EIP-3009", Some(&report.eip3009)),
            ("Permit2", report.permit2.as_ref()),
        ];
        for (way, x) in runs.into_iter().filter_map(|(way, x)| Some((way, x?))) {
            println!(
                "x402 by {way}: {} clients through @x402/express for {} s on {} ms blocks: {} paid requests ({:.1}/s), {} refused; \
                 settle p50 {:.0} ms, p99 {:.0} ms; a burst of {} settles: {} succeeded in {} blocks, at most {} in one, in {:.1} s",
                x.clients,
                x.seconds,
                report.block_ms,
                x.paid_requests,
                x.settles_per_second,
                x.refused_requests,
                x.settle_p50_ms.unwrap_or(f64::NAN),
                x.settle_p99_ms.unwrap_or(f64::NAN),
                x.burst_payments,
                x.burst_succeeded,
                x.burst_blocks_used,
                x.burst_max_payments_per_block,
                x.burst_seconds,
            );
            if !x.burst_refusals.is_empty() {
                println!("  the burst's other answers: {:?}", x.burst_refusals);
            }
        }
    }
    if let Some(s) = &report.settlement {
        println!(
            "settlement: {} intents confirmed at once, {} relayer key(s), {} confirmations of {} s blocks (floor {:.0} ms): \
             processing -> succeeded p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; {} blocks carried them, \
             at most {} per block; all settled in {:.1} s",
            s.intents,
            s.relayer_keys,
            s.confirmations,
            s.block_seconds,
            s.floor_ms,
            s.confirm_to_succeeded_p50_ms,
            s.confirm_to_succeeded_p99_ms,
            s.confirm_to_succeeded_max_ms,
            s.blocks_used,
            s.max_payments_per_block,
            s.wall_seconds
        );
    }
    if let Some(d) = &report.deposits {
        for run in &d.runs {
            println!(
                "deposits: one block of {} transfers among {} open deposit intents: observed {:.0} ms, applied {:.0} ms after it was mined",
                run.transfers, run.open_intents, run.observed_ms, run.applied_ms
            );
        }
    }
    if let Some(f) = &report.follower {
        for run in &f.runs {
            println!(
                "follower: caught up {} blocks at {:.0} blocks/s with {} ({} eth_getLogs, {} refused)",
                run.blocks,
                run.blocks_per_second,
                run.range_cap
                    .map_or("no range cap".to_owned(), |cap| format!(
                        "a {cap}-block range cap"
                    )),
                run.logs_calls,
                run.range_refusals
            );
        }
    }
    if let Some(o) = &report.orders {
        let rounds: Vec<String> = o
            .rounds
            .iter()
            .map(|(fixed, order)| format!("{fixed:.0}/{order:.0}"))
            .collect();
        let cpu = |us: Option<f64>| us.map_or("n/a".to_owned(), |us| format!("{us:.0}"));
        println!(
            "orders: an order with {} options costs {:.2} x a fixed create (median of fixed/order req/s: {}); \
             API CPU per create {} µs fixed, {} µs order",
            o.options,
            o.median_cost,
            rounds.join(", "),
            cpu(o.api_cpu_us.0),
            cpu(o.api_cpu_us.1),
        );
    }
    if let Some(n) = &report.noisy_neighbour {
        let statuses = |w: &Workload| format!("{:?}", w.statuses);
        println!(
            "noisy neighbour: peak {:.0} creates/s; limiter cost: limited/unlimited {:.3} in throughput, \
             {:.3} in API CPU per create (medians of {:?}); one admission {:.0} ns, {:.3}% of a create's API CPU; \
             B alone at {:.0}/s: p50 {:.2} ms, p99 {:.2} ms {}",
            n.peak_creates_per_second,
            n.limiter_cost_ratio,
            n.limiter_cpu_ratio,
            n.limiter_cost_rounds,
            n.limiter_admission_ns,
            n.limiter_admission_share_of_create * 100.0,
            n.b_alone.rps,
            n.b_alone.p50_ms,
            n.b_alone.p99_ms,
            statuses(&n.b_alone),
        );
        let below_peak = n
            .with_a_below_peak
            .iter()
            .map(|c| (format!("A allowed {} of the peak", c.share), &c.contest));
        let contests = std::iter::once(("A at the default limit".to_owned(), &n.with_a_limited))
            .chain(below_peak)
            .chain([
                ("A allowed the peak".to_owned(), &n.with_a_at_peak),
                (
                    "A allowed the peak, 12 at once".to_owned(),
                    &n.with_a_at_peak_fewer_at_once,
                ),
                (
                    format!(
                        "A unlimited, offered {} of the peak (the control)",
                        tenants::A_SHARE_IN_CONTROL
                    ),
                    &n.control_with_a_unrefused,
                ),
            ]);
        for (what, c) in contests {
            println!(
                "  {what}, offering {:.0}/s: A sent {:.0}/s {} p99 {:.2} ms, {} timeouts; \
                 B p50 {:.2} ms, p99 {:.2} ms ({:.2} x alone between: p99 {:.2} ms; rounds {:.2?}) {}; served {:.2} of the peak; API CPU {:.0} us per answer",
                c.a_offered_per_second,
                c.a.rps,
                statuses(&c.a),
                c.a.p99_ms,
                c.a_timeouts,
                c.b.p50_ms,
                c.b.p99_ms,
                c.b_p99_factor,
                c.b_before.p99_ms,
                c.b_p99_factor_rounds,
                statuses(&c.b),
                c.served_over_peak,
                c.api_cpu_us_per_answer,
            );
        }
        println!(
            "  B alone again at the end: p50 {:.2} ms, p99 {:.2} ms {}",
            n.b_alone_after.p50_ms,
            n.b_alone_after.p99_ms,
            statuses(&n.b_alone_after)
        );
    }
    if let Some(r) = &report.retention {
        println!(
            "retention: {} records stored, {:.0}/s coming due: fresh creates {:.0}/s ({} of the empty \
             database), replays {:.0}/s ({}); the sweeper deleted {:.0}/s, {:.1} x the create rate, \
             {} past retention left at the end",
            r.stored_keys,
            r.due_per_second,
            r.create_rps,
            show(r.create_vs_empty),
            r.replay_rps,
            show(r.replay_vs_empty),
            r.deleted_per_second,
            r.deletion_vs_create,
            r.backlog_at_end
        );
    }
}

/// A webhook receiver of our own on this machine: answers 200 to anything and notes when each
/// `webhook-id` arrived.
struct Receiver {
    url: String,
    arrivals: Arrivals,
}

type Arrivals = Arc<std::sync::Mutex<Vec<(String, time::OffsetDateTime)>>>;

impl Receiver {
    async fn start() -> anyhow::Result<Self> {
        use axum::{extract::State, http::HeaderMap};
        async fn receive(State(arrivals): State<Arrivals>, headers: HeaderMap) -> &'static str {
            let id = headers
                .get("webhook-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let now = time::OffsetDateTime::now_utc();
            arrivals.lock().expect("not poisoned").push((id, now));
            ""
        }
        let arrivals = Arrivals::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/hooks", listener.local_addr()?);
        let app = axum::Router::new()
            .fallback(receive)
            .with_state(arrivals.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Self { url, arrivals })
    }
}

/// Registers an endpoint at the receiver, creates fresh intents for `duration` (each change is
/// one event to deliver), waits until every delivery is done, and measures the rate and the lag
/// from each change's commit to its arrival. The endpoint is gone again at the end.
async fn webhook_delivery(
    server: &ApiProcess,
    database_url: &str,
    receiver: &Receiver,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<(Workload, WebhookReport)> {
    let mut db = PgConnection::connect(database_url).await?;
    sqlx::query(
        "INSERT INTO webhook_endpoints (merchant_id, id, url, secret) \
         VALUES ('merchant_demo', 'we_0000000000000000000000be', $1, \
                 'whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=')",
    )
    .bind(&receiver.url)
    .execute(&mut db)
    .await?;
    let workload = run(
        server,
        "create_fresh_webhook",
        clients,
        duration,
        Op::CreateFresh,
    )
    .await;
    endpoint_cost::wait_until_delivered(&mut db).await?;
    let committed: std::collections::HashMap<String, time::OffsetDateTime> = sqlx::query_as(
        "SELECT e.id, e.created_at FROM events e JOIN webhook_deliveries d \
             ON d.merchant_id = e.merchant_id AND d.event_id = e.id",
    )
    .fetch_all(&mut db)
    .await?
    .into_iter()
    .collect();
    sqlx::query("DELETE FROM webhook_endpoints WHERE id = 'we_0000000000000000000000be'")
        .execute(&mut db)
        .await?;
    let arrivals = receiver.arrivals.lock().expect("not poisoned").clone();
    let mut first_seen: std::collections::HashMap<&str, time::OffsetDateTime> =
        std::collections::HashMap::new();
    for (id, at) in &arrivals {
        first_seen.entry(id).or_insert(*at);
    }
    let mut lags: Vec<f64> = first_seen
        .iter()
        .filter_map(|(id, at)| {
            let committed = committed.get(*id)?;
            Some((*at - *committed).as_seconds_f64() * 1000.0)
        })
        .collect();
    lags.sort_by(f64::total_cmp);
    let quantile = |q: f64| {
        lags.get(((lags.len() as f64 * q) as usize).min(lags.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    let span = match (committed.values().min(), first_seen.values().max()) {
        (Some(first), Some(last)) => (*last - *first).as_seconds_f64(),
        _ => 0.0,
    };
    let report = WebhookReport {
        events_delivered: first_seen.len() as u64,
        events_per_second: if span > 0.0 {
            first_seen.len() as f64 / span
        } else {
            0.0
        },
        lag_p50_ms: quantile(0.5),
        lag_p99_ms: quantile(0.99),
    };
    Ok((workload, report))
}

/// Two bar panels: throughput (API beside reference) and p50/p99 latency per workload.
fn chart(report: &Report) -> String {
    let mut bars: Vec<(String, f64, &str)> = report
        .api
        .iter()
        .map(|w| (w.name.clone(), w.rps, "#2b6cb0"))
        .collect();
    bars.extend(
        report
            .reference
            .iter()
            .map(|r| (format!("reference {}", r.name), r.tps, "#c05621")),
    );
    let (width, row, left) = (900.0, 22.0, 230.0);
    let top_height = 40.0 + row * bars.len() as f64;
    let lat_height = 40.0 + row * report.api.len() as f64;
    let height = top_height + lat_height + 30.0;
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="10" y="20" font-size="14" font-weight="bold">Throughput, {} clients (requests or transactions per second)</text>
"#,
        report.clients
    );
    let max = bars.iter().map(|b| b.1).fold(1.0, f64::max);
    for (i, (label, value, color)) in bars.iter().enumerate() {
        let y = 32.0 + row * i as f64;
        let w = (width - left - 90.0) * value / max;
        svg += &format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{label}</text><rect x=\"{left}\" y=\"{y}\" width=\"{w:.1}\" height=\"{}\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"{}\">{value:.0}</text>\n",
            left - 6.0,
            y + 14.0,
            row - 6.0,
            left + w + 4.0,
            y + 14.0
        );
    }
    let base = top_height + 20.0;
    svg += &format!(
        "<text x=\"10\" y=\"{base}\" font-size=\"14\" font-weight=\"bold\">Latency (ms): p50 dark, p99 light</text>\n"
    );
    let max_lat = report.api.iter().map(|w| w.p99_ms).fold(0.001, f64::max);
    for (i, w) in report.api.iter().enumerate() {
        let y = base + 12.0 + row * i as f64;
        let p99 = (width - left - 120.0) * w.p99_ms / max_lat;
        let p50 = (width - left - 120.0) * w.p50_ms / max_lat;
        svg += &format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text><rect x=\"{left}\" y=\"{y}\" width=\"{p99:.1}\" height=\"{}\" fill=\"#90cdf4\"/><rect x=\"{left}\" y=\"{y}\" width=\"{p50:.1}\" height=\"{}\" fill=\"#2b6cb0\"/><text x=\"{:.1}\" y=\"{}\">{:.2} / {:.2}</text>\n",
            left - 6.0,
            y + 14.0,
            w.name,
            row - 6.0,
            row - 6.0,
            left + p99 + 4.0,
            y + 14.0,
            w.p50_ms,
            w.p99_ms
        );
    }
    svg + "</svg>\n"
}

/// The API under test, as a child process.
struct ApiProcess {
    child: Child,
    addr: SocketAddr,
}

impl ApiProcess {
    async fn start(
        bin: &Path,
        database_url: &str,
        env: &[(String, String)],
    ) -> anyhow::Result<Self> {
        // A port of our own, so a stray server from an earlier run can never answer for this one.
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut child = Command::new(bin)
            .args(["serve", "--migrate"])
            .env("DATABASE_URL", database_url)
            .env("BIND_ADDR", addr.to_string())
            .env("BOOTSTRAP_API_KEYS", format!("{TOKEN}=merchant_demo"))
            // The webhook workload's receiver is on this machine, over plain HTTP.
            .env("WEBHOOK_ALLOW_HTTP", "true")
            .env("WEBHOOK_ALLOW_PRIVATE_NETWORKS", "true")
            // One merchant's load is the point of most workloads; the noisy-neighbour one sets
            // its own limits.
            .env("MERCHANT_RATE_LIMIT", "0")
            .env("MERCHANT_CONCURRENCY_LIMIT", "0")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("start payments-api")?;
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait()? {
                bail!("payments-api exited during start-up: {status}");
            }
            if let Ok(mut connection) = HttpConnection::open(addr).await
                && connection.get("/readyz").await.ok() == Some(200)
            {
                return Ok(Self { child, addr });
            }
            if started.elapsed() > Duration::from_secs(30) {
                bail!("payments-api did not become ready");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// CPU time the API process has used so far, user and system, in seconds.
    fn cpu_seconds(&self) -> f64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // Fields after the command name (which may hold spaces) end with ')'.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or("", |(_, rest)| rest)
            .split_whitespace()
            .collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name; 100 Hz.
        (ticks(11) + ticks(12)) / 100.0
    }

    /// Samples the API's resident set every 50 ms until stopped; returns the peak in KiB.
    fn rss_sampler(&self) -> RssSampler {
        RssSampler::of(self.child.id())
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl RssSampler {
    /// Samples process `pid`'s resident set every 50 ms until stopped.
    fn of(pid: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut peak = 0;
                while !stop.load(Ordering::Relaxed) {
                    peak = peak.max(rss_kib(pid));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                peak.max(rss_kib(pid))
            }
        });
        RssSampler { stop, task }
    }
}

impl Drop for ApiProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct RssSampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<u64>,
}

impl RssSampler {
    async fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or(0)
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}
