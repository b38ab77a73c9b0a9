//! Issue 3: the state machine, cancel, the sweepers, listing and reconciliation.

use std::collections::HashSet;

use futures::future::join_all;

use crate::helpers::{
    Answer, DEMO_MERCHANT, DEMO_TOKEN, OTHER_TOKEN, SEED_BODY, TestApp, body_with_amount,
};

impl TestApp {
    async fn create_id(&self, key: Option<&str>) -> String {
        let answer = self.create_intent(DEMO_TOKEN, key, SEED_BODY).await;
        assert_eq!(answer.status, 201, "{}", answer.body);
        answer.json()["id"].as_str().unwrap().to_owned()
    }

    /// Moves intents' expiry into the past, as if their time had run out.
    async fn expire_now(&self, ids: &[String]) {
        sqlx::query("UPDATE payment_intents SET expires_at = now() - interval '1 second' WHERE id = ANY($1)")
            .bind(ids)
            .execute(&self.db)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn cancel_moves_created_to_canceled_once_and_replays_byte_identical() {
    let app = TestApp::spawn().await;
    let id = app.create_id(Some("order-1")).await;

    let canceled = app.cancel(DEMO_TOKEN, &id, Some("cancel-1")).await;
    assert_eq!(canceled.status, 200, "{}", canceled.body);
    let intent = canceled.json();
    assert_eq!(intent["state"], "canceled");
    assert_eq!(intent["version"], 2);
    assert_eq!(intent["cancellation_reason"], "merchant_request");
    assert!(intent["canceled_at"].is_string());

    let replay = app.cancel(DEMO_TOKEN, &id, Some("cancel-1")).await;
    assert_eq!(
        (replay.status, replay.body.as_str()),
        (200, canceled.body.as_str())
    );
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));

    // A second cancel under a new key is refused by the machine; that refusal is stored too.
    let refused = app.cancel(DEMO_TOKEN, &id, Some("cancel-2")).await;
    assert_eq!(refused.status, 409);
    assert_eq!(refused.json()["error"], "invalid_state_transition");
    let refused_again = app.cancel(DEMO_TOKEN, &id, Some("cancel-2")).await;
    assert_eq!(
        (refused_again.status, refused_again.body.as_str()),
        (409, refused.body.as_str())
    );
    assert_eq!(refused_again.header("idempotent-replayed"), Some("true"));

    let transitions: Vec<(i32, String, String, String)> = sqlx::query_as(
        "SELECT version, from_state, to_state, actor FROM payment_intent_transitions WHERE intent_id = $1",
    )
    .bind(&id)
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert_eq!(
        transitions,
        vec![(
            2,
            "created".into(),
            "canceled".into(),
            format!("merchant:{DEMO_MERCHANT}")
        )]
    );

    assert_eq!(
        app.cancel(OTHER_TOKEN, &id, None).await.status,
        404,
        "another merchant's intent"
    );
    assert_eq!(
        app.cancel(DEMO_TOKEN, "pi_000000000000000000000000", None)
            .await
            .status,
        404
    );
    let with_body = app
        .client
        .post(format!("{}/v1/payment_intents/{id}/cancel", app.address))
        .bearer_auth(DEMO_TOKEN)
        .body(r#"{"reason":"x"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(
        with_body.status(),
        400,
        "unknown cancel parameters are rejected"
    );
}

#[tokio::test]
async fn two_sweepers_and_merchant_cancels_race_and_every_intent_moves_exactly_once() {
    let app = TestApp::spawn().await;
    let ids: Vec<String> = join_all((0..40).map(|_| app.create_id(None))).await;
    app.expire_now(&ids).await;

    let sweepers = join_all([app.sweep(), app.sweep()]);
    let cancels = join_all(ids.iter().map(|id| app.cancel(DEMO_TOKEN, id, None)));
    let (sweeps, cancels) = tokio::join!(sweepers, cancels);
    let swept: u64 = sweeps.into_iter().map(|r| r.unwrap().intents_expired).sum();
    let cancel_wins = cancels.iter().filter(|a| a.status == 200).count() as u64;
    for answer in &cancels {
        assert!(
            answer.status == 200 || answer.status == 409,
            "{}: {}",
            answer.status,
            answer.body
        );
    }
    assert_eq!(
        swept + cancel_wins,
        ids.len() as u64,
        "one transition per intent, none lost"
    );

    let rows: Vec<(String, i32, Option<String>, i64)> = sqlx::query_as(
        "SELECT p.state, p.version, p.cancellation_reason, \
                (SELECT count(*) FROM payment_intent_transitions t WHERE t.intent_id = p.id) \
           FROM payment_intents p",
    )
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert_eq!(rows.len(), ids.len());
    for (state, version, reason, transitions) in &rows {
        assert_eq!((state.as_str(), *version, *transitions), ("canceled", 2, 1));
        assert!(matches!(
            reason.as_deref(),
            Some("expired" | "merchant_request")
        ));
    }
    let by_merchant = rows
        .iter()
        .filter(|r| r.2.as_deref() == Some("merchant_request"))
        .count() as u64;
    assert_eq!(by_merchant, cancel_wins, "the reason matches who won");
    let system_rows: i64 =
        sqlx::query_scalar("SELECT count(*) FROM payment_intent_transitions WHERE actor = 'system' AND action = 'expire'")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(system_rows as u64, swept);

    // Nothing left to do: a second round changes nothing.
    assert_eq!(app.sweep().await.unwrap().intents_expired, 0);
}

