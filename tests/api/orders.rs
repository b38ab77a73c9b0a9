//! Orders (`docs/settlement.md`, "Orders and options"): an intent priced in a currency whose
//! options come from the merchant's accepted assets, paid by the option and the payer a confirm
//! names, or by the first deposit at an option's address; never twice, however many confirms of
//! different options race; money at another option's address afterwards booked and swept, not
//! counted; and bad input a 400 naming the field with nothing written.

use payments_api::rails::evm::deposit::{devnet_factory, forwarder_address, intent_key};
use serde_json::{Value, json};

use crate::helpers::{
    Answer, DEMO_TOKEN, TestApp,
    chain::{Anvil, PAYEE, PAYEE_KEY, PAYER, PAYER_KEY, TOKEN, USDC, app_on, app_on_chains},
};

/// The demo merchant paid at `PAYEE`, accepting `assets` (`(chain, token, currency)`), each
/// of which has EIP-3009.
async fn accept(app: &TestApp, key: &str, assets: &[(&str, &str, &str)]) {
    let assets: Vec<Value> = assets
        .iter()
        .map(|(chain, token, currency)| json!({"chain": chain, "token": token, "currency": currency}))
        .collect();
    let body = json!({"payout_address": PAYEE, "accepted_assets": assets});
    let set = app
        .post_as(DEMO_TOKEN, "/v1/merchant", Some(key), &body.to_string())
        .await;
    assert_eq!(set.status, 200, "{}", set.body);
    let accepted = set.json()["accepted_assets"].clone();
    for asset in accepted.as_array().unwrap() {
        assert_eq!(asset["supports_authorization"], true, "{accepted}");
    }
}

/// The devnet token and USDC for usd, USDC for eur, on the one chain.
async fn accept_assets(app: &TestApp) {
    let assets = [
        ("evm:31337", TOKEN, "usd"),
        ("evm:31337", USDC, "usd"),
        ("evm:31337", USDC, "eur"),
    ];
    accept(app, "assets", &assets).await;
}

async fn create_order(app: &TestApp, body: Value) -> Value {
    let created = app.create_intent(DEMO_TOKEN, None, &body.to_string()).await;
    assert_eq!(created.status, 201, "{}", created.body);
    created.json()
}

/// The option of `order` on `chain` in `token` paid by `method`.
fn option_on<'a>(order: &'a Value, chain: &str, token: &str, method: &str) -> &'a Value {
    order["payment_options"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["chain"] == chain && o["token"] == token && o["payment_method"] == method)
        .unwrap_or_else(|| panic!("no {method} option in {token} on {chain}: {order}"))
}

/// The option of `order` in `token` paid by `method`, on the first chain.
fn option<'a>(order: &'a Value, token: &str, method: &str) -> &'a Value {
    option_on(order, "evm:31337", token, method)
}

/// The id of `option`.
fn id_of(option: &Value) -> String {
    option["id"].as_str().unwrap().to_owned()
}

async fn authorization(app: &TestApp, id: &str, query: &str) -> Answer {
    app.get_as(
        DEMO_TOKEN,
        &format!("/v1/payment_intents/{id}/authorization?{query}"),
    )
    .await
}

async fn confirm(app: &TestApp, id: &str, key: &str, body: Value) -> Answer {
    app.post_as(
        DEMO_TOKEN,
        &format!("/v1/payment_intents/{id}/confirm"),
        Some(key),
        &body.to_string(),
    )
    .await
}

/// The payer's confirm of order `id` by `option`, signed `signature`, under `key`.
async fn confirm_option(
    app: &TestApp,
    id: &str,
    key: &str,
    option: &str,
    signature: &str,
) -> Answer {
    let body = json!({"option": option, "payer": PAYER, "signature": signature});
    confirm(app, id, key, body).await
}

