//! Permit2 and x402's Permit2 proxies on the devnet (`rails::evm::permit2`): placed at their
//! canonical addresses with the domain a wallet computes for them, so a signature made by code not
//! ours (cast's EIP-712) moves a token without EIP-3009 through x402's proxies, once.

use payments_api::rails::evm::permit2::{
    PERMIT2, X402_EXACT_PROXY, X402_UPTO_PROXY, permit2_domain_separator,
};
use serde_json::{Value, json};

use crate::helpers::chain::{Anvil, PAYEE, PAYER, PAYER_KEY, RELAYER_KEY};

/// Anvil's fourth account, `RELAYER_KEY`'s: it submits, and is the `upto` payment's facilitator.
const RELAYER: &str = "0x90F79bf6EB2c4f870365E785982E1f101E93b906";
const FAR_DEADLINE: &str = "99999999999";

/// The typed data a payer signs for x402's proxies: a `PermitWitnessTransferFrom` whose spender
/// is the proxy, with the proxy's witness.
fn permit(
    chain_id: u64,
    token: &str,
    amount: &str,
    nonce: &str,
    spender: &str,
    witness: Value,
) -> Value {
    let mut witness_type = vec![json!({"name": "to", "type": "address"})];
    if witness.get("facilitator").is_some() {
        witness_type.push(json!({"name": "facilitator", "type": "address"}));
    }
    witness_type.push(json!({"name": "validAfter", "type": "uint256"}));
    json!({
        "types": {
            "EIP712Domain": [
                {"name": "name", "type": "string"},
                {"name": "chainId", "type": "uint256"},
                {"name": "verifyingContract", "type": "address"}
            ],
            "PermitWitnessTransferFrom": [
                {"name": "permitted", "type": "TokenPermissions"},
                {"name": "spender", "type": "address"},
                {"name": "nonce", "type": "uint256"},
                {"name": "deadline", "type": "uint256"},
                {"name": "witness", "type": "Witness"}
            ],
            "TokenPermissions": [
                {"name": "token", "type": "address"},
                {"name": "amount", "type": "uint256"}
            ],
            "Witness": witness_type
        },
        "primaryType": "PermitWitnessTransferFrom",
        "domain": {"name": "Permit2", "chainId": chain_id, "verifyingContract": PERMIT2.to_string()},
        "message": {
            "permitted": {"token": token, "amount": amount},
            "spender": spender,
            "nonce": nonce,
            "deadline": FAR_DEADLINE,
            "witness": witness
        }
    })
}

/// `PAYER`'s signature of `typed`, by cast.
fn sign(anvil: &Anvil, typed: &Value) -> String {
    let file = std::env::temp_dir().join(format!(
        "permit2-{}-{}.json",
        std::process::id(),
        fastrand::u64(..)
    ));
    std::fs::write(&file, typed.to_string()).unwrap();
    let signature = anvil.cast(&[
        "wallet",
        "sign",
        "--private-key",
        PAYER_KEY,
        "--data",
        "--from-file",
        file.to_str().unwrap(),
    ]);
    std::fs::remove_file(file).unwrap();
    signature
}

#[tokio::test]
async fn permit2_and_x402s_proxies_move_a_token_without_eip3009_by_a_signature_cast_makes() {
    let anvil = Anvil::start().await;
    let (permit2, exact, upto) = (
        PERMIT2.to_string(),
        X402_EXACT_PROXY.to_string(),
        X402_UPTO_PROXY.to_string(),
    );
    assert_eq!(
        anvil.cast(&["call", &permit2, "DOMAIN_SEPARATOR()(bytes32)"]),
        permit2_domain_separator(anvil.chain_id).to_string()
    );
    for proxy in [&exact, &upto] {
        assert_eq!(anvil.cast(&["call", proxy, "PERMIT2()(address)"]), permit2);
    }
    // A token like Tether's: its `transfer` returns nothing, and it has no EIP-3009.
    let token = anvil.deploy_token(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/contracts/build/NoReturnToken.json"
    )));
    anvil.send(
        PAYER_KEY,
        &token,
        "approve(address,uint256)",
        &[&permit2, "1000000000"],
    );
    let before = anvil.balance_of(&token, PAYEE);

    // exact: the whole amount, to the witness's `to`, by anyone who submits it.
    let signed = sign(
        &anvil,
        &permit(
            anvil.chain_id,
            &token,
            "1000",
            "7",
            &exact,
            json!({"to": PAYEE, "validAfter": "0"}),
        ),
    );
    let exact_settle = |submit: &str| {
        let mut args = vec![submit];
        if submit == "call" {
            args.extend(["--from", RELAYER]);
        } else {
            args.extend(["--private-key", RELAYER_KEY]);
        }
        let permit = format!("(({token},1000),7,{FAR_DEADLINE})");
        let witness = format!("({PAYEE},0)");
        args.extend([
            exact.as_str(),
            "settle(((address,uint256),uint256,uint256),address,(address,uint256),bytes)",
            &permit,
            PAYER,
            &witness,
            &signed,
        ]);
        anvil.try_cast(&args)
    };
    exact_settle("send").expect("the exact proxy settles the payer's signed permit");
    assert_eq!(anvil.balance_of(&token, PAYEE) - before, 1000);
    // The nonce is spent: the same permit again reverts with Permit2's InvalidNonce().
    let replay = exact_settle("call").expect_err("a permit pays once");
    assert!(replay.contains("0x756688fe"), "{replay}");

    // upto: at most the signed amount, only by the facilitator the witness names.
    let signed = sign(
        &anvil,
        &permit(
            anvil.chain_id,
            &token,
            "1000",
            "8",
            &upto,
            json!({"to": PAYEE, "facilitator": RELAYER, "validAfter": "0"}),
        ),
    );
    let upto_settle = |key: &str, amount: &str| {
        let permit = format!("(({token},1000),8,{FAR_DEADLINE})");
        let witness = format!("({PAYEE},{RELAYER},0)");
        anvil.try_cast(&[
            "send",
            "--private-key",
            key,
            &upto,
            "settle(((address,uint256),uint256,uint256),uint256,address,(address,address,uint256),bytes)",
            &permit,
            amount,
            PAYER,
            &witness,
            &signed,
        ])
    };
    let stranger = upto_settle(PAYER_KEY, "400").expect_err("only the named facilitator settles");
    assert!(stranger.contains("0x0f6fae87"), "{stranger}");
    let over = upto_settle(RELAYER_KEY, "1001").expect_err("never above the signed amount");
    assert!(over.contains("0xfe64b4c7"), "{over}");
    upto_settle(RELAYER_KEY, "400").expect("the facilitator charges what was used");
    assert_eq!(anvil.balance_of(&token, PAYEE) - before, 1400);
}
