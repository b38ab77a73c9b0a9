//! The delivery worker every replica runs (`docs/design.md`, "Events and webhooks"). It takes due
//! deliveries with `SKIP LOCKED` and leases them by moving their next attempt past the request's
//! timeout, in one statement, so two replicas never send the same attempt at once and a replica
//! killed mid-delivery only means a redelivery by another once the lease passes. At least once:
//! a delivery ends only with a 2xx, or after three days of retries.

use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBuilder};
use serde_json::value::RawValue;
use time::OffsetDateTime;
use tokio::task::JoinSet;

use super::{
    address::{PublicResolver, check_url},
    secret::{Secret, signature_header},
};
use crate::{
    config::WebhookSettings,
    db::{self, Pool},
    events::store::{Event, EventData},
    telemetry::metrics as names,
};

/// How often an idle worker looks for due deliveries.
const POLL_EVERY: Duration = Duration::from_millis(250);
/// Deliveries taken at once; each is sent by a task of its own.
const BATCH: i64 = 32;
/// A lease outlasts the attempt's own timeout by this much before another replica may retry it.
const LEASE_MARGIN: Duration = Duration::from_secs(5);
/// At most this much of an endpoint's answer is read.
const MAX_RESPONSE_BYTES: usize = 64 * 1024;
/// The longest wait between two attempts.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(6 * 3600);

/// One delivery this replica now holds the lease of.
struct Due {
    merchant_id: String,
    event_id: String,
    endpoint_id: String,
    attempts: i32,
    kind: String,
    event_created_at: OffsetDateTime,
    object: String,
    url: String,
    secret: String,
    previous_secret: Option<String>,
}

