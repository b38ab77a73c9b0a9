//! Several JSON-RPC endpoints of one chain (`CHAINS=evm:8453=https://a,https://b`) as one
//! transport, under the same provider type as a single one ([`super::rpc::Node`]):
//!
//! - Calls go to the current endpoint; one that fails at the HTTP level (unreachable, a timeout,
//!   5xx) is left alone for a while and the call goes to the next; one that answers 429 is left
//!   alone for its `Retry-After` (seconds or a date; at most [`MAX_REST`]).
//! - `eth_blockNumber` asks every endpoint not resting at once: each one's head is kept, and the
//!   current endpoint moves to the highest head when it lags it by more than
//!   `CHAIN_MAX_LAG_BLOCKS`.
//! - A range `eth_getLogs` goes only to an endpoint whose head, as last read, reaches the range's
//!   end, so a node behind never answers for blocks it does not have yet.
//! - `eth_sendRawTransaction` goes to every endpoint not left alone: a node that drops it does
//!   not lose it.
//!
//! A JSON-RPC error (a revert, a refused range) is the node's answer, not a failure of the
//! endpoint: it is passed on. Endpoints are named in metrics and logs by host only, since
//! providers put keys in the URL's path.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use alloy::{
    rpc::json_rpc::{RequestPacket, ResponsePacket},
    transports::{RpcError, TransportError, TransportErrorKind, TransportFut, http::reqwest},
};
use futures::future::join_all;

use crate::telemetry::metrics as names;

/// How long an endpoint that failed is left alone.
const REST: Duration = Duration::from_secs(10);
/// The longest a `Retry-After` is honoured: a provider asking for an hour is asked again sooner
/// (and, while every endpoint rests, calls still go to one).
const MAX_REST: Duration = Duration::from_secs(300);

/// The endpoints of one chain, as one `tower` service of JSON-RPC packets.
#[derive(Clone)]
pub struct Endpoints(Arc<Inner>);

struct Inner {
    chain: String,
    endpoints: Vec<Endpoint>,
    /// The endpoint calls go to first.
    current: AtomicUsize,
    max_lag: u64,
}

struct Endpoint {
    /// The URL's host (and port): never its path, where providers put keys.
    label: String,
    url: url::Url,
    client: reqwest::Client,
    /// Its head as last read; 0 before.
    head: AtomicU64,
    /// Left alone until then, after a failure.
    resting_until: Mutex<Option<Instant>>,
}

impl Endpoint {
    fn usable(&self) -> bool {
        self.resting_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_none_or(|until| Instant::now() >= until)
    }

    fn rest(&self, rest: Duration) {
        *self
            .resting_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now() + rest);
    }

    /// Sends `request` here, counting the call by its outcome; an endpoint that fails rests.
    async fn send(
        &self,
        chain: &str,
        request: RequestPacket,
    ) -> Result<ResponsePacket, TransportError> {
        let started = Instant::now();
        let (answer, rest) = self.post(&request).await;
        let outcome = match &answer {
            Ok(_) => "ok".to_owned(),
            Err(RpcError::Transport(TransportErrorKind::HttpError(e))) => {
                format!("http_{}", e.status)
            }
            Err(_) => "unreachable".to_owned(),
        };
        metrics::counter!(names::RPC_CALLS, "chain" => chain.to_owned(), "endpoint" => self.label.clone(), "outcome" => outcome)
            .increment(1);
        metrics::histogram!(names::RPC_CALL_SECONDS, "chain" => chain.to_owned(), "endpoint" => self.label.clone())
            .record(started.elapsed().as_secs_f64());
        if answer.is_err() {
            self.rest(rest);
        }
        answer
    }

    /// One JSON-RPC POST, and how long to leave the endpoint alone if it failed: its
    /// `Retry-After` when it answered 429 with one, [`REST`] otherwise.
    async fn post(
        &self,
        request: &RequestPacket,
    ) -> (Result<ResponsePacket, TransportError>, Duration) {
        let sent = self
            .client
            .post(self.url.clone())
            .json(request)
            .send()
            .await;
        let answer = match sent {
            Ok(answer) => answer,
            Err(e) => return (Err(TransportErrorKind::custom(e)), REST),
        };
        let status = answer.status();
        let rest = retry_after(answer.headers())
            .filter(|_| status == reqwest::StatusCode::TOO_MANY_REQUESTS)
            .map_or(REST, |rest| rest.min(MAX_REST));
        let body = match answer.bytes().await {
            Ok(body) => body,
            Err(e) => return (Err(TransportErrorKind::custom(e)), REST),
        };
        if !status.is_success() {
            let body = String::from_utf8_lossy(&body).into_owned();
            return (
                Err(TransportErrorKind::http_error(status.as_u16(), body)),
                rest,
            );
        }
        let parsed = serde_json::from_slice(&body)
            .map_err(|e| TransportError::deser_err(e, String::from_utf8_lossy(&body)));
        (parsed, REST)
    }
}

