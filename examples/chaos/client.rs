//! Clients that behave like merchant servers: every operation is retried with the same key and
//! the same body on timeouts, 409 and 503 (honouring Retry-After), each try on a random replica,
//! until it gets a final answer. Every exchange is recorded for the checker.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use rand::Rng;

pub const TOKENS: [(&str, &str); 2] = [
    ("merchant-demo", "merchant_demo"),
    ("merchant-other", "merchant_other"),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// A create under a key of its own.
    Create,
    /// A create under a key many clients use at once, always with the same body.
    HotCreate,
    /// A completed key sent again with a different body: must be 422, every time.
    Reuse,
    /// A cancel under a key of its own.
    Cancel,
    /// A read of an intent a client has seen.
    Read,
}

impl OpKind {
    /// Whether a success of this kind committed something (reads and reuse write nothing).
    pub fn writes(self) -> bool {
        matches!(self, Self::Create | Self::HotCreate | Self::Cancel)
    }
}

#[derive(Debug, Clone)]
pub enum Outcome {
    Answer {
        status: u16,
        error: Option<String>,
        replayed: bool,
        body: Vec<u8>,
    },
    /// No answer: timeout, refused or reset connection.
    NoAnswer,
}

/// One request and what came back.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub op: u64,
    pub kind: OpKind,
    pub scope: &'static str,
    pub key: Option<String>,
    /// Which body was sent (the amount), to tell different-body reuse apart.
    pub amount: String,
    pub target: Option<String>,
    pub replica: usize,
    pub started: Duration,
    pub ended: Duration,
    pub outcome: Outcome,
}

/// A logical operation that never reached a final answer before the deadline.
#[derive(Debug, Clone)]
pub struct Unresolved {
    pub op: u64,
    pub kind: OpKind,
    pub key: Option<String>,
}

pub struct Shared {
    pub bases: Vec<String>,
    pub history: Mutex<Vec<Exchange>>,
    pub unresolved: Mutex<Vec<Unresolved>>,
    /// Intents seen in create answers, with the scope that owns them.
    pub seen: Mutex<Vec<(&'static str, String)>>,
    /// Keys of completed creates with the amount they were created with.
    pub completed: Mutex<Vec<(&'static str, String, String)>>,
    pub started: Instant,
    /// Set when the load stops: operations in progress are still driven to a final answer.
    pub stop: AtomicBool,
    /// The last moment an operation may still retry.
    pub give_up_at: Mutex<Option<Instant>>,
    /// Every `/x402/settle` answer of the x402 payers.
    pub x402_answers: Mutex<Vec<crate::x402::X402Answer>>,
    next_op: AtomicU64,
}

impl Shared {
    pub fn new(bases: Vec<String>) -> Arc<Self> {
        Arc::new(Self {
            bases,
            history: Mutex::new(Vec::new()),
            unresolved: Mutex::new(Vec::new()),
            seen: Mutex::new(Vec::new()),
            completed: Mutex::new(Vec::new()),
            started: Instant::now(),
            stop: AtomicBool::new(false),
            give_up_at: Mutex::new(None),
            x402_answers: Mutex::new(Vec::new()),
            next_op: AtomicU64::new(0),
        })
    }
}

/// The create of an intent of `amount`: paid by Permit2 when the amount ends in 7 (a tenth of
/// them), else by EIP-3009; a function of the amount alone, so a retry sends the same body.
pub fn body(amount: &str) -> String {
    let method = if amount.ends_with('7') {
        "permit2"
    } else {
        "authorization"
    };
    format!(
        r#"{{"chain":"evm:31337","token":"0x5FbDB2315678afecb367f032d93F642f64180aa3","payer":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","merchant":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC","amount":"{amount}","expires_in_seconds":3600,"payment_method":"{method}"}}"#
    )
}

/// Hot keys shared by every client: a handful, so they really race.
const HOT_KEYS: u32 = 12;

pub async fn run_client(shared: Arc<Shared>, client_index: usize) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_millis(2500))
        .pool_idle_timeout(Duration::from_secs(5))
        .build()
        .expect("HTTP client");
    let mut sequence = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        let (token, scope) = TOKENS[client_index % TOKENS.len()];
        let roll: u32 = rand::rng().random_range(0..100);
        sequence += 1;
        let op = shared.next_op.fetch_add(1, Ordering::Relaxed);
        let operation = match roll {
            0..50 => Some(Operation {
                kind: OpKind::Create,
                key: Some(format!("c{client_index}-{sequence}")),
                amount: rand::rng().random_range(1..1_000_000u64).to_string(),
                target: None,
            }),
            50..65 => {
                let n = rand::rng().random_range(0..HOT_KEYS);
                Some(Operation {
                    kind: OpKind::HotCreate,
                    key: Some(format!("hot-{n}")),
                    amount: (1000 + n).to_string(),
                    target: None,
                })
            }
            65..72 => {
                pick(&shared.completed, |(s, ..)| *s == scope).map(|(_, key, amount)| Operation {
                    kind: OpKind::Reuse,
                    key: Some(key),
                    amount: format!("{amount}9"),
                    target: None,
                })
            }
            72..85 => pick(&shared.seen, |(s, _)| *s == scope).map(|(_, id)| Operation {
                kind: OpKind::Cancel,
                key: Some(format!("cancel-c{client_index}-{sequence}")),
                amount: String::new(),
                target: Some(id),
            }),
            _ => pick(&shared.seen, |(s, _)| *s == scope).map(|(_, id)| Operation {
                kind: OpKind::Read,
                key: None,
                amount: String::new(),
                target: Some(id),
            }),
        };
        if let Some(operation) = operation {
            drive(&shared, &http, op, token, scope, operation).await;
        }
    }
}

