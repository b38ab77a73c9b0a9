//! Webhooks: endpoints, signatures checked by the Standard Webhooks library (not our code), at-least
//! once delivery to real HTTP receivers, and where a webhook may not go.

use std::time::Duration;

use standardwebhooks::Webhook;

use crate::helpers::{
    Answer, DEMO_MERCHANT, DEMO_TOKEN, Received, Receiver, Reply, SEED_BODY, ServerProcess,
    TestApp, fresh_database,
};

/// Registers an endpoint for `url` (every event type unless `types`); returns its answer.
async fn register(app: &TestApp, url: &str, types: Option<&str>) -> Answer {
    let body = match types {
        Some(types) => format!(r#"{{"url":"{url}","event_types":{types}}}"#),
        None => format!(r#"{{"url":"{url}"}}"#),
    };
    app.post_as(DEMO_TOKEN, "/v1/webhook_endpoints", None, &body)
        .await
}

fn secret_of(endpoint: &Answer) -> String {
    endpoint.json()["secret"].as_str().unwrap().to_owned()
}

/// Verifies a delivery with the Standard Webhooks library.
fn verify(secret: &str, received: &Received) {
    Webhook::new(secret)
        .unwrap()
        .verify(&received.body, &received.headers)
        .expect("the signature verifies");
}

async fn attempts_of(app: &TestApp, event: &str) -> Vec<serde_json::Value> {
    let answer = app
        .get_as(DEMO_TOKEN, &format!("/v1/events/{event}/deliveries"))
        .await;
    answer.json()["data"].as_array().unwrap().clone()
}

#[tokio::test]
async fn a_signed_event_arrives_and_a_500_is_retried_with_the_same_id() {
    let app = TestApp::spawn().await;
    let receiver = Receiver::start(vec![Reply::Status(500)]).await;
    let endpoint = register(&app, &receiver.url, None).await;
    assert_eq!(endpoint.status, 201, "{}", endpoint.body);
    let secret = secret_of(&endpoint);
    assert!(secret.starts_with("whsec_"));
    app.create_intent(DEMO_TOKEN, None, SEED_BODY).await;

    let received = receiver.wait_for(2).await;
    for delivery in &received {
        verify(&secret, delivery);
    }
    let id = received[0].headers["webhook-id"].to_str().unwrap();
    assert_eq!(
        received[1].headers["webhook-id"], id,
        "a redelivery keeps its id"
    );
    assert_eq!(received[0].body, received[1].body);
    let event = app.get_as(DEMO_TOKEN, &format!("/v1/events/{id}")).await;
    assert_eq!(
        received[0].body,
        event.body.as_bytes(),
        "the body is the event"
    );

    app.wait_until(
        "the delivery is recorded as delivered",
        &format!("SELECT state = 'delivered' FROM webhook_deliveries WHERE event_id = '{id}'"),
    )
    .await;
    let attempts = attempts_of(&app, id).await;
    let statuses: Vec<i64> = attempts
        .iter()
        .map(|a| a["status_code"].as_i64().unwrap())
        .collect();
    assert_eq!(statuses, [500, 200]);
    assert_eq!(attempts[0]["endpoint_id"], endpoint.json()["id"]);
}

#[tokio::test]
async fn a_rotated_secret_and_the_previous_one_both_sign_for_a_day() {
    let app = TestApp::spawn().await;
    let receiver = Receiver::start(vec![]).await;
    let endpoint = register(&app, &receiver.url, None).await;
    let old = secret_of(&endpoint);
    let id = endpoint.json()["id"].as_str().unwrap().to_owned();
    let rotated = app
        .post_as(
            DEMO_TOKEN,
            &format!("/v1/webhook_endpoints/{id}/rotate_secret"),
            None,
            "",
        )
        .await;
    assert_eq!(rotated.status, 200, "{}", rotated.body);
    let new = secret_of(&rotated);
    assert_ne!(old, new);

    app.create_intent(DEMO_TOKEN, None, SEED_BODY).await;
    let received = receiver.wait_for(1).await;
    let signatures = received[0].headers["webhook-signature"].to_str().unwrap();
    assert_eq!(
        signatures
            .split(' ')
            .filter(|s| s.starts_with("v1,"))
            .count(),
        2
    );
    verify(&old, &received[0]);
    verify(&new, &received[0]);
}

#[tokio::test]
async fn a_receiver_that_is_down_gets_the_event_once_it_is_back() {
    let app = TestApp::spawn().await;
    // A port nothing listens on, for now.
    let address = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let endpoint = register(&app, &format!("http://{address}/hooks"), None).await;
    let secret = secret_of(&endpoint);
    app.create_intent(DEMO_TOKEN, None, SEED_BODY).await;
    app.wait_until(
        "two attempts failed",
        "SELECT count(*) >= 2 FROM webhook_attempts WHERE error LIKE 'cannot connect%'",
    )
    .await;

    let receiver = Receiver::start_at(address, vec![]).await;
    let received = receiver.wait_for(1).await;
    verify(&secret, &received[0]);
}

#[tokio::test]
async fn a_receiver_that_hangs_is_cut_at_the_timeout_and_redirects_are_not_followed() {
    let app = TestApp::spawn().await;
    let elsewhere = Receiver::start(vec![]).await;
    let receiver = Receiver::start(vec![Reply::Hang, Reply::Redirect(elsewhere.url.clone())]).await;
    register(&app, &receiver.url, None).await;
    app.create_intent(DEMO_TOKEN, None, SEED_BODY).await;

    let received = receiver.wait_for(3).await;
    let id = received[0].headers["webhook-id"]
        .to_str()
        .unwrap()
        .to_owned();
    app.wait_until(
        "the third attempt is recorded",
        "SELECT count(*) = 3 FROM webhook_attempts",
    )
    .await;
    let attempts = attempts_of(&app, &id).await;
    assert!(
        attempts[0]["error"]
            .as_str()
            .unwrap()
            .contains("no answer within 2 s"),
        "{:?}",
        attempts[0]
    );
    assert_eq!(attempts[1]["status_code"], 302, "a redirect is a failure");
    assert_eq!(attempts[2]["status_code"], 200);
    assert!(
        elsewhere.received().is_empty(),
        "the redirect was not followed"
    );
}

#[tokio::test]
async fn endpoints_are_created_listed_filtered_and_deleted() {
    let app = TestApp::spawn().await;
    let receiver = Receiver::start(vec![]).await;
    let body = format!(
        r#"{{"url":"{}","event_types":["payment_intent.canceled"]}}"#,
        receiver.url
    );
    let created = app
        .post_as(DEMO_TOKEN, "/v1/webhook_endpoints", Some("we-1"), &body)
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(
        created.header("location"),
        Some(format!("/v1/webhook_endpoints/{id}").as_str())
    );
    assert_eq!(created.json()["state"], "enabled");
    let replay = app
        .post_as(DEMO_TOKEN, "/v1/webhook_endpoints", Some("we-1"), &body)
        .await;
    assert_eq!(replay.body, created.body, "a replay is the same answer");

    let shown = app
        .get_as(DEMO_TOKEN, &format!("/v1/webhook_endpoints/{id}"))
        .await;
    assert_eq!(shown.status, 200);
    assert!(
        shown.json().get("secret").is_none(),
        "the secret is shown once"
    );
    let listed = app.get_as(DEMO_TOKEN, "/v1/webhook_endpoints").await.json();
    assert_eq!(listed["data"].as_array().unwrap().len(), 1);
    assert!(listed["data"][0].get("secret").is_none());

    // Only the subscribed type arrives.
    let intent = app.create_intent(DEMO_TOKEN, None, SEED_BODY).await;
    let intent_id = intent.json()["id"].as_str().unwrap().to_owned();
    app.cancel(DEMO_TOKEN, &intent_id, None).await;
    let received = receiver.wait_for(1).await;
    let event: serde_json::Value = serde_json::from_slice(&received[0].body).unwrap();
    assert_eq!(event["type"], "payment_intent.canceled");
    assert_eq!(
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM webhook_deliveries")
            .fetch_one(&app.db)
            .await
            .unwrap(),
        1,
        "the created event owed this endpoint nothing"
    );

    for (body, field) in [
        (r#"{"url":"ftp://example.com/"}"#, "url"),
        (r#"{"url":"not a url"}"#, "url"),
        (
            r#"{"url":"http://127.0.0.1:9/","event_types":["payment_intent.paid"]}"#,
            "event_types",
        ),
        (r#"{"url":"http://127.0.0.1:9/","secret":"mine"}"#, "secret"),
    ] {
        let refused = app
            .post_as(DEMO_TOKEN, "/v1/webhook_endpoints", None, body)
            .await;
        assert_eq!(refused.status, 400, "{body}: {}", refused.body);
        assert!(
            refused.json()["detail"].as_str().unwrap().contains(field),
            "{}",
            refused.body
        );
    }

    let deleted = app
        .delete_as(DEMO_TOKEN, &format!("/v1/webhook_endpoints/{id}"))
        .await;
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    assert_eq!(deleted.json()["deleted"], true);
    assert_eq!(
        app.get_as(DEMO_TOKEN, &format!("/v1/webhook_endpoints/{id}"))
            .await
            .status,
        404
    );
    assert_eq!(
        app.delete_as(DEMO_TOKEN, &format!("/v1/webhook_endpoints/{id}"))
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn private_and_plain_http_addresses_are_refused_unless_allowed() {
    let app = TestApp::spawn_with(|s| {
        s.webhooks.allow_http = false;
        s.webhooks.allow_private_networks = false;
    })
    .await;
    for url in [
        "http://example.com/hooks",
        "https://127.0.0.1/hooks",
        "https://10.0.0.8/hooks",
        "https://169.254.169.254/latest/meta-data",
        "https://[::1]/hooks",
        "https://[::ffff:192.168.0.1]/hooks",
        "https://localhost/hooks",
    ] {
        let refused = register(&app, url, None).await;
        assert_eq!(refused.status, 400, "{url}: {}", refused.body);
        assert!(
            refused.json()["detail"]
                .as_str()
                .unwrap()
                .starts_with("url: ")
        );
    }

    // An endpoint stored when its address was allowed (or whose name resolved elsewhere then) is
    // checked again at delivery: nothing is sent.
    let receiver = Receiver::start(vec![]).await;
    sqlx::query(
        "INSERT INTO webhook_endpoints (merchant_id, id, url, secret) \
         VALUES ($1, 'we_000000000000000000000001', $2, 'whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=')",
    )
    .bind(DEMO_MERCHANT)
    .bind(receiver.url.replace("http://", "https://"))
    .execute(&app.db)
    .await
    .unwrap();
    app.create_intent(DEMO_TOKEN, None, SEED_BODY).await;
    app.wait_until(
        "an attempt is recorded",
        "SELECT count(*) >= 1 FROM webhook_attempts",
    )
    .await;
    let error: String = sqlx::query_scalar("SELECT error FROM webhook_attempts LIMIT 1")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert!(error.contains("not a public address"), "{error}");
    assert!(receiver.received().is_empty());
}

#[tokio::test]
async fn an_endpoint_failing_for_the_configured_period_is_disabled() {
    let app = TestApp::spawn_with(|s| s.webhooks.disable_after = Duration::from_secs(1)).await;
    let receiver = Receiver::start(vec![Reply::Status(503); 100]).await;
    let endpoint = register(&app, &receiver.url, None).await;
    let id = endpoint.json()["id"].as_str().unwrap().to_owned();
    for _ in 0..3 {
        app.create_intent(DEMO_TOKEN, None, SEED_BODY).await;
    }
    app.wait_until(
        "the endpoint is disabled",
        &format!("SELECT disabled_at IS NOT NULL FROM webhook_endpoints WHERE id = '{id}'"),
    )
    .await;
    let shown = app
        .get_as(DEMO_TOKEN, &format!("/v1/webhook_endpoints/{id}"))
        .await
        .json();
    assert_eq!(shown["state"], "disabled");
    assert!(shown["disabled_at"].is_string());
    // Its deliveries wait, out of the way of every other endpoint's: never due again.
    app.wait_until(
        "the disabled endpoint's deliveries wait at the end of time",
        &format!(
            "SELECT bool_and(state = 'pending' AND next_attempt_at = 'infinity') \
               FROM webhook_deliveries WHERE endpoint_id = '{id}'"
        ),
    )
    .await;
    let waiting: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = '{id}'"
    ))
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(waiting, 3);
}

/// Two replicas share the queue with SKIP LOCKED and leases: every event arrives, none twice.
#[tokio::test]
async fn two_replicas_deliver_every_event_once() {
    let first = TestApp::spawn().await;
    let second = TestApp::spawn_on(&first.database_url, |_| {}).await;
    let receiver = Receiver::start(vec![]).await;
    register(&first, &receiver.url, None).await;
    for i in 0..20 {
        let app = if i % 2 == 0 { &first } else { &second };
        assert_eq!(
            app.create_intent(DEMO_TOKEN, None, SEED_BODY).await.status,
            201
        );
    }
    first
        .wait_until(
            "every delivery is done",
            "SELECT count(*) = 20 FROM webhook_deliveries WHERE state = 'delivered'",
        )
        .await;
    let received = receiver.received();
    let mut ids: Vec<String> = received
        .iter()
        .map(|r| r.headers["webhook-id"].to_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!((received.len(), ids.len()), (20, 20));
}

/// `WEBHOOK_DELIVERY=false`: a replica that only serves requests writes its events and leaves
/// them to a replica that delivers.
#[tokio::test]
async fn a_replica_that_does_not_deliver_leaves_its_events_to_one_that_does() {
    let serving = TestApp::spawn_with(|s| s.webhooks.deliver = false).await;
    let receiver = Receiver::start(vec![]).await;
    register(&serving, &receiver.url, None).await;
    assert_eq!(
        serving
            .create_intent(DEMO_TOKEN, None, SEED_BODY)
            .await
            .status,
        201
    );
    // Absence has no event to wait for: a delivering worker polls every 250 ms, so two seconds
    // would have seen several rounds.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        receiver.received().is_empty(),
        "the serving replica sent nothing"
    );
    let attempts: i32 = sqlx::query_scalar("SELECT attempts FROM webhook_deliveries")
        .fetch_one(&serving.db)
        .await
        .unwrap();
    assert_eq!(attempts, 0);

    let _delivering = TestApp::spawn_on(&serving.database_url, |_| {}).await;
    let received = receiver.wait_for(1).await;
    assert_eq!(received.len(), 1);
}

/// The replica sending a delivery is SIGKILLed while the receiver holds the request: once the
/// lease passes, another replica sends it again, with the same id.
#[tokio::test]
async fn a_delivery_cut_short_by_a_killed_replica_is_sent_again_by_another() {
    let database_url = fresh_database().await;
    let mut server = ServerProcess::start(
        &database_url,
        &[
            ("WEBHOOK_ALLOW_HTTP", "true"),
            ("WEBHOOK_ALLOW_PRIVATE_NETWORKS", "true"),
            ("WEBHOOK_TIMEOUT_SECONDS", "2"),
        ],
    )
    .await;
    let receiver = Receiver::start(vec![Reply::Hang]).await;
    let client = reqwest::Client::new();
    let post = |path: &str, body: String| {
        client
            .post(format!("{}{path}", server.address))
            .bearer_auth(DEMO_TOKEN)
            .body(body)
            .send()
    };
    let endpoint = post(
        "/v1/webhook_endpoints",
        format!(r#"{{"url":"{}"}}"#, receiver.url),
    )
    .await
    .unwrap();
    assert_eq!(endpoint.status(), 201);
    let created = post("/v1/payment_intents", SEED_BODY.to_owned())
        .await
        .unwrap();
    assert_eq!(created.status(), 201);

    let first = receiver.wait_for(1).await;
    server.child.kill().expect("SIGKILL the delivering replica");
    server.child.wait().unwrap();

    let other = TestApp::spawn_on(&database_url, |_| {}).await;
    let received = receiver.wait_for(2).await;
    assert_eq!(
        received[1].headers["webhook-id"],
        first[0].headers["webhook-id"]
    );
    other
        .wait_until(
            "the delivery is done",
            "SELECT state = 'delivered' FROM webhook_deliveries",
        )
        .await;
}

/// At most 64 KiB of an answer is read: an endpoint that sends more, and then nothing, has
/// answered (here 200, so delivered) as soon as 64 KiB arrived, not at the timeout.
#[tokio::test]
async fn only_the_first_64_kib_of_an_answer_are_read() {
    let app = TestApp::spawn().await;
    let receiver = Receiver::start(vec![Reply::EndlessBody(128 * 1024)]).await;
    register(&app, &receiver.url, None).await;
    app.create_intent(DEMO_TOKEN, None, SEED_BODY).await;
    app.wait_until(
        "the delivery is done",
        "SELECT state = 'delivered' FROM webhook_deliveries",
    )
    .await;
    let (attempts, status, latency_ms): (i64, Option<i16>, Option<i32>) =
        sqlx::query_as("SELECT count(*), max(status_code), max(latency_ms) FROM webhook_attempts")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!((attempts, status), (1, Some(200)));
    // Reading on would have waited for the rest until the 2 s timeout cut it.
    assert!(latency_ms.unwrap() < 2000, "{latency_ms:?} ms");
}