/// The payer's signature of `option` of order `id`: the document fetched and signed by cast.
async fn signed(app: &TestApp, anvil: &Anvil, id: &str, option: &str) -> (Value, String) {
    let answer = authorization(app, id, &format!("option={option}&payer={PAYER}")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let typed = answer.json()["typed_data"].clone();
    let signature = anvil.sign(PAYER_KEY, &typed);
    (typed, signature)
}

#[tokio::test]
async fn an_order_offers_each_accepted_asset_each_way_and_the_payers_confirm_chooses_one() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    accept_assets(&app).await;

    let order = create_order(&app, json!({"amount": "25.00", "currency": "usd"})).await;
    let id = order["id"].as_str().unwrap();
    assert_eq!(order["amount"], "25.00");
    assert_eq!(order["currency"], "usd");
    for unchosen in [
        "chain",
        "token",
        "payer",
        "payment_method",
        "selected_option",
    ] {
        assert_eq!(order[unchosen], Value::Null, "{unchosen}: {order}");
    }
    assert_eq!(order["merchant"], PAYEE, "paid to the payout address");
    let options = order["payment_options"].as_array().unwrap();
    assert_eq!(
        options.len(),
        4,
        "two tokens, each by authorization and deposit: {order}"
    );
    for token in [TOKEN, USDC] {
        let signed = option(&order, token, "authorization");
        let deposit = option(&order, token, "deposit_address");
        for o in [signed, deposit] {
            assert_eq!(o["chain"], "evm:31337");
            assert_eq!(o["decimals"], 6);
            assert_eq!(o["amount"], "25000000", "25.00 usd in a 6-decimal token");
            assert!(o["id"].as_str().unwrap().starts_with("po_"));
        }
        assert_eq!(signed["deposit_address"], Value::Null);
        let address = forwarder_address(
            devnet_factory(),
            PAYEE.parse().unwrap(),
            token.parse().unwrap(),
            intent_key(id),
        );
        assert_eq!(deposit["deposit_address"], address.to_string());
        assert_eq!(
            anvil.cast(&["code", &address.to_string()]),
            "0x",
            "computed, not deployed"
        );
    }
    let eur = create_order(&app, json!({"amount": "9.5", "currency": "eur"})).await;
    let eur_options = eur["payment_options"].as_array().unwrap();
    assert_eq!(eur_options.len(), 2, "{eur}");
    assert!(
        eur_options
            .iter()
            .all(|o| o["token"] == USDC && o["amount"] == "9500000")
    );

    // An intent priced in token units keeps its shape: no currency, no options.
    let fixed = create_order(
        &app,
        json!({"chain": "evm:31337", "token": TOKEN, "merchant": PAYEE, "payer": PAYER, "amount": "1000"}),
    )
    .await;
    assert_eq!(fixed["currency"], Value::Null);
    assert_eq!(fixed["payment_options"], json!([]));
    assert_eq!(fixed["amount"], "1000");

    // Options are fixed at creation: accepting other assets later changes no order.
    let narrowed =
        json!({"accepted_assets": [{"chain": "evm:31337", "token": USDC, "currency": "eur"}]});
    let set = app
        .post_as(
            DEMO_TOKEN,
            "/v1/merchant",
            Some("narrow"),
            &narrowed.to_string(),
        )
        .await;
    assert_eq!(set.status, 200, "{}", set.body);
    let now = app.get_intent(DEMO_TOKEN, id).await.json();
    assert_eq!(now["payment_options"], order["payment_options"]);

    // The payer picks USDC and signs; the confirm names the option and the payer.
    let usdc = id_of(option(&order, USDC, "authorization"));
    let (typed, signature) = signed(&app, &anvil, id, &usdc).await;
    assert_eq!(
        typed["domain"]["verifyingContract"]
            .as_str()
            .unwrap()
            .to_lowercase(),
        USDC.to_lowercase()
    );
    assert_eq!(
        typed["message"]["value"].to_string().trim_matches('"'),
        "25000000"
    );
    assert_eq!(
        typed["message"]["to"].as_str().unwrap().to_lowercase(),
        PAYEE.to_lowercase()
    );
    let before = anvil.balance_of(USDC, PAYEE);
    let confirmed = confirm_option(&app, id, "confirm-usdc", &usdc, &signature).await;
    assert_eq!(confirmed.status, 200, "{}", confirmed.body);
    let confirmed = confirmed.json();
    assert_eq!(confirmed["state"], "processing");
    assert_eq!(confirmed["selected_option"], usdc.as_str());
    assert_eq!(confirmed["payer"], PAYER);
    assert_eq!(confirmed["chain"], "evm:31337");
    assert_eq!(confirmed["token"], USDC);
    assert_eq!(confirmed["payment_method"], "authorization");
    assert_eq!(confirmed["amount"], "25.00", "the order's price, as given");

    // Another option cannot pay it now, by confirm or by a document to sign.
    let token_option = id_of(option(&order, TOKEN, "authorization"));
    let other = confirm_option(&app, id, "confirm-token", &token_option, &signature).await;
    assert_eq!(other.status, 409, "{}", other.body);
    assert_eq!(other.json()["error"], "payment_in_progress");
    let document = authorization(&app, id, &format!("option={token_option}&payer={PAYER}")).await;
    assert_eq!(document.status, 409, "{}", document.body);
    assert_eq!(document.json()["error"], "payment_in_progress");

    app.wait_for_state(id, "succeeded").await;
    assert_eq!(anvil.balance_of(USDC, PAYEE) - before, 25_000_000);
    let object: Value = sqlx::query_scalar(
        "SELECT object FROM events WHERE subject_id = $1 AND type = 'payment_intent.succeeded'",
    )
    .bind(id)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(
        object["selected_option"],
        usdc.as_str(),
        "events carry the chosen option"
    );
}

