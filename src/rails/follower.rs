//! The chain follower, one per served chain in every replica: it follows blocks from a cursor in
//! PostgreSQL, fetching the logs its [`Watch`] wants over block ranges, records what the watch
//! makes of them once (unique by chain, transaction, log index), rewinds over orphaned blocks,
//! halts when the chain was reset under it, and hands each observation back to the watch once its
//! block has `CHAIN_CONFIRMATIONS` (`docs/settlement.md`, "Follower and watches"). Replicas share
//! the work safely: the cursor only moves by compare-and-set, and an observation is applied once.
//!
//! It knows nothing of intents: what to look for and what a confirmed log changes is the watch's.

use std::{
    collections::{BTreeMap, BTreeSet},
    future::Future,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use alloy::{
    eips::BlockNumberOrTag,
    primitives::{Address, B256},
    providers::Provider,
    rpc::types::{Filter, Log},
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use sqlx::{Connection, PgConnection, types::Json};

use super::{
    endpoints::Endpoints,
    finality::{self, Finality},
    rpc::{ChainError, Node},
};
use crate::{
    config::ChainEndpoint,
    db::Pool,
    telemetry::metrics as names,
    workers::{Failed, Next, Worker},
};

/// Blocks followed per tick, in one `eth_getLogs` range, so one tick stays short after an outage
/// and within what public nodes serve per call; the rest waits a tick. A node that refuses a
/// range (too wide, too many results) gets half of it until it answers, the range it answered
/// for [`RANGE_HELD`], then twice that per range back up to this ([`Follower::tick`]).
const MAX_BLOCKS_PER_TICK: u64 = 500;
/// How long a range a node answered after refusing a wider one is kept before it grows again:
/// growing at once would cost a refusal per range against a provider's fixed cap.
const RANGE_HELD: Duration = Duration::from_secs(60);
/// Blocks kept below the confirmation depth to detect a reorg reaching that deep.
const KEPT_BELOW_CONFIRMED: i64 = 64;
/// Where a follower with no cursor starts: this many blocks below the head.
const START_BELOW_HEAD: u64 = 256;
/// Confirmed observations applied per transaction.
const APPLY_BATCH: i64 = 100;
/// The shares confirmed observations are applied in, at once when more than a batch waits.
const APPLIERS: i32 = 4;
/// The advisory-lock class of the appliers' shares (with the chain id mixed in).
const APPLY_LOCK_CLASS: i32 = 0x0b5e_7000;

/// Recipients per `eth_getLogs` topic list, within what nodes accept.
const RECIPIENTS_PER_QUERY: usize = 100;

/// The logs a watch wants now: emitted by one of `addresses`, with one of `events` as topic 0;
/// and whatever contract emits them, the logs of `sent_to`.
#[derive(Debug, Clone, Default)]
pub struct Interest {
    pub addresses: Vec<Address>,
    pub events: Vec<B256>,
    pub sent_to: Vec<SentTo>,
}

/// Logs of `event`, emitted by any contract, whose topic 2 is one of `recipients`: an ERC-20
/// `Transfer` to one of them, whatever the token.
#[derive(Debug, Clone)]
pub struct SentTo {
    pub event: B256,
    pub recipients: Vec<Address>,
}

impl Interest {
    /// The `eth_getLogs` filters (without a block range) that read what is wanted.
    fn filters(self) -> Vec<Filter> {
        let mut filters = Vec::new();
        if !self.addresses.is_empty() && !self.events.is_empty() {
            filters.push(
                Filter::new()
                    .address(self.addresses)
                    .event_signature(self.events),
            );
        }
        for sent in self.sent_to {
            for chunk in sent.recipients.chunks(RECIPIENTS_PER_QUERY) {
                let words: Vec<B256> = chunk.iter().map(|a| a.into_word()).collect();
                filters.push(Filter::new().event_signature(sent.event).topic2(words));
            }
        }
        filters
    }
}

/// The kinds of fact a watch records: an enum of its own, stored by name in
/// `chain_observations.kind`.
pub trait ObservationKind: Copy + Send + Sync + 'static {
    /// Every kind, so a stored name reads back.
    const ALL: &'static [Self];

    fn as_str(self) -> &'static str;

    fn parse(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|k| k.as_str() == name)
    }

    /// Every kind's stored name, for a query that looks for them.
    fn names() -> Vec<&'static str> {
        Self::ALL.iter().map(|k| k.as_str()).collect()
    }
}

/// What applying an observation did: an enum of each watch's, named in `settlements_total`.
pub trait Outcome: Send + 'static {
    fn label(&self) -> &'static str;
}

/// The outcome of one of two watches joined.
pub enum Either<A, B> {
    First(A),
    Second(B),
}

impl<A: Outcome, B: Outcome> Outcome for Either<A, B> {
    fn label(&self) -> &'static str {
        match self {
            Self::First(a) => a.label(),
            Self::Second(b) => b.label(),
        }
    }
}

/// A watch that applies nothing has no outcome.
impl Outcome for std::convert::Infallible {
    fn label(&self) -> &'static str {
        match *self {}
    }
}

/// What a watch makes of a log: a fact of `kind` about `subject`, with a payload only it reads.
#[derive(Debug, Clone)]
pub struct Observed {
    pub kind: &'static str,
    pub subject: String,
    pub payload: Value,
}

