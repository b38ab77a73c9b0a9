//! The relayer: sends the outbox (`outbox`) from the keys in `RELAYER_PRIVATE_KEY`, one worker
//! per key and chain, each key held by one replica at a time (a lease in PostgreSQL) with its own
//! account-nonce sequence, so one key's stuck transaction never holds another's work. A key claims
//! queued submissions before sending them; a sent one stays with its key. Fees are EIP-1559 from
//! the node, and a transaction left unmined for `RELAYER_REPLACE_AFTER_BLOCKS` is replaced with
//! higher fees. All its state is in PostgreSQL: a crash between broadcast and record leads to a
//! second submission, which the call's own replay protection (an authorization's nonce) makes
//! harmless (`docs/settlement.md`, "Relayer").

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use alloy::{
    consensus::TxEnvelope,
    eips::{BlockId, eip1559::Eip1559Estimation, eip2718::Encodable2718},
    network::{EthereumWallet, NetworkTransactionBuilder, TransactionBuilder},
    primitives::{Address, B256, Bytes, U256, utils::format_ether},
    providers::Provider,
    rpc::types::TransactionRequest,
    signers::local::PrivateKeySigner,
};
use futures::StreamExt;
use sqlx::PgConnection;

use super::outbox::{self, Hold, Kinds, Revert, State, Wanted};
use crate::{
    config::{ChainEndpoint, SettlementSettings},
    db::Pool,
    rails::rpc::{ChainError, Node},
    telemetry::metrics as names,
    workers::{Failed, Next, Worker},
};

/// The relayer's key. Its `Debug` never shows the secret.
#[derive(Clone)]
pub struct Key(PrivateKeySigner);

impl Key {
    pub fn parse(raw: &str) -> anyhow::Result<Self> {
        raw.trim()
            .parse::<PrivateKeySigner>()
            .map(Self)
            .map_err(|_| {
                anyhow::anyhow!(
                    "RELAYER_PRIVATE_KEY must be 0x followed by 64 hex digits (several keys separated by commas)"
                )
            })
    }

    /// One key or several, separated by commas; each may appear once.
    pub fn parse_list(raw: &str) -> anyhow::Result<Vec<Self>> {
        let keys = raw
            .split(',')
            .filter(|k| !k.trim().is_empty())
            .map(Self::parse)
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut addresses: Vec<Address> = keys.iter().map(Key::address).collect();
        addresses.sort();
        addresses.dedup();
        if addresses.len() != keys.len() {
            anyhow::bail!("RELAYER_PRIVATE_KEY names the same key twice");
        }
        Ok(keys)
    }

    pub fn address(&self) -> Address {
        self.0.address()
    }
}

/// A replacement offers this much of the replaced transaction's fees, when it can.
const BUMP_PERCENT: u128 = 125;
/// Nodes take a replacement only above this much of the replaced transaction's fees.
const MIN_BUMP_PERCENT: u128 = 110;
/// The gas of a typical send (an authorization's transfer), to count what a balance pays for.
const TYPICAL_SEND_GAS: u128 = 100_000;
/// How often a relayer with nothing to send reads its balance, for the metric and `/readyz`.
const BALANCE_EVERY: Duration = Duration::from_secs(60);

/// The relayer keys that are low on their chain's native coin (`RELAYER_LOW_BALANCE_SENDS`), as
/// this replica last read them: what `/readyz` says.
#[derive(Clone, Default)]
pub struct Funds(Arc<Mutex<BTreeMap<(String, Address), String>>>);

impl Funds {
    /// A line per low key.
    pub fn low(&self) -> Vec<String> {
        self.lock().values().cloned().collect()
    }

