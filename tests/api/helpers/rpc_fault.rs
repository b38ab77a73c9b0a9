//! A JSON-RPC proxy between payments-api and its chain that kills the process between a broadcast
//! and its record: it forwards `eth_sendRawTransaction`, and once the node has taken the
//! transaction it sends SIGKILL to the process it is aimed at (with a probability) instead of
//! passing the answer back. The crash a relayer must survive, injected from outside the process.
//! Also used by the chaos run (`examples/chaos`).

use std::sync::{
    Arc,
    atomic::{AtomicU32, AtomicU64, Ordering},
};

use axum::{body::Bytes, extract::State, http::StatusCode, response::IntoResponse};

#[derive(Clone)]
struct Aim {
    upstream: String,
    client: reqwest::Client,
    /// The process to kill; 0 for none.
    victim: Arc<AtomicU32>,
    /// The chance of a kill per broadcast, as `f64` bits.
    probability: Arc<AtomicU64>,
    kills: Arc<AtomicU64>,
}

pub struct RpcFaultProxy {
    /// What to give the app as its chain's RPC URL.
    pub url: String,
    aim: Aim,
}

impl RpcFaultProxy {
    /// A proxy to the node at `upstream`, aimed at nothing yet.
    pub async fn start(upstream: &str) -> Self {
        let aim = Aim {
            upstream: upstream.to_owned(),
            client: reqwest::Client::new(),
            victim: Arc::default(),
            probability: Arc::default(),
            kills: Arc::default(),
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
}

async fn forward(State(aim): State<Aim>, body: Bytes) -> axum::response::Response {
    let answer = aim
        .client
        .post(&aim.upstream)
        .header("content-type", "application/json")
        .body(body.clone())
        .send()
        .await;
    let answer = match answer {
        Ok(answer) => answer,
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let status = answer.status();
    let bytes = answer.bytes().await.unwrap_or_default();
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
    (status, [("content-type", "application/json")], bytes).into_response()
}
