//! Settlement on chain against a real anvil: the authorization signed by cast, confirm, the
//! relayer, the payer paying without us, the listener's confirmations, reorgs and expiry by chain
//! time (`docs/settlement.md`).

use serde_json::{Value, json};

use crate::helpers::{
    DEMO_TOKEN, SEED_BODY, TestApp,
    chain::{Anvil, PAYEE, PAYER, PAYER_KEY, RELAYER_KEY, app_on},
};

const AMOUNT: u128 = 100_000_000;

/// A seed intent on `app`, the document its payer signs and the payer's signature of it (by cast).
async fn signed_intent(app: &TestApp, anvil: &Anvil) -> (String, serde_json::Value, String) {
    let id = app.create_intent_id(SEED_BODY).await;
    let typed = app.typed_data(&id).await;
    let signature = anvil.sign(PAYER_KEY, &typed);
    (id, typed, signature)
}

/// The intent `id` succeeded, the payee holds exactly its amount more than `before`, and one
/// success was announced.
async fn assert_paid_once(app: &TestApp, anvil: &Anvil, id: &str, before: u128) {
    app.wait_for_state(id, "succeeded").await;
    assert_eq!(anvil.balance(PAYEE) - before, AMOUNT);
    assert_eq!(
        app.event_types(id).await,
        ["payment_intent.created", "payment_intent.succeeded"]
    );
}
#[tokio::test]
async fn a_confirmed_intent_is_relayed_and_settles_once_confirmed() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 3, true).await;
    let before = anvil.balance(PAYEE);
    let id = app.create_intent_id(SEED_BODY).await;
    let typed = app.typed_data(&id).await;
    assert_eq!(typed["domain"]["name"], "Devnet USD");
    assert_eq!(typed["message"]["value"], "100000000");
    // Signed by cast, an EIP-712 implementation that is not ours.
    let signature = anvil.sign(PAYER_KEY, &typed);
    let confirmed = app.confirm(&id, &signature).await;
    assert_eq!(confirmed.status, 200, "{}", confirmed.body);
    assert_eq!(confirmed.json()["state"], "processing");
    // The same key replays the same answer; the intent is confirmed once.
    let again = app.confirm(&id, &signature).await;
    assert_eq!(
        (again.status, again.body.as_str()),
        (200, confirmed.body.as_str())
    );
    app.wait_until(
        "the relayer sent it",
        &format!("(SELECT state FROM chain_submissions WHERE subject = '{id}') = 'sent'"),
    )
    .await;
    // Mined but not yet confirmed: still processing.
    app.wait_until(
        "the listener saw it",
        &format!("EXISTS (SELECT 1 FROM chain_observations WHERE subject = '{id}')"),
    )
    .await;
    assert_eq!(app.state_of(&id).await, "processing");
    anvil.mine(3).await;
    app.wait_for_state(&id, "succeeded").await;
    let intent = app.get_intent(DEMO_TOKEN, &id).await.json();
    assert_eq!(intent["version"], 3);
    assert!(
        intent["settlement"]["transaction_hash"]
            .as_str()
            .unwrap()
            .starts_with("0x")
    );
    assert_eq!(anvil.balance(PAYEE) - before, AMOUNT);
    assert_eq!(
        app.event_types(&id).await,
        [
            "payment_intent.created",
            "payment_intent.processing",
            "payment_intent.succeeded"
        ]
    );
    app.wait_until(
        "the relayer let go",
        &format!("(SELECT state FROM chain_submissions WHERE subject = '{id}') = 'done'"),
    )
    .await;
    let balances = app.get_as(DEMO_TOKEN, "/v1/balances").await.json();
    assert_eq!(
        balances,
        json!({"data": [{"chain": "evm:31337", "token": crate::helpers::chain::TOKEN, "amount": "100000000"}], "totals": []})
    );
    let metrics = app.get("/metrics").await.body;
    for series in [
        "chain_head_block{chain=\"evm:31337\"}",
        "chain_listener_lag_blocks{chain=\"evm:31337\"}",
        "relayer_submissions_pending{chain=\"evm:31337\",relayer=\"0x90F79bf6EB2c4f870365E785982E1f101E93b906\"}",
        "settlements_total{chain=\"evm:31337\",outcome=\"succeeded\"}",
    ] {
        assert!(metrics.contains(series), "{series} in /metrics");
    }
}

