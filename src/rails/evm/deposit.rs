//! Deposit addresses: an intent's forwarder (`contracts/src/DepositForwarder.sol`) lives at a
//! CREATE2 address under our factory, computed from the merchant, the token and the intent. The
//! address exists before anything is deployed there, and whatever reaches it can only leave for
//! the merchant. Also the factory's devnet deployment, at a fixed address.

use alloy::{
    network::EthereumWallet,
    primitives::{Address, B256, U256, keccak256},
    providers::{Provider, ProviderBuilder},
    signers::local::PrivateKeySigner,
    sol_types::SolValue,
};
use anyhow::{Context, bail};

mod bindings {
    alloy::sol! {
        #[sol(rpc)]
        DepositForwarder,
        "contracts/build/DepositForwarder.json"
    }
    alloy::sol! {
        #[sol(rpc)]
        DepositForwarderFactory,
        "contracts/build/DepositForwarderFactory.json"
    }
}
pub use bindings::{DepositForwarder, DepositForwarderFactory};

/// Anvil's sixth account deploys the devnet factory at its nonce 0. Public knowledge: for a
/// local devnet only.
const DEVNET_FACTORY_DEPLOYER_KEY: &str =
    "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba";

/// Where `payments-api devnet` puts the factory.
pub fn devnet_factory() -> Address {
    deployer().address().create(0)
}

fn deployer() -> PrivateKeySigner {
    DEVNET_FACTORY_DEPLOYER_KEY.parse().expect("a valid key")
}

/// What names an intent to the factory: the hash of its id.
pub fn intent_key(intent_id: &str) -> B256 {
    keccak256(intent_id.as_bytes())
}

/// The rule `DepositForwarderFactory.forwarderOf` follows on chain: the forwarder for
/// (`merchant`, `token`, `intent`) under `factory`, deployed or not. The merchant is part of the
/// forwarder's init code, so another merchant's forwarder is another address.
pub fn forwarder_address(
    factory: Address,
    merchant: Address,
    token: Address,
    intent: B256,
) -> Address {
    forwarder_of(factory, Forwarders::of(merchant), token, intent)
}

/// The hash of `merchant`'s forwarders' init code: what every one of its forwarder addresses is
/// made from, hashed once for the many options of an order (the code is a few kilobytes).
#[derive(Debug, Clone, Copy)]
pub struct Forwarders(B256);

impl Forwarders {
    pub fn of(merchant: Address) -> Self {
        let mut init_code = DepositForwarder::BYTECODE.to_vec();
        init_code.extend_from_slice(&merchant.abi_encode());
        Self(keccak256(init_code))
    }
}

/// [`forwarder_address`] with the merchant's init code hashed already.
pub fn forwarder_of(
    factory: Address,
    merchant: Forwarders,
    token: Address,
    intent: B256,
) -> Address {
    let salt = keccak256((token, intent).abi_encode_params());
    factory.create2(salt, merchant.0)
}

/// An EIP-681 payment request: a `transfer` of `amount` base units of `token` on chain
/// `chain_id` to `to`, as wallets scan it (`ethereum:<token>@<chain id>/transfer?address=…&uint256=…`).
pub fn payment_uri(token: Address, chain_id: u64, to: Address, amount: U256) -> String {
    format!("ethereum:{token}@{chain_id}/transfer?address={to}&uint256={amount}")
}

/// Deploys the factory on a devnet; `false` if it is there already.
pub async fn deploy_devnet_factory(rpc_url: &url::Url) -> anyhow::Result<bool> {
    let deployer = deployer();
    let from = deployer.address();
    let factory = devnet_factory();
    let node = ProviderBuilder::new()
        .wallet(EthereumWallet::from(deployer))
        .connect_http(rpc_url.clone());
    let code = node
        .get_code_at(factory)
        .await
        .with_context(|| format!("cannot reach the chain at {rpc_url}"))?;
    if !code.is_empty() {
        // The factory is what computes forwarders by our rule.
        let probe = DepositForwarderFactory::new(factory, &node)
            .forwarderOf(Address::ZERO, Address::ZERO, B256::ZERO)
            .call()
            .await;
        let expected = forwarder_address(factory, Address::ZERO, Address::ZERO, B256::ZERO);
        if probe.ok() != Some(expected) {
            bail!("{factory} holds another contract, not the deposit factory");
        }
        return Ok(false);
    }
    if node.get_transaction_count(from).await? > 0 {
        bail!(
            "{from} already used its nonce 0 on this chain without deploying the deposit factory at {factory}: start from a fresh anvil"
        );
    }
    let deployed = DepositForwarderFactory::deploy(&node)
        .await
        .context("deploying the deposit factory")?;
    if *deployed.address() != factory {
        bail!(
            "the deposit factory landed at {} instead of {factory}",
            deployed.address()
        );
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payment_request_is_an_eip681_token_transfer() {
        let token: Address = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
            .parse()
            .unwrap();
        let to: Address = "0x0116686E2291dbd5e317F47faDBFb43B599786Ef"
            .parse()
            .unwrap();
        assert_eq!(
            payment_uri(token, 31337, to, U256::from(5_000_000u64)),
            "ethereum:0x5FbDB2315678afecb367f032d93F642f64180aa3@31337/transfer?address=0x0116686E2291dbd5e317F47faDBFb43B599786Ef&uint256=5000000"
        );
    }
}