#[tokio::test]
async fn ten_racing_confirms_of_different_options_submit_one_payment() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    accept_assets(&app).await;
    let order = create_order(&app, json!({"amount": "3.00", "currency": "usd"})).await;
    let id = order["id"].as_str().unwrap().to_owned();
    let mut bodies = Vec::new();
    for token in [TOKEN, USDC] {
        let chosen = id_of(option(&order, token, "authorization"));
        let (_, signature) = signed(&app, &anvil, &id, &chosen).await;
        bodies.push(json!({"option": chosen, "payer": PAYER, "signature": signature}));
    }
    let before = anvil.balance_of(TOKEN, PAYEE) + anvil.balance_of(USDC, PAYEE);
    let confirms = (0..10).map(|i| {
        let (address, body, id) = (app.address.clone(), bodies[i % 2].clone(), id.clone());
        tokio::spawn(async move {
            let answer = reqwest::Client::new()
                .post(format!("{address}/v1/payment_intents/{id}/confirm"))
                .bearer_auth(DEMO_TOKEN)
                .header("Idempotency-Key", format!("race-{i}"))
                .json(&body)
                .send()
                .await
                .unwrap();
            Answer::of(answer).await
        })
    });
    let answers: Vec<Answer> = futures::future::join_all(confirms)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let won: Vec<&Answer> = answers.iter().filter(|a| a.status == 200).collect();
    assert_eq!(
        won.len(),
        1,
        "{:?}",
        answers.iter().map(|a| &a.body).collect::<Vec<_>>()
    );
    for lost in answers.iter().filter(|a| a.status != 200) {
        assert_eq!(lost.status, 409, "{}", lost.body);
        assert_eq!(lost.json()["error"], "payment_in_progress", "{}", lost.body);
    }
    let submissions: i64 =
        sqlx::query_scalar("SELECT count(*) FROM chain_submissions WHERE subject = $1")
            .bind(&id)
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(submissions, 1, "one payment queued");
    app.wait_for_state(&id, "succeeded").await;
    let after = anvil.balance_of(TOKEN, PAYEE) + anvil.balance_of(USDC, PAYEE);
    assert_eq!(after - before, 3_000_000, "paid once, in one token");
}

#[tokio::test]
async fn the_first_deposit_at_an_options_address_chooses_it_and_another_options_is_booked_not_counted()
 {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    accept_assets(&app).await;
    let order = create_order(&app, json!({"amount": "2.50", "currency": "usd"})).await;
    let id = order["id"].as_str().unwrap();
    let by_token = option(&order, TOKEN, "deposit_address");
    let by_usdc = option(&order, USDC, "deposit_address");
    let token_address = by_token["deposit_address"].as_str().unwrap();
    let usdc_address = by_usdc["deposit_address"].as_str().unwrap();
    let before = anvil.balance_of(TOKEN, PAYEE);

    anvil.cast(&[
        "send",
        "--private-key",
        PAYER_KEY,
        TOKEN,
        "transfer(address,uint256)",
        token_address,
        "2500000",
    ]);
    app.wait_for_state(id, "succeeded").await;
    let paid = app.get_intent(DEMO_TOKEN, id).await.json();
    assert_eq!(paid["selected_option"], by_token["id"]);
    assert_eq!(paid["payment_method"], "deposit_address");
    assert_eq!(paid["deposit_address"], token_address);
    assert_eq!(paid["token"], TOKEN);
    assert_eq!(paid["amount_received"], "2500000");

    // The payer pays again, in USDC, at that option's address: booked and swept, never counted.
    let merchant_usdc = anvil.balance_of(USDC, PAYEE);
    anvil.cast(&[
        "send",
        "--private-key",
        PAYER_KEY,
        USDC,
        "transfer(address,uint256)",
        usdc_address,
        "2500000",
    ]);
    app.mine_until(
        &anvil,
        "both deposit addresses are swept",
        &format!(
            "(SELECT count(*) FROM chain_observations WHERE kind = 'deposit_swept' AND subject = '{id}' AND applied_at IS NOT NULL) = 2"
        ),
    )
    .await;
    assert_eq!(anvil.balance_of(TOKEN, PAYEE) - before, 2_500_000);
    assert_eq!(
        anvil.balance_of(USDC, PAYEE) - merchant_usdc,
        2_500_000,
        "swept to the merchant"
    );
    assert_eq!(anvil.balance_of(USDC, usdc_address), 0);
    let now = app.get_intent(DEMO_TOKEN, id).await.json();
    assert_eq!(now["amount_received"], "2500000", "not counted: {now}");
    assert_eq!(now["selected_option"], by_token["id"]);
    let booked: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM ledger_postings WHERE account = $1 AND amount > 0",
    )
    .bind(format!("deposit:{usdc_address}"))
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(booked, 1, "the second payment is in the ledger");
    let duplicates = now["duplicate_payments"].as_array().unwrap();
    assert_eq!(duplicates.len(), 1, "{now}");
    let duplicate = &duplicates[0];
    assert!(duplicate["id"].as_str().unwrap().starts_with("dp_"));
    assert_eq!(duplicate["chain"], "evm:31337");
    assert_eq!(duplicate["token"], USDC);
    assert_eq!(duplicate["amount"], "2500000");
    assert_eq!(duplicate["from"], PAYER);
    assert_eq!(duplicate["deposit_address"], usdc_address);
    assert_eq!(
        app.event_types(id).await.last().map(String::as_str),
        Some("payment_intent.duplicate_payment")
    );

    // Paid back in one call: the merchant's authorization, on the duplicate's chain and token,
    // to its sender.
    let refunds = format!("/v1/payment_intents/{id}/refunds");
    let body = json!({"duplicate_payment": duplicate["id"]}).to_string();
    let refund = app
        .post_as(DEMO_TOKEN, &refunds, Some("dup-refund"), &body)
        .await;
    assert_eq!(refund.status, 201, "{}", refund.body);
    let refund = refund.json();
    assert_eq!(refund["duplicate_payment"], duplicate["id"]);
    assert_eq!(refund["amount"], "2500000");
    assert_eq!(refund["token"], USDC);
    assert_eq!(refund["payer"], PAYER, "back to its sender");
    let refund_id = refund["id"].as_str().unwrap();
    let document = app
        .get_as(
            DEMO_TOKEN,
            &format!("/v1/refunds/{refund_id}/authorization"),
        )
        .await;
    assert_eq!(document.status, 200, "{}", document.body);
    let signature = anvil.sign(PAYEE_KEY, &document.json()["typed_data"]);
    let payer_before = anvil.balance_of(USDC, PAYER);
    let confirmed = app
        .post_as(
            DEMO_TOKEN,
            &format!("/v1/refunds/{refund_id}/confirm"),
            Some("dup-refund-confirm"),
            &json!({"signature": signature}).to_string(),
        )
        .await;
    assert_eq!(confirmed.status, 200, "{}", confirmed.body);
    app.wait_for_refund(refund_id, "succeeded").await;
    assert_eq!(anvil.balance_of(USDC, PAYER) - payer_before, 2_500_000);
    let after = app.get_intent(DEMO_TOKEN, id).await.json();
    assert_eq!(
        after["amount_refunded"], "0",
        "the order's own payment is untouched"
    );

    // Once: nothing is left of that duplicate; a duplicate of no such id, or a destination
    // without one, is a 400 naming the field.
    let again = app
        .post_as(DEMO_TOKEN, &refunds, Some("dup-refund-2"), &body)
        .await;
    assert_eq!(again.status, 409, "{}", again.body);
    assert_eq!(again.json()["error"], "refund_exceeds_payment");
    for (body, field) in [
        (
            json!({"duplicate_payment": "dp_000000000000000000000000"}),
            "duplicate_payment",
        ),
        (json!({"destination": PAYER}), "destination"),
    ] {
        let answer = app
            .post_as(
                DEMO_TOKEN,
                &refunds,
                Some(&format!("bad-{body}")),
                &body.to_string(),
            )
            .await;
        assert_eq!(answer.status, 400, "{}", answer.body);
        let detail = answer.json()["detail"].as_str().unwrap().to_owned();
        assert!(detail.starts_with(&format!("{field}:")), "{detail}");
    }
}

