//! Circle's USDC exactly as deployed (FiatTokenV2_2 behind its proxy, built from Circle's source,
//! `docs/settlement.md`): its EIP-712 domain has no EIP-5267 and is read from `name()` and
//! `version()`, checked against its `DOMAIN_SEPARATOR()`; an intent in USDC is paid end to end.

use crate::helpers::{
    DEMO_TOKEN, SEED_BODY, TestApp,
    chain::{Anvil, PAYEE, PAYER, PAYER_KEY, TOKEN, USDC, app_on, wallet_signatures},
};

const AMOUNT: u128 = 100_000_000;

fn usdc_body() -> String {
    SEED_BODY.replace(TOKEN, USDC)
}

/// USDC has no `eip712Domain()`: the domain comes from `name()` and `version()`, accepted because
/// it reproduces the token's `DOMAIN_SEPARATOR()`, which cast computes here from the same parts.
#[tokio::test]
async fn the_usdc_domain_is_read_from_name_and_version() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, false).await;
    let id = app.create_intent_id(&usdc_body()).await;
    let typed = app.typed_data(&id).await;
    assert_eq!(typed["domain"]["name"], "USD Coin");
    assert_eq!(typed["domain"]["version"], "2");
    assert_eq!(typed["domain"]["chainId"], 31337);
    assert_eq!(typed["domain"]["verifyingContract"], USDC);
    let keccak = |text: &str| anvil.cast(&["keccak", text]);
    let encoded = anvil.cast(&[
        "abi-encode",
        "f(bytes32,bytes32,bytes32,uint256,address)",
        &keccak(
            "EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)",
        ),
        &keccak("USD Coin"),
        &keccak("2"),
        "31337",
        USDC,
    ]);
    assert_eq!(
        anvil.cast(&["keccak", &encoded]),
        anvil.cast(&["call", USDC, "DOMAIN_SEPARATOR()(bytes32)"])
    );
}

#[tokio::test]
async fn an_intent_in_usdc_is_paid_by_our_relayer() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let before = anvil.balance_of(USDC, PAYEE);
    let id = app.create_intent_id(&usdc_body()).await;
    let signature = anvil.sign(PAYER_KEY, &app.typed_data(&id).await);
    let answer = app.confirm(&id, &signature).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    app.wait_for_state(&id, "succeeded").await;
    assert_eq!(anvil.balance_of(USDC, PAYEE) - before, AMOUNT);
    let balances = app.get_as(DEMO_TOKEN, "/v1/balances").await.json();
    assert_eq!(balances["data"][0]["token"], USDC);
    assert_eq!(balances["data"][0]["amount"], AMOUNT.to_string());
}

#[tokio::test]
async fn an_intent_in_usdc_is_paid_by_the_payer_with_cast_send() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, false).await;
    let payer_before = anvil.balance_of(USDC, PAYER);
    let id = app.create_intent_id(&usdc_body()).await;
    let typed = app.typed_data(&id).await;
    let signature = anvil.sign(PAYER_KEY, &typed);
    anvil.submit_as_payer(&typed, &signature);
    anvil.mine(1).await;
    app.wait_for_state(&id, "succeeded").await;
    assert_eq!(payer_before - anvil.balance_of(USDC, PAYER), AMOUNT);
}

/// The EIP-712 name of a new USDC intent's authorization.
async fn domain_name(app: &TestApp) -> String {
    let id = app.create_intent_id(&usdc_body()).await;
    app.typed_data(&id).await["domain"]["name"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// What was read of a token is not trusted forever: USDC sits behind an upgradeable proxy. A
/// recent reading is used as it is; one older than an hour is read again; and a signature the
/// token refuses (made under a domain it no longer has) has it read again before the next
/// authorization.
#[tokio::test]
async fn what_was_read_of_a_token_is_read_again_when_old_or_refused() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    assert_eq!(domain_name(&app).await, "USD Coin");
    let tamper = |sql: &str| {
        let (db, sql) = (app.db.clone(), sql.to_owned());
        async move {
            sqlx::query(&sql).bind(USDC).execute(&db).await.unwrap();
        }
    };
    // As if the proxy's name had been read before an upgrade changed it.
    tamper("UPDATE chain_tokens SET name = 'USD Coin (old)' WHERE address = $1").await;
    assert_eq!(
        domain_name(&app).await,
        "USD Coin (old)",
        "recent: used as read"
    );
    tamper("UPDATE chain_tokens SET checked_at = now() - interval '2 hours' WHERE address = $1")
        .await;
    assert_eq!(domain_name(&app).await, "USD Coin", "old: read again");

    // A payment signed under the outdated domain: the token refuses the signature.
    tamper("UPDATE chain_tokens SET name = 'USD Coin (old)' WHERE address = $1").await;
    let id = app.create_intent_id(&usdc_body()).await;
    let signature = anvil.sign(PAYER_KEY, &app.typed_data(&id).await);
    assert_eq!(app.confirm(&id, &signature).await.status, 200);
    app.wait_until(
        "the refused signature has the token read again",
        &format!("(SELECT checked_at = '-infinity' FROM chain_tokens WHERE address = '{USDC}')"),
    )
    .await;
    assert_eq!(domain_name(&app).await, "USD Coin");
}

/// The typed data is what wallets sign: for the devnet token and for USDC, viem and ethers (the
/// libraries wallets and dapps sign with) compute the digest the API answers, sign exactly what
/// cast signs, and their signatures pay.
#[tokio::test]
async fn wallets_libraries_sign_the_document_with_the_digest_we_answer() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    for (body, library) in [(SEED_BODY.to_owned(), "viem"), (usdc_body(), "ethers")] {
        let id = app.create_intent_id(&body).await;
        let answer = app.authorization(&id).await.json();
        let typed = &answer["typed_data"];
        let signed = wallet_signatures(typed, PAYER_KEY);
        let by_cast = anvil.sign(PAYER_KEY, typed);
        for wallet in ["viem", "ethers"] {
            assert_eq!(signed[wallet]["digest"], answer["digest"], "{wallet}");
            assert_eq!(signed[wallet]["signature"], by_cast.as_str(), "{wallet}");
        }
        let signature = signed[library]["signature"].as_str().unwrap();
        assert_eq!(app.confirm(&id, signature).await.status, 200);
        app.wait_for_state(&id, "succeeded").await;
    }
}