/// A `Retry-After` header: a number of seconds or an HTTP date.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    match value.parse::<u64>() {
        Ok(seconds) => Some(Duration::from_secs(seconds)),
        Err(_) => httpdate::parse_http_date(value)
            .ok()?
            .duration_since(std::time::SystemTime::now())
            .ok(),
    }
}

impl Endpoints {
    /// The endpoints at `urls` of `chain`, each call bounded by `client`'s timeout.
    pub fn new(chain: &str, urls: &[url::Url], client: &reqwest::Client, max_lag: u64) -> Self {
        let endpoints = urls
            .iter()
            .map(|url| Endpoint {
                label: match url.port() {
                    Some(port) => format!("{}:{port}", url.host_str().unwrap_or("")),
                    None => url.host_str().unwrap_or("").to_owned(),
                },
                url: url.clone(),
                client: client.clone(),
                head: AtomicU64::new(0),
                resting_until: Mutex::new(None),
            })
            .collect();
        Self(Arc::new(Inner {
            chain: chain.to_owned(),
            endpoints,
            current: AtomicUsize::new(0),
            max_lag,
        }))
    }

    /// Whether any endpoint is usable now (none failed within the last rest).
    pub fn any_usable(&self) -> bool {
        self.0.endpoints.iter().any(Endpoint::usable)
    }

    pub fn chain(&self) -> &str {
        &self.0.chain
    }

    /// Whether the chain's endpoints back the follower's reading: every usable endpoint that has
    /// the height of `read` (the last block the follower read, by number and hash) names that
    /// block there, and at least one does; and every usable endpoint that has block `done` names
    /// the same block there. `Err` says which named what. A node briefly serving a block the
    /// others reorganized away fails this while any other that has the height is up.
    pub async fn agree_on(&self, read: (u64, &str), done: u64) -> Result<(), String> {
        let at_read = self.named_at(read.0).await;
        if at_read.is_empty() {
            return Err(format!("no endpoint answered for block {}", read.0));
        }
        if at_read.iter().any(|(_, hash)| hash != read.1) {
            return Err(describe(read.0, &at_read));
        }
        if done < read.0 {
            let at_done = self.named_at(done).await;
            if at_done.iter().any(|(_, hash)| *hash != at_done[0].1) {
                return Err(describe(done, &at_done));
            }
        }
        Ok(())
    }

    /// The hash each usable endpoint that has block `number` names there (those that answer).
    async fn named_at(&self, number: u64) -> Vec<(&str, String)> {
        let request = alloy::rpc::json_rpc::Request::new(
            "eth_getBlockByNumber",
            alloy::rpc::json_rpc::Id::Number(0),
            (format!("{number:#x}"), false),
        );
        let Ok(request) = request.serialize() else {
            return Vec::new();
        };
        let packet = RequestPacket::Single(request);
        let asked: Vec<&Endpoint> = self
            .0
            .endpoints
            .iter()
            .filter(|e| e.usable() && e.head.load(Ordering::Relaxed) >= number)
            .collect();
        let answers = join_all(asked.iter().map(|e| e.send(&self.0.chain, packet.clone()))).await;
        asked
            .iter()
            .zip(answers)
            .filter_map(|(e, answer)| Some((e.label.as_str(), block_hash(&answer.ok()?)?)))
            .collect()
    }
}

