//! SQL on `refunds`. Every change bumps the refund's version and writes its event in the same
//! transaction; a create holds the intent's row lock while it sums what is already refunded.

use alloy::primitives::U256;
use serde::Serialize;
use sqlx::{Connection, PgConnection, types::Json};
use time::OffsetDateTime;

use super::{
    domain::{self, Reason, RefundId, RefundMethod},
    state::{self, Action, RefundState},
    watch::{RefundNonceKind, RefundTransferKind},
};
use crate::{
    auth::MerchantId,
    events::{self, NewEvent},
    intents::{
        domain::{Address, Amount, ExpiresIn, IntentId},
        order::DuplicatePayment,
        repo::{self as intents, Settlement},
        state::IntentState,
    },
    rails::follower::ObservationKind,
};

/// A refund as the API shows it; field order is the response's key order.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Refund {
    /// `re_` + 24 lowercase hex digits.
    #[schema(example = "re_8c1f0e7e2d9a4b6c5d3e2f10")]
    pub id: String,
    /// The intent it pays back.
    pub payment_intent: String,
    pub state: RefundState,
    /// Starts at 1 and grows by one on every state change.
    pub version: i32,
    /// Token base units, as a decimal string.
    #[schema(example = "25000000")]
    pub amount: String,
    #[schema(example = "evm:31337")]
    pub chain: String,
    /// EIP-55 checksummed.
    pub token: String,
    /// The merchant's address the intent paid, which signs and pays the refund. EIP-55.
    pub merchant: String,
    /// Who receives it, EIP-55: the intent's payer; for a duplicate payment, its sender or the
    /// destination the merchant named.
    pub payer: String,
    /// `duplicate`, `fraudulent` or `requested_by_customer`, if given.
    pub reason: Option<String>,
    /// `authorization_expired`, `authorization_canceled` or `nonce_used_otherwise` once failed,
    /// or the reason it was pending with when it expired.
    pub failure_reason: Option<String>,
    /// While `processing`: why the transfer waits for now: the token refuses it
    /// (`insufficient_balance`, `token_paused`, `account_blacklisted`), or the relayer cannot send
    /// it (`relayer_underfunded`, `gas_price_above_cap`).
    pub pending_reason: Option<String>,
    /// The confirmed transaction that paid it back, once it did.
    #[schema(value_type = Option<Settlement>)]
    pub settlement: Option<Json<Settlement>>,
    /// The authorization's `validBefore`: unconfirmed by then, the refund fails.
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    /// The order's duplicate payment it pays back (`dp_…`), if it is one's: then on that
    /// payment's chain and token, and not counted in the intent's `amount_refunded`.
    pub duplicate_payment: Option<String>,
    /// `authorization` (the merchant signs, the relayer submits) or `transfer` (a duplicate
    /// payment in a token without EIP-3009: the merchant sends `amount` of `token` from
    /// `merchant` to `payer` itself, before `expires_at`, and the refund succeeds when that
    /// transfer is confirmed).
    pub payment_method: RefundMethod,
}

/// A refund with its merchant, as every query reads it.
pub struct Row {
    pub merchant_id: String,
    pub id: String,
    pub payment_intent: String,
    pub state: RefundState,
    pub version: i32,
    pub amount: String,
    pub chain: String,
    pub token: String,
    pub merchant: String,
    pub payer: String,
    pub reason: Option<String>,
    pub failure_reason: Option<String>,
    pub pending_reason: Option<String>,
    pub settlement: Option<Json<Settlement>>,
    pub expires_at: OffsetDateTime,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
    pub duplicate_payment: Option<String>,
    pub payment_method: RefundMethod,
}

impl From<Row> for Refund {
    fn from(row: Row) -> Self {
        Self {
            id: row.id,
            payment_intent: row.payment_intent,
            state: row.state,
            version: row.version,
            amount: row.amount,
            chain: row.chain,
            token: row.token,
            merchant: row.merchant,
            payer: row.payer,
            reason: row.reason,
            failure_reason: row.failure_reason,
            pending_reason: row.pending_reason,
            settlement: row.settlement,
            expires_at: row.expires_at,
            created_at: row.created_at,
            updated_at: row.updated_at,
            duplicate_payment: row.duplicate_payment,
            payment_method: row.payment_method,
        }
    }
}

