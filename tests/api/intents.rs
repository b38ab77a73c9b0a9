//! The intent, its validation and its errors.

use crate::helpers::{Answer, DEMO_TOKEN, SEED_BODY, TestApp, body_with_amount};

#[tokio::test]
async fn get_returns_the_created_intent() {
    let app = TestApp::spawn().await;
    let created = app
        .create_intent(DEMO_TOKEN, Some("get-1"), SEED_BODY)
        .await;
    let id = created.json()["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("pi_") && id.len() == 27);

    let fetched = app.get_intent(DEMO_TOKEN, &id).await;
    assert_eq!(fetched.status, 200);
    assert_eq!(fetched.body, created.body);
    // A GET ignores Idempotency-Key.
    let with_key = app
        .client
        .get(format!("{}/v1/payment_intents/{id}", app.address))
        .bearer_auth(DEMO_TOKEN)
        .header("idempotency-key", "bad key")
        .send()
        .await
        .unwrap();
    assert_eq!(with_key.status(), 200);

    for missing in [
        "pi_000000000000000000000000",
        "pi_x",
        "nothing",
        "%27%3B%20DROP%20TABLE%20payment_intents",
    ] {
        let answer = app.get_intent(DEMO_TOKEN, missing).await;
        assert_eq!(answer.status, 404, "{missing}");
        assert_eq!(answer.json()["error"], "not_found");
    }
}

#[tokio::test]
async fn addresses_are_shown_checksummed_and_amounts_reach_uint256() {
    let app = TestApp::spawn().await;
    let max = "115792089237316195423570985008687907853269984665640564039457584007913129639935";
    let body = body_with_amount(max)
        .replace(
            "0x5FbDB2315678afecb367f032d93F642f64180aa3",
            "0x5fbdb2315678afecb367f032d93f642f64180aa3",
        )
        .replace(
            "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
            "0x70997970C51812DC3A010C7D01B50E0D17DC79C8",
        )
        .replace(r#","expires_in_seconds":900"#, "");
    let answer = app.create_intent(DEMO_TOKEN, None, &body).await;
    assert_eq!(answer.status, 201, "{}", answer.body);
    let intent = answer.json();
    assert_eq!(intent["amount"], max);
    assert_eq!(
        intent["token"],
        "0x5FbDB2315678afecb367f032d93F642f64180aa3"
    );
    assert_eq!(
        intent["payer"],
        "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
    );
    assert_eq!(intent["canceled_at"], serde_json::Value::Null);
    let created = time::OffsetDateTime::parse(
        intent["created_at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let expires = time::OffsetDateTime::parse(
        intent["expires_at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    assert_eq!(
        (expires - created).whole_seconds(),
        900,
        "the default lifetime"
    );
}

#[tokio::test]
async fn invalid_input_gets_400_naming_the_field() {
    let app = TestApp::spawn().await;
    let cases: Vec<(String, &str)> = vec![
        (body_with_amount("0"), "amount"),
        (body_with_amount("01"), "amount"),
        (body_with_amount("-5"), "amount"),
        (body_with_amount("1.5"), "amount"),
        (body_with_amount(&"9".repeat(79)), "amount"),
        (
            SEED_BODY.replace(r#""amount":"100000000""#, r#""amount":100000000"#),
            "amount",
        ),
        (SEED_BODY.replace("evm:31337", "evm:031337"), "chain"),
        (SEED_BODY.replace("evm:31337", "solana:1"), "chain"),
        (
            SEED_BODY.replace(
                "0x5FbDB2315678afecb367f032d93F642f64180aa3",
                "0x5FbDB2315678afecb367f032d93F642f64180aA3",
            ),
            "token",
        ),
        (
            SEED_BODY.replace("0x70997970C51812dc3A010C7d01b50e0d17dc79C8", "0x7099"),
            "payer",
        ),
        (
            SEED_BODY.replace(
                "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
                "3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
            ),
            "merchant",
        ),
        (SEED_BODY.replace("900}", "59}"), "expires_in_seconds"),
        (SEED_BODY.replace("900}", "86401}"), "expires_in_seconds"),
        (SEED_BODY.replace("900}", "\"900\"}"), "expires_in_seconds"),
        (SEED_BODY.replace("900}", "900,\"memo\":\"x\"}"), "memo"),
        (SEED_BODY.replace(r#""chain":"evm:31337","#, ""), "chain"),
        ("[]".to_owned(), "JSON object"),
        ("not json".to_owned(), "JSON"),
        ("".to_owned(), "JSON"),
        (format!("{SEED_BODY}{SEED_BODY}"), "one JSON object"),
    ];
    for (body, field) in cases {
        let answer = app.create_intent(DEMO_TOKEN, None, &body).await;
        assert_eq!(answer.status, 400, "{body}: {}", answer.body);
        let json = answer.json();
        assert_eq!(json["error"], "invalid_request", "{body}");
        assert!(
            json["detail"].as_str().unwrap().contains(field),
            "detail should name {field}: {}",
            answer.body
        );
    }
    assert_eq!(app.intent_count().await, 0);
}

#[tokio::test]
async fn the_body_is_json_whatever_the_content_type_says() {
    let app = TestApp::spawn().await;
    for content_type in [
        None,
        Some("application/json"),
        Some("application/x-www-form-urlencoded"),
        Some("text/plain"),
    ] {
        let mut request = app
            .client
            .post(format!("{}/v1/payment_intents", app.address))
            .bearer_auth(DEMO_TOKEN)
            .body(SEED_BODY);
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        assert_eq!(
            request.send().await.unwrap().status(),
            201,
            "{content_type:?}"
        );
    }
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_json_errors() {
    let app = TestApp::spawn().await;
    let answer = app.get("/v2/nothing").await;
    assert_eq!(answer.status, 404);
    assert_eq!(answer.json()["error"], "not_found");
    let answer = Answer::of(
        app.client
            .delete(format!("{}/v1/payment_intents", app.address))
            .bearer_auth(DEMO_TOKEN)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(answer.status, 405);
    assert_eq!(answer.json()["error"], "method_not_allowed");
}

/// serde reads a JSON array into a struct field by field, by position; a body is never that.
#[tokio::test]
async fn an_array_body_is_400_and_creates_nothing() {
    let app = TestApp::spawn().await;
    let positional = r#"["evm:31337","0x5FbDB2315678afecb367f032d93F642f64180aa3","0x70997970C51812dc3A010C7d01b50e0d17dc79C8","0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC","100000000",900]"#;
    for key in [None, Some("array-1")] {
        let answer = app.create_intent(DEMO_TOKEN, key, positional).await;
        assert_eq!(answer.status, 400, "{}", answer.body);
        assert_eq!(answer.json()["error"], "invalid_request");
        assert_eq!(
            answer.json()["detail"],
            "request body must be a JSON object"
        );
    }
    assert_eq!(app.intent_count().await, 0);
}
