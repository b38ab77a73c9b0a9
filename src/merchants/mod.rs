//! The merchant's own settings: `GET /v1/merchant` and `POST /v1/merchant`: the name its payers
//! see on checkout pages (`docs/checkout.md`; without one, pages show the merchant's id), its
//! payout address, and the assets it accepts for orders priced in a currency (`assets`).

pub mod assets;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use axum::{Extension, Json, Router, extract::FromRef, extract::State, routing::get};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use utoipa::ToSchema;

use self::assets::{AcceptedAsset, AssetRequest};
use crate::{
    auth::MerchantId,
    db::Pool,
    error::{ApiError, ErrorBody},
    extract::JsonBody,
    idempotency::Tx,
    intents::domain::{Address, Currency},
    rails::Chains,
};

pub fn router<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Pool: FromRef<S>,
    Chains: FromRef<S>,
{
    Router::new().route("/v1/merchant", get(show).post(update))
}

/// The authenticated merchant.
#[derive(Debug, Serialize, ToSchema)]
pub struct Merchant {
    pub id: String,
    /// Shown to payers on checkout pages; `null` until set (pages then show the id).
    pub display_name: Option<String>,
    /// Where the merchant is paid on every EVM chain, EIP-55 checksummed; `null` until set.
    pub payout_address: Option<String>,
    /// What orders priced in a currency can be paid with.
    pub accepted_assets: Vec<AcceptedAsset>,
}

/// What to change; a field left out keeps its value. Unknown fields are rejected.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateMerchant {
    /// 1 to 100 characters, shown as they are (the page escapes them).
    #[serde(default)]
    #[schema(example = "Demo Coffee Roasters")]
    pub display_name: Option<String>,
    /// The merchant's address on every EVM chain: an order is paid to it unless it names another.
    #[serde(default)]
    pub payout_address: Option<String>,
    /// Replaces the whole list. Each is checked on its chain: served (`CHAINS`), a contract that
    /// answers `decimals()` with at least the currency's two minor digits.
    #[serde(default)]
    pub accepted_assets: Option<Vec<AssetRequest>>,
}

/// A merchant's row: its settings as stored.
struct Row {
    display_name: Option<String>,
    payout_address: Option<String>,
    accepted_assets: sqlx::types::Json<Vec<AcceptedAsset>>,
}

impl Row {
    fn into_merchant(self, merchant: &MerchantId) -> Merchant {
        Merchant {
            id: merchant.as_str().to_owned(),
            display_name: self.display_name,
            payout_address: self.payout_address,
            accepted_assets: self.accepted_assets.0,
        }
    }
}

/// The merchant's settings.
#[utoipa::path(
    get,
    path = "/v1/merchant",
    operation_id = "retrieve_merchant",
    tag = "merchant",
    responses((status = 200, description = "The merchant's settings", body = Merchant))
)]
pub async fn show(
    State(pool): State<Pool>,
    Extension(merchant): Extension<MerchantId>,
) -> Result<Json<Merchant>, ApiError> {
    Ok(Json(
        settings_of(&mut *pool.acquire().await?, &merchant).await?,
    ))
}

/// The merchant's settings as stored, or the defaults of one that never set any.
pub async fn settings_of(
    conn: &mut PgConnection,
    merchant: &MerchantId,
) -> Result<Merchant, sqlx::Error> {
    let row = sqlx::query_as!(
        Row,
        r#"SELECT display_name, payout_address,
                  accepted_assets AS "accepted_assets: sqlx::types::Json<Vec<AcceptedAsset>>"
             FROM merchants WHERE id = $1"#,
        merchant.as_str()
    )
    .fetch_optional(conn)
    .await?
    .unwrap_or(Row {
        display_name: None,
        payout_address: None,
        accepted_assets: sqlx::types::Json(Vec::new()),
    });
    Ok(row.into_merchant(merchant))
}

