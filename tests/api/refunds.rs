//! Refunds against a real anvil (`docs/refunds.md`): the merchant's address signs an EIP-3009
//! authorization back to the payer (signed by cast here), confirmed, relayed and seen on chain
//! like a payment, booked by a reversing ledger entry; the sum of refunds never exceeds the
//! payment, under racing requests too.

use serde_json::{Value, json};

use crate::helpers::{
    DEMO_TOKEN, OTHER_TOKEN, SEED_BODY, TestApp,
    chain::{Anvil, PAYEE, PAYEE_KEY, PAYER, PAYER_KEY, app_on},
};

/// An intent of the seed's 100000000 paid by its payer on chain; its id.
async fn paid_intent(app: &TestApp, anvil: &Anvil) -> String {
    let id = app.create_intent_id(SEED_BODY).await;
    let typed = app.typed_data(&id).await;
    anvil.submit_as_payer(&typed, &anvil.sign(PAYER_KEY, &typed));
    app.wait_for_state(&id, "succeeded").await;
    id
}

/// POST …/refunds with `body` under `key`.
async fn refund(app: &TestApp, intent: &str, key: &str, body: &Value) -> crate::helpers::Answer {
    let path = format!("/v1/payment_intents/{intent}/refunds");
    app.post_as(DEMO_TOKEN, &path, Some(key), &body.to_string())
        .await
}

async fn refund_typed_data(app: &TestApp, refund: &str) -> Value {
    let answer = app
        .get_as(DEMO_TOKEN, &format!("/v1/refunds/{refund}/authorization"))
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.json()["typed_data"].clone()
}

async fn confirm_refund(app: &TestApp, refund: &str, signature: &str) -> crate::helpers::Answer {
    let body = json!({ "signature": signature }).to_string();
    let path = format!("/v1/refunds/{refund}/confirm");
    app.post_as(DEMO_TOKEN, &path, Some(&format!("confirm-{refund}")), &body)
        .await
}

