//! Issue 6: isolation between merchants, hostile input, secrets, slow clients.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::helpers::{
    DEMO_MERCHANT, DEMO_TOKEN, OTHER_TOKEN, SEED_BODY, ServerProcess, TestApp, body_with_amount,
};

#[tokio::test]
async fn merchant_b_never_reaches_merchant_a_resources_or_keys() {
    let app = TestApp::spawn().await;
    let a = app
        .create_intent(DEMO_TOKEN, Some("k-shared"), SEED_BODY)
        .await;
    let a_id = a.json()["id"].as_str().unwrap().to_owned();
    app.create_intent(DEMO_TOKEN, Some("k-a-only"), SEED_BODY)
        .await;
    let url = |path: &str| format!("{}{path}", app.address);

    // Reads and state changes of A's intent: not found, and nothing changes.
    assert_eq!(app.get_intent(OTHER_TOKEN, &a_id).await.status, 404);
    for key in [None, Some("b-cancel")] {
        assert_eq!(app.cancel(OTHER_TOKEN, &a_id, key).await.status, 404);
    }
    let a_now = app.get_intent(DEMO_TOKEN, &a_id).await.json();
    assert_eq!(
        (a_now["state"].as_str(), a_now["version"].as_i64()),
        (Some("created"), Some(1))
    );

    // Listings and cursors never show A's data.
    assert!(!app.list(OTHER_TOKEN, "").await.body.contains(&a_id));
    let cursor = app
        .list(OTHER_TOKEN, &format!("starting_after={a_id}"))
        .await;
    assert_eq!(cursor.status, 400);

    // A's events: absent from B's list, 404 by id, and so are their deliveries.
    let a_events = app.get_as(DEMO_TOKEN, "/v1/events").await.json();
    let a_event = a_events["data"][0]["id"].as_str().unwrap().to_owned();
    for path in [
        format!("/v1/events/{a_event}"),
        format!("/v1/events/{a_event}/deliveries"),
    ] {
        assert_eq!(app.get_as(OTHER_TOKEN, &path).await.status, 404, "{path}");
    }
    let b_events = app.get_as(OTHER_TOKEN, "/v1/events").await;
    assert_eq!(b_events.json()["data"], serde_json::json!([]));
    let foreign_cursor = app
        .get_as(OTHER_TOKEN, &format!("/v1/events?starting_after={a_event}"))
        .await;
    assert_eq!(foreign_cursor.status, 400);

    // A's keys: invisible to B, and B's use of the same names runs independently.
    let lookup = app
        .client
        .get(url("/v1/idempotency_keys/k-shared"))
        .bearer_auth(OTHER_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(lookup.status(), 404);
    let b_same = app
        .create_intent(OTHER_TOKEN, Some("k-shared"), SEED_BODY)
        .await;
    assert_eq!(
        (b_same.status, b_same.header("idempotent-replayed")),
        (201, None)
    );
    assert_ne!(b_same.json()["id"], a_id.as_str());
    let b_other_body = app
        .create_intent(OTHER_TOKEN, Some("k-a-only"), &body_with_amount("42"))
        .await;
    assert_eq!(
        b_other_body.status, 201,
        "A's key cannot be blocked by B: {}",
        b_other_body.body
    );
}

#[tokio::test]
async fn hostile_input_gets_4xx_and_changes_nothing() {
    let app = TestApp::spawn().await;
    let sql = "'; DROP TABLE payment_intents; --";
    let mut bodies: Vec<Vec<u8>> = ["chain", "token", "payer", "merchant", "amount"]
        .iter()
        .flat_map(|field| {
            let pattern = format!("\"{field}\":\"");
            let at = SEED_BODY.find(&pattern).unwrap() + pattern.len();
            let end = at + SEED_BODY[at..].find('"').unwrap();
            [
                sql.to_owned(),
                "\\u0000".to_owned(),
                "9".repeat(5000),
                "1e999".to_owned(),
            ]
            .into_iter()
            .map(move |value| {
                format!("{}{value}{}", &SEED_BODY[..at], &SEED_BODY[end..]).into_bytes()
            })
        })
        .collect();
    bodies.push(SEED_BODY.replace("900}", "1e30}").into_bytes());
    bodies.push(
        SEED_BODY
            .replace("900}", "99999999999999999999999999}")
            .into_bytes(),
    );
    bodies.push(
        SEED_BODY
            .replace("900}", &format!("\"{sql}\"}}"))
            .into_bytes(),
    );
    bodies.push(b"{\"amount\":\"1\xff\xfe\"}".to_vec());
    bodies.push(b"\0\0\0".to_vec());
    bodies.push(SEED_BODY.replace("{", "{\"__proto__\":1,").into_bytes());

    for body in bodies {
        let answer = app
            .client
            .post(format!("{}/v1/payment_intents", app.address))
            .bearer_auth(DEMO_TOKEN)
            .header(
                "idempotency-key",
                format!("hostile-{}", uuid::Uuid::new_v4()),
            )
            .body(body.clone())
            .send()
            .await
            .unwrap();
        let status = answer.status().as_u16();
        let text = answer.text().await.unwrap();
        assert_eq!(status, 400, "{}: {text}", String::from_utf8_lossy(&body));
        assert!(
            !text.to_lowercase().contains("sqlx") && !text.contains("panicked"),
            "{text}"
        );
    }
    let long_id = format!("/v1/payment_intents/pi_{}", "0".repeat(5000));
    let paths = [
        "/v1/payment_intents/'%20OR%201=1--",
        "/v1/payment_intents/%00",
        "/v1/payment_intents/%ff%fe",
        &long_id,
        "/v1/idempotency_keys/'%27;--",
        "/v1/idempotency_keys/pi_%00",
        "/v1/idempotency_keys/%ff",
    ];
    for path in paths {
        let answer = app
            .client
            .get(format!("{}{path}", app.address))
            .bearer_auth(DEMO_TOKEN)
            .send()
            .await
            .unwrap();
        assert!(
            answer.status().is_client_error(),
            "{path}: {}",
            answer.status()
        );
        let body: serde_json::Value = answer.json().await.expect("a JSON error body");
        assert!(body["error"].is_string(), "{path}: {body}");
    }
    assert_eq!(app.intent_count().await, 0, "nothing was written");
    // A key made of SQL metacharacters is just a key.
    let odd_key = app
        .create_intent(
            DEMO_TOKEN,
            Some("';DROP_TABLE_payment_intents;--"),
            SEED_BODY,
        )
        .await;
    assert_eq!(odd_key.status, 201);
    assert_eq!(app.intent_count().await, 1);
}

#[tokio::test]
async fn tokens_and_database_passwords_never_reach_logs_or_bodies() {
    let app = TestApp::spawn().await;
    let password = format!("pw-{}", uuid::Uuid::new_v4().simple());
    let role = format!("app_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(&format!(
        "CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{password}'"
    ))
    .execute(&app.db)
    .await
    .unwrap();
    let (before_at, after_at) = app.database_url.split_once('@').unwrap();
    let scheme = before_at.split("//").next().unwrap();
    let url = format!("{scheme}//{role}:{password}@{after_at}");
    let secret_token = format!("sk_{}", uuid::Uuid::new_v4().simple());
    let unknown_token = format!("sk_{}", uuid::Uuid::new_v4().simple());
    let bootstrap = format!("{secret_token}=merchant_secret");

    let server = ServerProcess::start(
        &url,
        &[("BOOTSTRAP_API_KEYS", &bootstrap), ("RUST_LOG", "debug")],
    )
    .await;
    let unreachable = url.replace(after_at.split('/').next().unwrap(), "127.0.0.1:1");
    let down = ServerProcess::start(
        &unreachable,
        &[("RUST_LOG", "debug"), ("BOOTSTRAP_API_KEYS", "")],
    )
    .await;

    let mut bodies = Vec::new();
    for (base, token) in [
        (&server.address, &secret_token),
        (&server.address, &unknown_token),
        (&down.address, &secret_token),
    ] {
        for body in [
            SEED_BODY.to_owned(),
            body_with_amount("0"),
            "garbage".to_owned(),
        ] {
            let answer = app
                .client
                .post(format!("{base}/v1/payment_intents"))
                .bearer_auth(token)
                .header("idempotency-key", "secret-test")
                .body(body)
                .send()
                .await
                .unwrap();
            bodies.push(answer.text().await.unwrap());
        }
    }
    let logs = format!("{}\n{}", server.logs(), down.logs());
    assert!(
        logs.contains("201"),
        "the server did log the requests:\n{logs}"
    );
    for secret in [&password, &secret_token, &unknown_token] {
        assert!(!logs.contains(secret.as_str()), "a secret reached the logs");
        assert!(
            bodies.iter().all(|b| !b.contains(secret.as_str())),
            "a secret reached a response body"
        );
    }
}