/// "block N: host a: 0x…, host b: 0x…".
fn describe(number: u64, named: &[(&str, String)]) -> String {
    let named: Vec<String> = named
        .iter()
        .map(|(label, hash)| format!("{label}: {hash}"))
        .collect();
    format!("block {number}: {}", named.join(", "))
}

impl Inner {
    /// The endpoints in the order a call tries them: the current one first, then the others,
    /// those left alone last.
    fn order(&self) -> Vec<usize> {
        let n = self.endpoints.len();
        let current = self.current.load(Ordering::Relaxed) % n;
        let mut order: Vec<usize> = (0..n).map(|i| (current + i) % n).collect();
        order.sort_by_key(|&i| !self.endpoints[i].usable());
        order
    }

    async fn send(
        self: Arc<Self>,
        request: RequestPacket,
    ) -> Result<ResponsePacket, TransportError> {
        let method = match &request {
            RequestPacket::Single(single) => single.method().to_owned(),
            RequestPacket::Batch(_) => String::new(),
        };
        match method.as_str() {
            "eth_blockNumber" => self.heads(request).await,
            "eth_sendRawTransaction" => self.broadcast(request).await,
            "eth_getLogs" => {
                let to = logs_range_end(&request);
                self.first_of(request, |e| {
                    to.is_none_or(|to| e.head.load(Ordering::Relaxed) >= to)
                })
                .await
            }
            _ => self.first_of(request, |_| true).await,
        }
    }