#[tokio::test]
async fn bad_orders_and_choices_are_400s_naming_the_field_and_change_nothing() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, false).await;
    let bad = |body: Value, field: &'static str| (body, field);

    // No payout address and no merchant: nothing to pay to.
    let answer = app
        .create_intent(
            DEMO_TOKEN,
            None,
            &json!({"amount": "1.00", "currency": "usd"}).to_string(),
        )
        .await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert!(
        answer.json()["detail"]
            .as_str()
            .unwrap()
            .starts_with("merchant: required"),
        "{}",
        answer.body
    );
    // A payee but no accepted asset in the currency.
    let answer = app
        .create_intent(
            DEMO_TOKEN,
            None,
            &json!({"amount": "1.00", "currency": "usd", "merchant": PAYEE}).to_string(),
        )
        .await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert!(
        answer.json()["detail"]
            .as_str()
            .unwrap()
            .starts_with("currency: no accepted asset"),
        "{}",
        answer.body
    );

    accept_assets(&app).await;
    let intents = app.intent_count().await;
    let events = app.event_count().await;
    for (body, field) in [
        bad(json!({"amount": "1.00", "currency": "gbp"}), "currency"),
        bad(json!({"amount": "1.001", "currency": "usd"}), "amount"),
        bad(json!({"amount": "0", "currency": "usd"}), "amount"),
        bad(json!({"amount": "0.00", "currency": "usd"}), "amount"),
        bad(json!({"amount": "-1.00", "currency": "usd"}), "amount"),
        bad(json!({"amount": "1e3", "currency": "usd"}), "amount"),
        bad(
            json!({"amount": "1.00", "currency": "usd", "chain": "evm:31337"}),
            "chain",
        ),
        bad(
            json!({"amount": "1.00", "currency": "usd", "token": TOKEN}),
            "token",
        ),
        bad(
            json!({"amount": "1.00", "currency": "usd", "payer": PAYER}),
            "payer",
        ),
        bad(
            json!({"amount": "1.00", "currency": "usd", "payment_method": "deposit_address"}),
            "payment_method",
        ),
        bad(
            json!({"amount": "1.00", "token": TOKEN, "merchant": PAYEE}),
            "chain",
        ),
        bad(
            json!({"amount": "1.00", "chain": "evm:31337", "token": TOKEN, "merchant": PAYEE}),
            "amount",
        ),
    ] {
        let answer = app.create_intent(DEMO_TOKEN, None, &body.to_string()).await;
        assert_eq!(answer.status, 400, "{body}: {}", answer.body);
        let detail = answer.json()["detail"].as_str().unwrap().to_owned();
        assert!(detail.starts_with(&format!("{field}:")), "{body}: {detail}");
    }
    assert_eq!(app.intent_count().await, intents, "nothing written");
    assert_eq!(app.event_count().await, events);

    let order = create_order(&app, json!({"amount": "1.00", "currency": "usd"})).await;
    let id = order["id"].as_str().unwrap();
    let other = create_order(&app, json!({"amount": "1.00", "currency": "usd"})).await;
    let chosen = &id_of(option(&order, TOKEN, "authorization"));
    let (_, signature) = signed(&app, &anvil, id, chosen).await;
    let foreign = &id_of(option(&other, TOKEN, "authorization"));
    let deposit = &id_of(option(&order, TOKEN, "deposit_address"));
    for (body, field) in [
        bad(json!({"payer": PAYER, "signature": signature}), "option"),
        bad(
            json!({"option": foreign, "payer": PAYER, "signature": signature}),
            "option",
        ),
        bad(
            json!({"option": "po_nope", "payer": PAYER, "signature": signature}),
            "option",
        ),
        bad(
            json!({"option": deposit, "payer": PAYER, "signature": signature}),
            "option",
        ),
        bad(json!({"option": chosen, "signature": signature}), "payer"),
        bad(
            json!({"option": chosen, "payer": "0x12", "signature": signature}),
            "payer",
        ),
        // Signed by the payer, claimed as another's: not that address's signature.
        bad(
            json!({"option": chosen, "payer": PAYEE, "signature": signature}),
            "signature",
        ),
    ] {
        let answer = confirm(&app, id, &format!("bad-{body}"), body.clone()).await;
        assert_eq!(answer.status, 400, "{body}: {}", answer.body);
        let detail = answer.json()["detail"].as_str().unwrap().to_owned();
        assert!(detail.starts_with(&format!("{field}:")), "{body}: {detail}");
    }
    let still = app.get_intent(DEMO_TOKEN, id).await.json();
    assert_eq!(still["state"], "created");
    assert_eq!(still["selected_option"], Value::Null);
    assert_eq!(still["payer"], Value::Null);
    let missing = authorization(&app, id, &format!("payer={PAYER}")).await;
    assert_eq!(missing.status, 400, "{}", missing.body);
    assert!(
        missing.json()["detail"]
            .as_str()
            .unwrap()
            .starts_with("option: required")
    );
}

