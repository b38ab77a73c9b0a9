//! Who shares the limits, and the merchants' own limits: a worker in every replica notes that it
//! is alive, counts the replicas seen lately and reads `merchant_limits`, every few seconds, and
//! hands the [`Limiter`] a new [`Policy`]. Requests never wait on it: a round that fails leaves
//! the last policy in force.

use std::{collections::HashMap, num::NonZeroU32, time::Duration};

use uuid::Uuid;

use super::{LIMIT_REPLICAS, Limiter, OwnLimits};
use crate::{
    auth::MerchantId,
    db::Pool,
    workers::{Failed, Next, Schedule, Worker},
};

/// A replica not seen for this long no longer counts: its share goes to the others. A replica
/// that stops is counted this much longer, during which the others keep their smaller share.
const ALIVE_FOR: Duration = Duration::from_secs(10);

pub struct RegistryWorker {
    pool: Pool,
    limiter: Limiter,
    replica: Uuid,
}

impl RegistryWorker {
    pub fn new(pool: Pool, limiter: Limiter, replica: Uuid) -> Self {
        Self {
            pool,
            limiter,
            replica,
        }
    }

    pub fn schedule(every: Duration) -> Schedule {
        Schedule::every(every)
    }
}

impl Worker for RegistryWorker {
    async fn run_once(&mut self) -> Result<Next, Failed> {
        let mut conn = self.pool.acquire().await?;
        // The statement's snapshot predates its own upsert: count the others, then this one.
        let others = sqlx::query_scalar!(
            r#"
            WITH seen AS (
                INSERT INTO replicas (id, seen_at) VALUES ($1, now())
                ON CONFLICT (id) DO UPDATE SET seen_at = now()
            ), gone AS (
                DELETE FROM replicas WHERE seen_at < now() - interval '1 hour'
            )
            SELECT count(*) AS "others!" FROM replicas
             WHERE id <> $1 AND seen_at > now() - make_interval(secs => $2)
            "#,
            self.replica,
            ALIVE_FOR.as_secs_f64(),
        )
        .fetch_one(&mut *conn)
        .await?;
        let own =
            sqlx::query!("SELECT merchant_id, rate_per_second, concurrency FROM merchant_limits")
                .fetch_all(&mut *conn)
                .await?
                .into_iter()
                .map(|row| {
                    (
                        row.merchant_id,
                        OwnLimits {
                            rate_per_second: row.rate_per_second.map(non_negative),
                            concurrency: row.concurrency.map(non_negative),
                        },
                    )
                })
                .collect::<HashMap<_, _>>();
        let replicas = NonZeroU32::new(u32::try_from(others + 1).unwrap_or(u32::MAX))
            .unwrap_or(NonZeroU32::MIN);
        metrics::gauge!(LIMIT_REPLICAS).set(replicas.get() as f64);
        let policy = self.limiter.policy().with(own, replicas);
        self.limiter.publish(policy);
        Ok(Next::Wait)
    }
}

fn non_negative(value: i32) -> u32 {
    u32::try_from(value).unwrap_or(0)
}

/// Sets a merchant's own limits (`payments-api limits set`); `None` is the default again.
/// Sets them, with the audit log's line (`who` changed them) in the same transaction.
pub async fn set(
    pool: &Pool,
    merchant: &MerchantId,
    own: OwnLimits,
    who: &crate::audit::Who,
) -> anyhow::Result<()> {
    let to_i32 = |limit: Option<u32>| limit.map(i32::try_from).transpose();
    let mut tx = crate::db::OpenTransaction::begin_on_pool(pool).await?;
    sqlx::query!(
        "INSERT INTO merchant_limits (merchant_id, rate_per_second, concurrency)
         VALUES ($1, $2, $3)
         ON CONFLICT (merchant_id) DO UPDATE
            SET rate_per_second = excluded.rate_per_second,
                concurrency = excluded.concurrency, updated_at = now()",
        merchant.as_str(),
        to_i32(own.rate_per_second)?,
        to_i32(own.concurrency)?,
    )
    .execute(&mut *tx)
    .await?;
    crate::audit::record(&mut tx, merchant.as_str(), who, "limits.set", None).await?;
    tx.commit().await.map_err(crate::error::ApiError::from)?;
    Ok(())
}

/// A merchant's own limits (`payments-api limits show`).
pub async fn show(pool: &Pool, merchant: &MerchantId) -> Result<OwnLimits, sqlx::Error> {
    let row = sqlx::query!(
        "SELECT rate_per_second, concurrency FROM merchant_limits WHERE merchant_id = $1",
        merchant.as_str(),
    )
    .fetch_optional(&mut *pool.acquire().await?)
    .await?;
    Ok(row.map_or_else(OwnLimits::default, |row| OwnLimits {
        rate_per_second: row.rate_per_second.map(non_negative),
        concurrency: row.concurrency.map(non_negative),
    }))
}