#[tokio::test]
async fn the_sweeper_runs_in_the_background_of_a_running_server() {
    let app =
        TestApp::spawn_with(|s| s.sweep_interval = std::time::Duration::from_millis(100)).await;
    let id = app.create_id(None).await;
    let fresh = app.create_id(None).await;
    app.expire_now(std::slice::from_ref(&id)).await;
    app.wait_until(
        "the sweeper expired the intent",
        &format!("SELECT state = 'canceled' FROM payment_intents WHERE id = '{id}'"),
    )
    .await;
    let intent = app.get_intent(DEMO_TOKEN, &id).await.json();
    assert_eq!(
        (
            intent["cancellation_reason"].as_str(),
            intent["version"].as_i64()
        ),
        (Some("expired"), Some(2))
    );
    let untouched = app.get_intent(DEMO_TOKEN, &fresh).await.json();
    assert_eq!(untouched["state"], "created");
}

#[tokio::test]
async fn retention_deletes_expired_records_but_never_a_live_lease() {
    let app = TestApp::spawn().await;
    app.create_id(Some("old-key")).await;
    app.create_id(Some("young-key")).await;
    sqlx::query("UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE key = 'old-key'")
        .execute(&app.db)
        .await
        .unwrap();
    // Past retention but an attempt still holds its lease.
    sqlx::query(
        "INSERT INTO idempotency_keys (scope, key, fingerprint, state, attempt, lease_expires_at, created_at, expires_at) \
         VALUES ($1, 'leased-key', sha256('x'), 'in_flight', 1, now() + interval '1 minute', now() - interval '1 day', now() - interval '1 second')",
    )
    .bind(DEMO_MERCHANT)
    .execute(&app.db)
    .await
    .unwrap();

    let report = app.sweep().await.unwrap();
    assert_eq!(report.keys_deleted, 1);
    let left: Vec<String> = sqlx::query_scalar("SELECT key FROM idempotency_keys ORDER BY key")
        .fetch_all(&app.db)
        .await
        .unwrap();
    assert_eq!(left, vec!["leased-key", "young-key"]);

    // The deleted key is a fresh request again, whatever its body.
    let again = app
        .create_intent(DEMO_TOKEN, Some("old-key"), &body_with_amount("7"))
        .await;
    assert_eq!(again.status, 201);
    assert_eq!(again.header("idempotent-replayed"), None);
    assert_eq!(
        app.key_record(DEMO_MERCHANT, "old-key")
            .await
            .unwrap()
            .attempt,
        1
    );
}

#[tokio::test]
async fn a_backlog_past_retention_is_worked_off_in_one_round_with_growing_batches() {
    let app = TestApp::spawn().await;
    // More than a round of fixed 500-row batches (20 per round) could delete.
    let backlog = 30_000;
    sqlx::query(
        "INSERT INTO idempotency_keys (scope, key, fingerprint, state, attempt, lease_expires_at, created_at, expires_at, \
                                       completed_at, response_status, response_headers, response_body) \
         SELECT $1, 'old-' || i, sha256(i::text::bytea), 'completed', 1, now() - interval '2 days', \
                now() - interval '2 days', now() - interval '1 day', now() - interval '2 days', 201, '{}', '\\x7b7d' \
           FROM generate_series(1, $2) AS i",
    )
    .bind(DEMO_MERCHANT)
    .bind(backlog)
    .execute(&app.db)
    .await
    .unwrap();
    app.create_id(Some("live-key")).await;

    let report = app.sweep().await.unwrap();
    assert_eq!(report.keys_deleted, backlog as u64);
    let left: Vec<String> = sqlx::query_scalar("SELECT key FROM idempotency_keys")
        .fetch_all(&app.db)
        .await
        .unwrap();
    assert_eq!(left, vec!["live-key"]);
}