#[tokio::test]
async fn an_authorization_intent_without_a_payer_is_bound_to_whoever_confirms() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let body = json!({"chain": "evm:31337", "token": TOKEN, "merchant": PAYEE, "amount": "1000"});
    let open = create_order(&app, body.clone()).await;
    let id = open["id"].as_str().unwrap();
    assert_eq!(open["payer"], Value::Null);
    let missing = authorization(&app, id, "").await;
    assert_eq!(missing.status, 400, "{}", missing.body);
    assert!(
        missing.json()["detail"]
            .as_str()
            .unwrap()
            .starts_with("payer: required")
    );
    let option = authorization(&app, id, "option=po_4c1d6e0f9a2b3c4d5e6f7a8b").await;
    assert_eq!(option.status, 400, "{}", option.body);
    assert!(
        option.json()["detail"]
            .as_str()
            .unwrap()
            .starts_with("option:")
    );

    let answer = authorization(&app, id, &format!("payer={PAYER}")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let signature = anvil.sign(PAYER_KEY, &answer.json()["typed_data"]);
    let confirmed = confirm(
        &app,
        id,
        "bind",
        json!({"payer": PAYER, "signature": signature}),
    )
    .await;
    assert_eq!(confirmed.status, 200, "{}", confirmed.body);
    assert_eq!(confirmed.json()["payer"], PAYER);
    app.wait_for_state(id, "succeeded").await;

    // A payer named at creation must be the one that confirms.
    let named = create_order(
        &app,
        json!({"chain": "evm:31337", "token": TOKEN, "merchant": PAYEE, "payer": PAYER, "amount": "1000"}),
    )
    .await;
    let named_id = named["id"].as_str().unwrap();
    let typed = app.typed_data(named_id).await;
    let theirs = anvil.sign(PAYEE_KEY, &typed);
    let mismatch = confirm(
        &app,
        named_id,
        "mismatch",
        json!({"payer": PAYEE, "signature": theirs}),
    )
    .await;
    assert_eq!(mismatch.status, 400, "{}", mismatch.body);
    assert!(
        mismatch.json()["detail"]
            .as_str()
            .unwrap()
            .starts_with("payer:"),
        "{}",
        mismatch.body
    );
    assert_eq!(app.state_of(named_id).await, "created");
}