#[tokio::test]
async fn a_payer_who_submits_the_authorization_without_us_settles_the_intent() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 2, false).await;
    let (id, typed, signature) = signed_intent(&app, &anvil).await;
    anvil.submit_as_payer(&typed, &signature);
    anvil.mine(2).await;
    app.wait_for_state(&id, "succeeded").await;
    let actor: String =
        sqlx::query_scalar("SELECT actor FROM payment_intent_transitions WHERE intent_id = $1")
            .bind(&id)
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(actor, "chain");
    // Paid: it cannot be confirmed or canceled any more.
    assert_eq!(app.confirm(&id, &signature).await.status, 409);
    assert_eq!(app.cancel(DEMO_TOKEN, &id, None).await.status, 409);
}

#[tokio::test]
async fn confirm_checks_the_signature_and_the_state() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 2, false).await;
    let id = app.create_intent_id(SEED_BODY).await;
    let typed = app.typed_data(&id).await;
    // Signed by someone else than the payer.
    let stranger = anvil.sign(RELAYER_KEY, &typed);
    let answer = app.confirm(&id, &stranger).await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert!(
        answer.json()["detail"]
            .as_str()
            .unwrap()
            .starts_with("signature: signed by"),
        "{}",
        answer.body
    );
    for malformed in ["0x1234", "nothex", &format!("0x{}", "f".repeat(130))] {
        let body = json!({ "signature": malformed }).to_string();
        let answer = app
            .post_as(
                DEMO_TOKEN,
                &format!("/v1/payment_intents/{id}/confirm"),
                None,
                &body,
            )
            .await;
        assert_eq!(answer.status, 400, "{malformed}: {}", answer.body);
        assert!(answer.body.contains("signature"), "{}", answer.body);
    }
    let missing = app
        .post_as(
            DEMO_TOKEN,
            &format!("/v1/payment_intents/{id}/confirm"),
            None,
            "{}",
        )
        .await;
    assert_eq!(missing.status, 400);
    assert!(missing.body.contains("signature"), "{}", missing.body);
    assert_eq!(app.state_of(&id).await, "created");
    // A canceled intent has nothing to authorize.
    assert_eq!(app.cancel(DEMO_TOKEN, &id, None).await.status, 200);
    let answer = app.authorization(&id).await;
    assert_eq!(answer.status, 409, "{}", answer.body);
    // Another chain than the served one is refused at creation.
    let elsewhere = SEED_BODY.replace("evm:31337", "evm:1");
    let refused = app.create_intent(DEMO_TOKEN, None, &elsewhere).await;
    assert_eq!(refused.status, 400);
    assert!(refused.body.contains("chain"), "{}", refused.body);
}

/// With settlement off, an intent is refused payment for what stops it, the server's
/// configuration, not the intent's state: 422 `chain_not_settled`, naming `CHAINS`.
#[tokio::test]
async fn a_chain_this_server_does_not_settle_is_named_as_such() {
    let app = TestApp::spawn().await;
    let id = app.create_intent_id(SEED_BODY).await;
    let authorization = app.authorization(&id).await;
    let confirm = app.confirm(&id, &format!("0x{}1b", "11".repeat(64))).await;
    for answer in [authorization, confirm] {
        assert_eq!(
            (answer.status, answer.json()["error"].as_str()),
            (422, Some("chain_not_settled")),
            "{}",
            answer.body
        );
        let detail = answer.json()["detail"].as_str().unwrap().to_owned();
        assert!(
            detail.contains("evm:31337") && detail.contains("CHAINS is not set"),
            "{detail}"
        );
    }
    assert_eq!(app.state_of(&id).await, "created");
}

