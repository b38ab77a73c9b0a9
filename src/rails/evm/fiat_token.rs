//! Circle's USDC as deployed on real chains: FiatTokenV2_2 behind a `FiatTokenProxy`, built from
//! Circle's own source (`contracts/vendor/stablecoin-evm/`) into `contracts/build/`, and deployed
//! on a devnet the way Circle's deployment guide does (`docs/settlement.md`, "USDC on the devnet").

use alloy::{
    network::{EthereumWallet, TransactionBuilder},
    primitives::{Address, Bytes, U256},
    providers::{Provider, ProviderBuilder},
    rpc::types::TransactionRequest,
    signers::local::PrivateKeySigner,
    sol_types::SolValue,
};
use anyhow::{Context, bail};

/// The bindings `sol!` generates (`initialize` takes eight arguments).
#[allow(clippy::too_many_arguments)]
mod bindings {
    alloy::sol! {
        /// What the devnet set-up calls on the token, its proxy and its roles.
        #[sol(rpc)]
        interface FiatToken {
            function initialize(string tokenName, string tokenSymbol, string tokenCurrency, uint8 tokenDecimals, address newMasterMinter, address newPauser, address newBlacklister, address newOwner) external;
            function initializeV2(string newName) external;
            function initializeV2_1(address lostAndFound) external;
            function initializeV2_2(address[] accountsToBlacklist, string newSymbol) external;
            function configureMinter(address minter, uint256 minterAllowedAmount) external returns (bool);
            function mint(address to, uint256 amount) external returns (bool);
            function changeAdmin(address newAdmin) external;
            function name() external view returns (string);
            function totalSupply() external view returns (uint256);
            function pause() external;
            function unpause() external;
        }
    }
}
use bindings::FiatToken;

/// Anvil's tenth account deploys USDC and holds its roles (owner, master minter, minter, pauser,
/// blacklister); its ninth is the proxy's admin, which cannot call the token through the proxy.
pub const DEPLOYER_KEY: &str = "0x2a871d0798f97d79848a013d4936a73bf4cc922c825d33c1cf7073dff6d409c6";
const PROXY_ADMIN: Address =
    alloy::primitives::address!("0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f");
/// The proxy is the deployer's seventh creation (nonce 6): library, implementation, four calls
/// that lock the implementation, then the proxy.
const PROXY_NONCE: u64 = 6;

struct Artifact {
    bytecode: String,
    link_references: serde_json::Value,
}

fn artifact(json: &str) -> Artifact {
    let value: serde_json::Value = serde_json::from_str(json).expect("a committed artifact");
    Artifact {
        bytecode: value["bytecode"].as_str().expect("bytecode").to_owned(),
        link_references: value["linkReferences"].clone(),
    }
}

/// The creation bytecode with every library placeholder replaced by `library`'s address, at the
/// offsets solc gives.
fn linked(artifact: &Artifact, library: Address) -> anyhow::Result<Bytes> {
    let mut hex = artifact.bytecode.trim_start_matches("0x").to_owned();
    let address = hex::encode(library);
    let references = artifact.link_references.as_object().into_iter().flatten();
    for (_, libraries) in references {
        for (_, places) in libraries.as_object().into_iter().flatten() {
            for place in places.as_array().into_iter().flatten() {
                let start = place["start"].as_u64().context("link offset")? as usize * 2;
                hex.replace_range(start..start + 40, &address);
            }
        }
    }
    Ok(hex::decode(hex)?.into())
}

/// The address USDC's proxy gets on a fresh chain.
pub fn address() -> Address {
    signer().address().create(PROXY_NONCE)
}

fn signer() -> PrivateKeySigner {
    DEPLOYER_KEY.parse().expect("a valid key")
}

/// Deploys USDC at [`address`] and mints `each` to every holder; `false` if it is there already.
/// Fourteen transactions: a run cut short leaves a chain to start afresh, which it says.
pub async fn deploy(rpc_url: &url::Url, holders: &[Address], each: u64) -> anyhow::Result<bool> {
    let deployer = signer();
    let from = deployer.address();
    let node = ProviderBuilder::new()
        .wallet(EthereumWallet::from(deployer))
        .connect_http(rpc_url.clone());
    let proxy = address();
    let token = FiatToken::new(proxy, &node);
    if !node.get_code_at(proxy).await?.is_empty() {
        let name = token.name().call().await?;
        if name != "USD Coin" || token.totalSupply().call().await?.is_zero() {
            bail!(
                "{proxy} holds {name:?}, not a finished USDC deployment: start from a fresh anvil"
            );
        }
        return Ok(false);
    }
    if node.get_transaction_count(from).await? > 0 {
        bail!(
            "{from} already sent transactions on this chain without finishing USDC at {proxy}: start from a fresh anvil"
        );
    }
    let create = |code: Bytes| {
        let node = &node;
        async move {
            let receipt = node
                .send_transaction(TransactionRequest::default().with_deploy_code(code))
                .await?
                .get_receipt()
                .await?;
            anyhow::ensure!(receipt.status(), "a USDC deployment reverted");
            receipt
                .contract_address
                .context("a deployment without an address")
        }
    };
    let library = create(
        hex::decode(
            artifact(include_str!(
                "../../../contracts/build/SignatureChecker.json"
            ))
            .bytecode
            .trim_start_matches("0x"),
        )?
        .into(),
    )
    .await?;
    let implementation = create(linked(
        &artifact(include_str!("../../../contracts/build/FiatTokenV2_2.json")),
        library,
    )?)
    .await?;

    // The implementation is locked with throwaway values, as Circle does, so that nobody can
    // initialize it and act as its owner.
    let locked = FiatToken::new(implementation, &node);
    let throwaway = Address::with_last_byte(1);
    confirm(locked.initialize(
        String::new(),
        String::new(),
        String::new(),
        0,
        throwaway,
        throwaway,
        throwaway,
        throwaway,
    ))
    .await?;
    confirm(locked.initializeV2(String::new())).await?;
    confirm(locked.initializeV2_1(throwaway)).await?;
    confirm(locked.initializeV2_2(Vec::new(), String::new())).await?;

    let mut proxy_code =
        artifact(include_str!("../../../contracts/build/FiatTokenProxy.json")).bytecode;
    proxy_code.push_str(&hex::encode(implementation.abi_encode()));
    let deployed = create(hex::decode(proxy_code.trim_start_matches("0x"))?.into()).await?;
    if deployed != proxy {
        bail!("USDC's proxy landed at {deployed} instead of {proxy}");
    }
    confirm(token.changeAdmin(PROXY_ADMIN)).await?;
    confirm(token.initialize(
        "USD Coin".to_owned(),
        "USDC".to_owned(),
        "USD".to_owned(),
        6,
        from,
        from,
        from,
        from,
    ))
    .await?;
    confirm(token.initializeV2("USD Coin".to_owned())).await?;
    confirm(token.initializeV2_1(from)).await?;
    confirm(token.initializeV2_2(Vec::new(), "USDC".to_owned())).await?;
    let total = U256::from(each) * U256::from(holders.len());
    confirm(token.configureMinter(from, total)).await?;
    for holder in holders {
        confirm(token.mint(*holder, U256::from(each))).await?;
    }
    Ok(true)
}

/// Sends a call and waits for it to succeed.
async fn confirm<P, C>(call: alloy::contract::CallBuilder<P, C>) -> anyhow::Result<()>
where
    P: Provider,
    C: alloy::contract::CallDecoder,
{
    let receipt = call.send().await?.get_receipt().await?;
    anyhow::ensure!(receipt.status(), "a USDC set-up call reverted");
    Ok(())
}
