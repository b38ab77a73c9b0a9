//! Bearer-token authentication (`docs/api.md`, "Authentication"). Tokens are stored only as SHA-256 hashes and looked up by
//! hash, so no secret is ever compared byte by byte and a leaked table reveals no usable token.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use axum::{
    extract::{Request, State},
    http::header,
    middleware::Next,
    response::{IntoResponse, Response},
};
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::{
    audit::{self, Who},
    db::{Failure, OpenTransaction, Pool},
    error::ApiError,
    idempotency::Scope,
    workers::Outage,
};

/// The merchant account a request is authenticated as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MerchantId(String);

impl MerchantId {
    /// 1–64 of `[A-Za-z0-9_-]`, the same rule the `api_keys` table checks.
    pub fn parse(raw: &str) -> anyhow::Result<Self> {
        let valid = (1..=64).contains(&raw.len())
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        anyhow::ensure!(
            valid,
            "a merchant id is 1-64 characters of A-Z, a-z, 0-9, '_' and '-'"
        );
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Looks tokens up by hash, remembering each answer for a second so that a burst of requests costs
/// one database round trip for its credentials, and a revoked or expired key stops working on every
/// replica within that second. Known and refused tokens are remembered apart: a flood of guesses
/// churns only the refused ones and never pushes a merchant's key out, while a revoked key left in
/// a retry loop costs one lookup a second, not one per request.
///
/// Behind one `Arc`: axum clones a layer's state for every request, and a refusal should cost
/// one reference count, not a copy of the cache's handles.
#[derive(Clone)]
pub struct Authenticator(Arc<Keys>);

struct Keys {
    pool: Pool,
    known: moka::sync::Cache<[u8; 32], KeyOwner>,
    refused: moka::sync::Cache<[u8; 32], ()>,
}

/// Who a known token belongs to, and the counter of the key's uses: registered once per lookup,
/// so a request that finds its key remembered counts its use without building a metric key.
#[derive(Clone)]
struct KeyOwner {
    merchant: MerchantId,
    uses: metrics::Counter,
}

/// `api_key_requests_total{prefix}`: requests authenticated by each key, named by its prefix
/// (`none` for keys made before prefixes): which keys are still in use before one is revoked.
pub const API_KEY_REQUESTS: &str = "api_key_requests_total";

impl Authenticator {
    const KNOWN_FOR: Duration = Duration::from_secs(1);

    pub fn new(pool: Pool) -> Self {
        fn remembered<V: Clone + Send + Sync + 'static>() -> moka::sync::Cache<[u8; 32], V> {
            moka::sync::Cache::builder()
                .max_capacity(10_000)
                .time_to_live(Authenticator::KNOWN_FOR)
                .build()
        }
        Self(Arc::new(Keys {
            pool,
            known: remembered(),
            refused: remembered(),
        }))
    }

    async fn owner(&self, token: &str) -> Result<Option<KeyOwner>, sqlx::Error> {
        let hash = token_hash(token);
        if let Some(owner) = self.0.known.get(&hash) {
            return Ok(Some(owner));
        }
        if self.0.refused.contains_key(&hash) {
            return Ok(None);
        }
        // One indexed lookup, which also notes the key's use at most once a minute.
        let owner = sqlx::query!(
            r#"
            WITH live AS (
                SELECT merchant_id, prefix, last_used_at FROM api_keys
                 WHERE token_sha256 = $1 AND revoked_at IS NULL
                   AND (expires_at IS NULL OR expires_at > now())
            ), used AS (
                UPDATE api_keys SET last_used_at = now()
                 WHERE token_sha256 = $1
                   AND EXISTS (SELECT 1 FROM live
                                WHERE live.last_used_at IS NULL
                                   OR live.last_used_at < now() - interval '1 minute')
            )
            SELECT merchant_id, prefix FROM live
            "#,
            &hash[..]
        )
        .fetch_optional(&mut *self.0.pool.acquire().await?)
        .await?
        .map(|row| KeyOwner {
            merchant: MerchantId(row.merchant_id),
            uses: metrics::counter!(
                API_KEY_REQUESTS,
                "prefix" => row.prefix.unwrap_or_else(|| "none".to_owned())
            ),
        });
        match &owner {
            Some(owner) => self.0.known.insert(hash, owner.clone()),
            None => self.0.refused.insert(hash, ()),
        }
        Ok(owner)
    }
}

/// Rejects requests without a known token with 401 before anything else reads them: no
/// Idempotency-Key is even looked at, nothing is stored. On success the merchant, and the
/// idempotency scope it defines, go into the request extensions.
pub async fn require_merchant(
    State(auth): State<Authenticator>,
    mut request: Request,
    next: Next,
) -> Response {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split_once(' '))
        // The auth scheme is case-insensitive (RFC 9110 §11.1); the token is not.
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .filter(|token| !token.is_empty());
    let Some(token) = token else {
        return ApiError::Unauthorized.into_response();
    };
    match auth.owner(token).await {
        Ok(Some(KeyOwner { merchant, uses })) => {
            uses.increment(1);
            request
                .extensions_mut()
                .insert(Scope::new(merchant.as_str()));
            request.extensions_mut().insert(merchant);
            next.run(request).await
        }
        Ok(None) => ApiError::Unauthorized.into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// The keys of `BOOTSTRAP_API_KEYS`, stored at start-up or, when the database is not there yet
/// (missing, not migrated, down), as soon as it is: `serve` stays up meanwhile and `/readyz` says
/// why it is not ready.
#[derive(Clone)]
pub struct Bootstrap {
    keys: Arc<Vec<(String, MerchantId)>>,
    stored: Arc<AtomicBool>,
}

impl Bootstrap {
    /// Parses `(token, merchant)` pairs; a bad merchant id is a configuration error.
    pub fn new(keys: &[(String, String)]) -> anyhow::Result<Self> {
        let keys = keys
            .iter()
            .map(|(token, merchant)| Ok((token.clone(), MerchantId::parse(merchant)?)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Self {
            stored: Arc::new(AtomicBool::new(keys.is_empty())),
            keys: Arc::new(keys),
        })
    }

    /// Whether every key is stored.
    pub fn is_done(&self) -> bool {
        self.stored.load(Ordering::Acquire)
    }

    /// Upserts every key once; later calls do nothing.
    pub async fn store(&self, pool: &Pool) -> Result<(), sqlx::Error> {
        if self.is_done() {
            return Ok(());
        }
        for (token, merchant) in self.keys.iter() {
            insert(pool, token, merchant).await?;
        }
        self.stored.store(true, Ordering::Release);
        tracing::info!(keys = self.keys.len(), "stored BOOTSTRAP_API_KEYS");
        Ok(())
    }

    /// Stores the keys once the database lets it, retrying with backoff; a failure no retry fixes
    /// is logged and ends the task (requests with those keys keep getting 401).
    pub async fn store_when_possible(self, pool: Pool) {
        let mut outage = Outage::new("BOOTSTRAP_API_KEYS", Duration::from_millis(500));
        loop {
            match self.store(&pool).await {
                Ok(()) => return,
                Err(e) if Failure::of(&e).is_transient() => {
                    let advice = crate::db::advice(&e)
                        .unwrap_or("the keys are stored once the database answers");
                    tokio::time::sleep(outage.failed(&e, Some(advice))).await;
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot store BOOTSTRAP_API_KEYS");
                    return;
                }
            }
        }
    }
}

/// What new tokens start with, so secret scanners recognise them; older tokens keep working.
const TOKEN_PREFIX: &str = "sk_live_";

/// A new random token (256 bits) for a merchant; only its hash is stored, with its prefix
/// (`sk_live_` and 8 hex digits) to name it by. `who` made it (the audit log's line).
pub async fn create(pool: &Pool, merchant: &MerchantId, who: &Who) -> anyhow::Result<String> {
    let mut tx = OpenTransaction::begin_on_pool(pool).await?;
    let token = insert_new(&mut tx, merchant, who, "api_key.create").await?;
    tx.commit().await.map_err(ApiError::from)?;
    Ok(token)
}

async fn insert_new(
    conn: &mut sqlx::PgConnection,
    merchant: &MerchantId,
    who: &Who,
    action: &str,
) -> Result<String, sqlx::Error> {
    let mut secret = [0u8; 32];
    rand::rng().fill_bytes(&mut secret);
    let token = format!("{TOKEN_PREFIX}{}", hex::encode(secret));
    let prefix = &token[..TOKEN_PREFIX.len() + 8];
    sqlx::query!(
        "INSERT INTO api_keys (merchant_id, token_sha256, prefix) VALUES ($1, $2, $3)",
        merchant.as_str(),
        &token_hash(&token)[..],
        prefix,
    )
    .execute(&mut *conn)
    .await?;
    audit::record(conn, merchant.as_str(), who, action, Some(prefix)).await?;
    Ok(token)
}

/// A key as `api-keys list` shows it: never its secret.
#[derive(Debug)]
pub struct KeySummary {
    /// `None` for a key made before keys had prefixes.
    pub prefix: Option<String>,
    pub created_at: time::OffsetDateTime,
    pub last_used_at: Option<time::OffsetDateTime>,
    pub expires_at: Option<time::OffsetDateTime>,
    pub revoked_at: Option<time::OffsetDateTime>,
}

/// The merchant's keys, oldest first.
pub async fn list(pool: &Pool, merchant: &MerchantId) -> Result<Vec<KeySummary>, sqlx::Error> {
    sqlx::query_as!(
        KeySummary,
        "SELECT prefix, created_at, last_used_at, expires_at, revoked_at FROM api_keys
          WHERE merchant_id = $1 ORDER BY created_at, prefix",
        merchant.as_str(),
    )
    .fetch_all(&mut *pool.acquire().await?)
    .await
}

/// Revokes the live key named by `prefix`, of `merchant` if one is given (the CLI's operator may
/// name any merchant's): it stops working on every replica within a second.
pub async fn revoke(
    pool: &Pool,
    merchant: Option<&MerchantId>,
    prefix: &str,
    who: &Who,
) -> anyhow::Result<()> {
    let mut tx = OpenTransaction::begin_on_pool(pool).await?;
    let revoked = sqlx::query_scalar!(
        "UPDATE api_keys SET revoked_at = now()
          WHERE prefix = $1 AND revoked_at IS NULL AND ($2::text IS NULL OR merchant_id = $2)
         RETURNING merchant_id",
        prefix,
        merchant.map(MerchantId::as_str),
    )
    .fetch_all(&mut *tx)
    .await?;
    let [owner] = &revoked[..] else {
        anyhow::bail!("no live key has the prefix {prefix:?}");
    };
    audit::record(&mut tx, owner, who, "api_key.revoke", Some(prefix)).await?;
    tx.commit().await.map_err(ApiError::from)?;
    Ok(())
}

/// A new key for the merchant, and every other live key of its set to expire in `old_expires_in`
/// (sooner if it expires sooner already): the overlap in which its servers move to the new key.
pub async fn rotate(
    pool: &Pool,
    merchant: &MerchantId,
    old_expires_in: Duration,
    who: &Who,
) -> anyhow::Result<String> {
    let mut tx = OpenTransaction::begin_on_pool(pool).await?;
    let token = insert_new(&mut tx, merchant, who, "api_key.rotate").await?;
    let prefix = &token[..TOKEN_PREFIX.len() + 8];
    sqlx::query!(
        "UPDATE api_keys
            SET expires_at = least(coalesce(expires_at, 'infinity'), now() + make_interval(secs => $3))
          WHERE merchant_id = $1 AND prefix IS DISTINCT FROM $2 AND revoked_at IS NULL",
        merchant.as_str(),
        prefix,
        old_expires_in.as_secs_f64(),
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await.map_err(ApiError::from)?;
    Ok(token)
}

async fn insert(pool: &Pool, token: &str, merchant: &MerchantId) -> Result<(), sqlx::Error> {
    let hash = token_hash(token);
    sqlx::query!(
        r#"
        INSERT INTO api_keys (merchant_id, token_sha256) VALUES ($1, $2)
        ON CONFLICT (token_sha256) DO UPDATE SET merchant_id = excluded.merchant_id
        "#,
        merchant.as_str(),
        &hash[..],
    )
    .execute(&mut *pool.acquire().await?)
    .await?;
    Ok(())
}