#[tokio::test]
async fn a_token_without_eip3009_is_refused_and_an_unknown_token_needs_its_chain() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 2, false).await;
    // An address with no code: not a token at all.
    let no_code = SEED_BODY.replace(
        "0x5FbDB2315678afecb367f032d93F642f64180aa3",
        "0x000000000000000000000000000000000000dEaD",
    );
    let id = app.create_intent_id(&no_code).await;
    let answer = app.authorization(&id).await;
    assert_eq!(answer.status, 422, "{}", answer.body);
    assert_eq!(answer.json()["error"], "token_not_supported");
    // A contract that is no token (USDC's signature library): refused for the check it fails, with
    // the same detail on every later answer, for any intent naming it.
    let library = SEED_BODY.replace(
        "0x5FbDB2315678afecb367f032d93F642f64180aa3",
        "0x700b6A60ce7EaaEA56F065753d8dcB9653dbAD35",
    );
    let mut details = Vec::new();
    for _ in 0..2 {
        let id = app.create_intent_id(&library).await;
        let answer = app.authorization(&id).await;
        assert_eq!(answer.status, 422, "{}", answer.body);
        details.push(answer.json()["detail"].as_str().unwrap().to_owned());
    }
    assert!(
        details[0].contains("has no DOMAIN_SEPARATOR()"),
        "{}",
        details[0]
    );
    assert_eq!(details[0], details[1]);
    drop(anvil);
    // The chain is gone and this token was never read: 503, nothing stored.
    let id = app.create_intent_id(SEED_BODY).await;
    let answer = app.authorization(&id).await;
    assert_eq!(answer.status, 503, "{}", answer.body);
    assert!(answer.header("retry-after").is_some());
}

#[tokio::test]
async fn a_payment_in_an_orphaned_block_is_dropped_and_settles_once_after_reinclusion() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 3, false).await;
    let before = anvil.balance(PAYEE);
    let (id, typed, signature) = signed_intent(&app, &anvil).await;
    let snapshot = anvil.rpc("evm_snapshot", json!([])).await;
    anvil.submit_as_payer(&typed, &signature);
    let observed = format!("EXISTS (SELECT 1 FROM chain_observations WHERE subject = '{id}')");
    app.wait_until("the listener saw the payment", &observed)
        .await;
    // The block is orphaned: the chain goes back and grows other blocks at the same heights.
    anvil.rpc("evm_revert", json!([snapshot])).await;
    anvil.mine(2).await;
    app.wait_until(
        "the orphaned observation is dropped",
        &format!("NOT {observed}"),
    )
    .await;
    anvil.mine(3).await;
    app.wait_for_listener(&anvil).await;
    assert_eq!(app.state_of(&id).await, "created");
    assert_eq!(anvil.balance(PAYEE), before);
    // Re-included: it settles, once.
    anvil.submit_as_payer(&typed, &signature);
    anvil.mine(3).await;
    assert_paid_once(&app, &anvil, &id, before).await;
}

/// Sets the next block's timestamp (anvil_setNextBlockTimestamp).
async fn next_block_at(anvil: &Anvil, timestamp: u64) {
    anvil
        .rpc("evm_setNextBlockTimestamp", json!([timestamp]))
        .await;
}

