//! A JSON-RPC proxy between payments-api and its chain that kills the process between a broadcast
//! and its record: it forwards `eth_sendRawTransaction`, and once the node has taken the
//! transaction it sends SIGKILL to the process it is aimed at (with a probability) instead of
//! passing the answer back. The crash a relayer must survive, injected from outside the process.
//! Also used by the chaos run (`examples/chaos`).
//!
//! It also refuses, when told to, every `eth_getLogs` over more blocks than a cap, as hosted
//! providers do, in their own words in turn (or HTTP 413), and keeps the widest range it served;
//! it can be down (HTTP 503 to everything), stall (hold every request past any client's
//! timeout), lag (say a head some blocks below the node's), throttle (429 with `Retry-After`),
//! reset (pass a request on, then break the connection instead of answering) or be pointed at
//! another node; and it counts the calls it passed on by method and keeps when each request came.

use std::sync::{
    Arc,
    atomic::{AtomicU32, AtomicU64, Ordering},
};

use axum::{body::Bytes, extract::State, http::StatusCode, response::IntoResponse};

#[derive(Clone)]
struct Aim {
    upstream: Arc<std::sync::Mutex<String>>,
    client: reqwest::Client,
    /// The process to kill; 0 for none.
    victim: Arc<AtomicU32>,
    /// The chance of a kill per broadcast, as `f64` bits.
    probability: Arc<AtomicU64>,
    kills: Arc<AtomicU64>,
    /// The widest `eth_getLogs` range served, in blocks; 0 for no cap.
    range_cap: Arc<AtomicU64>,
    range_refusals: Arc<AtomicU64>,
    widest_range_served: Arc<AtomicU64>,
    down: Arc<std::sync::atomic::AtomicBool>,
    stalled: Arc<std::sync::atomic::AtomicBool>,
    lag: Arc<AtomicU64>,
    served: Arc<std::sync::Mutex<std::collections::HashMap<String, u64>>>,
    /// The `Retry-After` seconds of the next answer, a 429; `u64::MAX` for none.
    throttle_next: Arc<AtomicU64>,
    /// The method whose answers are lost with their connection; empty for none.
    resetting: Arc<std::sync::Mutex<String>>,
    /// When each request came, and whether it was answered 429.
    arrivals: Arc<std::sync::Mutex<Vec<(std::time::Instant, bool)>>>,
}

/// How the large providers refuse an `eth_getLogs` range (JSON-RPC code and message; `None`: the
/// answer is HTTP 413), given in turn.
const RANGE_REFUSALS: &[Option<(i64, &str)>] = &[
    Some((-32005, "query returned more than 10000 results")),
    Some((
        -32602,
        "Log response size exceeded. You can make eth_getLogs requests with up to a 2K block range and no limit on the response size, or you can request any block range with a cap of 10K logs in the response.",
    )),
    Some((-32000, "block range is too wide")),
    Some((-32000, "exceed maximum block range: 50000")),
    None,
];

pub struct RpcFaultProxy {
    /// What to give the app as its chain's RPC URL.
    pub url: String,
    aim: Aim,
}

