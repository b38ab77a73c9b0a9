//! Issue 4: probes, metrics, the OpenAPI document, request ids, shutdown and --help.

use std::time::Duration;

use payments_api::{config::Settings, db};

use crate::{
    helpers::{
        Answer, DEMO_TOKEN, SEED_BODY, ServerProcess, TestApp, empty_database, missing_database,
        serve, spawn_create, test_settings,
    },
    leases::waiting_inserts,
};

#[tokio::test]
async fn healthz_is_always_up_and_readyz_needs_a_migrated_database() {
    let app = TestApp::spawn().await;
    assert_eq!(app.get("/healthz").await.status, 200);
    assert_eq!(app.get("/readyz").await.status, 200);

    // Same binary, database not migrated yet: alive, but not ready.
    let unmigrated =
        TestApp::spawn_on(&empty_database().await, |s| s.bootstrap_api_keys.clear()).await;
    assert_eq!(unmigrated.get("/healthz").await.status, 200);
    let not_ready = unmigrated.get("/readyz").await;
    assert_eq!(not_ready.status, 503);
    assert_eq!(not_ready.json()["error"], "unavailable");
    assert!(not_ready.header("retry-after").is_some());
    let detail = not_ready.json()["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("payments-api migrate"), "{detail}");
    // Requests say the same, never 500: the schema is missing, not the request wrong.
    let create = unmigrated.create_intent(DEMO_TOKEN, None, SEED_BODY).await;
    assert_eq!(create.status, 503, "{}", create.body);
    assert!(
        create.json()["detail"]
            .as_str()
            .unwrap()
            .contains("not migrated"),
        "{}",
        create.body
    );

    // Database unreachable: still alive, not ready, and quickly so.
    let unreachable = serve(Settings {
        bootstrap_api_keys: vec![],
        ..test_settings("postgres://postgres@127.0.0.1:1/nothing")
    })
    .await;
    let get = |path: &str| {
        let url = format!("{unreachable}{path}");
        async move { Answer::of(reqwest::get(url).await.unwrap()).await }
    };
    assert_eq!(get("/healthz").await.status, 200);
    let not_ready = get("/readyz").await;
    assert_eq!(
        (not_ready.status, not_ready.json()["error"].as_str()),
        (503, Some("unavailable"))
    );
    let create = reqwest::Client::new()
        .post(format!("{unreachable}/v1/payment_intents"))
        .bearer_auth(DEMO_TOKEN)
        .body(SEED_BODY)
        .send()
        .await
        .unwrap();
    assert_eq!(
        create.status(),
        503,
        "no database: 503 unavailable, never a 500"
    );
    assert!(create.headers().contains_key("retry-after"));
    let detail = Answer::of(create).await.json()["detail"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        detail.contains("nothing was committed") && detail.contains("if it had one"),
        "a request without a key is not told to retry with its key: {detail}"
    );
}

#[tokio::test]
async fn metrics_count_requests_by_matched_route_and_idempotency_outcome() {
    let app = TestApp::spawn().await;
    let scrape = || async {
        let metrics = app.get("/metrics").await;
        assert_eq!(metrics.status, 200);
        assert!(
            metrics
                .header("content-type")
                .unwrap()
                .starts_with("text/plain")
        );
        metrics.body
    };
    // The recorder is process-wide and other tests run beside this one: compare growth, not presence.
    let series = [
        (
            r#"http_requests_total{method="POST",route="/v1/payment_intents",status="201"}"#,
            2.0,
        ),
        (
            r#"http_requests_total{method="GET",route="/v1/payment_intents/{id}",status="200"}"#,
            1.0,
        ),
        (
            r#"http_request_duration_seconds_count{method="POST",route="/v1/payment_intents"}"#,
            2.0,
        ),
        (r#"idempotency_outcomes_total{outcome="fresh"}"#, 1.0),
        (r#"idempotency_outcomes_total{outcome="replay"}"#, 1.0),
    ];
    let before = scrape().await;

    let created = app
        .create_intent(DEMO_TOKEN, Some("metrics-1"), SEED_BODY)
        .await;
    app.create_intent(DEMO_TOKEN, Some("metrics-1"), SEED_BODY)
        .await;
    let id = created.json()["id"].as_str().unwrap().to_owned();
    app.get_intent(DEMO_TOKEN, &id).await;

    let after = scrape().await;
    for (name, at_least) in series {
        let grew = value_of(&after, name) - value_of(&before, name);
        assert!(
            grew >= at_least,
            "{name} grew by {grew}, expected at least {at_least}:\n{after}"
        );
    }
    for gauge in [
        r#"db_pool_connections{pool="requests",state="idle"}"#,
        r#"db_pool_connections{pool="background",state="in_use"}"#,
        r#"db_pool_waiting_requests{pool="requests"}"#,
        r#"db_pool_wait_seconds_bucket{pool="background""#,
    ] {
        assert!(after.contains(gauge), "missing {gauge}");
    }
    // Its value is the last app's to render it (the tests share one recorder); `turn_count`'s
    // unit test checks the count it shows.
    assert!(
        after.contains("\ndb_request_turns "),
        "missing db_request_turns"
    );
    assert!(!after.contains(&id), "raw paths never become labels");

    // Every worker says when it last finished a unit: the webhook worker polls every 250 ms.
    let tick = r#"worker_last_tick_seconds{worker="webhook delivery"}"#;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let last = value_of(&scrape().await, tick);
        if (now - last).abs() < 5.0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{tick} is {last}, now is {now}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The value of one series in Prometheus text format; 0 when it does not exist yet.
fn value_of(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn the_openapi_document_is_served_and_matches_the_committed_copy() {
    let generated = payments_api::http::openapi::document();
    let committed = include_str!("../../openapi.json");
    assert!(
        generated == committed,
        "openapi.json is stale: run `make openapi` and commit it"
    );

    let app = TestApp::spawn().await;
    let served = app.get("/openapi.json").await;
    assert_eq!(served.status, 200);
    let document = served.json();
    assert_eq!(
        document,
        serde_json::from_str::<serde_json::Value>(committed).unwrap()
    );
    assert!(document["openapi"].as_str().unwrap().starts_with("3.1"));
    let create = &document["paths"]["/v1/payment_intents"]["post"];
    let params = create["parameters"].as_array().unwrap();
    assert!(
        params
            .iter()
            .any(|p| p["name"] == "Idempotency-Key" && p["in"] == "header")
    );
    assert!(create["responses"]["201"]["headers"]["Idempotent-Replayed"].is_object());
    for status in ["400", "401", "409", "413", "422", "500", "503"] {
        assert!(
            create["responses"][status].is_object(),
            "create documents {status}"
        );
    }
}

#[tokio::test]
async fn request_ids_are_echoed_or_generated() {
    let app = TestApp::spawn().await;
    let url = format!("{}/healthz", app.address);
    let echoed = app
        .client
        .get(&url)
        .header("x-request-id", "req-42")
        .send()
        .await
        .unwrap();
    assert_eq!(echoed.headers()["x-request-id"], "req-42");
    let generated = app.client.get(&url).send().await.unwrap();
    let id = generated.headers()["x-request-id"].to_str().unwrap();
    assert_eq!(uuid::Uuid::parse_str(id).unwrap().get_version_num(), 4);

    // A replay carries its own request id, never the stored one.
    let first = app
        .create_intent(DEMO_TOKEN, Some("rid-1"), SEED_BODY)
        .await;
    let second = app
        .create_intent(DEMO_TOKEN, Some("rid-1"), SEED_BODY)
        .await;
    assert_ne!(
        first.headers["x-request-id"],
        second.headers["x-request-id"]
    );
}

#[tokio::test]
async fn sigterm_lets_the_in_flight_request_finish_then_exits_zero() {
    let app = TestApp::spawn().await;
    let mut server = ServerProcess::start(&app.database_url, &[]).await;

    let blocker = app.block_intent_inserts().await;
    let in_flight = spawn_create(&server.address, "shutdown-1");
    app.wait_until("the request is inside its transaction", &waiting_inserts(1))
        .await;

    let pid = server.child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    // Stopped accepting: new connections are refused while the old request still runs.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while reqwest::get(format!("{}/healthz", server.address))
        .await
        .is_ok()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still accepting after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    blocker.release().await;

    let answer = in_flight.await.unwrap().unwrap();
    assert_eq!(
        answer.status, 201,
        "the in-flight request finished: {}",
        answer.body
    );
    let status = tokio::task::spawn_blocking(move || server.child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "exit status {status:?}");
    assert_eq!(app.intent_count().await, 1);
}

#[test]
fn help_documents_every_setting() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_payments-api"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    for name in [
        "DATABASE_URL",
        "BIND_ADDR",
        "DB_MAX_CONNECTIONS",
        "IDEMPOTENCY_LEASE_SECONDS",
        "IDEMPOTENCY_KEY_TTL_SECONDS",
        "IDEMPOTENCY_KEY_REQUIRED",
        "REQUEST_TIMEOUT_SECONDS",
        "MAX_BODY_BYTES",
        "SWEEP_INTERVAL_SECONDS",
        "BOOTSTRAP_API_KEYS",
        "LOG_FORMAT",
        "migrate",
        "api-keys",
    ] {
        assert!(
            help.contains(name),
            "--help does not mention {name}:\n{help}"
        );
    }
}

/// An unreachable database is named for what it is, the first thing a new user meets: the
/// command says why it failed, and `serve` logs the cause at start (it still starts: `/healthz`
/// answers, requests get 503).
#[tokio::test]
async fn an_unreachable_database_is_reported_with_its_real_cause() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let database_url = format!("postgres://postgres@127.0.0.1:{port}/payments");
    let created = std::process::Command::new(env!("CARGO_BIN_EXE_payments-api"))
        .args(["api-keys", "create", "--merchant", "m"])
        .env("DATABASE_URL", &database_url)
        .output()
        .unwrap();
    assert!(!created.status.success());
    let said = String::from_utf8_lossy(&created.stderr);
    assert!(said.contains("Connection refused"), "{said}");
    assert!(!said.contains("pool timed out"), "{said}");

    let server = ServerProcess::start(&database_url, &[("BOOTSTRAP_API_KEYS", "")]).await;
    let line = server.wait_for_log("cannot reach the database").await;
    assert!(line.contains("Connection refused"), "{line}");
}

/// A database that does not exist yet, or exists without its tables, is the same to `serve`: it
/// stays up (even with BOOTSTRAP_API_KEYS to store), says once what to run instead of a line every
/// 250 ms, answers 503 with the same advice, and once the migrations are there it stores the keys,
/// becomes ready and says its workers recovered.
#[tokio::test]
async fn serve_waits_for_a_missing_or_unmigrated_database_and_says_what_to_run() {
    for (database_url, why) in [
        (missing_database().await, "does not exist"),
        (empty_database().await, "not migrated"),
    ] {
        let server = ServerProcess::start(&database_url, &[("SWEEP_INTERVAL_SECONDS", "1")]).await;
        let client = reqwest::Client::new();
        let readyz = || async {
            Answer::of(
                client
                    .get(format!("{}/readyz", server.address))
                    .send()
                    .await
                    .unwrap(),
            )
            .await
        };
        let not_ready = readyz().await;
        assert_eq!(not_ready.status, 503, "{}", not_ready.body);
        assert!(
            not_ready.json()["detail"]
                .as_str()
                .unwrap()
                .contains("payments-api migrate"),
            "{}",
            not_ready.body
        );
        let list = |token: &'static str| {
            let request = client
                .get(format!("{}/v1/payment_intents", server.address))
                .bearer_auth(token);
            async move { Answer::of(request.send().await.unwrap()).await }
        };
        let unavailable = list(DEMO_TOKEN).await;
        assert_eq!(unavailable.status, 503, "{}", unavailable.body);
        assert!(
            unavailable.json()["detail"].as_str().unwrap().contains(why),
            "{}",
            unavailable.body
        );

        // The sweeper fails a second after start: by then the webhook worker has met the same
        // database several times, and said so once.
        server.wait_for_log("sweeper is failing").await;
        let logs = server.logs();
        let said: Vec<&str> = logs
            .lines()
            .filter(|l| l.contains("webhook delivery is failing"))
            .collect();
        assert_eq!(said.len(), 1, "{logs}");
        assert!(
            said[0].contains(why) && said[0].contains("payments-api migrate"),
            "{}",
            said[0]
        );
        assert!(
            !logs.contains("still failing"),
            "a reminder comes a minute later: {logs}"
        );

        db::migrate(&database_url).await.expect("migrate");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let ready = readyz().await;
            if ready.status == 200 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "never ready: {}",
                ready.body
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let listed = list(DEMO_TOKEN).await;
        assert_eq!(
            listed.status, 200,
            "the bootstrapped key works: {}",
            listed.body
        );
        server.wait_for_log("webhook delivery recovered").await;
    }
}

/// Configuration is checked before the server binds, and a configuration error is one line with
/// its cause, never a backtrace, even with RUST_BACKTRACE set.
#[test]
fn a_bad_relayer_key_stops_the_start_before_listening_without_a_backtrace() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_payments-api"))
        .arg("serve")
        .env("DATABASE_URL", "postgres://postgres@127.0.0.1:1/nothing")
        .env("BIND_ADDR", "127.0.0.1:0")
        .env("CHAINS", "evm:31337=http://127.0.0.1:1")
        .env("RELAYER_PRIVATE_KEY", "0x1234")
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        said.contains("error: RELAYER_PRIVATE_KEY must be 0x followed by 64 hex digits"),
        "{said}"
    );
    assert!(!said.contains("listening"), "{said}");
    assert!(!said.to_lowercase().contains("backtrace"), "{said}");
    assert!(!said.contains("0x1234"), "the key is never echoed: {said}");
}
