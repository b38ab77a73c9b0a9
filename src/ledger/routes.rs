//! `GET /v1/balances`: the merchant's settled totals per chain and token, from the ledger.

use axum::{Extension, Json, Router, extract::FromRef, extract::State, routing::get};
use serde::Serialize;
use utoipa::ToSchema;

use crate::{auth::MerchantId, db::Pool, error::ApiError};

pub fn router<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Pool: FromRef<S>,
{
    Router::new().route("/v1/balances", get(balances))
}

/// What the merchant has received on one chain in one token.
#[derive(Debug, Serialize, ToSchema)]
pub struct Balance {
    #[schema(example = "evm:31337")]
    pub chain: String,
    /// EIP-55 checksummed.
    pub token: String,
    /// Token base units, as a decimal string.
    #[schema(example = "100000000")]
    pub amount: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Balances {
    pub data: Vec<Balance>,
}

/// The merchant's settled totals per chain and token: every confirmed payment, canceled intents'
/// late payments included.
#[utoipa::path(
    get,
    path = "/v1/balances",
    operation_id = "list_balances",
    tag = "settlement",
    responses((status = 200, description = "Settled totals, by chain and token", body = Balances))
)]
pub async fn balances(
    State(pool): State<Pool>,
    Extension(merchant): Extension<MerchantId>,
) -> Result<Json<Balances>, ApiError> {
    let data = sqlx::query_as!(
        Balance,
        r#"
        SELECT chain, token, sum(amount)::text AS "amount!"
          FROM ledger_postings
         WHERE account = 'merchant:' || $1
         GROUP BY chain, token
         ORDER BY chain, token
        "#,
        merchant.as_str(),
    )
    .fetch_all(&mut *pool.acquire().await?)
    .await?;
    Ok(Json(Balances { data }))
}
