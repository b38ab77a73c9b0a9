//! The connection pool under failure: connections the database closed, connections given back
//! mid-statement, and no connection to be had at all. Each costs at most a retryable 503, and the
//! retry with the same key executes exactly once.

use std::time::Duration;

use sqlx::postgres::PgPoolOptions;

use crate::{
    helpers::{DEMO_MERCHANT, DEMO_TOKEN, ReplicatedPostgres, SEED_BODY, TestApp, spawn_create},
    leases::waiting_inserts,
};

/// Pooled connections in steady use are not pinged before use (`db::pool::Connector::recycle`): one
/// the server closed while it sat idle fails its first statement, unless the pool's background
/// check found it first. That costs the client at most one retryable 503, never a 500: from then on
/// checkouts ping first, so the other dead connections fail no request; and the retry with the
/// same key executes exactly once.
#[tokio::test]
async fn connections_the_database_closed_cost_a_retryable_503_and_the_retry_runs_once() {
    // No sweep may take a connection from the pool while the test counts failures.
    let app = TestApp::spawn_with(|s| s.sweep_interval = Duration::from_secs(3600)).await;
    let warm =
        futures::future::join_all((0..6).map(|_| app.create_intent(DEMO_TOKEN, None, SEED_BODY)))
            .await;
    assert!(warm.iter().all(|r| r.status == 201), "the pool is warm");

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
        let answer = app
            .create_intent(DEMO_TOKEN, Some("after-terminate"), SEED_BODY)
            .await;
        statuses.push(answer.status);
        if answer.status == 201 {
            break;
        }
        assert_eq!(answer.status, 503, "{}", answer.body);
        assert!(answer.header("retry-after").is_some());
    }
    // The background check of idle connections may find them dead first; if not, one request
    // does, and the pool replaces the rest before handing them out.
    assert!(
        statuses == [201] || statuses == [503, 201],
        "at most one failure, then the pool replaced the rest: {statuses:?}"
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
/// not inherit the wait: the pool closes such a connection and opens another (`db::pool::settled`).
#[tokio::test]
async fn a_connection_given_back_mid_statement_is_not_handed_to_the_next_request() {
    // One connection, so the next request could only get the abandoned one or a new one.
    let app = app_with_one_connection().await;
    let created = app
        .create_intent(DEMO_TOKEN, Some("behind-a-lock"), SEED_BODY)
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
        // By its database, not its text: pg_stat_activity keeps a query's first kilobyte only.
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity \
         WHERE datname = current_database() AND wait_event_type = 'Lock')",
    )
    .await;
    stuck.abort();

    // A replay reads only idempotency_keys, which is not locked. With one connection in the pool it
    // waits for the abandoned one to come back (the server drops the GET's handler when its client
    // hangs up); then it must get a new connection and answer at once, where the abandoned one
    // would make it wait until the lock is released.
    let replay = tokio::time::timeout(
        Duration::from_secs(10),
        app.create_intent(DEMO_TOKEN, Some("behind-a-lock"), SEED_BODY),
    )
    .await
    .expect("the replay waited behind the abandoned statement");
    assert_eq!(replay.status, 201, "{}", replay.body);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.body, created.body);
    lock.rollback().await.unwrap();
}

/// Every connection busy for longer than the acquire timeout (5 s): the next request gets a
/// retryable 503 with `Retry-After`, neither a hang nor a 500, and it claimed nothing, so its retry
/// with the same key runs as a fresh request once a connection is free.
#[tokio::test]
async fn a_request_that_finds_every_connection_busy_gets_a_retryable_503_and_claims_nothing() {
    let app = app_with_one_connection().await;
    let blocker = app.block_intent_inserts().await;
    let holder = spawn_create(&app.address, "holds-the-connection");
    app.wait_until("the only connection waits on the lock", &waiting_inserts(1))
        .await;

    let refused = app
        .create_intent(DEMO_TOKEN, Some("finds-none-free"), SEED_BODY)
        .await;
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert_eq!(refused.json()["error"], "unavailable");
    assert!(refused.header("retry-after").is_some());
    assert!(
        app.key_record(DEMO_MERCHANT, "finds-none-free")
            .await
            .is_none(),
        "nothing was claimed"
    );

    blocker.release().await;
    let held = holder.await.unwrap().unwrap();
    assert_eq!(held.status, 201, "{}", held.body);
    let retry = app
        .create_intent(DEMO_TOKEN, Some("finds-none-free"), SEED_BODY)
        .await;
    assert_eq!(retry.status, 201, "{}", retry.body);
    assert_eq!(retry.header("idempotent-replayed"), None);
    assert_eq!(app.intent_count().await, 2);
}

/// An app whose pool holds a single connection, and whose sweeper never takes it.
async fn app_with_one_connection() -> TestApp {
    TestApp::spawn_with(|s| {
        s.db_max_connections = 1;
        s.sweep_interval = Duration::from_secs(3600);
    })
    .await
}

/// `DATABASE_URL` may list several servers with `target_session_attrs=read-write`, as libpq
/// allows: the pool passes over a standby, and after a failover finds the new primary by itself,
/// without a restart. The standby is listed first, so the first choice is a real one.
#[tokio::test]
async fn a_multi_host_url_finds_the_primary_and_follows_it_across_a_failover() {
    let pg = ReplicatedPostgres::start().await;
    let primary_url = ReplicatedPostgres::url(&pg.primary, "postgres");
    let standby_url = ReplicatedPostgres::url(&pg.standby, "postgres");
    let servers = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        pg.standby.port, pg.primary.port
    );
    // Migrating passes over the standby too.
    payments_api::db::migrate(&servers).await.unwrap();
    let app = TestApp::spawn_reaching(&servers, &primary_url, |s| {
        s.sweep_interval = Duration::from_secs(3600)
    })
    .await;
    let before = app
        .create_intent(DEMO_TOKEN, Some("before-failover"), SEED_BODY)
        .await;
    assert_eq!(before.status, 201, "{}", before.body);

    // A planned failover: the standby has replayed all the primary wrote, then takes over.
    let written: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
        .fetch_one(&app.db)
        .await
        .unwrap();
    let standby = PgPoolOptions::new()
        .max_connections(1)
        .connect(&standby_url)
        .await
        .unwrap();
    let replayed = || async {
        sqlx::query_scalar::<_, bool>("SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn")
            .bind(&written)
            .fetch_one(&standby)
            .await
            .unwrap()
    };
    for _ in 0..200 {
        if replayed().await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(replayed().await, "the standby replays the primary's WAL");
    pg.crash_primary();
    pg.promote_standby();

    // The pooled connections died with the old primary: a client retrying with its key meets
    // 503s at most, until the pool has found the new primary; never a 500.
    let mut unavailable = 0;
    let after = loop {
        let answer = app
            .create_intent(DEMO_TOKEN, Some("after-failover"), SEED_BODY)
            .await;
        if answer.status != 503 {
            break answer;
        }
        unavailable += 1;
        assert!(unavailable < 100, "the pool never found the new primary");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(after.status, 201, "{}", after.body);
    let replay = app
        .create_intent(DEMO_TOKEN, Some("before-failover"), SEED_BODY)
        .await;
    assert_eq!(replay.status, 201);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.body, before.body, "replayed byte for byte");
    let on_new_primary: i64 =
        sqlx::query_scalar("SELECT count(*) FROM payment_intents WHERE NOT pg_is_in_recovery()")
            .fetch_one(&standby)
            .await
            .unwrap();
    assert_eq!(on_new_primary, 2, "both intents, on the promoted standby");
}
