//! Events: written with the change they describe, shown as the API showed the object then, listed
//! in cursor pages, kept 30 days; and the metadata they carry.

use crate::helpers::{DEMO_TOKEN, SEED_BODY, TestApp};

fn with_metadata(metadata: &str) -> String {
    SEED_BODY.replace("900}", &format!("900,\"metadata\":{metadata}}}"))
}

#[tokio::test]
async fn every_change_writes_one_event_showing_the_object_as_answered() {
    let app = TestApp::spawn().await;
    let created = app
        .create_intent(
            DEMO_TOKEN,
            Some("ev-1"),
            &with_metadata(r#"{"order":"1001"}"#),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(
        created.json()["metadata"],
        serde_json::json!({"order": "1001"})
    );
    let id = created.json()["id"].as_str().unwrap().to_owned();
    let canceled = app.cancel(DEMO_TOKEN, &id, Some("ev-1-cancel")).await;
    assert_eq!(canceled.status, 200);

    let page = app.get_as(DEMO_TOKEN, "/v1/events").await;
    assert_eq!(page.status, 200, "{}", page.body);
    let events = page.json()["data"].as_array().unwrap().clone();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["payment_intent.canceled", "payment_intent.created"]);

    // The object is the answer, byte for byte: keys in the API's order, metadata included.
    let created_event = app
        .get_as(
            DEMO_TOKEN,
            &format!("/v1/events/{}", events[1]["id"].as_str().unwrap()),
        )
        .await;
    assert_eq!(created_event.status, 200);
    let body = &created_event.body;
    let object = &body[body.find("\"object\":").unwrap() + "\"object\":".len()..body.len() - 2];
    assert_eq!(object, created.body);
    let keys: Vec<&str> = ["id", "type", "created_at", "data"].to_vec();
    let positions: Vec<usize> = keys
        .iter()
        .map(|k| body.find(&format!("\"{k}\":")).unwrap())
        .collect();
    assert!(positions.is_sorted(), "event keys in order: {body}");
    assert_eq!(events[0]["data"]["object"], canceled.json());

    // A replay writes nothing.
    let replay = app
        .create_intent(
            DEMO_TOKEN,
            Some("ev-1"),
            &with_metadata(r#"{"order":"1001"}"#),
        )
        .await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(app.event_count().await, 2);
}

#[tokio::test]
async fn events_are_listed_in_pages_and_by_type() {
    let app = TestApp::spawn().await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let created = app.create_intent(DEMO_TOKEN, None, SEED_BODY).await;
        ids.push(created.json()["id"].as_str().unwrap().to_owned());
    }
    app.cancel(DEMO_TOKEN, &ids[0], None).await;

    let first = app.get_as(DEMO_TOKEN, "/v1/events?limit=2").await.json();
    assert_eq!(first["has_more"], true);
    let last_id = first["data"][1]["id"].as_str().unwrap();
    let second = app
        .get_as(
            DEMO_TOKEN,
            &format!("/v1/events?limit=2&starting_after={last_id}"),
        )
        .await
        .json();
    assert_eq!(second["has_more"], false);
    let seen: Vec<&str> = first["data"]
        .as_array()
        .unwrap()
        .iter()
        .chain(second["data"].as_array().unwrap())
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(seen.len(), 4);

    let canceled = app
        .get_as(DEMO_TOKEN, "/v1/events?type=payment_intent.canceled")
        .await
        .json();
    assert_eq!(canceled["data"].as_array().unwrap().len(), 1);
    assert_eq!(canceled["data"][0]["data"]["object"]["id"], ids[0].as_str());
    assert_eq!(
        app.get_as(DEMO_TOKEN, "/v1/events?limit=0").await.status,
        400
    );
    assert_eq!(
        app.get_as(DEMO_TOKEN, "/v1/events/evt_nope").await.status,
        404
    );
}

#[tokio::test]
async fn expiry_by_the_sweeper_writes_a_canceled_event() {
    let app = TestApp::spawn().await;
    let created = app.create_intent(DEMO_TOKEN, None, SEED_BODY).await;
    let id = created.json()["id"].as_str().unwrap().to_owned();
    sqlx::query(
        "UPDATE payment_intents SET expires_at = now() - interval '1 second' WHERE id = $1",
    )
    .bind(&id)
    .execute(&app.db)
    .await
    .unwrap();
    assert_eq!(app.sweep().await.unwrap().intents_expired, 1);

    let events = app
        .get_as(DEMO_TOKEN, "/v1/events?type=payment_intent.canceled")
        .await
        .json();
    let object = &events["data"][0]["data"]["object"];
    assert_eq!(object["id"], id.as_str());
    assert_eq!(object["cancellation_reason"], "expired");
    assert_eq!(object, &app.get_intent(DEMO_TOKEN, &id).await.json());
}

#[tokio::test]
async fn events_are_kept_thirty_days() {
    let app = TestApp::spawn().await;
    app.create_intent(DEMO_TOKEN, None, SEED_BODY).await;
    app.create_intent(DEMO_TOKEN, None, SEED_BODY).await;
    sqlx::query(
        "UPDATE events SET created_at = now() - interval '30 days 1 second' \
          WHERE id = (SELECT id FROM events ORDER BY created_at LIMIT 1)",
    )
    .execute(&app.db)
    .await
    .unwrap();
    assert_eq!(app.sweep().await.unwrap().events_deleted, 1);
    assert_eq!(app.event_count().await, 1);
}

#[tokio::test]
async fn metadata_beyond_the_limits_is_400_naming_the_key() {
    let app = TestApp::spawn().await;
    let long_key = "k".repeat(41);
    let many: String = (0..51)
        .map(|i| format!("\"k{i}\":\"v\""))
        .collect::<Vec<_>>()
        .join(",");
    let cases = [
        (format!(r#"{{"{long_key}":"v"}}"#), "kkkkkkkk"),
        (format!(r#"{{"note":"{}"}}"#, "x".repeat(501)), "\"note\""),
        (r#"{"count":3}"#.to_owned(), "\"count\""),
        (format!("{{{many}}}"), "at most 50 keys"),
        (r#"["a"]"#.to_owned(), "metadata"),
    ];
    for (metadata, named) in cases {
        let answer = app
            .create_intent(DEMO_TOKEN, None, &with_metadata(&metadata))
            .await;
        assert_eq!(answer.status, 400, "{metadata}: {}", answer.body);
        let detail = answer.json()["detail"].as_str().unwrap().to_owned();
        assert!(detail.starts_with("metadata"), "{detail}");
        assert!(detail.contains(named), "{detail} should name {named}");
    }
    let at_the_limits = format!(r#"{{"{}":"{}"}}"#, "k".repeat(40), "é".repeat(500));
    let answer = app
        .create_intent(DEMO_TOKEN, None, &with_metadata(&at_the_limits))
        .await;
    assert_eq!(answer.status, 201, "{}", answer.body);
    assert_eq!(app.intent_count().await, 1);
}
