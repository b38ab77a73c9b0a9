//! The transcript, and one key, one execution, one answer.

use futures::future::join_all;
use payments_api::idempotency::{
    IdempotencyKey, Lease, LeaseToken, Scope, StoredResponse, completion_statement,
};
use sqlx::Executor;

use crate::helpers::{
    Answer, DEMO_MERCHANT, DEMO_TOKEN, SEED_BODY, TestApp, body_with_amount, short_fingerprint,
};

#[tokio::test]
async fn seed_transcript_creates_replays_then_rejects_a_different_body() {
    let app = TestApp::spawn().await;

    let first = app
        .create_intent(DEMO_TOKEN, Some("order-1001"), SEED_BODY)
        .await;
    assert_eq!(first.status, 201);
    let intent = first.json();
    let id = intent["id"].as_str().unwrap();
    assert_eq!(
        first.header("location"),
        Some(format!("/v1/payment_intents/{id}").as_str())
    );
    assert_eq!(first.header("idempotent-replayed"), None);
    assert_eq!(first.header("content-type"), Some("application/json"));
    assert_eq!(intent["state"], "created");
    assert_eq!(intent["version"], 1);
    assert_eq!(intent["amount"], "100000000");
    let order = [
        "id",
        "state",
        "version",
        "amount",
        "currency",
        "chain",
        "token",
        "payer",
        "merchant",
        "payment_method",
        "deposit_address",
        "payment_options",
        "selected_option",
        "expires_at",
        "created_at",
        "updated_at",
        "canceled_at",
        "cancellation_reason",
        "failure_reason",
        "pending_reason",
        "settlement",
        "amount_received",
        "amount_overpaid",
        "amount_refunded",
        "duplicate_payments",
        "checkout_url",
        "client_secret",
        "metadata",
    ];
    assert_eq!(intent.as_object().unwrap().len(), order.len());
    let positions: Vec<usize> = order
        .iter()
        .map(|k| first.body.find(&format!("\"{k}\":")).unwrap())
        .collect();
    assert!(
        positions.is_sorted(),
        "keys in the documented order: {}",
        first.body
    );

    let second = app
        .create_intent(DEMO_TOKEN, Some("order-1001"), SEED_BODY)
        .await;
    assert_eq!(second.status, 201);
    assert_eq!(second.body, first.body, "a replay is byte-identical");
    assert_eq!(second.header("location"), first.header("location"));
    assert_eq!(second.header("idempotent-replayed"), Some("true"));

    let other_body = body_with_amount("999000000");
    let third = app
        .create_intent(DEMO_TOKEN, Some("order-1001"), &other_body)
        .await;
    assert_eq!(third.status, 422);
    assert_eq!(third.header("content-type"), Some("application/json"));
    let expected = format!(
        "Idempotency-Key \"order-1001\" was already used for a different request (fingerprint {}, got {})",
        short_fingerprint("POST", "/v1/payment_intents", SEED_BODY),
        short_fingerprint("POST", "/v1/payment_intents", &other_body),
    );
    assert_eq!(
        third.json(),
        serde_json::json!({"error": "idempotency_key_reused", "detail": expected})
    );

    assert_eq!(app.intent_count().await, 1);
    let record = app.key_record(DEMO_MERCHANT, "order-1001").await.unwrap();
    assert_eq!(
        (
            record.state.as_str(),
            record.attempt,
            record.response_status
        ),
        ("completed", 1, Some(201))
    );
}

#[tokio::test]
async fn fifty_concurrent_identical_requests_execute_once() {
    let app = TestApp::spawn().await;

    let requests = (0..50).map(|_| async {
        app.create_intent(DEMO_TOKEN, Some("race-1"), SEED_BODY)
            .await
    });
    let answers = join_all(requests).await;

    let created: Vec<&Answer> = answers.iter().filter(|a| a.status == 201).collect();
    assert!(!created.is_empty(), "somebody must win");
    for answer in &answers {
        assert!(
            answer.status == 201 || answer.status == 409,
            "unexpected {}: {}",
            answer.status,
            answer.body
        );
        if answer.status == 409 {
            assert_eq!(answer.json()["error"], "idempotency_key_in_flight");
            let retry_after: u64 = answer
                .header("retry-after")
                .expect("Retry-After")
                .parse()
                .unwrap();
            assert!(retry_after >= 1);
        }
    }
    assert!(
        created.iter().all(|a| a.body == created[0].body),
        "every 201 body is identical"
    );
    assert_eq!(
        created
            .iter()
            .filter(|a| a.header("idempotent-replayed").is_none())
            .count(),
        1,
        "one execution"
    );
    assert_eq!(app.intent_count().await, 1);
}

