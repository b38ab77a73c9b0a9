//! Deposit addresses (`docs/settlement.md`, "Deposit addresses"). On chain
//! (`contracts/src/DepositForwarder.sol`, `rails::evm::deposit`): the address we compute is the one the
//! factory computes and deploys to, and whatever is sent there reaches only its merchant, in one
//! transaction that deploys and flushes, then by plain flushes. Through the API: an intent paid by
//! plain `cast send` transfers, in parts, beyond its amount, late, after a cancel, in another
//! token, and in tokens that misbehave (one whose `transfer` returns nothing, as Tether's, one
//! that keeps a fee, and USDC); each is booked, counted or not, and swept to the merchant.

use payments_api::rails::evm::deposit::{devnet_factory, forwarder_address, intent_key};
use serde_json::{Value, json};

use crate::helpers::{
    DEMO_TOKEN, TestApp,
    chain::{
        Anvil, PAYEE, PAYEE_KEY, PAYER, PAYER_KEY, RELAYER_KEY, TOKEN, USDC, app_on, app_on_with,
    },
};

#[tokio::test]
async fn a_deposit_address_is_the_factorys_and_what_reaches_it_goes_only_to_its_merchant() {
    let anvil = Anvil::start().await;
    let factory = devnet_factory().to_string();
    assert_ne!(
        anvil.cast(&["code", &factory]),
        "0x",
        "the devnet has the factory"
    );
    let no_return = anvil.deploy_token(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/contracts/build/NoReturnToken.json"
    )));
    let fee = anvil.deploy_token(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/contracts/build/FeeToken.json"
    )));
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
        anvil.send(
            PAYER_KEY,
            token,
            "transfer(address,uint256)",
            &[&address, "1000000"],
        );
        let held = anvil.balance_of(token, &address);
        assert_eq!(held, arrives(token, 1_000_000), "{token}: what arrived");
        let before = anvil.balance_of(token, PAYEE);
        anvil.send(
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
        anvil.send(
            PAYER_KEY,
            token,
            "transfer(address,uint256)",
            &[&address, "500000"],
        );
        let held = anvil.balance_of(token, &address);
        let before = anvil.balance_of(token, PAYEE);
        anvil.send(PAYER_KEY, &address, "flush(address)", &[token]);
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
    anvil.send(
        PAYER_KEY,
        &no_return,
        "transfer(address,uint256)",
        &[&address, "7"],
    );
    let before = anvil.balance_of(&no_return, PAYEE);
    anvil.send(RELAYER_KEY, &address, "flush(address)", &[&no_return]);
    assert_eq!(anvil.balance_of(&no_return, PAYEE) - before, 7);
}

/// A deposit intent of `amount` of `token`, payable for `expires_in` seconds; the intent as made.
async fn create_deposit_intent(app: &TestApp, token: &str, amount: &str, expires_in: u32) -> Value {
    let body = json!({
        "chain": "evm:31337",
        "token": token,
        "merchant": PAYEE,
        "amount": amount,
        "payment_method": "deposit_address",
        "expires_in_seconds": expires_in,
    });
    let created = app.create_intent(DEMO_TOKEN, None, &body.to_string()).await;
    assert_eq!(created.status, 201, "{}", created.body);
    created.json()
}

/// A plain transfer from the payer, as any wallet sends one.
fn pay(anvil: &Anvil, token: &str, to: &str, amount: &str) {
    anvil.send(PAYER_KEY, token, "transfer(address,uint256)", &[to, amount]);
}

