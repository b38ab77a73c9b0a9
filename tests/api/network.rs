//! Honest answers under network faults between the app and PostgreSQL, injected by a proxy that
//! reads the wire protocol: a lost COMMIT answer, a connection cut before a statement, a lost claim
//! answer, delays, and a network that goes silent.

use std::time::{Duration, Instant};

use crate::helpers::{
    Answer, DEMO_MERCHANT, DEMO_TOKEN, Fault, Receiver, SEED_BODY, TestApp, body_with_amount,
};

/// What a test may add to the configured timeout before an answer counts as late: scheduling on a
/// loaded machine, never a wait the server chose.
const MARGIN: Duration = Duration::from_secs(3);

async fn intents_with_id(app: &TestApp, id: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM payment_intents WHERE id = $1")
        .bind(id)
        .fetch_one(&app.db)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_keyed_commit_whose_answer_is_lost_is_unknown_and_the_retry_replays_it() {
    let (app, proxy) = TestApp::spawn_behind_proxy(|_| {}).await;
    proxy.set(Fault::LoseAnswerTo("idempotency_complete"));
    let lost = app
        .create_intent(DEMO_TOKEN, Some("lost-commit"), SEED_BODY)
        .await;
    assert_eq!(lost.status, 503, "{}", lost.body);
    assert_eq!(lost.json()["error"], "unavailable");
    let detail = lost.json()["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("unknown"), "{detail}");
    assert!(
        detail.contains("retry with the same Idempotency-Key \"lost-commit\""),
        "{detail}"
    );
    assert!(!detail.contains("nothing was committed"), "{detail}");

    // It did commit: the retry learns so, and nothing runs twice.
    assert_eq!(app.intent_count().await, 1);
    let retry = app
        .create_intent(DEMO_TOKEN, Some("lost-commit"), SEED_BODY)
        .await;
    assert_eq!(retry.status, 201, "{}", retry.body);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    let id = retry.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(intents_with_id(&app, &id).await, 1);
    assert_eq!(app.intent_count().await, 1);

    let metrics = app.get("/metrics").await.body;
    assert!(
        metrics.contains(r#"idempotency_outcomes_total{outcome="commit_unknown"}"#),
        "the outcome is counted as unknown"
    );
}

#[tokio::test]
async fn an_unkeyed_commit_whose_answer_is_lost_may_have_been_applied() {
    // The webhook worker's transactions end with a COMMIT too; the fault is for the request's.
    let (app, proxy) = TestApp::spawn_behind_proxy(|s| s.webhooks.deliver = false).await;
    proxy.set(Fault::LoseAnswerTo("COMMIT"));
    let lost = app.create_intent(DEMO_TOKEN, None, SEED_BODY).await;
    assert_eq!(lost.status, 503, "{}", lost.body);
    let detail = lost.json()["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("may have been applied"), "{detail}");
    assert!(!detail.contains("nothing was committed"), "{detail}");
    assert_eq!(app.intent_count().await, 1, "it was applied");
}

#[tokio::test]
async fn a_commit_cut_before_the_database_saw_it_is_unknown_and_the_retry_runs_afresh() {
    let (app, proxy) = TestApp::spawn_behind_proxy(|_| {}).await;
    proxy.set(Fault::CutBefore("idempotency_complete"));
    let cut = app
        .create_intent(DEMO_TOKEN, Some("cut-commit"), SEED_BODY)
        .await;
    assert_eq!(cut.status, 503, "{}", cut.body);
    let detail = cut.json()["detail"].as_str().unwrap().to_owned();
    // The server cannot tell a COMMIT lost on its way from an answer lost on its way back.
    assert!(detail.contains("unknown"), "{detail}");
    assert_eq!(app.intent_count().await, 0, "it did not commit");

    let retry = app
        .create_intent(DEMO_TOKEN, Some("cut-commit"), SEED_BODY)
        .await;
    assert_eq!(retry.status, 201, "{}", retry.body);
    assert_eq!(retry.header("idempotent-replayed"), None, "it ran afresh");
    assert_eq!(app.intent_count().await, 1);
    let record = app.key_record(DEMO_MERCHANT, "cut-commit").await.unwrap();
    assert_eq!((record.state.as_str(), record.attempt), ("completed", 2));
}

#[tokio::test]
async fn a_write_cut_before_the_commit_says_nothing_was_committed_and_frees_the_key() {
    let (app, proxy) = TestApp::spawn_behind_proxy(|_| {}).await;
    proxy.set(Fault::CutBefore("INSERT INTO payment_intents"));
    let cut = app
        .create_intent(DEMO_TOKEN, Some("cut-insert"), SEED_BODY)
        .await;
    assert_eq!(cut.status, 503, "{}", cut.body);
    assert!(
        cut.json()["detail"]
            .as_str()
            .unwrap()
            .contains("nothing was committed"),
        "{}",
        cut.body
    );
    assert_eq!(app.intent_count().await, 0);

    // The lease was ended: the retry runs at once instead of waiting it out.
    let retry = app
        .create_intent(DEMO_TOKEN, Some("cut-insert"), SEED_BODY)
        .await;
    assert_eq!(retry.status, 201, "{}", retry.body);
    assert_eq!(app.intent_count().await, 1);
}

/// The claim committed, its answer never came back: the app ends that lease by the token it chose
/// for the claim, so the key is not blocked for the lease (60 s here, longer than `wait_until`
/// waits, so only a release can satisfy it).
#[tokio::test]
async fn a_lost_claim_answer_does_not_block_its_key_for_the_lease() {
    let (app, proxy) = TestApp::spawn_behind_proxy(|s| {
        s.idempotency.lease = Duration::from_secs(60);
        s.request_timeout = Duration::from_secs(20);
    })
    .await;
    proxy.set(Fault::LoseAnswerTo("INSERT INTO idempotency_keys"));
    let lost = app
        .create_intent(DEMO_TOKEN, Some("lost-claim"), SEED_BODY)
        .await;
    assert_eq!(lost.status, 503, "{}", lost.body);
    assert_eq!(app.intent_count().await, 0);
    let record = app.key_record(DEMO_MERCHANT, "lost-claim").await;
    assert!(record.is_some(), "the claim itself committed");

    app.wait_until(
        "the lost claim's lease is ended",
        "(SELECT lease_expires_at <= now() FROM idempotency_keys WHERE key = 'lost-claim')",
    )
    .await;
    let retry = app
        .create_intent(DEMO_TOKEN, Some("lost-claim"), SEED_BODY)
        .await;
    assert_eq!(retry.status, 201, "{}", retry.body);
    assert_eq!(app.intent_count().await, 1);
}

#[tokio::test]
async fn slow_messages_still_get_their_answer() {
    let (app, proxy) = TestApp::spawn_behind_proxy(|_| {}).await;
    proxy.set(Fault::Delay(Duration::from_millis(50)));
    let created = app.create_intent(DEMO_TOKEN, Some("slow"), SEED_BODY).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(app.get_intent(DEMO_TOKEN, &id).await.status, 200);
}

/// Every kind of request, while no packet reaches the database: each is answered 503 within the
/// request timeout (plus a margin for a loaded machine), `/readyz` says 503, and once the network
/// works again for new connections the API serves, with exactly one intent per key.
#[tokio::test]
async fn every_request_is_answered_in_time_while_the_database_is_silent() {
    let timeout = Duration::from_secs(2);
    let (app, proxy) = TestApp::spawn_behind_proxy(|s| s.request_timeout = timeout).await;
    let existing = app
        .create_intent(DEMO_TOKEN, Some("before"), SEED_BODY)
        .await;
    let id = existing.json()["id"].as_str().unwrap().to_owned();

    proxy.set(Fault::Silent);
    let started = Instant::now();
    let (keyed, unkeyed, read, list, ready) = tokio::join!(
        app.create_intent(DEMO_TOKEN, Some("during"), SEED_BODY),
        app.create_intent(DEMO_TOKEN, None, SEED_BODY),
        app.get_intent(DEMO_TOKEN, &id),
        app.list(DEMO_TOKEN, "limit=5"),
        app.get("/readyz"),
    );
    let elapsed = started.elapsed();
    for answer in [&keyed, &unkeyed, &read, &list, &ready] {
        assert_eq!(answer.status, 503, "{}", answer.body);
        assert!(answer.header("retry-after").is_some());
    }
    assert!(
        elapsed < timeout + MARGIN,
        "answered after {elapsed:?} with a {timeout:?} timeout"
    );

    proxy.set(Fault::None);
    let retried = retry_until_created(&app, "during").await;
    assert_eq!(retried.status, 201, "{}", retried.body);
    assert_eq!(app.get("/readyz").await.status, 200);
    let during = retried.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(intents_with_id(&app, &during).await, 1);
}

/// Every pooled connection goes silent while new ones would work: the pool finds out and replaces
/// them, and the API serves again within a few request timeouts, not after TCP gives up.
#[tokio::test]
async fn with_every_open_connection_silent_the_api_serves_again_within_seconds() {
    let timeout = Duration::from_secs(2);
    let (app, proxy) = TestApp::spawn_behind_proxy(|s| s.request_timeout = timeout).await;
    let bodies: Vec<String> = (1..=6).map(|i| body_with_amount(&i.to_string())).collect();
    let warm = futures::future::join_all(
        bodies
            .iter()
            .map(|body| app.create_intent(DEMO_TOKEN, None, body)),
    )
    .await;
    for answer in &warm {
        assert_eq!(answer.status, 201, "{}", answer.body);
    }

    proxy.set(Fault::SilenceOpenConnections);
    let started = Instant::now();
    let created = retry_until_created(&app, "after-silence").await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert!(
        started.elapsed() < 3 * timeout + MARGIN,
        "served again after {:?}",
        started.elapsed()
    );
}

/// Background work caught mid-statement by a connection that goes silent (no reset, packets
/// vanish) is cut at its deadline as a request would be: the webhook worker's claim, then the
/// recorder of finished attempts. Each time the connection is closed rather than reused, the
/// work is done again on a new one, and every event is delivered and recorded, within seconds
/// rather than after TCP gives up.
#[tokio::test]
async fn background_work_caught_by_a_silent_connection_resumes_after_its_deadline() {
    let (app, proxy) = TestApp::spawn_behind_proxy(|_| {}).await;
    let receiver = Receiver::start(vec![]).await;
    let body = format!(r#"{{"url":"{}"}}"#, receiver.url);
    let endpoint = app
        .post_as(DEMO_TOKEN, "/v1/webhook_endpoints", None, &body)
        .await;
    assert_eq!(endpoint.status, 201, "{}", endpoint.body);
    let delivered = |n: usize| {
        format!("(SELECT count(*) FROM webhook_deliveries WHERE state = 'delivered') = {n}")
    };

    // The delivery worker's claim (it polls every 250 ms) goes silent.
    proxy.set(Fault::SilenceAt("d.next_attempt_at <= now()"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while proxy.armed() {
        assert!(Instant::now() < deadline, "the worker never claimed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let first = app.create_intent(DEMO_TOKEN, None, SEED_BODY).await;
    assert_eq!(first.status, 201, "{}", first.body);
    receiver.wait_for(1).await;
    app.wait_until("the first delivery is recorded", &delivered(1))
        .await;

    // The recorder's write goes silent: the attempt is sent again after its lease, and recorded.
    proxy.set(Fault::SilenceAt("INSERT INTO webhook_attempts"));
    let second = app
        .create_intent(DEMO_TOKEN, None, body_with_amount("2").as_str())
        .await;
    assert_eq!(second.status, 201, "{}", second.body);
    app.wait_until("the second delivery is recorded", &delivered(2))
        .await;
    assert!(!proxy.armed(), "the recorder's statement went silent");
}

/// Retries a create with one key, as a client would (on 503 and 409, after `Retry-After`), until it
/// is answered otherwise or 30 s have passed.
async fn retry_until_created(app: &TestApp, key: &str) -> Answer {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = app.create_intent(DEMO_TOKEN, Some(key), SEED_BODY).await;
        if !matches!(answer.status, 503 | 409) || Instant::now() > deadline {
            return answer;
        }
        let wait = answer
            .header("retry-after")
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        tokio::time::sleep(Duration::from_secs(wait)).await;
    }
}
