//! The tokens intents name, as read from their chain and kept in PostgreSQL: an authorization can
//! then be built and checked while the chain is unreachable. Read again after an hour, and after
//! the token refused a signature, never trusted forever.

use alloy::primitives::Address;
use sqlx::PgConnection;

use super::{
    evm::token::{self, TokenSupport, Units},
    rpc::{ChainError, Node},
};
use crate::config::ChainEndpoint;

/// How long what was read of a token is trusted before it is read again: a token behind an
/// upgradeable proxy (USDC) can change its domain.
const READ_AGAIN_AFTER_SECONDS: f64 = 3600.0;

/// The symbol and decimals read of the token at `address` (EIP-55) on the chain `chain_id`, each
/// if it says them; `None` if the token was never read.
pub async fn units_of(
    conn: &mut PgConnection,
    chain_id: u64,
    address: &str,
) -> Result<Option<(Option<String>, Option<i16>)>, sqlx::Error> {
    Ok(sqlx::query!(
        "SELECT symbol, decimals FROM chain_tokens WHERE chain_id = $1 AND address = $2",
        chain_id as i64,
        address,
    )
    .fetch_optional(conn)
    .await?
    .map(|t| (t.symbol, t.decimals)))
}

/// Every token read on `chain`, EIP-55 checksummed.
pub async fn known_on(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT address FROM chain_tokens WHERE chain_id = $1",
        chain.id as i64,
    )
    .fetch_all(conn)
    .await
}

/// What the token at `address` on `chain` is: from PostgreSQL while that is recent, else read from
/// the chain and stored. A token read before whose chain does not answer now is answered as read.
pub async fn resolve(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
    node: &Node,
    address: Address,
) -> Result<TokenSupport, ResolveError> {
    let text = address.to_checksum(None);
    let known = sqlx::query!(
        r#"SELECT supports_eip3009, name, version, refusal, contract_signatures, symbol, decimals,
                  checked_at > now() - make_interval(secs => $3) AS "recent!"
             FROM chain_tokens WHERE chain_id = $1 AND address = $2"#,
        chain.id as i64,
        text,
        READ_AGAIN_AFTER_SECONDS,
    )
    .fetch_optional(&mut *conn)
    .await?;
    let stored = known
        .as_ref()
        .map(|k| match (k.supports_eip3009, &k.name, &k.version) {
            (true, Some(name), Some(version)) => TokenSupport::Eip3009 {
                name: name.clone(),
                version: version.clone(),
                contract_signatures: k.contract_signatures,
                units: Units {
                    symbol: k.symbol.clone(),
                    decimals: k.decimals.and_then(|d| u8::try_from(d).ok()),
                },
            },
            _ => TokenSupport::NotSupported(
                k.refusal
                    .clone()
                    .unwrap_or_else(|| format!("{text} does not implement EIP-3009")),
            ),
        });
    if let (Some(known), Some(stored)) = (&known, &stored)
        && known.recent
    {
        return Ok(stored.clone());
    }
    let support = match (token::inspect(node, chain.id, address).await, stored) {
        // A token with code a moment ago that has none now is a node behind, not a token gone.
        (Ok(TokenSupport::NotSupported(why)), Some(stored @ TokenSupport::Eip3009 { .. }))
            if why.starts_with("no contract") =>
        {
            tracing::warn!(token = %text, chain = %chain.name, "the node says the token has no code; keeping what was read of it");
            return Ok(stored);
        }
        (Ok(support), _) => support,
        (Err(ChainError::Unreachable(_)), Some(stored)) => return Ok(stored),
        (Err(e), _) => return Err(e.into()),
    };
    // Any ERC-20 says its units for people, EIP-3009 or not (a Permit2 payment's, on its page).
    let other = match &support {
        TokenSupport::NotSupported(_) => token::units(node, address)
            .await
            .ok()
            .flatten()
            .unwrap_or_default(),
        TokenSupport::Eip3009 { .. } => Units::default(),
    };
    let (supported, name, version, contract_signatures, refusal, units) = match &support {
        TokenSupport::Eip3009 {
            name,
            version,
            contract_signatures,
            units,
        } => (
            true,
            Some(name.as_str()),
            Some(version.as_str()),
            *contract_signatures,
            None,
            units,
        ),
        TokenSupport::NotSupported(why) => (false, None, None, false, Some(why.as_str()), &other),
    };
    sqlx::query!(
        "INSERT INTO chain_tokens (chain_id, address, supports_eip3009, name, version, contract_signatures, refusal, symbol, decimals)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (chain_id, address) DO UPDATE
            SET supports_eip3009 = $3, name = $4, version = $5, contract_signatures = $6,
                refusal = $7, symbol = $8, decimals = $9, checked_at = now()",
        chain.id as i64,
        text,
        supported,
        name,
        version,
        contract_signatures,
        refusal,
        units.symbol.as_deref(),
        units.decimals.map(i16::from),
    )
    .execute(&mut *conn)
    .await?;
    Ok(support)
}

/// The token refused a signature made under what we read of it: read it again before the next
/// authorization is built (its domain may have changed under an upgradeable proxy).
pub async fn read_again(
    conn: &mut PgConnection,
    chain_id: u64,
    address: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE chain_tokens SET checked_at = '-infinity' WHERE chain_id = $1 AND address = $2",
        chain_id as i64,
        address,
    )
    .execute(conn)
    .await?;
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(transparent)]
    Chain(#[from] ChainError),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// `base_units` (decimal digits) in units of `decimals` places: at least two fractional digits
/// when the token has them (`100.00`), no trailing zeros past them (`0.125`).
pub fn in_units(base_units: &str, decimals: u8) -> String {
    let places = usize::from(decimals);
    if places == 0 {
        return base_units.to_owned();
    }
    let padded = format!("{base_units:0>width$}", width = places + 1);
    let (whole, fraction) = padded.split_at(padded.len() - places);
    let keep = fraction.trim_end_matches('0').len().max(places.min(2));
    format!("{whole}.{}", &fraction[..keep])
}

#[cfg(test)]
mod tests {
    use super::in_units;

    #[test]
    fn amounts_read_in_the_tokens_units() {
        assert_eq!(in_units("100000000", 6), "100.00");
        assert_eq!(in_units("125000", 6), "0.125");
        assert_eq!(in_units("1", 6), "0.000001");
        assert_eq!(in_units("1500000000000000000", 18), "1.50");
        assert_eq!(in_units("7", 0), "7");
        assert_eq!(in_units("5", 1), "0.5");
    }
}