/// The sum of the ledger's postings to `account` in `token`.
async fn booked(app: &TestApp, account: &str, token: &str) -> String {
    sqlx::query_scalar(
        "SELECT COALESCE(sum(amount), 0)::text FROM ledger_postings WHERE account = $1 AND token = $2",
    )
    .bind(account)
    .bind(token)
    .fetch_one(&app.db)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_deposit_intent_is_paid_in_parts_by_plain_transfers_and_swept_to_its_merchant() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 2, true).await;
    let intent = create_deposit_intent(&app, TOKEN, "1000000", 900).await;
    let (id, address) = (
        intent["id"].as_str().unwrap(),
        intent["deposit_address"].as_str().unwrap(),
    );
    assert_eq!(intent["payment_method"], "deposit_address");
    assert_eq!(intent["payer"], Value::Null);
    assert_eq!(intent["amount_received"], "0");
    let expected = forwarder_address(
        devnet_factory(),
        PAYEE.parse().unwrap(),
        TOKEN.parse().unwrap(),
        intent_key(id),
    );
    assert_eq!(address, expected.to_string(), "the forwarder's address");
    assert_eq!(anvil.cast(&["code", address]), "0x", "nothing deployed");
    let before = anvil.balance(PAYEE);

    // Part of it: still open, and the merchant hears of it.
    pay(&anvil, TOKEN, address, "400000");
    anvil.mine(2).await;
    app.wait_until(
        "the first part is counted",
        &format!("(SELECT amount_received FROM payment_intents WHERE id = '{id}') = 400000"),
    )
    .await;
    assert_eq!(app.state_of(id).await, "created");
    // The rest and more: paid, the excess recorded.
    pay(&anvil, TOKEN, address, "700000");
    anvil.mine(2).await;
    app.wait_for_state(id, "succeeded").await;
    let paid = app.get_intent(DEMO_TOKEN, id).await.json();
    assert_eq!(paid["amount_received"], "1100000");
    assert_eq!(paid["amount_overpaid"], "100000");
    assert!(paid["settlement"]["transaction_hash"].is_string());
    assert_eq!(
        app.event_types(id).await,
        [
            "payment_intent.created",
            "payment_intent.partially_paid",
            "payment_intent.succeeded"
        ]
    );

    // Swept: the forwarder is deployed and everything reached the merchant, booked twice over.
    app.mine_until(
        &anvil,
        "the sweeps are confirmed and booked",
        &format!("(SELECT COALESCE(sum(amount), 0) FROM ledger_postings WHERE account = 'merchant:merchant_demo' AND token = '{TOKEN}') = 1100000"),
    )
    .await;
    assert_eq!(anvil.balance(PAYEE) - before, 1_100_000);
    assert_eq!(anvil.balance_of(TOKEN, address), 0);
    assert_ne!(
        anvil.cast(&["code", address]),
        "0x",
        "deployed by its sweep"
    );
    assert_eq!(
        booked(&app, &format!("deposit:{address}"), TOKEN).await,
        "0"
    );
    assert_eq!(
        booked(&app, &format!("payer:{PAYER}"), TOKEN).await,
        "-1100000"
    );
    let kinds: Vec<String> =
        sqlx::query_scalar("SELECT kind FROM ledger_entries WHERE intent_id = $1 ORDER BY id")
            .bind(id)
            .fetch_all(&app.db)
            .await
            .unwrap();
    assert_eq!(kinds.iter().filter(|k| *k == "deposit").count(), 2);
    assert!(kinds.iter().any(|k| k == "sweep"), "{kinds:?}");
    // Every submission ended; none is left to send.
    app.mine_until(
        &anvil,
        "the sweeps are done",
        &format!("NOT EXISTS (SELECT 1 FROM chain_submissions WHERE subject = '{id}' AND state <> 'done')"),
    )
    .await;
}