#[tokio::test]
async fn handler_errors_are_stored_and_replayed_but_layer_errors_are_not() {
    let app = TestApp::spawn().await;

    // A handler 400 is the answer to this request: stored, replayed as is.
    let zero = body_with_amount("0");
    let first = app
        .create_intent(DEMO_TOKEN, Some("zero-amount"), &zero)
        .await;
    assert_eq!(first.status, 400);
    assert_eq!(first.json()["error"], "invalid_request");
    assert!(
        first.json()["detail"].as_str().unwrap().contains("amount"),
        "{}",
        first.body
    );
    let again = app
        .create_intent(DEMO_TOKEN, Some("zero-amount"), &zero)
        .await;
    assert_eq!(
        (again.status, again.body.as_str()),
        (400, first.body.as_str())
    );
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    let record = app.key_record(DEMO_MERCHANT, "zero-amount").await.unwrap();
    assert_eq!(
        (record.state.as_str(), record.response_status),
        ("completed", Some(400))
    );

    // A layer 400 (malformed key): nothing ran, nothing is stored, the same request may be retried.
    for bad_key in ["has space", &"k".repeat(256), "\"unterminated"] {
        let answer = app
            .create_intent(DEMO_TOKEN, Some(bad_key), SEED_BODY)
            .await;
        assert_eq!(answer.status, 400, "{bad_key}");
        assert_eq!(answer.json()["error"], "idempotency_key_invalid");
        assert_eq!(answer.header("idempotent-replayed"), None);
    }
    let records: i64 = sqlx::query_scalar("SELECT count(*) FROM idempotency_keys")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(records, 1, "only the handler's 400 was stored");
    assert_eq!(app.intent_count().await, 0);
}

#[tokio::test]
async fn reordered_json_keys_are_a_different_request() {
    let app = TestApp::spawn().await;
    let reordered = r#"{"amount":"100000000","chain":"evm:31337","token":"0x5FbDB2315678afecb367f032d93F642f64180aa3","payer":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","merchant":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC","expires_in_seconds":900}"#;

    assert_eq!(
        app.create_intent(DEMO_TOKEN, Some("order-7"), SEED_BODY)
            .await
            .status,
        201
    );
    let answer = app
        .create_intent(DEMO_TOKEN, Some("order-7"), reordered)
        .await;
    assert_eq!(answer.status, 422);
    assert_eq!(answer.json()["error"], "idempotency_key_reused");
    assert_eq!(app.intent_count().await, 1);
}

#[tokio::test]
async fn quoted_and_bare_forms_name_the_same_key() {
    let app = TestApp::spawn().await;
    let first = app
        .create_intent(DEMO_TOKEN, Some("order-9"), SEED_BODY)
        .await;
    let quoted = app
        .create_intent(DEMO_TOKEN, Some("\"order-9\""), SEED_BODY)
        .await;
    assert_eq!(first.status, 201);
    assert_eq!(quoted.header("idempotent-replayed"), Some("true"));
    assert_eq!(quoted.body, first.body);
}

/// The completion travels with the COMMIT in one message, so its values are spelled as literals
/// (the layer hex-encodes them): keys made of quotes, backslashes and SQL must be stored, told apart
/// and replayed like any other.
#[tokio::test]
async fn keys_made_of_sql_metacharacters_are_stored_and_replayed_like_any_other() {
    let app = TestApp::spawn().await;
    let keys = [
        r#"it's"#,
        r#"');COMMIT;DROP/**/TABLE/**/idempotency_keys;--"#,
        r#"back\slash\x00"#,
        r#"$$quoted$$"#,
        r#"\x27"#,
    ];
    for (i, key) in keys.iter().enumerate() {
        let body = body_with_amount(&(100 + i).to_string());
        let first = app.create_intent(DEMO_TOKEN, Some(key), &body).await;
        assert_eq!(first.status, 201, "first request with key {key}");
        let replay = app.create_intent(DEMO_TOKEN, Some(key), &body).await;
        assert_eq!(replay.status, 201, "replay with key {key}");
        assert_eq!(replay.header("idempotent-replayed"), Some("true"));
        assert_eq!(replay.body, first.body);
        assert_eq!(replay.header("location"), first.header("location"));
        let record = app.key_record(DEMO_MERCHANT, key).await;
        assert_eq!(record.map(|r| r.state).as_deref(), Some("completed"));
    }
    assert_eq!(app.intent_count().await, keys.len() as i64);
}