impl RpcFaultProxy {
    /// A proxy to the node at `upstream`, aimed at nothing yet.
    pub async fn start(upstream: &str) -> Self {
        let aim = Aim {
            upstream: Arc::new(std::sync::Mutex::new(upstream.to_owned())),
            client: reqwest::Client::new(),
            victim: Arc::default(),
            probability: Arc::default(),
            kills: Arc::default(),
            range_cap: Arc::default(),
            range_refusals: Arc::default(),
            widest_range_served: Arc::default(),
            down: Arc::default(),
            stalled: Arc::default(),
            lag: Arc::default(),
            served: Arc::default(),
            throttle_next: Arc::new(AtomicU64::new(u64::MAX)),
            resetting: Arc::default(),
            arrivals: Arc::default(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the RPC proxy");
        let url = format!("http://{}", listener.local_addr().expect("bound"));
        let router = axum::Router::new()
            .fallback(forward)
            .with_state(aim.clone());
        tokio::spawn(async move { axum::serve(listener, router).await });
        Self { url, aim }
    }

    /// From now on, each broadcast kills process `pid` with `probability` (1 for always).
    pub fn aim_at(&self, pid: u32, probability: f64) {
        self.aim
            .probability
            .store(probability.to_bits(), Ordering::SeqCst);
        self.aim.victim.store(pid, Ordering::SeqCst);
    }

    /// Broadcasts pass untouched from now on.
    pub fn disarm(&self) {
        self.aim.victim.store(0, Ordering::SeqCst);
    }

    /// How many processes it killed so far.
    pub fn kills(&self) -> u64 {
        self.aim.kills.load(Ordering::SeqCst)
    }

    /// From now on, an `eth_getLogs` over more than `blocks` blocks is refused (and the widest
    /// range served is counted from now).
    pub fn cap_log_ranges(&self, blocks: u64) {
        self.aim.range_cap.store(blocks, Ordering::SeqCst);
        self.aim.widest_range_served.store(0, Ordering::SeqCst);
    }

    /// How many `eth_getLogs` ranges it refused so far.
    pub fn range_refusals(&self) -> u64 {
        self.aim.range_refusals.load(Ordering::SeqCst)
    }

    /// Down (every request answered 503) or up.
    pub fn set_down(&self, down: bool) {
        self.aim.down.store(down, Ordering::SeqCst);
    }

    /// Stalling (every request held for a minute before it is passed on) or not.
    pub fn set_stalled(&self, stalled: bool) {
        self.aim.stalled.store(stalled, Ordering::SeqCst);
    }

    /// From now on, its `eth_blockNumber` says a head `blocks` below the node's.
    pub fn lag_by(&self, blocks: u64) {
        self.aim.lag.store(blocks, Ordering::SeqCst);
    }

    /// How many `method` calls it passed to the node.
    pub fn served(&self, method: &str) -> u64 {
        let served = self.aim.served.lock().unwrap();
        served.get(method).copied().unwrap_or(0)
    }

    /// Its next answer is 429 with `Retry-After: seconds`, as a provider's rate limit.
    pub fn throttle_next(&self, seconds: u64) {
        self.aim.throttle_next.store(seconds, Ordering::SeqCst);
    }

    /// When each request came, and whether it was the one answered 429.
    pub fn arrivals(&self) -> Vec<(std::time::Instant, bool)> {
        self.aim.arrivals.lock().unwrap().clone()
    }

    /// From now on, each `method` request is passed to the node and its answer dropped with the
    /// connection (`None`: none is).
    pub fn reset_answers_to(&self, method: Option<&str>) {
        *self.aim.resetting.lock().unwrap() = method.unwrap_or("").to_owned();
    }

    /// From now on, requests go to the node at `upstream`.
    pub fn point_at(&self, upstream: &str) {
        *self.aim.upstream.lock().unwrap() = upstream.to_owned();
    }

    /// How many calls it passed to the node, of every method.
    pub fn served_total(&self) -> u64 {
        self.aim.served.lock().unwrap().values().sum()
    }

    /// The widest `eth_getLogs` block range it passed to the node.
    pub fn widest_range_served(&self) -> u64 {
        self.aim.widest_range_served.load(Ordering::SeqCst)
    }
}

/// The block range of an `eth_getLogs` request (`fromBlock` and `toBlock` as numbers), in blocks,
/// and its JSON-RPC id; `None` for any other request.
fn logs_range(body: &[u8]) -> Option<(u64, serde_json::Value)> {
    let request: serde_json::Value = serde_json::from_slice(body).ok()?;
    if request["method"] != "eth_getLogs" {
        return None;
    }
    let number = |field: &str| {
        let hex = request["params"][0][field].as_str()?.strip_prefix("0x")?;
        u64::from_str_radix(hex, 16).ok()
    };
    let blocks = number("toBlock")?.checked_sub(number("fromBlock")?)? + 1;
    Some((blocks, request["id"].clone()))
}

async fn forward(State(aim): State<Aim>, body: Bytes) -> axum::response::Response {
    let throttled = aim.throttle_next.swap(u64::MAX, Ordering::SeqCst);
    aim.arrivals
        .lock()
        .unwrap()
        .push((std::time::Instant::now(), throttled != u64::MAX));
    if throttled != u64::MAX {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", throttled.to_string())],
            "Too Many Requests",
        )
            .into_response();
    }
    if aim.down.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, "down").into_response();
    }
    if aim.stalled.load(Ordering::SeqCst) {
        tokio::time::sleep(std::time::Duration::from_secs(60)).await;
    }
    let request: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let method = request["method"].as_str().unwrap_or("").to_owned();
    if let Some((blocks, id)) = logs_range(&body) {
        let cap = aim.range_cap.load(Ordering::SeqCst);
        if cap != 0 && blocks > cap {
            let turn = aim.range_refusals.fetch_add(1, Ordering::SeqCst) as usize;
            return match RANGE_REFUSALS[turn % RANGE_REFUSALS.len()] {
                Some((code, message)) => axum::Json(serde_json::json!({
                    "jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}
                }))
                .into_response(),
                None => (StatusCode::PAYLOAD_TOO_LARGE, "Payload Too Large").into_response(),
            };
        }
        aim.widest_range_served.fetch_max(blocks, Ordering::SeqCst);
    }
    let upstream = aim.upstream.lock().unwrap().clone();
    let answer = aim
        .client
        .post(&upstream)
        .header("content-type", "application/json")
        .body(body.clone())
        .send()
        .await;
    let answer = match answer {
        Ok(answer) => answer,
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let status = answer.status();
    let mut bytes = answer.bytes().await.unwrap_or_default();
    *aim.served
        .lock()
        .unwrap()
        .entry(method.clone())
        .or_default() += 1;
    let lag = aim.lag.load(Ordering::SeqCst);
    if method == "eth_blockNumber" && lag > 0 {
        let mut answer: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        if let Some(head) = answer["result"]
            .as_str()
            .and_then(|h| u64::from_str_radix(h.trim_start_matches("0x"), 16).ok())
        {
            answer["result"] = format!("{:#x}", head.saturating_sub(lag)).into();
            bytes = Bytes::from(answer.to_string());
        }
    }
    let broadcast = std::str::from_utf8(&body).is_ok_and(|b| b.contains("eth_sendRawTransaction"));
    let victim = aim.victim.load(Ordering::SeqCst);
    let probability = f64::from_bits(aim.probability.load(Ordering::SeqCst));
    if broadcast && status.is_success() && victim != 0 && rand::random::<f64>() < probability {
        // The node has the transaction; the process that sent it never hears so.
        // SAFETY: kill(2) with a pid and a signal number has no memory-safety preconditions.
        unsafe { libc::kill(victim as i32, libc::SIGKILL) };
        aim.victim.store(0, Ordering::SeqCst);
        aim.kills.fetch_add(1, Ordering::SeqCst);
        return StatusCode::BAD_GATEWAY.into_response();
    }
    if *aim.resetting.lock().unwrap() == method {
        // The node did the work; the answer dies with the connection, mid-body.
        let broken = futures::stream::once(async {
            Err::<Bytes, _>(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "reset",
            ))
        });
        return (
            [("content-length", bytes.len().to_string())],
            axum::body::Body::from_stream(broken),
        )
            .into_response();
    }
    (status, [("content-type", "application/json")], bytes).into_response()
}
