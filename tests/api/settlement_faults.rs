//! Settlement under faults, for real: a transaction stuck under a rising base fee, a relayer
//! killed between broadcast and record, a listener SIGKILLed while payments land, a chain that goes
//! down and comes back, and two replicas relaying and listening at once.

use std::time::Duration;

use payments_api::config::SettlementSettings;
use serde_json::json;

use crate::helpers::{
    DEMO_TOKEN, RpcFaultProxy, SEED_BODY, ServerProcess, TestApp,
    chain::{Anvil, Gate, PAYEE, PAYER_KEY, RELAYER_KEY, SECOND_RELAYER_KEY, settlement_env},
};

const AMOUNT: u128 = 100_000_000;

/// Creates an intent and confirms it with the payer's signature (made by cast).
async fn create_and_confirm(app: &TestApp, anvil: &Anvil) -> String {
    let id = app.create_intent_id(SEED_BODY).await;
    let signature = anvil.sign(PAYER_KEY, &app.typed_data(&id).await);
    let answer = app.confirm(&id, &signature).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    id
}

/// How many times the intent became `succeeded`, by its transitions and by its events.
async fn times_settled(app: &TestApp, id: &str) -> (i64, i64) {
    let transitions = sqlx::query_scalar(
        "SELECT count(*) FROM payment_intent_transitions WHERE intent_id = $1 AND to_state = 'succeeded'",
    )
    .bind(id)
    .fetch_one(&app.db)
    .await
    .unwrap();
    let events = sqlx::query_scalar(
        "SELECT count(*) FROM events WHERE subject_id = $1 AND type = 'payment_intent.succeeded'",
    )
    .bind(id)
    .fetch_one(&app.db)
    .await
    .unwrap();
    (transitions, events)
}

async fn tx_hashes(app: &TestApp, id: &str) -> Vec<String> {
    sqlx::query_scalar("SELECT tx_hashes FROM chain_submissions WHERE subject = $1")
        .bind(id)
        .fetch_one(&app.db)
        .await
        .unwrap()
}

/// An app that settles `anvil` but relays nothing itself, on a chain that mines nothing until
/// told: the tests drive relayers through `run_once`.
async fn app_on_a_stopped_chain(anvil: &Anvil) -> (TestApp, SettlementSettings) {
    let settlement = anvil.settlement(1);
    let app = TestApp::spawn_with({
        let settlement = settlement.clone();
        move |s| s.settlement = settlement
    })
    .await;
    anvil.rpc("evm_setAutomine", json!([false])).await;
    (app, settlement)
}

/// A relayer worker for `key` on the app's database and chain, outside the app.
fn relayer_worker(
    app: &TestApp,
    settlement: &SettlementSettings,
    key: &str,
) -> payments_api::rails::relayer::RelayerWorker {
    use payments_api::{
        db,
        rails::{self, rpc},
    };
    let chain = settlement.chains[0].clone();
    rails::relayer::RelayerWorker::new(
        db::pool(&app.database_url, 2).unwrap(),
        chain.clone(),
        rpc::connect(&chain.rpc_url),
        rails::relayer::Key::parse(key).unwrap(),
        payments_api::ways_to_pay::submission_kinds(),
        settlement,
        rails::relayer::Funds::default(),
    )
}

fn env_refs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