#[tokio::test]
async fn money_sent_late_after_a_cancel_or_in_another_token_is_recorded_not_counted_and_swept() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let expiring = create_deposit_intent(&app, TOKEN, "1000", 60).await;
    let canceled = create_deposit_intent(&app, TOKEN, "1000", 900).await;
    let wrong_token = create_deposit_intent(&app, TOKEN, "1000", 900).await;
    // A token no intent uses, whose `transfer` returns nothing (as Tether's).
    let stray = anvil.deploy_token(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/contracts/build/NoReturnToken.json"
    )));
    let id = |intent: &Value| intent["id"].as_str().unwrap().to_owned();
    let address = |intent: &Value| intent["deposit_address"].as_str().unwrap().to_owned();
    assert_eq!(
        app.cancel(DEMO_TOKEN, &id(&canceled), None).await.status,
        200
    );
    // The chain's time passes the expiry before anything is paid.
    let expires_at = time::OffsetDateTime::parse(
        expiring["expires_at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    anvil
        .rpc(
            "evm_setNextBlockTimestamp",
            json!([expires_at.unix_timestamp() + 10]),
        )
        .await;
    pay(&anvil, TOKEN, &address(&expiring), "1000");
    pay(&anvil, TOKEN, &address(&canceled), "1000");
    pay(&anvil, &stray, &address(&wrong_token), "1000");
    anvil.mine(1).await;
    app.wait_until(
        "all three are booked",
        "(SELECT count(*) FROM ledger_entries WHERE kind = 'deposit') = 3",
    )
    .await;
    app.wait_until(
        "the late payments are announced",
        "(SELECT count(*) FROM events WHERE type IN ('payment_intent.paid_after_expiry', 'payment_intent.paid_after_cancel')) = 2",
    )
    .await;
    let late = app.get_intent(DEMO_TOKEN, &id(&expiring)).await.json();
    assert_eq!(
        (
            &late["state"],
            &late["cancellation_reason"],
            &late["amount_received"]
        ),
        (&json!("canceled"), &json!("expired"), &json!("1000"))
    );
    assert_eq!(
        app.event_types(&id(&expiring)).await,
        [
            "payment_intent.created",
            "payment_intent.canceled",
            "payment_intent.paid_after_expiry"
        ]
    );
    assert_eq!(
        app.event_types(&id(&canceled)).await,
        [
            "payment_intent.created",
            "payment_intent.canceled",
            "payment_intent.paid_after_cancel"
        ]
    );
    // Any other token is booked, swept and listed on the intent, never counted toward it.
    app.wait_until(
        "the stray token is listed",
        "(SELECT count(*) FROM events WHERE type = 'payment_intent.duplicate_payment') = 1",
    )
    .await;
    let other = app.get_intent(DEMO_TOKEN, &id(&wrong_token)).await.json();
    assert_eq!(
        (&other["state"], &other["amount_received"]),
        (&json!("created"), &json!("0"))
    );
    let listed = &other["duplicate_payments"][0];
    assert_eq!(
        (
            &listed["token"],
            &listed["amount"],
            &listed["from"],
            &listed["deposit_address"],
            &listed["reason"]
        ),
        (
            &json!(stray),
            &json!("1000"),
            &json!(PAYER),
            &other["deposit_address"],
            &json!("unaccepted_token")
        )
    );
    assert_eq!(
        app.event_types(&id(&wrong_token)).await,
        ["payment_intent.created", "payment_intent.duplicate_payment"]
    );
    // Everything reaches the merchant.
    app.mine_until(
        &anvil,
        "every deposit address is swept and booked",
        "NOT EXISTS (SELECT 1 FROM ledger_postings WHERE account LIKE 'deposit:%' GROUP BY account, token HAVING sum(amount) <> 0)
         AND (SELECT count(*) FROM ledger_entries WHERE kind = 'sweep') = 3",
    )
    .await;
    for intent in [&expiring, &canceled] {
        assert_eq!(anvil.balance_of(TOKEN, &address(intent)), 0);
    }
    assert_eq!(anvil.balance_of(&stray, &address(&wrong_token)), 0);
    assert_eq!(anvil.balance_of(&stray, PAYEE), 1000);

    // The ledger agrees with the chain: three transfers in, three sweeps out, nothing held.
    let (agreed, output) = crate::settlement::reconcile(&app, &anvil);
    assert!(agreed, "{output}");
    assert!(
        output.contains("6 deposit-address transfers booked, 6 on chain"),
        "{output}"
    );
    // A booking with no transfer behind it is named, and so is the balance it claims.
    sqlx::query(
        "WITH e AS (INSERT INTO ledger_entries (kind, merchant_id, intent_id, chain, transaction_hash, log_index)
                    VALUES ('deposit', 'merchant_demo', $1, 'evm:31337', '0xfeed', 0) RETURNING id)
         INSERT INTO ledger_postings SELECT id, a, 'evm:31337', $3, n FROM e,
                (VALUES ('deposit:' || $2, 7::numeric), ('payer:0xP', -7::numeric)) AS s (a, n)",
    )
    .bind(id(&canceled))
    .bind(address(&canceled))
    .bind(TOKEN)
    .execute(&app.db)
    .await
    .unwrap();
    let (agreed, output) = crate::settlement::reconcile(&app, &anvil);
    assert!(!agreed, "{output}");
    assert!(
        output.contains(&format!(
            "in the ledger, not on chain: 7 of {TOKEN} on deposit address {} in 0xfeed",
            address(&canceled)
        )),
        "{output}"
    );
    assert!(
        output.contains(&format!(
            "deposit address {} holds 0 of {TOKEN} on chain, the ledger says 7",
            address(&canceled)
        )),
        "{output}"
    );
}

