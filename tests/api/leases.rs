//! Leases, takeover, and the zombie whose completion must lose.

use std::time::Duration;

use crate::helpers::{DEMO_MERCHANT, DEMO_TOKEN, SEED_BODY, TestApp, fingerprint, spawn_create};

/// Writes the record a crashed first attempt would leave: in flight, lease ending in `lease_secs`.
async fn abandoned_claim(app: &TestApp, key: &str, lease_secs: f64) {
    sqlx::query(
        "INSERT INTO idempotency_keys (scope, key, fingerprint, state, attempt, lease_expires_at, created_at, expires_at) \
         VALUES ($1, $2, $3, 'in_flight', 1, now() + make_interval(secs => $4), now(), now() + interval '1 day')",
    )
    .bind(DEMO_MERCHANT)
    .bind(key)
    .bind(&fingerprint("POST", "/v1/payment_intents", SEED_BODY)[..])
    .bind(lease_secs)
    .execute(&app.db)
    .await
    .unwrap();
}

#[tokio::test]
async fn a_live_lease_answers_409_with_retry_after() {
    let app = TestApp::spawn().await;
    abandoned_claim(&app, "busy", 30.0).await;
    let answer = app.create_intent(DEMO_TOKEN, Some("busy"), SEED_BODY).await;
    assert_eq!(answer.status, 409);
    assert_eq!(answer.json()["error"], "idempotency_key_in_flight");
    assert!(
        answer
            .header("retry-after")
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= 1
    );
    assert_eq!(app.intent_count().await, 0);
    // A different body under a live claim is still a mismatch, not an in-flight wait.
    let other = app
        .create_intent(DEMO_TOKEN, Some("busy"), &SEED_BODY.replace("900", "901"))
        .await;
    assert_eq!(other.status, 422);
}

#[tokio::test]
async fn an_expired_lease_is_taken_over_by_the_next_attempt() {
    let app = TestApp::spawn().await;
    abandoned_claim(&app, "crashed-1", -1.0).await;

    let answer = app
        .create_intent(DEMO_TOKEN, Some("crashed-1"), SEED_BODY)
        .await;
    assert_eq!(answer.status, 201);
    let record = app.key_record(DEMO_MERCHANT, "crashed-1").await.unwrap();
    assert_eq!((record.state.as_str(), record.attempt), ("completed", 2));
    assert_eq!(app.intent_count().await, 1);

    let replay = app
        .create_intent(DEMO_TOKEN, Some("crashed-1"), SEED_BODY)
        .await;
    assert_eq!(
        (replay.status, replay.body.as_str()),
        (201, answer.body.as_str())
    );
}

#[tokio::test]
async fn a_zombie_attempt_loses_the_compare_and_set_and_its_writes_vanish() {
    // The request timeout is longer than the lease here on purpose: it stands for a process that
    // stalls (GC pause, SIGSTOP, a slow disk) where no timer fires in time.
    let app = TestApp::spawn_with(|s| {
        s.idempotency.lease = Duration::from_secs(1);
        s.request_timeout = Duration::from_secs(60);
    })
    .await;

    let blocker = app.block_intent_inserts().await;
    let zombie = spawn_create(&app.address, "zombie-1");
    app.wait_until(
        "attempt 1 is stuck inside its transaction",
        &waiting_inserts(1),
    )
    .await;
    app.wait_until(
        "attempt 1's lease has expired",
        "SELECT lease_expires_at <= now() FROM idempotency_keys WHERE key = 'zombie-1'",
    )
    .await;

    let successor = spawn_create(&app.address, "zombie-1");
    app.wait_until(
        "attempt 2 took over",
        "SELECT attempt = 2 FROM idempotency_keys WHERE key = 'zombie-1'",
    )
    .await;
    app.wait_until("attempt 2 is stuck too", &waiting_inserts(2))
        .await;

    blocker.release().await;
    let (zombie, successor) = (
        zombie.await.unwrap().unwrap(),
        successor.await.unwrap().unwrap(),
    );

    assert_eq!(successor.status, 201, "{}", successor.body);
    assert_eq!(zombie.status, 409, "{}", zombie.body);
    assert_eq!(zombie.json()["error"], "idempotency_key_lease_lost");
    let ids: Vec<String> = sqlx::query_scalar("SELECT id FROM payment_intents")
        .fetch_all(&app.db)
        .await
        .unwrap();
    assert_eq!(
        ids,
        vec![successor.json()["id"].as_str().unwrap().to_owned()],
        "exactly one intent: attempt 2's"
    );
    let record = app.key_record(DEMO_MERCHANT, "zombie-1").await.unwrap();
    assert_eq!((record.state.as_str(), record.attempt), ("completed", 2));

    let replay = app
        .create_intent(DEMO_TOKEN, Some("zombie-1"), SEED_BODY)
        .await;
    assert_eq!(
        replay.body, successor.body,
        "the one answer that left the server"
    );
}

/// SQL that holds once `n` intent inserts wait on a lock.
pub fn waiting_inserts(n: usize) -> String {
    format!(
        "SELECT count(*) = {n} FROM pg_stat_activity \
         WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO payment_intents%'"
    )
}