#[tokio::test]
async fn a_transaction_stuck_under_a_rising_base_fee_is_replaced_with_higher_fees() {
    let anvil = Anvil::start().await;
    anvil.rpc("evm_setAutomine", json!([false])).await;
    let settlement = anvil.settlement(2);
    let app = TestApp::spawn_with(move |s| {
        s.settlement = settlement;
        s.settlement.relayer_private_key = Some(RELAYER_KEY.to_owned());
    })
    .await;
    let before = anvil.balance(PAYEE);
    let id = create_and_confirm(&app, &anvil).await;
    app.wait_until(
        "the relayer sent it",
        &format!("(SELECT state FROM chain_submissions WHERE subject = '{id}') = 'sent'"),
    )
    .await;
    // Blocks now cost a thousand times what the transaction offers: it stays in the pool.
    anvil
        .rpc(
            "anvil_setNextBlockBaseFeePerGas",
            json!([format!("{:#x}", 1_000_000_000_000u64)]),
        )
        .await;
    anvil.mine(3).await;
    app.wait_until(
        "the relayer replaced it",
        &format!(
            "(SELECT cardinality(tx_hashes) FROM chain_submissions WHERE subject = '{id}') >= 2"
        ),
    )
    .await;
    let hashes = tx_hashes(&app, &id).await;
    let fees: (String, String) = sqlx::query_as(
        "SELECT max_fee_per_gas::text, tx_nonce::text FROM chain_submissions WHERE subject = $1",
    )
    .bind(&id)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert!(
        fees.0.parse::<u128>().unwrap() > 1_000_000_000_000 / 2,
        "fees follow the base fee: {fees:?}"
    );
    assert_eq!(fees.1, "0", "a replacement reuses the relayer's nonce");
    anvil.mine(3).await;
    app.wait_for_state(&id, "succeeded").await;
    assert_eq!(anvil.balance(PAYEE) - before, AMOUNT);
    assert_eq!(times_settled(&app, &id).await, (1, 1));
    let receipt = anvil
        .rpc("eth_getTransactionReceipt", json!([hashes[0]]))
        .await;
    assert!(
        receipt.is_null(),
        "the stuck transaction was replaced, never mined"
    );
}