/// The completion's values arrive as literal text, and a plpgsql parameter takes the collation of
/// its argument (`convert_from` yields collation "C"): the function must still find its record
/// through the primary key, or every create scans the whole table (8 ms at 46 000 records, seen).
#[tokio::test]
async fn the_completion_finds_its_record_through_the_primary_key() {
    let app = TestApp::spawn().await;
    sqlx::query(
        "INSERT INTO idempotency_keys (scope, key, fingerprint, state, attempt, lease_expires_at, created_at, expires_at)
         VALUES ($1, 'pk-probe', decode(repeat('00', 32), 'hex'), 'in_flight', 1, now() + interval '30 s', now(), now() + interval '1 day')",
    )
    .bind(DEMO_MERCHANT)
    .execute(&app.db)
    .await
    .unwrap();
    let completion = completion_statement(
        &Lease {
            scope: Scope::new(DEMO_MERCHANT),
            key: IdempotencyKey::parse_bytes(b"pk-probe").unwrap(),
            attempt: 1,
            token: LeaseToken::generate(),
        },
        &StoredResponse {
            status: 201,
            headers: vec![("content-type".to_owned(), "application/json".to_owned())],
            body: b"{}".to_vec(),
        },
    );

    let mut tx = app.db.begin().await.unwrap();
    // With sequential scans priced out, one still happens only when no index can serve the UPDATE.
    tx.execute("SET LOCAL enable_seqscan = off").await.unwrap();
    tx.execute(completion.as_str()).await.unwrap();
    let (sequential, indexed): (i64, i64) = sqlx::query_as(
        "SELECT seq_scan, idx_scan FROM pg_stat_xact_user_tables WHERE relname = 'idempotency_keys'",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    assert_eq!(
        sequential, 0,
        "the completion scanned idempotency_keys sequentially"
    );
    assert_eq!(indexed, 1);
    tx.rollback().await.unwrap();
}

#[tokio::test]
async fn posts_without_a_key_simply_run_unless_keys_are_required() {
    let app = TestApp::spawn().await;
    for _ in 0..2 {
        assert_eq!(
            app.create_intent(DEMO_TOKEN, None, SEED_BODY).await.status,
            201
        );
    }
    assert_eq!(
        app.intent_count().await,
        2,
        "Stripe behaviour: no key, no deduplication"
    );

    let strict = TestApp::spawn_with(|s| s.idempotency.key_required = true).await;
    let answer = strict.create_intent(DEMO_TOKEN, None, SEED_BODY).await;
    assert_eq!(answer.status, 400);
    assert_eq!(answer.json()["error"], "idempotency_key_missing");
    assert_eq!(strict.intent_count().await, 0);
}

#[tokio::test]
async fn oversized_bodies_get_413_and_store_nothing() {
    let app = TestApp::spawn_with(|s| s.max_body_bytes = 1024).await;
    let padded = SEED_BODY.replace("}", &format!(",\"pad\":\"{}\"}}", "x".repeat(2000)));
    let answer = app.create_intent(DEMO_TOKEN, Some("big-1"), &padded).await;
    assert_eq!(answer.status, 413);
    assert_eq!(answer.json()["error"], "payload_too_large");
    // Its body unread, the connection ends, and says so to a client that pools connections.
    assert_eq!(answer.headers["connection"], "close");
    assert!(app.key_record(DEMO_MERCHANT, "big-1").await.is_none());

    // Chunked, so no Content-Length announces it: the limit still holds while reading.
    let chunks: Vec<Result<String, std::io::Error>> =
        vec![Ok(padded[..1000].to_owned()), Ok(padded[1000..].to_owned())];
    let answer = app
        .client
        .post(format!("{}/v1/payment_intents", app.address))
        .bearer_auth(DEMO_TOKEN)
        .header("idempotency-key", "big-2")
        .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 413);
    assert!(app.key_record(DEMO_MERCHANT, "big-2").await.is_none());
}

#[tokio::test]
async fn a_key_past_its_retention_is_a_new_request() {
    let app = TestApp::spawn_with(|s| {
        s.idempotency.lease = std::time::Duration::from_secs(1);
        s.idempotency.retention = std::time::Duration::from_secs(2);
    })
    .await;
    let first = app
        .create_intent(DEMO_TOKEN, Some("short-lived"), SEED_BODY)
        .await;
    assert_eq!(first.status, 201);

    app.wait_until(
        "the record's retention has passed",
        "SELECT expires_at <= now() FROM idempotency_keys WHERE key = 'short-lived'",
    )
    .await;
    // Even a different body is welcome now: the key is free again.
    let later = app
        .create_intent(DEMO_TOKEN, Some("short-lived"), &body_with_amount("5"))
        .await;
    assert_eq!(later.status, 201);
    assert_eq!(later.header("idempotent-replayed"), None);
    assert_ne!(later.json()["id"], first.json()["id"]);
    assert_eq!(app.intent_count().await, 2);
    let record = app.key_record(DEMO_MERCHANT, "short-lived").await.unwrap();
    assert_eq!(
        (record.state.as_str(), record.attempt),
        ("completed", 2),
        "attempt keeps growing"
    );
}
