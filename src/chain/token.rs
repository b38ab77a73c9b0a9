//! The EIP-3009 token: its ABI comes from the committed artifact (`contracts/build/`), so the
//! bindings are what the contract really is. Any token with the same functions works (USDC does).

use alloy::{
    primitives::{Address, B256, U256},
    sol,
    sol_types::Eip712Domain,
};

use super::rpc::{ChainError, Node};

/// The bindings `sol!` generates from the artifact (its functions take every ABI argument).
#[allow(clippy::too_many_arguments)]
mod bindings {
    alloy::sol! {
        #[sol(rpc)]
        DevnetUSD,
        "contracts/build/DevnetUSD.json"
    }
}
pub use bindings::DevnetUSD;

/// What a token is, as read from its chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSupport {
    /// It implements EIP-3009 under this EIP-712 name and version.
    Eip3009 { name: String, version: String },
    /// No code, or no `transferWithAuthorization`, or a domain that does not match its separator.
    NotSupported(String),
}

/// Reads a token's EIP-712 domain (EIP-5267 `eip712Domain()`), checks it against the token's own
/// `DOMAIN_SEPARATOR()`, and that it answers EIP-3009's `authorizationState`.
pub async fn inspect(
    node: &Node,
    chain_id: u64,
    address: Address,
) -> Result<TokenSupport, ChainError> {
    use alloy::providers::Provider;
    if node.get_code_at(address).await?.is_empty() {
        return Ok(TokenSupport::NotSupported(format!(
            "no contract at {address}"
        )));
    }
    let token = DevnetUSD::new(address, node);
    let unsupported = |what: &str| Ok(TokenSupport::NotSupported(format!("{address} {what}")));
    let reverted = |e: alloy::contract::Error| match ChainError::from(e) {
        ChainError::Unreachable(why) => Err(ChainError::Unreachable(why)),
        _ => Ok(()),
    };
    let domain = match token.eip712Domain().call().await {
        Ok(domain) => domain,
        Err(e) => {
            reverted(e)?;
            return unsupported("does not describe its EIP-712 domain (EIP-5267)");
        }
    };
    let separator = match token.DOMAIN_SEPARATOR().call().await {
        Ok(separator) => separator,
        Err(e) => {
            reverted(e)?;
            return unsupported("has no DOMAIN_SEPARATOR()");
        }
    };
    if let Err(e) = token
        .authorizationState(Address::ZERO, B256::ZERO)
        .call()
        .await
    {
        reverted(e)?;
        return unsupported("does not implement EIP-3009 (authorizationState)");
    }
    let expected = eip712_domain(&domain.name, &domain.version, chain_id, address).separator();
    if expected != separator
        || domain.verifyingContract != address
        || domain.chainId != U256::from(chain_id)
    {
        return unsupported(
            "describes an EIP-712 domain that does not match its DOMAIN_SEPARATOR()",
        );
    }
    Ok(TokenSupport::Eip3009 {
        name: domain.name,
        version: domain.version,
    })
}

/// The EIP-712 domain of a token: name, version, chain id, verifying contract.
pub fn eip712_domain(name: &str, version: &str, chain_id: u64, token: Address) -> Eip712Domain {
    Eip712Domain::new(
        Some(name.to_owned().into()),
        Some(version.to_owned().into()),
        Some(U256::from(chain_id)),
        Some(token),
        None,
    )
}

sol! {
    /// EIP-3009 as every such token has it (USDC included): the v, r, s form of
    /// `transferWithAuthorization`, and the events the payment watch reads.
    interface Eip3009 {
        function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s) external;
        event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce);
        event AuthorizationCanceled(address indexed authorizer, bytes32 indexed nonce);
        event Transfer(address indexed from, address indexed to, uint256 value);
    }
}