#[tokio::test]
async fn a_relayer_killed_between_broadcast_and_record_resubmits_harmlessly() {
    let anvil = Anvil::start().await;
    // Nothing is mined until the test says so: the first broadcast is still pending when the
    // restarted relayer sends again.
    anvil.rpc("evm_setAutomine", json!([false])).await;
    let view = TestApp::spawn().await;
    // The chain through a proxy that kills the process once its broadcast reached the node.
    let proxy = RpcFaultProxy::start(&anvil.url).await;
    let env = settlement_env(&proxy.url, 2, true);
    let mut doomed = ServerProcess::start(&view.database_url, &env_refs(&env)).await;
    proxy.aim_at(doomed.child.id(), 1.0);
    let app = view.pointed_at(&doomed.address);
    let before = anvil.balance(PAYEE);
    let id = create_and_confirm(&app, &anvil).await;
    let died = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let Some(status) = doomed.child.try_wait().unwrap() {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the relayer crashed after its broadcast");
    assert!(!died.success());
    assert_eq!(
        proxy.kills(),
        1,
        "killed between its broadcast and the answer"
    );
    assert!(
        tx_hashes(&app, &id).await.is_empty(),
        "the broadcast was never recorded"
    );
    let pending = anvil.rpc("txpool_content", json!([])).await;
    assert_eq!(
        pending["pending"].as_object().unwrap().len(),
        1,
        "one relayer transaction in the pool"
    );

    proxy.disarm();
    let restarted = ServerProcess::start(&view.database_url, &env_refs(&env)).await;
    let app = view.pointed_at(&restarted.address);
    // It has no record of the first broadcast, which paid nothing yet: it sends again.
    app.wait_until(
        "the restarted relayer sent again",
        &format!("(SELECT state FROM chain_submissions WHERE subject = '{id}') = 'sent'"),
    )
    .await;
    let resent = tx_hashes(&app, &id).await;
    anvil.mine(3).await;
    app.wait_for_state(&id, "succeeded").await;
    assert_eq!(
        anvil.balance(PAYEE) - before,
        AMOUNT,
        "one transfer, however often it was sent"
    );
    assert_eq!(times_settled(&app, &id).await, (1, 1));
    let second = anvil
        .rpc("eth_getTransactionReceipt", json!([resent[0]]))
        .await;
    assert_eq!(
        second["status"], "0x0",
        "the second submission reverted on the used nonce"
    );
    app.wait_until(
        "the relayer let go",
        &format!("(SELECT state FROM chain_submissions WHERE subject = '{id}') = 'done'"),
    )
    .await;
}

#[tokio::test]
async fn a_listener_killed_while_payments_land_resumes_from_its_cursor() {
    let anvil = Anvil::start().await;
    let view = TestApp::spawn().await;
    let env = settlement_env(&anvil.url, 2, false);
    let mut first = ServerProcess::start(&view.database_url, &env_refs(&env)).await;
    let app = view.pointed_at(&first.address);
    let mut ids = Vec::new();
    let mut authorizations = Vec::new();
    for _ in 0..3 {
        let id = app.create_intent_id(SEED_BODY).await;
        let typed = app.typed_data(&id).await;
        let signature = anvil.sign(PAYER_KEY, &typed);
        ids.push(id);
        authorizations.push((typed, signature));
    }
    anvil.submit_as_payer(&authorizations[0].0, &authorizations[0].1);
    anvil.mine(2).await;
    app.wait_for_state(&ids[0], "succeeded").await;

    first.child.kill().expect("SIGKILL the server");
    first.child.wait().unwrap();
    for (typed, signature) in &authorizations[1..] {
        anvil.submit_as_payer(typed, signature);
    }
    anvil.mine(3).await;

    let second = ServerProcess::start(&view.database_url, &env_refs(&env)).await;
    let app = view.pointed_at(&second.address);
    for id in &ids {
        app.wait_for_state(id, "succeeded").await;
        assert_eq!(times_settled(&app, id).await, (1, 1), "{id} settled once");
    }
    let observations: i64 = sqlx::query_scalar("SELECT count(*) FROM chain_observations")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(observations, 3, "nothing missed, nothing twice");
}

#[tokio::test]
async fn confirm_is_accepted_while_the_chain_is_down_and_settles_once_it_is_back() {
    let anvil = Anvil::start().await;
    let gate = Gate::start(&anvil.url).await;
    let mut settlement = anvil.settlement(2);
    settlement.chains =
        payments_api::config::parse_chains(&format!("evm:31337={}", gate.url)).unwrap();
    let app = TestApp::spawn_with(move |s| {
        s.settlement = settlement;
        s.settlement.relayer_private_key = Some(RELAYER_KEY.to_owned());
    })
    .await;
    let before = anvil.balance(PAYEE);
    let id = app.create_intent_id(SEED_BODY).await;
    // The token is read once, while the chain is up.
    let signature = anvil.sign(PAYER_KEY, &app.typed_data(&id).await);
    gate.close();
    let body = json!({ "signature": signature }).to_string();
    let confirmed = app
        .post_as(
            DEMO_TOKEN,
            &format!("/v1/payment_intents/{id}/confirm"),
            Some("down-1"),
            &body,
        )
        .await;
    assert_eq!(confirmed.status, 200, "{}", confirmed.body);
    assert_eq!(confirmed.json()["state"], "processing");
    app.wait_until(
        "the relayer tried and failed",
        &format!("(SELECT last_error IS NOT NULL FROM chain_submissions WHERE subject = '{id}')"),
    )
    .await;
    assert!(tx_hashes(&app, &id).await.is_empty());
    gate.open();
    app.wait_until(
        "the relayer sent it",
        &format!("(SELECT state FROM chain_submissions WHERE subject = '{id}') = 'sent'"),
    )
    .await;
    anvil.mine(2).await;
    app.wait_for_state(&id, "succeeded").await;
    assert_eq!(anvil.balance(PAYEE) - before, AMOUNT);
    assert_eq!(times_settled(&app, &id).await, (1, 1));
}

#[tokio::test]
async fn two_replicas_relay_and_settle_each_payment_exactly_once() {
    let anvil = Anvil::start().await;
    let settlement = anvil.settlement(2);
    let relaying = |s: &mut payments_api::config::Settings| {
        s.settlement = settlement.clone();
        s.settlement.relayer_private_key = Some(RELAYER_KEY.to_owned());
    };
    let first = TestApp::spawn_with(relaying).await;
    let second = TestApp::spawn_on(&first.database_url, relaying).await;
    let before = anvil.balance(PAYEE);
    let mut ids = Vec::new();
    for i in 0..6 {
        let app = if i % 2 == 0 { &first } else { &second };
        ids.push(create_and_confirm(app, &anvil).await);
    }
    first
        .wait_until(
            "every authorization was sent",
            "(SELECT bool_and(state <> 'queued') FROM chain_submissions)",
        )
        .await;
    anvil.mine(2).await;
    for id in &ids {
        first.wait_for_state(id, "succeeded").await;
        assert_eq!(times_settled(&first, id).await, (1, 1), "{id} settled once");
        assert_eq!(tx_hashes(&first, id).await.len(), 1, "{id} was sent once");
    }
    assert_eq!(anvil.balance(PAYEE) - before, 6 * AMOUNT);
    let holders: i64 = sqlx::query_scalar("SELECT count(DISTINCT holder) FROM relayer_leases")
        .fetch_one(&first.db)
        .await
        .unwrap();
    assert_eq!(holders, 1, "one relayer per key");
}

/// Transactions sent and waiting to be mined never keep new work waiting: with 50 of them stuck
/// (the chain mines nothing), the relayer still sends the next confirmed intent. Driven unit by
/// unit through the relayer's `run_once`, with no relayer inside the app.
#[tokio::test]
async fn sent_transactions_waiting_to_be_mined_never_keep_new_work_waiting() {
    use payments_api::workers::{Next, Worker};

    let anvil = Anvil::start().await;
    let (app, settlement) = app_on_a_stopped_chain(&anvil).await;
    let mut relayer = relayer_worker(&app, &settlement, RELAYER_KEY);
    let sent = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM chain_submissions WHERE state = 'sent'")
            .fetch_one(&app.db)
            .await
            .unwrap()
    };

    for _ in 0..50 {
        create_and_confirm(&app, &anvil).await;
    }
    let next = relayer.run_once().await.unwrap();
    assert_eq!(sent().await, 50);
    assert_eq!(
        next,
        Next::Again,
        "a full share that broadcast goes again at once"
    );

    let newest = create_and_confirm(&app, &anvil).await;
    let next = relayer.run_once().await.unwrap();
    assert_eq!(next, Next::Wait);
    assert_eq!(
        sent().await,
        51,
        "the new submission is sent beside 50 unmined ones"
    );
    let state: String =
        sqlx::query_scalar("SELECT state FROM chain_submissions WHERE subject = $1")
            .bind(&newest)
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(state, "sent");
}