#[tokio::test]
async fn a_client_that_trickles_its_body_is_cut_off_while_others_are_served() {
    let (app, address) = with_one_second_timeout().await;
    let mut slow = tokio::net::TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "POST /v1/payment_intents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {DEMO_TOKEN}\r\nIdempotency-Key: slow-1\r\nContent-Length: {}\r\n\r\n{{",
        SEED_BODY.len()
    );
    slow.write_all(head.as_bytes()).await.unwrap();

    // Meanwhile everybody else is served.
    assert_eq!(
        app.create_intent(DEMO_TOKEN, Some("fast-1"), SEED_BODY)
            .await
            .status,
        201
    );

    let mut response = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), slow.read_to_end(&mut response)).await;
    let response = String::from_utf8_lossy(&response);
    assert!(read.is_ok(), "the slow request was not cut off");
    assert!(response.starts_with("HTTP/1.1 408"), "{response}");
    assert!(response.contains("request_timeout"), "{response}");
    assert!(
        app.key_record(crate::helpers::DEMO_MERCHANT, "slow-1")
            .await
            .is_none(),
        "nothing was claimed"
    );
}

#[tokio::test]
async fn new_api_tokens_carry_256_random_bits() {
    let app = TestApp::spawn().await;
    let mut tokens = Vec::new();
    for _ in 0..2 {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_payments-api"))
            .args(["api-keys", "create", "--merchant", "merchant_new"])
            .env("DATABASE_URL", &app.database_url)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let token = String::from_utf8(output.stdout).unwrap().trim().to_owned();
        assert!(
            token.starts_with("sk_live_")
                && token.len() == 8 + 64
                && token[8..].bytes().all(|b| b.is_ascii_hexdigit())
        );
        tokens.push(token);
    }
    assert_ne!(tokens[0], tokens[1]);
    let answer = app.create_intent(&tokens[0], None, SEED_BODY).await;
    assert_eq!(answer.status, 201, "the new token authenticates");
}

