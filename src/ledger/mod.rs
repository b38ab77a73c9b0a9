//! The double-entry ledger (`docs/settlement.md`, "Ledger"): each confirmed payment is one entry
//! whose postings move its amount from the payer's account to the merchant's, per chain and
//! token. The database refuses an entry that does not sum to zero, and any change to a written one.

pub mod reconcile;
pub mod routes;

use sqlx::PgConnection;

pub use routes::router;

/// A confirmed payment of an intent, as the chain showed it.
pub struct Payment<'a> {
    pub merchant_id: &'a str,
    pub intent_id: &'a str,
    pub chain: &'a str,
    pub token: &'a str,
    pub payer: &'a str,
    /// Token base units, decimal.
    pub amount: &'a str,
    pub transaction_hash: &'a str,
    pub log_index: i32,
}

/// Writes the payment's entry in the caller's transaction (the one that settles the intent).
/// Returns false if this payment already has its entry.
pub async fn record_payment(
    conn: &mut PgConnection,
    payment: &Payment<'_>,
) -> Result<bool, sqlx::Error> {
    let written = sqlx::query_scalar!(
        r#"
        WITH entry AS (
            INSERT INTO ledger_entries (merchant_id, intent_id, chain, transaction_hash, log_index)
            VALUES ($1, $2, $3, $4, $5)
            ON CONFLICT (chain, transaction_hash, log_index) DO NOTHING
            RETURNING id
        ), postings AS (
            INSERT INTO ledger_postings (entry_id, account, chain, token, amount)
            SELECT entry.id, side.account, $3, $6, side.amount
              FROM entry,
                   (VALUES ('payer:' || $7, -($8::text::numeric)),
                           ('merchant:' || $1, $8::text::numeric)) AS side (account, amount)
        )
        SELECT count(*) AS "written!" FROM entry
        "#,
        payment.merchant_id,
        payment.intent_id,
        payment.chain,
        payment.transaction_hash,
        payment.log_index,
        payment.token,
        payment.payer,
        payment.amount,
    )
    .fetch_one(conn)
    .await?;
    Ok(written == 1)
}