/// Two relayer keys share the queued work, each with its own account nonces: the first key claims
/// its share of 50 and sends it, the second claims what is left, while the first key's
/// transactions sit unmined. Once blocks are mined again, every intent settles once. Driven unit
/// by unit through `run_once`, with no relayer inside the app.
#[tokio::test]
async fn two_relayer_keys_share_the_queue_each_with_its_own_nonces() {
    use payments_api::{rails::relayer::Key, workers::Worker};

    let anvil = Anvil::start().await;
    let (app, settlement) = app_on_a_stopped_chain(&anvil).await;
    let relayer = |key: &str| relayer_worker(&app, &settlement, key);
    let (first_key, second_key) = (RELAYER_KEY, SECOND_RELAYER_KEY);
    let (mut first, mut second) = (relayer(first_key), relayer(second_key));
    let mut ids = Vec::new();
    for _ in 0..55 {
        ids.push(create_and_confirm(&app, &anvil).await);
    }
    first.run_once().await.unwrap();
    second.run_once().await.unwrap();

    let nonces_of = |key: &str| {
        let address = Key::parse(key).unwrap().address().to_checksum(None);
        let db = app.db.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT tx_nonce FROM chain_submissions WHERE relayer = $1 AND state = 'sent' ORDER BY tx_nonce",
            )
            .bind(address)
            .fetch_all(&db)
            .await
            .unwrap()
        }
    };
    assert_eq!(nonces_of(first_key).await, (0..50).collect::<Vec<i64>>());
    assert_eq!(nonces_of(second_key).await, (0..5).collect::<Vec<i64>>());

    anvil.rpc("evm_setAutomine", json!([true])).await;
    anvil.mine(2).await;
    for id in &ids {
        app.wait_for_state(id, "succeeded").await;
        assert_eq!(times_settled(&app, id).await, (1, 1));
    }
}

