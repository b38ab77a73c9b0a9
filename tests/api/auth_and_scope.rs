//! Credentials first, and keys scoped by merchant.

use crate::helpers::{
    Answer, DEMO_MERCHANT, DEMO_TOKEN, OTHER_MERCHANT, OTHER_TOKEN, SEED_BODY, TestApp,
};

#[tokio::test]
async fn two_merchants_with_one_key_get_two_intents_and_cannot_see_each_other() {
    let app = TestApp::spawn().await;

    let demo = app
        .create_intent(DEMO_TOKEN, Some("order-1001"), SEED_BODY)
        .await;
    let other = app
        .create_intent(OTHER_TOKEN, Some("order-1001"), SEED_BODY)
        .await;
    assert_eq!((demo.status, other.status), (201, 201));
    assert_eq!(
        other.header("idempotent-replayed"),
        None,
        "no replay across merchants"
    );
    let demo_id = demo.json()["id"].as_str().unwrap().to_owned();
    let other_id = other.json()["id"].as_str().unwrap().to_owned();
    assert_ne!(demo_id, other_id);
    assert_eq!(app.intent_count().await, 2);

    assert_eq!(app.get_intent(DEMO_TOKEN, &demo_id).await.status, 200);
    let foreign = app.get_intent(OTHER_TOKEN, &demo_id).await;
    assert_eq!(foreign.status, 404);
    assert_eq!(foreign.json()["error"], "not_found");
    assert_eq!(app.get_intent(DEMO_TOKEN, &other_id).await.status, 404);

    // Neither merchant's different-body reuse can block the other's key.
    let scopes: Vec<String> =
        sqlx::query_scalar("SELECT scope FROM idempotency_keys ORDER BY scope")
            .fetch_all(&app.db)
            .await
            .unwrap();
    assert_eq!(scopes, vec![DEMO_MERCHANT, OTHER_MERCHANT]);
}

#[tokio::test]
async fn missing_or_unknown_credentials_get_401_and_store_nothing() {
    let app = TestApp::spawn().await;
    let url = format!("{}/v1/payment_intents", app.address);

    let attempts = [
        None,
        Some("Bearer not-a-known-token".to_owned()),
        Some("Basic bWVyY2hhbnQtZGVtbzo=".to_owned()),
        Some("Bearer".to_owned()),
        Some("merchant-demo".to_owned()),
    ];
    for authorization in attempts {
        let mut request = app
            .client
            .post(&url)
            .header("idempotency-key", "order-1001")
            .body(SEED_BODY);
        if let Some(value) = &authorization {
            request = request.header("authorization", value);
        }
        let answer = Answer::of(request.send().await.unwrap()).await;
        assert_eq!(answer.status, 401, "{authorization:?}");
        assert_eq!(answer.json()["error"], "unauthorized");
        assert_eq!(answer.header("www-authenticate"), Some("Bearer"));
    }
    // Checked before the key is even read: a malformed key still gets 401, not 400.
    let answer = app
        .client
        .post(&url)
        .header("idempotency-key", "bad key")
        .body(SEED_BODY)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 401);

    let records: i64 = sqlx::query_scalar("SELECT count(*) FROM idempotency_keys")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(records, 0);
    assert_eq!(app.intent_count().await, 0);

    // The same key then runs fresh for a real merchant.
    let answer = app
        .create_intent(DEMO_TOKEN, Some("order-1001"), SEED_BODY)
        .await;
    assert_eq!(answer.status, 201);
    assert_eq!(answer.header("idempotent-replayed"), None);

    let get = app
        .client
        .get(format!("{url}/{}", answer.json()["id"].as_str().unwrap()))
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 401, "reads need credentials too");
}

/// Every `/v1` path is authenticated first, one that does not exist included: a stranger learns
/// nothing of which exist, a merchant gets 404. Outside `/v1` nothing needs a key.
#[tokio::test]
async fn unknown_api_paths_are_authenticated_first() {
    let app = TestApp::spawn().await;
    for path in ["/v1", "/v1/nope", "/v1/payment_intents/pi_1/nope"] {
        let url = format!("{}{path}", app.address);
        let stranger = Answer::of(app.client.get(&url).send().await.unwrap()).await;
        assert_eq!(
            (stranger.status, stranger.json()["error"].as_str()),
            (401, Some("unauthorized")),
            "{path}"
        );
        let posted = Answer::of(
            app.client
                .post(&url)
                .header("idempotency-key", "k-1")
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(posted.status, 401, "{path}");
        let merchant = app.get_as(DEMO_TOKEN, path).await;
        assert_eq!(
            (merchant.status, merchant.json()["error"].as_str()),
            (404, Some("not_found")),
            "{path}"
        );
    }
    let outside = app.get("/nope").await;
    assert_eq!(outside.status, 404);
    let records: i64 = sqlx::query_scalar("SELECT count(*) FROM idempotency_keys")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(records, 0, "an unknown path claims no key");
}

#[tokio::test]
async fn the_auth_scheme_is_case_insensitive() {
    let app = TestApp::spawn().await;
    let answer = app
        .client
        .post(format!("{}/v1/payment_intents", app.address))
        .header("authorization", format!("bearer {DEMO_TOKEN}"))
        .body(SEED_BODY)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 201);
}

