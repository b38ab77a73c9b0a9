//! SQL on `payment_intents`.

use serde::Serialize;
use sqlx::{PgConnection, PgPool};
use time::OffsetDateTime;

use super::domain::{Address, Amount, Chain, ExpiresIn, IntentId};
use crate::auth::MerchantId;

/// A payment intent as the API shows it; field order is the response's key order (SPEC §3).
#[derive(Debug, Clone, Serialize)]
pub struct PaymentIntent {
    pub id: String,
    pub state: String,
    pub version: i32,
    pub amount: String,
    pub chain: String,
    pub token: String,
    pub payer: String,
    pub merchant: String,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub canceled_at: Option<OffsetDateTime>,
    pub cancellation_reason: Option<String>,
}

pub struct NewIntent {
    pub chain: Chain,
    pub token: Address,
    pub payer: Address,
    pub payee: Address,
    pub amount: Amount,
    pub expires_in: ExpiresIn,
}

pub async fn insert(
    conn: &mut PgConnection,
    merchant: &MerchantId,
    id: &IntentId,
    intent: &NewIntent,
) -> Result<PaymentIntent, sqlx::Error> {
    sqlx::query_as!(
        PaymentIntent,
        r#"
        INSERT INTO payment_intents (merchant_id, id, state, version, amount, chain, token, payer, payee, expires_at)
        VALUES ($1, $2, 'created', 1, $3::text::numeric, $4, $5, $6, $7, now() + make_interval(secs => $8))
        RETURNING id, state, version, amount::text AS "amount!", chain, token, payer, payee AS merchant,
                  expires_at, created_at, updated_at, canceled_at, cancellation_reason
        "#,
        merchant.as_str(),
        id.as_str(),
        intent.amount.as_str(),
        intent.chain.as_str(),
        intent.token.to_checksum(),
        intent.payer.to_checksum(),
        intent.payee.to_checksum(),
        f64::from(intent.expires_in.seconds()),
    )
    .fetch_one(conn)
    .await
}

pub async fn find(
    pool: &PgPool,
    merchant: &MerchantId,
    id: &IntentId,
) -> Result<Option<PaymentIntent>, sqlx::Error> {
    sqlx::query_as!(
        PaymentIntent,
        r#"
        SELECT id, state, version, amount::text AS "amount!", chain, token, payer, payee AS merchant,
               expires_at, created_at, updated_at, canceled_at, cancellation_reason
          FROM payment_intents
         WHERE merchant_id = $1 AND id = $2
        "#,
        merchant.as_str(),
        id.as_str(),
    )
    .fetch_optional(pool)
    .await
}