impl Observed {
    pub fn new(
        kind: impl ObservationKind,
        subject: String,
        payload: &impl Serialize,
    ) -> Result<Self, FollowError> {
        Ok(Self {
            kind: kind.as_str(),
            subject,
            payload: serde_json::to_value(payload)
                .map_err(|e| FollowError::Watch(format!("an unwritable payload: {e}")))?,
        })
    }
}

/// An observation as stored, handed back to its watch once its block is confirmed.
#[derive(Debug, Clone)]
pub struct Observation {
    pub transaction_hash: String,
    pub log_index: i32,
    pub block_number: i64,
    pub block_timestamp: i64,
    pub kind: String,
    pub subject: String,
    pub payload: Value,
}

impl Observation {
    /// Its kind and its payload, as the watch that made it wrote them.
    pub fn read<K: ObservationKind, P: DeserializeOwned>(&self) -> Result<(K, P), WatchError> {
        let kind = K::parse(&self.kind).ok_or_else(|| {
            WatchError::Unexpected(format!(
                "an observation of kind {} that this watch does not make",
                self.kind
            ))
        })?;
        let payload = P::deserialize(&self.payload).map_err(WatchError::unreadable)?;
        Ok((kind, payload))
    }
}

/// The newest confirmed block the follower knows of.
#[derive(Debug, Clone, Copy)]
pub struct ConfirmedBlock {
    pub number: i64,
    pub timestamp: i64,
}

/// What a chain is watched for. Each method runs in the follower's tick; all state that matters
/// is in PostgreSQL, so a tick cut short is done again. The provided methods are a watch that looks
/// for nothing: one that only follows the chain's time implements `confirmed` alone.
pub trait Watch: Send + Sync + 'static {
    /// What applying one of its observations did.
    type Outcome: Outcome;

    /// Whether observations of `kind` are this watch's to apply.
    fn applies(&self, kind: &str) -> bool {
        let _ = kind;
        false
    }

    /// The logs wanted on `chain` now (read each tick: the tokens in use change).
    fn interest(
        &self,
        conn: &mut PgConnection,
        chain: &ChainEndpoint,
    ) -> impl Future<Output = Result<Interest, sqlx::Error>> + Send {
        let _ = (conn, chain);
        async { Ok(Interest::default()) }
    }

    /// What a log matching the interest means, if anything.
    fn observe(
        &self,
        conn: &mut PgConnection,
        chain: &ChainEndpoint,
        node: &Node,
        log: &Log,
    ) -> impl Future<Output = Result<Option<Observed>, FollowError>> + Send {
        let _ = (conn, chain, node, log);
        async { Ok(None) }
    }

    /// What each of `logs` means, in their order: one [`Watch::observe`] per log unless the
    /// watch matches many logs with one query (a block of transfers against every deposit
    /// address, in one indexed lookup).
    fn observe_all(
        &self,
        conn: &mut PgConnection,
        chain: &ChainEndpoint,
        node: &Node,
        logs: &[Log],
    ) -> impl Future<Output = Result<Vec<Option<Observed>>, FollowError>> + Send {
        async move {
            let mut observed = Vec::with_capacity(logs.len());
            for log in logs {
                observed.push(self.observe(conn, chain, node, log).await?);
            }
            Ok(observed)
        }
    }

    /// The state change of a confirmed observation, in `tx` (which also marks it applied); the
    /// outcome names it in `settlements_total`.
    fn apply(
        &self,
        tx: &mut PgConnection,
        chain: &ChainEndpoint,
        observation: &Observation,
    ) -> impl Future<Output = Result<Self::Outcome, WatchError>> + Send {
        let _ = (tx, chain);
        async move { Err(WatchError::not_applied_here(observation)) }
    }

    /// Work that follows the confirmed chain's time (expiry), after the observations are applied.
    fn confirmed(
        &self,
        conn: &mut PgConnection,
        chain: &ChainEndpoint,
        block: ConfirmedBlock,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        let _ = (conn, chain, block);
        async { Ok(()) }
    }
}

/// Two watches as one, so one follower (one cursor per chain) serves both: their interests
/// joined, a log offered to the first and then the second, an observation applied by the watch
/// whose kind it is, and both told of each confirmed block.
impl<A: Watch, B: Watch> Watch for (A, B) {
    type Outcome = Either<A::Outcome, B::Outcome>;

    fn applies(&self, kind: &str) -> bool {
        self.0.applies(kind) || self.1.applies(kind)
    }

    async fn interest(
        &self,
        conn: &mut PgConnection,
        chain: &ChainEndpoint,
    ) -> Result<Interest, sqlx::Error> {
        let mut joined = self.0.interest(conn, chain).await?;
        let second = self.1.interest(conn, chain).await?;
        for address in second.addresses {
            if !joined.addresses.contains(&address) {
                joined.addresses.push(address);
            }
        }
        for event in second.events {
            if !joined.events.contains(&event) {
                joined.events.push(event);
            }
        }
        joined.sent_to.extend(second.sent_to);
        Ok(joined)
    }