/// `payments-api reconcile --chain <which>` with `chains` served: exit status and output.
fn reconcile_on(app: &TestApp, chains: &[&Anvil], which: &Anvil) -> (bool, String) {
    let served: Vec<String> = chains
        .iter()
        .map(|c| format!("{}={}", c.name(), c.url))
        .collect();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_payments-api"))
        .args(["reconcile", "--chain", &which.name()])
        .env("CHAINS", served.join(","))
        .env("CHAIN_CONFIRMATIONS", "1")
        .env("DATABASE_URL", &app.database_url)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

/// Anvil as 31337 and as 31338, and the app settling on both at once, its relayer on.
async fn on_two_chains(confirmations: u64) -> (Anvil, Anvil, TestApp) {
    let first = Anvil::start().await;
    let second = Anvil::start_as(31338, &[]).await;
    let app = app_on_chains(&[&first, &second], confirmations, true).await;
    (first, second, app)
}

#[tokio::test]
async fn two_chains_at_once_an_order_paid_on_the_second_and_money_on_the_first_booked_not_counted()
{
    let (first, second, app) = on_two_chains(1).await;
    let chains = [&first, &second];
    let assets = [("evm:31337", TOKEN, "usd"), ("evm:31338", USDC, "usd")];
    accept(&app, "two-chains", &assets).await;
    let order = create_order(&app, json!({"amount": "4.00", "currency": "usd"})).await;
    let id = order["id"].as_str().unwrap();
    let on_second = id_of(option_on(&order, "evm:31338", USDC, "authorization"));
    let on_first = option_on(&order, "evm:31337", TOKEN, "deposit_address");
    assert_eq!(
        order["payment_options"].as_array().unwrap().len(),
        4,
        "{order}"
    );

    // Paid on the second chain: the document is that chain's, the money moves there only.
    let (typed, signature) = signed(&app, &second, id, &on_second).await;
    assert_eq!(typed["domain"]["chainId"], 31338, "{typed}");
    let (first_before, second_before) = (
        first.balance_of(TOKEN, PAYEE),
        second.balance_of(USDC, PAYEE),
    );
    let confirmed = confirm_option(&app, id, "second-chain", &on_second, &signature).await;
    assert_eq!(confirmed.status, 200, "{}", confirmed.body);
    assert_eq!(confirmed.json()["chain"], "evm:31338");
    app.wait_for_state(id, "succeeded").await;
    assert_eq!(second.balance_of(USDC, PAYEE) - second_before, 4_000_000);

    // The payer pays again on the first chain, at that option's address: booked and swept there,
    // never counted; the second chain moves on meanwhile.
    let address = on_first["deposit_address"].as_str().unwrap();
    first.cast(&[
        "send",
        "--private-key",
        PAYER_KEY,
        TOKEN,
        "transfer(address,uint256)",
        address,
        "4000000",
    ]);
    second.mine(3).await;
    app.mine_until(
        &first,
        "the first chain's deposit is swept",
        &format!(
            "EXISTS (SELECT 1 FROM chain_observations WHERE kind = 'deposit_swept' AND subject = '{id}' AND chain_id = 31337 AND applied_at IS NOT NULL)"
        ),
    )
    .await;
    assert_eq!(
        first.balance_of(TOKEN, PAYEE) - first_before,
        4_000_000,
        "swept to the merchant"
    );
    let now = app.get_intent(DEMO_TOKEN, id).await.json();
    assert_eq!(now["selected_option"], on_second.as_str());
    assert_eq!(now["amount_received"], "0", "not counted: {now}");
    let duplicates = now["duplicate_payments"].as_array().unwrap();
    assert_eq!(duplicates.len(), 1, "{now}");
    assert_eq!(duplicates[0]["chain"], "evm:31337");
    assert_eq!(duplicates[0]["amount"], "4000000");
    // What the merchant holds, per chain and token, and in dollars across both (at par).
    let balances = app.get_as(DEMO_TOKEN, "/v1/balances").await.json();
    assert_eq!(balances["data"].as_array().unwrap().len(), 2, "{balances}");
    assert_eq!(
        balances["totals"],
        json!([{"currency": "usd", "amount": "8.00"}])
    );
    app.followed(&first).await;
    app.followed(&second).await;
    for chain in chains {
        let (agreed, output) = reconcile_on(&app, &chains, chain);
        assert!(agreed, "{}: {output}", chain.name());
    }
}

#[tokio::test]
async fn a_reorg_on_one_chain_while_the_other_pays_the_same_address_chooses_the_option_that_stayed()
{
    let (first, second, app) = on_two_chains(3).await;
    let chains = [&first, &second];
    let assets = [("evm:31337", TOKEN, "usd"), ("evm:31338", TOKEN, "usd")];
    accept(&app, "reorg", &assets).await;
    let order = create_order(&app, json!({"amount": "1.50", "currency": "usd"})).await;
    let id = order["id"].as_str().unwrap();
    let on_first = option_on(&order, "evm:31337", TOKEN, "deposit_address");
    let on_second = option_on(&order, "evm:31338", TOKEN, "deposit_address");
    // One token, one merchant, one order, one factory address: one address on both chains.
    let address = on_first["deposit_address"].as_str().unwrap().to_owned();
    assert_eq!(on_second["deposit_address"], address.as_str());
    let send = |chain: &Anvil| {
        chain.cast(&[
            "send",
            "--private-key",
            PAYER_KEY,
            TOKEN,
            "transfer(address,uint256)",
            &address,
            "1500000",
        ]);
    };

    // Seen on the first chain, then orphaned there.
    let snapshot = first.rpc("evm_snapshot", json!([])).await;
    send(&first);
    let seen_on_first = format!(
        "EXISTS (SELECT 1 FROM chain_observations WHERE subject = '{id}' AND chain_id = 31337)"
    );
    app.wait_until("the first chain's deposit seen", &seen_on_first)
        .await;
    first.rpc("evm_revert", json!([snapshot])).await;
    first.mine(2).await;
    app.wait_until(
        "the orphaned deposit dropped",
        &format!("NOT {seen_on_first}"),
    )
    .await;

    // Meanwhile the second chain confirms its own: that option pays the order.
    send(&second);
    app.mine_until(
        &second,
        "paid on the second chain",
        &format!("(SELECT state FROM payment_intents WHERE id = '{id}') = 'succeeded'"),
    )
    .await;
    let paid = app.get_intent(DEMO_TOKEN, id).await.json();
    assert_eq!(paid["selected_option"], on_second["id"]);
    assert_eq!(paid["chain"], "evm:31338");
    assert_eq!(paid["amount_received"], "1500000");
    first.mine(4).await;
    app.followed(&first).await;
    let booked_on_first: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM ledger_entries WHERE chain = 'evm:31337' AND intent_id = $1",
    )
    .bind(id)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(
        booked_on_first, 0,
        "nothing of the orphaned block is booked"
    );

    // Sent again on the first chain: booked and swept there, not counted.
    let before = first.balance_of(TOKEN, PAYEE);
    send(&first);
    app.mine_until(&first, "the first chain's deposit swept", &format!(
        "EXISTS (SELECT 1 FROM chain_observations WHERE kind = 'deposit_swept' AND subject = '{id}' AND chain_id = 31337 AND applied_at IS NOT NULL)"
    ))
    .await;
    assert_eq!(first.balance_of(TOKEN, PAYEE) - before, 1_500_000);
    let now = app.get_intent(DEMO_TOKEN, id).await.json();
    assert_eq!(now["amount_received"], "1500000", "not counted: {now}");
    assert_eq!(
        now["duplicate_payments"].as_array().unwrap().len(),
        1,
        "{now}"
    );
    assert_eq!(now["duplicate_payments"][0]["chain"], "evm:31337");
    // The second chain's sweep too is confirmed and booked before the ledger is compared.
    app.mine_until(&second, "the second chain's deposit swept", &format!(
        "EXISTS (SELECT 1 FROM chain_observations WHERE kind = 'deposit_swept' AND subject = '{id}' AND chain_id = 31338 AND applied_at IS NOT NULL)"
    ))
    .await;
    first.mine(3).await;
    second.mine(3).await;
    app.followed(&first).await;
    app.followed(&second).await;
    for chain in chains {
        let (agreed, output) = reconcile_on(&app, &chains, chain);
        assert!(agreed, "{}: {output}", chain.name());
    }
}

