//! SPEC §5.4: a process killed inside its transaction leaves neither the intent nor a completion;
//! after the lease, the retry executes exactly once.

use std::time::Duration;

use crate::{
    helpers::{Answer, DEMO_MERCHANT, DEMO_TOKEN, SEED_BODY, ServerProcess, TestApp, spawn_create},
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
    let record = app.key_record(DEMO_MERCHANT, "crash-1").await.unwrap();
    assert_eq!(
        (
            record.state.as_str(),
            record.attempt,
            record.response_status
        ),
        ("in_flight", 1, None)
    );

    let early = Answer::of(
        app.create_intent(DEMO_TOKEN, Some("crash-1"), SEED_BODY)
            .await,
    )
    .await;
    assert_eq!(early.status, 409, "the lease still protects the key");

    app.wait_until(
        "the lease has expired",
        "SELECT lease_expires_at <= now() FROM idempotency_keys WHERE key = 'crash-1'",
    )
    .await;
    let retry = Answer::of(
        app.create_intent(DEMO_TOKEN, Some("crash-1"), SEED_BODY)
            .await,
    )
    .await;
    assert_eq!(retry.status, 201, "{}", retry.body);
    assert_eq!(app.intent_count().await, 1);
    let record = app.key_record(DEMO_MERCHANT, "crash-1").await.unwrap();
    assert_eq!((record.state.as_str(), record.attempt), ("completed", 2));
}

/// Pooled connections are not pinged before use (`db::Connector::recycle`): one the server closed while
/// it sat idle fails its first statement. That costs the client one retryable 503, never a 500:
/// from then on checkouts ping first, so the other dead connections fail no request; and the
/// retry with the same key executes exactly once.
#[tokio::test]
async fn connections_the_database_closed_cost_a_retryable_503_and_the_retry_runs_once() {
    // No sweep may take a connection from the pool while the test counts failures.
    let app = TestApp::spawn_with(|s| s.sweep_interval = Duration::from_secs(3600)).await;
    let warm =
        futures::future::join_all((0..6).map(|_| app.create_intent(DEMO_TOKEN, None, SEED_BODY)))
            .await;
    assert!(warm.iter().all(|r| r.status() == 201), "the pool is warm");

    let sessions: Vec<i32> = sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() \
         AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
    )
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert!(!sessions.is_empty());
    let pids = sessions
        .iter()
        .map(i32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    sqlx::query(&format!(
        "SELECT pg_terminate_backend(pid) FROM unnest(ARRAY[{pids}]) AS pid"
    ))
    .execute(&app.db)
    .await
    .unwrap();
    app.wait_until(
        "the terminated sessions are gone",
        &format!("SELECT count(*) = 0 FROM pg_stat_activity WHERE pid IN ({pids})"),
    )
    .await;

    let mut statuses = Vec::new();
    for _ in 0..=sessions.len() {
        let answer = Answer::of(
            app.create_intent(DEMO_TOKEN, Some("after-terminate"), SEED_BODY)
                .await,
        )
        .await;
        statuses.push(answer.status);
        if answer.status == 201 {
            break;
        }
        assert_eq!(answer.status, 503, "{}", answer.body);
        assert!(answer.header("retry-after").is_some());
    }
    assert_eq!(
        statuses,
        [503, 201],
        "one failure, then the pool replaced the rest"
    );
    assert_eq!(app.intent_count().await, 7);
    let record = app
        .key_record(DEMO_MERCHANT, "after-terminate")
        .await
        .unwrap();
    assert_eq!(record.state, "completed");
}

/// A request cancelled while its statement is still out (here a GET stuck behind a lock, whose
/// client hangs up) gives its connection back with that statement unanswered. The next request must
/// not inherit the wait: the pool closes such a connection and opens another (`db::settled`).
#[tokio::test]
async fn a_connection_given_back_mid_statement_is_not_handed_to_the_next_request() {
    // One connection, so the next request could only get the abandoned one or a new one.
    let app = TestApp::spawn_with(|s| {
        s.db_max_connections = 1;
        s.sweep_interval = Duration::from_secs(3600);
    })
    .await;
    let created = Answer::of(
        app.create_intent(DEMO_TOKEN, Some("behind-a-lock"), SEED_BODY)
            .await,
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.json()["id"].as_str().unwrap().to_owned();

    let mut lock = app.db.begin().await.unwrap();
    sqlx::query("LOCK TABLE payment_intents IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .unwrap();
    let stuck = tokio::spawn(
        app.client
            .get(format!("{}/v1/payment_intents/{id}", app.address))
            .bearer_auth(DEMO_TOKEN)
            .send(),
    );
    app.wait_until(
        "the GET waits on the lock",
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity \
         WHERE wait_event_type = 'Lock' AND query LIKE '%FROM payment_intents%')",
    )
    .await;
    stuck.abort();
    app.wait_until_metric(r#"db_pool_connections{state="in_use"} 0"#)
        .await;

    // A replay reads only idempotency_keys, which is not locked: on a connection of its own it
    // answers at once; on the abandoned one it would wait until the lock is released.
    let replay = tokio::time::timeout(
        Duration::from_secs(10),
        app.create_intent(DEMO_TOKEN, Some("behind-a-lock"), SEED_BODY),
    )
    .await
    .expect("the replay waited behind the abandoned statement");
    let replay = Answer::of(replay).await;
    assert_eq!(replay.status, 201, "{}", replay.body);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.body, created.body);
    lock.rollback().await.unwrap();
}
