//! A JSON-RPC provider per chain. Every call has a timeout: a node that goes silent must not hold
//! a request, the relayer or the follower forever.

use std::time::Duration;

use super::endpoints::Endpoints;
use crate::config::ChainEndpoint;
use alloy::{
    network::Ethereum,
    providers::{Provider, RootProvider},
    rpc::client::RpcClient,
    transports::{
        TransportError,
        http::{Http, reqwest},
    },
};

/// How long one call to a node may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

pub type Node = RootProvider<Ethereum>;

/// A provider for the node at `url`. Nothing is sent until the first call.
pub fn connect(url: &url::Url) -> Node {
    let transport = Http::with_client(client(), url.clone());
    RootProvider::new(RpcClient::new(transport, false))
}

/// A provider for `chain`: its one endpoint, or all of them as one ([`Endpoints`]), which is
/// returned too (what `/readyz` asks whether any answers).
pub fn connect_chain(chain: &ChainEndpoint, max_lag: u64) -> (Node, Option<Endpoints>) {
    match chain.rpc_urls.as_slice() {
        [] | [_] => (connect(&chain.rpc_url), None),
        urls => {
            let endpoints = Endpoints::new(&chain.name, urls, &client(), max_lag);
            let node = RootProvider::new(RpcClient::new(endpoints.clone(), false));
            (node, Some(endpoints))
        }
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(CALL_TIMEOUT)
        .connect_timeout(CALL_TIMEOUT)
        .build()
        .expect("a TLS backend is compiled in")
}

/// Asks the node, by `eth_call` at the latest block, whether calling `to` with `calldata` would
/// succeed now: `Ok(None)` if so, `Ok(Some(reason))` with the revert if not.
pub async fn simulate(
    node: &Node,
    from: Option<alloy::primitives::Address>,
    to: alloy::primitives::Address,
    calldata: alloy::primitives::Bytes,
) -> Result<Option<String>, ChainError> {
    use alloy::{eips::BlockId, network::TransactionBuilder, rpc::types::TransactionRequest};
    let mut request = TransactionRequest::default()
        .with_to(to)
        .with_input(calldata);
    if let Some(from) = from {
        request = request.with_from(from);
    }
    match node.call(request).block(BlockId::latest()).await {
        Ok(_) => Ok(None),
        Err(e) => match ChainError::from(e) {
            ChainError::Reverted { reason } => Ok(Some(reason)),
            other => Err(other),
        },
    }
}

/// Why a call to a node failed, as far as we act on it.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    /// The node did not answer, or answered with something else than JSON-RPC.
    #[error("the chain's node is unreachable: {0}")]
    Unreachable(String),
    /// The node executed the call and the contract reverted (`reason` as the node words it).
    #[error("reverted: {reason}")]
    Reverted { reason: String },
    /// The node answered an error of its own (bad request, nonce too low, …).
    #[error("the node refused: {0}")]
    Refused(String),
}

impl From<TransportError> for ChainError {
    fn from(error: TransportError) -> Self {
        match error.as_error_resp() {
            // The revert data follows the message: a custom error (OpenZeppelin 5's
            // `ERC20InsufficientBalance`) is only its selector there.
            Some(payload) if payload.message.contains("revert") => Self::Reverted {
                reason: match &payload.data {
                    Some(data) => format!("{} (data {})", payload.message, data.get()),
                    None => payload.message.to_string(),
                },
            },
            Some(payload) => Self::Refused(payload.message.to_string()),
            None => Self::Unreachable(error.to_string()),
        }
    }
}

impl From<alloy::contract::Error> for ChainError {
    fn from(error: alloy::contract::Error) -> Self {
        match error {
            alloy::contract::Error::TransportError(e) => e.into(),
            other => Self::Reverted {
                reason: other.to_string(),
            },
        }
    }
}

/// Whether `error` is a node refusing an `eth_getLogs` for its range: too many blocks, too many
/// results or too large an answer, in the words of the large providers (Infura, Alchemy,
/// QuickNode, public and OP-stack nodes) or as HTTP 413. A narrower range is then served.
pub fn is_range_refusal(error: &TransportError) -> bool {
    /// Lower-cased pieces of their messages, e.g. "query returned more than 10000 results",
    /// "Log response size exceeded…", "block range is too wide", "exceed maximum block range:
    /// 50000", "eth_getLogs is limited to a 10,000 range", "block range too large".
    const WORDINGS: &[&str] = &[
        "returned more than",
        "response size exceeded",
        "range is too wide",
        "maximum block range",
        "is limited to a",
        "range too large",
        "range is too large",
        "too many results",
        "query timeout exceeded",
    ];
    match error {
        alloy::transports::RpcError::Transport(
            alloy::transports::TransportErrorKind::HttpError(http),
        ) => http.status == 413,
        _ => error.as_error_resp().is_some_and(|payload| {
            let message = payload.message.to_lowercase();
            WORDINGS.iter().any(|w| message.contains(w))
        }),
    }
}

/// The chain id the node serves.
pub async fn chain_id(node: &Node) -> Result<u64, ChainError> {
    Ok(node.get_chain_id().await?)
}
