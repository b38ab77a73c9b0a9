//! The `events` table, and the delivery queue rows each event owes its subscribed endpoints.

use serde::Serialize;
use serde_json::value::RawValue;
use sqlx::PgConnection;
use time::OffsetDateTime;

use crate::ids;

/// An event about to be recorded.
pub struct NewEvent<'a> {
    /// e.g. `payment_intent.created`.
    pub kind: String,
    /// What changed, and the version the change made: one event per version.
    pub subject_id: &'a str,
    pub subject_version: i32,
    /// The subject exactly as the API shows it right after the change, as JSON text.
    pub object: String,
}

/// Records an event and queues its delivery to every enabled endpoint of the merchant subscribed
/// to its type, in one statement on the caller's transaction; a change of an intent after its
/// creation also notifies `CHANGED_CHANNEL` with its id at commit (open checkout pages follow it).
pub async fn record(
    conn: &mut PgConnection,
    merchant: &str,
    event: &NewEvent<'_>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        WITH event AS (
            INSERT INTO events (merchant_id, id, type, subject_id, subject_version, object)
            VALUES ($1, $2, $3, $4, $5, $6::text::json)
            -- In RETURNING, so it runs whatever the deliveries below select. Only a change of an
            -- intent that exists already: that is what open checkout pages follow.
            RETURNING merchant_id, id, type,
                      CASE WHEN type LIKE 'payment_intent.%' AND type <> 'payment_intent.created'
                           THEN pg_notify($7, subject_id) END AS notified
        )
        INSERT INTO webhook_deliveries (merchant_id, event_id, endpoint_id)
        SELECT e.merchant_id, e.id, w.id
          FROM event e
          JOIN webhook_endpoints w
            ON w.merchant_id = e.merchant_id AND w.disabled_at IS NULL
           AND (w.event_types IS NULL OR e.type = ANY (w.event_types))
        "#,
        merchant,
        ids::generate("evt_"),
        event.kind,
        event.subject_id,
        event.subject_version,
        event.object,
        super::CHANGED_CHANNEL,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// An event as the API shows it; field order is the response's key order.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Event {
    /// `evt_` + 24 lowercase hex digits.
    pub id: String,
    /// e.g. `payment_intent.created`, `payment_intent.canceled`.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    pub data: EventData,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EventData {
    /// The object right after the change, exactly as the API showed it then.
    #[schema(value_type = Object)]
    pub object: Box<RawValue>,
}

struct EventRow {
    id: String,
    kind: String,
    created_at: OffsetDateTime,
    object: String,
}

impl TryFrom<EventRow> for Event {
    type Error = sqlx::Error;
    fn try_from(row: EventRow) -> Result<Self, sqlx::Error> {
        let object = RawValue::from_string(row.object)
            .map_err(|e| sqlx::Error::Decode(format!("events.object: {e}").into()))?;
        Ok(Self {
            id: row.id,
            kind: row.kind,
            created_at: row.created_at,
            data: EventData { object },
        })
    }
}

pub async fn find(
    conn: &mut PgConnection,
    merchant: &str,
    id: &str,
) -> Result<Option<Event>, sqlx::Error> {
    sqlx::query_as!(
        EventRow,
        r#"
        SELECT id, type AS kind, created_at, object::text AS "object!"
          FROM events WHERE merchant_id = $1 AND id = $2
        "#,
        merchant,
        id,
    )
    .fetch_optional(conn)
    .await?
    .map(Event::try_from)
    .transpose()
}

/// Where a page starts: strictly after this event, newest first.
pub struct Cursor {
    pub created_at: OffsetDateTime,
    pub id: String,
}

pub async fn cursor(
    conn: &mut PgConnection,
    merchant: &str,
    id: &str,
) -> Result<Option<Cursor>, sqlx::Error> {
    sqlx::query_as!(
        Cursor,
        "SELECT created_at, id FROM events WHERE merchant_id = $1 AND id = $2",
        merchant,
        id,
    )
    .fetch_optional(conn)
    .await
}

