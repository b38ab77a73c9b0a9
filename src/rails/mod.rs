//! The rails every way to pay rides (`docs/design.md`, "Rails and ways to pay"): the served
//! chains and their nodes, the follower that reads them for the watches, the outbox and the
//! relayers that send what is queued, the wake-ups, and what is read of tokens. The rails know no
//! way to pay: a way to pay brings its submission kind and its watch (`crate::ways_to_pay`).
//! The chain is the source of truth; PostgreSQL holds our view of it (`docs/settlement.md`).
//!
//! - `evm`: EVM encodings without the database: token bindings, EIP-3009 typed data, deposit
//!   addresses' CREATE2, the devnet
//! - `rpc`: a provider per chain, with timeouts, and how its failures read
//! - `endpoints`: several JSON-RPC endpoints of one chain as one provider: failover, lag, a range
//!   of logs only from an endpoint that has it, transactions to all
//! - `finality`: when a block is done on a chain (a count, or the node's `safe`/`finalized` head)
//! - `follower`: the cursor, block ranges of logs, reorgs, halting, confirmations; a `Watch`
//!   says what to look for and what a confirmed log changes
//! - `tokens`: the tokens read from chains, kept in PostgreSQL
//! - `eip3009`: what every EIP-3009 authorization of ours shares, whichever way to pay signs it:
//!   its terms and document, the signer's proof, its submission, its nonce's logs
//! - `outbox`: the chain transactions to send, by kind, subject and dedupe key; awaiting one
//! - `relayer`: sends the outbox, a worker per key and chain, each key held by one replica, within
//!   its balance and the chain's fee cap
//! - `wakeup`: wakes a chain's relayers when a submission is queued, and whoever awaits one when
//!   it is sent or done, instead of at their next poll
//! - `inclusion`: wakes whoever waits for a transaction when a block includes it

pub mod eip3009;
pub mod endpoints;
pub mod evm;
pub mod finality;
pub mod follower;
pub mod inclusion;
pub mod outbox;
pub mod relayer;
pub mod rpc;
pub mod tokens;
pub mod wakeup;

use std::{collections::HashMap, sync::Arc};

use tokio::sync::Notify;

use self::{
    follower::{Follower, Watch},
    rpc::Node,
};
use crate::{
    config::{ChainEndpoint, SettlementSettings},
    db::Pool,
    workers::{Schedule, Workers},
};

/// The served chains and a node for each: what the routes, relayer and follower share.
#[derive(Clone)]
pub struct Chains {
    pub settings: Arc<SettlementSettings>,
    nodes: Arc<HashMap<String, (ChainEndpoint, Node)>>,
    /// Who awaits which submission in this replica.
    pub outcomes: outbox::Outcomes,
    /// Who awaits which transaction's block in this replica.
    pub inclusions: inclusion::Inclusions,
    /// Which relayer keys are low on funds, as this replica's relayers last read them.
    pub funds: relayer::Funds,
    /// The chains served through several endpoints, by name.
    endpoints: Arc<HashMap<String, endpoints::Endpoints>>,
}

impl Chains {
    pub fn new(settings: &SettlementSettings) -> Self {
        let mut several = HashMap::new();
        let mut nodes = HashMap::new();
        for chain in &settings.chains {
            let (node, endpoints) = rpc::connect_chain(chain, settings.max_lag_blocks);
            if let Some(endpoints) = endpoints {
                several.insert(chain.name.clone(), endpoints);
            }
            nodes.insert(chain.name.clone(), (chain.clone(), node));
        }
        Self {
            settings: Arc::new(settings.clone()),
            nodes: Arc::new(nodes),
            endpoints: Arc::new(several),
            outcomes: outbox::Outcomes::default(),
            inclusions: inclusion::Inclusions::default(),
            funds: relayer::Funds::default(),
        }
    }

    /// What is degraded on chain for `/readyz`: a chain none of whose endpoints answers, a
    /// relayer key low on funds.
    pub fn degraded(&self) -> Vec<String> {
        let mut degraded: Vec<String> = self
            .endpoints
            .values()
            .filter(|e| !e.any_usable())
            .map(|e| format!("{}: no RPC endpoint answers", e.chain()))
            .collect();
        degraded.extend(self.funds.low());
        degraded
    }

