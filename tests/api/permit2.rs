//! Permit2 and x402's Permit2 proxies on the devnet (`rails::evm::permit2`): placed at their
//! canonical addresses with the domain a wallet computes for them, so a signature made by code not
//! ours (cast's EIP-712) moves a token without EIP-3009 through x402's proxies, once; and x402's
//! `exact` scheme by Permit2 settled through our facilitator (`docs/x402.md`, "Permit2").

use payments_api::rails::evm::permit2::{
    PERMIT2, X402_EXACT_PROXY, X402_UPTO_PROXY, permit2_domain_separator,
};
use serde_json::{Value, json};

use crate::helpers::{
    DEMO_TOKEN, TestApp,
    chain::{Anvil, PAYEE, PAYEE_KEY, PAYER, PAYER_KEY, RELAYER_KEY, app_on},
};

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
    permit_until(
        chain_id,
        token,
        amount,
        nonce,
        FAR_DEADLINE,
        spender,
        witness,
    )
}

fn permit_until(
    chain_id: u64,
    token: &str,
    amount: &str,
    nonce: &str,
    deadline: &str,
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
            "deadline": deadline,
            "witness": witness
        }
    })
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
    let token = usdt_like_approved(&anvil);
    let before = anvil.balance_of(&token, PAYEE);

    // exact: the whole amount, to the witness's `to`, by anyone who submits it.
    let signed = anvil.sign(
        PAYER_KEY,
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
    let signed = anvil.sign(
        PAYER_KEY,
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

/// A token like Tether's (its `transfer` returns nothing, no EIP-3009), `PAYER` holding some and
/// letting Permit2 move it.
fn usdt_like_approved(anvil: &Anvil) -> String {
    let token = usdt_like(anvil);
    approve_permit2(anvil, &token);
    token
}

/// A token like Tether's, `PAYER` holding some.
fn usdt_like(anvil: &Anvil) -> String {
    anvil.deploy_token(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/contracts/build/NoReturnToken.json"
    )))
}

/// A Permit2 intent of 1000 of `token` to `PAYEE`, created under the Idempotency-Key `key`
/// (naming `PAYER` as its payer, or leaving the payer to the document), and the document `PAYER`
/// signs for it.
async fn permit2_intent(
    app: &TestApp,
    token: &str,
    key: &str,
    names_payer: bool,
) -> (String, Value) {
    let mut body = json!({
        "chain": "evm:31337", "token": token, "amount": "1000", "merchant": PAYEE,
        "payment_method": "permit2", "expires_in_seconds": 900
    });
    if names_payer {
        body["payer"] = PAYER.into();
    }
    let created = app
        .create_intent(DEMO_TOKEN, Some(key), &body.to_string())
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.json()["id"].as_str().unwrap().to_owned();
    let mut path = format!("/v1/payment_intents/{id}/authorization");
    if !names_payer {
        path.push_str(&format!("?payer={PAYER}"));
    }
    let document = app.get_as(DEMO_TOKEN, &path).await;
    assert_eq!(document.status, 200, "{}", document.body);
    (id, document.json())
}

/// `PAYER` lets Permit2 move its `token`, as a wallet's approval does.
fn approve_permit2(anvil: &Anvil, token: &str) {
    let permit2 = PERMIT2.to_string();
    anvil.send(
        PAYER_KEY,
        token,
        "approve(address,uint256)",
        &[&permit2, "1000000000"],
    );
}

/// An x402 `exact` payment of `amount` of `token` by Permit2, as `@x402/evm`'s client writes it,
/// signed by cast, valid for ten minutes of chain time.
async fn permit2_payment(anvil: &Anvil, token: &str, amount: &str, nonce: &str) -> Value {
    signed_for_proxy(anvil, token, amount, nonce, None).await
}

/// The same for x402's `upto` proxy, `facilitator` the one that may charge it.
async fn upto_payment(
    anvil: &Anvil,
    token: &str,
    ceiling: &str,
    nonce: &str,
    facilitator: &str,
) -> Value {
    signed_for_proxy(anvil, token, ceiling, nonce, Some(facilitator)).await
}