    async fn observe(
        &self,
        conn: &mut PgConnection,
        chain: &ChainEndpoint,
        node: &Node,
        log: &Log,
    ) -> Result<Option<Observed>, FollowError> {
        match self.0.observe(conn, chain, node, log).await? {
            Some(observed) => Ok(Some(observed)),
            None => self.1.observe(conn, chain, node, log).await,
        }
    }

    async fn observe_all(
        &self,
        conn: &mut PgConnection,
        chain: &ChainEndpoint,
        node: &Node,
        logs: &[Log],
    ) -> Result<Vec<Option<Observed>>, FollowError> {
        let mut observed = self.0.observe_all(conn, chain, node, logs).await?;
        let left: Vec<usize> = (0..logs.len()).filter(|&i| observed[i].is_none()).collect();
        let rest: Vec<Log> = left.iter().map(|&i| logs[i].clone()).collect();
        let second = self.1.observe_all(conn, chain, node, &rest).await?;
        for (i, seen) in left.into_iter().zip(second) {
            observed[i] = seen;
        }
        Ok(observed)
    }

    async fn apply(
        &self,
        tx: &mut PgConnection,
        chain: &ChainEndpoint,
        observation: &Observation,
    ) -> Result<Self::Outcome, WatchError> {
        if self.0.applies(&observation.kind) {
            self.0
                .apply(tx, chain, observation)
                .await
                .map(Either::First)
        } else if self.1.applies(&observation.kind) {
            self.1
                .apply(tx, chain, observation)
                .await
                .map(Either::Second)
        } else {
            Err(WatchError::not_applied_here(observation))
        }
    }

    async fn confirmed(
        &self,
        conn: &mut PgConnection,
        chain: &ChainEndpoint,
        block: ConfirmedBlock,
    ) -> Result<(), sqlx::Error> {
        self.0.confirmed(conn, chain, block).await?;
        self.1.confirmed(conn, chain, block).await
    }
}

/// No watch: for a way to pay that records nothing on chain of its own (x402's payments are
/// intents' nonce uses, which the authorization's watch sees).
impl Watch for () {
    type Outcome = std::convert::Infallible;
}

/// The follower of one chain as a [`Worker`]: one tick per unit, every `CHAIN_POLL_INTERVAL_MS`.
pub struct Follower<W> {
    pool: Pool,
    chain: ChainEndpoint,
    node: Node,
    finality: Finality,
    watch: W,
    /// Blocks asked for in one `eth_getLogs` now: at most [`MAX_BLOCKS_PER_TICK`], less while
    /// the node refuses wider ranges.
    span: AtomicU64,
    /// When the node last refused a range.
    refused_at: std::sync::Mutex<Option<std::time::Instant>>,
    /// A chain's several endpoints, which must agree on a block before it is confirmed.
    endpoints: Option<Endpoints>,
    /// The cursor and done block they were last seen to agree on.
    agreed_on: std::sync::Mutex<Option<(Cursor, u64)>>,
}

impl<W: Watch> Follower<W> {
    pub fn new(pool: Pool, chain: ChainEndpoint, node: Node, finality: Finality, watch: W) -> Self {
        Self {
            pool,
            chain,
            node,
            finality,
            watch,
            span: AtomicU64::new(MAX_BLOCKS_PER_TICK),
            refused_at: std::sync::Mutex::new(None),
            endpoints: None,
            agreed_on: std::sync::Mutex::new(None),
        }
    }

    /// Confirms only blocks every endpoint of `endpoints` agrees on (a chain served by several).
    pub fn with_endpoints(mut self, endpoints: Option<Endpoints>) -> Self {
        self.endpoints = endpoints;
        self
    }
}