fn valid_before(typed: &Value) -> u64 {
    typed["message"]["validBefore"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn expiry_follows_the_chains_time_not_ours() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 2, false).await;
    let short = SEED_BODY.replace(r#""expires_in_seconds":900"#, r#""expires_in_seconds":60"#);
    let unpaid = app.create_intent_id(&short).await;
    let confirmed = app.create_intent_id(&short).await;
    let raced = app.create_intent_id(&short).await;
    let typed = app.typed_data(&confirmed).await;
    assert_eq!(
        app.confirm(&confirmed, &anvil.sign(PAYER_KEY, &typed))
            .await
            .status,
        200
    );
    let race = app.typed_data(&raced).await;
    let deadline = valid_before(&race);
    // Paid in the last block the token still accepts it: one second before validBefore.
    next_block_at(&anvil, deadline - 1).await;
    anvil.submit_as_payer(&race, &anvil.sign(PAYER_KEY, &race));
    next_block_at(&anvil, deadline + 1).await;
    anvil.mine(3).await;
    app.wait_for_state(&raced, "succeeded").await;
    app.wait_for_state(&unpaid, "canceled").await;
    app.wait_for_state(&confirmed, "failed").await;
    let unpaid = app.get_intent(DEMO_TOKEN, &unpaid).await.json();
    assert_eq!(unpaid["cancellation_reason"], "expired");
    let failed = app.get_intent(DEMO_TOKEN, &confirmed).await.json();
    assert_eq!(failed["failure_reason"], "authorization_expired");
}

#[tokio::test]
async fn expiry_waits_for_a_confirmed_block_past_valid_before() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 3, false).await;
    let short = SEED_BODY.replace(r#""expires_in_seconds":900"#, r#""expires_in_seconds":60"#);
    let id = app.create_intent_id(&short).await;
    let deadline = valid_before(&app.typed_data(&id).await);
    next_block_at(&anvil, deadline).await;
    anvil.mine(1).await;
    app.wait_for_listener(&anvil).await;
    // The block exists but is not confirmed yet: a reorg could still replace it.
    assert_eq!(app.state_of(&id).await, "created");
    anvil.mine(2).await;
    app.wait_for_state(&id, "canceled").await;
}

#[tokio::test]
async fn a_payer_who_paid_after_the_merchant_canceled_is_recorded_on_the_canceled_intent() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 2, false).await;
    let (id, typed, signature) = signed_intent(&app, &anvil).await;
    assert_eq!(app.cancel(DEMO_TOKEN, &id, None).await.status, 200);
    anvil.submit_as_payer(&typed, &signature);
    anvil.mine(2).await;
    app.wait_until(
        "the payment is recorded",
        &format!("(SELECT settlement IS NOT NULL FROM payment_intents WHERE id = '{id}')"),
    )
    .await;
    let intent = app.get_intent(DEMO_TOKEN, &id).await.json();
    assert_eq!(intent["state"], "canceled");
    assert_eq!(intent["cancellation_reason"], "merchant_request");
    assert_eq!(
        app.event_types(&id).await,
        [
            "payment_intent.created",
            "payment_intent.canceled",
            "payment_intent.paid_after_cancel"
        ]
    );
    // The money moved: the ledger has it, whatever the intent's state.
    let balances = app.get_as(DEMO_TOKEN, "/v1/balances").await.json();
    assert_eq!(balances["data"][0]["amount"], "100000000");
}

#[tokio::test]
async fn a_nonce_burned_on_another_amount_fails_the_intent() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 2, false).await;
    let before = anvil.balance(PAYEE);
    let id = app.create_intent_id(SEED_BODY).await;
    let mut typed = app.typed_data(&id).await;
    // The payer signs the intent's nonce over one token unit instead of the amount.
    typed["message"]["value"] = json!("1");
    let signature = anvil.sign(PAYER_KEY, &typed);
    anvil.submit_as_payer(&typed, &signature);
    anvil.mine(2).await;
    app.wait_for_state(&id, "failed").await;
    assert_eq!(
        app.get_intent(DEMO_TOKEN, &id).await.json()["failure_reason"],
        "nonce_used_otherwise"
    );
    assert_eq!(anvil.balance(PAYEE) - before, 1);
    assert_eq!(anvil.balance(PAYER), 1_000_000_000_000 - 1);
}

#[tokio::test]
async fn a_payer_who_cancels_the_authorization_on_chain_fails_the_intent() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 2, false).await;
    let id = app.create_intent_id(SEED_BODY).await;
    let typed = app.typed_data(&id).await;
    anvil.cancel_as_payer(&typed);
    anvil.mine(2).await;
    app.wait_for_state(&id, "failed").await;
    assert_eq!(
        app.get_intent(DEMO_TOKEN, &id).await.json()["failure_reason"],
        "authorization_canceled"
    );
    assert_eq!(
        app.event_types(&id).await,
        ["payment_intent.created", "payment_intent.failed"]
    );
    let kind: String = sqlx::query_scalar("SELECT kind FROM chain_observations WHERE subject = $1")
        .bind(&id)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(kind, "authorization_canceled");
    // The canceled authorization can pay nothing any more.
    let signature = anvil.sign(PAYER_KEY, &typed);
    assert_eq!(app.confirm(&id, &signature).await.status, 409);
}