async fn signed_for_proxy(
    anvil: &Anvil,
    token: &str,
    amount: &str,
    nonce: &str,
    facilitator: Option<&str>,
) -> Value {
    let now = crate::helpers::chain::chain_time(anvil).await;
    let deadline = (now + 600).to_string();
    let valid_after = (now - 600).to_string();
    let (proxy, scheme, witness) = match facilitator {
        None => (
            X402_EXACT_PROXY.to_string(),
            "exact",
            json!({"to": PAYEE, "validAfter": valid_after}),
        ),
        Some(facilitator) => (
            X402_UPTO_PROXY.to_string(),
            "upto",
            json!({"to": PAYEE, "facilitator": facilitator, "validAfter": valid_after}),
        ),
    };
    let typed = permit_until(
        anvil.chain_id,
        token,
        amount,
        nonce,
        &deadline,
        &proxy,
        witness,
    );
    let signature = anvil.sign(PAYER_KEY, &typed);
    let message = &typed["message"];
    let requirements = json!({
        "scheme": scheme, "network": "eip155:31337", "amount": amount, "asset": token,
        "payTo": PAYEE, "maxTimeoutSeconds": 60, "extra": {"assetTransferMethod": "permit2"}
    });
    json!({
        "x402Version": 2,
        "paymentPayload": {
            "x402Version": 2,
            "accepted": requirements,
            "payload": {
                "signature": signature,
                "permit2Authorization": {
                    "from": PAYER,
                    "permitted": message["permitted"],
                    "spender": proxy,
                    "nonce": nonce,
                    "deadline": deadline,
                    "witness": message["witness"],
                }
            }
        },
        "paymentRequirements": requirements,
    })
}

/// The relayer sends the proxy's settle; the payment is an intent paid once, booked once and found
/// on chain by `reconcile`; a second settle hears the spent nonce and the hash that spent it.
#[tokio::test]
async fn an_x402_payment_by_permit2_is_settled_once_as_an_intent_booked_and_reconciled() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let token = usdt_like_approved(&anvil);
    let nonce = fastrand::u64(..).to_string();
    let body = permit2_payment(&anvil, &token, "1000", &nonce).await;
    let post = |path: &'static str, body: &Value| {
        let body = body.to_string();
        let app = &app;
        async move {
            let answer = app.post_as(DEMO_TOKEN, path, None, &body).await;
            assert_eq!(answer.status, 200, "{}", answer.body);
            answer.json()
        }
    };

    let verified = post("/x402/verify", &body).await;
    assert_eq!(verified["isValid"], true, "{verified}");
    assert_eq!(verified["payer"], PAYER);
    let before = anvil.balance_of(&token, PAYEE);
    let settled = post("/x402/settle", &body).await;
    assert_eq!(settled["success"], true, "{settled}");
    assert_eq!(settled["payer"], PAYER);
    let hash = settled["transaction"].as_str().unwrap().to_owned();
    assert_eq!(anvil.balance_of(&token, PAYEE) - before, 1000);
    // Our relayer called x402's exact proxy, as the reference facilitator does.
    let sent = anvil
        .rpc("eth_getTransactionByHash", json!([hash.as_str()]))
        .await;
    assert_eq!(
        sent["to"].as_str().unwrap().to_lowercase(),
        X402_EXACT_PROXY.to_string().to_lowercase()
    );

    // Again: the nonce is spent, the answer names the transaction that spent it.
    let again = post("/x402/settle", &body).await;
    assert_eq!(again["success"], false, "{again}");
    assert_eq!(again["errorReason"], "permit2_invalid_nonce");
    assert_eq!(again["transaction"], hash.as_str());

    // The payment is an intent paid by Permit2, found by the permit's nonce as the client wrote it.
    let path = format!("/x402/payments/eip155:31337/{PAYER}/{nonce}");
    let found = app.get_as(DEMO_TOKEN, &path).await;
    assert_eq!(found.status, 200, "{}", found.body);
    let found = found.json();
    assert_eq!(found["asset"], token.as_str());
    assert_eq!(found["success_transaction"], hash.as_str());
    let intent = &found["payment_intent"];
    assert_eq!(intent["payment_method"], "permit2");
    assert_eq!(intent["payer"], PAYER);
    assert_eq!(intent["amount"], "1000");
    let id = intent["id"].as_str().unwrap().to_owned();
    app.wait_for_state(&id, "succeeded").await;
    assert_eq!(
        app.event_types(&id).await,
        [
            "payment_intent.created",
            "payment_intent.processing",
            "payment_intent.succeeded"
        ]
    );
    let booked = app.payments_booked(&id).await;
    assert_eq!(booked, 1);
    let (agreed, report) = crate::settlement::reconcile(&app, &anvil);
    assert!(agreed, "{report}");
}