/// A smart-contract wallet pays (ERC-1271): its owner's key signs, confirm asks the wallet itself
/// on chain whether it accepts the signature, and the relayer submits USDC's `bytes signature`
/// form, which the token checks with the wallet too. A signature the wallet refuses is 400 naming
/// `signature`; a token without that form is 422 for a contract payer.
#[tokio::test]
async fn a_smart_contract_wallet_pays_in_usdc() {
    use payments_api::rails::evm::devnet::ANVIL_KEYS;

    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let wallet = anvil.deploy_wallet(PAYER_KEY);
    anvil.cast(&[
        "send",
        "--private-key",
        PAYER_KEY,
        USDC,
        "transfer(address,uint256)",
        &wallet,
        "1000000000",
    ]);
    let body = usdc_body().replace(PAYER, &wallet);
    let id = app.create_intent_id(&body).await;
    let typed = app.typed_data(&id).await;
    assert_eq!(typed["message"]["from"], wallet.as_str());

    // Another key's signature: the wallet says no.
    let stranger = anvil.sign(ANVIL_KEYS[2], &typed);
    let answer = app
        .post_as(
            DEMO_TOKEN,
            &format!("/v1/payment_intents/{id}/confirm"),
            Some("a-stranger-signs"),
            &serde_json::json!({ "signature": stranger }).to_string(),
        )
        .await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    let detail = answer.json()["detail"].as_str().unwrap().to_owned();
    assert!(
        detail.starts_with("signature: ") && detail.contains("refuses it (ERC-1271"),
        "{detail}"
    );

    // As if the token had only the v, r, s form.
    sqlx::query("UPDATE chain_tokens SET contract_signatures = false WHERE address = $1")
        .bind(USDC)
        .execute(&app.db)
        .await
        .unwrap();
    let signature = anvil.sign(PAYER_KEY, &typed);
    let refused = app
        .post_as(
            DEMO_TOKEN,
            &format!("/v1/payment_intents/{id}/confirm"),
            Some("contract-payer-without-bytes-form"),
            &serde_json::json!({ "signature": signature }).to_string(),
        )
        .await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert!(refused.body.contains("bytes signature"), "{}", refused.body);
    sqlx::query("UPDATE chain_tokens SET contract_signatures = true WHERE address = $1")
        .bind(USDC)
        .execute(&app.db)
        .await
        .unwrap();

    let before = anvil.balance_of(USDC, &wallet);
    let answer = app.confirm(&id, &signature).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    app.wait_for_state(&id, "succeeded").await;
    assert_eq!(before - anvil.balance_of(USDC, &wallet), AMOUNT);
}