#[tokio::test]
async fn tokens_that_misbehave_pay_deposit_intents_with_what_arrived() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let no_return = anvil.deploy_token(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/contracts/build/NoReturnToken.json"
    )));
    let fee = anvil.deploy_token(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/contracts/build/FeeToken.json"
    )));
    let tether_like = create_deposit_intent(&app, &no_return, "1000000", 900).await;
    let with_fee = create_deposit_intent(&app, &fee, "1000000", 900).await;
    let usdc = create_deposit_intent(&app, USDC, "1000000", 900).await;
    let address = |intent: &Value| intent["deposit_address"].as_str().unwrap().to_owned();
    let id = |intent: &Value| intent["id"].as_str().unwrap().to_owned();
    pay(&anvil, &no_return, &address(&tether_like), "1000000");
    pay(&anvil, USDC, &address(&usdc), "1000000");
    // The payer sends the amount; 1% stays with the token, so less arrives: not paid yet.
    pay(&anvil, &fee, &address(&with_fee), "1000000");
    anvil.mine(1).await;
    app.wait_for_state(&id(&tether_like), "succeeded").await;
    app.wait_for_state(&id(&usdc), "succeeded").await;
    app.wait_until(
        "the fee token's deposit is counted",
        &format!(
            "(SELECT amount_received FROM payment_intents WHERE id = '{}') = 990000",
            id(&with_fee)
        ),
    )
    .await;
    assert_eq!(app.state_of(&id(&with_fee)).await, "created");
    // What is missing, plus what the token takes of it, completes it.
    pay(&anvil, &fee, &address(&with_fee), "10101");
    anvil.mine(1).await;
    app.wait_for_state(&id(&with_fee), "succeeded").await;
    assert_eq!(
        app.get_intent(DEMO_TOKEN, &id(&with_fee)).await.json()["amount_received"],
        "1000000"
    );
    // Swept, each token by its own rules: the fee token keeps 1% of the sweep as well.
    app.mine_until(
        &anvil,
        "all three are swept and booked",
        "NOT EXISTS (SELECT 1 FROM ledger_postings WHERE account LIKE 'deposit:%' GROUP BY account, token HAVING sum(amount) <> 0)
         AND (SELECT count(DISTINCT intent_id) FROM ledger_entries WHERE kind = 'sweep') = 3",
    )
    .await;
    assert_eq!(anvil.balance_of(&no_return, PAYEE), 1_000_000);
    assert_eq!(anvil.balance_of(&fee, PAYEE), 990_000);
    assert_eq!(booked(&app, "merchant:merchant_demo", &fee).await, "990000");
    assert_eq!(
        booked(
            &app,
            "token_fee:0x0000000000000000000000000000000000000000",
            &fee
        )
        .await,
        "10000"
    );
}