/// x402's `upto`: the payer allows at most a ceiling, for our relayer alone to charge; verify checks
/// the ceiling, settle charges what the resource server reports, once, and the intent keeps both.
#[tokio::test]
async fn an_upto_payment_charges_what_was_used_once_and_its_intent_keeps_the_ceiling() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let token = usdt_like_approved(&anvil);
    let post = |path: &'static str, body: &Value| {
        let body = body.to_string();
        let app = &app;
        async move {
            let answer = app.post_as(DEMO_TOKEN, path, None, &body).await;
            assert_eq!(answer.status, 200, "{}", answer.body);
            answer.json()
        }
    };
    // A witness naming someone else than our relayer is refused as the reference refuses it.
    let stranger = upto_payment(&anvil, &token, "1000", "1", PAYEE).await;
    let refused = post("/x402/verify", &stranger).await;
    assert_eq!(
        refused["invalidReason"], "upto_facilitator_mismatch",
        "{refused}"
    );

    let nonce = fastrand::u64(..).to_string();
    let body = upto_payment(&anvil, &token, "1000", &nonce, RELAYER).await;
    let verified = post("/x402/verify", &body).await;
    assert_eq!(verified["isValid"], true, "{verified}");
    let charging = |amount: &str| {
        let mut body = body.clone();
        body["paymentRequirements"]["amount"] = json!(amount);
        body
    };
    let over = post("/x402/settle", &charging("1001")).await;
    assert_eq!(
        over["errorReason"], "invalid_upto_evm_payload_settlement_exceeds_amount",
        "{over}"
    );
    let before = anvil.balance_of(&token, PAYEE);
    let settled = post("/x402/settle", &charging("400")).await;
    assert_eq!(settled["success"], true, "{settled}");
    assert_eq!(settled["amount"], "400");
    let hash = settled["transaction"].as_str().unwrap().to_owned();
    assert_eq!(anvil.balance_of(&token, PAYEE) - before, 400);
    // Once: the same charge again, or another, hears the spent nonce.
    for amount in ["400", "500"] {
        let again = post("/x402/settle", &charging(amount)).await;
        assert_eq!(again["success"], false, "{again}");
        assert_eq!(again["errorReason"], "permit2_invalid_nonce", "{again}");
    }
    assert_eq!(anvil.balance_of(&token, PAYEE) - before, 400);

    let found = app
        .get_as(
            DEMO_TOKEN,
            &format!("/x402/payments/eip155:31337/{PAYER}/{nonce}"),
        )
        .await
        .json();
    assert_eq!(found["success_transaction"], hash.as_str());
    let intent = &found["payment_intent"];
    assert_eq!(intent["amount"], "400");
    assert_eq!(intent["metadata"]["x402_upto_ceiling"], "1000", "{intent}");
    let id = intent["id"].as_str().unwrap().to_owned();
    app.wait_for_state(&id, "succeeded").await;
    let (agreed, report) = crate::settlement::reconcile(&app, &anvil);
    assert!(agreed, "{report}");
}