/// The follower reads the blocks it missed as one range of logs: a payment made 300 blocks below
/// the head while no follower ran is found, and settled, by a single `run_once`, which stores only
/// the few blocks it needs (the range's ends, the one it confirms, the one with the payment).
#[tokio::test]
async fn a_follower_catches_up_over_a_range_of_blocks_in_one_tick() {
    use payments_api::{
        db,
        rails::{finality::Finality, follower::Follower, rpc},
        ways_to_pay::authorization::watch::PaymentWatch,
        workers::Worker,
    };

    let anvil = Anvil::start().await;
    let mut settlement = anvil.settlement(1);
    // The app's own follower ticks once at start, then not for an hour.
    settlement.poll_interval = std::time::Duration::from_secs(3600);
    let app = TestApp::spawn_with({
        let settlement = settlement.clone();
        move |s| s.settlement = settlement
    })
    .await;
    app.wait_until(
        "the app's follower placed its cursor",
        "EXISTS (SELECT 1 FROM chain_cursors)",
    )
    .await;
    let (id, typed, signature) = signed_intent(&app, &anvil).await;
    anvil.submit_as_payer(&typed, &signature);
    anvil.mine(300).await;
    let head = anvil.block_number().await;

    let chain = settlement.chains[0].clone();
    let mut follower = Follower::new(
        db::pool(&app.database_url, 2).unwrap(),
        chain.clone(),
        rpc::connect(&chain.rpc_url),
        Finality::Confirmations(1),
        PaymentWatch,
    );
    follower.run_once().await.unwrap();
    let cursor: i64 = sqlx::query_scalar("SELECT block_number FROM chain_cursors")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(cursor as u64, head, "one tick reached the head");
    assert_eq!(app.state_of(&id).await, "succeeded");
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM chain_blocks")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert!(stored <= 5, "{stored} blocks stored");
}

#[tokio::test]
async fn a_chain_reset_under_the_listener_stops_settlement_and_rewrites_nothing() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, false).await;
    let id = app.create_intent_id(SEED_BODY).await;
    let typed = app.typed_data(&id).await;
    anvil.submit_as_payer(&typed, &anvil.sign(PAYER_KEY, &typed));
    app.wait_for_state(&id, "succeeded").await;
    // The node forgets everything: the block that paid the intent is gone.
    anvil.rpc("anvil_reset", json!([])).await;
    anvil.mine(3).await;
    app.wait_until(
        "the listener stopped",
        "(SELECT halted IS NOT NULL FROM chain_cursors)",
    )
    .await;
    let halted: String = sqlx::query_scalar("SELECT halted FROM chain_cursors")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert!(halted.contains("reset under the listener"), "{halted}");
    let intent = app.get_intent(DEMO_TOKEN, &id).await.json();
    assert_eq!(intent["state"], "succeeded", "confirmed history stays");
    assert!(
        app.get("/metrics")
            .await
            .body
            .contains("chain_listener_halted{chain=\"evm:31337\"} 1")
    );
}

#[tokio::test]
async fn the_devnet_set_up_runs_twice_and_changes_nothing_the_second_time() {
    let anvil = Anvil::start().await;
    let block = anvil.block_number().await;
    let before = anvil.balance(PAYER);
    let again = payments_api::rails::evm::devnet::set_up(&anvil.url.parse().unwrap())
        .await
        .unwrap();
    assert!(!again.deployed_now);
    assert_eq!(again.token.to_string(), crate::helpers::chain::TOKEN);
    assert_eq!(anvil.block_number().await, block, "no transaction sent");
    assert_eq!(anvil.balance(PAYER), before);
    assert_eq!(before, 1_000_000_000_000, "1 000 000 tokens of 6 decimals");
}