#[tokio::test]
async fn a_deposit_intent_names_no_payer_and_has_no_authorization_or_refund() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let with_payer = json!({
        "chain": "evm:31337", "token": TOKEN, "merchant": PAYEE, "amount": "1",
        "payment_method": "deposit_address", "payer": PAYER,
    });
    let refused = app
        .create_intent(DEMO_TOKEN, None, &with_payer.to_string())
        .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    let unknown = json!({
        "chain": "evm:31337", "token": TOKEN, "merchant": PAYEE, "amount": "1",
        "payment_method": "wire",
    });
    assert_eq!(
        app.create_intent(DEMO_TOKEN, None, &unknown.to_string())
            .await
            .status,
        400
    );

    let intent = create_deposit_intent(&app, TOKEN, "1000", 900).await;
    let id = intent["id"].as_str().unwrap();
    let authorization = app.authorization(id).await;
    assert_eq!(authorization.status, 400, "{}", authorization.body);
    pay(
        &anvil,
        TOKEN,
        intent["deposit_address"].as_str().unwrap(),
        "1000",
    );
    anvil.mine(1).await;
    app.wait_for_state(id, "succeeded").await;
    let refund = app
        .post_as(
            DEMO_TOKEN,
            &format!("/v1/payment_intents/{id}/refunds"),
            Some("refund-deposit"),
            "{}",
        )
        .await;
    assert_eq!(refund.status, 400, "{}", refund.body);

    // A chain without a factory offers no deposit addresses.
    let plain = app_on_with(&anvil, 1, true, |s| {
        s.settlement.chains[0].deposit_factory = None
    })
    .await;
    let body = json!({
        "chain": "evm:31337", "token": TOKEN, "merchant": PAYEE, "amount": "1",
        "payment_method": "deposit_address",
    });
    let refused = plain
        .create_intent(DEMO_TOKEN, None, &body.to_string())
        .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
}

#[tokio::test]
async fn an_underpayment_within_the_tolerance_pays_and_one_beyond_it_does_not() {
    let anvil = Anvil::start().await;
    let app = app_on_with(&anvil, 1, true, |s| {
        s.settlement.underpayment_tolerance_bps = 100
    })
    .await;
    let within = create_deposit_intent(&app, TOKEN, "100000", 900).await;
    let beyond = create_deposit_intent(&app, TOKEN, "100000", 900).await;
    pay(
        &anvil,
        TOKEN,
        within["deposit_address"].as_str().unwrap(),
        "99000",
    );
    pay(
        &anvil,
        TOKEN,
        beyond["deposit_address"].as_str().unwrap(),
        "98999",
    );
    anvil.mine(1).await;
    let (within, beyond) = (
        within["id"].as_str().unwrap(),
        beyond["id"].as_str().unwrap(),
    );
    app.wait_for_state(within, "succeeded").await;
    app.wait_until(
        "the short one is counted",
        &format!("(SELECT amount_received FROM payment_intents WHERE id = '{beyond}') = 98999"),
    )
    .await;
    assert_eq!(app.state_of(beyond).await, "created");
    let paid = app.get_intent(DEMO_TOKEN, within).await.json();
    assert_eq!(
        (&paid["amount_received"], &paid["amount_overpaid"]),
        (&json!("99000"), &json!("0"))
    );
}