/// Delivers until the task is dropped. A failed round (database down) is logged and retried.
pub async fn run(pool: Pool, settings: WebhookSettings) {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(settings.timeout)
        .dns_resolver(PublicResolver::shared(&settings))
        .user_agent(concat!("payments-api/", env!("CARGO_PKG_VERSION")))
        .build()
        .expect("the webhook HTTP client builds");
    let mut last_gauges = Instant::now() - Duration::from_secs(60);
    loop {
        let round = deliver_due(&pool, &client, &settings).await;
        if last_gauges.elapsed() >= Duration::from_secs(1) {
            last_gauges = Instant::now();
            if let Err(e) = report_queue(&pool).await {
                db::observe(&e);
            }
        }
        match round {
            // A full batch: more may be due already.
            Ok(taken) if taken == BATCH as usize => continue,
            Ok(_) => {}
            Err(e) => {
                db::observe(&e);
                tracing::warn!(error = %e, "webhook round failed; retrying");
            }
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

async fn deliver_due(
    pool: &Pool,
    client: &reqwest::Client,
    settings: &WebhookSettings,
) -> Result<usize, sqlx::Error> {
    let lease = settings.timeout + LEASE_MARGIN;
    let due = sqlx::query_as!(
        Due,
        r#"
        WITH due AS (
            SELECT d.merchant_id, d.event_id, d.endpoint_id
              FROM webhook_deliveries d
              JOIN webhook_endpoints w ON w.merchant_id = d.merchant_id AND w.id = d.endpoint_id
             WHERE d.state = 'pending' AND d.next_attempt_at <= now() AND w.disabled_at IS NULL
             ORDER BY d.next_attempt_at
             LIMIT $1
               FOR UPDATE OF d SKIP LOCKED
        ), leased AS (
            UPDATE webhook_deliveries d
               SET attempts = d.attempts + 1, next_attempt_at = now() + make_interval(secs => $2)
              FROM due
             WHERE d.merchant_id = due.merchant_id AND d.event_id = due.event_id
               AND d.endpoint_id = due.endpoint_id
            RETURNING d.merchant_id, d.event_id, d.endpoint_id, d.attempts
        )
        SELECT l.merchant_id AS "merchant_id!", l.event_id AS "event_id!",
               l.endpoint_id AS "endpoint_id!", l.attempts AS "attempts!",
               e.type AS kind, e.created_at AS event_created_at, e.object::text AS "object!",
               w.url, w.secret,
               CASE WHEN w.previous_secret_until > now() THEN w.previous_secret END AS previous_secret
          FROM leased l
          JOIN events e ON e.merchant_id = l.merchant_id AND e.id = l.event_id
          JOIN webhook_endpoints w ON w.merchant_id = l.merchant_id AND w.id = l.endpoint_id
        "#,
        BATCH,
        lease.as_secs_f64(),
    )
    .fetch_all(&mut *pool.acquire().await?)
    .await?;
    let taken = due.len();
    let mut attempts = JoinSet::new();
    for delivery in due {
        let (pool, client, settings) = (pool.clone(), client.clone(), *settings);
        attempts.spawn(async move { attempt(&pool, &client, &settings, delivery).await });
    }
    while attempts.join_next().await.is_some() {}
    Ok(taken)
}

/// Sends one delivery and records how it went.
async fn attempt(pool: &Pool, client: &reqwest::Client, settings: &WebhookSettings, due: Due) {
    let started_at = OffsetDateTime::now_utc();
    let started = Instant::now();
    let outcome = send(client, settings, &due).await;
    let latency = started.elapsed();
    let delivered = matches!(outcome, Ok(200..=299));
    match &outcome {
        Ok(status) => tracing::info!(
            event = %due.event_id, endpoint = %due.endpoint_id, attempt = due.attempts,
            status, latency_ms = latency.as_millis() as u64,
            "{}", if delivered { "webhook delivered" } else { "webhook attempt failed" }
        ),
        Err(error) => tracing::info!(
            event = %due.event_id, endpoint = %due.endpoint_id, attempt = due.attempts,
            error = %error, latency_ms = latency.as_millis() as u64, "webhook attempt failed"
        ),
    }
    let label = if delivered { "delivered" } else { "failed" };
    metrics::counter!(names::WEBHOOK_ATTEMPTS, "outcome" => label).increment(1);
    let recorded = record(pool, settings, &due, started_at, &outcome, latency).await;
    if let Err(e) = recorded {
        db::observe(&e);
        tracing::warn!(error = %e, event = %due.event_id, "could not record a webhook attempt; it will be sent again");
    }
}

/// The endpoint's status code, or why there was none.
async fn send(
    client: &reqwest::Client,
    settings: &WebhookSettings,
    due: &Due,
) -> Result<u16, String> {
    // Checked again at every delivery: the settings may have changed since the endpoint was made.
    let url = check_url(&due.url, settings).map_err(|e| format!("url {e}"))?;
    let event = Event {
        id: due.event_id.clone(),
        kind: due.kind.clone(),
        created_at: due.event_created_at,
        data: EventData {
            object: RawValue::from_string(due.object.clone()).map_err(|e| e.to_string())?,
        },
    };
    let body = serde_json::to_vec(&event).map_err(|e| e.to_string())?;
    let timestamp = OffsetDateTime::now_utc().unix_timestamp();
    let mut secrets = vec![Secret::from_stored(due.secret.clone())];
    secrets.extend(due.previous_secret.clone().map(Secret::from_stored));
    let signature = signature_header(&secrets, &due.event_id, timestamp, &body);
    let mut response = client
        .post(url)
        .header("content-type", "application/json")
        .header("webhook-id", &due.event_id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(body)
        .send()
        .await
        .map_err(|e| describe(&e, settings))?;
    let status = response.status().as_u16();
    let mut read = 0;
    while let Ok(Some(chunk)) = response.chunk().await {
        read += chunk.len();
        if read >= MAX_RESPONSE_BYTES {
            break;
        }
    }
    Ok(status)
}

/// What went wrong, with every cause (the resolver's refusal sits deep in the chain).
fn describe(error: &reqwest::Error, settings: &WebhookSettings) -> String {
    if error.is_timeout() {
        return format!("no answer within {} s", settings.timeout.as_secs_f64());
    }
    let mut text = String::from(if error.is_connect() {
        "cannot connect"
    } else {
        "request failed"
    });
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The wait before attempt `attempts + 1`: exponential from the base, with jitter.
fn retry_delay(settings: &WebhookSettings, attempts: i32) -> Duration {
    ExponentialBuilder::default()
        .with_min_delay(settings.retry_base)
        .with_max_delay(MAX_RETRY_DELAY)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .build()
        .nth(attempts.saturating_sub(1) as usize)
        .unwrap_or(MAX_RETRY_DELAY)
}

/// Records the attempt, then ends the delivery (a 2xx, or retries exhausted) or schedules the next
/// try, and keeps the endpoint's failure clock, disabling it after failing long enough. A record
/// from a lease that already passed to another replica leaves the delivery to that replica.
async fn record(
    pool: &Pool,
    settings: &WebhookSettings,
    due: &Due,
    started_at: OffsetDateTime,
    outcome: &Result<u16, String>,
    latency: Duration,
) -> Result<(), sqlx::Error> {
    let (status, error) = match outcome {
        Ok(status) => (i16::try_from(*status).ok(), None),
        Err(error) => (None, Some(error.as_str())),
    };
    let delivered = matches!(outcome, Ok(200..=299));
    sqlx::query!(
        r#"
        WITH attempt AS (
            INSERT INTO webhook_attempts
                (merchant_id, event_id, endpoint_id, attempt, started_at, status_code, error, latency_ms)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
            ON CONFLICT DO NOTHING
        ), delivery AS (
            UPDATE webhook_deliveries
               SET state = CASE WHEN $9 THEN 'delivered'
                                WHEN created_at <= now() - make_interval(secs => $10) THEN 'failed'
                                ELSE 'pending' END,
                   finished_at = CASE WHEN $9 OR created_at <= now() - make_interval(secs => $10)
                                      THEN now() END,
                   next_attempt_at = CASE WHEN $9 THEN next_attempt_at
                                          ELSE now() + make_interval(secs => $11) END
             WHERE merchant_id = $1 AND event_id = $2 AND endpoint_id = $3
               AND attempts = $4 AND state = 'pending'
        )
        UPDATE webhook_endpoints
           SET failing_since = CASE WHEN $9 THEN NULL ELSE COALESCE(failing_since, now()) END,
               disabled_at = CASE WHEN NOT $9 AND disabled_at IS NULL
                                   AND COALESCE(failing_since, now()) <= now() - make_interval(secs => $12)
                                  THEN now() ELSE disabled_at END
         WHERE merchant_id = $1 AND id = $3
        "#,
        due.merchant_id,
        due.event_id,
        due.endpoint_id,
        due.attempts,
        started_at,
        status,
        error,
        i32::try_from(latency.as_millis()).unwrap_or(i32::MAX),
        delivered,
        settings.retry_for.as_secs_f64(),
        retry_delay(settings, due.attempts).as_secs_f64(),
        settings.disable_after.as_secs_f64(),
    )
    .execute(&mut *pool.acquire().await?)
    .await?;
    Ok(())
}

/// Sets the queue gauges: how many deliveries wait, and for how long the oldest has.
async fn report_queue(pool: &Pool) -> Result<(), sqlx::Error> {
    let queue = sqlx::query!(
        r#"
        SELECT count(*) AS "depth!",
               COALESCE(extract(epoch FROM now() - min(created_at)), 0)::float8 AS "oldest_seconds!"
          FROM webhook_deliveries WHERE state = 'pending'
        "#
    )
    .fetch_one(&mut *pool.acquire().await?)
    .await?;
    metrics::gauge!(names::WEBHOOK_QUEUE_DEPTH).set(queue.depth as f64);
    metrics::gauge!(names::WEBHOOK_OLDEST_PENDING).set(queue.oldest_seconds);
    Ok(())
}