/// A payer short of funds is not an error to retry every tick: the relayer reads the token's
/// revert as "not yet", keeps the submission queued with the reason and sends nothing; once the
/// payer's balance covers the amount, it is paid.
#[tokio::test]
async fn a_payer_short_of_funds_waits_queued_and_is_paid_once_funded() {
    use payments_api::rails::evm::devnet::ANVIL_KEYS;

    let anvil = Anvil::start().await;
    let settlement = anvil.settlement(1);
    let app = TestApp::spawn_with(move |s| {
        s.settlement = settlement;
        s.settlement.relayer_private_key = Some(RELAYER_KEY.to_owned());
    })
    .await;
    // Twice what the payer holds.
    let id = app
        .create_intent_id(&crate::helpers::body_with_amount("2000000000000"))
        .await;
    let signature = anvil.sign(PAYER_KEY, &app.typed_data(&id).await);
    assert_eq!(app.confirm(&id, &signature).await.status, 200);
    app.wait_until(
        "the relayer noted why it waits",
        &format!(
            "(SELECT last_error LIKE '%0xe450d38c%' AND state = 'queued' AND attempts = 0 AND cardinality(tx_hashes) = 0
                FROM chain_submissions WHERE subject = '{id}')"
        ),
    )
    .await;
    app.wait_until(
        "the intent says why it waits",
        &format!("(SELECT pending_reason = 'insufficient_balance' FROM payment_intents WHERE id = '{id}')"),
    )
    .await;
    let intent = app.get_intent(DEMO_TOKEN, &id).await.json();
    assert_eq!(intent["state"], "processing");
    assert_eq!(intent["pending_reason"], "insufficient_balance");
    // Tried again with backoff, not every tick, and announced once whatever the retries.
    app.wait_until(
        "the relayer tried again after its backoff",
        &format!("(SELECT held_attempts >= 2 FROM chain_submissions WHERE subject = '{id}')"),
    )
    .await;
    // Another holder sends the payer the rest.
    anvil.cast(&[
        "send",
        "--private-key",
        ANVIL_KEYS[2],
        crate::helpers::chain::TOKEN,
        "transfer(address,uint256)",
        crate::helpers::chain::PAYER,
        "1000000000000",
    ]);
    app.wait_for_state(&id, "succeeded").await;
    assert_eq!(times_settled(&app, &id).await, (1, 1));
    let events: Vec<String> = sqlx::query_scalar(
        "SELECT type FROM events WHERE subject_id = $1 ORDER BY subject_version",
    )
    .bind(&id)
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert_eq!(
        events,
        [
            "payment_intent.created",
            "payment_intent.processing",
            "payment_intent.payment_pending",
            "payment_intent.succeeded"
        ]
    );
    assert_eq!(
        app.get_intent(DEMO_TOKEN, &id).await.json()["pending_reason"],
        serde_json::Value::Null
    );
}