#[tokio::test]
async fn a_paid_intent_is_refunded_in_part_then_in_full_by_the_merchants_signature() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let intent = paid_intent(&app, &anvil).await;
    let payer_before = anvil.balance(PAYER);

    let body = json!({"amount": "40000000", "reason": "requested_by_customer"});
    let created = refund(&app, &intent, "refund-1", &body).await;
    assert_eq!(created.status, 201, "{}", created.body);
    // The same key replays the same answer, byte for byte; one refund exists.
    let again = refund(&app, &intent, "refund-1", &body).await;
    assert_eq!((again.status, &again.body), (201, &created.body));
    let first = created.json();
    let id = first["id"].as_str().unwrap().to_owned();
    assert_eq!(
        created.header("location"),
        Some(format!("/v1/refunds/{id}").as_str())
    );
    assert_eq!(
        (
            &first["state"],
            &first["amount"],
            &first["merchant"],
            &first["payer"]
        ),
        (
            &json!("created"),
            &json!("40000000"),
            &json!(PAYEE),
            &json!(PAYER)
        )
    );

    // The merchant's address signs a transfer back to the payer, under the refund's own nonce.
    let typed = refund_typed_data(&app, &id).await;
    assert_eq!(typed["message"]["from"], PAYEE);
    assert_eq!(typed["message"]["to"], PAYER);
    assert_eq!(typed["message"]["value"], "40000000");
    let nonce = anvil.cast(&["keccak", &format!("payments-api:refund:{id}")]);
    assert_eq!(typed["message"]["nonce"], nonce);
    // Signed by the payer instead: refused, naming the signature, nothing changes.
    let by_payer = json!({ "signature": anvil.sign(PAYER_KEY, &typed) }).to_string();
    let path = format!("/v1/refunds/{id}/confirm");
    let wrong = app
        .post_as(DEMO_TOKEN, &path, Some("signed-by-the-payer"), &by_payer)
        .await;
    assert_eq!(wrong.status, 400, "{}", wrong.body);
    assert!(
        wrong.json()["detail"]
            .as_str()
            .unwrap()
            .starts_with("signature:")
    );
    let confirmed = confirm_refund(&app, &id, &anvil.sign(PAYEE_KEY, &typed)).await;
    assert_eq!(confirmed.status, 200, "{}", confirmed.body);
    assert_eq!(confirmed.json()["state"], "processing");
    app.wait_for_refund(&id, "succeeded").await;
    assert_eq!(anvil.balance(PAYER) - payer_before, 40_000_000);
    let shown = app
        .get_as(DEMO_TOKEN, &format!("/v1/refunds/{id}"))
        .await
        .json();
    assert_eq!(shown["state"], "succeeded");
    assert!(shown["settlement"]["transaction_hash"].is_string());
    assert_eq!(
        app.event_types(&id).await,
        ["refund.created", "refund.processing", "refund.succeeded"]
    );
    let paid_back = app.get_intent(DEMO_TOKEN, &intent).await.json();
    assert_eq!(paid_back["amount_refunded"], "40000000");
    assert_eq!(paid_back["state"], "succeeded");

    // Without an amount: all that is left. Then nothing is left.
    let rest = refund(&app, &intent, "refund-2", &json!({})).await;
    assert_eq!(rest.status, 201, "{}", rest.body);
    let rest_id = rest.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(rest.json()["amount"], "60000000");
    let more = refund(&app, &intent, "refund-3", &json!({"amount": "1"})).await;
    assert_eq!(more.status, 409, "{}", more.body);
    assert_eq!(more.json()["error"], "refund_exceeds_payment");
    // The merchant submits the second one itself: the chain is the source of truth.
    let typed = refund_typed_data(&app, &rest_id).await;
    anvil.submit_as(PAYEE_KEY, &typed, &anvil.sign(PAYEE_KEY, &typed));
    app.wait_for_refund(&rest_id, "succeeded").await;
    assert_eq!(anvil.balance(PAYER) - payer_before, 100_000_000);
    let paid_back = app.get_intent(DEMO_TOKEN, &intent).await.json();
    assert_eq!(paid_back["amount_refunded"], "100000000");

    // The ledger: two reversing entries; the merchant's balance is back to zero.
    let entries: Vec<(String, String)> = sqlx::query_as(
        "SELECT e.kind, p.amount::text FROM ledger_entries e JOIN ledger_postings p ON p.entry_id = e.id
          WHERE p.account = 'merchant:merchant_demo' ORDER BY e.id",
    )
    .fetch_all(&app.db)
    .await
    .unwrap();
    let expected = [
        ("payment", "100000000"),
        ("refund", "-40000000"),
        ("refund", "-60000000"),
    ];
    assert_eq!(entries, expected.map(|(k, a)| (k.to_owned(), a.to_owned())));
    let balances = app.get_as(DEMO_TOKEN, "/v1/balances").await.json();
    assert_eq!(balances["data"][0]["amount"], "0");

    // Listed by intent, newest first; another merchant sees none of it.
    let listed = app
        .get_as(DEMO_TOKEN, &format!("/v1/refunds?payment_intent={intent}"))
        .await
        .json();
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [rest_id.as_str(), id.as_str()]);
    let foreign = app.get_as(OTHER_TOKEN, &format!("/v1/refunds/{id}")).await;
    assert_eq!(foreign.status, 404);
    let other_list = app.get_as(OTHER_TOKEN, "/v1/refunds").await.json();
    assert_eq!(other_list["data"], json!([]));

    let (agreed, output) = crate::settlement::reconcile(&app, &anvil);
    assert!(agreed, "{output}");
    assert!(
        output.contains("1 payments booked, 1 paid on chain")
            && output.contains("2 refunds booked, 2 refunded on chain"),
        "{output}"
    );
}