#[tokio::test]
async fn a_client_that_never_finishes_its_headers_is_cut_off() {
    let (app, address) = with_one_second_timeout().await;
    let mut silent = tokio::net::TcpStream::connect(&address).await.unwrap();
    let mut trickling = tokio::net::TcpStream::connect(&address).await.unwrap();
    trickling
        .write_all(b"POST /v1/payment_intents HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();

    // Meanwhile everybody else is served.
    assert_eq!(
        app.create_intent(DEMO_TOKEN, None, SEED_BODY).await.status,
        201
    );

    for (name, stream) in [("silent", &mut silent), ("trickling", &mut trickling)] {
        let mut rest = Vec::new();
        let closed =
            tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest)).await;
        assert!(closed.is_ok(), "the {name} connection was not closed");
    }
}

#[tokio::test]
async fn oversized_headers_are_refused() {
    let app = TestApp::spawn().await;
    let answer = app
        .client
        .get(format!("{}/healthz", app.address))
        .header("x-padding", "a".repeat(256 * 1024))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 431);
    assert_eq!(app.get("/healthz").await.status, 200);
}

/// An app whose requests must arrive within one second, and its `host:port`.
async fn with_one_second_timeout() -> (TestApp, String) {
    let app = TestApp::spawn_with(|s| {
        s.request_timeout = Duration::from_secs(1);
        s.idempotency.lease = Duration::from_secs(2);
    })
    .await;
    let address = app.address.trim_start_matches("http://").to_owned();
    (app, address)
}

