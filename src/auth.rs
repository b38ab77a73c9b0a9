//! Bearer-token authentication (`docs/api.md`, "Authentication"). Tokens are stored only as SHA-256 hashes and looked up by
//! hash, so no secret is ever compared byte by byte and a leaked table reveals no usable token.

use std::time::Duration;

use axum::{
    extract::{Request, State},
    http::header,
    middleware::Next,
    response::{IntoResponse, Response},
};
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::{db::Pool, error::ApiError, idempotency::Scope};

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

/// Looks tokens up by hash, remembering known ones for a minute so that a request costs no
/// database round trip for its credentials. Unknown tokens are never remembered: guessing costs a
/// lookup each time and cannot fill the cache. A deleted key stays usable for at most `KNOWN_FOR`.
#[derive(Clone)]
pub struct Authenticator {
    pool: Pool,
    known: moka::sync::Cache<[u8; 32], MerchantId>,
}

impl Authenticator {
    const KNOWN_FOR: Duration = Duration::from_secs(60);

    pub fn new(pool: Pool) -> Self {
        let known = moka::sync::Cache::builder()
            .max_capacity(10_000)
            .time_to_live(Self::KNOWN_FOR)
            .build();
        Self { pool, known }
    }

    async fn merchant(&self, token: &str) -> Result<Option<MerchantId>, sqlx::Error> {
        let hash = token_hash(token);
        if let Some(merchant) = self.known.get(&hash) {
            return Ok(Some(merchant));
        }
        let merchant = sqlx::query_scalar!(
            "SELECT merchant_id FROM api_keys WHERE token_sha256 = $1",
            &hash[..]
        )
        .fetch_optional(&mut *self.pool.acquire().await?)
        .await?
        .map(MerchantId);
        if let Some(merchant) = &merchant {
            self.known.insert(hash, merchant.clone());
        }
        Ok(merchant)
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
    match auth.merchant(token).await {
        Ok(Some(merchant)) => {
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

/// Upserts `(token, merchant)` pairs, e.g. from `BOOTSTRAP_API_KEYS`.
pub async fn bootstrap(pool: &Pool, keys: &[(String, String)]) -> anyhow::Result<()> {
    for (token, merchant) in keys {
        let merchant = MerchantId::parse(merchant)?;
        insert(pool, token, &merchant).await?;
    }
    Ok(())
}

/// A new random token (256 bits) for a merchant; only its hash is stored.
pub async fn create(pool: &Pool, merchant: &MerchantId) -> anyhow::Result<String> {
    let mut secret = [0u8; 32];
    rand::rng().fill_bytes(&mut secret);
    let token = format!("sk_{}", hex::encode(secret));
    insert(pool, &token, merchant).await?;
    Ok(token)
}

async fn insert(pool: &Pool, token: &str, merchant: &MerchantId) -> anyhow::Result<()> {
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