/// A paused USDC refuses the transfer: the intent stays `processing` with `pending_reason`
/// `token_paused`, and when its authorization expires by the chain's time it fails with that
/// reason rather than a bare expiry.
#[tokio::test]
async fn a_payment_held_by_a_paused_usdc_fails_with_that_reason_at_expiry() {
    use payments_api::rails::evm::fiat_token;

    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    anvil.cast(&[
        "send",
        "--private-key",
        fiat_token::DEPLOYER_KEY,
        USDC,
        "pause()",
    ]);
    let short = usdc_body().replace(r#""expires_in_seconds":900"#, r#""expires_in_seconds":60"#);
    let id = app.create_intent_id(&short).await;
    let typed = app.typed_data(&id).await;
    let answer = app.confirm(&id, &anvil.sign(PAYER_KEY, &typed)).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    app.wait_until(
        "the intent says the token is paused",
        &format!("(SELECT pending_reason = 'token_paused' FROM payment_intents WHERE id = '{id}')"),
    )
    .await;
    let valid_before: u64 = typed["message"]["validBefore"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    anvil
        .rpc(
            "evm_setNextBlockTimestamp",
            serde_json::json!([valid_before]),
        )
        .await;
    anvil.mine(2).await;
    app.wait_for_state(&id, "failed").await;
    let intent = app.get_intent(DEMO_TOKEN, &id).await.json();
    assert_eq!(intent["failure_reason"], "token_paused");
    assert_eq!(intent["pending_reason"], serde_json::Value::Null);
}

/// USDC's blacklist holds a payment the same way, and the relayer's backoff lets it through once
/// the payer is taken off the list: `account_blacklisted`, then `succeeded`.
#[tokio::test]
async fn a_blacklisted_payer_is_held_then_pays_once_unblacklisted() {
    use payments_api::rails::evm::fiat_token;

    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let as_blacklister = |call: &str| {
        anvil.cast(&[
            "send",
            "--private-key",
            fiat_token::DEPLOYER_KEY,
            USDC,
            call,
            PAYER,
        ]);
    };
    as_blacklister("blacklist(address)");
    let id = app.create_intent_id(&usdc_body()).await;
    let typed = app.typed_data(&id).await;
    let answer = app.confirm(&id, &anvil.sign(PAYER_KEY, &typed)).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    app.wait_until(
        "the intent says the payer is blacklisted",
        &format!(
            "(SELECT pending_reason = 'account_blacklisted' FROM payment_intents WHERE id = '{id}')"
        ),
    )
    .await;
    as_blacklister("unBlacklist(address)");
    app.wait_for_state(&id, "succeeded").await;
    let intent = app.get_intent(DEMO_TOKEN, &id).await.json();
    assert_eq!(intent["pending_reason"], serde_json::Value::Null);
}

/// FiatToken words a short balance its own way ("transfer amount exceeds balance"): the intent
/// says `insufficient_balance` until the payer holds enough, then pays.
#[tokio::test]
async fn a_usdc_payer_short_of_funds_is_held_until_funded() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let held = anvil.balance_of(USDC, PAYER);
    let more = (held + 1).to_string();
    let body = usdc_body().replace(r#""amount":"100000000""#, &format!(r#""amount":"{more}""#));
    let id = app.create_intent_id(&body).await;
    let typed = app.typed_data(&id).await;
    let answer = app.confirm(&id, &anvil.sign(PAYER_KEY, &typed)).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    app.wait_until(
        "the intent says the payer is short of funds",
        &format!(
            "(SELECT pending_reason = 'insufficient_balance' FROM payment_intents WHERE id = '{id}')"
        ),
    )
    .await;
    // Another holder sends the payer the one unit it lacks.
    anvil.cast(&[
        "send",
        "--private-key",
        crate::helpers::chain::PAYEE_KEY,
        USDC,
        "transfer(address,uint256)",
        PAYER,
        "1",
    ]);
    app.wait_for_state(&id, "succeeded").await;
    assert_eq!(anvil.balance_of(USDC, PAYER), 0);
}

/// A USDC payment refunded in part: the merchant's address signs the transfer back (USDC's domain,
/// the refund's nonce), the relayer sends it, the payer holds the refund.
#[tokio::test]
async fn a_usdc_payment_is_refunded_in_part() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let id = app.create_intent_id(&usdc_body()).await;
    let typed = app.typed_data(&id).await;
    anvil.submit_as_payer(&typed, &anvil.sign(PAYER_KEY, &typed));
    app.wait_for_state(&id, "succeeded").await;
    let before = anvil.balance_of(USDC, PAYER);
    let created = app
        .post_as(
            DEMO_TOKEN,
            &format!("/v1/payment_intents/{id}/refunds"),
            Some("usdc-refund"),
            r#"{"amount":"25000000"}"#,
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let refund = created.json()["id"].as_str().unwrap().to_owned();
    let document = app
        .get_as(DEMO_TOKEN, &format!("/v1/refunds/{refund}/authorization"))
        .await
        .json();
    assert_eq!(document["typed_data"]["domain"]["name"], "USD Coin");
    let signature = anvil.sign(crate::helpers::chain::PAYEE_KEY, &document["typed_data"]);
    let body = serde_json::json!({ "signature": signature }).to_string();
    let confirmed = app
        .post_as(
            DEMO_TOKEN,
            &format!("/v1/refunds/{refund}/confirm"),
            Some("usdc-refund-confirm"),
            &body,
        )
        .await;
    assert_eq!(confirmed.status, 200, "{}", confirmed.body);
    app.wait_for_refund(&refund, "succeeded").await;
    assert_eq!(anvil.balance_of(USDC, PAYER) - before, 25_000_000);
    let intent = app.get_intent(DEMO_TOKEN, &id).await.json();
    assert_eq!(intent["amount_refunded"], "25000000");
}