/// PostgreSQL's `text` cannot hold U+0000. A NUL anywhere a string reaches the database is refused
/// at parsing: a 400 naming the field, nothing written, the key holding that 400 (not in flight).
#[tokio::test]
async fn a_nul_in_any_string_is_a_400_naming_it_and_writes_nothing() {
    let app = TestApp::spawn().await;
    let with_metadata = |metadata: &str| {
        SEED_BODY.replacen(
            r#""expires_in_seconds":900}"#,
            &format!(r#""expires_in_seconds":900,"metadata":{metadata}}}"#),
            1,
        )
    };
    let cases: [(&str, String, &str); 5] = [
        (
            "/v1/payment_intents",
            with_metadata(r#"{"a":"x\u0000y"}"#),
            "metadata.a:",
        ),
        (
            "/v1/payment_intents",
            with_metadata(r#"{"k\u0000":"v"}"#),
            "metadata.k\\u0000: a key",
        ),
        (
            "/v1/merchant",
            r#"{"display_name":"Caf\u0000e"}"#.to_owned(),
            "display_name:",
        ),
        (
            "/v1/webhook_endpoints",
            r#"{"url":"https://example.com/\u0000"}"#.to_owned(),
            "url:",
        ),
        (
            "/v1/webhook_endpoints",
            r#"{"url":"https://example.com/h","description":"a\u0000"}"#.to_owned(),
            "description:",
        ),
    ];
    for (i, (path, body, field)) in cases.iter().enumerate() {
        let key = format!("nul-{i}");
        let answer = app.post_as(DEMO_TOKEN, path, Some(&key), body).await;
        assert_eq!(answer.status, 400, "{path} {body}: {}", answer.body);
        assert_eq!(answer.json()["error"], "invalid_request");
        let detail = answer.json()["detail"].as_str().unwrap().to_owned();
        assert!(
            detail.starts_with(field) && detail.contains("NUL"),
            "{body}: {detail}"
        );
        let record = app.key_record(DEMO_MERCHANT, &key).await.unwrap();
        assert_eq!(
            (record.state.as_str(), record.response_status),
            ("completed", Some(400)),
            "the key holds the 400, it is not left in flight"
        );
        let again = app.post_as(DEMO_TOKEN, path, Some(&key), body).await;
        assert_eq!((again.status, again.body), (400, answer.body));
    }
    assert_eq!(app.intent_count().await, 0);
    assert_eq!(app.event_count().await, 0);
    let merchant = app.get_as(DEMO_TOKEN, "/v1/merchant").await;
    assert!(!merchant.body.contains("Caf"), "{}", merchant.body);
    let endpoints = app.get_as(DEMO_TOKEN, "/v1/webhook_endpoints").await;
    assert_eq!(endpoints.json()["data"], serde_json::json!([]));

    // In a path, it names nothing.
    for path in [
        "/v1/payment_intents/pi_%00",
        "/v1/events/evt_%00",
        "/v1/idempotency_keys/k%00",
    ] {
        let answer = app.get_as(DEMO_TOKEN, path).await;
        assert_eq!(answer.status, 404, "{path}: {}", answer.body);
    }

    // In a query string too.
    let listed = app.list(DEMO_TOKEN, "starting_after=pi_%00").await;
    assert_eq!(listed.status, 400, "{}", listed.body);
    assert!(
        listed.json()["detail"]
            .as_str()
            .unwrap()
            .starts_with("starting_after:"),
        "{}",
        listed.body
    );
    let listed = app.list(DEMO_TOKEN, "limit=abc").await;
    assert_eq!(listed.status, 400);
    assert_eq!(
        listed.json()["detail"],
        "limit: expected an integer",
        "in JSON's words, not Rust's"
    );

    // A lone surrogate is said in our words; an escaped backslash before u0000 is no NUL.
    let lone = app
        .post_as(
            DEMO_TOKEN,
            "/v1/payment_intents",
            Some("surrogate"),
            &with_metadata(r#"{"a":"\ud800"}"#),
        )
        .await;
    assert_eq!(lone.status, 400, "{}", lone.body);
    let detail = lone.json()["detail"].as_str().unwrap().to_owned();
    assert!(
        detail.contains("surrogate pair") && !detail.contains("hex escape"),
        "{detail}"
    );
    let plain = app
        .post_as(
            DEMO_TOKEN,
            "/v1/payment_intents",
            Some("backslash"),
            &with_metadata(r#"{"a":"\\u0000"}"#),
        )
        .await;
    assert_eq!(plain.status, 201, "{}", plain.body);
    assert_eq!(plain.json()["metadata"]["a"], "\\u0000");
}