/// Anyone may settle a stored permit before our relayer does, and through the exact proxy's other
/// door, `settleWithPermit`, whose EIP-2612 permit may be junk: the payment is made all the same,
/// and is seen, booked and answered as ours.
#[tokio::test]
async fn a_permit_settled_by_someone_else_through_settle_with_permit_is_seen_and_answered() {
    let anvil = Anvil::start().await;
    // No relayer: the payment is stored and queued, and nothing here sends it.
    let app = crate::helpers::chain::app_on_with(&anvil, 1, false, |s| {
        s.request_timeout = std::time::Duration::from_secs(3)
    })
    .await;
    let token = usdt_like_approved(&anvil);
    let nonce = fastrand::u64(..).to_string();
    let body = permit2_payment(&anvil, &token, "1000", &nonce).await;
    let settle = || async {
        let answer = app
            .post_as(DEMO_TOKEN, "/x402/settle", None, &body.to_string())
            .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        answer.json()
    };
    let pending = settle().await;
    assert_eq!(pending["errorReason"], "settlement_pending", "{pending}");

    let a = &body["paymentPayload"]["payload"]["permit2Authorization"];
    let permit = format!(
        "(({token},1000),{nonce},{})",
        a["deadline"].as_str().unwrap()
    );
    let witness = format!("({PAYEE},{})", a["witness"]["validAfter"].as_str().unwrap());
    let signature = body["paymentPayload"]["payload"]["signature"]
        .as_str()
        .unwrap();
    let junk_2612 = format!("(1000,1,0x{},0x{},27)", "11".repeat(32), "22".repeat(32));
    let before = anvil.balance_of(&token, PAYEE);
    anvil
        .try_cast(&[
            "send",
            "--private-key",
            PAYER_KEY,
            &X402_EXACT_PROXY.to_string(),
            "settleWithPermit((uint256,uint256,bytes32,bytes32,uint8),((address,uint256),uint256,uint256),address,(address,uint256),bytes)",
            &junk_2612,
            &permit,
            PAYER,
            &witness,
            signature,
        ])
        .expect("the proxy settles with a permit that fails");
    assert_eq!(anvil.balance_of(&token, PAYEE) - before, 1000);

    let found = app
        .get_as(
            DEMO_TOKEN,
            &format!("/x402/payments/eip155:31337/{PAYER}/{nonce}"),
        )
        .await
        .json();
    let id = found["payment_intent"]["id"].as_str().unwrap().to_owned();
    app.wait_for_state(&id, "succeeded").await;
    let answer = settle().await;
    assert_eq!(answer["success"], true, "{answer}");
    let (agreed, report) = crate::settlement::reconcile(&app, &anvil);
    assert!(agreed, "{report}");
}