    /// Records whether `relayer` is low on `chain` (`why`); whether that changed.
    fn set(&self, chain: &str, relayer: Address, why: Option<String>) -> bool {
        let mut low = self.lock();
        let key = (chain.to_owned(), relayer);
        match why {
            Some(why) => low.insert(key, why).is_none(),
            None => low.remove(&key).is_some(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, Address), String>> {
        // Entries are replaced whole: a panic while held left the map consistent.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The relayer of one chain and key as a [`Worker`]: one round per unit, every
/// `CHAIN_POLL_INTERVAL_MS`, while it holds the key's lease.
pub struct RelayerWorker {
    pool: Pool,
    chain: ChainEndpoint,
    node: Node,
    key: Key,
    kinds: Kinds,
    replace_after: u64,
    /// Submissions of each state (queued, sent) looked at per round (`RELAYER_BATCH`).
    batch: i64,
    /// Names this process (and the fault tests' crash point) in the key's lease.
    holder: String,
    lease: Duration,
    low_balance_sends: u64,
    funds: Funds,
    /// When the key's balance was last read.
    balance_read_at: Option<Instant>,
}

impl RelayerWorker {
    pub fn new(
        pool: Pool,
        chain: ChainEndpoint,
        node: Node,
        key: Key,
        kinds: Kinds,
        settings: &SettlementSettings,
        funds: Funds,
    ) -> Self {
        tracing::info!(chain = %chain.name, relayer = %key.address(), "relayer started");
        Self {
            pool,
            chain,
            node,
            key,
            kinds,
            replace_after: settings.replace_after_blocks,
            batch: i64::from(settings.relayer_batch),
            // The process id tells an operator (and the fault tests) which process relays.
            holder: format!("{}:{}", std::process::id(), uuid::Uuid::new_v4()),
            lease: (settings.poll_interval * 10).max(Duration::from_secs(10)),
            low_balance_sends: settings.low_balance_sends,
            funds,
            balance_read_at: None,
        }
    }
}

impl Worker for RelayerWorker {
    async fn run_once(&mut self) -> Result<Next, Failed> {
        let (pool, chain, key, holder, lease) =
            (&self.pool, &self.chain, &self.key, &self.holder, self.lease);
        let relayer = Relayer {
            chain,
            node: &self.node,
            key,
            kinds: &self.kinds,
            replace_after: self.replace_after,
            batch: self.batch,
            low_balance_sends: self.low_balance_sends,
            funds: &self.funds,
        };
        let round = async {
            let mut conn = pool.acquire().await.map_err(RelayError::Database)?;
            if !hold_lease(&mut conn, chain, key.address(), holder, lease).await? {
                return Ok(None);
            }
            relayer
                .tick(&mut conn, || {
                    hold_lease_check(pool, chain, key.address(), holder, lease)
                })
                .await
                .map(Some)
        };
        let round = round.await;
        let balance_read = match round {
            Ok(Some(Ticked { balance_read, .. })) => balance_read,
            _ => false,
        };
        if balance_read {
            self.balance_read_at = Some(Instant::now());
        } else if self
            .balance_read_at
            .is_none_or(|at| at.elapsed() >= BALANCE_EVERY)
        {
            // Nothing was sent: the balance is read now and then all the same, for the metric.
            self.balance_read_at = Some(Instant::now());
            if let Err(e) = relayer.read_funds().await {
                tracing::warn!(chain = %chain.name, relayer = %key.address(), error = %e, "the relayer's balance could not be read");
            }
        }
        match round {
            // A full share of queued work that made progress: the rest goes out at once, into
            // the same block if it can, rather than a poll interval later.
            Ok(Some(Ticked {
                broadcast,
                queued_left: true,
                ..
            })) if broadcast > 0 => Ok(Next::Again),
            Ok(_) => Ok(Next::Wait),
            Err(RelayError::Database(e)) => Err(e.into()),
            Err(e) => Err(Failed::new(e)),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Chain(#[from] ChainError),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error("{0}")]
    Signing(String),
}

impl From<alloy::transports::TransportError> for RelayError {
    fn from(e: alloy::transports::TransportError) -> Self {
        Self::Chain(e.into())
    }
}

/// Takes or renews the lease of this relayer key on this chain; false if another replica holds it.
async fn hold_lease(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
    relayer: Address,
    holder: &str,
    lease: Duration,
) -> Result<bool, sqlx::Error> {
    let held = sqlx::query_scalar!(
        r#"
        INSERT INTO relayer_leases (chain_id, relayer, holder, expires_at)
        VALUES ($1, $2, $3, now() + make_interval(secs => $4))
        ON CONFLICT (chain_id, relayer) DO UPDATE SET holder = $3, expires_at = EXCLUDED.expires_at
         WHERE relayer_leases.holder = $3 OR relayer_leases.expires_at < now()
        RETURNING holder
        "#,
        chain.id as i64,
        relayer.to_checksum(None),
        holder,
        lease.as_secs_f64(),
    )
    .fetch_optional(conn)
    .await?;
    Ok(held.is_some())
}

/// Checked right before each broadcast, so a relayer that outlived its lease stops sending.
async fn hold_lease_check(
    pool: &Pool,
    chain: &ChainEndpoint,
    relayer: Address,
    holder: &str,
    lease: Duration,
) -> Result<bool, RelayError> {
    let mut conn = pool.acquire().await.map_err(RelayError::Database)?;
    Ok(hold_lease(&mut conn, chain, relayer, holder, lease).await?)
}

/// An open submission of this key, as stored.
struct Submission {
    id: uuid::Uuid,
    kind: String,
    subject: String,
    target: String,
    calldata: Vec<u8>,
    state: State,
    tx_nonce: Option<i64>,
    tx_hashes: Vec<String>,
    max_fee_per_gas: Option<String>,
    max_priority_fee_per_gas: Option<String>,
    sent_at_block: Option<i64>,
    held_attempts: i32,
}

/// What a tick did: how many transactions it broadcast, and whether queued work was left beyond
/// its share.
struct Ticked {
    broadcast: usize,
    queued_left: bool,
    /// The key's balance was read (and reported) this tick.
    balance_read: bool,
}

struct Relayer<'a> {
    chain: &'a ChainEndpoint,
    node: &'a Node,
    key: &'a Key,
    kinds: &'a Kinds,
    replace_after: u64,
    batch: i64,
    low_balance_sends: u64,
    funds: &'a Funds,
}

impl Relayer<'_> {
    /// Claims queued submissions up to `batch` of its own, then looks at its oldest `batch`
    /// queued and oldest `batch` sent ones, each state with its own share, so sent
    /// transactions waiting to be mined never keep new work waiting, and a backlog of new work
    /// never keeps a stuck transaction from its replacement.
    async fn tick<F, Fut>(
        &self,
        conn: &mut PgConnection,
        still_held: F,
    ) -> Result<Ticked, RelayError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<bool, RelayError>>,
    {
        let me = self.key.address().to_checksum(None);
        let chain_id = self.chain.id as i64;
        // Unclaimed work, or claimed by a key whose lease ran out (its replica is gone): a crash
        // between claim and broadcast is harmless, the call's replay protection holds.
        sqlx::query!(
            r#"
            WITH claimable AS (
                SELECT id FROM chain_submissions s
                 WHERE chain_id = $1 AND state = 'queued' AND relayer IS DISTINCT FROM $2
                   AND (sender IS NULL OR sender = $2)
                   AND (after_id IS NULL OR EXISTS (
                        SELECT 1 FROM chain_submissions p WHERE p.id = s.after_id AND p.state = 'done'))
                   AND (relayer IS NULL OR NOT EXISTS (
                        SELECT 1 FROM relayer_leases l
                         WHERE l.chain_id = s.chain_id AND l.relayer = s.relayer AND l.expires_at > now()))
                 ORDER BY created_at
                 LIMIT greatest(0, $3 - (SELECT count(*) FROM chain_submissions
                                          WHERE chain_id = $1 AND state = 'queued' AND relayer = $2))
                   FOR UPDATE SKIP LOCKED
            )
            UPDATE chain_submissions s SET relayer = $2, updated_at = now()
              FROM claimable WHERE s.id = claimable.id
            "#,
            chain_id,
            me,
            self.batch,
        )
        .execute(&mut *conn)
        .await?;
        let open = sqlx::query_as!(
            Submission,
            r#"
            SELECT id AS "id!", kind AS "kind!", subject AS "subject!", target AS "target!",
                   calldata AS "calldata!", state AS "state!: State", tx_nonce, tx_hashes AS "tx_hashes!",
                   max_fee_per_gas::text AS max_fee_per_gas,
                   max_priority_fee_per_gas::text AS max_priority_fee_per_gas, sent_at_block,
                   held_attempts AS "held_attempts!"
              FROM (SELECT *, row_number() OVER (PARTITION BY state ORDER BY created_at) AS rank
                      FROM chain_submissions
                     WHERE chain_id = $1 AND relayer = $2 AND state <> 'done'
                       AND not_before <= now()) AS open
             WHERE rank <= $3
             ORDER BY created_at
            "#,
            chain_id,
            me,
            self.batch,
        )
        .fetch_all(&mut *conn)
        .await?;
        metrics::gauge!(names::RELAYER_PENDING, "chain" => self.chain.name.clone(), "relayer" => me.clone())
            .set(open.len() as f64);
        let mut ticked = Ticked {
            broadcast: 0,
            queued_left: open.iter().filter(|s| s.state == State::Queued).count() as i64
                >= self.batch,
            balance_read: false,
        };
        if open.is_empty() {
            return Ok(ticked);
        }
        let head = match self.node.get_block_number().await {
            Ok(head) => head,
            Err(e) => {
                // Each waiting submission says why it waits.
                let error = RelayError::from(e);
                for submission in &open {
                    record_error(conn, submission, &error.to_string()).await?;
                }
                return Err(error);
            }
        };
        // Its subject moved on (an intent paid, failed or expired): nothing left to send.
        let mut wanted = Vec::with_capacity(open.len());
        for submission in &open {
            let Some(kind) = self.kinds.get(&submission.kind) else {
                record_error(
                    conn,
                    submission,
                    "no handler for this kind of submission here",
                )
                .await?;
                continue;
            };
            match kind.still_wanted(conn, &submission.subject).await? {
                Wanted::No(outcome) => finish(conn, submission, &outcome).await?,
                Wanted::Yes => wanted.push(submission),
            }
        }
        // What the node says of each, asked for all of them at once: whether a sent one is still
        // pending, and whether the chain would take the call now and for how much gas. The
        // transactions then go out one after another, without a round trip of their own between
        // them, so a burst of payments lands in as few blocks as the chain allows.
        // Collected first: a stream of the closure's futures would not be `Send`.
        let looks: Vec<_> = wanted.iter().map(|s| self.look(s, head)).collect();
        let looked = futures::stream::iter(looks)
            .buffered(IN_FLIGHT)
            .collect::<Vec<_>>()
            .await;
        let mut ready = Vec::new();
        for (submission, looked) in wanted.iter().copied().zip(looked) {
            match looked {
                Ok(Look::Pending) => {}
                // A call nothing watches for is done once it did its work; what follows it goes.
                Ok(Look::Mined) => {
                    if self
                        .kinds
                        .get(&submission.kind)
                        .is_some_and(|k| k.done_when_mined())
                    {
                        finish(conn, submission, "mined").await?;
                    }
                }
                Ok(Look::Ready(call)) => ready.push((submission, call)),
                Ok(Look::Reverted(reason)) => self.reverted(conn, submission, reason).await?,
                Err(e) => {
                    record_error(conn, submission, &e.to_string()).await?;
                    if matches!(e, RelayError::Database(_)) {
                        return Err(e);
                    }
                }
            }
        }
        // Of the submissions still wanted: a finished one's transaction may be gone from the pool.
        let sent_nonces: Vec<u64> = wanted
            .iter()
            .filter(|s| s.state == State::Sent)
            .filter_map(|s| s.tx_nonce.map(|n| n as u64))
            .collect();
        if ready.is_empty() {
            if !sent_nonces.is_empty() && still_held().await? {
                let pending = self
                    .node
                    .get_transaction_count(self.key.address())
                    .pending()
                    .await?;
                if leaves_gap(pending, &sent_nonces, &[]) {
                    let fees = self.node.estimate_eip1559_fees().await?;
                    self.fill_gap(pending, &fees).await?;
                }
            }
            return Ok(ticked);
        }
        if !still_held().await? {
            return Ok(ticked);
        }
        let mut nonces = match self.nonces().await {
            Ok(nonces) => nonces,
            Err(e) => {
                for (submission, _) in &ready {
                    record_error(conn, submission, &e.to_string()).await?;
                }
                return Err(e);
            }
        };
        let pending = nonces.next;
        // What the key can pay for, in order: one it cannot, or whose fee is above the chain's
        // cap, waits and says so (`pending_reason`), rather than fail or overpay.
        let mut budget = self.node.get_balance(self.key.address()).await?;
        self.report_funds(budget, &nonces.fees);
        ticked.balance_read = true;
        let mut signed = Vec::with_capacity(ready.len());
        for (submission, call) in ready {
            let gas_limit = call.gas + call.gas / 5;
            let price = match self.price(submission, &nonces) {
                Ok(price) => price,
                Err(hold) => {
                    self.hold(conn, submission, hold, hold.code()).await?;
                    continue;
                }
            };
            let cost = U256::from(gas_limit) * U256::from(price.max_fee);
            if cost > budget {
                let hold = Hold::RelayerUnderfunded;
                self.hold(conn, submission, hold, hold.code()).await?;
                continue;
            }
            budget -= cost;
            match self.sign(call, gas_limit, price, &mut nonces).await {
                Ok(transaction) => signed.push((submission, transaction)),
                Err(e) => record_error(conn, submission, &e.to_string()).await?,
            }
        }
        // Only replacements this round (or none signed): nothing new takes the pending nonce.
        let taken: Vec<u64> = signed.iter().map(|(_, t)| t.nonce).collect();
        if leaves_gap(pending, &sent_nonces, &taken) {
            self.fill_gap(pending, &nonces.fees).await?;
        }
        // Broadcast together (the node may receive them out of order; it queues a nonce until
        // the one below it arrives). One that fails leaves a gap, which the node reports as the
        // next pending nonce: the next round's first new transaction takes it, or `fill_gap` does.
        let broadcasts: Vec<_> = signed
            .iter()
            .map(|(_, t)| self.node.send_raw_transaction(&t.raw))
            .collect();
        let sent = futures::stream::iter(broadcasts)
            .buffered(IN_FLIGHT)
            .collect::<Vec<_>>()
            .await;
        // Every broadcast is recorded even if one record fails: an unrecorded one would be sent
        // again at a new nonce, and revert paying gas.
        let mut failed = None;
        for ((submission, transaction), sent) in signed.iter().zip(sent) {
            let recorded = match sent {
                Ok(_pending) => {
                    ticked.broadcast += 1;
                    self.record(conn, submission, transaction, head).await
                }
                Err(e) => {
                    let error = RelayError::from(e);
                    record_error(conn, submission, &error.to_string()).await
                }
            };
            if let Err(e) = recorded {
                failed.get_or_insert(e);
            }
        }
        match failed {
            Some(e) => Err(e.into()),
            None => Ok(ticked),
        }
    }

    /// Whether a sent transaction should be left alone, and why: one of its hashes is mined, or it
    /// has not waited `replace_after` blocks yet while its nonce is still open.
    async fn still_pending(&self, s: &Submission, head: u64) -> Result<Option<Look>, RelayError> {
        for hash in &s.tx_hashes {
            let hash: B256 = hash
                .parse()
                .map_err(|e| RelayError::Signing(format!("stored hash: {e}")))?;
            if let Some(receipt) = self.node.get_transaction_receipt(hash).await? {
                // Mined and it did its work: the follower takes over. A reverted one (someone
                // else used the authorization first) is checked again by simulation below.
                if receipt.status() {
                    return Ok(Some(Look::Mined));
                }
                return Ok(None);
            }
        }
        let sent_at = s.sent_at_block.unwrap_or(0) as u64;
        Ok((head < sent_at + self.replace_after).then_some(Look::Pending))
    }

    /// What sending the submission now would do: nothing yet (sent and pending), or a call the
    /// chain takes (with its gas), or a revert. The simulation runs against the latest block, not
    /// the pending one: a broadcast that only sits in a pool (perhaps ours, unrecorded) has paid
    /// nothing yet and may never be mined.
    async fn look(&self, s: &Submission, head: u64) -> Result<Look, RelayError> {
        if s.state == State::Sent
            && let Some(left_alone) = self.still_pending(s, head).await?
        {
            return Ok(left_alone);
        }
        let target: Address = s
            .target
            .parse()
            .map_err(|_| RelayError::Signing("stored target is malformed".into()))?;
        let request = TransactionRequest::default()
            .with_from(self.key.address())
            .with_to(target)
            .with_input(Bytes::from(s.calldata.clone()));
        if let Err(e) = self
            .node
            .call(request.clone())
            .block(BlockId::latest())
            .await
        {
            return match ChainError::from(e) {
                ChainError::Reverted { reason } => Ok(Look::Reverted(reason)),
                other => Err(other.into()),
            };
        }
        let gas = self
            .node
            .estimate_gas(request.clone())
            .block(BlockId::latest())
            .await?;
        Ok(Look::Ready(Box::new(Call { request, gas })))
    }

    /// A simulation reverted: spent (used, expired, canceled) or not yet payable (balance, pause)
    /// means nothing to send now. A watch moves the subject once a block is confirmed; until then
    /// a reorg could still undo it, so the submission stays open and is looked at again.
    async fn reverted(
        &self,
        conn: &mut PgConnection,
        s: &Submission,
        reason: String,
    ) -> Result<(), sqlx::Error> {
        let kind = self.kinds.get(&s.kind);
        if kind.is_some_and(|k| k.done_when_mined()) {
            // Nothing to wait for: what follows it is judged by the chain on its own.
            return finish(conn, s, &format!("refused: {reason}")).await;
        }
        match kind.map(|k| k.classify(&reason)) {
            Some(Revert::Spent) => note(conn, s, &reason).await,
            Some(Revert::NotYet(hold)) => self.hold(conn, s, hold, &reason).await,
            // Sending again will not change the token's mind: tried again with backoff (the
            // domain may come back), and the token read again.
            Some(Revert::SignatureRefused) => {
                tracing::warn!(kind = %s.kind, subject = %s.subject, %reason, "the token refuses the signature; reading the token again");
                super::tokens::read_again(conn, self.chain.id, &s.target).await?;
                hold_back(conn, s, &reason).await
            }
            _ => record_error(conn, s, &ChainError::Reverted { reason }.to_string()).await,
        }
    }

    /// Fills the gap at `nonce` with a transaction of nothing to itself ([`leaves_gap`]).
    async fn fill_gap(&self, nonce: u64, fees: &Eip1559Estimation) -> Result<(), RelayError> {
        let from = self.key.address();
        // Within the chain's cap too: above it, the filler waits in the pool for fees to fall.
        let cap = self.chain.max_fee_per_gas.unwrap_or(u128::MAX);
        let max_fee = fees.max_fee_per_gas.min(cap);
        let filler = TransactionRequest::default()
            .with_from(from)
            .with_to(from)
            .with_nonce(nonce)
            .with_gas_limit(21_000)
            .with_max_fee_per_gas(max_fee)
            .with_max_priority_fee_per_gas(fees.max_priority_fee_per_gas.min(max_fee));
        let envelope = self.signed(filler).await?;
        let _pending = self
            .node
            .send_raw_transaction(&envelope.encoded_2718())
            .await?;
        tracing::warn!(chain = %self.chain.name, relayer = %from, nonce, tx = %envelope.tx_hash(), "filled a nonce gap below sent transactions");
        Ok(())
    }

    /// `request`, for this chain, signed by this relayer's key.
    async fn signed(&self, request: TransactionRequest) -> Result<TxEnvelope, RelayError> {
        let wallet = EthereumWallet::from(self.key.0.clone());
        request
            .with_chain_id(self.chain.id)
            .build(&wallet)
            .await
            .map_err(|e| RelayError::Signing(e.to_string()))
    }

    /// This key's account nonces as the node sees them, and the fees to send with, asked once a
    /// tick: they move with blocks, not with sends.
    async fn nonces(&self) -> Result<Nonces, RelayError> {
        let from = self.key.address();
        Ok(Nonces {
            mined: self.node.get_transaction_count(from).await?,
            next: self.node.get_transaction_count(from).pending().await?,
            fees: self.node.estimate_eip1559_fees().await?,
        })
    }

    /// What to offer for `s` now: a replacement at its account nonce, while the chain has not
    /// passed it, with fees enough above the replaced transaction's, else a new transaction at the
    /// next nonce with the chain's fees; never above the chain's cap (`RELAYER_MAX_FEE_GWEI`).
    /// `Err(GasPriceAboveCap)` when the cap is below what the chain charges now, or below what a
    /// replacement must offer.
    fn price(&self, s: &Submission, nonces: &Nonces) -> Result<Price, Hold> {
        let replacing = match (s.state, s.tx_nonce) {
            (State::Sent, Some(n)) => n as u64 >= nonces.mined,
            _ => false,
        };
        let nonce = match (replacing, s.tx_nonce) {
            (true, Some(n)) => n as u64,
            _ => nonces.next,
        };
        let (mut max_fee, mut priority) = (
            nonces.fees.max_fee_per_gas,
            nonces.fees.max_priority_fee_per_gas,
        );
        let old = |fee: &Option<String>| fee.as_deref().and_then(|v| v.parse::<u128>().ok());
        let at_least =
            |fee: &Option<String>, percent: u128| old(fee).map_or(0, |v| v * percent / 100 + 1);
        if replacing {
            max_fee = max_fee.max(at_least(&s.max_fee_per_gas, BUMP_PERCENT));
            priority = priority.max(at_least(&s.max_priority_fee_per_gas, BUMP_PERCENT));
            max_fee = max_fee.max(priority);
        }
        if let Some(cap) = self.chain.max_fee_per_gas {
            // The estimate is twice the next block's base fee plus the tip: at or above the cap,
            // nothing offered within it is mined.
            let base_fee = nonces
                .fees
                .max_fee_per_gas
                .saturating_sub(nonces.fees.max_priority_fee_per_gas)
                / 2;
            if base_fee >= cap {
                return Err(Hold::GasPriceAboveCap);
            }
            max_fee = max_fee.min(cap);
            priority = priority.min(max_fee);
            if replacing
                && (max_fee < at_least(&s.max_fee_per_gas, MIN_BUMP_PERCENT)
                    || priority < at_least(&s.max_priority_fee_per_gas, MIN_BUMP_PERCENT))
            {
                return Err(Hold::GasPriceAboveCap);
            }
        }
        Ok(Price {
            nonce,
            replacing,
            max_fee,
            priority,
        })
    }

    /// Signs the submission's call at `price`, with `gas_limit`.
    async fn sign(
        &self,
        call: Box<Call>,
        gas_limit: u64,
        price: Price,
        nonces: &mut Nonces,
    ) -> Result<Signed, RelayError> {
        let request = call
            .request
            .with_nonce(price.nonce)
            .with_gas_limit(gas_limit)
            .with_max_fee_per_gas(price.max_fee)
            .with_max_priority_fee_per_gas(price.priority);
        let envelope = self.signed(request).await?;
        // A new transaction never takes a nonce this round used, a replacement's included.
        nonces.next = nonces.next.max(price.nonce + 1);
        Ok(Signed {
            hash: *envelope.tx_hash(),
            raw: envelope.encoded_2718(),
            nonce: price.nonce,
            max_fee: price.max_fee,
            priority: price.priority,
            replacing: price.replacing,
        })
    }

    /// The submission waits for `hold` (`why` recorded on it), and its subject says so
    /// (`pending_reason`, an event once).
    async fn hold(
        &self,
        conn: &mut PgConnection,
        s: &Submission,
        hold: Hold,
        why: &str,
    ) -> Result<(), sqlx::Error> {
        hold_back(conn, s, why).await?;
        match self.kinds.get(&s.kind) {
            Some(kind) => kind.held(conn, &s.subject, hold).await,
            None => Ok(()),
        }
    }

    /// Reads the key's balance and the chain's fees, and reports them ([`Relayer::report_funds`]).
    async fn read_funds(&self) -> Result<(), RelayError> {
        let balance = self.node.get_balance(self.key.address()).await?;
        let fees = self.node.estimate_eip1559_fees().await?;
        self.report_funds(balance, &fees);
        Ok(())
    }

    /// The key's balance as a metric; below the cost of `RELAYER_LOW_BALANCE_SENDS` sends at
    /// `fees`, it is low: logged when it becomes so and when it recovers, and said by `/readyz`.
    fn report_funds(&self, balance: U256, fees: &Eip1559Estimation) {
        let relayer = self.key.address();
        let label = relayer.to_checksum(None);
        metrics::gauge!(names::RELAYER_BALANCE, "chain" => self.chain.name.clone(), "relayer" => label)
            .set(f64::from(balance));
        let per_send = U256::from(TYPICAL_SEND_GAS) * U256::from(fees.max_fee_per_gas);
        let needed = per_send * U256::from(self.low_balance_sends);
        let low = (balance < needed).then(|| {
            format!(
                "relayer {relayer} on {}: {} of the native coin pays fewer than {} sends at the fee now (RELAYER_LOW_BALANCE_SENDS)",
                self.chain.name,
                format_ether(balance),
                self.low_balance_sends
            )
        });
        let is_low = low.is_some();
        if self.funds.set(&self.chain.name, relayer, low) {
            if is_low {
                tracing::warn!(chain = %self.chain.name, %relayer, balance = %format_ether(balance), needed = %format_ether(needed), "the relayer's balance is low: fund it");
            } else {
                tracing::info!(chain = %self.chain.name, %relayer, balance = %format_ether(balance), "the relayer's balance is enough again");
            }
        }
    }

    /// Records a broadcast transaction; whoever awaits the submission learns it at once.
    async fn record(
        &self,
        conn: &mut PgConnection,
        s: &Submission,
        t: &Signed,
        head: u64,
    ) -> Result<(), sqlx::Error> {
        sqlx::query!(
            r#"
            UPDATE chain_submissions
               SET state = 'sent', tx_nonce = $3, tx_hashes = array_append(tx_hashes, $4),
                   max_fee_per_gas = $5::text::numeric, max_priority_fee_per_gas = $6::text::numeric,
                   sent_at_block = $7, attempts = attempts + 1, last_error = NULL, held_attempts = 0,
                   updated_at = now()
             WHERE id = $1 AND relayer = $2
            RETURNING pg_notify($8, id::text)
            "#,
            s.id,
            self.key.address().to_checksum(None),
            t.nonce as i64,
            t.hash.to_string(),
            t.max_fee.to_string(),
            t.priority.to_string(),
            head as i64,
            outbox::DONE_CHANNEL,
        )
        .fetch_optional(&mut *conn)
        .await?;
        let kind = if t.replacing { "replacement" } else { "new" };
        metrics::counter!(names::RELAYER_SENT, "chain" => self.chain.name.clone(), "kind" => kind)
            .increment(1);
        tracing::info!(chain = %self.chain.name, kind = %s.kind, subject = %s.subject, tx = %t.hash, nonce = t.nonce, max_fee = t.max_fee, priority = t.priority, send = kind, "submission sent");
        Ok(())
    }
}

/// What a transaction of a submission offers, at which account nonce.
struct Price {
    nonce: u64,
    replacing: bool,
    max_fee: u128,
    priority: u128,
}

/// A signed transaction of a submission, ready to broadcast.
struct Signed {
    hash: B256,
    raw: Vec<u8>,
    nonce: u64,
    max_fee: u128,
    priority: u128,
    replacing: bool,
}

/// Whether the account's `pending` nonce (the lowest the node has no transaction for) is a gap no
/// node mines past: a sent transaction of ours waits above it, none holds it, and no transaction
/// of this round (`taken`) takes it. A failed broadcast among others leaves one, and so does a
/// crash between two broadcasts.
fn leaves_gap(pending: u64, sent_nonces: &[u64], taken: &[u64]) -> bool {
    sent_nonces.iter().any(|&n| n > pending)
        && !sent_nonces.contains(&pending)
        && !taken.contains(&pending)
}

/// How many node calls a tick has in flight at once while it looks at its submissions.
const IN_FLIGHT: usize = 16;

/// What the node says of one submission.
enum Look {
    /// Sent, and to be left alone for now.
    Pending,
    /// Sent, and in a block, where it did its work.
    Mined,
    /// The chain would take this call now.
    Ready(Box<Call>),
    /// The simulation reverted, for this reason.
    Reverted(String),
}

/// A call to send, and the gas the node estimated for it.
struct Call {
    request: TransactionRequest,
    gas: u64,
}

/// The key's account nonces (mined, and the next one to use) and this tick's fees.
struct Nonces {
    mined: u64,
    next: u64,
    fees: Eip1559Estimation,
}

/// Ends the submission with `outcome` and wakes whoever awaits it (`outbox::await_outcome`).
async fn finish(conn: &mut PgConnection, s: &Submission, outcome: &str) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE chain_submissions SET state = 'done', outcome = $2, updated_at = now() WHERE id = $1",
        s.id,
        outcome,
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!(
        "SELECT pg_notify($1, $2)",
        outbox::DONE_CHANNEL,
        s.id.to_string()
    )
    .execute(&mut *conn)
    .await?;
    tracing::info!(kind = %s.kind, subject = %s.subject, outcome, "submission done");
    Ok(())
}

/// A submission the token refuses for now (or whose signature it refuses) waits before it is
/// simulated again, longer each time (`outbox::hold_delay`), with the reason recorded.
async fn hold_back(conn: &mut PgConnection, s: &Submission, why: &str) -> Result<(), sqlx::Error> {
    let delay = outbox::hold_delay(s.held_attempts.max(0) as u32);
    sqlx::query!(
        "UPDATE chain_submissions
            SET last_error = $2, held_attempts = held_attempts + 1,
                not_before = now() + make_interval(secs => $3), updated_at = now()
          WHERE id = $1",
        s.id,
        why,
        delay.as_secs_f64(),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Records why a submission waits, without a log line per tick.
async fn note(conn: &mut PgConnection, s: &Submission, why: &str) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE chain_submissions SET last_error = $2, updated_at = now()
          WHERE id = $1 AND last_error IS DISTINCT FROM $2",
        s.id,
        why,
    )
    .execute(conn)
    .await?;
    Ok(())
}

async fn record_error(
    conn: &mut PgConnection,
    s: &Submission,
    error: &str,
) -> Result<(), sqlx::Error> {
    tracing::warn!(kind = %s.kind, subject = %s.subject, error, "submission failed; retrying next tick");
    sqlx::query!(
        "UPDATE chain_submissions SET attempts = attempts + 1, last_error = $2, updated_at = now()
          WHERE id = $1",
        s.id,
        error,
    )
    .execute(conn)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::leaves_gap;

    #[test]
    fn a_gap_is_the_pending_nonce_below_a_sent_transaction_that_nothing_takes() {
        // Sent at 1 and 2, nothing at 0: a gap, unless this round takes 0.
        assert!(leaves_gap(0, &[1, 2], &[]));
        assert!(
            leaves_gap(0, &[1, 2], &[1, 2]),
            "replacements do not take it"
        );
        assert!(!leaves_gap(0, &[1, 2], &[0]));
        // Nothing waits above the pending nonce, or a sent one holds it.
        assert!(!leaves_gap(3, &[1, 2], &[]));
        assert!(!leaves_gap(1, &[1, 2], &[]));
        assert!(!leaves_gap(0, &[], &[]));
    }
}
