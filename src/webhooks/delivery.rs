//! The delivery worker every replica runs (`docs/design.md`, "Events and webhooks"). It takes due
//! deliveries with `SKIP LOCKED` and leases them by moving their next attempt past the request's
//! timeout, in one statement, so two replicas never send the same attempt at once and a replica
//! killed mid-delivery only means a redelivery by another once the lease passes. At least once:
//! a delivery ends only with a 2xx, or after three days of retries.
//!
//! Three parts run side by side: the claimer keeps up to [`MAX_IN_FLIGHT`] attempts going (a
//! slow endpoint holds one slot, not the whole worker), each attempt is a task, and the recorder
//! writes finished attempts in batches, one statement for whatever finished meanwhile.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use backon::{BackoffBuilder, ExponentialBuilder};
use serde_json::value::RawValue;
use sqlx::{Connection, PgConnection, Postgres};
use time::OffsetDateTime;
use tokio::sync::{Semaphore, mpsc};

use super::{
    address::{PublicResolver, check_url},
    secret::{Secret, signature_header},
};
use crate::{
    config::WebhookSettings,
    db::{self, Pool},
    events::store::{Event, EventData},
    telemetry::metrics as names,
    workers::{Failed, Next, Schedule, Worker},
};

/// How often an idle worker looks for due deliveries.
const POLL_EVERY: Duration = Duration::from_millis(250);
/// Attempts under way at once, per replica.
const MAX_IN_FLIGHT: usize = 64;
/// Deliveries claimed at once.
const BATCH: usize = 32;
/// Finished attempts written by one statement, at most.
const RECORD_BATCH: usize = 256;
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

/// The delivery worker: each unit waits for a free slot, claims as many due deliveries as there
/// are free slots and starts their attempts; the recorder writes what they finish.
pub struct DeliveryWorker {
    pool: Pool,
    settings: WebhookSettings,
    client: reqwest::Client,
    slots: Arc<Semaphore>,
    finished: mpsc::Sender<Finished>,
    recorder: tokio::task::JoinHandle<()>,
    last_gauges: Instant,
}