    /// The served chain an intent names, and its node.
    pub fn get(&self, name: &str) -> Option<&(ChainEndpoint, Node)> {
        self.nodes.get(name)
    }

    pub fn is_on(&self) -> bool {
        !self.nodes.is_empty()
    }

    /// The relayer's keys, none when none is set: parsed before the server binds, so a bad key
    /// stops the start instead of being reported after "listening".
    pub fn relayer_keys(&self) -> anyhow::Result<Vec<relayer::Key>> {
        self.settings
            .relayer_private_key
            .as_deref()
            .map_or(Ok(Vec::new()), relayer::Key::parse_list)
    }
}

/// What a chain worker's unit may take beyond its period before it is cut short.
const CHAIN_UNIT_MARGIN: std::time::Duration = std::time::Duration::from_secs(30);

/// Starts a follower with `watch` per served chain, a relayer per chain and key sending `kinds`,
/// and the worker that wakes relayers when work is queued and awaiting callers when it is done.
/// Every way to pay brings its kind and its watch (`docs/design.md`, "How to add a way to pay").
pub fn spawn<W: Watch + Clone>(
    workers: &mut Workers,
    pool: &Pool,
    database_url: &str,
    chains: &Chains,
    relayer_keys: Vec<relayer::Key>,
    kinds: outbox::Kinds,
    watch: W,
) {
    let settings = chains.settings.clone();
    // A unit talks to the node too, many calls in turn at worst (a relayer round of a full batch),
    // each bounded by its own timeout: cut short only well past what a slow node explains.
    let schedule = Schedule {
        deadline: settings.poll_interval + CHAIN_UNIT_MARGIN,
        ..Schedule::every(settings.poll_interval)
    };
    let mut wakes: HashMap<u64, Vec<Arc<Notify>>> = HashMap::new();
    for (endpoint, node) in chains.nodes.values() {
        let finality = settings.finality_of(endpoint);
        workers.spawn(format!("follower of {}", endpoint.name), schedule, {
            let (pool, endpoint, node) = (pool.clone(), endpoint.clone(), node.clone());
            let several = chains.endpoints.get(&endpoint.name).cloned();
            let watch = watch.clone();
            move || {
                Follower::new(
                    pool.clone(),
                    endpoint.clone(),
                    node.clone(),
                    finality,
                    watch.clone(),
                )
                .with_endpoints(several.clone())
            }
        });
        workers.spawn(format!("inclusions of {}", endpoint.name), schedule, {
            let (endpoint, node) = (endpoint.clone(), node.clone());
            let inclusions = chains.inclusions.clone();
            move || {
                inclusion::InclusionWorker::new(endpoint.clone(), node.clone(), inclusions.clone())
            }
        });
        for key in &relayer_keys {
            let (pool, endpoint, node) = (pool.clone(), endpoint.clone(), node.clone());
            let (key, kinds, settings) = (key.clone(), kinds.clone(), settings.clone());
            let funds = chains.funds.clone();
            let wake = Arc::new(Notify::new());
            wakes.entry(endpoint.id).or_default().push(wake.clone());
            workers.spawn_woken(
                format!("relayer {} of {}", key.address(), endpoint.name),
                schedule,
                wake,
                move || {
                    relayer::RelayerWorker::new(
                        pool.clone(),
                        endpoint.clone(),
                        node.clone(),
                        key.clone(),
                        kinds.clone(),
                        &settings,
                        funds.clone(),
                    )
                },
            );
        }
    }
    if chains.is_on() {
        let (database_url, wakes) = (database_url.to_owned(), Arc::new(wakes));
        let outcomes = chains.outcomes.clone();
        workers.spawn(
            "settlement wake-up",
            wakeup::WakeupWorker::schedule(),
            move || {
                wakeup::WakeupWorker::new(database_url.clone(), wakes.clone(), outcomes.clone())
            },
        );
    }
}
