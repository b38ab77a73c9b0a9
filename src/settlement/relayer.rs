//! The relayer: submits queued authorizations from `RELAYER_PRIVATE_KEY`, one relayer per key and
//! chain at a time across replicas (a lease in PostgreSQL), with EIP-1559 fees from the node, and
//! replaces a transaction left unmined for `RELAYER_REPLACE_AFTER_BLOCKS` with higher fees. All its
//! state is in PostgreSQL: a crash between broadcast and record leads to a second submission,
//! which the authorization's nonce makes harmless (`docs/settlement.md`, "Relayer").

use std::time::Duration;

use alloy::{
    consensus::TxEnvelope,
    eips::{BlockId, eip1559::Eip1559Estimation, eip2718::Encodable2718},
    network::{EthereumWallet, NetworkTransactionBuilder, TransactionBuilder},
    primitives::{Address, B256, U256},
    providers::Provider,
    rpc::types::TransactionRequest,
    signers::local::PrivateKeySigner,
};
use sqlx::PgConnection;
use tokio::sync::OnceCell;

use crate::{
    chain::{
        authorization::{Authorization, PayerSignature},
        rpc::{ChainError, Node},
    },
    config::{ChainEndpoint, SettlementSettings},
    db::Pool,
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
                anyhow::anyhow!("RELAYER_PRIVATE_KEY must be 0x followed by 64 hex digits")
            })
    }

    pub fn address(&self) -> Address {
        self.0.address()
    }
}

/// Submissions of each state (queued, sent) looked at per tick.
const BATCH: i64 = 50;
/// A fee bump must beat the replaced transaction by at least 10% for nodes to accept it.
const BUMP_PERCENT: u128 = 125;

/// The relayer of one chain and key as a [`Worker`]: one round per unit, every
/// `CHAIN_POLL_INTERVAL_MS`, while it holds the key's lease.
pub struct RelayerWorker {
    pool: Pool,
    chain: ChainEndpoint,
    node: Node,
    key: Key,
    replace_after: u64,
    /// Names this process (and the fault tests' crash point) in the key's lease.
    holder: String,
    lease: Duration,
}

