//! The assets a merchant accepts: a token on a served chain, for a currency. Checked when set (the
//! chain is served, the token is a contract that says its decimals, enough of them for the
//! currency's minor unit) and stored with the units read, so pricing an order in the currency
//! needs no chain (`docs/api.md`, "The merchant").

use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use utoipa::ToSchema;

use crate::{
    config::ChainEndpoint,
    error::ApiError,
    intents::domain::{Address, Chain, Currency},
    rails::{
        Chains,
        evm::token::{self, TokenSupport},
        rpc::{ChainError, Node},
        tokens::{self, ResolveError},
    },
};

/// At most this many accepted assets: each becomes a payment option of every order.
pub const MAX_ACCEPTED_ASSETS: usize = 20;

/// One accepted asset as the merchant sends it. Unknown fields are rejected.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AssetRequest {
    /// A chain this server serves (`CHAINS`), `evm:<chain id>`.
    #[schema(example = "evm:31337")]
    pub chain: String,
    /// The token's contract address.
    pub token: String,
    /// `usd` or `eur`: the orders priced in it can be paid with this token.
    #[schema(example = "usd")]
    pub currency: String,
}

/// An accepted asset as stored and shown: the token's units as read when it was set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AcceptedAsset {
    #[schema(example = "evm:31337")]
    pub chain: String,
    /// EIP-55 checksummed.
    pub token: String,
    pub currency: Currency,
    /// The token's `symbol()`, if it answers.
    pub symbol: Option<String>,
    /// The token's `decimals()`.
    pub decimals: u8,
    /// It implements EIP-3009, so its orders' option can be paid by the payer's signature; else
    /// only by deposit address, where the chain has a factory.
    #[serde(default)]
    pub supports_authorization: bool,
}

/// A request's asset, parsed, on a served chain (whose node it keeps), not named twice; no chain
/// asked yet.
struct Parsed<'a> {
    chain: Chain,
    endpoint: &'a ChainEndpoint,
    node: &'a Node,
    token: Address,
    currency: Currency,
}

/// The merchant's accepted assets from `requested`, each checked against its chain: a 400 naming
/// the entry (`accepted_assets[1].token: …`) for one that cannot be accepted, a 503 if a chain did
/// not answer. Whether each token has EIP-3009 is read (and kept, `rails::tokens`) too.
pub async fn check(
    conn: &mut PgConnection,
    chains: &Chains,
    requested: Vec<AssetRequest>,
) -> Result<Vec<AcceptedAsset>, ApiError> {
    let invalid = |i: usize, field: &str, why: String| {
        ApiError::InvalidRequest(format!("accepted_assets[{i}].{field}: {why}"))
    };
    if requested.len() > MAX_ACCEPTED_ASSETS {
        return Err(ApiError::InvalidRequest(format!(
            "accepted_assets: at most {MAX_ACCEPTED_ASSETS} assets, got {}",
            requested.len()
        )));
    }
    let mut parsed: Vec<Parsed> = Vec::with_capacity(requested.len());
    for (i, asset) in requested.iter().enumerate() {
        let chain = Chain::parse(&asset.chain).map_err(|why| invalid(i, "chain", why))?;
        let Some((endpoint, node)) = chains.get(chain.as_str()) else {
            return Err(invalid(
                i,
                "chain",
                format!(
                    "{} is not a chain this server serves (CHAINS)",
                    chain.as_str()
                ),
            ));
        };
        let token = Address::parse(&asset.token).map_err(|why| invalid(i, "token", why))?;
        let currency =
            Currency::parse(&asset.currency).map_err(|why| invalid(i, "currency", why))?;
        if let Some(j) = parsed
            .iter()
            .position(|p| p.chain == chain && p.token == token && p.currency == currency)
        {
            return Err(ApiError::InvalidRequest(format!(
                "accepted_assets[{i}]: the same chain, token and currency as accepted_assets[{j}]"
            )));
        }
        parsed.push(Parsed {
            chain,
            endpoint,
            node,
            token,
            currency,
        });
    }
    let mut accepted = Vec::with_capacity(parsed.len());
    for (i, asset) in parsed.into_iter().enumerate() {
        let token_address = asset.token.to_checksum();
        let unreachable = |why: String| {
            ApiError::ChainUnavailable(format!(
                "accepted_assets[{i}]: {} did not answer for the token ({why}); nothing was changed, retry later",
                asset.chain.as_str()
            ))
        };
        let units = token::units(asset.node, asset.token.into())
            .await
            .map_err(|e| match e {
                ChainError::Unreachable(why) => unreachable(why),
                other => invalid(i, "token", other.to_string()),
            })?
            .ok_or_else(|| {
                invalid(
                    i,
                    "token",
                    format!("no contract at {token_address} on {}", asset.chain.as_str()),
                )
            })?;
        let Some(decimals) = units.decimals else {
            return Err(invalid(
                i,
                "token",
                format!("{token_address} does not answer decimals()"),
            ));
        };
        if decimals < asset.currency.minor_digits() {
            return Err(invalid(
                i,
                "token",
                format!(
                    "{token_address} has {decimals} decimals, fewer than the {} minor digits of {}",
                    asset.currency.minor_digits(),
                    asset.currency.as_str()
                ),
            ));
        }
        let support = tokens::resolve(conn, asset.endpoint, asset.node, asset.token.into())
            .await
            .map_err(|e| match e {
                ResolveError::Database(e) => e.into(),
                ResolveError::Chain(e) => unreachable(e.to_string()),
            })?;
        accepted.push(AcceptedAsset {
            chain: asset.chain.as_str().to_owned(),
            token: token_address,
            currency: asset.currency,
            symbol: units.symbol,
            decimals,
            supports_authorization: matches!(support, TokenSupport::Eip3009 { .. }),
        });
    }
    Ok(accepted)
}