/// An intent paid by Permit2 from the payer's own wallet (`payment_method: "permit2"`), for a
/// token without EIP-3009: the document is the typed data cast signs as it is; a confirm before
/// the payer approved Permit2 is 422 and leaves nothing, so the same key confirms once it has;
/// the relayer settles it through x402's exact proxy to the merchant, once, and it is booked.
#[tokio::test]
async fn an_intent_is_paid_by_permit2_from_a_wallet_for_a_token_without_eip3009() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let token = usdt_like(&anvil);
    let body = json!({
        "chain": "evm:31337", "token": token, "amount": "1000", "merchant": PAYEE,
        "payment_method": "permit2", "expires_in_seconds": 900
    });
    let created = app
        .create_intent(DEMO_TOKEN, Some("permit2-intent"), &body.to_string())
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let created = created.json();
    assert_eq!(created["payment_method"], "permit2");
    assert_eq!(created["payer"], Value::Null);
    let id = created["id"].as_str().unwrap().to_owned();

    let path = format!("/v1/payment_intents/{id}/authorization?payer={PAYER}");
    let document = app.get_as(DEMO_TOKEN, &path).await;
    assert_eq!(document.status, 200, "{}", document.body);
    let document = document.json();
    let typed = &document["typed_data"];
    assert_eq!(typed["primaryType"], "PermitWitnessTransferFrom");
    assert_eq!(typed["domain"]["verifyingContract"], PERMIT2.to_string());
    let message = &typed["message"];
    assert_eq!(message["spender"], X402_EXACT_PROXY.to_string());
    assert_eq!(message["permitted"]["token"], token.as_str());
    assert_eq!(message["permitted"]["amount"], "1000");
    assert_eq!(message["witness"]["to"], PAYEE);
    // The permit's last second is the intent's last.
    let expires_at = time::OffsetDateTime::parse(
        created["expires_at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    assert_eq!(
        message["deadline"],
        (expires_at.unix_timestamp() - 1).to_string()
    );
    let signature = anvil.sign(PAYER_KEY, typed);
    // The payer has not approved Permit2: the document says what to send first, as cast encodes it.
    let approval = &document["approval"];
    assert_eq!(approval["allowance"], "0", "{document}");
    assert_eq!(approval["spender"], PERMIT2.to_string());
    let steps = approval["transactions"].as_array().unwrap();
    assert_eq!(steps.len(), 1, "{approval}");
    assert_eq!(steps[0]["to"], token.as_str());
    assert_eq!(
        steps[0]["data"],
        anvil.cast(&[
            "calldata",
            "approve(address,uint256)",
            &PERMIT2.to_string(),
            "1000"
        ])
    );

    let confirm = format!("/v1/payment_intents/{id}/confirm");
    let pay = json!({"payer": PAYER, "signature": signature}).to_string();
    let refused = app
        .post_as(DEMO_TOKEN, &confirm, Some("permit2-confirm"), &pay)
        .await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert_eq!(refused.json()["error"], "permit2_allowance_required");
    let still = app.get_intent(DEMO_TOKEN, &id).await.json();
    assert_eq!(still["state"], "created");
    assert_eq!(still["payer"], Value::Null);

    approve_permit2(&anvil, &token);
    let again = app.get_as(DEMO_TOKEN, &path).await.json();
    assert_eq!(again["approval"], Value::Null, "approved: {again}");
    assert_eq!(again["typed_data"], *typed, "the same permit");
    let before = anvil.balance_of(&token, PAYEE);
    let confirmed = app
        .post_as(DEMO_TOKEN, &confirm, Some("permit2-confirm"), &pay)
        .await;
    assert_eq!(confirmed.status, 200, "{}", confirmed.body);
    let confirmed = confirmed.json();
    assert_eq!(confirmed["state"], "processing");
    assert_eq!(confirmed["payer"], PAYER);
    app.wait_for_state(&id, "succeeded").await;
    assert_eq!(anvil.balance_of(&token, PAYEE) - before, 1000);
    let intent = app.get_intent(DEMO_TOKEN, &id).await.json();
    let hash = intent["settlement"]["transaction_hash"].as_str().unwrap();
    let sent = anvil.rpc("eth_getTransactionByHash", json!([hash])).await;
    assert_eq!(
        sent["to"].as_str().unwrap().to_lowercase(),
        X402_EXACT_PROXY.to_string().to_lowercase()
    );

    // Once: a replay answers as before, a new confirm is refused, and it is booked once.
    let replayed = app
        .post_as(DEMO_TOKEN, &confirm, Some("permit2-confirm"), &pay)
        .await;
    assert_eq!(replayed.status, 200, "{}", replayed.body);
    assert_eq!(replayed.json(), confirmed);
    let again = app
        .post_as(DEMO_TOKEN, &confirm, Some("permit2-confirm-again"), &pay)
        .await;
    assert_eq!(again.status, 409, "{}", again.body);
    let booked = app.payments_booked(&id).await;
    assert_eq!(booked, 1);
    let (agreed, report) = crate::settlement::reconcile(&app, &anvil);
    assert!(agreed, "{report}");

    // Its token has no EIP-3009: the merchant pays the refund back by a transfer, which the watch
    // matches.
    let refunds = format!("/v1/payment_intents/{id}/refunds");
    let created = app
        .post_as(DEMO_TOKEN, &refunds, Some("permit2-refund"), "{}")
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let refund = created.json();
    assert_eq!(refund["payment_method"], "transfer", "{refund}");
    assert_eq!(refund["payer"], PAYER);
    anvil.send(
        PAYEE_KEY,
        &token,
        "transfer(address,uint256)",
        &[PAYER, "1000"],
    );
    app.mine_until(
        &anvil,
        "the refund is paid by the merchant's transfer",
        "(SELECT count(*) FROM refunds WHERE state = 'succeeded') = 1",
    )
    .await;
    let refunded = app.get_intent(DEMO_TOKEN, &id).await.json();
    assert_eq!(refunded["amount_refunded"], "1000", "{refunded}");
}

