//! The tokens intents name, as read from their chain once and kept in PostgreSQL: an
//! authorization can then be built and checked while the chain is unreachable.

use alloy::primitives::Address;
use sqlx::PgConnection;

use crate::{
    chain::{
        rpc::{ChainError, Node},
        token::{self, TokenSupport},
    },
    config::ChainEndpoint,
};

/// What the token at `address` on `chain` is: from PostgreSQL, or read from the chain and stored.
pub async fn resolve(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
    node: &Node,
    address: Address,
) -> Result<TokenSupport, ResolveError> {
    let text = address.to_checksum(None);
    let known = sqlx::query!(
        "SELECT supports_eip3009, name, version FROM chain_tokens WHERE chain_id = $1 AND address = $2",
        chain.id as i64,
        text,
    )
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(known) = known {
        return Ok(match (known.supports_eip3009, known.name, known.version) {
            (true, Some(name), Some(version)) => TokenSupport::Eip3009 { name, version },
            _ => TokenSupport::NotSupported(format!("{text} does not implement EIP-3009")),
        });
    }
    let support = token::inspect(node, chain.id, address).await?;
    let (supported, name, version) = match &support {
        TokenSupport::Eip3009 { name, version } => {
            (true, Some(name.as_str()), Some(version.as_str()))
        }
        TokenSupport::NotSupported(_) => (false, None, None),
    };
    sqlx::query!(
        "INSERT INTO chain_tokens (chain_id, address, supports_eip3009, name, version)
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
        chain.id as i64,
        text,
        supported,
        name,
        version,
    )
    .execute(&mut *conn)
    .await?;
    Ok(support)
}

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(transparent)]
    Chain(#[from] ChainError),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}