#[tokio::test]
async fn the_ledger_refuses_an_entry_that_does_not_balance_and_any_change() {
    let app = TestApp::spawn().await;
    let id = app.create_intent_id(SEED_BODY).await;
    /// Books an entry for `id` with `postings` (SQL rows of account and amount) in one transaction.
    async fn book(app: &TestApp, id: &str, hash: &str, postings: &str) -> Result<i64, sqlx::Error> {
        let mut tx = app.db.begin().await?;
        let entry: i64 = sqlx::query_scalar(
            "INSERT INTO ledger_entries (kind, merchant_id, intent_id, chain, transaction_hash, log_index)
             VALUES ('payment', 'merchant_demo', $1, 'evm:31337', $2, 0) RETURNING id",
        )
        .bind(id)
        .bind(hash)
        .fetch_one(&mut *tx)
        .await?;
        sqlx::query(&format!(
            "INSERT INTO ledger_postings SELECT $1, a, 'evm:31337', '0xT', n FROM (VALUES {postings}) AS p (a, n)"
        ))
        .bind(entry)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(entry)
    }
    let refused = book(&app, &id, "0x01", "('merchant:merchant_demo', 5::numeric)")
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("does not sum to zero"),
        "{refused}"
    );
    let entry = book(
        &app,
        &id,
        "0x02",
        "('merchant:merchant_demo', 5::numeric), ('payer:0xP', -5)",
    )
    .await
    .unwrap();
    let changed =
        sqlx::query("UPDATE ledger_postings SET amount = 6 WHERE entry_id = $1 AND amount = 5")
            .bind(entry)
            .execute(&app.db)
            .await
            .unwrap_err();
    assert!(changed.to_string().contains("append-only"), "{changed}");
}

/// `payments-api reconcile` against `app`'s database and `anvil`: exit status and output.
pub fn reconcile(app: &TestApp, anvil: &Anvil) -> (bool, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_payments-api"))
        .args(["reconcile", "--chain", "evm:31337"])
        .env("CHAINS", format!("evm:31337={}", anvil.url))
        .env("CHAIN_CONFIRMATIONS", "1")
        .env("DATABASE_URL", &app.database_url)
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

#[tokio::test]
async fn reconcile_agrees_with_a_settled_chain_and_names_each_difference() {
    let anvil = Anvil::start().await;
    let settled = app_on(&anvil, 1, false).await;
    for _ in 0..2 {
        let id = settled.create_intent_id(SEED_BODY).await;
        let typed = settled.typed_data(&id).await;
        anvil.submit_as_payer(&typed, &anvil.sign(PAYER_KEY, &typed));
        settled.wait_for_state(&id, "succeeded").await;
    }
    // A payer burns a nonce with a transfer of one unit: shown, booked nowhere, no difference.
    let burned = settled.create_intent_id(SEED_BODY).await;
    let mut typed = settled.typed_data(&burned).await;
    typed["message"]["value"] = "1".into();
    anvil.submit_as_payer(&typed, &anvil.sign(PAYER_KEY, &typed));
    settled.wait_for_state(&burned, "failed").await;
    let (agreed, output) = reconcile(&settled, &anvil);
    assert!(agreed, "{output}");
    assert!(
        output.contains("2 payments booked, 2 paid on chain"),
        "{output}"
    );
    assert!(
        output.contains(&format!("BURNED {burned}'s nonce used in 0x"))
            && output.contains("by a transfer of 1, not its 100000000"),
        "{output}"
    );

    // Another database whose listener confirms nothing yet: what the chain paid is not booked.
    let unsettled = app_on(&anvil, 1_000, false).await;
    let unbooked = unsettled.create_intent_id(SEED_BODY).await;
    let typed = unsettled.typed_data(&unbooked).await;
    anvil.submit_as_payer(&typed, &anvil.sign(PAYER_KEY, &typed));
    // And a booking with no payment behind it.
    let phantom = unsettled.create_intent_id(SEED_BODY).await;
    sqlx::query(
        "WITH e AS (INSERT INTO ledger_entries (kind, merchant_id, intent_id, chain, transaction_hash, log_index)
                    VALUES ('payment', 'merchant_demo', $1, 'evm:31337', '0xfeed', 0) RETURNING id)
         INSERT INTO ledger_postings SELECT id, a, 'evm:31337', $2, n FROM e,
                (VALUES ('merchant:merchant_demo', 7::numeric), ('payer:0xP', -7::numeric)) AS s (a, n)",
    )
    .bind(&phantom)
    .bind(crate::helpers::chain::TOKEN)
    .execute(&unsettled.db)
    .await
    .unwrap();
    let (agreed, output) = reconcile(&unsettled, &anvil);
    assert!(!agreed, "exit 1 on a difference: {output}");
    assert!(
        output.contains(&format!(
            "on chain, not in the ledger: {unbooked} paid 100000000"
        )),
        "{output}"
    );
    assert!(
        output.contains(&format!(
            "in the ledger, not on chain: {phantom} booked 7 for 0xfeed"
        )),
        "{output}"
    );
    // The devnet's mint, the other database's two payments and its burned nonce go to the same
    // address but pay none of this database's intents.
    assert!(
        output.contains("4 other transfers to or from merchant addresses"),
        "{output}"
    );
}

