//! A process killed inside its transaction leaves neither the intent nor a completion;
//! after the lease, the retry executes exactly once.

use crate::{
    helpers::{DEMO_MERCHANT, DEMO_TOKEN, SEED_BODY, ServerProcess, TestApp, spawn_create},
    leases::waiting_inserts,
};

#[tokio::test]
async fn a_process_killed_inside_its_transaction_leaves_nothing_and_the_retry_runs_once() {
    let app = TestApp::spawn().await;
    let mut server = ServerProcess::start(
        &app.database_url,
        &[
            ("IDEMPOTENCY_LEASE_SECONDS", "3"),
            ("REQUEST_TIMEOUT_SECONDS", "2"),
        ],
    )
    .await;

    let blocker = app.block_intent_inserts().await;
    let doomed = spawn_create(&server.address, "crash-1");
    app.wait_until("the request is inside its transaction", &waiting_inserts(1))
        .await;
    server.child.kill().expect("SIGKILL the server");
    server.child.wait().unwrap();
    assert!(
        doomed.await.unwrap().is_err(),
        "the client saw the connection die"
    );
    blocker.release().await;

    // The dead server's backend finishes its INSERT once unblocked, then finds its client gone and
    // rolls back: wait until no session of it remains before looking.
    app.wait_until(
        "the killed server's sessions are gone",
        "SELECT count(*) = 0 FROM pg_stat_activity WHERE datname = current_database() \
         AND query LIKE '%INSERT INTO payment_intents%' AND query NOT LIKE '%pg_stat_activity%'",
    )
    .await;
    assert_eq!(
        app.intent_count().await,
        0,
        "the intent died with its transaction"
    );
    assert_eq!(app.event_count().await, 0, "and so did its event");
    let record = app.key_record(DEMO_MERCHANT, "crash-1").await.unwrap();
    assert_eq!(
        (
            record.state.as_str(),
            record.attempt,
            record.response_status
        ),
        ("in_flight", 1, None)
    );

    let early = app
        .create_intent(DEMO_TOKEN, Some("crash-1"), SEED_BODY)
        .await;
    assert_eq!(early.status, 409, "the lease still protects the key");

    app.wait_until(
        "the lease has expired",
        "SELECT lease_expires_at <= now() FROM idempotency_keys WHERE key = 'crash-1'",
    )
    .await;
    let retry = app
        .create_intent(DEMO_TOKEN, Some("crash-1"), SEED_BODY)
        .await;
    assert_eq!(retry.status, 201, "{}", retry.body);
    assert_eq!(app.intent_count().await, 1);
    assert_eq!(app.event_count().await, 1, "the commit wrote both");
    let record = app.key_record(DEMO_MERCHANT, "crash-1").await.unwrap();
    assert_eq!((record.state.as_str(), record.attempt), ("completed", 2));
}
