//! Which block includes a transaction, for whoever in this replica waits for one (an x402 settle
//! answers once its transfer is in a block): a worker per chain reads each new block's
//! transaction hashes once and wakes the waiters whose hash it holds, so a thousand waiting
//! requests cost the node one call per block, not a thousand receipts per poll.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use alloy::{eips::BlockNumberOrTag, primitives::B256, providers::Provider};
use tokio::sync::Notify;

use crate::{
    config::ChainEndpoint,
    rails::rpc::Node,
    workers::{Failed, Next, Worker},
};

/// The transactions waited for in this replica: who to wake, and the block seen to include each.
#[derive(Clone, Default)]
pub struct Inclusions(Arc<Mutex<HashMap<B256, Watched>>>);

struct Watched {
    notify: Arc<Notify>,
    /// How many waiters of this replica wait for it (duplicate settles of one payment do).
    waiters: usize,
    /// The block that included it, as last seen; a reorg may have undone it since.
    block: Option<u64>,
}

impl Inclusions {
    /// Waits for `hash` with `notify` (once per waiter; [`Inclusions::forget`] it when done).
    pub fn watch(&self, hash: B256, notify: &Arc<Notify>) {
        let mut watched = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let entry = watched.entry(hash).or_insert_with(|| Watched {
            notify: notify.clone(),
            waiters: 0,
            block: None,
        });
        entry.notify = notify.clone();
        entry.waiters += 1;
    }

    /// The block seen to include `hash`, if one was.
    pub fn seen(&self, hash: B256) -> Option<u64> {
        let watched = self.0.lock().unwrap_or_else(|e| e.into_inner());
        watched.get(&hash).and_then(|entry| entry.block)
    }

    /// `hash` is not where it was seen (a reorg): it waits for a block again.
    pub fn unsee(&self, hash: B256) {
        let mut watched = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = watched.get_mut(&hash) {
            entry.block = None;
        }
    }

    /// One waiter of each of `hashes` is done.
    pub fn forget(&self, hashes: impl IntoIterator<Item = B256>) {
        let mut watched = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for hash in hashes {
            if let Some(entry) = watched.get_mut(&hash) {
                entry.waiters = entry.waiters.saturating_sub(1);
                if entry.waiters == 0 {
                    watched.remove(&hash);
                }
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
    }

    /// Block `number` includes `hashes`: their waiters wake.
    fn included(&self, number: u64, hashes: impl IntoIterator<Item = B256>) {
        let mut watched = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for hash in hashes {
            if let Some(entry) = watched.get_mut(&hash) {
                entry.block = Some(number);
                entry.notify.notify_waiters();
            }
        }
    }
}

/// Reads each new block of one chain, every `CHAIN_POLL_INTERVAL_MS`, while anyone waits.
pub struct InclusionWorker {
    chain: ChainEndpoint,
    node: Node,
    inclusions: Inclusions,
    /// The newest block read.
    read: Option<u64>,
}

/// Blocks read per round at most: a replica that fell far behind skips to the head rather than
/// reading history nobody waits for.
const MAX_BLOCKS: u64 = 32;

impl InclusionWorker {
    pub fn new(chain: ChainEndpoint, node: Node, inclusions: Inclusions) -> Self {
        Self {
            chain,
            node,
            inclusions,
            read: None,
        }
    }
}

impl Worker for InclusionWorker {
    async fn run_once(&mut self) -> Result<Next, Failed> {
        if self.inclusions.is_empty() {
            // Nobody waits: what is mined from now on is what matters.
            self.read = None;
            return Ok(Next::Wait);
        }
        let head = self
            .node
            .get_block_number()
            .await
            .map_err(|e| Failed::from(anyhow::anyhow!("{}: {e}", self.chain.name)))?;
        let first = match self.read {
            Some(read) => (read + 1).max(head.saturating_sub(MAX_BLOCKS - 1)),
            // The waiters' transactions were sent at most a few blocks ago.
            None => head.saturating_sub(2),
        };
        for number in first..=head {
            let block = self
                .node
                .get_block_by_number(BlockNumberOrTag::Number(number))
                .await
                .map_err(|e| Failed::from(anyhow::anyhow!("{}: {e}", self.chain.name)))?;
            if let Some(block) = block {
                self.inclusions
                    .included(number, block.transactions.hashes());
            }
            self.read = Some(number);
        }
        Ok(Next::Wait)
    }
}
