//! `payments-api devnet --rpc-url URL`: the seed's token and USDC on a fresh anvil. Anvil's first
//! account deploys the devnet token at its nonce 0, which puts it at
//! `0x5FbDB2315678afecb367f032d93F642f64180aa3`, minting 1 000 000 tokens to each of the next three
//! accounts in the constructor: one transaction, so it happens entirely or not at all. Then
//! Circle's FiatTokenV2_2 is deployed behind its proxy at `0x0C8E79F3534B00D9a3D4a856B665Bf4eBC22f2ba`
//! (`fiat_token`), minting the same to the same accounts, and the factory of deposit addresses
//! (`deposit`) by anvil's sixth account, Permit2 with x402's two Permit2 proxies at their
//! canonical addresses (`permit2`), and a token like Tether's (no EIP-3009, its `transfer`
//! returns nothing) by anvil's eighth account at `0xef11D1c2aA48826D4c41e54ab82D1Ff5Ad8A64Ca`,
//! what a wallet pays by Permit2, minting the same to the same accounts. A second run finds them
//! all and changes nothing.

use alloy::{
    network::EthereumWallet,
    primitives::{Address, U256},
    providers::{Provider, ProviderBuilder},
    signers::local::PrivateKeySigner,
};
use anyhow::{Context, bail};

use super::token::DevnetUSD;

/// The private keys of anvil's first four accounts (from its well-known test mnemonic). Public
/// knowledge: for a local devnet only.
pub const ANVIL_KEYS: [&str; 4] = [
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
];

/// Each holder's starting balance: 1 000 000 tokens of 6 decimals.
pub const MINTED_EACH: u64 = 1_000_000_000_000;

/// Where the tokens are after a run, and whether this run deployed them.
pub struct Devnet {
    pub token: Address,
    pub usdc: Address,
    /// The factory of deposit addresses (`rails::evm::deposit`).
    pub deposit_factory: Address,
    pub deployed_now: bool,
}

pub async fn set_up(rpc_url: &url::Url) -> anyhow::Result<Devnet> {
    let deployer: PrivateKeySigner = ANVIL_KEYS[0].parse().expect("a valid key");
    let holders: Vec<Address> = ANVIL_KEYS[1..]
        .iter()
        .map(|key| {
            key.parse::<PrivateKeySigner>()
                .expect("a valid key")
                .address()
        })
        .collect();
    let from = deployer.address();
    let node = ProviderBuilder::new()
        .wallet(EthereumWallet::from(deployer))
        .connect_http(rpc_url.clone());
    let token = from.create(0);
    let devnet_usd = deploy_devnet_usd(&node, from, token, holders.clone(), rpc_url).await?;
    let usdc = super::fiat_token::deploy(rpc_url, &holders, MINTED_EACH)
        .await
        .context("deploying USDC (FiatTokenV2_2)")?;
    let factory = super::deposit::deploy_devnet_factory(rpc_url).await?;
    let permit2 = super::permit2::place(rpc_url)
        .await
        .context("placing Permit2 and x402's proxies")?;
    let usdt_like = deploy_usdt_like(rpc_url, holders).await?;
    Ok(Devnet {
        token,
        usdc: super::fiat_token::address(),
        deposit_factory: super::deposit::devnet_factory(),
        deployed_now: devnet_usd || usdc || factory || permit2 || usdt_like,
    })
}

/// Anvil's eighth account deploys the token like Tether's at its nonce 0. Public knowledge: for a
/// local devnet only.
const USDT_LIKE_DEPLOYER_KEY: &str =
    "0x4bbbf85ce3377467afe5d46f804f221813b2bb87f24d81f60f1fcdbf7cbf4356";

mod usdt_like_bindings {
    alloy::sol! {
        #[sol(rpc)]
        NoReturnToken,
        "contracts/build/NoReturnToken.json"
    }
}
use usdt_like_bindings::NoReturnToken;

/// Where `payments-api devnet` puts the token like Tether's.
pub fn usdt_like() -> Address {
    usdt_like_deployer().address().create(0)
}

fn usdt_like_deployer() -> PrivateKeySigner {
    USDT_LIKE_DEPLOYER_KEY.parse().expect("a valid key")
}

/// Deploys the token like Tether's, `holders` each holding `MINTED_EACH`; `false` if it is there.
async fn deploy_usdt_like(rpc_url: &url::Url, holders: Vec<Address>) -> anyhow::Result<bool> {
    let deployer = usdt_like_deployer();
    let from = deployer.address();
    let token = usdt_like();
    let node = ProviderBuilder::new()
        .wallet(EthereumWallet::from(deployer))
        .connect_http(rpc_url.clone());
    if !node.get_code_at(token).await?.is_empty() {
        let symbol = NoReturnToken::new(token, &node).symbol().call().await?;
        if symbol != "NRUSD" {
            bail!("{token} holds another contract ({symbol:?}), not the token like Tether's");
        }
        return Ok(false);
    }
    if node.get_transaction_count(from).await? > 0 {
        bail!(
            "{from} already used its nonce 0 on this chain without deploying the token like Tether's at {token}: start from a fresh anvil"
        );
    }
    let deployed = NoReturnToken::deploy(&node, holders, U256::from(MINTED_EACH))
        .await
        .context("deploying the token like Tether's")?;
    if *deployed.address() != token {
        bail!(
            "the token like Tether's landed at {} instead of {token}",
            deployed.address()
        );
    }
    Ok(true)
}

/// Deploys the devnet token at `token`; `false` if it is there already.
async fn deploy_devnet_usd(
    node: &impl Provider,
    from: Address,
    token: Address,
    holders: Vec<Address>,
    rpc_url: &url::Url,
) -> anyhow::Result<bool> {
    let code = node
        .get_code_at(token)
        .await
        .with_context(|| format!("cannot reach the chain at {rpc_url}"))?;
    if !code.is_empty() {
        let name = DevnetUSD::new(token, node).name().call().await?;
        if name != "Devnet USD" {
            bail!("{token} holds another contract ({name:?}), not the devnet token");
        }
        return Ok(false);
    }
    if node.get_transaction_count(from).await? > 0 {
        bail!(
            "{from} already used its nonce 0 on this chain without deploying the token at {token}: start from a fresh anvil"
        );
    }
    let deployed = DevnetUSD::deploy(node, holders, U256::from(MINTED_EACH))
        .await
        .context("deploying the devnet token")?;
    if *deployed.address() != token {
        bail!(
            "the token landed at {} instead of {token}",
            deployed.address()
        );
    }
    Ok(true)
}