/// A confirm wakes the relayer when it commits: with a poll interval of a minute, the submission
/// is still sent within moments (a `NOTIFY` in the confirm's transaction, passed on by the
/// replica's listening connection).
#[tokio::test]
async fn a_confirm_wakes_the_relayer_instead_of_waiting_for_its_poll() {
    let anvil = Anvil::start().await;
    let mut settlement = anvil.settlement(1);
    settlement.poll_interval = Duration::from_secs(60);
    settlement.relayer_private_key = Some(RELAYER_KEY.to_owned());
    let app = TestApp::spawn_with(move |s| s.settlement = settlement).await;
    let database = app.database_url.rsplit('/').next().unwrap().to_owned();
    app.wait_until(
        "the replica listens for confirms",
        &format!(
            "EXISTS (SELECT FROM pg_stat_activity WHERE datname = '{database}' AND query LIKE 'LISTEN%')"
        ),
    )
    .await;

    let id = create_and_confirm(&app, &anvil).await;
    // Within 30 s, though the relayer's next poll is a minute after its first: only the
    // notification can have woken it.
    app.wait_until(
        "the confirmed submission is sent",
        &format!("(SELECT state FROM chain_submissions WHERE subject = '{id}') = 'sent'"),
    )
    .await;
}

/// A broadcast lost between others leaves a gap in the relayer key's nonces, which no node mines
/// past. When nothing new would take the gap's nonce (the lost one's intent moved on), the relayer
/// fills it with a transaction of nothing to itself, and the transactions above it are mined.
/// The loss is made real: the transaction is dropped from anvil's pool.
#[tokio::test]
async fn a_nonce_gap_below_sent_transactions_is_filled() {
    use payments_api::workers::Worker;

    let anvil = Anvil::start().await;
    let (app, settlement) = app_on_a_stopped_chain(&anvil).await;
    let mut relayer = relayer_worker(&app, &settlement, RELAYER_KEY);
    let ids = [
        create_and_confirm(&app, &anvil).await,
        create_and_confirm(&app, &anvil).await,
        create_and_confirm(&app, &anvil).await,
    ];
    relayer.run_once().await.unwrap();
    let (lost, nonce): (Vec<String>, i64) =
        sqlx::query_as("SELECT tx_hashes, tx_nonce FROM chain_submissions WHERE subject = $1")
            .bind(&ids[0])
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(nonce, 0);
    anvil.rpc("anvil_dropTransaction", json!([lost[0]])).await;
    // Its intent moved on (canceled by its merchant's chain, say): nothing new takes nonce 0.
    sqlx::query("UPDATE payment_intents SET state = 'failed', failure_reason = 'authorization_canceled', version = version + 1 WHERE id = $1")
        .bind(&ids[0])
        .execute(&app.db)
        .await
        .unwrap();
    relayer.run_once().await.unwrap();
    let relayer_address = anvil.cast(&["wallet", "address", "--private-key", RELAYER_KEY]);
    let pending = anvil
        .rpc(
            "eth_getTransactionCount",
            json!([relayer_address, "pending"]),
        )
        .await;
    assert_ne!(pending, "0x0", "the relayer took nonce 0 again");

    // Blocks again, the relayer driven round by round: what it sent above the gap is mined (or,
    // if the node dropped it with the gap, sent again at its own nonce), once.
    anvil.rpc("evm_setAutomine", json!([true])).await;
    let settled = |id: &String| {
        let db = app.db.clone();
        let id = id.clone();
        async move {
            sqlx::query_scalar::<_, String>("SELECT state FROM payment_intents WHERE id = $1")
                .bind(id)
                .fetch_one(&db)
                .await
                .unwrap()
                == "succeeded"
        }
    };
    for _ in 0..20 {
        if settled(&ids[1]).await && settled(&ids[2]).await {
            break;
        }
        anvil.mine(1).await;
        relayer.run_once().await.unwrap();
    }
    for id in &ids[1..] {
        app.wait_for_state(id, "succeeded").await;
        assert_eq!(times_settled(&app, id).await, (1, 1), "{id} settled once");
    }
}