    /// Tries the endpoints `fits` allows in order until one answers.
    async fn first_of(
        &self,
        request: RequestPacket,
        fits: impl Fn(&Endpoint) -> bool,
    ) -> Result<ResponsePacket, TransportError> {
        let mut last = None;
        for i in self.order() {
            let endpoint = &self.endpoints[i];
            if !fits(endpoint) {
                continue;
            }
            match endpoint.send(&self.chain, request.clone()).await {
                Ok(answer) => {
                    self.current.store(i, Ordering::Relaxed);
                    return Ok(answer);
                }
                Err(e) => {
                    tracing::warn!(chain = %self.chain, endpoint = %endpoint.label, error = %e, "an RPC endpoint failed; trying the next");
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| {
            TransportErrorKind::custom_str("no endpoint of the chain has the blocks asked for yet")
        }))
    }

    /// Every usable endpoint's head at once: each is kept, the current endpoint moves to the
    /// highest when it lags by more than `max_lag`, and the current one's answer is returned.
    async fn heads(&self, request: RequestPacket) -> Result<ResponsePacket, TransportError> {
        // Not the resting ones (unless all are): a stalled endpoint would hold every round for
        // its timeout.
        let usable: Vec<usize> = self
            .order()
            .into_iter()
            .filter(|&i| self.endpoints[i].usable())
            .collect();
        let asked = if usable.is_empty() {
            self.order()
        } else {
            usable
        };
        let answers = join_all(
            asked
                .iter()
                .map(|&i| self.endpoints[i].send(&self.chain, request.clone())),
        )
        .await;
        let mut best: Option<(usize, u64)> = None;
        let mut last_error = None;
        let mut answered = Vec::new();
        for (&i, answer) in asked.iter().zip(answers) {
            match answer {
                Ok(packet) => {
                    if let Some(head) = block_number(&packet) {
                        self.endpoints[i].head.store(head, Ordering::Relaxed);
                        if best.is_none_or(|(_, h)| head > h) {
                            best = Some((i, head));
                        }
                    }
                    answered.push((i, packet));
                }
                Err(e) => last_error = Some(e),
            }
        }
        let Some((highest, max_head)) = best else {
            return Err(last_error.unwrap_or_else(|| {
                TransportErrorKind::custom_str("no endpoint of the chain answered")
            }));
        };
        for endpoint in &self.endpoints {
            let lag = max_head.saturating_sub(endpoint.head.load(Ordering::Relaxed));
            metrics::gauge!(names::RPC_HEAD_LAG, "chain" => self.chain.clone(), "endpoint" => endpoint.label.clone())
                .set(lag as f64);
        }
        let current = self.current.load(Ordering::Relaxed);
        let current_head = answered
            .iter()
            .find(|(i, _)| *i == current)
            .and_then(|(_, p)| block_number(p));
        let chosen = match current_head {
            Some(head) if max_head - head <= self.max_lag => current,
            _ => {
                tracing::info!(chain = %self.chain, from = %self.endpoints[current].label, to = %self.endpoints[highest].label, "reads move to another RPC endpoint");
                self.current.store(highest, Ordering::Relaxed);
                highest
            }
        };
        Ok(answered
            .into_iter()
            .find(|(i, _)| *i == chosen)
            .map(|(_, p)| p)
            .expect("the chosen endpoint answered"))
    }

    /// A transaction to every usable endpoint at once; the first success is the answer.
    async fn broadcast(&self, request: RequestPacket) -> Result<ResponsePacket, TransportError> {
        let usable: Vec<&Endpoint> = self.endpoints.iter().filter(|e| e.usable()).collect();
        let to: Vec<&Endpoint> = if usable.is_empty() {
            self.endpoints.iter().collect()
        } else {
            usable
        };
        let answers = join_all(to.iter().map(|e| e.send(&self.chain, request.clone()))).await;
        let mut first_ok = None;
        let mut last_error = None;
        for answer in answers {
            match answer {
                // A node that already had it says so; another took it: that one is the answer.
                Ok(packet) if !packet.is_error() => return Ok(packet),
                Ok(packet) => {
                    first_ok.get_or_insert(packet);
                }
                Err(e) => last_error = Some(e),
            }
        }
        first_ok.ok_or_else(|| last_error.expect("at least one endpoint was asked"))
    }
}

/// The block number an `eth_blockNumber` answer holds.
fn block_number(packet: &ResponsePacket) -> Option<u64> {
    let ResponsePacket::Single(response) = packet else {
        return None;
    };
    let raw = response.payload.as_success()?;
    let hex: String = serde_json::from_str(raw.get()).ok()?;
    u64::from_str_radix(hex.trim_start_matches("0x"), 16).ok()
}

/// The hash of the block an `eth_getBlockByNumber` answer holds; `None` for no block.
fn block_hash(packet: &ResponsePacket) -> Option<String> {
    let ResponsePacket::Single(response) = packet else {
        return None;
    };
    let block: serde_json::Value =
        serde_json::from_str(response.payload.as_success()?.get()).ok()?;
    block["hash"].as_str().map(str::to_owned)
}

/// The last block of a range `eth_getLogs` (`toBlock` as a number); `None` for one by block
/// hash or by tag.
fn logs_range_end(request: &RequestPacket) -> Option<u64> {
    let RequestPacket::Single(single) = request else {
        return None;
    };
    let params: serde_json::Value = serde_json::from_str(single.params()?.get()).ok()?;
    let to = params[0]["toBlock"].as_str()?;
    u64::from_str_radix(to.strip_prefix("0x")?, 16).ok()
}

impl tower::Service<RequestPacket> for Endpoints {
    type Response = ResponsePacket;
    type Error = TransportError;
    type Future = TransportFut<'static>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: RequestPacket) -> Self::Future {
        Box::pin(self.0.clone().send(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> reqwest::header::HeaderMap {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(reqwest::header::RETRY_AFTER, value.parse().unwrap());
        headers
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        assert_eq!(retry_after(&headers("12")), Some(Duration::from_secs(12)));
        let in_a_minute = std::time::SystemTime::now() + Duration::from_secs(60);
        let rest = retry_after(&headers(&httpdate::fmt_http_date(in_a_minute))).unwrap();
        assert!(rest > Duration::from_secs(55) && rest <= Duration::from_secs(60));
        assert_eq!(
            retry_after(&headers("Wed, 21 Oct 2015 07:28:00 GMT")),
            None,
            "a date past is no rest"
        );
        assert_eq!(retry_after(&headers("soon")), None);
        assert_eq!(retry_after(&reqwest::header::HeaderMap::new()), None);
    }
}
