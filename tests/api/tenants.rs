//! Tenants: each merchant's rate and concurrency limits, applied before anything is recorded,
//! split between replicas; and requests that shed rather than queue when the pool is full, while
//! background work and probes keep their own connections.

use std::time::{Duration, Instant};

use payments_api::config::{MerchantLimits, Settings};

use crate::{
    helpers::{
        Answer, DEMO_MERCHANT, DEMO_TOKEN, OTHER_TOKEN, SEED_BODY, TestApp,
        blocker::IntentInsertBlocker, spawn_create, spawn_create_as,
    },
    leases::waiting_inserts,
};

fn limits(rate_per_second: u32, concurrency: u32) -> impl FnOnce(&mut Settings) {
    move |s| {
        s.merchant_limits = MerchantLimits {
            rate_per_second,
            concurrency,
            refresh_every: Duration::from_millis(100),
            refusal_pause: MerchantLimits::REFUSAL_PAUSE,
        }
    }
}

/// `payments-api limits …` against the app's database: (success, what it printed).
fn limits_command(app: &TestApp, args: &[&str]) -> (bool, String) {
    app.command(&[&["limits"], args].concat())
}

/// Past its rate a merchant gets 429 `rate_limited` with `Retry-After` and the IETF headers, and
/// nothing was recorded: the refused key's retry, once the wait is over, runs as a first attempt.
/// GCRA allows the burst plus the rate over the time elapsed, which bounds what a burst gets
/// however slowly the machine sends it. Each 429 comes after at least half the refusal pause.
/// Other merchants are not touched.
#[tokio::test]
async fn past_its_rate_a_merchant_gets_429_before_any_record_and_its_retry_runs_normally() {
    let app = TestApp::spawn_with(limits(5, 0)).await;

    let started = Instant::now();
    let mut admitted = 0;
    let mut refused = None;
    for _ in 0..40 {
        let sent = Instant::now();
        let answer = app.get_as(DEMO_TOKEN, "/v1/payment_intents").await;
        match answer.status {
            200 => admitted += 1,
            429 => {
                // Paused before it is sent (at least half the pause, spread at random): a loop
                // on one connection is slowed by each refusal.
                assert!(sent.elapsed() >= MerchantLimits::REFUSAL_PAUSE / 2);
                refused = Some(answer);
            }
            other => panic!("{other}: {}", answer.body),
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert!(
        f64::from(admitted) <= 5.0 + 5.0 * elapsed + 1.0,
        "{admitted} admitted in {elapsed:.2} s at 5/s"
    );
    let refused = refused.expect("a burst of 40 at 5/s meets the limit");
    assert_eq!(refused.json()["error"], "rate_limited", "{}", refused.body);
    let retry_after: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!(retry_after >= 1);
    assert_eq!(refused.header("ratelimit-policy"), Some("\"rate\";q=5;w=1"));
    assert!(
        refused
            .header("ratelimit")
            .is_some_and(|v| v.starts_with("\"rate\";r=0;t=")),
        "{:?}",
        refused.header("ratelimit")
    );

    // The facilitator's routes count too; another merchant has a bucket of its own.
    let x402 = until_refused(&app, "/x402/supported").await;
    assert_eq!(x402.json()["error"], "rate_limited");
    assert_eq!(
        app.get_as(OTHER_TOKEN, "/v1/payment_intents").await.status,
        200
    );

    // A keyed create refused for the rate leaves no record; its retry after Retry-After is a
    // first attempt.
    let mut created = 0;
    let (key, refused) = loop {
        let key = format!("rate-{created}");
        let answer = app.create_intent(DEMO_TOKEN, Some(&key), SEED_BODY).await;
        match answer.status {
            201 => created += 1,
            429 => break (key, answer),
            other => panic!("{other}: {}", answer.body),
        }
    };
    assert!(
        app.key_record(DEMO_MERCHANT, &key).await.is_none(),
        "nothing recorded"
    );
    let wait: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    tokio::time::sleep(Duration::from_secs(wait)).await;
    let retried = app.create_intent(DEMO_TOKEN, Some(&key), SEED_BODY).await;
    assert_eq!(retried.status, 201, "{}", retried.body);
    assert_eq!(retried.header("idempotent-replayed"), None);
    assert_eq!(app.intent_count().await, created + 1);

    let metrics = app.get("/metrics").await.body;
    assert!(
        metrics.contains(r#"rate_limited_requests_total{merchant="merchant_demo",reason="rate"}"#),
        "{metrics}"
    );
}

/// Sends GETs to `path` as the demo merchant until one is refused.
async fn until_refused(app: &TestApp, path: &str) -> Answer {
    for _ in 0..100 {
        let answer = app.get_as(DEMO_TOKEN, path).await;
        if answer.status == 429 {
            return answer;
        }
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    panic!("100 requests at 5/s were never refused");
}

/// A merchant at its concurrency limit gets 429 for its next request, whatever its rate;
/// the slot comes back when the request holding it ends. Another merchant is not touched.
#[tokio::test]
async fn a_merchant_at_its_concurrency_limit_is_refused_until_a_request_ends() {
    let app = TestApp::spawn_with(limits(0, 1)).await;
    let blocker = app.block_intent_inserts().await;
    let holder = spawn_create(&app.address, "holds-the-slot");
    app.wait_until("the create waits on the lock", &waiting_inserts(1))
        .await;

    let refused = app.get_as(DEMO_TOKEN, "/v1/payment_intents").await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.json()["error"], "rate_limited");
    assert!(
        refused.json()["detail"]
            .as_str()
            .unwrap()
            .contains("at once")
    );
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(
        refused.header("ratelimit-policy"),
        Some("\"concurrency\";q=1;qu=\"concurrent-requests\"")
    );
    assert_eq!(refused.header("ratelimit"), Some("\"concurrency\";r=0"));
    assert_eq!(
        app.get_as(OTHER_TOKEN, "/v1/payment_intents").await.status,
        200
    );

    blocker.release().await;
    let held = holder.await.unwrap().unwrap();
    assert_eq!(held.status, 201, "{}", held.body);
    let after = app.get_as(DEMO_TOKEN, "/v1/payment_intents").await;
    assert_eq!(after.status, 200, "{}", after.body);
}

/// A merchant's own limits, set with `payments-api limits set`, reach every replica within a
/// refresh, and each replica holds half of them when two serve: the first request under the new
/// policy finds a full bucket of 5, and says 4 × 2 are left.
#[tokio::test]
async fn own_limits_reach_every_replica_and_two_replicas_split_them() {
    let first = TestApp::spawn_with(limits(0, 0)).await;
    let second = TestApp::spawn_on(&first.database_url, limits(0, 0)).await;
    first
        .wait_until(
            "both replicas say they are alive",
            "(SELECT count(*) FROM replicas WHERE seen_at > now() - interval '5 seconds') = 2",
        )
        .await;
    let unlimited = first.get_as(DEMO_TOKEN, "/v1/payment_intents").await;
    assert_eq!(unlimited.header("ratelimit-policy"), None);

    let (ok, said) = limits_command(
        &first,
        &["set", "--merchant", DEMO_MERCHANT, "--rate", "10"],
    );
    assert!(ok, "{said}");
    let (ok, shown) = limits_command(&first, &["show", "--merchant", DEMO_MERCHANT]);
    assert!(ok, "{shown}");
    assert_eq!(shown, "merchant_demo\trate 10/s\tconcurrency default");

    for app in [&first, &second] {
        let first_limited = until_policy(app, "\"rate\";q=10;w=1").await;
        assert_eq!(first_limited.header("ratelimit"), Some("\"rate\";r=8;t=1"));
    }
    let (ok, said) = limits_command(&first, &["set", "--merchant", DEMO_MERCHANT, "--rate", "0"]);
    assert!(ok, "{said}");
    for app in [&first, &second] {
        until_policy(app, "").await;
    }
}

/// GETs as the demo merchant until the answer's `RateLimit-Policy` is `policy` ("" for none).
async fn until_policy(app: &TestApp, policy: &str) -> Answer {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let answer = app.get_as(DEMO_TOKEN, "/v1/payment_intents").await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        if answer.header("ratelimit-policy").unwrap_or("") == policy {
            return answer;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never saw {policy:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// With every request connection taken, a request that would wait past `DB_WAIT_TIMEOUT_MS` is
/// shed with a retryable 503, while `/readyz`, `/metrics` and the background work run on the
/// background pool as if nothing happened.
#[tokio::test]
async fn a_full_request_pool_sheds_requests_while_probes_and_background_work_go_on() {
    let app = TestApp::spawn_with(|s| {
        s.db_max_connections = 1;
        s.db_wait_timeout = Duration::from_millis(200);
        s.merchant_limits.refresh_every = Duration::from_millis(100);
    })
    .await;
    let blocker = app.block_intent_inserts().await;
    let holder = spawn_create(&app.address, "holds-the-connection");
    app.wait_until("the only connection waits on the lock", &waiting_inserts(1))
        .await;
    let since: String = sqlx::query_scalar("SELECT extract(epoch FROM now())::text")
        .fetch_one(&app.db)
        .await
        .unwrap();

    let shed = app.get_as(DEMO_TOKEN, "/v1/payment_intents").await;
    assert_eq!(shed.status, 503, "{}", shed.body);
    assert_eq!(shed.json()["error"], "unavailable");
    assert!(shed.header("retry-after").is_some());
    assert_eq!(app.get("/readyz").await.status, 200);
    let metrics = app.get("/metrics").await;
    assert_eq!(metrics.status, 200);
    assert!(
        metrics
            .body
            .contains(r#"db_pool_connections{pool="requests",state="in_use"} 1"#),
        "{}",
        metrics.body
    );
    assert!(
        metrics
            .body
            .contains(r#"db_pool_wait_seconds_bucket{pool="requests""#)
    );
    // The replica registry is background work: it keeps writing through its own pool.
    let later = format!("(SELECT max(seen_at) FROM replicas) > to_timestamp({since})");
    app.wait_until("the background work writes", &later).await;

    blocker.release().await;
    assert_eq!(holder.await.unwrap().unwrap().status, 201);
    assert_eq!(
        app.get_as(DEMO_TOKEN, "/v1/payment_intents").await.status,
        200
    );
}

/// With every turn at the database taken, a merchant's queue stands behind its own requests:
/// another merchant's request, arriving after three of the first's, is served after only one.
#[tokio::test]
async fn a_merchants_queue_at_the_database_does_not_stand_in_front_of_another_merchant() {
    let (app, blocker, holder) = one_turn_held(Duration::from_secs(20)).await;
    let mut waiting = Vec::new();
    for (token, key) in [
        (DEMO_TOKEN, "demo-1"),
        (DEMO_TOKEN, "demo-2"),
        (DEMO_TOKEN, "demo-3"),
        (OTHER_TOKEN, "other-1"),
    ] {
        waiting.push(spawn_create_as(&app.address, token, key));
        until_in_line(&app, waiting.len()).await;
    }

    blocker.release().await;
    let mut served = vec![holder.await.unwrap().unwrap()];
    for request in waiting {
        served.push(request.await.unwrap().unwrap());
    }
    let ids: Vec<String> = served
        .iter()
        .map(|answer| {
            assert_eq!(answer.status, 201, "{}", answer.body);
            answer.json()["id"].as_str().unwrap().to_owned()
        })
        .collect();
    // One turn: each create commits before the next begins, so creation order is service order.
    let order: Vec<String> =
        sqlx::query_scalar("SELECT id FROM payment_intents ORDER BY created_at, id")
            .fetch_all(&app.db)
            .await
            .unwrap();
    // The holder, then the first of the merchant's three, then the other merchant's one.
    assert_eq!(order.len(), 5);
    assert_eq!((&order[0], &order[2]), (&ids[0], &ids[4]), "served in turn");
    assert!(ids[1..4].contains(&order[1]), "{order:?}");
}

/// A request that would wait for its turn past `DB_WAIT_TIMEOUT_MS` is shed with the pool's
/// retryable 503 while a connection is still free (the turn, not the pool, refused it), and it
/// recorded nothing: the same key's retry, once a turn is free, is a first execution.
#[tokio::test]
async fn a_request_that_would_wait_too_long_for_its_turn_is_shed_and_its_retry_runs_normally() {
    let (app, blocker, holder) = one_turn_held(Duration::from_millis(300)).await;

    let shed = spawn_create(&app.address, "shed-at-its-turn")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(shed.status, 503, "{}", shed.body);
    assert_eq!(shed.json()["error"], "unavailable");
    assert!(shed.header("retry-after").is_some());
    let metrics = app.get("/metrics").await.body;
    assert!(
        metrics.contains(r#"db_pool_connections{pool="requests",state="in_use"} 1"#),
        "the pool had a connection free: {metrics}"
    );
    let recorded: i64 =
        sqlx::query_scalar("SELECT count(*) FROM idempotency_keys WHERE key = 'shed-at-its-turn'")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(recorded, 0, "a shed request records nothing");

    blocker.release().await;
    assert_eq!(holder.await.unwrap().unwrap().status, 201);
    let retried = spawn_create(&app.address, "shed-at-its-turn")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(retried.status, 201, "{}", retried.body);
    assert_eq!(
        retried.header("idempotent-replayed"),
        None,
        "a first execution"
    );
}

/// An app with two request connections, so one turn (the other connection is for what takes
/// none), and that turn held by a create waiting on the intents' lock until `blocker` lets go.
async fn one_turn_held(
    wait: Duration,
) -> (
    TestApp,
    IntentInsertBlocker,
    tokio::task::JoinHandle<reqwest::Result<Answer>>,
) {
    let app = TestApp::spawn_with(|s| {
        s.db_max_connections = 2;
        s.db_wait_timeout = wait;
    })
    .await;
    let blocker = app.block_intent_inserts().await;
    let holder = spawn_create(&app.address, "holds-the-turn");
    app.wait_until("the only turn waits on the lock", &waiting_inserts(1))
        .await;
    (app, blocker, holder)
}

/// Waits until `/metrics` says `n` requests are in line for a turn.
async fn until_in_line(app: &TestApp, n: usize) {
    let line = format!("db_turns_waiting_requests {n}\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !app.get("/metrics").await.body.contains(&line) {
        assert!(Instant::now() < deadline, "never {n} in line");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Requests are counted by the key that authenticated them, named by its prefix: which keys are
/// still in use before one is revoked.
#[tokio::test]
async fn key_use_is_counted_by_key_prefix() {
    let app = TestApp::spawn().await;
    let token = payments_api::auth::create(
        &payments_api::db::pool(&app.database_url, 1).unwrap(),
        &payments_api::auth::MerchantId::parse(DEMO_MERCHANT).unwrap(),
        &payments_api::audit::Who::cli(),
    )
    .await
    .unwrap();
    assert_eq!(app.get_as(&token, "/v1/payment_intents").await.status, 200);
    let metrics = app.get("/metrics").await.body;
    let series = format!(r#"api_key_requests_total{{prefix="{}"}}"#, &token[..16]);
    assert!(metrics.contains(&series), "{metrics}");
    assert!(!metrics.contains(&token[16..]), "never the secret");
}