/// Change the merchant's settings: its display name, payout address, accepted assets.
#[utoipa::path(
    post,
    path = "/v1/merchant",
    operation_id = "update_merchant",
    tag = "merchant",
    request_body(content = UpdateMerchant, content_type = "application/json"),
    responses(
        (status = 200, description = "The merchant's settings now", body = Merchant),
        (status = 400, description = "`invalid_request`: the name is empty, longer than 100 characters or holds control characters; the payout address is not one; an accepted asset's chain is not served, its token is no contract, does not say its decimals or has fewer than its currency's two (the message names the entry)", body = ErrorBody),
        (status = 503, description = "`unavailable`: an accepted asset's chain did not answer; nothing was changed", body = ErrorBody),
    )
)]
pub async fn update(
    State(chains): State<Chains>,
    Extension(merchant): Extension<MerchantId>,
    mut tx: Tx,
    JsonBody(request): JsonBody<UpdateMerchant>,
) -> Result<Json<Merchant>, ApiError> {
    Ok(Json(change(&mut tx, &chains, &merchant, request).await?))
}

/// Checks and applies a change of the merchant's settings, in the caller's transaction: the
/// API's update and the dashboard's settings page both come here.
pub async fn change(
    tx: &mut PgConnection,
    chains: &Chains,
    merchant: &MerchantId,
    request: UpdateMerchant,
) -> Result<Merchant, ApiError> {
    let name = match &request.display_name {
        Some(name) => {
            let name = name.trim();
            if !(1..=100).contains(&name.chars().count()) || name.chars().any(char::is_control) {
                return Err(ApiError::InvalidRequest(
                    "display_name: must be 1 to 100 characters, none of them control characters"
                        .to_owned(),
                ));
            }
            Some(name)
        }
        None => None,
    };
    let payout_address = match &request.payout_address {
        Some(raw) => {
            let address = Address::parse(raw)
                .map_err(|why| ApiError::InvalidRequest(format!("payout_address: {why}")))?;
            if address.to_checksum() == "0x0000000000000000000000000000000000000000" {
                return Err(ApiError::InvalidRequest(
                    "payout_address: must not be the zero address, whose tokens no one can move"
                        .to_owned(),
                ));
            }
            Some(address.to_checksum())
        }
        None => None,
    };
    let accepted = match request.accepted_assets {
        Some(requested) => Some(assets::check(&mut *tx, chains, requested).await?),
        None => None,
    };
    if let Some(accepted) = &accepted {
        // Deposits in them are followed from now on, not from the first order's creation.
        let tokens: Vec<(String, String)> = accepted
            .iter()
            .map(|a| (a.chain.clone(), a.token.clone()))
            .collect();
        crate::intents::repo::watch_deposit_tokens(&mut *tx, &tokens).await?;
    }
    let row = sqlx::query_as!(
        Row,
        r#"INSERT INTO merchants (id, display_name, payout_address, accepted_assets)
           VALUES ($1, $2, $3, COALESCE($4, '[]'::jsonb))
           ON CONFLICT (id) DO UPDATE
              SET display_name = COALESCE($2, merchants.display_name),
                  payout_address = COALESCE($3, merchants.payout_address),
                  accepted_assets = COALESCE($4, merchants.accepted_assets),
                  terms_version = merchants.terms_version + 1,
                  updated_at = now()
           RETURNING display_name, payout_address,
                     accepted_assets AS "accepted_assets: sqlx::types::Json<Vec<AcceptedAsset>>""#,
        merchant.as_str(),
        name,
        payout_address,
        accepted.map(sqlx::types::Json) as Option<sqlx::types::Json<Vec<AcceptedAsset>>>,
    )
    .fetch_one(&mut *tx)
    .await?;
    Ok(row.into_merchant(merchant))
}

/// One accepted asset added to the list or taken out of it (the dashboard's settings page).
pub enum AssetEdit {
    Add(AssetRequest),
    Remove {
        chain: String,
        token: String,
        currency: Currency,
    },
}

