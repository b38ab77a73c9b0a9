//! The chain listener, one per served chain in every replica. It follows blocks from a cursor in
//! PostgreSQL, checking each block's parent hash against the block before it, records every use
//! of an intent's nonce once, and, once the block has `CHAIN_CONFIRMATIONS`, settles or fails the
//! intent; then it expires intents by the time of the newest confirmed block
//! (`docs/settlement.md`, "Listener"). Replicas share the work safely: the cursor only moves by
//! compare-and-set, and an observation moves its intent once.

use std::time::Duration;

use alloy::{
    eips::BlockNumberOrTag,
    primitives::B256,
    providers::Provider,
    rpc::types::{Filter, Log},
    sol_types::SolEvent,
};
use sqlx::{Connection, PgConnection};
use time::OffsetDateTime;

use crate::{
    chain::{
        rpc::{ChainError, Node},
        token::Eip3009,
    },
    config::ChainEndpoint,
    db::Pool,
    intents::{
        repo::{self, Expiry, Settlement, TransitionError},
        state::{Action, Actor},
    },
    ledger,
    telemetry::metrics as names,
    workers::{Failed, Next, Worker},
};

/// Blocks followed per tick, so one tick stays short after an outage; the rest waits a tick.
const MAX_BLOCKS_PER_TICK: u64 = 500;
/// Blocks kept below the confirmation depth to detect a reorg reaching that deep.
const KEPT_BELOW_CONFIRMED: i64 = 64;
/// Where a listener with no cursor starts: this many blocks below the head.
const START_BELOW_HEAD: u64 = 256;

/// The listener of one chain as a [`Worker`]: one tick per unit, every `CHAIN_POLL_INTERVAL_MS`.
pub struct Listener {
    pool: Pool,
    chain: ChainEndpoint,
    node: Node,
    confirmations: u64,
}

impl Listener {
    pub fn new(pool: Pool, chain: ChainEndpoint, node: Node, confirmations: u64) -> Self {
        Self {
            pool,
            chain,
            node,
            confirmations,
        }
    }
}