/// A token without EIP-3009 sent to a deposit address by mistake is paid back by the merchant's
/// own transfer (`docs/refunds.md`, "Refunds by transfer"): nothing to sign, and the watch matches
/// the transfer of exactly the refund's amount from the merchant's address to its sender.
#[tokio::test]
async fn a_stray_token_without_eip3009_is_refunded_by_the_merchants_own_transfer() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let intent = create_deposit_intent(&app, TOKEN, "1000", 900).await;
    let (id, address) = (
        intent["id"].as_str().unwrap(),
        intent["deposit_address"].as_str().unwrap(),
    );
    let stray = anvil.deploy_token(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/contracts/build/NoReturnToken.json"
    )));
    pay(&anvil, &stray, address, "1000");
    app.mine_until(
        &anvil,
        "the stray token is swept to the merchant",
        "(SELECT count(*) FROM ledger_entries WHERE kind = 'sweep') = 1",
    )
    .await;
    let listed = app.get_intent(DEMO_TOKEN, id).await.json()["duplicate_payments"][0].clone();
    assert_eq!(listed["reason"], "unaccepted_token", "{listed}");

    let refunds = format!("/v1/payment_intents/{id}/refunds");
    let body = json!({"duplicate_payment": listed["id"]}).to_string();
    let created = app
        .post_as(DEMO_TOKEN, &refunds, Some("stray-refund"), &body)
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let refund = created.json();
    assert_eq!(
        (
            &refund["payment_method"],
            &refund["state"],
            &refund["token"],
            &refund["amount"],
            &refund["merchant"],
            &refund["payer"]
        ),
        (
            &json!("transfer"),
            &json!("created"),
            &json!(stray),
            &json!("1000"),
            &json!(PAYEE),
            &json!(PAYER)
        )
    );
    let refund_id = refund["id"].as_str().unwrap();
    // Nothing to sign or confirm: 400, and the refund is as it was.
    let document = app
        .get_as(
            DEMO_TOKEN,
            &format!("/v1/refunds/{refund_id}/authorization"),
        )
        .await;
    assert_eq!(document.status, 400, "{}", document.body);
    let confirm = app
        .post_as(
            DEMO_TOKEN,
            &format!("/v1/refunds/{refund_id}/confirm"),
            Some("stray-refund-confirm"),
            &json!({"signature": format!("0x{}", "11".repeat(65))}).to_string(),
        )
        .await;
    assert_eq!(confirm.status, 400, "{}", confirm.body);

    // The merchant sends it back: a transfer of another amount pays nothing, the right one pays
    // the refund, once.
    let transfer = |amount: &str| {
        anvil.send(
            PAYEE_KEY,
            &stray,
            "transfer(address,uint256)",
            &[PAYER, amount],
        )
    };
    // The merchant holds more of it than the refund, as a shop would.
    pay(&anvil, &stray, PAYEE, "5000");
    let payer_before = anvil.balance_of(&stray, PAYER);
    transfer("999");
    transfer("1000");
    app.mine_until(
        &anvil,
        "the refund is paid by the merchant's transfer",
        &format!("(SELECT state FROM refunds WHERE id = '{refund_id}') = 'succeeded'"),
    )
    .await;
    assert_eq!(anvil.balance_of(&stray, PAYER) - payer_before, 1999);
    let paid = app
        .get_as(DEMO_TOKEN, &format!("/v1/refunds/{refund_id}"))
        .await
        .json();
    assert!(paid["settlement"]["transaction_hash"].is_string(), "{paid}");
    assert_eq!(booked(&app, &format!("payer:{PAYER}"), &stray).await, "0");
    let intent = app.get_intent(DEMO_TOKEN, id).await.json();
    assert_eq!(intent["amount_refunded"], "0");
    assert_eq!(
        app.event_types(refund_id).await,
        ["refund.created", "refund.succeeded"]
    );
    // A second transfer of the same amount pays nothing more, once the app has read past it.
    transfer("1000");
    app.mine_until_followed(&anvil).await;
    let refund_entries: i64 =
        sqlx::query_scalar("SELECT count(*) FROM ledger_entries WHERE kind = 'refund'")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(refund_entries, 1, "one transfer booked as the refund");
    let (agreed, output) = crate::settlement::reconcile(&app, &anvil);
    assert!(agreed, "{output}");
    assert!(output.contains("1 refunded on chain"), "{output}");
}

/// An ERC-721's `Transfer` has an ERC-20's topic 0, with the token id as a fourth topic and no data
/// (`docs/settlement.md`, "Deposit intents"): an NFT sent to a deposit address is passed over by
/// the watch that reads any contract's transfers, neither listed, followed, nor booked.
#[tokio::test]
async fn an_nft_sent_to_a_deposit_address_is_passed_over() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let intent = create_deposit_intent(&app, TOKEN, "1000", 900).await;
    let (id, address) = (
        intent["id"].as_str().unwrap(),
        intent["deposit_address"].as_str().unwrap(),
    );
    let nft = anvil.deploy_token(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/contracts/build/TestNFT.json"
    )));
    // `deploy_token` gives PAYER the token numbered 1000000000000.
    anvil.send(
        PAYER_KEY,
        &nft,
        "transferFrom(address,address,uint256)",
        &[PAYER, address, "1000000000000"],
    );
    assert_eq!(
        anvil.cast(&["call", &nft, "ownerOf(uint256)(address)", "1000000000000"]),
        address
    );
    app.mine_until_followed(&anvil).await;
    let intent = app.get_intent(DEMO_TOKEN, id).await.json();
    assert_eq!(intent["duplicate_payments"], json!([]), "{intent}");
    assert_eq!(intent["state"], "created");
    let seen: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM deposit_tokens WHERE token = $1)
              + (SELECT count(*) FROM ledger_postings WHERE token = $1)",
    )
    .bind(&nft)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(seen, 0, "the NFT is neither followed nor booked");
}