/// What a merchant asks to refund.
pub struct NewRefund<'a> {
    /// `None`: all that is left to refund.
    pub amount: Option<&'a Amount>,
    /// The id of an order's duplicate payment to pay back instead of the intent's payment.
    pub duplicate_payment: Option<&'a str>,
    /// Where a duplicate payment goes back to: its sender if `None`.
    pub destination: Option<Address>,
    pub reason: Option<Reason>,
    pub expires_in: ExpiresIn,
}

/// Why a refund was not created.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error("no such payment intent")]
    NoIntent,
    #[error("a {0} payment intent that was never paid has nothing to refund")]
    NotPaid(IntentState),
    #[error(
        "{requested} exceeds what is left to refund of the payment: {refundable} (refunds that may still move money count)"
    )]
    Exceeds {
        requested: String,
        refundable: String,
    },
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Creates a refund of the merchant's paid intent and its `refund.created` event. The intent's
/// row is locked first, so of two racing refunds the second sums the first: refunds that may
/// still move money (all but `failed`) never exceed what the intent was paid.
/// `duplicate` is the duplicate payment `new` names, as the intent lists it.
pub async fn create(
    conn: &mut PgConnection,
    merchant: &MerchantId,
    intent: &IntentId,
    new: &NewRefund<'_>,
    duplicate: Option<&DuplicatePayment>,
    method: RefundMethod,
) -> Result<Refund, CreateError> {
    let paid = intents::lock_for_refund(conn, merchant, intent)
        .await?
        .ok_or(CreateError::NoIntent)?;
    // What is paid back: the intent's payment, or one of its duplicate payments, each on its own.
    let (duplicate, chain, token, payer, total) = match duplicate {
        None if !paid.paid => return Err(CreateError::NotPaid(paid.state)),
        None => (None, paid.chain, paid.token, paid.payer, paid.amount),
        Some(duplicate) => (
            Some(duplicate.id.as_str()),
            duplicate.chain.clone(),
            duplicate.token.clone(),
            Some(
                new.destination
                    .map_or_else(|| duplicate.from.clone(), |d| d.to_checksum()),
            ),
            duplicate.amount.clone(),
        ),
    };
    // A statement of its own, after the lock: it sees every refund committed before the lock.
    let reserved = sqlx::query_scalar!(
        r#"SELECT COALESCE(sum(amount), 0)::text AS "reserved!" FROM refunds
            WHERE merchant_id = $1 AND intent_id = $2 AND state <> 'failed'
              AND duplicate_payment IS NOT DISTINCT FROM $3"#,
        merchant.as_str(),
        intent.as_str(),
        duplicate,
    )
    .fetch_one(&mut *conn)
    .await?;
    let number = |raw: &str| {
        raw.parse::<U256>()
            .map_err(|e| sqlx::Error::Decode(format!("stored amount {raw}: {e}").into()))
    };
    let refundable = number(&total)?.saturating_sub(number(&reserved)?);
    let requested = match new.amount {
        Some(amount) => number(amount.as_str())?,
        None => refundable,
    };
    if requested.is_zero() || requested > refundable {
        return Err(CreateError::Exceeds {
            requested: requested.to_string(),
            refundable: refundable.to_string(),
        });
    }
    let id = RefundId::generate();
    let row = sqlx::query_as!(
        Row,
        r#"
        INSERT INTO refunds (merchant_id, id, intent_id, state, version, amount, chain, token, payee, payer,
                             reason, chain_nonce, expires_at, duplicate_payment, payment_method)
        VALUES ($1, $3, $2, 'created', 1, $4::text::numeric, $8, $9, $10, $11, $5, $6,
                date_trunc('second', now() + make_interval(secs => $7)), $12, $13)
        RETURNING merchant_id, id, intent_id AS payment_intent, state AS "state: RefundState", version,
                  amount::text AS "amount!", chain, token, payee AS merchant, payer, reason, failure_reason,
                  pending_reason, settlement AS "settlement: Json<Settlement>", expires_at, created_at, updated_at,
               duplicate_payment, payment_method AS "payment_method: RefundMethod"
        "#,
        merchant.as_str(),
        intent.as_str(),
        id.as_str(),
        requested.to_string(),
        new.reason.map(Reason::as_str),
        &domain::chain_nonce(id.as_str())[..],
        f64::from(new.expires_in.seconds()),
        chain,
        token,
        paid.payee,
        payer,
        duplicate,
        method as RefundMethod,
    )
    .fetch_one(&mut *conn)
    .await?;
    let refund = Refund::from(row);
    record_event(
        conn,
        merchant.as_str(),
        &state::event_type(refund.state),
        &refund,
    )
    .await?;
    Ok(refund)
}