impl<W: Watch> Worker for Follower<W> {
    async fn run_once(&mut self) -> Result<Next, Failed> {
        match self.tick().await {
            // Behind the head after a range: the next one at once, so catching up runs at the
            // node's pace, not a range per poll interval.
            Ok(Behind(true)) => Ok(Next::Again),
            Ok(Behind(false)) => Ok(Next::Wait),
            Err(FollowError::Halted(why)) => {
                let label = self.chain.name.clone();
                metrics::gauge!(names::CHAIN_LISTENER_HALTED, "chain" => label.clone()).set(1.0);
                tracing::error!(chain = %label, "settlement stopped on this chain: {why}");
                // Stays stopped: confirmed history is never rewritten. Checked again each minute
                // so the log keeps saying why.
                Ok(Next::WaitFor(Duration::from_secs(60)))
            }
            Err(FollowError::Database(e)) => Err(e.into()),
            Err(e) => Err(Failed::new(e)),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    #[error(transparent)]
    Chain(#[from] ChainError),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error("{0}")]
    Halted(String),
    /// A watch met what it does not expect; the unit is done again later, the cursor kept.
    #[error("{0}")]
    Watch(String),
    /// The node refused an `eth_getLogs` for its range; a narrower one is asked next.
    #[error("the node refused the block range: {0}")]
    RangeRefused(ChainError),
}

/// Why a watch did not apply an observation. Either way nothing of the unit is committed, and the
/// follower tries again at its next tick.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    /// What it read is not what it expects: a payload it cannot read, a kind no watch here
    /// applies (a newer replica's, in a rolling deploy), a row that changed under its lock.
    #[error("{0}")]
    Unexpected(String),
}

impl WatchError {
    /// An observation made by a newer replica's watch this one lacks (a rolling deploy): not
    /// applied, and not marked applied, so the replica that knows its kind applies it.
    pub fn not_applied_here(observation: &Observation) -> Self {
        Self::Unexpected(format!(
            "an observation of kind {} that no watch here applies",
            observation.kind
        ))
    }

    /// A payload (or a value in it) that does not read as the watch wrote it.
    pub fn unreadable(what: impl std::fmt::Display) -> Self {
        Self::Unexpected(format!("an observation that does not read: {what}"))
    }
}

impl From<WatchError> for FollowError {
    fn from(e: WatchError) -> Self {
        match e {
            WatchError::Database(e) => Self::Database(e),
            WatchError::Unexpected(why) => Self::Watch(why),
        }
    }
}

impl From<alloy::transports::TransportError> for FollowError {
    fn from(e: alloy::transports::TransportError) -> Self {
        Self::Chain(e.into())
    }
}

/// Whether a round left the follower's cursor below the head it read.
struct Behind(bool);

#[derive(Debug, Clone, PartialEq, Eq)]
struct Cursor {
    number: i64,
    hash: String,
}

#[derive(Debug, Clone, Copy)]
struct Header {
    number: u64,
    hash: B256,
    parent_hash: B256,
    timestamp: u64,
}

impl<W: Watch> Follower<W> {
    /// One round: catch up with the chain (one range), apply what is confirmed, then the
    /// confirmed time's work.
    async fn tick(&self) -> Result<Behind, FollowError> {
        let mut conn = self.pool.acquire().await.map_err(FollowError::Database)?;
        let conn = &mut *conn;
        let label = self.chain.name.clone();
        let head = self.node.get_block_number().await?;
        metrics::gauge!(names::CHAIN_HEAD, "chain" => label.clone()).set(head as f64);
        let mut cursor = match load_cursor(conn, self.chain.id).await? {
            Some(cursor) => cursor,
            None => self.start(conn, head).await?,
        };
        cursor = self.rewind_if_reorged(conn, cursor).await?;
        let mut moved = false;
        while (cursor.number as u64) < head {
            let span = self.span.load(Ordering::Relaxed);
            let until = head.min(cursor.number as u64 + span);
            match self.follow(conn, &cursor, until).await {
                // None: a reorg or another replica moved on; the next tick starts from the
                // stored cursor.
                Ok(next) => {
                    if let Some(next) = next {
                        cursor = next;
                        moved = true;
                    }
                    if !self.refused_within(RANGE_HELD) {
                        self.set_span(span.saturating_mul(2).min(MAX_BLOCKS_PER_TICK));
                    }
                    break;
                }
                // Half the range, from the same cursor: no block is skipped, none read twice.
                Err(FollowError::RangeRefused(why)) if until > cursor.number as u64 + 1 => {
                    let narrower = ((until - cursor.number as u64) / 2).max(1);
                    metrics::counter!(names::CHAIN_LOGS_RANGE_REFUSALS, "chain" => label.clone())
                        .increment(1);
                    tracing::warn!(chain = %label, blocks = until - cursor.number as u64, narrower, "the node refused the eth_getLogs range; asking for less: {why}");
                    self.set_span(narrower);
                    *self.refused() = Some(std::time::Instant::now());
                }
                Err(e) => return Err(e),
            }
        }
        metrics::gauge!(names::CHAIN_LISTENER_LAG, "chain" => label)
            .set(head.saturating_sub(cursor.number as u64) as f64);
        // Not when the range did not extend the cursor: the next round is the period away.
        let behind = Behind(moved && (cursor.number as u64) < head);
        let done = finality::done_up_to(self.finality, &self.node, cursor.number as u64).await?;
        if let Some(done) = done
            && self.endpoints_agree_on(&cursor, done).await
        {
            if !matches!(self.finality, Finality::Confirmations(_)) {
                self.store_done_block(conn, done).await?;
            }
            let confirmed = done as i64;
            self.apply_confirmed(conn, confirmed).await?;
            if let Some(block) = newest_block_at_most(conn, self.chain.id, confirmed).await? {
                self.watch.confirmed(conn, &self.chain, block).await?;
            }
            sqlx::query!(
                "DELETE FROM chain_blocks WHERE chain_id = $1 AND number < $2",
                self.chain.id as i64,
                confirmed - KEPT_BELOW_CONFIRMED,
            )
            .execute(&mut *conn)
            .await?;
        }
        Ok(behind)
    }

    /// Stores the block the node names done, unless it is stored: its time is the confirmed
    /// time. It is at or below the cursor, on the chain the cursor is on (a done block is not
    /// reorged away, and the cursor was checked against the chain this tick).
    async fn store_done_block(
        &self,
        conn: &mut PgConnection,
        done: u64,
    ) -> Result<(), FollowError> {
        let stored = sqlx::query_scalar!(
            "SELECT EXISTS (SELECT 1 FROM chain_blocks WHERE chain_id = $1 AND number = $2)",
            self.chain.id as i64,
            done as i64,
        )
        .fetch_one(&mut *conn)
        .await?;
        if stored != Some(true)
            && let Some(block) = header(&self.node, done).await?
        {
            store_block(conn, self.chain.id, &block).await?;
        }
        Ok(())
    }

    /// Whether the chain's endpoints back what the follower read (always, with one endpoint):
    /// those that have the cursor's height name its block, and those that have `done` name one
    /// block there ([`Endpoints::agree_on`]). While they do not, nothing is confirmed: one serves
    /// a chain the others do not have, and which is right is known only when they agree again,
    /// or the odd one falls behind or stops answering (the next round then reads, and rewinds
    /// to, the others' chain).
    async fn endpoints_agree_on(&self, cursor: &Cursor, done: u64) -> bool {
        let Some(endpoints) = &self.endpoints else {
            return true;
        };
        let agreed = || {
            self.agreed_on
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        let reading = (cursor.clone(), done);
        if agreed().as_ref() == Some(&reading) {
            return true;
        }
        match endpoints
            .agree_on((cursor.number as u64, &cursor.hash), done)
            .await
        {
            Ok(()) => {
                *agreed() = Some(reading);
                true
            }
            Err(blocks) => {
                metrics::counter!(names::CHAIN_ENDPOINTS_DISAGREE, "chain" => self.chain.name.clone())
                    .increment(1);
                tracing::warn!(chain = %self.chain.name, block = cursor.number, hash = %cursor.hash, %blocks, "the chain's endpoints do not back the blocks the follower read; nothing is confirmed until they do");
                false
            }
        }
    }

    fn refused(&self) -> std::sync::MutexGuard<'_, Option<std::time::Instant>> {
        self.refused_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the node refused a range within the last `period`.
    fn refused_within(&self, period: Duration) -> bool {
        self.refused().is_some_and(|at| at.elapsed() < period)
    }

    fn set_span(&self, blocks: u64) {
        self.span.store(blocks, Ordering::Relaxed);
        metrics::gauge!(names::CHAIN_LOGS_RANGE, "chain" => self.chain.name.clone())
            .set(blocks as f64);
    }

    /// The first cursor: a little below the head, after checking the node serves the chain.
    async fn start(&self, conn: &mut PgConnection, head: u64) -> Result<Cursor, FollowError> {
        let served = self.node.get_chain_id().await?;
        if served != self.chain.id {
            return Err(FollowError::Halted(format!(
                "the node at {} serves chain {served}, not {}",
                self.chain.rpc_url, self.chain.name
            )));
        }
        let number = head.saturating_sub(START_BELOW_HEAD);
        let block = header(&self.node, number)
            .await?
            .ok_or_else(|| ChainError::Refused(format!("block {number} is missing")))?;
        sqlx::query!(
            "INSERT INTO chain_cursors (chain_id, block_number, block_hash) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            self.chain.id as i64,
            number as i64,
            block.hash.to_string(),
        )
        .execute(&mut *conn)
        .await?;
        store_block(conn, self.chain.id, &block).await?;
        load_cursor(conn, self.chain.id)
            .await?
            .ok_or_else(|| FollowError::Halted("the cursor vanished".to_owned()))
    }

    /// If the chain no longer has the cursor's block, steps back over the orphaned blocks,
    /// dropping what was observed in them, until the cursor is on the chain again.
    async fn rewind_if_reorged(
        &self,
        conn: &mut PgConnection,
        mut cursor: Cursor,
    ) -> Result<Cursor, FollowError> {
        loop {
            let on_chain = header(&self.node, cursor.number as u64).await?;
            if on_chain.is_some_and(|block| block.hash.to_string() == cursor.hash) {
                return Ok(cursor);
            }
            cursor = self.step_back(conn, &cursor).await?;
        }
    }

    /// Drops the cursor's block and its unconfirmed observations; the cursor moves to the stored
    /// block before it (every block with an observation is stored, so nothing observed is
    /// skipped). Only unconfirmed observations can be dropped: a reorg that would orphan an
    /// applied one halts the follower.
    async fn step_back(
        &self,
        conn: &mut PgConnection,
        cursor: &Cursor,
    ) -> Result<Cursor, FollowError> {
        let chain_id = self.chain.id as i64;
        let mut tx = conn.begin().await?;
        // Replicas step back together after a reorg: the cursor row is locked, and one that
        // another replica already moved is left to the next round, which starts from there.
        let current = sqlx::query!(
            "SELECT block_number, block_hash FROM chain_cursors WHERE chain_id = $1 FOR UPDATE",
            chain_id
        )
        .fetch_one(&mut *tx)
        .await?;
        if (current.block_number, current.block_hash.as_str())
            != (cursor.number, cursor.hash.as_str())
        {
            return Ok(Cursor {
                number: current.block_number,
                hash: current.block_hash,
            });
        }
        let parent = sqlx::query!(
            "SELECT number, hash FROM chain_blocks WHERE chain_id = $1 AND number < $2
              ORDER BY number DESC LIMIT 1",
            chain_id,
            cursor.number,
        )
        .fetch_optional(&mut *tx)
        .await?;
        let applied = match &parent {
            Some(parent) => {
                sqlx::query_scalar!(
                    r#"SELECT count(*) AS "n!" FROM chain_observations
                        WHERE chain_id = $1 AND block_number > $2 AND applied_at IS NOT NULL"#,
                    chain_id,
                    parent.number,
                )
                .fetch_one(&mut *tx)
                .await?
            }
            None => 0,
        };
        let parent = match parent {
            Some(parent) if applied == 0 => parent,
            _ => {
                let why = format!(
                    "block {} ({}) is no longer on the chain and the chain diverges below what was confirmed: the chain was reset under the listener. Confirmed history is never rewritten; point CHAINS at the chain this database followed, or reset settlement state deliberately",
                    cursor.number, cursor.hash
                );
                drop(tx);
                sqlx::query!(
                    "UPDATE chain_cursors SET halted = $2, updated_at = now() WHERE chain_id = $1",
                    chain_id,
                    why
                )
                .execute(&mut *conn)
                .await?;
                return Err(FollowError::Halted(why));
            }
        };
        let dropped = sqlx::query!(
            "DELETE FROM chain_observations WHERE chain_id = $1 AND block_number > $2 AND applied_at IS NULL",
            chain_id,
            parent.number,
        )
        .execute(&mut *tx)
        .await?
        .rows_affected();
        sqlx::query!(
            "DELETE FROM chain_blocks WHERE chain_id = $1 AND number > $2",
            chain_id,
            parent.number
        )
        .execute(&mut *tx)
        .await?;
        sqlx::query!(
            "UPDATE chain_cursors SET block_number = $2, block_hash = $3, updated_at = now()
              WHERE chain_id = $1 AND block_number = $4 AND block_hash = $5",
            chain_id,
            parent.number,
            parent.hash,
            cursor.number,
            cursor.hash,
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        metrics::counter!(names::CHAIN_REORGS, "chain" => self.chain.name.clone()).increment(1);
        tracing::warn!(chain = %self.chain.name, block = cursor.number, hash = %cursor.hash, dropped, "reorg: block orphaned");
        load_cursor(conn, self.chain.id)
            .await?
            .ok_or_else(|| FollowError::Halted("the cursor vanished".to_owned()))
    }

    /// Follows the blocks after `cursor` up to `until` with one `eth_getLogs` over the range:
    /// records what the watch observes and moves the cursor, in one transaction. `None` when the
    /// range does not extend the cursor (a reorg), the chain changed while it was read, or
    /// another replica moved the cursor first.
    ///
    /// The range is read between two reads of its last block: the same hash before and after
    /// means the chain up to it did not change in between, so the logs are that chain's.
    async fn follow(
        &self,
        conn: &mut PgConnection,
        cursor: &Cursor,
        until: u64,
    ) -> Result<Option<Cursor>, FollowError> {
        let from = cursor.number as u64 + 1;
        let Some(last) = header(&self.node, until).await? else {
            return Ok(None);
        };
        let first = if from == until {
            last
        } else {
            match header(&self.node, from).await? {
                Some(first) => first,
                None => return Ok(None),
            }
        };
        if first.parent_hash.to_string() != cursor.hash {
            return Ok(None);
        }
        let mut blocks = BTreeMap::from([(first.number, first), (last.number, last)]);
        // The block that becomes confirmed is stored too: its time is the confirmed time. (A
        // chain whose node names its done block has it stored when it is read, in `tick`.)
        let confirmed = match self.finality {
            Finality::Confirmations(n) => (until + 1).saturating_sub(n),
            Finality::Safe | Finality::Finalized => 0,
        };
        if from < confirmed && confirmed < until {
            match header(&self.node, confirmed).await? {
                Some(block) => blocks.insert(confirmed, block),
                None => return Ok(None),
            };
        }
        let filters = self.watch.interest(conn, &self.chain).await?.filters();
        // Keyed by block and log index: chain order, and a log two filters match is read once.
        let mut logs: BTreeMap<(u64, u64), Log> = BTreeMap::new();
        for filter in filters {
            // The range says which blocks hold logs the watch wants; each of those blocks' logs
            // is then read by the block's hash, which a node answers for exactly that block (just
            // after a reorg, a range's answer can still carry an orphaned block's logs).
            let numbers: BTreeSet<u64> = if from == until {
                BTreeSet::from([until])
            } else {
                self.node
                    .get_logs(&filter.clone().from_block(from).to_block(until))
                    .await
                    .map_err(|e| match super::rpc::is_range_refusal(&e) {
                        true => FollowError::RangeRefused(e.into()),
                        false => e.into(),
                    })?
                    .iter()
                    .filter_map(|log| log.block_number)
                    .filter(|number| (from..=until).contains(number))
                    .collect()
            };
            for number in numbers {
                let block = match blocks.get(&number) {
                    Some(block) => *block,
                    None => match header(&self.node, number).await? {
                        Some(block) => *blocks.entry(number).or_insert(block),
                        None => return Ok(None),
                    },
                };
                let in_block = self
                    .node
                    .get_logs(&filter.clone().at_block_hash(block.hash))
                    .await?;
                for log in in_block {
                    if let Some(index) = log.log_index {
                        logs.insert((number, index), log);
                    }
                }
            }
        }
        if from < until && header(&self.node, until).await?.map(|h| h.hash) != Some(last.hash) {
            return Ok(None);
        }
        let (numbers, logs): (Vec<u64>, Vec<Log>) = logs
            .into_iter()
            .filter(|(_, log)| log.transaction_hash.is_some() && !log.removed)
            .map(|((number, _), log)| (number, log))
            .unzip();
        let seen = self
            .watch
            .observe_all(conn, &self.chain, &self.node, &logs)
            .await?;
        let mut observations = Vec::new();
        for ((number, log), observed) in numbers.into_iter().zip(logs).zip(seen) {
            let (Some(tx_hash), Some(log_index), Some(observed)) =
                (log.transaction_hash, log.log_index, observed)
            else {
                continue;
            };
            // The block is stored with its observation (a reorg rewinds to it), and its time is
            // the observation's.
            let block = blocks[&number];
            observations.push(Observation {
                transaction_hash: tx_hash.to_string(),
                log_index: log_index as i32,
                block_number: number as i64,
                block_timestamp: block.timestamp as i64,
                kind: observed.kind.to_owned(),
                subject: observed.subject,
                payload: observed.payload,
            });
        }
        let chain_id = self.chain.id as i64;
        let hash = last.hash.to_string();
        let mut tx = conn.begin().await?;
        let moved = sqlx::query!(
            "UPDATE chain_cursors SET block_number = $2, block_hash = $3, updated_at = now()
              WHERE chain_id = $1 AND block_number = $4 AND block_hash = $5 AND halted IS NULL",
            chain_id,
            until as i64,
            hash,
            cursor.number,
            cursor.hash,
        )
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if moved == 0 {
            return Ok(None);
        }
        for block in blocks.values() {
            store_block(&mut tx, self.chain.id, block).await?;
        }
        // One statement for all of them: a block may hold a thousand deposits.
        let column = |f: fn(&Observation) -> String| observations.iter().map(f).collect::<Vec<_>>();
        sqlx::query!(
            r#"
            INSERT INTO chain_observations
                (chain_id, transaction_hash, log_index, block_number, block_hash, block_timestamp,
                 kind, subject, payload)
            SELECT $1, o.transaction_hash, o.log_index, o.block_number, o.block_hash, o.block_timestamp,
                   o.kind, o.subject, o.payload::jsonb
              FROM unnest($2::text[], $3::int[], $4::bigint[], $5::text[], $6::bigint[], $7::text[],
                          $8::text[], $9::text[])
                   AS o (transaction_hash, log_index, block_number, block_hash, block_timestamp, kind,
                         subject, payload)
            ON CONFLICT DO NOTHING
            "#,
            chain_id,
            &column(|o| o.transaction_hash.clone()),
            &observations.iter().map(|o| o.log_index).collect::<Vec<_>>(),
            &observations.iter().map(|o| o.block_number).collect::<Vec<_>>(),
            &observations
                .iter()
                .map(|o| blocks[&(o.block_number as u64)].hash.to_string())
                .collect::<Vec<_>>(),
            &observations.iter().map(|o| o.block_timestamp).collect::<Vec<_>>(),
            &column(|o| o.kind.clone()),
            &column(|o| o.subject.clone()),
            &column(|o| o.payload.to_string()),
        )
        .execute(&mut *tx)
        .await?;
        for o in &observations {
            tracing::info!(chain = %self.chain.name, kind = %o.kind, subject = %o.subject, tx = %o.transaction_hash, block = o.block_number, "observed on chain");
        }
        tx.commit().await?;
        Ok(Some(Cursor {
            number: until as i64,
            hash,
        }))
    }

    /// Hands every observation whose block is now confirmed to the watch, up to [`APPLY_BATCH`]
    /// in a transaction with the mark that they were applied (a block of a thousand deposits is
    /// ten commits, not a thousand). The observations are split in [`APPLIERS`] shares by the
    /// intent they concern, and each share is applied by one applier at a time across replicas
    /// (an advisory lock), oldest first: an intent's observations keep their chain order (a
    /// deposit before its expiry, then one after), and two appliers never wait on one intent.
    /// More than a batch waiting is applied by the shares at once, on connections of their own
    /// when the pool has them free.
    async fn apply_confirmed(
        &self,
        conn: &mut PgConnection,
        confirmed: i64,
    ) -> Result<(), FollowError> {
        let pending = sqlx::query_scalar!(
            r#"SELECT count(*) AS "pending!" FROM chain_observations
                WHERE chain_id = $1 AND applied_at IS NULL AND block_number <= $2"#,
            self.chain.id as i64,
            confirmed,
        )
        .fetch_one(&mut *conn)
        .await?;
        if pending == 0 {
            return Ok(());
        }
        let mut own = Vec::new();
        if pending > APPLY_BATCH {
            for _ in 1..APPLIERS {
                match self.pool.acquire_if_free().await {
                    Some(connection) => own.push(connection),
                    None => break,
                }
            }
        }
        // Share i goes to connection i modulo the connections there are, in order.
        let lanes = own.len() + 1;
        let lane =
            |index: usize| (0..APPLIERS).filter(move |share| *share as usize % lanes == index);
        let others = own
            .into_iter()
            .enumerate()
            .map(|(i, mut connection)| async move {
                for share in lane(i + 1) {
                    self.apply_share(&mut connection, confirmed, share).await?;
                }
                Ok::<_, FollowError>(())
            });
        let first = async {
            for share in lane(0) {
                self.apply_share(conn, confirmed, share).await?;
            }
            Ok::<_, FollowError>(())
        };
        let (first, rest) = tokio::join!(first, futures::future::try_join_all(others));
        first.and(rest.map(drop))
    }

    /// [`Follower::apply_confirmed`] for the intents whose hash is `share` modulo [`APPLIERS`];
    /// nothing if another applier holds the share.
    async fn apply_share(
        &self,
        conn: &mut PgConnection,
        confirmed: i64,
        share: i32,
    ) -> Result<(), FollowError> {
        loop {
            let mut tx = conn.begin().await?;
            let held = sqlx::query_scalar!(
                r#"SELECT pg_try_advisory_xact_lock($1, $2) AS "held!""#,
                APPLY_LOCK_CLASS ^ self.chain.id as i32,
                share,
            )
            .fetch_one(&mut *tx)
            .await?;
            if !held {
                return Ok(());
            }
            let batch = sqlx::query!(
                r#"SELECT transaction_hash, log_index, block_number, block_timestamp, kind, subject,
                          payload AS "payload: Json<Value>"
                     FROM chain_observations
                    WHERE chain_id = $1 AND applied_at IS NULL AND block_number <= $2
                      AND (hashtext(COALESCE(payload->>'intent_id', subject)) & 2147483647) % $5 = $4
                    ORDER BY block_number, log_index
                    LIMIT $3
                      FOR UPDATE SKIP LOCKED"#,
                self.chain.id as i64,
                confirmed,
                APPLY_BATCH,
                share,
                APPLIERS,
            )
            .fetch_all(&mut *tx)
            .await?;
            if batch.is_empty() {
                return Ok(());
            }
            let mut outcomes = Vec::with_capacity(batch.len());
            let (mut hashes, mut indexes) = (Vec::new(), Vec::new());
            for row in batch {
                let observation = Observation {
                    transaction_hash: row.transaction_hash,
                    log_index: row.log_index,
                    block_number: row.block_number,
                    block_timestamp: row.block_timestamp,
                    kind: row.kind,
                    subject: row.subject,
                    payload: row.payload.0,
                };
                outcomes.push(self.watch.apply(&mut tx, &self.chain, &observation).await?);
                hashes.push(observation.transaction_hash);
                indexes.push(observation.log_index);
            }
            sqlx::query!(
                "UPDATE chain_observations o SET applied_at = now()
                   FROM unnest($2::text[], $3::int[]) AS a (transaction_hash, log_index)
                  WHERE o.chain_id = $1 AND o.transaction_hash = a.transaction_hash
                    AND o.log_index = a.log_index",
                self.chain.id as i64,
                &hashes,
                &indexes,
            )
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            for outcome in outcomes {
                metrics::counter!(names::SETTLEMENTS, "chain" => self.chain.name.clone(), "outcome" => outcome.label())
                    .increment(1);
            }
        }
    }
}

/// The newest block the follower of chain `chain_id` has read, if it has started: what a block's
/// confirmations are counted against.
pub async fn followed_up_to(
    conn: &mut PgConnection,
    chain_id: u64,
) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT block_number FROM chain_cursors WHERE chain_id = $1",
        chain_id as i64
    )
    .fetch_optional(conn)
    .await
}

async fn load_cursor(
    conn: &mut PgConnection,
    chain_id: u64,
) -> Result<Option<Cursor>, FollowError> {
    let row = sqlx::query!(
        "SELECT block_number, block_hash, halted FROM chain_cursors WHERE chain_id = $1",
        chain_id as i64
    )
    .fetch_optional(conn)
    .await?;
    match row {
        Some(row) if row.halted.is_some() => {
            Err(FollowError::Halted(row.halted.unwrap_or_default()))
        }
        Some(row) => Ok(Some(Cursor {
            number: row.block_number,
            hash: row.block_hash,
        })),
        None => Ok(None),
    }
}

async fn header(node: &Node, number: u64) -> Result<Option<Header>, ChainError> {
    let block = node
        .get_block_by_number(BlockNumberOrTag::Number(number))
        .await?;
    Ok(block.map(|block| Header {
        number,
        hash: block.header.hash,
        parent_hash: block.header.parent_hash,
        timestamp: block.header.timestamp,
    }))
}

async fn store_block(
    conn: &mut PgConnection,
    chain_id: u64,
    block: &Header,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO chain_blocks (chain_id, number, hash, parent_hash, timestamp) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (chain_id, number) DO UPDATE SET hash = $3, parent_hash = $4, timestamp = $5",
        chain_id as i64,
        block.number as i64,
        block.hash.to_string(),
        block.parent_hash.to_string(),
        block.timestamp as i64,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The newest stored block at or below `number`: of a range only its ends, the block it
/// confirms and the blocks with observations are stored, so confirmed time may lag, never lead.
async fn newest_block_at_most(
    conn: &mut PgConnection,
    chain_id: u64,
    number: i64,
) -> Result<Option<ConfirmedBlock>, sqlx::Error> {
    let row = sqlx::query!(
        "SELECT number, timestamp FROM chain_blocks WHERE chain_id = $1 AND number <= $2
          ORDER BY number DESC LIMIT 1",
        chain_id as i64,
        number,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|row| ConfirmedBlock {
        number: row.number,
        timestamp: row.timestamp,
    }))
}