#[tokio::test]
async fn the_clock_sweeper_leaves_a_settled_chains_intents_to_its_listener() {
    // Settlement on, but no node answers: only the sweeper could expire anything.
    let app = TestApp::spawn_with(|s| {
        s.settlement.chains =
            payments_api::config::parse_chains("evm:31337=http://127.0.0.1:9").unwrap();
    })
    .await;
    let id = app.create_intent_id(SEED_BODY).await;
    sqlx::query("UPDATE payment_intents SET expires_at = now() - interval '1 hour'")
        .execute(&app.db)
        .await
        .unwrap();
    let swept = app.sweep().await.unwrap();
    assert_eq!(
        swept.intents_expired, 0,
        "late by our clock, not by the chain's"
    );
    assert_eq!(app.state_of(&id).await, "created");
}

/// Submissions queued before the outbox existed keep their meaning: the migration computes, in
/// SQL, the calldata the relayer's own ABI encoding gives for the stored authorization, and the
/// dedupe key a confirm gives it now.
#[tokio::test]
async fn the_outbox_migration_encodes_a_queued_authorization_as_the_relayer_does() {
    use std::borrow::Cow;

    use payments_api::{
        db::migrate::MIGRATOR,
        rails::evm::{
            Address, B256, U256,
            authorization::{Authorization, PayerSignature},
        },
    };
    use sqlx::migrate::Migrator;

    const OUTBOX: i64 = 20261201000010;
    let url = crate::helpers::empty_database().await;
    let db = sqlx::PgPool::connect(&url).await.unwrap();
    let before = Migrator {
        migrations: Cow::Owned(
            MIGRATOR
                .iter()
                .filter(|m| m.version < OUTBOX)
                .cloned()
                .collect(),
        ),
        ..Migrator::DEFAULT
    };
    before.run(&db).await.unwrap();

    let authorization = Authorization {
        chain_id: 31337,
        token: crate::helpers::chain::TOKEN.parse().unwrap(),
        token_name: String::new(),
        token_version: String::new(),
        from: PAYER.parse().unwrap(),
        to: PAYEE.parse::<Address>().unwrap(),
        value: U256::from(123_456_789_012_345_678_u128),
        valid_after: 0,
        valid_before: 1_900_000_000,
        nonce: B256::repeat_byte(0xab),
    };
    let signature_hex = format!("0x{}{}1c", "11".repeat(32), "22".repeat(32));
    let signature = PayerSignature::parse(&signature_hex).unwrap();
    sqlx::query(
        "INSERT INTO payment_intents (merchant_id, id, state, version, amount, chain, token, payer, payee, expires_at)
         VALUES ('m', 'pi_000000000000000000000001', 'processing', 2, $1::numeric, 'evm:31337', $2, $3, $4, now())",
    )
    .bind(authorization.value.to_string())
    .bind(authorization.token.to_checksum(None))
    .bind(PAYER)
    .bind(PAYEE)
    .execute(&db)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO chain_submissions (merchant_id, intent_id, chain_id, token, payer, payee, amount, valid_before, nonce, signature)
         VALUES ('m', 'pi_000000000000000000000001', 31337, $1, $2, $3, $4::numeric, $5, $6, $7)",
    )
    .bind(authorization.token.to_checksum(None))
    .bind(PAYER)
    .bind(PAYEE)
    .bind(authorization.value.to_string())
    .bind(authorization.valid_before as i64)
    .bind(authorization.nonce.as_slice())
    .bind(&signature.to_bytes()[..])
    .execute(&db)
    .await
    .unwrap();

    MIGRATOR.run(&db).await.unwrap();
    let (kind, subject, dedupe_key, target, calldata): (String, String, String, String, Vec<u8>) =
        sqlx::query_as("SELECT kind, subject, dedupe_key, target, calldata FROM chain_submissions")
            .fetch_one(&db)
            .await
            .unwrap();
    assert_eq!(kind, "intent_payment");
    assert_eq!(subject, "pi_000000000000000000000001");
    assert_eq!(
        dedupe_key,
        format!(
            "{}:{}:{}",
            authorization.token, authorization.from, authorization.nonce
        )
    );
    assert_eq!(target, authorization.token.to_checksum(None));
    assert_eq!(
        hex::encode(calldata),
        hex::encode(authorization.calldata(&signature))
    );
}

