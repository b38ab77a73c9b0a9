//! Deposit addresses on chain (`contracts/src/DepositForwarder.sol`, `chain::deposit`): the address
//! we compute is the one the factory computes and deploys to, and whatever is sent there reaches
//! only its merchant, in one transaction that deploys and flushes, then by plain flushes. Tokens
//! that misbehave are moved as well: one whose `transfer` returns nothing (as Tether's), one
//! that keeps a fee, and USDC.

use payments_api::chain::deposit::{devnet_factory, forwarder_address, intent_key};

use crate::helpers::chain::{Anvil, PAYEE, PAYER, PAYER_KEY, RELAYER_KEY, TOKEN, USDC};

/// Deploys a test token from its artifact, `PAYER` holding 1 000 000 of it; returns its address.
fn deploy_token(anvil: &Anvil, artifact: &str) -> String {
    let artifact: serde_json::Value = serde_json::from_str(artifact).unwrap();
    let argument = anvil.cast(&[
        "abi-encode",
        "constructor(address[],uint256)",
        &format!("[{PAYER}]"),
        "1000000000000",
    ]);
    let code = format!(
        "{}{}",
        artifact["bytecode"].as_str().unwrap(),
        argument.trim_start_matches("0x")
    );
    let receipt: serde_json::Value = serde_json::from_str(&anvil.cast(&[
        "send",
        "--private-key",
        PAYER_KEY,
        "--json",
        "--create",
        &code,
    ]))
    .unwrap();
    anvil.cast(&[
        "to-check-sum-address",
        receipt["contractAddress"].as_str().unwrap(),
    ])
}

fn send(anvil: &Anvil, key: &str, to: &str, signature: &str, args: &[&str]) {
    let mut all = vec!["send", "--private-key", key, to, signature];
    all.extend_from_slice(args);
    anvil.cast(&all);
}

#[tokio::test]
async fn a_deposit_address_is_the_factorys_and_what_reaches_it_goes_only_to_its_merchant() {
    let anvil = Anvil::start().await;
    let factory = devnet_factory().to_string();
    assert_ne!(
        anvil.cast(&["code", &factory]),
        "0x",
        "the devnet has the factory"
    );
    let no_return = deploy_token(
        &anvil,
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/contracts/build/NoReturnToken.json"
        )),
    );
    let fee = deploy_token(
        &anvil,
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/contracts/build/FeeToken.json"
        )),
    );
    // What arrives of `sent` at the end of one transfer.
    let arrives = |token: &str, sent: u128| {
        if token == fee {
            sent - sent / 100
        } else {
            sent
        }
    };

    for token in [TOKEN, USDC, no_return.as_str(), fee.as_str()] {
        let intent = intent_key(&format!("pi_deposit_{token}"));
        let computed = forwarder_address(
            devnet_factory(),
            PAYEE.parse().unwrap(),
            token.parse().unwrap(),
            intent,
        );
        let address = computed.to_string();
        let on_chain = anvil.cast(&[
            "call",
            &factory,
            "forwarderOf(address,address,bytes32)(address)",
            PAYEE,
            token,
            &intent.to_string(),
        ]);
        assert_eq!(on_chain, address, "{token}: Solidity's rule and ours agree");
        let elsewhere = forwarder_address(
            devnet_factory(),
            PAYER.parse().unwrap(),
            token.parse().unwrap(),
            intent,
        );
        assert_ne!(elsewhere, computed, "another merchant, another address");
        assert_eq!(
            anvil.cast(&["code", &address]),
            "0x",
            "nothing deployed yet"
        );

        // A plain transfer to the address; the first sweep deploys the forwarder and flushes.
        send(
            &anvil,
            PAYER_KEY,
            token,
            "transfer(address,uint256)",
            &[&address, "1000000"],
        );
        let held = anvil.balance_of(token, &address);
        assert_eq!(held, arrives(token, 1_000_000), "{token}: what arrived");
        let before = anvil.balance_of(token, PAYEE);
        send(
            &anvil,
            RELAYER_KEY,
            &factory,
            "deployAndFlush(address,address,bytes32,address)",
            &[PAYEE, token, &intent.to_string(), token],
        );
        assert_eq!(
            anvil.balance_of(token, PAYEE) - before,
            arrives(token, held)
        );
        assert_eq!(anvil.balance_of(token, &address), 0);
        assert_eq!(
            anvil.cast(&["call", &address, "merchant()(address)"]),
            PAYEE
        );

        // Later deposits are flushed with a plain call, by anyone; the merchant still gets them.
        send(
            &anvil,
            PAYER_KEY,
            token,
            "transfer(address,uint256)",
            &[&address, "500000"],
        );
        let held = anvil.balance_of(token, &address);
        let before = anvil.balance_of(token, PAYEE);
        send(&anvil, PAYER_KEY, &address, "flush(address)", &[token]);
        assert_eq!(
            anvil.balance_of(token, PAYEE) - before,
            arrives(token, held)
        );
    }

    // Another token sent by mistake to a deployed forwarder is swept to the merchant too.
    let intent = intent_key(&format!("pi_deposit_{TOKEN}"));
    let address = forwarder_address(
        devnet_factory(),
        PAYEE.parse().unwrap(),
        TOKEN.parse().unwrap(),
        intent,
    )
    .to_string();
    send(
        &anvil,
        PAYER_KEY,
        &no_return,
        "transfer(address,uint256)",
        &[&address, "7"],
    );
    let before = anvil.balance_of(&no_return, PAYEE);
    send(
        &anvil,
        RELAYER_KEY,
        &address,
        "flush(address)",
        &[&no_return],
    );
    assert_eq!(anvil.balance_of(&no_return, PAYEE) - before, 7);
}