/// Applies `edit` to `merchant`'s accepted assets, in the caller's transaction, through
/// [`change`] (every asset checked again). The list is read under the merchant's row lock, so two
/// people editing it at once both keep their change.
pub async fn edit_accepted_assets(
    tx: &mut PgConnection,
    chains: &Chains,
    merchant: &MerchantId,
    edit: AssetEdit,
) -> Result<Merchant, ApiError> {
    // A merchant that never set anything has no row to lock yet: made first.
    sqlx::query!(
        "INSERT INTO merchants (id, accepted_assets) VALUES ($1, '[]'::jsonb) ON CONFLICT (id) DO NOTHING",
        merchant.as_str()
    )
    .execute(&mut *tx)
    .await?;
    let current = sqlx::query_scalar!(
        r#"SELECT accepted_assets AS "accepted_assets: sqlx::types::Json<Vec<AcceptedAsset>>"
             FROM merchants WHERE id = $1 FOR UPDATE"#,
        merchant.as_str()
    )
    .fetch_one(&mut *tx)
    .await?
    .0;
    let mut requested: Vec<AssetRequest> = current
        .into_iter()
        .map(|a| AssetRequest {
            chain: a.chain,
            token: a.token,
            currency: a.currency.as_str().to_owned(),
        })
        .collect();
    match edit {
        AssetEdit::Add(asset) => requested.push(asset),
        AssetEdit::Remove {
            chain,
            token,
            currency,
        } => requested.retain(|a| {
            !(a.chain == chain
                && a.token.eq_ignore_ascii_case(&token)
                && a.currency == currency.as_str())
        }),
    }
    let update = UpdateMerchant {
        display_name: None,
        payout_address: None,
        accepted_assets: Some(requested),
    };
    change(tx, chains, merchant, update).await
}

/// The name payers see for `merchant`, if it set one.
pub async fn display_name(
    conn: &mut PgConnection,
    merchant: &str,
) -> Result<Option<String>, sqlx::Error> {
    Ok(
        sqlx::query_scalar!("SELECT display_name FROM merchants WHERE id = $1", merchant)
            .fetch_optional(conn)
            .await?
            .flatten(),
    )
}

/// What an order of a merchant is made from, as of one version of its settings.
#[derive(Debug, Default)]
pub struct OrderTerms {
    /// `merchants.terms_version`; 0 for a merchant that never set anything.
    pub version: i64,
    pub payout_address: Option<String>,
    pub accepted: Vec<AcceptedAsset>,
}

/// What an order of `merchant` is made from now: its payout address, if set, and its accepted
/// assets.
pub async fn order_terms(
    conn: &mut PgConnection,
    merchant: &str,
) -> Result<OrderTerms, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT terms_version, payout_address,
                  accepted_assets AS "accepted_assets: sqlx::types::Json<Vec<AcceptedAsset>>"
             FROM merchants WHERE id = $1"#,
        merchant
    )
    .fetch_optional(conn)
    .await?;
    Ok(row
        .map(|r| OrderTerms {
            version: r.terms_version,
            payout_address: r.payout_address,
            accepted: r.accepted_assets.0,
        })
        .unwrap_or_default())
}

/// The merchants' order terms as this replica read them last. An order is made from them without
/// reading them again; its insert checks, in the same statement, that they are still the current
/// version (`intents::repo::insert`), and terms found stale, or that refuse the order, are read
/// afresh before anything is answered: a merchant's change is seen by its next order on every
/// replica.
#[derive(Clone, Default)]
pub struct TermsCache(Arc<Mutex<HashMap<String, Arc<OrderTerms>>>>);

impl TermsCache {
    /// `merchant`'s terms: as read last, unless `fresh` or never read here.
    pub async fn get(
        &self,
        conn: &mut PgConnection,
        merchant: &str,
        fresh: bool,
    ) -> Result<(Arc<OrderTerms>, bool), sqlx::Error> {
        if !fresh && let Some(terms) = self.lock().get(merchant) {
            return Ok((terms.clone(), true));
        }
        let terms = Arc::new(order_terms(conn, merchant).await?);
        self.lock().insert(merchant.to_owned(), terms.clone());
        Ok((terms, false))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<OrderTerms>>> {
        // A panic while the map was held left it whole: it is only ever replaced entry by entry.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
