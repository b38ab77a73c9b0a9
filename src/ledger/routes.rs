//! `GET /v1/balances`: the merchant's settled totals per chain and token, from the ledger, and
//! per currency for the tokens it accepts for one.

use axum::{Extension, Json, Router, extract::FromRef, extract::State, routing::get};
use serde::Serialize;
use utoipa::ToSchema;

use std::collections::BTreeMap;

use alloy::primitives::{I256, U256};

use crate::{
    auth::MerchantId,
    db::Pool,
    error::ApiError,
    intents::domain::Currency,
    merchants::{self, assets::AcceptedAsset},
    rails::tokens::in_units,
};

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

/// What the merchant has received in the tokens it accepts for one currency, each counted at par
/// (a token unit is a unit of the currency): a stablecoin's promise, not a market price.
#[derive(Debug, Serialize, ToSchema)]
pub struct CurrencyTotal {
    pub currency: Currency,
    /// In the currency's units, at least its two minor digits (`"8.00"`), exact.
    #[schema(example = "8.00")]
    pub amount: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Balances {
    pub data: Vec<Balance>,
    /// Per currency, the balances in the tokens accepted for exactly that currency
    /// (`POST /v1/merchant` `accepted_assets`); a token accepted for none, or for two, is in none.
    pub totals: Vec<CurrencyTotal>,
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
    Ok(Json(
        balances_of(&mut *pool.acquire().await?, &merchant).await?,
    ))
}

/// The merchant's balances and currency totals, as `GET /v1/balances` and the dashboard show them.
pub async fn balances_of(
    conn: &mut sqlx::PgConnection,
    merchant: &MerchantId,
) -> Result<Balances, sqlx::Error> {
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
    .fetch_all(&mut *conn)
    .await?;
    let terms = merchants::order_terms(conn, merchant.as_str()).await?;
    let totals = totals(&data, &terms.accepted);
    Ok(Balances { data, totals })
}

/// The balances in tokens accepted for one currency only, summed per currency at par, exactly (in
/// the finest units among them).
fn totals(balances: &[Balance], accepted: &[AcceptedAsset]) -> Vec<CurrencyTotal> {
    /// A balance in base units and its token's decimals.
    type Held = (I256, u8);
    let mut per_currency: BTreeMap<&'static str, (Currency, Vec<Held>)> = BTreeMap::new();
    for balance in balances {
        let mut currencies = accepted
            .iter()
            .filter(|a| a.chain == balance.chain && a.token == balance.token);
        let (Some(asset), None) = (currencies.next(), currencies.next()) else {
            continue;
        };
        let Ok(amount) = balance.amount.parse::<I256>() else {
            continue;
        };
        per_currency
            .entry(asset.currency.as_str())
            .or_insert_with(|| (asset.currency, Vec::new()))
            .1
            .push((amount, asset.decimals));
    }
    per_currency
        .into_values()
        .filter_map(|(currency, amounts)| {
            let places = amounts.iter().map(|(_, d)| *d).max()?;
            let mut sum = I256::ZERO;
            for (amount, decimals) in amounts {
                let scale =
                    I256::try_from(U256::from(10u8).checked_pow(U256::from(places - decimals))?)
                        .ok()?;
                sum = sum.checked_add(amount.checked_mul(scale)?)?;
            }
            let magnitude = in_units(&sum.unsigned_abs().to_string(), places);
            let amount = if sum.is_negative() {
                format!("-{magnitude}")
            } else {
                magnitude
            };
            Some(CurrencyTotal { currency, amount })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asset(token: &str, currency: Currency, decimals: u8) -> AcceptedAsset {
        AcceptedAsset {
            chain: "evm:1".to_owned(),
            token: token.to_owned(),
            currency,
            symbol: None,
            decimals,
            supports_authorization: true,
        }
    }

    fn balance(token: &str, amount: &str) -> Balance {
        Balance {
            chain: "evm:1".to_owned(),
            token: token.to_owned(),
            amount: amount.to_owned(),
        }
    }

    #[test]
    fn totals_sum_the_tokens_of_one_currency_exactly_at_par() {
        let accepted = [
            asset("0xA", Currency::Usd, 6),
            asset("0xB", Currency::Usd, 18),
            asset("0xC", Currency::Eur, 6),
            // Accepted for two currencies: in neither total.
            asset("0xD", Currency::Usd, 6),
            asset("0xD", Currency::Eur, 6),
        ];
        let balances = [
            balance("0xA", "2500000"),
            balance("0xB", "1000000000000000001"),
            balance("0xC", "-500000"),
            balance("0xD", "7000000"),
            balance("0xE", "9000000"),
        ];
        let totals: Vec<(Currency, String)> = totals(&balances, &accepted)
            .into_iter()
            .map(|t| (t.currency, t.amount))
            .collect();
        assert_eq!(
            totals,
            [
                (Currency::Eur, "-0.50".to_owned()),
                (Currency::Usd, "3.500000000000000001".to_owned()),
            ]
        );
    }
}