#[tokio::test]
async fn racing_refunds_never_exceed_what_was_paid() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, false).await;
    let intent = paid_intent(&app, &anvil).await;
    // Ten refunds of 30000000 at once against a payment of 100000000: three fit.
    let racers = (0..10).map(|i| {
        let (app, intent) = (&app, &intent);
        async move {
            refund(
                app,
                intent,
                &format!("race-{i}"),
                &json!({"amount": "30000000"}),
            )
            .await
        }
    });
    let answers: Vec<(u16, String)> = futures::future::join_all(racers)
        .await
        .into_iter()
        .map(|a| (a.status, a.body))
        .collect();
    let created = answers.iter().filter(|(status, _)| *status == 201).count();
    assert_eq!(created, 3, "{answers:?}");
    assert!(
        answers.iter().all(|(status, body)| *status == 201
            || (*status == 409 && body.contains(r#""error":"refund_exceeds_payment""#))),
        "{answers:?}"
    );
    let reserved: String = sqlx::query_scalar("SELECT sum(amount)::text FROM refunds")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(reserved, "90000000");
}

#[tokio::test]
async fn only_a_paid_intent_can_be_refunded_and_bad_requests_say_why() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, false).await;
    let unpaid = app.create_intent_id(SEED_BODY).await;
    let answer = refund(&app, &unpaid, "unpaid", &json!({})).await;
    assert_eq!(answer.status, 409, "{}", answer.body);
    assert_eq!(answer.json()["error"], "invalid_state_transition");
    let missing = refund(&app, "pi_000000000000000000000000", "missing", &json!({})).await;
    assert_eq!(missing.status, 404, "{}", missing.body);
    let intent = paid_intent(&app, &anvil).await;
    for (body, field) in [
        (json!({"amount": 5}), "amount"),
        (json!({"amount": "0"}), "amount"),
        (json!({"reason": "because"}), "reason"),
        (json!({"expires_in_seconds": 10}), "expires_in_seconds"),
        (json!({"amont": "1"}), "amont"),
    ] {
        let answer = refund(&app, &intent, &format!("bad-{field}-{body}"), &body).await;
        assert_eq!(answer.status, 400, "{body}: {}", answer.body);
        assert!(answer.body.contains(field), "{body}: {}", answer.body);
    }
    let too_much = refund(&app, &intent, "too-much", &json!({"amount": "100000001"})).await;
    assert_eq!(too_much.status, 409, "{}", too_much.body);
    assert_eq!(too_much.json()["error"], "refund_exceeds_payment");
    // Another merchant cannot refund this merchant's intent.
    let path = format!("/v1/payment_intents/{intent}/refunds");
    let foreign = app.post_as(OTHER_TOKEN, &path, Some("foreign"), "{}").await;
    assert_eq!(foreign.status, 404, "{}", foreign.body);
    assert_eq!(
        app.get_as(DEMO_TOKEN, "/v1/refunds/re_nope").await.status,
        404
    );
    let bad_filter = app
        .get_as(DEMO_TOKEN, "/v1/refunds?payment_intent=nope")
        .await;
    assert_eq!(bad_filter.status, 400, "{}", bad_filter.body);
}

/// A refund its merchant cancels on chain fails, and one never signed fails when the chain's time
/// passes its authorization's `validBefore`; either way its amount can be refunded again.
#[tokio::test]
async fn a_canceled_or_expired_refund_fails_and_frees_its_amount() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, false).await;
    let intent = paid_intent(&app, &anvil).await;
    let canceled = refund(&app, &intent, "canceled", &json!({})).await.json();
    let canceled = canceled["id"].as_str().unwrap().to_owned();
    anvil.cancel_as(PAYEE_KEY, &refund_typed_data(&app, &canceled).await);
    app.wait_for_refund(&canceled, "failed").await;
    let shown = app
        .get_as(DEMO_TOKEN, &format!("/v1/refunds/{canceled}"))
        .await
        .json();
    assert_eq!(shown["failure_reason"], "authorization_canceled");

    let short = json!({"amount": "100000000", "expires_in_seconds": 60});
    let expiring = refund(&app, &intent, "expiring", &short).await;
    assert_eq!(expiring.status, 201, "{}", expiring.body);
    let expiring = expiring.json()["id"].as_str().unwrap().to_owned();
    let typed = refund_typed_data(&app, &expiring).await;
    let valid_before: u64 = typed["message"]["validBefore"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    anvil
        .rpc("evm_setNextBlockTimestamp", json!([valid_before]))
        .await;
    anvil.mine(2).await;
    app.wait_for_refund(&expiring, "failed").await;
    let shown = app
        .get_as(DEMO_TOKEN, &format!("/v1/refunds/{expiring}"))
        .await
        .json();
    assert_eq!(shown["failure_reason"], "authorization_expired");
    assert_eq!(
        app.event_types(&expiring).await,
        ["refund.created", "refund.failed"]
    );
    // A failed refund can never move money: its amount is refundable again.
    let again = refund(&app, &intent, "again", &json!({})).await;
    assert_eq!(again.status, 201, "{}", again.body);
    assert_eq!(again.json()["amount"], "100000000");
    let intent_now = app.get_intent(DEMO_TOKEN, &intent).await.json();
    assert_eq!(intent_now["amount_refunded"], "0");
}
