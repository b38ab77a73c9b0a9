//! The merchant's settings: its payout address and the assets it accepts for orders priced in a
//! currency, each checked on its chain when set (anvil: the devnet token and USDC, an address with
//! no contract, a chain not served), a bad entry a 400 naming it and nothing changed.

use serde_json::{Value, json};

use crate::helpers::{
    DEMO_TOKEN, TestApp,
    chain::{Anvil, PAYEE, PAYER, TOKEN, USDC, app_on},
};

async fn update(app: &TestApp, key: &str, body: Value) -> crate::helpers::Answer {
    app.post_as(DEMO_TOKEN, "/v1/merchant", Some(key), &body.to_string())
        .await
}

async fn settings(app: &TestApp) -> Value {
    let answer = app.get_as(DEMO_TOKEN, "/v1/merchant").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.json()
}

#[tokio::test]
async fn accepted_assets_are_read_from_their_chain_and_a_bad_one_changes_nothing() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, false).await;
    let before = settings(&app).await;
    assert_eq!(before["payout_address"], Value::Null);
    assert_eq!(before["accepted_assets"], json!([]));

    let set = update(
        &app,
        "assets-1",
        json!({
            "payout_address": PAYEE.to_lowercase(),
            "accepted_assets": [
                {"chain": "evm:31337", "token": TOKEN, "currency": "usd"},
                {"chain": "evm:31337", "token": USDC.to_lowercase(), "currency": "usd"},
                {"chain": "evm:31337", "token": USDC, "currency": "eur"},
            ],
        }),
    )
    .await;
    assert_eq!(set.status, 200, "{}", set.body);
    let set = set.json();
    assert_eq!(set["payout_address"], PAYEE, "stored EIP-55 checksummed");
    assert_eq!(
        set["accepted_assets"],
        json!([
            {"chain": "evm:31337", "token": TOKEN, "currency": "usd", "symbol": "dUSD", "decimals": 6, "supports_authorization": true},
            {"chain": "evm:31337", "token": USDC, "currency": "usd", "symbol": "USDC", "decimals": 6, "supports_authorization": true},
            {"chain": "evm:31337", "token": USDC, "currency": "eur", "symbol": "USDC", "decimals": 6, "supports_authorization": true},
        ])
    );
    assert_eq!(settings(&app).await, set);

    // A field left out keeps its value.
    let named = update(&app, "assets-2", json!({"display_name": "Demo Coffee"})).await;
    assert_eq!(named.status, 200, "{}", named.body);
    assert_eq!(named.json()["accepted_assets"], set["accepted_assets"]);
    assert_eq!(named.json()["payout_address"], PAYEE);
    let now = settings(&app).await;

    let asset = |chain: &str, token: &str, currency: &str| json!({"chain": chain, "token": token, "currency": currency});
    let cases = [
        (
            json!({"accepted_assets": [asset("evm:31337", TOKEN, "usd"), asset("evm:999", TOKEN, "usd")]}),
            "accepted_assets[1].chain: evm:999 is not a chain this server serves",
        ),
        (
            json!({"accepted_assets": [asset("evm:31337", PAYER, "usd")]}),
            "accepted_assets[0].token: no contract at",
        ),
        (
            json!({"accepted_assets": [asset("evm:31337", "0x12", "usd")]}),
            "accepted_assets[0].token: must be 0x followed by 40 hex digits",
        ),
        (
            json!({"accepted_assets": [asset("evm:31337", TOKEN, "gbp")]}),
            "accepted_assets[0].currency: must be \"usd\" or \"eur\"",
        ),
        (
            json!({"accepted_assets": [asset("evm:31337", TOKEN, "usd"), asset("evm:31337", &TOKEN.to_lowercase(), "usd")]}),
            "accepted_assets[1]: the same chain, token and currency as accepted_assets[0]",
        ),
        (
            json!({"accepted_assets": [{"chain": "evm:31337", "token": TOKEN}]}),
            "currency",
        ),
        (
            json!({"payout_address": "0x0000000000000000000000000000000000000000"}),
            "payout_address: must not be the zero address",
        ),
        (
            json!({"payout_address": "0x3c44cdddb6a900fa2b585dd299e03d12fa4293Bc"}),
            "payout_address: mixed-case address",
        ),
    ];
    for (i, (body, detail)) in cases.into_iter().enumerate() {
        let answer = update(&app, &format!("bad-{i}"), body.clone()).await;
        assert_eq!(answer.status, 400, "{body}: {}", answer.body);
        assert_eq!(answer.json()["error"], "invalid_request", "{body}");
        let said = answer.json()["detail"].as_str().unwrap().to_owned();
        assert!(said.contains(detail), "{body}: {said}");
        assert_eq!(settings(&app).await, now, "{body} changed nothing");
    }
}
