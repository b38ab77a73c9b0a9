//! The EIP-3009 token: its ABI comes from the committed artifact (`contracts/build/`), so the
//! bindings are what the contract really is. Any token with the same functions works (USDC does).

use alloy::{
    primitives::{Address, B256, U256},
    sol,
    sol_types::Eip712Domain,
};

use crate::rails::rpc::{ChainError, Node};

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
    /// It implements EIP-3009 under this EIP-712 name and version; `contract_signatures` when it
    /// also has the `bytes signature` form that smart-contract wallets need.
    Eip3009 {
        name: String,
        version: String,
        contract_signatures: bool,
        /// ERC-20's optional metadata, for people (the checkout page); `None` if it does not
        /// answer.
        units: Units,
    },
    /// No code, or no `transferWithAuthorization`, or a domain that does not match its separator.
    NotSupported(String),
}

/// Reads a token's EIP-712 domain ([`domain_of`]), then checks that it answers EIP-3009's
/// `authorizationState`. A refusal says which check failed (`docs/settlement.md`, "The token's
/// domain").
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
    let token = Eip712Token::new(address, node);
    let unsupported = |what: &str| Ok(TokenSupport::NotSupported(format!("{address} {what}")));
    // A revert is an answer (the token lacks the function); a node that does not answer is not.
    let reverted = |e: alloy::contract::Error| match ChainError::from(e) {
        ChainError::Unreachable(why) => Err(ChainError::Unreachable(why)),
        _ => Ok(()),
    };
    let (name, version) = match domain_of(node, chain_id, address).await? {
        Ok(domain) => domain,
        Err(what) => return unsupported(&what),
    };
    if let Err(e) = token
        .authorizationState(Address::ZERO, B256::ZERO)
        .call()
        .await
    {
        reverted(e)?;
        return unsupported("does not implement EIP-3009 (authorizationState)");
    }
    let units = read_units(&token).await?;
    Ok(TokenSupport::Eip3009 {
        name,
        version,
        contract_signatures: has_bytes_form(node, address).await?,
        units,
    })
}

/// A token's EIP-712 name and version, accepted only if they reproduce the token's own
/// `DOMAIN_SEPARATOR()` for this chain and address: from EIP-5267 `eip712Domain()` when the token
/// has it, else from `name()` and `version()` (Circle's FiatToken, USDC and EURC, has no EIP-5267).
/// `Ok(Err(what))` says which check failed.
pub async fn domain_of(
    node: &Node,
    chain_id: u64,
    address: Address,
) -> Result<Result<(String, String), String>, ChainError> {
    let token = Eip712Token::new(address, node);
    let unsupported = |what: &str| Ok(Err(what.to_owned()));
    // A revert is an answer (the token lacks the function); a node that does not answer is not.
    let reverted = |e: alloy::contract::Error| match ChainError::from(e) {
        ChainError::Unreachable(why) => Err(ChainError::Unreachable(why)),
        _ => Ok(()),
    };
    let separator = match token.DOMAIN_SEPARATOR().call().await {
        Ok(separator) => separator,
        Err(e) => {
            reverted(e)?;
            return unsupported("has no DOMAIN_SEPARATOR()");
        }
    };
    let (name, version, source) = match token.eip712Domain().call().await {
        Ok(domain) => {
            if domain.verifyingContract != address || domain.chainId != U256::from(chain_id) {
                return unsupported(&format!(
                    "describes an EIP-712 domain (eip712Domain()) for chain {} and contract {}, not chain {chain_id} and itself",
                    domain.chainId, domain.verifyingContract
                ));
            }
            (domain.name, domain.version, "eip712Domain()")
        }
        Err(e) => {
            reverted(e)?;
            let name = match token.name().call().await {
                Ok(name) => name,
                Err(e) => {
                    reverted(e)?;
                    return unsupported("has neither eip712Domain() (EIP-5267) nor name()");
                }
            };
            let version = match token.version().call().await {
                Ok(version) => version,
                Err(e) => {
                    reverted(e)?;
                    return unsupported("has neither eip712Domain() (EIP-5267) nor version()");
                }
            };
            (name, version, "name() and version()")
        }
    };
    if eip712_domain(&name, &version, chain_id, address).separator() != separator {
        return unsupported(&format!(
            "has a DOMAIN_SEPARATOR() that its {source} (name {name:?}, version {version:?}) do not reproduce for chain {chain_id} and this address"
        ));
    }
    Ok(Ok((name, version)))
}

