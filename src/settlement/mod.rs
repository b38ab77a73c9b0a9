//! Intents paid on chain (`docs/settlement.md`): the authorization a payer signs and its confirm,
//! the relayer that submits it, and the watch that the chain follower (`chain::follower`) runs
//! for intents, which settles them once their payment is confirmed. The chain is the source of truth; PostgreSQL holds our view of it.
//!
//! - `tokens`: the tokens read from chains, kept in PostgreSQL
//! - `payments`: the rules of paying an intent (what may be paid, the document, confirm)
//! - `routes`: `GET …/authorization`, `POST …/confirm`, over `payments`
//! - `relayer`: submits queued authorizations, one relayer per key across replicas
//! - `watch`: what the follower looks for (nonce uses), settlement and expiry by chain time
//! - `wakeup`: wakes a chain's relayer when a confirm commits, instead of at its next poll

pub mod payments;
pub mod relayer;
pub mod routes;
pub mod tokens;
pub mod wakeup;
pub mod watch;

use std::{collections::HashMap, sync::Arc};

use tokio::sync::Notify;

use crate::{
    chain::{
        follower::Follower,
        rpc::{self, Node},
    },
    config::{ChainEndpoint, SettlementSettings},
    db::Pool,
    workers::{Schedule, Workers},
};

/// The served chains and a node for each: what the routes, relayer and follower share.
#[derive(Clone)]
pub struct Chains {
    pub settings: Arc<SettlementSettings>,
    nodes: Arc<HashMap<String, (ChainEndpoint, Node)>>,
}

impl Chains {
    pub fn new(settings: &SettlementSettings) -> Self {
        let nodes = settings
            .chains
            .iter()
            .map(|chain| {
                (
                    chain.name.clone(),
                    (chain.clone(), rpc::connect(&chain.rpc_url)),
                )
            })
            .collect();
        Self {
            settings: Arc::new(settings.clone()),
            nodes: Arc::new(nodes),
        }
    }

    /// The served chain an intent names, and its node.
    pub fn get(&self, name: &str) -> Option<&(ChainEndpoint, Node)> {
        self.nodes.get(name)
    }

    pub fn is_on(&self) -> bool {
        !self.nodes.is_empty()
    }

    /// The relayer's key, if one is set: parsed before the server binds, so a bad key stops the
    /// start instead of being reported after "listening".
    pub fn relayer_key(&self) -> anyhow::Result<Option<relayer::Key>> {
        self.settings
            .relayer_private_key
            .as_deref()
            .map(relayer::Key::parse)
            .transpose()
    }
}

/// Starts a follower with the payment watch per served chain, and when a relayer key is set a relayer per chain and the
/// worker that wakes them when a confirm commits.
pub fn spawn(
    workers: &mut Workers,
    pool: &Pool,
    database_url: &str,
    chains: &Chains,
    relayer_key: Option<relayer::Key>,
) {
    let settings = chains.settings.clone();
    let schedule = Schedule::every(settings.poll_interval);
    let mut wakes = HashMap::new();
    for (endpoint, node) in chains.nodes.values() {
        let (pool, endpoint, node) = (pool.clone(), endpoint.clone(), node.clone());
        let confirmations = settings.confirmations;
        workers.spawn(format!("follower of {}", endpoint.name), schedule, {
            let (pool, endpoint, node) = (pool.clone(), endpoint.clone(), node.clone());
            move || {
                Follower::new(
                    pool.clone(),
                    endpoint.clone(),
                    node.clone(),
                    confirmations,
                    watch::PaymentWatch,
                )
            }
        });
        if let Some(key) = &relayer_key {
            let (key, settings) = (key.clone(), settings.clone());
            let wake = Arc::new(Notify::new());
            wakes.insert(endpoint.id, wake.clone());
            workers.spawn_woken(
                format!("relayer of {}", endpoint.name),
                schedule,
                wake,
                move || {
                    relayer::RelayerWorker::new(
                        pool.clone(),
                        endpoint.clone(),
                        node.clone(),
                        key.clone(),
                        &settings,
                    )
                },
            );
        }
    }
    if !wakes.is_empty() {
        let (database_url, wakes) = (database_url.to_owned(), Arc::new(wakes));
        workers.spawn(
            "relayer wake-up",
            wakeup::WakeupWorker::schedule(),
            move || wakeup::WakeupWorker::new(database_url.clone(), wakes.clone()),
        );
    }
}
