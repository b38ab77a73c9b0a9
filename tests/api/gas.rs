//! Gas and the relayer's funds: a key that cannot pay a transaction's gas, or a chain charging
//! more than `RELAYER_MAX_FEE_GWEI`, holds its payments (`pending_reason`) rather than failing
//! them or overpaying, and lets them go once that changes.

use serde_json::json;

use crate::helpers::{
    SEED_BODY, TestApp,
    chain::{Anvil, PAYER_KEY, RELAYER_KEY, app_on_with},
};

/// Creates an intent and confirms it with the payer's signature (made by cast).
async fn confirmed_intent(app: &TestApp, anvil: &Anvil) -> String {
    let id = app.create_intent_id(SEED_BODY).await;
    let signature = anvil.sign(PAYER_KEY, &app.typed_data(&id).await);
    let answer = app.confirm(&id, &signature).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    id
}

async fn wait_for_pending_reason(app: &TestApp, id: &str, reason: &str) {
    app.wait_until(
        &format!("{id} waits for {reason}"),
        &format!("(SELECT pending_reason = '{reason}' FROM payment_intents WHERE id = '{id}')"),
    )
    .await;
}

/// A relayer key with almost no native coin: the confirmed payment waits with
/// `pending_reason: relayer_underfunded` (one event), `/readyz` names the key and the balance is
/// a metric; funded, it is sent and settles once, and `/readyz` is plain ready again.
#[tokio::test]
async fn an_underfunded_relayer_holds_its_payments_until_it_is_funded() {
    let anvil = Anvil::start().await;
    let relayer = anvil.cast(&["wallet", "address", "--private-key", RELAYER_KEY]);
    anvil
        .rpc("anvil_setBalance", json!([relayer, "0x3e8"]))
        .await;
    let app = app_on_with(&anvil, 1, true, |_| {}).await;
    let id = confirmed_intent(&app, &anvil).await;
    wait_for_pending_reason(&app, &id, "relayer_underfunded").await;
    let ready = app.get("/readyz").await;
    assert_eq!(ready.status, 200, "still serving: {}", ready.body);
    assert_eq!(ready.json()["status"], "degraded");
    assert!(
        ready.body.contains(&relayer) && ready.body.contains("evm:31337"),
        "{}",
        ready.body
    );
    // The recorder is the test process's, shared by every app in it: the series, not its value.
    let metrics = app.get("/metrics").await.body;
    assert!(
        metrics.contains(&format!(
            "relayer_balance_wei{{chain=\"evm:31337\",relayer=\"{relayer}\"}}"
        )),
        "{metrics}"
    );
    let submissions: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM chain_submissions WHERE subject = $1 AND cardinality(tx_hashes) > 0",
    )
    .bind(&id)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(submissions, 0, "nothing was broadcast");

    anvil
        .rpc("anvil_setBalance", json!([relayer, "0x8ac7230489e80000"]))
        .await;
    app.wait_for_state(&id, "succeeded").await;
    assert_eq!(
        app.event_types(&id).await,
        [
            "payment_intent.created",
            "payment_intent.processing",
            "payment_intent.payment_pending",
            "payment_intent.succeeded"
        ],
        "the hold announced once"
    );
    // The send read the balance again: funded, the key is no longer named.
    let ready = app.get("/readyz").await;
    assert_eq!(ready.json()["status"], "ready", "{}", ready.body);
}

/// A chain charging 100 gwei a gas against a cap of 10: the payment waits with
/// `pending_reason: gas_price_above_cap`, nothing is broadcast; once the base fee falls to about
/// 1 gwei it is sent offering no more than the cap, and settles.
#[tokio::test]
async fn a_fee_above_the_cap_holds_the_payment_and_no_transaction_offers_more() {
    let anvil = Anvil::start().await;
    let cap: u128 = 10_000_000_000;
    let app = app_on_with(&anvil, 1, true, move |s| {
        s.settlement.chains[0].max_fee_per_gas = Some(cap);
    })
    .await;
    anvil
        .rpc("anvil_setNextBlockBaseFeePerGas", json!(["0x174876e800"]))
        .await;
    anvil.mine(1).await;
    let id = confirmed_intent(&app, &anvil).await;
    wait_for_pending_reason(&app, &id, "gas_price_above_cap").await;
    let sent: Vec<Vec<String>> =
        sqlx::query_scalar("SELECT tx_hashes FROM chain_submissions WHERE subject = $1")
            .bind(&id)
            .fetch_all(&app.db)
            .await
            .unwrap();
    assert!(sent.iter().all(Vec::is_empty), "nothing was broadcast");

    anvil
        .rpc("anvil_setNextBlockBaseFeePerGas", json!(["0x3b9aca00"]))
        .await;
    anvil.mine(1).await;
    app.mine_until(
        &anvil,
        "the payment to settle",
        &format!("(SELECT state = 'succeeded' FROM payment_intents WHERE id = '{id}')"),
    )
    .await;
    let hashes: Vec<String> =
        sqlx::query_scalar("SELECT tx_hashes FROM chain_submissions WHERE subject = $1")
            .bind(&id)
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert!(!hashes.is_empty());
    for hash in hashes {
        let transaction = anvil.rpc("eth_getTransactionByHash", json!([hash])).await;
        let offered = transaction["maxFeePerGas"].as_str().unwrap();
        let offered = u128::from_str_radix(offered.trim_start_matches("0x"), 16).unwrap();
        assert!(offered <= cap, "{hash} offered {offered} wei a gas");
    }
}