impl RelayerWorker {
    pub fn new(
        pool: Pool,
        chain: ChainEndpoint,
        node: Node,
        key: Key,
        settings: &SettlementSettings,
    ) -> Self {
        tracing::info!(chain = %chain.name, relayer = %key.address(), "relayer started");
        Self {
            pool,
            chain,
            node,
            key,
            replace_after: settings.replace_after_blocks,
            // The process id tells an operator (and the fault tests) which process relays.
            holder: format!("{}:{}", std::process::id(), uuid::Uuid::new_v4()),
            lease: (settings.poll_interval * 10).max(Duration::from_secs(10)),
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
            replace_after: self.replace_after,
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
        match round.await {
            // A full share of queued work that made progress: the rest goes out at once, into
            // the same block if it can, rather than a poll interval later.
            Ok(Some(Ticked {
                broadcast,
                queued_left: true,
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

/// An open submission, as stored.
struct Submission {
    merchant_id: String,
    intent_id: String,
    token: String,
    payer: String,
    payee: String,
    amount: String,
    valid_before: i64,
    nonce: Vec<u8>,
    signature: Vec<u8>,
    state: String,
    intent_state: String,
    tx_nonce: Option<i64>,
    tx_hashes: Vec<String>,
    max_fee_per_gas: Option<String>,
    max_priority_fee_per_gas: Option<String>,
    sent_at_block: Option<i64>,
}

/// What a tick did: how many transactions it broadcast, and whether queued work was left beyond
/// its share.
struct Ticked {
    broadcast: usize,
    queued_left: bool,
}

struct Relayer<'a> {
    chain: &'a ChainEndpoint,
    node: &'a Node,
    key: &'a Key,
    replace_after: u64,
}

impl Relayer<'_> {
    /// Looks at the oldest [`BATCH`] queued submissions and the oldest [`BATCH`] sent ones, each
    /// kind with its own share, so sent transactions waiting to be mined never keep new work
    /// waiting, and a backlog of new work never keeps a stuck transaction from its replacement.
    async fn tick<F, Fut>(
        &self,
        conn: &mut PgConnection,
        still_held: F,
    ) -> Result<Ticked, RelayError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<bool, RelayError>>,
    {
        let open = sqlx::query_as!(
            Submission,
            r#"
            SELECT s.merchant_id, s.intent_id, s.token, s.payer, s.payee, s.amount::text AS "amount!",
                   s.valid_before, s.nonce, s.signature, s.state, p.state AS intent_state, s.tx_nonce,
                   s.tx_hashes, s.max_fee_per_gas::text AS max_fee_per_gas,
                   s.max_priority_fee_per_gas::text AS max_priority_fee_per_gas, s.sent_at_block
              FROM chain_submissions s
              JOIN payment_intents p ON p.merchant_id = s.merchant_id AND p.id = s.intent_id
             WHERE (s.merchant_id, s.intent_id) IN (
                   SELECT merchant_id, intent_id
                     FROM (SELECT merchant_id, intent_id,
                                  row_number() OVER (PARTITION BY state ORDER BY created_at) AS rank
                             FROM chain_submissions
                            WHERE chain_id = $1 AND state <> 'done') AS open
                    WHERE rank <= $2)
             ORDER BY s.created_at
            "#,
            self.chain.id as i64,
            BATCH,
        )
        .fetch_all(&mut *conn)
        .await?;
        metrics::gauge!(names::RELAYER_PENDING, "chain" => self.chain.name.clone())
            .set(open.len() as f64);
        let mut ticked = Ticked {
            broadcast: 0,
            queued_left: open.iter().filter(|s| s.state == "queued").count() as i64 >= BATCH,
        };
        if open.is_empty() {
            return Ok(ticked);
        }
        // The node's fee estimate, asked once per tick: it moves with blocks, not with sends.
        let fees = OnceCell::new();
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
        for submission in open {
            // The payment watch decided: the intent is paid, failed or expired. Nothing left to send.
            if submission.intent_state != "processing" {
                finish(
                    conn,
                    &submission,
                    &format!("intent_{}", submission.intent_state),
                )
                .await?;
                continue;
            }
            if submission.state == "sent" && self.still_pending(&submission, head).await? {
                continue;
            }
            if !still_held().await? {
                return Ok(ticked);
            }
            match self.submit(conn, &submission, head, &fees).await {
                Ok(broadcast) => ticked.broadcast += usize::from(broadcast),
                Err(e) => {
                    record_error(conn, &submission, &e.to_string()).await?;
                    if matches!(e, RelayError::Database(_)) {
                        return Err(e);
                    }
                }
            }
        }
        Ok(ticked)
    }

    /// Whether a sent transaction should be left alone: one of its hashes is mined, or it has not
    /// waited `replace_after` blocks yet while its nonce is still open.
    async fn still_pending(&self, s: &Submission, head: u64) -> Result<bool, RelayError> {
        for hash in &s.tx_hashes {
            let hash: B256 = hash
                .parse()
                .map_err(|e| RelayError::Signing(format!("stored hash: {e}")))?;
            if let Some(receipt) = self.node.get_transaction_receipt(hash).await? {
                // Mined and it did its work: the follower takes over. A reverted one (someone
                // else used the authorization first) is checked again by simulation below.
                if receipt.status() {
                    return Ok(true);
                }
                return Ok(false);
            }
        }
        let sent_at = s.sent_at_block.unwrap_or(0) as u64;
        Ok(head < sent_at + self.replace_after)
    }

    /// Sends the submission's authorization: a replacement at the same account nonce with higher
    /// fees if that nonce is still open, else a new transaction. A simulation first tells whether
    /// the chain would still take it. Whether a transaction was broadcast.
    async fn submit(
        &self,
        conn: &mut PgConnection,
        s: &Submission,
        head: u64,
        fees: &OnceCell<Eip1559Estimation>,
    ) -> Result<bool, RelayError> {
        let authorization = authorization_of(self.chain, s)?;
        let signature = PayerSignature::from_stored(&s.signature).map_err(RelayError::Signing)?;
        let input = authorization.calldata(&signature);
        let from = self.key.address();
        let request = TransactionRequest::default()
            .with_from(from)
            .with_to(authorization.token)
            .with_input(input);
        // Against the latest block, not the pending one: a broadcast that only sits in a pool
        // (perhaps ours, unrecorded) has paid nothing yet and may never be mined.
        match self
            .node
            .call(request.clone())
            .block(BlockId::latest())
            .await
        {
            Ok(_) => {}
            Err(e) => match ChainError::from(e) {
                // Used or expired on chain: nothing to send. The payment watch moves the intent once
                // the block is confirmed; until then a reorg could still undo it, so the
                // submission stays open and is looked at again.
                ChainError::Reverted { reason }
                    if reason.contains("authorization is used")
                        || reason.contains("authorization is expired") =>
                {
                    note(conn, s, &reason).await?;
                    return Ok(false);
                }
                other => return Err(other.into()),
            },
        }
        // Only a sent submission can be replaced: while the chain has not passed its nonce.
        let replacing = match (s.state.as_str(), s.tx_nonce) {
            ("sent", Some(n)) => n as u64 >= self.node.get_transaction_count(from).await?,
            _ => false,
        };
        let tx_nonce = match (replacing, s.tx_nonce) {
            (true, Some(n)) => n as u64,
            _ => self.node.get_transaction_count(from).pending().await?,
        };
        let estimate = *fees
            .get_or_try_init(|| async {
                self.node
                    .estimate_eip1559_fees()
                    .await
                    .map_err(RelayError::from)
            })
            .await?;
        let (mut max_fee, mut priority) =
            (estimate.max_fee_per_gas, estimate.max_priority_fee_per_gas);
        if replacing {
            let bump = |old: &Option<String>| {
                old.as_deref()
                    .and_then(|v| v.parse::<u128>().ok())
                    .map_or(0, |v| v * BUMP_PERCENT / 100 + 1)
            };
            max_fee = max_fee.max(bump(&s.max_fee_per_gas));
            priority = priority.max(bump(&s.max_priority_fee_per_gas));
            max_fee = max_fee.max(priority);
        }
        let gas = self
            .node
            .estimate_gas(request.clone())
            .block(BlockId::latest())
            .await?;
        let request = request
            .with_nonce(tx_nonce)
            .with_chain_id(self.chain.id)
            .with_gas_limit(gas + gas / 5)
            .with_max_fee_per_gas(max_fee)
            .with_max_priority_fee_per_gas(priority);
        let wallet = EthereumWallet::from(self.key.0.clone());
        let envelope: TxEnvelope = request
            .build(&wallet)
            .await
            .map_err(|e| RelayError::Signing(e.to_string()))?;
        let hash = *envelope.tx_hash();
        let _pending = self
            .node
            .send_raw_transaction(&envelope.encoded_2718())
            .await?;
        crash_point_after_broadcast();
        sqlx::query!(
            r#"
            UPDATE chain_submissions
               SET state = 'sent', relayer = $3, tx_nonce = $4, tx_hashes = array_append(tx_hashes, $5),
                   max_fee_per_gas = $6::text::numeric, max_priority_fee_per_gas = $7::text::numeric,
                   sent_at_block = $8, attempts = attempts + 1, last_error = NULL, updated_at = now()
             WHERE merchant_id = $1 AND intent_id = $2
            "#,
            s.merchant_id,
            s.intent_id,
            from.to_checksum(None),
            tx_nonce as i64,
            hash.to_string(),
            max_fee.to_string(),
            priority.to_string(),
            head as i64,
        )
        .execute(&mut *conn)
        .await?;
        let kind = if replacing { "replacement" } else { "new" };
        metrics::counter!(names::RELAYER_SENT, "chain" => self.chain.name.clone(), "kind" => kind)
            .increment(1);
        tracing::info!(chain = %self.chain.name, intent = %s.intent_id, tx = %hash, nonce = tx_nonce, max_fee, priority, kind, "authorization submitted");
        Ok(true)
    }
}

/// A fault-injection point for the crash tests and the chaos run: with
/// `RELAYER_CRASH_AFTER_BROADCAST=p` (a probability, `1` for always) the process dies right after
/// a broadcast, before recording it, with probability p.
fn crash_point_after_broadcast() {
    let Some(p) = std::env::var("RELAYER_CRASH_AFTER_BROADCAST")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
    else {
        return;
    };
    if rand::random::<f64>() < p {
        // Straight to stderr: the log writer's buffer dies with the process.
        eprintln!("RELAYER_CRASH_AFTER_BROADCAST: exiting between broadcast and record");
        std::process::abort();
    }
}

fn authorization_of(chain: &ChainEndpoint, s: &Submission) -> Result<Authorization, RelayError> {
    let bad = |what: &str| RelayError::Signing(format!("stored {what} is malformed"));
    Ok(Authorization {
        chain_id: chain.id,
        token: s.token.parse().map_err(|_| bad("token"))?,
        // Name and version only enter the digest, which the relayer does not need.
        token_name: String::new(),
        token_version: String::new(),
        from: s.payer.parse().map_err(|_| bad("payer"))?,
        to: s.payee.parse().map_err(|_| bad("payee"))?,
        value: s.amount.parse::<U256>().map_err(|_| bad("amount"))?,
        valid_before: s.valid_before as u64,
        nonce: B256::try_from(s.nonce.as_slice()).map_err(|_| bad("nonce"))?,
    })
}

async fn finish(conn: &mut PgConnection, s: &Submission, outcome: &str) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE chain_submissions SET state = 'done', outcome = $3, updated_at = now()
          WHERE merchant_id = $1 AND intent_id = $2",
        s.merchant_id,
        s.intent_id,
        outcome,
    )
    .execute(conn)
    .await?;
    tracing::info!(intent = %s.intent_id, outcome, "submission done");
    Ok(())
}

/// Records why a submission waits, without a log line per tick.
async fn note(conn: &mut PgConnection, s: &Submission, why: &str) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE chain_submissions SET last_error = $3, updated_at = now()
          WHERE merchant_id = $1 AND intent_id = $2 AND last_error IS DISTINCT FROM $3",
        s.merchant_id,
        s.intent_id,
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
    tracing::warn!(intent = %s.intent_id, error, "submission failed; retrying next tick");
    sqlx::query!(
        "UPDATE chain_submissions SET attempts = attempts + 1, last_error = $3, updated_at = now()
          WHERE merchant_id = $1 AND intent_id = $2",
        s.merchant_id,
        s.intent_id,
        error,
    )
    .execute(conn)
    .await?;
    Ok(())
}