async fn record_event(
    conn: &mut PgConnection,
    merchant: &str,
    kind: &str,
    refund: &Refund,
) -> Result<(), sqlx::Error> {
    let event = NewEvent {
        kind: kind.to_owned(),
        subject_id: &refund.id,
        subject_version: refund.version,
        object: serde_json::to_string(refund).expect("a refund always serializes"),
    };
    events::record(conn, merchant, &event).await
}

pub async fn find(
    conn: &mut PgConnection,
    merchant: &MerchantId,
    id: &RefundId,
) -> Result<Option<Refund>, sqlx::Error> {
    let row = sqlx::query_as!(
        Row,
        r#"
        SELECT merchant_id, id, intent_id AS payment_intent, state AS "state: RefundState", version,
               amount::text AS "amount!", chain, token, payee AS merchant, payer, reason, failure_reason,
               pending_reason, settlement AS "settlement: Json<Settlement>", expires_at, created_at, updated_at,
               duplicate_payment, payment_method AS "payment_method: RefundMethod"
          FROM refunds WHERE merchant_id = $1 AND id = $2
        "#,
        merchant.as_str(),
        id.as_str(),
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(Refund::from))
}

/// Where a page of the listing starts: strictly after this refund, newest first.
pub struct Cursor {
    pub created_at: OffsetDateTime,
    pub id: String,
}

pub async fn cursor(
    conn: &mut PgConnection,
    merchant: &MerchantId,
    id: &RefundId,
) -> Result<Option<Cursor>, sqlx::Error> {
    sqlx::query_as!(
        Cursor,
        "SELECT created_at, id FROM refunds WHERE merchant_id = $1 AND id = $2",
        merchant.as_str(),
        id.as_str(),
    )
    .fetch_optional(conn)
    .await
}

/// Up to `limit` of a merchant's refunds, newest first, after `after`, optionally of one intent.
pub async fn list(
    conn: &mut PgConnection,
    merchant: &MerchantId,
    intent: Option<&IntentId>,
    after: Option<&Cursor>,
    limit: i64,
) -> Result<Vec<Refund>, sqlx::Error> {
    let rows = sqlx::query_as!(
        Row,
        r#"
        SELECT merchant_id, id, intent_id AS payment_intent, state AS "state: RefundState", version,
               amount::text AS "amount!", chain, token, payee AS merchant, payer, reason, failure_reason,
               pending_reason, settlement AS "settlement: Json<Settlement>", expires_at, created_at, updated_at,
               duplicate_payment, payment_method AS "payment_method: RefundMethod"
          FROM refunds
         WHERE merchant_id = $1
           AND ($2::text IS NULL OR intent_id = $2)
           AND ($3::timestamptz IS NULL OR (created_at, id) < ($3, $4))
         ORDER BY created_at DESC, id DESC
         LIMIT $5
        "#,
        merchant.as_str(),
        intent.map(IntentId::as_str),
        after.map(|c| c.created_at),
        after.map(|c| c.id.as_str()),
        limit,
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(Refund::from).collect())
}