/// Up to `limit` of a merchant's events, newest first, after `after`, optionally of one type.
pub async fn list(
    conn: &mut PgConnection,
    merchant: &str,
    kind: Option<&str>,
    after: Option<&Cursor>,
    limit: i64,
) -> Result<Vec<Event>, sqlx::Error> {
    sqlx::query_as!(
        EventRow,
        r#"
        SELECT id, type AS kind, created_at, object::text AS "object!"
          FROM events
         WHERE merchant_id = $1
           AND ($2::text IS NULL OR type = $2)
           AND ($3::timestamptz IS NULL OR (created_at, id) < ($3, $4))
         ORDER BY created_at DESC, id DESC
         LIMIT $5
        "#,
        merchant,
        kind,
        after.map(|c| c.created_at),
        after.map(|c| c.id.as_str()),
        limit,
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(Event::try_from)
    .collect()
}

/// How long events are kept.
pub const RETENTION_DAYS: i32 = 30;

/// Deletes up to `batch` events older than the retention, with their deliveries and attempts.
pub async fn delete_expired(conn: &mut PgConnection, batch: i64) -> Result<u64, sqlx::Error> {
    let result = sqlx::query!(
        r#"
        WITH doomed AS (
            SELECT merchant_id, id FROM events
             WHERE created_at < now() - make_interval(days => $2)
             ORDER BY created_at
             LIMIT $1
               FOR UPDATE SKIP LOCKED
        )
        DELETE FROM events e USING doomed
         WHERE e.merchant_id = doomed.merchant_id AND e.id = doomed.id
        "#,
        batch,
        RETENTION_DAYS,
    )
    .execute(conn)
    .await?;
    Ok(result.rows_affected())
}

/// One attempt to deliver an event, as `GET /v1/events/{id}/deliveries` shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeliveryAttempt {
    /// The endpoint (`we_…`).
    pub endpoint_id: String,
    /// 1 for the first try of this event at this endpoint.
    pub attempt: i32,
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// The endpoint's HTTP status, if it answered.
    pub status_code: Option<i16>,
    /// Why the attempt failed without an answer (timeout, refused, address not allowed, ...).
    pub error: Option<String>,
    pub latency_ms: i32,
}

pub async fn attempts(
    conn: &mut PgConnection,
    merchant: &str,
    event_id: &str,
) -> Result<Vec<DeliveryAttempt>, sqlx::Error> {
    sqlx::query_as!(
        DeliveryAttempt,
        r#"
        SELECT endpoint_id, attempt, started_at, status_code, error, latency_ms
          FROM webhook_attempts
         WHERE merchant_id = $1 AND event_id = $2
         ORDER BY started_at, endpoint_id, attempt
        "#,
        merchant,
        event_id,
    )
    .fetch_all(conn)
    .await
}

/// One change of a subject, as the dashboard's timeline shows it.
#[derive(Debug)]
pub struct Change {
    pub id: String,
    pub kind: String,
    pub created_at: OffsetDateTime,
}

/// The events about `subject_id` (an intent), oldest first, while they are kept.
pub async fn of_subject(
    conn: &mut PgConnection,
    merchant: &str,
    subject_id: &str,
) -> Result<Vec<Change>, sqlx::Error> {
    sqlx::query_as!(
        Change,
        r#"SELECT id, type AS kind, created_at FROM events
            WHERE merchant_id = $1 AND subject_id = $2 ORDER BY subject_version"#,
        merchant,
        subject_id,
    )
    .fetch_all(conn)
    .await
}

/// The type of the event "Send test event" sends: to the one endpoint it was asked for, whatever
/// types that endpoint subscribed to.
pub const TEST_TYPE: &str = "webhook_endpoint.test";

/// Records a test event about `endpoint_id` and its delivery to that endpoint alone.
pub async fn record_test(
    conn: &mut PgConnection,
    merchant: &str,
    endpoint_id: &str,
) -> Result<String, sqlx::Error> {
    let id = ids::generate("evt_");
    let object =
        serde_json::json!({ "id": endpoint_id, "object": "webhook_endpoint", "test": true });
    sqlx::query!(
        r#"
        WITH event AS (
            INSERT INTO events (merchant_id, id, type, subject_id, subject_version, object)
            VALUES ($1, $2, $3, $4,
                    (SELECT COALESCE(max(subject_version), 0) + 1 FROM events
                      WHERE merchant_id = $1 AND subject_id = $4),
                    $5::text::json)
            RETURNING merchant_id, id
        )
        INSERT INTO webhook_deliveries (merchant_id, event_id, endpoint_id)
        SELECT merchant_id, id, $4 FROM event
        "#,
        merchant,
        id,
        TEST_TYPE,
        endpoint_id,
        object.to_string(),
    )
    .execute(conn)
    .await?;
    Ok(id)
}