/// What any ERC-20 says of its units, EIP-3009 or not; `None` if there is no contract at
/// `address`.
pub async fn units(node: &Node, address: Address) -> Result<Option<Units>, ChainError> {
    use alloy::providers::Provider;
    if node.get_code_at(address).await?.is_empty() {
        return Ok(None);
    }
    read_units(&Eip712Token::new(address, node)).await.map(Some)
}

/// A token's symbol and decimals, each `None` where the token reverts (it lacks the function).
/// For people only: a symbol is kept as printable text of at most 32 characters, decimals only
/// where a uint256 amount can have them.
async fn read_units(token: &Eip712Token::Eip712TokenInstance<&Node>) -> Result<Units, ChainError> {
    let reverted = |e: alloy::contract::Error| match ChainError::from(e) {
        ChainError::Unreachable(why) => Err(ChainError::Unreachable(why)),
        _ => Ok(()),
    };
    let symbol = match token.symbol().call().await {
        Ok(symbol) => Some(
            symbol
                .chars()
                .filter(|c| !c.is_control())
                .take(32)
                .collect::<String>(),
        )
        .filter(|s| !s.is_empty()),
        Err(e) => reverted(e).map(|()| None)?,
    };
    let decimals = match token.decimals().call().await {
        Ok(decimals) => Some(decimals).filter(|d| *d <= 77),
        Err(e) => reverted(e).map(|()| None)?,
    };
    Ok(Units { symbol, decimals })
}

/// Whether `authorizer`'s `nonce` is used (or canceled) on the token, and what `authorizer` holds
/// of it: what an authorization about to be submitted needs of the chain.
pub async fn authorizer_state(
    node: &Node,
    token: Address,
    authorizer: Address,
    nonce: B256,
) -> Result<(bool, U256), ChainError> {
    let token = Eip712Token::new(token, node);
    let used = token
        .authorizationState(authorizer, nonce)
        .call()
        .await
        .map_err(ChainError::from)?;
    let balance = token
        .balanceOf(authorizer)
        .call()
        .await
        .map_err(ChainError::from)?;
    Ok((used, balance))
}

/// How people read a token's amounts: its symbol and decimals, if it says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Units {
    pub symbol: Option<String>,
    pub decimals: Option<u8>,
}

/// Whether the token has the `bytes signature` form of `transferWithAuthorization`: called with
/// an authorization that expired at 0, a token that has it reverts with its reason; one that does
/// not reverts with nothing (no such function, no fallback).
async fn has_bytes_form(node: &Node, address: Address) -> Result<bool, ChainError> {
    use alloy::{network::TransactionBuilder, providers::Provider, sol_types::SolCall};
    let probe = Eip3009Bytes::transferWithAuthorizationCall {
        from: Address::ZERO,
        to: Address::ZERO,
        value: U256::ZERO,
        validAfter: U256::ZERO,
        validBefore: U256::ZERO,
        nonce: B256::ZERO,
        signature: Default::default(),
    };
    let request = alloy::rpc::types::TransactionRequest::default()
        .with_to(address)
        .with_input(probe.abi_encode());
    match node.call(request).await {
        Ok(_) => Ok(true),
        Err(e) => match e.as_error_resp() {
            Some(payload) => Ok(payload
                .data
                .as_ref()
                .is_some_and(|data| data.get().trim_matches('"').len() > 2)),
            None => Err(e.into()),
        },
    }
}

sol! {
    /// What `inspect` asks a token: its EIP-712 domain either way, and EIP-3009's state.
    #[sol(rpc)]
    interface Eip712Token {
        function DOMAIN_SEPARATOR() external view returns (bytes32);
        function eip712Domain() external view returns (bytes1 fields, string name, string version, uint256 chainId, address verifyingContract, bytes32 salt, uint256[] extensions);
        function name() external view returns (string);
        function version() external view returns (string);
        function authorizationState(address authorizer, bytes32 nonce) external view returns (bool);
        function symbol() external view returns (string);
        function decimals() external view returns (uint8);
        function balanceOf(address holder) external view returns (uint256);
    }
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

    /// The `bytes signature` form of `transferWithAuthorization` (USDC v2.2 and ours), which
    /// passes a contract wallet's signature to its ERC-1271 check.
    interface Eip3009Bytes {
        function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, bytes signature) external;
    }
}