#[tokio::test]
async fn tokens_are_stored_only_as_hashes() {
    let app = TestApp::spawn().await;
    let stored: Vec<Vec<u8>> = sqlx::query_scalar("SELECT token_sha256 FROM api_keys")
        .fetch_all(&app.db)
        .await
        .unwrap();
    assert_eq!(stored.len(), 2);
    for hash in stored {
        assert_eq!(hash.len(), 32);
        assert_ne!(hash, DEMO_TOKEN.as_bytes());
    }
}

/// `payments-api api-keys …` as an operator runs it against the app's database.
fn api_keys(app: &TestApp, args: &[&str]) -> (bool, String) {
    app.command(&[&["api-keys"], args].concat())
}

/// Waits until `token` gets `status` from `app` (a replica forgets a known key within a second).
async fn until_status(app: &TestApp, token: &str, status: u16) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if app.get_as(token, "/v1/payment_intents").await.status == status {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{token} never got {status}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A merchant's keys: created with a prefix secret scanners know, listed without their secret,
/// revoked on every replica, rotated with an overlap in which the old key still works.
#[tokio::test]
async fn a_merchant_lists_revokes_and_rotates_its_keys_on_every_replica() {
    let first = TestApp::spawn().await;
    let second = TestApp::spawn_on(&first.database_url, |_| {}).await;
    let (ok, token) = api_keys(&first, &["create", "--merchant", DEMO_MERCHANT]);
    assert!(ok, "{token}");
    assert!(
        token.starts_with("sk_live_") && token.len() == 8 + 64,
        "{token}"
    );
    let prefix = &token[..16];
    for app in [&first, &second] {
        assert_eq!(app.get_as(&token, "/v1/payment_intents").await.status, 200);
    }
    let (ok, listed) = api_keys(&first, &["list", "--merchant", DEMO_MERCHANT]);
    assert!(ok, "{listed}");
    let line = listed
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("{listed}"));
    let fields: Vec<&str> = line.split('\t').collect();
    assert_ne!(fields[2], "-", "its use is noted: {line}");
    assert_eq!((fields[3], fields[4]), ("-", "-"), "{line}");
    assert!(!listed.contains(&token[16..]), "never the secret: {listed}");
    assert!(
        listed.contains("(no prefix)"),
        "the bootstrap key: {listed}"
    );

    let (ok, said) = api_keys(&first, &["revoke", prefix]);
    assert!(ok, "{said}");
    for app in [&first, &second] {
        until_status(app, &token, 401).await;
    }
    let (ok, said) = api_keys(&first, &["revoke", prefix]);
    assert!(!ok, "a revoked key cannot be revoked again: {said}");

    // Rotation: the new key works at once, the old one for the overlap, then no more.
    let (_, old) = api_keys(&first, &["create", "--merchant", OTHER_MERCHANT]);
    let (ok, new) = api_keys(
        &first,
        &[
            "rotate",
            "--merchant",
            OTHER_MERCHANT,
            "--old-expires-in",
            "3600",
        ],
    );
    assert!(ok, "{new}");
    for app in [&first, &second] {
        assert_eq!(app.get_as(&new, "/v1/payment_intents").await.status, 200);
        assert_eq!(app.get_as(&old, "/v1/payment_intents").await.status, 200);
    }
    let (_, listed) = api_keys(&first, &["list", "--merchant", OTHER_MERCHANT]);
    let old_line = listed.lines().find(|l| l.starts_with(&old[..16])).unwrap();
    assert_ne!(old_line.split('\t').nth(3), Some("-"), "{listed}");
    let (ok, newer) = api_keys(
        &first,
        &[
            "rotate",
            "--merchant",
            OTHER_MERCHANT,
            "--old-expires-in",
            "0",
        ],
    );
    assert!(ok, "{newer}");
    for app in [&first, &second] {
        until_status(app, &old, 401).await;
        until_status(app, &new, 401).await;
        assert_eq!(app.get_as(&newer, "/v1/payment_intents").await.status, 200);
        // Keys made before prefixes keep working until rotated away.
        assert_eq!(
            app.get_as(DEMO_TOKEN, "/v1/payment_intents").await.status,
            200
        );
    }
    assert_eq!(
        first
            .get_as(OTHER_TOKEN, "/v1/payment_intents")
            .await
            .status,
        401,
        "the rotation expired the merchant's bootstrap key too"
    );
}

/// A refused token is remembered like a known one: a revoked key left in a client's retry loop
/// costs one lookup a second, not one per request, and a merchant's key still works beside it.
#[tokio::test]
async fn a_refused_token_costs_one_lookup_a_second_not_one_per_request() {
    let (app, proxy) = TestApp::spawn_behind_proxy(|_| {}).await;
    let lookups = proxy.count("WHERE token_sha256 = $1 AND revoked_at IS NULL");
    let started = std::time::Instant::now();
    for _ in 0..50 {
        let refused = app.get_as("sk_live_revoked", "/v1/payment_intents").await;
        assert_eq!(refused.status, 401, "{}", refused.body);
    }
    let seconds = started.elapsed().as_secs();
    let looked_up = lookups.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        (1..=seconds + 1).contains(&looked_up),
        "{looked_up} lookups in {seconds} s"
    );
    assert_eq!(
        app.get_as(DEMO_TOKEN, "/v1/payment_intents").await.status,
        200
    );
}