impl Worker for Listener {
    async fn run_once(&mut self) -> Result<Next, Failed> {
        match tick(&self.pool, &self.chain, &self.node, self.confirmations).await {
            Ok(()) => Ok(Next::Wait),
            Err(TickError::Halted(why)) => {
                let label = self.chain.name.clone();
                metrics::gauge!(names::CHAIN_LISTENER_HALTED, "chain" => label.clone()).set(1.0);
                tracing::error!(chain = %label, "settlement stopped on this chain: {why}");
                // Stays stopped: confirmed history is never rewritten. Checked again each minute
                // so the log keeps saying why.
                Ok(Next::WaitFor(Duration::from_secs(60)))
            }
            Err(TickError::Database(e)) => Err(e.into()),
            Err(e) => Err(Failed::new(e)),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TickError {
    #[error(transparent)]
    Chain(#[from] ChainError),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error("{0}")]
    Halted(String),
}

impl From<alloy::transports::TransportError> for TickError {
    fn from(e: alloy::transports::TransportError) -> Self {
        Self::Chain(e.into())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Cursor {
    number: i64,
    hash: String,
}

/// One round: catch up with the chain, settle what is confirmed, expire what ran out.
pub async fn tick(
    pool: &Pool,
    chain: &ChainEndpoint,
    node: &Node,
    confirmations: u64,
) -> Result<(), TickError> {
    let mut conn = pool.acquire().await.map_err(TickError::Database)?;
    let label = chain.name.clone();
    let head = node.get_block_number().await?;
    metrics::gauge!(names::CHAIN_HEAD, "chain" => label.clone()).set(head as f64);
    let mut cursor = match load_cursor(&mut conn, chain.id).await? {
        Some(cursor) => cursor,
        None => start(&mut conn, chain, node, head).await?,
    };
    cursor = rewind_if_reorged(&mut conn, chain, node, cursor).await?;
    let until = head.min(cursor.number as u64 + MAX_BLOCKS_PER_TICK);
    while (cursor.number as u64) < until {
        match follow(&mut conn, chain, node, &cursor).await? {
            Some(next) => cursor = next,
            // A reorg or another replica moved on: the next tick starts from the stored cursor.
            None => break,
        }
    }
    metrics::gauge!(names::CHAIN_LISTENER_LAG, "chain" => label)
        .set(head.saturating_sub(cursor.number as u64) as f64);
    let confirmed = cursor.number - confirmations as i64 + 1;
    if confirmed >= 0 {
        settle_confirmed(&mut conn, chain, confirmed).await?;
        expire_by_chain_time(&mut conn, chain, confirmed).await?;
        sqlx::query!(
            "DELETE FROM chain_blocks WHERE chain_id = $1 AND number < $2",
            chain.id as i64,
            confirmed - KEPT_BELOW_CONFIRMED,
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

async fn load_cursor(conn: &mut PgConnection, chain_id: u64) -> Result<Option<Cursor>, TickError> {
    let row = sqlx::query!(
        "SELECT block_number, block_hash, halted FROM chain_cursors WHERE chain_id = $1",
        chain_id as i64
    )
    .fetch_optional(conn)
    .await?;
    match row {
        Some(row) if row.halted.is_some() => Err(TickError::Halted(row.halted.unwrap_or_default())),
        Some(row) => Ok(Some(Cursor {
            number: row.block_number,
            hash: row.block_hash,
        })),
        None => Ok(None),
    }
}

/// The first cursor: a little below the head, after checking the node serves the configured chain.
async fn start(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
    node: &Node,
    head: u64,
) -> Result<Cursor, TickError> {
    let served = node.get_chain_id().await?;
    if served != chain.id {
        return Err(TickError::Halted(format!(
            "the node at {} serves chain {served}, not {}",
            chain.rpc_url, chain.name
        )));
    }
    let number = head.saturating_sub(START_BELOW_HEAD);
    let block = header(node, number)
        .await?
        .ok_or_else(|| ChainError::Refused(format!("block {number} is missing")))?;
    sqlx::query!(
        "INSERT INTO chain_cursors (chain_id, block_number, block_hash) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        chain.id as i64,
        number as i64,
        block.hash.to_string(),
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!(
        "INSERT INTO chain_blocks (chain_id, number, hash, parent_hash, timestamp) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT DO NOTHING",
        chain.id as i64,
        number as i64,
        block.hash.to_string(),
        block.parent_hash.to_string(),
        block.timestamp as i64,
    )
    .execute(&mut *conn)
    .await?;
    load_cursor(conn, chain.id)
        .await?
        .ok_or_else(|| TickError::Halted("the cursor vanished".to_owned()))
}

struct Header {
    hash: B256,
    parent_hash: B256,
    timestamp: u64,
}

async fn header(node: &Node, number: u64) -> Result<Option<Header>, ChainError> {
    let block = node
        .get_block_by_number(BlockNumberOrTag::Number(number))
        .await?;
    Ok(block.map(|block| Header {
        hash: block.header.hash,
        parent_hash: block.header.parent_hash,
        timestamp: block.header.timestamp,
    }))
}

/// If the chain no longer has the cursor's block, steps back over the orphaned blocks, dropping
/// what was observed in them, until the cursor is on the chain again. Only unconfirmed
/// observations can be dropped: a reorg that would orphan an applied one halts the listener.
async fn rewind_if_reorged(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
    node: &Node,
    mut cursor: Cursor,
) -> Result<Cursor, TickError> {
    loop {
        let on_chain = header(node, cursor.number as u64).await?;
        if on_chain.is_some_and(|block| block.hash.to_string() == cursor.hash) {
            return Ok(cursor);
        }
        cursor = step_back(conn, chain, &cursor).await?;
    }
}

/// Drops the cursor's block and its unconfirmed observations; the cursor moves to its parent.
async fn step_back(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
    cursor: &Cursor,
) -> Result<Cursor, TickError> {
    let chain_id = chain.id as i64;
    let mut tx = conn.begin().await?;
    // Replicas step back together after a reorg: the cursor row is locked, and one that another
    // replica already moved is left to the next round, which starts from where it is now.
    let current = sqlx::query!(
        "SELECT block_number, block_hash FROM chain_cursors WHERE chain_id = $1 FOR UPDATE",
        chain_id
    )
    .fetch_one(&mut *tx)
    .await?;
    if (current.block_number, current.block_hash.as_str()) != (cursor.number, cursor.hash.as_str())
    {
        return Ok(Cursor {
            number: current.block_number,
            hash: current.block_hash,
        });
    }
    let applied = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM chain_observations
            WHERE chain_id = $1 AND block_number >= $2 AND applied_at IS NOT NULL"#,
        chain_id,
        cursor.number,
    )
    .fetch_one(&mut *tx)
    .await?;
    let parent = sqlx::query!(
        "SELECT number, hash FROM chain_blocks WHERE chain_id = $1 AND number = $2",
        chain_id,
        cursor.number - 1,
    )
    .fetch_optional(&mut *tx)
    .await?;
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
            return Err(TickError::Halted(why));
        }
    };
    let dropped = sqlx::query!(
        "DELETE FROM chain_observations WHERE chain_id = $1 AND block_number >= $2 AND applied_at IS NULL",
        chain_id,
        cursor.number,
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    sqlx::query!(
        "DELETE FROM chain_blocks WHERE chain_id = $1 AND number >= $2",
        chain_id,
        cursor.number
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
    metrics::counter!(names::CHAIN_REORGS, "chain" => chain.name.clone()).increment(1);
    tracing::warn!(chain = %chain.name, block = cursor.number, hash = %cursor.hash, dropped, "reorg: block orphaned");
    load_cursor(conn, chain.id)
        .await?
        .ok_or_else(|| TickError::Halted("the cursor vanished".to_owned()))
}

/// Follows the block after `cursor`: records the nonce uses in it and moves the cursor, in one
/// transaction. `None` when the block does not extend the cursor (a reorg), or another replica
/// moved the cursor first.
async fn follow(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
    node: &Node,
    cursor: &Cursor,
) -> Result<Option<Cursor>, TickError> {
    let number = cursor.number as u64 + 1;
    let Some(block) = header(node, number).await? else {
        return Ok(None);
    };
    if block.parent_hash.to_string() != cursor.hash {
        return Ok(None);
    }
    let logs = node
        .get_logs(
            &Filter::new()
                .at_block_hash(block.hash)
                .event_signature(Eip3009::AuthorizationUsed::SIGNATURE_HASH),
        )
        .await?;
    let mut observations = Vec::new();
    for log in logs {
        if let Some(observation) = observe(conn, chain, node, &log).await? {
            observations.push(observation);
        }
    }
    let chain_id = chain.id as i64;
    let hash = block.hash.to_string();
    let mut tx = conn.begin().await?;
    let moved = sqlx::query!(
        "UPDATE chain_cursors SET block_number = $2, block_hash = $3, updated_at = now()
          WHERE chain_id = $1 AND block_number = $4 AND block_hash = $5 AND halted IS NULL",
        chain_id,
        number as i64,
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
    sqlx::query!(
        "INSERT INTO chain_blocks (chain_id, number, hash, parent_hash, timestamp) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (chain_id, number) DO UPDATE SET hash = $3, parent_hash = $4, timestamp = $5",
        chain_id,
        number as i64,
        hash,
        block.parent_hash.to_string(),
        block.timestamp as i64,
    )
    .execute(&mut *tx)
    .await?;
    for o in &observations {
        sqlx::query!(
            r#"
            INSERT INTO chain_observations
                (chain_id, transaction_hash, log_index, block_number, block_hash, block_timestamp,
                 merchant_id, intent_id, token, transfer_from, transfer_to, transfer_value, pays_intent)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::text::numeric, $13)
            ON CONFLICT DO NOTHING
            "#,
            chain_id,
            o.transaction_hash,
            o.log_index,
            number as i64,
            hash,
            block.timestamp as i64,
            o.merchant_id,
            o.intent_id,
            o.token,
            o.transfer_from,
            o.transfer_to,
            o.transfer_value,
            o.pays_intent,
        )
        .execute(&mut *tx)
        .await?;
        tracing::info!(chain = %chain.name, intent = %o.intent_id, tx = %o.transaction_hash, block = number, pays = o.pays_intent, "nonce used on chain");
    }
    tx.commit().await?;
    Ok(Some(Cursor {
        number: number as i64,
        hash,
    }))
}

struct Observation {
    transaction_hash: String,
    log_index: i32,
    merchant_id: String,
    intent_id: String,
    token: String,
    transfer_from: Option<String>,
    transfer_to: Option<String>,
    transfer_value: Option<String>,
    pays_intent: bool,
}

/// An `AuthorizationUsed` log, if it used an intent's nonce on the intent's own token for its
/// payer; with what the same transaction's next `Transfer` of that token moved.
async fn observe(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
    node: &Node,
    log: &Log,
) -> Result<Option<Observation>, TickError> {
    let Ok(used) = Eip3009::AuthorizationUsed::decode_log_data(log.data()) else {
        return Ok(None);
    };
    let token = log.address().to_checksum(None);
    let intent = sqlx::query!(
        r#"SELECT merchant_id, id, payer, payee, amount::text AS "amount!" FROM payment_intents
            WHERE chain_nonce = $1 AND chain = $2 AND token = $3"#,
        used.nonce.as_slice(),
        chain.name,
        token,
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(intent) = intent else {
        return Ok(None);
    };
    // A nonce belongs to its authorizer: another address using the same bytes burns nothing of ours.
    if used.authorizer.to_checksum(None) != intent.payer {
        return Ok(None);
    }
    let (Some(tx_hash), Some(log_index)) = (log.transaction_hash, log.log_index) else {
        return Ok(None);
    };
    let receipt = node
        .get_transaction_receipt(tx_hash)
        .await?
        .ok_or_else(|| ChainError::Refused(format!("no receipt for {tx_hash}")))?;
    let transfer = receipt
        .inner
        .logs()
        .iter()
        .filter(|l| l.address() == log.address() && l.log_index.is_some_and(|i| i > log_index))
        .find_map(|l| Eip3009::Transfer::decode_log_data(l.data()).ok());
    let pays_intent = transfer.as_ref().is_some_and(|t| {
        t.from.to_checksum(None) == intent.payer
            && t.to.to_checksum(None) == intent.payee
            && t.value.to_string() == intent.amount
    });
    Ok(Some(Observation {
        transaction_hash: tx_hash.to_string(),
        log_index: log_index as i32,
        merchant_id: intent.merchant_id,
        intent_id: intent.id,
        token,
        transfer_from: transfer.as_ref().map(|t| t.from.to_checksum(None)),
        transfer_to: transfer.as_ref().map(|t| t.to.to_checksum(None)),
        transfer_value: transfer.as_ref().map(|t| t.value.to_string()),
        pays_intent,
    }))
}

/// Moves every intent whose nonce use is now confirmed: `succeeded` (or recorded on a canceled
/// intent) if the transfer paid it, `failed` if the nonce was burned otherwise. Each in its own
/// transaction with its event and, for a payment, its ledger entry; `SKIP LOCKED` lets replicas
/// share the work.
async fn settle_confirmed(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
    confirmed: i64,
) -> Result<(), TickError> {
    loop {
        let mut tx = conn.begin().await?;
        let next = sqlx::query!(
            r#"SELECT transaction_hash, log_index, block_number, block_timestamp, merchant_id, intent_id, pays_intent,
                      token, transfer_from, transfer_value::text AS transfer_value
                 FROM chain_observations
                WHERE chain_id = $1 AND applied_at IS NULL AND block_number <= $2
                ORDER BY block_number, log_index
                LIMIT 1
                  FOR UPDATE SKIP LOCKED"#,
            chain.id as i64,
            confirmed,
        )
        .fetch_optional(&mut *tx)
        .await?;
        let Some(o) = next else { return Ok(()) };
        let (action, outcome) = if o.pays_intent {
            (Action::Settle, "succeeded")
        } else {
            (Action::BurnNonce, "nonce_used_otherwise")
        };
        let settlement = Settlement {
            transaction_hash: o.transaction_hash.clone(),
            block_number: o.block_number as u64,
            block_timestamp: OffsetDateTime::from_unix_timestamp(o.block_timestamp)
                .map_err(|e| sqlx::Error::Decode(e.into()))?,
        };
        let paid = o.pays_intent.then_some(&settlement);
        let outcome = match repo::apply_paid(
            &mut tx,
            &o.merchant_id,
            &o.intent_id,
            action,
            &Actor::Chain,
            paid,
        )
        .await
        {
            Ok(intent) => {
                tracing::info!(chain = %chain.name, intent = %intent.id, state = %intent.state, tx = %o.transaction_hash, "settled on chain");
                outcome
            }
            // Already moved by an earlier observation of the same nonce, or final: nothing to do.
            Err(TransitionError::Forbidden { from, .. }) => {
                tracing::warn!(chain = %chain.name, intent = %o.intent_id, %from, tx = %o.transaction_hash, "confirmed nonce use for an intent that cannot move");
                "ignored"
            }
            Err(TransitionError::NotFound) => "ignored",
            Err(TransitionError::Database(e)) => return Err(e.into()),
        };
        // Money that moved on chain is in the ledger, whatever the intent could still do.
        if let (true, Some(payer), Some(amount)) =
            (o.pays_intent, &o.transfer_from, &o.transfer_value)
        {
            let event = ledger::ChainEvent {
                chain: &chain.name,
                transaction_hash: &o.transaction_hash,
                log_index: o.log_index,
            };
            let payment = ledger::Entry::payment(
                &o.merchant_id,
                &o.intent_id,
                payer,
                event,
                &o.token,
                amount,
            );
            ledger::post(&mut tx, &payment).await?;
        }
        sqlx::query!(
            "UPDATE chain_observations SET applied_at = now() WHERE chain_id = $1 AND transaction_hash = $2 AND log_index = $3",
            chain.id as i64,
            o.transaction_hash,
            o.log_index,
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        metrics::counter!(names::SETTLEMENTS, "chain" => chain.name.clone(), "outcome" => outcome)
            .increment(1);
    }
}

/// Expires intents whose authorization the newest confirmed block's timestamp has passed.
async fn expire_by_chain_time(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
    confirmed: i64,
) -> Result<(), TickError> {
    let Some(block_timestamp) = sqlx::query_scalar!(
        "SELECT timestamp FROM chain_blocks WHERE chain_id = $1 AND number = $2",
        chain.id as i64,
        confirmed,
    )
    .fetch_optional(&mut *conn)
    .await?
    else {
        return Ok(());
    };
    let expiry = Expiry::ChainTime {
        chain: &chain.name,
        block_timestamp,
    };
    let expired = repo::expire_due(conn, crate::sweeper::BATCH, &expiry).await?;
    if expired > 0 {
        metrics::counter!(names::SETTLEMENTS, "chain" => chain.name.clone(), "outcome" => "expired").increment(expired);
        tracing::info!(chain = %chain.name, expired, block_timestamp, "expired by chain time");
    }
    Ok(())
}