/// What a client sends, again and again until it has a final answer.
struct Operation {
    kind: OpKind,
    key: Option<String>,
    /// The body's amount: a different amount under the same key is a different request.
    amount: String,
    /// The intent a cancel or read is about.
    target: Option<String>,
}

fn pick<T: Clone>(items: &Mutex<Vec<T>>, filter: impl Fn(&T) -> bool) -> Option<T> {
    let items = items.lock().unwrap();
    let candidates: Vec<&T> = items.iter().filter(|i| filter(i)).collect();
    (!candidates.is_empty())
        .then(|| candidates[rand::rng().random_range(0..candidates.len())].clone())
}

/// Sends one operation until it has a final answer, retrying like a careful merchant server.
async fn drive(
    shared: &Shared,
    http: &reqwest::Client,
    op: u64,
    token: &str,
    scope: &'static str,
    operation: Operation,
) {
    let Operation {
        kind,
        key,
        amount,
        target,
    } = operation;
    let amount = amount.as_str();
    let payload = body(amount);
    loop {
        let replica = rand::rng().random_range(0..shared.bases.len());
        let base = &shared.bases[replica];
        let request = match kind {
            OpKind::Create | OpKind::HotCreate | OpKind::Reuse => http
                .post(format!("{base}/v1/payment_intents"))
                .body(payload.clone()),
            OpKind::Cancel => http.post(format!(
                "{base}/v1/payment_intents/{}/cancel",
                target.as_deref().unwrap_or("")
            )),
            OpKind::Read => http.get(format!(
                "{base}/v1/payment_intents/{}",
                target.as_deref().unwrap_or("")
            )),
        };
        let mut request = request.bearer_auth(token);
        if let Some(key) = &key {
            request = request.header("idempotency-key", key);
        }
        let started = shared.started.elapsed();
        let result = async {
            let response = request.send().await?;
            let status = response.status().as_u16();
            let replayed = response.headers().contains_key("idempotent-replayed");
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            let body = response.bytes().await?.to_vec();
            Ok::<_, reqwest::Error>((status, replayed, retry_after, body))
        }
        .await;
        let ended = shared.started.elapsed();
        let (outcome, retry_in) = match result {
            Ok((status, replayed, retry_after, body)) => {
                let error = serde_json::from_slice::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned));
                let retry = match (status, error.as_deref()) {
                    (409, Some("idempotency_key_in_flight" | "idempotency_key_lease_lost"))
                    | (503, _) => Some(Duration::from_secs(retry_after.unwrap_or(1))),
                    _ => None,
                };
                (
                    Outcome::Answer {
                        status,
                        error,
                        replayed,
                        body,
                    },
                    retry,
                )
            }
            Err(_) => (Outcome::NoAnswer, Some(Duration::from_millis(200))),
        };
        if let (Outcome::Answer { status, body, .. }, true) = (&outcome, retry_in.is_none()) {
            record_success(shared, kind, scope, key.as_deref(), amount, *status, body);
        }
        shared.history.lock().unwrap().push(Exchange {
            op,
            kind,
            scope,
            key: key.clone(),
            amount: amount.to_owned(),
            target: target.clone(),
            replica,
            started,
            ended,
            outcome,
        });
        let Some(wait) = retry_in else { return };
        let give_up = *shared.give_up_at.lock().unwrap();
        if give_up.is_some_and(|at| Instant::now() + wait > at) {
            shared
                .unresolved
                .lock()
                .unwrap()
                .push(Unresolved { op, kind, key });
            return;
        }
        tokio::time::sleep(wait).await;
    }
}

fn record_success(
    shared: &Shared,
    kind: OpKind,
    scope: &'static str,
    key: Option<&str>,
    amount: &str,
    status: u16,
    body: &[u8],
) {
    if status != 201 || !matches!(kind, OpKind::Create | OpKind::HotCreate) {
        return;
    }
    if let Some(id) = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("id").and_then(|i| i.as_str()).map(str::to_owned))
    {
        shared.seen.lock().unwrap().push((scope, id));
    }
    if let (Some(key), OpKind::Create) = (key, kind) {
        shared
            .completed
            .lock()
            .unwrap()
            .push((scope, key.to_owned(), amount.to_owned()));
    }
}
