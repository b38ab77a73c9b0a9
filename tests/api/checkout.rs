//! The checkout API as the page uses it (`docs/checkout.md`), without a browser: the page and its
//! headers, what a client secret opens, and that canceling the intent ends its power to pay. The
//! page itself is tested in Chromium (`tests/browser/`).

use serde_json::json;

use crate::helpers::{
    DEMO_TOKEN, SEED_BODY, TestApp,
    chain::{Anvil, PAYER_KEY},
};

async fn as_page(app: &TestApp, secret: &str, path: &str) -> (u16, serde_json::Value) {
    let answer = reqwest::Client::new()
        .get(format!("{}{path}", app.address))
        .bearer_auth(secret)
        .send()
        .await
        .unwrap();
    (
        answer.status().as_u16(),
        answer.json().await.unwrap_or_default(),
    )
}

#[tokio::test]
async fn the_page_is_served_under_a_strict_policy_in_the_payers_language() {
    let app = TestApp::spawn().await;
    let intent = app.create_intent(DEMO_TOKEN, None, SEED_BODY).await.json();
    let url = intent["checkout_url"].as_str().unwrap();
    let secret = intent["client_secret"].as_str().unwrap();
    assert_eq!(url.split_once('#').unwrap().1, secret);
    let path = url
        .trim_start_matches("http://localhost:8080")
        .split('#')
        .next()
        .unwrap();
    let page = reqwest::Client::new()
        .get(format!("{}{path}", app.address))
        .header("accept-language", "zh-TW,zh;q=0.9")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let policy = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(policy.contains("default-src 'none'") && policy.contains("frame-ancestors 'none'"));
    assert_eq!(page.headers()["x-frame-options"], "DENY");
    assert!(
        page.text()
            .await
            .unwrap()
            .contains(r#"<html lang="zh-TW">"#)
    );
    let script = app.get("/checkout/assets/checkout.js").await;
    assert_eq!(script.status, 200);
    assert!(script.body.contains("eth_signTypedData_v4"));
}

#[tokio::test]
async fn a_client_secret_opens_its_intents_public_view_and_canceling_ends_its_power_to_pay() {
    let anvil = Anvil::start().await;
    let settlement = anvil.settlement(1);
    let app = TestApp::spawn_with(move |s| s.settlement = settlement).await;
    let body = SEED_BODY.replace("}", r#","metadata":{"order":"1001"}}"#);
    let intent = app.create_intent(DEMO_TOKEN, None, &body).await.json();
    let (id, secret) = (
        intent["id"].as_str().unwrap(),
        intent["client_secret"].as_str().unwrap(),
    );
    let (status, view) = as_page(&app, secret, &format!("/v1/checkout/{id}")).await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["state"], "created");
    assert_eq!(view["amount_display"], "100.00");
    assert_eq!(view["symbol"], "dUSD");
    assert_eq!(view["merchant_name"], "merchant_demo");
    assert!(view.get("metadata").is_none() && view.get("client_secret").is_none());
    // A wrong secret and another intent's both say nothing.
    let wrong = format!("{id}_secret_00000000000000000000000000000000");
    assert_eq!(
        as_page(&app, &wrong, &format!("/v1/checkout/{id}")).await.0,
        404
    );
    assert_eq!(as_page(&app, secret, "/v1/payment_intents").await.0, 401);

    let (_, document) = as_page(&app, secret, &format!("/v1/checkout/{id}/authorization")).await;
    let signature = anvil.sign(PAYER_KEY, &document["typed_data"]);
    assert_eq!(app.cancel(DEMO_TOKEN, id, None).await.status, 200);
    let confirmed = reqwest::Client::new()
        .post(format!("{}/v1/checkout/{id}/confirm", app.address))
        .bearer_auth(secret)
        .header("idempotency-key", "after-cancel")
        .json(&json!({ "signature": signature }))
        .send()
        .await
        .unwrap();
    assert_eq!(confirmed.status(), 409);
    let (_, view) = as_page(&app, secret, &format!("/v1/checkout/{id}")).await;
    assert_eq!(
        (&view["state"], &view["cancellation_reason"]),
        (&json!("canceled"), &json!("merchant_request"))
    );
}