/// A payer whose token has EIP-2612 signs the token's permit for Permit2 instead of sending an
/// approval: the document offers it, cast signs it, the token (OpenZeppelin's `ERC20Permit`)
/// takes it in the payment's own transaction, and the payer sends nothing. A token permit the token
/// refuses, or one on an intent not paid by Permit2, is a 400 naming it, with nothing written.
#[tokio::test]
async fn an_intent_paid_by_permit2_in_a_token_with_eip2612_needs_no_approval_transaction() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let token = anvil.deploy_token(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/contracts/build/PermitToken.json"
    )));
    let (id, document) = permit2_intent(&app, &token, "eip2612-intent", false).await;
    assert_eq!(document["approval"]["allowance"], "0", "{document}");
    let token_permit = &document["token_permit"]["typed_data"];
    assert_eq!(token_permit["primaryType"], "Permit", "{document}");
    assert_eq!(token_permit["domain"]["name"], "Permit USD");
    assert_eq!(token_permit["domain"]["version"], "1");
    assert_eq!(token_permit["domain"]["verifyingContract"], token.as_str());
    let message = &token_permit["message"];
    assert_eq!(message["owner"], PAYER);
    assert_eq!(message["spender"], PERMIT2.to_string());
    assert_eq!(message["value"], "1000");
    assert_eq!(message["nonce"], "0");
    assert_eq!(
        message["deadline"],
        document["typed_data"]["message"]["deadline"]
    );
    let signature = anvil.sign(PAYER_KEY, &document["typed_data"]);
    let confirm = format!("/v1/payment_intents/{id}/confirm");
    let pay = |token_permit_signature: &str| {
        json!({"payer": PAYER, "signature": signature, "token_permit_signature": token_permit_signature})
            .to_string()
    };

    // Refused, each naming the field: malformed, and signed by someone else than the payer.
    let malformed = app
        .post_as(
            DEMO_TOKEN,
            &confirm,
            Some("eip2612-malformed"),
            &pay("0x12"),
        )
        .await;
    assert_eq!(malformed.status, 400, "{}", malformed.body);
    let foreign = anvil.sign(PAYEE_KEY, token_permit);
    let refused = app
        .post_as(
            DEMO_TOKEN,
            &confirm,
            Some("eip2612-foreign"),
            &pay(&foreign),
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    for answer in [malformed, refused] {
        let detail = answer.json()["detail"].as_str().unwrap().to_owned();
        assert!(detail.starts_with("token_permit_signature"), "{detail}");
    }
    let still = app.get_intent(DEMO_TOKEN, &id).await.json();
    assert_eq!(
        (still["state"].as_str(), still["payer"].as_str()),
        (Some("created"), None)
    );

    let sent_before = anvil
        .rpc("eth_getTransactionCount", json!([PAYER, "latest"]))
        .await;
    let before = anvil.balance_of(&token, PAYEE);
    let token_permit_signature = anvil.sign(PAYER_KEY, token_permit);
    let confirmed = app
        .post_as(
            DEMO_TOKEN,
            &confirm,
            Some("eip2612-confirm"),
            &pay(&token_permit_signature),
        )
        .await;
    assert_eq!(confirmed.status, 200, "{}", confirmed.body);
    assert_eq!(confirmed.json()["state"], "processing");
    app.wait_for_state(&id, "succeeded").await;
    assert_eq!(anvil.balance_of(&token, PAYEE) - before, 1000);
    let intent = app.get_intent(DEMO_TOKEN, &id).await.json();
    let hash = intent["settlement"]["transaction_hash"].as_str().unwrap();
    let sent = anvil.rpc("eth_getTransactionByHash", json!([hash])).await;
    let settle_with_permit = anvil.cast(&[
        "sig",
        "settleWithPermit((uint256,uint256,bytes32,bytes32,uint8),((address,uint256),uint256,uint256),address,(address,uint256),bytes)",
    ]);
    assert!(
        sent["input"]
            .as_str()
            .unwrap()
            .starts_with(&settle_with_permit),
        "{sent}"
    );
    let sent_after = anvil
        .rpc("eth_getTransactionCount", json!([PAYER, "latest"]))
        .await;
    assert_eq!(sent_after, sent_before, "the payer sent no transaction");
    let allowance = anvil.cast(&[
        "call",
        &token,
        "allowance(address,address)(uint256)",
        PAYER,
        &PERMIT2.to_string(),
    ]);
    assert_eq!(
        allowance, "0",
        "the permit let Permit2 move the payment, and it did"
    );
    assert_eq!(app.payments_booked(&id).await, 1);

    // An intent paid by EIP-3009 takes no token permit.
    let body = json!({
        "chain": "evm:31337", "token": crate::helpers::chain::TOKEN, "amount": "1000",
        "payer": PAYER, "merchant": PAYEE, "expires_in_seconds": 900
    });
    let created = app
        .create_intent(DEMO_TOKEN, Some("eip3009-intent"), &body.to_string())
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.json()["id"].as_str().unwrap().to_owned();
    let confirm = format!("/v1/payment_intents/{id}/confirm");
    let answer = app
        .post_as(
            DEMO_TOKEN,
            &confirm,
            Some("eip3009-confirm"),
            &pay(&token_permit_signature),
        )
        .await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    let detail = answer.json()["detail"].as_str().unwrap().to_owned();
    assert!(detail.starts_with("token_permit_signature"), "{detail}");
    let still = app.get_intent(DEMO_TOKEN, &id).await.json();
    assert_eq!(still["state"], "created");
}