#[tokio::test]
async fn authorizations_of_two_options_the_payer_submits_pay_once_and_the_second_is_a_duplicate() {
    let anvil = Anvil::start().await;
    // No relayer: the payer sends both authorizations themselves, no confirm at all.
    let app = app_on(&anvil, 1, false).await;
    accept_assets(&app).await;
    let order = create_order(&app, json!({"amount": "2.00", "currency": "usd"})).await;
    let id = order["id"].as_str().unwrap();
    let by_token = id_of(option(&order, TOKEN, "authorization"));
    let by_usdc = id_of(option(&order, USDC, "authorization"));
    let (token_typed, token_signature) = signed(&app, &anvil, id, &by_token).await;
    let (usdc_typed, usdc_signature) = signed(&app, &anvil, id, &by_usdc).await;
    let before = (
        anvil.balance_of(TOKEN, PAYEE),
        anvil.balance_of(USDC, PAYEE),
    );

    // The first on chain chooses its option and pays the order.
    anvil.submit_as_payer(&token_typed, &token_signature);
    app.wait_for_state(id, "succeeded").await;
    let paid = app.get_intent(DEMO_TOKEN, id).await.json();
    assert_eq!(paid["selected_option"], by_token.as_str());
    assert_eq!(paid["payer"], PAYER);
    assert_eq!(paid["token"], TOKEN);
    assert!(paid["settlement"]["transaction_hash"].is_string(), "{paid}");

    // The second moves money too: booked and listed, never counted.
    anvil.submit_as_payer(&usdc_typed, &usdc_signature);
    app.wait_until(
        "the second listed as a duplicate payment",
        &format!("(SELECT jsonb_array_length(duplicate_payments) FROM payment_intents WHERE id = '{id}') = 1"),
    )
    .await;
    assert_eq!(anvil.balance_of(TOKEN, PAYEE) - before.0, 2_000_000);
    assert_eq!(anvil.balance_of(USDC, PAYEE) - before.1, 2_000_000);
    let now = app.get_intent(DEMO_TOKEN, id).await.json();
    let duplicate = &now["duplicate_payments"][0];
    assert_eq!(duplicate["token"], USDC);
    assert_eq!(duplicate["amount"], "2000000");
    assert_eq!(duplicate["from"], PAYER);
    assert_eq!(duplicate["deposit_address"], Value::Null);
    assert_eq!(now["selected_option"], by_token.as_str());
    let payments = app.payments_booked(id).await;
    assert_eq!(payments, 2, "both payments are in the ledger");
    app.wait_for_listener(&anvil).await;
    let (agreed, output) = crate::settlement::reconcile(&app, &anvil);
    assert!(agreed, "{output}");
}