/// A caller can await a submission's outcome (as an x402 settlement will): it comes back done once
/// the payment watch moved the intent, with the transaction the chain mined.
#[tokio::test]
async fn a_caller_awaits_a_submissions_outcome() {
    use payments_api::{db, rails::outbox};

    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let (id, _, signature) = signed_intent(&app, &anvil).await;
    assert_eq!(app.confirm(&id, &signature).await.status, 200);
    let submission: uuid::Uuid =
        sqlx::query_scalar("SELECT id FROM chain_submissions WHERE subject = $1")
            .bind(&id)
            .fetch_one(&app.db)
            .await
            .unwrap();
    let pool = db::pool(&app.database_url, 2).unwrap();
    let outcomes = outbox::Outcomes::default();
    let status = outbox::await_outcome(
        &pool,
        &outcomes,
        submission,
        std::time::Duration::from_secs(60),
    )
    .await
    .unwrap()
    .expect("the submission exists");
    assert_eq!(status.state, outbox::State::Done);
    assert_eq!(status.outcome.as_deref(), Some("intent_succeeded"));
    let paid_in = app.get_intent(DEMO_TOKEN, &id).await.json()["settlement"]["transaction_hash"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(status.tx_hashes.contains(&paid_in), "{status:?}");
    let unknown = outbox::await_outcome(
        &pool,
        &outcomes,
        uuid::Uuid::new_v4(),
        std::time::Duration::from_secs(1),
    )
    .await
    .unwrap();
    assert_eq!(unknown, None);
}

/// `anvil_reorg` replaces the newest blocks as a real reorg does (the payment's transaction is
/// dropped): the follower rewinds and keeps following the new blocks, read in ranges, and the
/// payment sent again settles once.
#[tokio::test]
async fn the_follower_keeps_following_after_a_reorg_replaces_the_newest_blocks() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 3, false).await;
    let before = anvil.balance(PAYEE);
    let (id, typed, signature) = signed_intent(&app, &anvil).await;
    anvil.submit_as_payer(&typed, &signature);
    let observed = format!("EXISTS (SELECT 1 FROM chain_observations WHERE subject = '{id}')");
    app.wait_until("the follower saw the payment", &observed)
        .await;
    anvil.rpc("anvil_reorg", json!([2, []])).await;
    for _ in 0..3 {
        anvil.mine(3).await;
        app.wait_for_listener(&anvil).await;
    }
    if app.state_of(&id).await == "created" {
        anvil.submit_as_payer(&typed, &signature);
        anvil.mine(3).await;
    }
    assert_paid_once(&app, &anvil, &id, before).await;
}