impl DeliveryWorker {
    pub fn new(pool: Pool, settings: WebhookSettings) -> Self {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(settings.timeout)
            .dns_resolver(PublicResolver::shared(&settings))
            .user_agent(concat!("payments-api/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("the webhook HTTP client builds");
        let (finished, to_record) = mpsc::channel(RECORD_BATCH * 4);
        let recorder = tokio::spawn(record_finished(pool.clone(), settings, to_record));
        Self {
            pool,
            settings,
            client,
            slots: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            finished,
            recorder,
            last_gauges: Instant::now() - Duration::from_secs(60),
        }
    }

    /// An idle worker looks for due deliveries every 250 ms; a slot waits at most for an
    /// attempt's timeout.
    pub fn schedule(settings: &WebhookSettings) -> Schedule {
        // A unit may wait an attempt's timeout for a free slot.
        let every = Schedule::every(POLL_EVERY);
        Schedule {
            patience: settings.timeout + every.patience,
            deadline: settings.timeout + every.deadline,
            ..every
        }
    }
}

impl Worker for DeliveryWorker {
    async fn run_once(&mut self) -> Result<Next, Failed> {
        // The recorder ends only by panicking: a bug, and this worker is made anew with another.
        assert!(!self.recorder.is_finished(), "the webhook recorder stopped");
        if self.last_gauges.elapsed() >= Duration::from_secs(1) {
            self.last_gauges = Instant::now();
            if let Err(e) = report_queue(&self.pool).await {
                db::observe(&e);
            }
        }
        // Wait for a free slot, then claim as many deliveries as there are free slots.
        drop(self.slots.acquire().await.expect("never closed"));
        let wanted = self.slots.available_permits().min(BATCH);
        let due = claim(&self.pool, &self.settings, wanted).await?;
        let full = due.len() == wanted;
        for delivery in due {
            let slot = self
                .slots
                .clone()
                .acquire_owned()
                .await
                .expect("never closed");
            let (client, finished, settings) =
                (self.client.clone(), self.finished.clone(), self.settings);
            tokio::spawn(async move {
                let outcome = attempt(&client, &settings, delivery).await;
                let _ = finished.send(outcome).await;
                drop(slot);
            });
        }
        Ok(if full { Next::Again } else { Next::Wait })
    }
}

/// Takes up to `wanted` due deliveries and leases them, walking the due index in order and
/// stopping there (`docs/design.md`, "Plans a queue can rely on").
async fn claim(
    pool: &Pool,
    settings: &WebhookSettings,
    wanted: usize,
) -> Result<Vec<Due>, sqlx::Error> {
    let lease = settings.timeout + LEASE_MARGIN;
    let mut connection = pool.acquire().await?;
    let mut tx = planned_for_the_queue_as_it_is(&mut connection).await?;
    let due = sqlx::query_as!(
        Due,
        r#"
        WITH due AS (
            SELECT d.merchant_id, d.event_id, d.endpoint_id
              FROM webhook_deliveries d
             WHERE d.state = 'pending' AND d.next_attempt_at <= now()
               -- A subquery, not a join: the walk stays on the due index in its order.
               AND (SELECT w.disabled_at IS NULL FROM webhook_endpoints w
                     WHERE w.merchant_id = d.merchant_id AND w.id = d.endpoint_id)
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
        wanted as i64,
        lease.as_secs_f64(),
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(due)
}

/// A transaction whose statements are planned for the queue as it is now: custom plans, no bitmap
/// scans, whatever its always-stale statistics say (`docs/design.md`, "Plans a queue can rely on").
async fn planned_for_the_queue_as_it_is(
    connection: &mut PgConnection,
) -> Result<sqlx::Transaction<'_, Postgres>, sqlx::Error> {
    let mut tx = connection.begin().await?;
    sqlx::query!(
        r#"
        SELECT set_config('plan_cache_mode', 'force_custom_plan', true) AS "plan_cache_mode!",
               set_config('enable_bitmapscan', 'off', true) AS "enable_bitmapscan!"
        "#
    )
    .fetch_one(&mut *tx)
    .await?;
    Ok(tx)
}

/// How one attempt went.
struct Finished {
    due: Due,
    started_at: OffsetDateTime,
    outcome: Result<u16, String>,
    latency: Duration,
}

impl Finished {
    fn delivered(&self) -> bool {
        matches!(self.outcome, Ok(200..=299))
    }
}

/// Sends one delivery, logs and counts how it went.
async fn attempt(client: &reqwest::Client, settings: &WebhookSettings, due: Due) -> Finished {
    let started_at = OffsetDateTime::now_utc();
    let started = Instant::now();
    let outcome = send(client, settings, &due).await;
    let finished = Finished {
        latency: started.elapsed(),
        started_at,
        outcome,
        due,
    };
    let (due, latency_ms) = (&finished.due, finished.latency.as_millis() as u64);
    let delivered = finished.delivered();
    match &finished.outcome {
        Ok(status) => tracing::info!(
            event = %due.event_id, endpoint = %due.endpoint_id, attempt = due.attempts,
            status, latency_ms,
            "{}", if delivered { "webhook delivered" } else { "webhook attempt failed" }
        ),
        Err(error) => tracing::info!(
            event = %due.event_id, endpoint = %due.endpoint_id, attempt = due.attempts,
            error = %error, latency_ms, "webhook attempt failed"
        ),
    }
    let label = if delivered { "delivered" } else { "failed" };
    metrics::counter!(names::WEBHOOK_ATTEMPTS, "outcome" => label).increment(1);
    finished
}

/// Writes finished attempts as they come, batching whatever finished while the last write ran.
/// A write that fails leaves those deliveries leased: they are sent again once the lease passes.
async fn record_finished(
    pool: Pool,
    settings: WebhookSettings,
    mut to_record: mpsc::Receiver<Finished>,
) {
    let mut batch = Vec::with_capacity(RECORD_BATCH);
    while to_record.recv_many(&mut batch, RECORD_BATCH).await > 0 {
        // Bounded like a worker's unit: a connection gone silent must not stop all recording.
        match tokio::time::timeout(Schedule::DEADLINE_MARGIN, record(&pool, &settings, &batch))
            .await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                db::observe(&e);
                tracing::warn!(error = %e, attempts = batch.len(), "could not record webhook attempts; they will be sent again");
            }
            Err(_) => tracing::warn!(
                attempts = batch.len(),
                "recording webhook attempts took longer than {} s; cut short, they will be sent again",
                Schedule::DEADLINE_MARGIN.as_secs()
            ),
        }
        batch.clear();
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

/// Records finished attempts, then ends each delivery (a 2xx, or retries exhausted) or schedules
/// its next try, and keeps each endpoint's failure clock, disabling it after failing long enough.
/// A record from a lease that already passed to another replica leaves the delivery to that one.
/// Deliveries are reached by primary key (`finished_at IS NULL` tells an unfinished one, so the
/// due index is no candidate); those to a disabled endpoint are parked at `'infinity'`.
async fn record(
    pool: &Pool,
    settings: &WebhookSettings,
    batch: &[Finished],
) -> Result<(), sqlx::Error> {
    let column = |f: fn(&Finished) -> String| batch.iter().map(f).collect::<Vec<_>>();
    let merchants = column(|f| f.due.merchant_id.clone());
    let events = column(|f| f.due.event_id.clone());
    let endpoints = column(|f| f.due.endpoint_id.clone());
    let attempts: Vec<i32> = batch.iter().map(|f| f.due.attempts).collect();
    let started: Vec<OffsetDateTime> = batch.iter().map(|f| f.started_at).collect();
    let statuses: Vec<Option<i16>> = batch
        .iter()
        .map(|f| f.outcome.as_ref().ok().and_then(|s| i16::try_from(*s).ok()))
        .collect();
    let errors: Vec<Option<String>> = batch.iter().map(|f| f.outcome.clone().err()).collect();
    let latencies: Vec<i32> = batch
        .iter()
        .map(|f| i32::try_from(f.latency.as_millis()).unwrap_or(i32::MAX))
        .collect();
    let delivered: Vec<bool> = batch.iter().map(Finished::delivered).collect();
    let retry_in: Vec<f64> = batch
        .iter()
        .map(|f| retry_delay(settings, f.due.attempts).as_secs_f64())
        .collect();
    let mut connection = pool.acquire().await?;
    let mut tx = planned_for_the_queue_as_it_is(&mut connection).await?;
    let endpoints = sqlx::query!(
        r#"
        WITH finished AS (
            SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::int[], $5::timestamptz[],
                                 $6::int2[], $7::text[], $8::int[], $9::bool[], $10::float8[])
                AS f(merchant_id, event_id, endpoint_id, attempt, started_at,
                     status_code, error, latency_ms, delivered, retry_in)
        ), attempts AS (
            INSERT INTO webhook_attempts
                (merchant_id, event_id, endpoint_id, attempt, started_at, status_code, error, latency_ms)
            SELECT merchant_id, event_id, endpoint_id, attempt, started_at, status_code, error, latency_ms
              FROM finished
            ON CONFLICT DO NOTHING
        ), deliveries AS (
            UPDATE webhook_deliveries d
               SET state = CASE WHEN f.delivered THEN 'delivered'
                                WHEN d.created_at <= now() - make_interval(secs => $11) THEN 'failed'
                                ELSE 'pending' END,
                   finished_at = CASE WHEN f.delivered OR d.created_at <= now() - make_interval(secs => $11)
                                      THEN now() END,
                   next_attempt_at = CASE WHEN f.delivered THEN d.next_attempt_at
                                          WHEN (SELECT w.disabled_at IS NOT NULL FROM webhook_endpoints w
                                                 WHERE w.merchant_id = d.merchant_id AND w.id = d.endpoint_id)
                                          THEN 'infinity'
                                          ELSE now() + make_interval(secs => f.retry_in) END
              FROM finished f
             WHERE d.merchant_id = f.merchant_id AND d.event_id = f.event_id
               AND d.endpoint_id = f.endpoint_id AND d.attempts = f.attempt
               AND d.finished_at IS NULL
        ), endpoints AS (
            SELECT merchant_id, endpoint_id, bool_or(delivered) AS answered
              FROM finished GROUP BY merchant_id, endpoint_id
        )
        UPDATE webhook_endpoints w
           SET failing_since = CASE WHEN e.answered THEN NULL ELSE COALESCE(w.failing_since, now()) END,
               disabled_at = CASE WHEN NOT e.answered AND w.disabled_at IS NULL
                                   AND COALESCE(w.failing_since, now()) <= now() - make_interval(secs => $12)
                                  THEN now() ELSE w.disabled_at END
          FROM endpoints e
         WHERE w.merchant_id = e.merchant_id AND w.id = e.endpoint_id
           -- An endpoint that keeps answering is not rewritten on every batch.
           AND NOT (e.answered AND w.failing_since IS NULL)
        -- Disabled by this statement: its timestamp is this transaction's.
        RETURNING w.merchant_id, w.id, COALESCE(w.disabled_at = now(), false) AS "disabled_now!"
        "#,
        &merchants,
        &events,
        &endpoints,
        &attempts,
        &started,
        &statuses as &[Option<i16>],
        &errors as &[Option<String>],
        &latencies,
        &delivered,
        &retry_in,
        settings.retry_for.as_secs_f64(),
        settings.disable_after.as_secs_f64(),
    )
    .fetch_all(&mut *tx)
    .await?;
    for endpoint in endpoints.into_iter().filter(|e| e.disabled_now) {
        sqlx::query!(
            r#"
            UPDATE webhook_deliveries SET next_attempt_at = 'infinity'
             WHERE merchant_id = $1 AND endpoint_id = $2 AND finished_at IS NULL
            "#,
            endpoint.merchant_id,
            endpoint.id,
        )
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await
}

/// Sets the queue gauges: how many deliveries wait, and for how long the oldest has. Deliveries to
/// a disabled endpoint are not counted: they wait for no worker, and would hold the age up forever.
async fn report_queue(pool: &Pool) -> Result<(), sqlx::Error> {
    let queue = sqlx::query!(
        r#"
        SELECT count(*) AS "depth!",
               COALESCE(extract(epoch FROM now() - min(created_at)), 0)::float8 AS "oldest_seconds!"
          FROM webhook_deliveries WHERE state = 'pending' AND next_attempt_at <> 'infinity'
        "#
    )
    .fetch_one(&mut *pool.acquire().await?)
    .await?;
    metrics::gauge!(names::WEBHOOK_QUEUE_DEPTH).set(queue.depth as f64);
    metrics::gauge!(names::WEBHOOK_OLDEST_PENDING).set(queue.oldest_seconds);
    Ok(())
}

/// A delivery of one of a subject's events to one endpoint, as a payment's dashboard page shows
/// it: its state, attempts and the last answer.
#[derive(Debug)]
pub struct SubjectDelivery {
    pub event_id: String,
    pub event_type: String,
    pub endpoint_url: Option<String>,
    pub state: String,
    pub attempts: i32,
    pub last_status: Option<i16>,
    pub last_error: Option<String>,
}

/// The deliveries of every event about `subject_id` (an intent), in the events' order.
pub async fn of_subject(
    conn: &mut sqlx::PgConnection,
    merchant: &str,
    subject_id: &str,
) -> Result<Vec<SubjectDelivery>, sqlx::Error> {
    sqlx::query_as!(
        SubjectDelivery,
        r#"SELECT d.event_id, e.type AS event_type, w.url AS "endpoint_url?", d.state, d.attempts,
                  a.status_code AS "last_status?", a.error AS "last_error?"
             FROM events e
             JOIN webhook_deliveries d ON d.merchant_id = e.merchant_id AND d.event_id = e.id
             LEFT JOIN webhook_endpoints w ON w.merchant_id = d.merchant_id AND w.id = d.endpoint_id
             LEFT JOIN LATERAL (
                  SELECT status_code, error FROM webhook_attempts t
                   WHERE t.merchant_id = d.merchant_id AND t.event_id = d.event_id
                     AND t.endpoint_id = d.endpoint_id
                   ORDER BY t.attempt DESC LIMIT 1) a ON true
            WHERE e.merchant_id = $1 AND e.subject_id = $2
            ORDER BY e.subject_version, d.endpoint_id"#,
        merchant,
        subject_id,
    )
    .fetch_all(conn)
    .await
}

/// A delivery to one endpoint, as its dashboard page lists it.
#[derive(Debug)]
pub struct EndpointDelivery {
    pub event_id: String,
    pub event_type: String,
    pub state: String,
    pub attempts: i32,
    pub created_at: OffsetDateTime,
    pub last_status: Option<i16>,
    pub last_error: Option<String>,
}

/// The endpoint's newest deliveries, up to `limit`.
pub async fn of_endpoint(
    conn: &mut PgConnection,
    merchant: &str,
    endpoint_id: &str,
    limit: i64,
) -> Result<Vec<EndpointDelivery>, sqlx::Error> {
    sqlx::query_as!(
        EndpointDelivery,
        r#"SELECT d.event_id, e.type AS event_type, d.state, d.attempts, d.created_at,
                  a.status_code AS "last_status?", a.error AS "last_error?"
             FROM webhook_deliveries d
             JOIN events e ON e.merchant_id = d.merchant_id AND e.id = d.event_id
             LEFT JOIN LATERAL (
                  SELECT status_code, error FROM webhook_attempts t
                   WHERE t.merchant_id = d.merchant_id AND t.event_id = d.event_id
                     AND t.endpoint_id = d.endpoint_id
                   ORDER BY t.attempt DESC LIMIT 1) a ON true
            WHERE d.merchant_id = $1 AND d.endpoint_id = $2
            ORDER BY d.created_at DESC, d.event_id DESC
            LIMIT $3"#,
        merchant,
        endpoint_id,
        limit,
    )
    .fetch_all(conn)
    .await
}

/// Sends a failed delivery once more, now: it is pending again, and the worker's next claim takes
/// it (its retry window has passed, so one more failure fails it again). Whether it was failed.
pub async fn resend(
    conn: &mut PgConnection,
    merchant: &str,
    endpoint_id: &str,
    event_id: &str,
) -> Result<bool, sqlx::Error> {
    let resent = sqlx::query!(
        "UPDATE webhook_deliveries
            SET state = 'pending', finished_at = NULL, next_attempt_at = now()
          WHERE merchant_id = $1 AND endpoint_id = $2 AND event_id = $3 AND state = 'failed'",
        merchant,
        endpoint_id,
        event_id,
    )
    .execute(conn)
    .await?;
    Ok(resent.rows_affected() == 1)
}