/// Why a refund did not change.
#[derive(Debug, thiserror::Error)]
pub enum TransitionError {
    #[error("no such refund")]
    NotFound,
    #[error("a {from} refund cannot {action}")]
    Forbidden {
        from: RefundState,
        action: &'static str,
    },
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Applies `action` to the refund `id` of `merchant` if the machine allows it, by compare-and-set
/// on its version, with its event; a refund that succeeds adds its amount to its intent's
/// `amount_refunded` (`intents::repo::add_refunded`) in the caller's transaction.
pub async fn apply(
    conn: &mut PgConnection,
    merchant: &str,
    id: &str,
    action: Action,
    settlement: Option<&Settlement>,
) -> Result<Refund, TransitionError> {
    const ROUNDS: usize = 8;
    for _ in 0..ROUNDS {
        let current = sqlx::query!(
            r#"SELECT state AS "state: RefundState", version FROM refunds WHERE merchant_id = $1 AND id = $2"#,
            merchant,
            id,
        )
        .fetch_optional(&mut *conn)
        .await?
        .ok_or(TransitionError::NotFound)?;
        let (to, failure_reason) =
            state::transition(current.state, action).ok_or(TransitionError::Forbidden {
                from: current.state,
                action: action.as_str(),
            })?;
        let moved = sqlx::query_as!(
            Row,
            r#"
            WITH moved AS (
                UPDATE refunds
                   SET state = $4, version = version + 1, updated_at = now(),
                       failure_reason = COALESCE($5, failure_reason),
                       settlement = COALESCE($6, settlement),
                       pending_reason = CASE WHEN $4 = 'processing' THEN pending_reason END
                 WHERE merchant_id = $1 AND id = $2 AND version = $3
             RETURNING *
            )
            SELECT merchant_id, id, intent_id AS payment_intent, state AS "state: RefundState", version,
                   amount::text AS "amount!", chain, token, payee AS merchant, payer, reason, failure_reason,
                   pending_reason, settlement AS "settlement: Json<Settlement>", expires_at, created_at, updated_at,
               duplicate_payment, payment_method AS "payment_method: RefundMethod"
              FROM moved
            "#,
            merchant,
            id,
            current.version,
            to.as_str(),
            failure_reason,
            settlement.map(Json) as _,
        )
        .fetch_optional(&mut *conn)
        .await?;
        if let Some(row) = moved {
            let refund = Refund::from(row);
            // A duplicate payment's refund returns money the order never counted.
            if refund.state == RefundState::Succeeded && refund.duplicate_payment.is_none() {
                intents::add_refunded(conn, merchant, &refund.payment_intent, &refund.amount)
                    .await?;
            }
            record_event(conn, merchant, &state::event_type(to), &refund).await?;
            return Ok(refund);
        }
    }
    Err(TransitionError::Database(sqlx::Error::Protocol(format!(
        "refund {id} kept changing under {ROUNDS} transition attempts"
    ))))
}

/// A `processing` refund says why the token refuses it for now. Not a state change: no version,
/// no event (the merchant learns it from the refund, and from its failure if it expires so).
pub async fn hold(conn: &mut PgConnection, id: &str, reason: &str) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE refunds SET pending_reason = $2, updated_at = now()
          WHERE id = $1 AND state = 'processing' AND pending_reason IS DISTINCT FROM $2",
        id,
        reason,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The refund a nonce on chain belongs to: who signs (`payee`, the merchant's address), who is
/// paid back how much.
#[derive(Debug)]
pub struct NonceOwner {
    pub merchant_id: String,
    pub id: String,
    pub intent_id: String,
    pub payee: String,
    pub payer: String,
    pub amount: String,
}

/// Who the open transfer refunds on `chain` pay: the recipients whose transfers the refund watch
/// reads.
pub async fn transfer_recipients_on(
    conn: &mut PgConnection,
    chain: &str,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT DISTINCT payer FROM refunds
          WHERE chain = $1 AND payment_method = 'transfer' AND state = 'created'",
        chain
    )
    .fetch_all(conn)
    .await
}

/// A transfer refund a transfer on chain pays.
#[derive(Debug)]
pub struct TransferOwner {
    pub merchant_id: String,
    pub id: String,
    pub intent_id: String,
}

/// The oldest open transfer refund on `chain` that a transfer of `amount` of `token` from `from`
/// to `to` pays, other than `taken` (refunds already matched to another transfer).
pub async fn paid_by_transfer(
    conn: &mut PgConnection,
    chain: &str,
    token: &str,
    from: &str,
    to: &str,
    amount: &str,
    taken: &[String],
) -> Result<Option<TransferOwner>, sqlx::Error> {
    sqlx::query_as!(
        TransferOwner,
        r#"SELECT merchant_id, id, intent_id FROM refunds r
            WHERE chain = $1 AND token = $2 AND payee = $3 AND payer = $4
              AND amount = $5::text::numeric AND payment_method = 'transfer' AND state = 'created'
              AND id <> ALL($6::text[])
              AND NOT EXISTS (SELECT 1 FROM chain_observations o
                               WHERE o.kind = $7 AND o.subject = r.id)
            ORDER BY created_at, id
            LIMIT 1"#,
        chain,
        token,
        from,
        to,
        amount,
        taken,
        RefundTransferKind::Seen.as_str(),
    )
    .fetch_optional(conn)
    .await
}

/// Every transfer refund on `chain` that succeeded: the transfer the ledger booked for it, for
/// `reconcile` to find on chain.
pub struct SettledTransfer {
    pub id: String,
    pub token: String,
    pub payee: String,
    pub payer: String,
    pub amount: String,
    pub settlement: Json<Settlement>,
}

pub async fn settled_transfers_on(
    conn: &mut PgConnection,
    chain: &str,
) -> Result<Vec<SettledTransfer>, sqlx::Error> {
    sqlx::query_as!(
        SettledTransfer,
        r#"SELECT id, token, payee, payer, amount::text AS "amount!",
                  settlement AS "settlement!: Json<Settlement>"
             FROM refunds
            WHERE chain = $1 AND payment_method = 'transfer' AND state = 'succeeded'"#,
        chain
    )
    .fetch_all(conn)
    .await
}

/// The refund whose authorization carries `nonce` on `token` on `chain`, in any state (the refund
/// watch, reconcile). Its authorizer is checked by the caller against the log.
pub async fn by_chain_nonce(
    conn: &mut PgConnection,
    chain: &str,
    token: &str,
    nonce: &[u8],
) -> Result<Option<NonceOwner>, sqlx::Error> {
    sqlx::query_as!(
        NonceOwner,
        r#"SELECT merchant_id, id, intent_id, payee, payer, amount::text AS "amount!" FROM refunds
            WHERE chain_nonce = $1 AND chain = $2 AND token = $3"#,
        nonce,
        chain,
        token,
    )
    .fetch_optional(conn)
    .await
}

/// Fails up to `batch` open refunds on `chain` whose authorization's `validBefore` is at or before
/// `block_timestamp` (a confirmed block's time) and whose nonce no observed transaction used or
/// canceled, each with its `refund.failed` event. Returns how many.
pub async fn expire_due(
    conn: &mut PgConnection,
    chain: &str,
    block_timestamp: i64,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    let at = OffsetDateTime::from_unix_timestamp(block_timestamp)
        .map_err(|e| sqlx::Error::Decode(e.into()))?;
    // The failures and their events commit together.
    let mut tx = conn.begin().await?;
    let moved = sqlx::query_as!(
        Row,
        r#"
        WITH due AS (
            SELECT merchant_id, id, version FROM refunds r
             WHERE state IN ('created', 'processing') AND chain = $1 AND expires_at <= $2
               AND NOT EXISTS (SELECT 1 FROM chain_observations o
                                WHERE o.kind = ANY($4::text[]) AND o.subject = r.id)
             ORDER BY expires_at
             LIMIT $3
               FOR UPDATE SKIP LOCKED
        ), moved AS (
            UPDATE refunds r
               SET state = 'failed', version = r.version + 1, updated_at = now(),
                   failure_reason = COALESCE(r.pending_reason,
                                             CASE r.payment_method WHEN 'transfer' THEN 'transfer_not_seen'
                                                  ELSE 'authorization_expired' END),
                   pending_reason = NULL
              FROM due
             WHERE r.merchant_id = due.merchant_id AND r.id = due.id AND r.version = due.version
         RETURNING r.*
        )
        SELECT merchant_id, id, intent_id AS payment_intent, state AS "state: RefundState", version,
               amount::text AS "amount!", chain, token, payee AS merchant, payer, reason, failure_reason,
               pending_reason, settlement AS "settlement: Json<Settlement>", expires_at, created_at, updated_at,
               duplicate_payment, payment_method AS "payment_method: RefundMethod"
          FROM moved
        "#,
        chain,
        at,
        batch,
        &[RefundNonceKind::names(), RefundTransferKind::names()].concat() as &[&str],
    )
    .fetch_all(&mut *tx)
    .await?;
    let expired = moved.len() as u64;
    for row in moved {
        let merchant = row.merchant_id.clone();
        let refund = Refund::from(row);
        record_event(
            &mut tx,
            &merchant,
            &state::event_type(refund.state),
            &refund,
        )
        .await?;
    }
    tx.commit().await?;
    Ok(expired)
}