#[tokio::test]
async fn list_pages_newest_first_without_skipping_or_repeating_while_intents_are_created() {
    let app = TestApp::spawn().await;
    let mut existing = Vec::new();
    for _ in 0..25 {
        existing.push(app.create_id(None).await);
    }
    // Another merchant's intents never show.
    app.create_intent(OTHER_TOKEN, None, SEED_BODY).await;

    let writer = tokio::spawn({
        let (client, address) = (app.client.clone(), app.address.clone());
        async move {
            for _ in 0..30 {
                let response = client
                    .post(format!("{address}/v1/payment_intents"))
                    .bearer_auth(DEMO_TOKEN)
                    .body(SEED_BODY)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), 201);
            }
        }
    });

    let mut seen = Vec::new();
    let mut query = "limit=7".to_owned();
    loop {
        let page = app.list(DEMO_TOKEN, &query).await;
        assert_eq!(page.status, 200, "{}", page.body);
        let page = page.json();
        let data = page["data"].as_array().unwrap();
        assert!(data.len() <= 7);
        seen.extend(data.iter().map(|i| i["id"].as_str().unwrap().to_owned()));
        if !page["has_more"].as_bool().unwrap() {
            break;
        }
        query = format!("limit=7&starting_after={}", seen.last().unwrap());
    }
    writer.await.unwrap();

    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no intent repeats");
    let listed_existing: Vec<&String> = seen.iter().filter(|id| existing.contains(id)).collect();
    let newest_first: Vec<&String> = existing.iter().rev().collect();
    assert_eq!(
        listed_existing, newest_first,
        "every intent that existed is listed once, newest first"
    );
}

#[tokio::test]
async fn list_filters_by_state_and_validates_its_parameters() {
    let app = TestApp::spawn().await;
    let ids: Vec<String> = join_all((0..3).map(|_| app.create_id(None))).await;
    app.cancel(DEMO_TOKEN, &ids[1], None).await;

    let canceled = app.list(DEMO_TOKEN, "state=canceled").await.json();
    assert_eq!(canceled["data"].as_array().unwrap().len(), 1);
    assert_eq!(canceled["data"][0]["id"], ids[1].as_str());
    assert_eq!(canceled["has_more"], false);
    let all = app.list(DEMO_TOKEN, "").await.json();
    assert_eq!(all["data"].as_array().unwrap().len(), 3);
    assert_eq!(
        app.list(OTHER_TOKEN, "").await.json()["data"]
            .as_array()
            .unwrap()
            .len(),
        0
    );

    for bad in [
        "limit=0",
        "limit=101",
        "limit=ten",
        "state=settled",
        "starting_after=pi_000000000000000000000000",
        "starting_after=x",
        "color=red",
    ] {
        let answer = app.list(DEMO_TOKEN, bad).await;
        assert_eq!(answer.status, 400, "{bad}: {}", answer.body);
        assert_eq!(answer.json()["error"], "invalid_request");
    }
    // Another merchant's intent is no cursor for you.
    let foreign = app
        .list(OTHER_TOKEN, &format!("starting_after={}", ids[0]))
        .await;
    assert_eq!(foreign.status, 400);
}

#[tokio::test]
async fn a_key_record_can_be_looked_up_by_its_owner_only() {
    let app = TestApp::spawn().await;
    let id = app.create_id(Some("order-1001")).await;
    app.create_intent(DEMO_TOKEN, Some("bad-amount"), &body_with_amount("0"))
        .await;

    let lookup = |token: &'static str, key: &'static str| {
        let request = app
            .client
            .get(format!("{}/v1/idempotency_keys/{key}", app.address))
            .bearer_auth(token);
        async move { Answer::of(request.send().await.unwrap()).await }
    };
    let record = lookup(DEMO_TOKEN, "order-1001").await;
    assert_eq!(record.status, 200, "{}", record.body);
    let record = record.json();
    assert_eq!(record["state"], "completed");
    assert_eq!(record["attempt"], 1);
    assert_eq!(record["response_status"], 201);
    assert_eq!(record["resource_id"], id.as_str());
    assert_eq!(
        record["fingerprint"],
        crate::helpers::short_fingerprint("POST", "/v1/payment_intents", SEED_BODY)
    );

    let failed = lookup(DEMO_TOKEN, "bad-amount").await.json();
    assert_eq!(
        (
            failed["response_status"].as_i64(),
            failed["resource_id"].is_null()
        ),
        (Some(400), true)
    );

    assert_eq!(
        lookup(OTHER_TOKEN, "order-1001").await.status,
        404,
        "never another merchant's"
    );
    assert_eq!(lookup(DEMO_TOKEN, "never-used").await.status, 404);
    assert_eq!(
        lookup(DEMO_TOKEN, "%22unterminated").await.json()["error"],
        "idempotency_key_invalid"
    );
}