/// A payer who approved Permit2 but does not hold the amount yet is not refused: the payment is
/// queued, held with `pending_reason: insufficient_balance`, and made once the money arrives.
#[tokio::test]
async fn a_permit2_payment_short_of_balance_waits_for_it_and_is_made_once_funded() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let token = usdt_like_approved(&anvil);
    // The payer's whole balance leaves: it has approved Permit2, and holds nothing.
    anvil.send(
        PAYER_KEY,
        &token,
        "transfer(address,uint256)",
        &[PAYEE, "1000000000000"],
    );
    let (id, document) = permit2_intent(&app, &token, "short", true).await;
    assert_eq!(document["approval"], Value::Null, "approved: {document}");
    let signature = anvil.sign(PAYER_KEY, &document["typed_data"]);
    let confirmed = app
        .post_as(
            DEMO_TOKEN,
            &format!("/v1/payment_intents/{id}/confirm"),
            Some("short-confirm"),
            &json!({ "signature": signature }).to_string(),
        )
        .await;
    assert_eq!(confirmed.status, 200, "{}", confirmed.body);
    app.wait_until(
        "the payment held for the balance",
        &format!(
            "(SELECT pending_reason = 'insufficient_balance' FROM payment_intents WHERE id = '{id}')"
        ),
    )
    .await;

    anvil.send(
        PAYEE_KEY,
        &token,
        "transfer(address,uint256)",
        &[PAYER, "1000"],
    );
    app.wait_for_state(&id, "succeeded").await;
    assert_eq!(anvil.balance_of(&token, PAYER), 0);
    assert_eq!(app.payments_booked(&id).await, 1);
}

/// A payer whose allowance for Permit2 is short but not zero is asked to set it to zero first,
/// then to the amount (Tether's `approve` refuses to change an allowance that is not zero): two
/// transactions, each as cast encodes it.
#[tokio::test]
async fn a_short_allowance_that_is_not_zero_is_reset_before_it_is_raised() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let token = usdt_like(&anvil);
    let permit2 = PERMIT2.to_string();
    anvil.send(
        PAYER_KEY,
        &token,
        "approve(address,uint256)",
        &[&permit2, "1"],
    );
    let (_, document) = permit2_intent(&app, &token, "short-allowance", true).await;
    let approval = document["approval"].clone();
    assert_eq!(approval["allowance"], "1", "{approval}");
    assert_eq!(approval["amount"], "1000");
    let approve = |amount: &str| {
        json!({
            "to": token,
            "data": anvil.cast(&["calldata", "approve(address,uint256)", &permit2, amount]),
        })
    };
    assert_eq!(
        approval["transactions"],
        json!([approve("0"), approve("1000")])
    );
}