/// Each replica makes orders from the merchant's terms as it read them last, and the insert checks
/// that they are still current: a change made through another replica is seen by the very next
/// order, which is made again from the new terms, or refused by them with nothing written.
#[tokio::test]
async fn a_change_of_accepted_assets_on_another_replica_is_seen_by_the_next_order() {
    let anvil = Anvil::start().await;
    let first = app_on(&anvil, 1, true).await;
    accept_assets(&first).await;
    let before = create_order(&first, json!({"amount": "1.00", "currency": "usd"})).await;
    assert_eq!(before["payment_options"].as_array().unwrap().len(), 4);

    let settlement = anvil.settlement(1);
    let second = TestApp::spawn_on(&first.database_url, move |s| s.settlement = settlement).await;
    accept(&second, "only-the-token", &[("evm:31337", TOKEN, "usd")]).await;
    let after = create_order(&first, json!({"amount": "1.00", "currency": "usd"})).await;
    let tokens: Vec<&Value> = after["payment_options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| &o["token"])
        .collect();
    assert_eq!(tokens, [&json!(TOKEN), &json!(TOKEN)], "{after}");

    // Terms that no longer allow an order in this currency refuse it, with nothing written.
    accept(&second, "eur-only", &[("evm:31337", USDC, "eur")]).await;
    let intents = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM payment_intents")
            .fetch_one(&first.db)
            .await
            .unwrap()
    };
    let count = intents().await;
    let refused = first
        .create_intent(
            DEMO_TOKEN,
            None,
            &json!({"amount": "1.00", "currency": "usd"}).to_string(),
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.contains("currency"), "{}", refused.body);
    assert_eq!(intents().await, count);
    let eur = create_order(&first, json!({"amount": "1.00", "currency": "eur"})).await;
    assert_eq!(eur["payment_options"][0]["token"], USDC);
}

/// An accepted token without EIP-3009 (Tether-like: `transfer` returns nothing) is an option paid
/// by Permit2: the payer who approved Permit2 signs the permit the option's document holds, the
/// confirm chooses the option, and the relayer pays the merchant once through x402's exact proxy,
/// booked in that token.
#[tokio::test]
async fn an_accepted_token_without_eip3009_is_an_option_paid_by_permit2() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let usdt = anvil.deploy_token(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/contracts/build/NoReturnToken.json"
    )));
    let assets = json!([
        {"chain": "evm:31337", "token": usdt, "currency": "usd"},
        {"chain": "evm:31337", "token": TOKEN, "currency": "usd"}
    ]);
    let body = json!({"payout_address": PAYEE, "accepted_assets": assets});
    let set = app
        .post_as(DEMO_TOKEN, "/v1/merchant", Some("usdt"), &body.to_string())
        .await;
    assert_eq!(set.status, 200, "{}", set.body);
    assert_eq!(
        set.json()["accepted_assets"][0]["supports_authorization"],
        false
    );

    let order = create_order(&app, json!({"amount": "1.50", "currency": "usd"})).await;
    let id = order["id"].as_str().unwrap();
    let by_permit = option(&order, &usdt, "permit2");
    option(&order, TOKEN, "authorization");
    let methods: Vec<&Value> = order["payment_options"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["token"] == usdt.as_str())
        .map(|o| &o["payment_method"])
        .collect();
    assert!(
        !methods.contains(&&json!("authorization")),
        "no EIP-3009 option for a token without it: {order}"
    );
    let amount = by_permit["amount"].as_str().unwrap().to_owned();

    anvil.send(
        PAYER_KEY,
        &usdt,
        "approve(address,uint256)",
        &[
            &payments_api::rails::evm::permit2::PERMIT2.to_string(),
            &amount,
        ],
    );
    let (typed, signature) = signed(&app, &anvil, id, &id_of(by_permit)).await;
    assert_eq!(typed["primaryType"], "PermitWitnessTransferFrom");
    assert_eq!(typed["message"]["witness"]["to"], PAYEE);
    let before = anvil.balance_of(&usdt, PAYEE);
    let confirmed = confirm_option(&app, id, "by-permit2", &id_of(by_permit), &signature).await;
    assert_eq!(confirmed.status, 200, "{}", confirmed.body);
    let confirmed = confirmed.json();
    assert_eq!(confirmed["selected_option"], by_permit["id"]);
    assert_eq!(confirmed["payment_method"], "permit2");
    assert_eq!(confirmed["token"], usdt.as_str());
    app.wait_for_state(id, "succeeded").await;
    assert_eq!(
        anvil.balance_of(&usdt, PAYEE) - before,
        amount.parse::<u128>().unwrap()
    );
    let booked: Vec<(String, String)> = sqlx::query_as(
        "SELECT p.token, p.amount::text FROM ledger_entries e JOIN ledger_postings p ON p.entry_id = e.id
          WHERE e.intent_id = $1 AND e.kind = 'payment' AND p.amount > 0",
    )
    .bind(id)
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert_eq!(booked, [(usdt.clone(), amount)]);
}
