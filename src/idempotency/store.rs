//! The `idempotency_keys` table: claim, complete, release (`docs/design.md`, "Claim, then execute").
//! Every time is the database's `now()`, never a replica's clock, so any number of replicas agree on
//! leases and expiry.

use std::time::Duration;

use sqlx::PgConnection;

use super::{Fingerprint, IdempotencyKey, Scope, StoredResponse};
use crate::db::{CommitError, OpenTransaction};

/// What the claim decided for one `(scope, key, fingerprint)`.
#[derive(Debug)]
pub enum Claim {
    /// No live record (or its retention passed): this request now holds the lease. Run the handler.
    Fresh { attempt: i32 },
    /// The previous attempt's lease expired before it completed: this request took over, at the
    /// recovery point the earlier attempts reached (`None`: none committed a phase).
    Takeover {
        attempt: i32,
        recovery_point: Option<String>,
    },
    /// Same request, already completed: answer with the stored response.
    Replay {
        attempt: i32,
        response: StoredResponse,
    },
    /// Same request, another attempt holds a live lease.
    InFlight,
    /// Another request already owns this key within its retention.
    Mismatch { stored: Fingerprint },
}

/// The lease a request holds on its key after a fresh claim or a takeover: the attempt that may
/// complete the record, and the token its claim wrote, which ends the lease.
#[derive(Debug, Clone)]
pub struct Lease {
    pub scope: Scope,
    pub key: IdempotencyKey,
    pub attempt: i32,
    pub token: LeaseToken,
}

/// A random number the API chooses for each claim and the claim writes into the record when it
/// takes the key, so the API can end that lease even if the claim's answer never arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseToken(i64);

impl LeaseToken {
    pub fn generate() -> Self {
        Self(rand::random())
    }
}

/// The one atomic decision point: a single statement that takes the key when it is free (fresh) or
/// abandoned (takeover), and otherwise reads the record to tell replay, in-flight and mismatch
/// apart without writing. It commits without waiting for its WAL flush; why a lost claim is
/// harmless, and why concurrent claims have exactly one winner, is in `docs/design.md`.
pub async fn claim(
    conn: &mut PgConnection,
    scope: &Scope,
    key: &IdempotencyKey,
    fingerprint: &Fingerprint,
    token: LeaseToken,
    lease: Duration,
    retention: Duration,
) -> Result<Claim, sqlx::Error> {
    // Under READ COMMITTED the fallback SELECT reads the statement's snapshot, which can predate a
    // row that a concurrent claim committed while this INSERT waited on it; then nothing comes back
    // and a second run, with a fresh snapshot, sees the row.
    for _ in 0..3 {
        let row = sqlx::query!(
            r#"
            WITH existing AS (
                SELECT * FROM idempotency_keys WHERE scope = $1 AND key = $2
            ), claimed AS (
                INSERT INTO idempotency_keys AS k
                    (scope, key, fingerprint, state, attempt, lease_token, lease_expires_at, created_at, expires_at)
                SELECT $1, $2, $3, 'in_flight', 1, $6,
                       now() + make_interval(secs => $4), now(), now() + make_interval(secs => $5)
                -- Only try to take the key when the record (as of this snapshot) is absent, past its
                -- retention, or an abandoned attempt of this same request. A replay, a live lease or a
                -- mismatch then reads without writing or locking anything.
                 WHERE set_config('synchronous_commit', 'off', true) IS NOT NULL
                   AND NOT EXISTS (
                       SELECT 1 FROM existing e
                        WHERE e.expires_at > now()
                          AND (e.state = 'completed' OR e.fingerprint <> $3 OR e.lease_expires_at > now()))
                ON CONFLICT (scope, key) DO UPDATE SET
                    fingerprint      = excluded.fingerprint,
                    state            = 'in_flight',
                    attempt          = k.attempt + 1,
                    lease_token      = excluded.lease_token,
                    lease_expires_at = excluded.lease_expires_at,
                    created_at       = CASE WHEN k.expires_at <= now() THEN excluded.created_at ELSE k.created_at END,
                    expires_at       = CASE WHEN k.expires_at <= now() THEN excluded.expires_at ELSE k.expires_at END,
                    completed_at     = NULL,
                    response_status  = NULL,
                    response_headers = NULL,
                    response_body    = NULL,
                    -- A takeover resumes where the abandoned attempt's last phase left off; a
                    -- record that starts anew starts from the beginning.
                    recovery_point   = CASE WHEN k.expires_at <= now() THEN NULL ELSE k.recovery_point END
                -- The decision proper, on the latest committed row under its lock: this is what makes
                -- two racing claims of one key serialize, with exactly one winner.
                WHERE k.expires_at <= now()
                   OR (k.state = 'in_flight' AND k.fingerprint = excluded.fingerprint AND k.lease_expires_at <= now())
                -- created_at is reset to this statement's now() exactly when the record starts anew.
                RETURNING CASE WHEN k.created_at = now() THEN 'fresh' ELSE 'takeover' END AS outcome,
                          k.attempt, k.fingerprint, k.recovery_point
            )
            SELECT outcome AS "outcome!", attempt AS "attempt!", fingerprint AS "fingerprint!",
                   recovery_point,
                   NULL::smallint AS response_status, NULL::jsonb AS response_headers, NULL::bytea AS response_body
              FROM claimed
            UNION ALL
            SELECT CASE WHEN e.expires_at <= now() THEN 'in_flight' -- a concurrent claim just reset it
                        WHEN e.fingerprint <> $3 THEN 'mismatch'
                        WHEN e.state = 'completed' THEN 'replay'
                        ELSE 'in_flight' END,
                   e.attempt, e.fingerprint, NULL::text, e.response_status, e.response_headers, e.response_body
              FROM existing e
             WHERE NOT EXISTS (SELECT 1 FROM claimed)
            "#,
            scope.as_str(),
            key.as_str(),
            fingerprint.as_bytes().as_slice(),
            lease.as_secs_f64(),
            retention.as_secs_f64(),
            token.0,
        )
        .fetch_optional(&mut *conn)
        .await?;

        let Some(row) = row else { continue };
        return match row.outcome.as_str() {
            "fresh" => Ok(Claim::Fresh {
                attempt: row.attempt,
            }),
            "takeover" => Ok(Claim::Takeover {
                attempt: row.attempt,
                recovery_point: row.recovery_point,
            }),
            "mismatch" => Ok(Claim::Mismatch {
                stored: Fingerprint::from_bytes(&row.fingerprint)
                    .ok_or_else(|| corrupt("fingerprint"))?,
            }),
            "replay" => Ok(Claim::Replay {
                attempt: row.attempt,
                response: StoredResponse {
                    status: row
                        .response_status
                        .and_then(|s| u16::try_from(s).ok())
                        .ok_or_else(|| corrupt("response_status"))?,
                    headers: row
                        .response_headers
                        .and_then(|h| serde_json::from_value(h).ok())
                        .ok_or_else(|| corrupt("response_headers"))?,
                    body: row.response_body.ok_or_else(|| corrupt("response_body"))?,
                },
            }),
            "in_flight" => Ok(Claim::InFlight),
            other => Err(sqlx::Error::Protocol(format!(
                "the claim statement answered an unknown outcome {other:?}"
            ))),
        };
    }
    // Three snapshots in a row missed a row that exists: another claim keeps resetting it.
    Ok(Claim::InFlight)
}

/// Why a completion did not commit.
#[derive(Debug)]
pub enum Incomplete {
    /// Another attempt took the key over while this one ran: the transaction rolled back, and
    /// only the other attempt's result may ever leave the server.
    LeaseLost,
    /// The transaction rolled back for another reason: nothing it wrote stays.
    RolledBack(sqlx::Error),
    /// The connection failed once the `COMMIT` was sent: whether it committed is unknown.
    OutcomeUnknown(sqlx::Error),
}

/// Stores `response` as the key's answer, with a compare-and-set on the lease's attempt, and commits
/// the handler's transaction with it: both in one message, so one round trip
/// (`docs/design.md`, "One transaction"). The compare-and-set is the SQL function
/// `idempotency_complete` (migration `20261130000003`), which raises [`LEASE_LOST_SQLSTATE`] when
/// the attempt lost the key; PostgreSQL then skips the `COMMIT` behind it.
pub async fn complete(
    tx: OpenTransaction,
    lease: &Lease,
    response: &StoredResponse,
) -> Result<(), Incomplete> {
    match tx.commit_after(completion_statement(lease, response)).await {
        Ok(()) => Ok(()),
        Err(CommitError::RolledBack(error)) if is_lease_lost(&error) => Err(Incomplete::LeaseLost),
        Err(CommitError::RolledBack(error)) => Err(Incomplete::RolledBack(error)),
        Err(CommitError::OutcomeUnknown(error)) => Err(Incomplete::OutcomeUnknown(error)),
    }
}

/// Raised by `idempotency_complete` when another attempt took the key over (class PA is unused by
/// PostgreSQL).
const LEASE_LOST_SQLSTATE: &str = "PA409";

/// Whether a phase's or a completion's commit failed because another attempt took the key over.
pub fn is_lease_lost(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.code().as_deref() == Some(LEASE_LOST_SQLSTATE))
}

/// The completion as SQL text. A message that carries a `COMMIT` cannot carry bind parameters, so
/// every value is a literal: integers in decimal, text and bytes as hex digits inside `decode`,
/// which no input can break out of, whatever quotes or backslashes it holds.
pub fn completion_statement(lease: &Lease, response: &StoredResponse) -> String {
    let headers =
        serde_json::to_vec(&response.headers).expect("a list of string pairs always serializes");
    let text = text_literal;
    format!(
        "SELECT idempotency_complete({scope}, {key}, {attempt}, {status}::smallint, {headers}::jsonb, decode('{body}', 'hex'));",
        scope = text(lease.scope.as_str().as_bytes()),
        key = text(lease.key.as_str().as_bytes()),
        attempt = lease.attempt,
        status = response.status,
        headers = text(&headers),
        body = hex::encode(&response.body),
    )
}

/// The checkpoint of an atomic phase as SQL text, sent with the phase's `COMMIT` as the completion
/// is: it records `point` as the key's recovery point, with the same compare-and-set on the
/// attempt (`idempotency_checkpoint`, migration `20261201000015`, raises [`LEASE_LOST_SQLSTATE`]).
pub fn checkpoint_statement(lease: &Lease, point: &str) -> String {
    format!(
        "SELECT idempotency_checkpoint({scope}, {key}, {attempt}, {point});",
        scope = text_literal(lease.scope.as_str().as_bytes()),
        key = text_literal(lease.key.as_str().as_bytes()),
        attempt = lease.attempt,
        point = text_literal(point.as_bytes()),
    )
}

/// Text as a literal no input can break out of, whatever quotes or backslashes it holds: its bytes
/// as hex digits inside `decode`.
fn text_literal(bytes: &[u8]) -> String {
    format!(
        "convert_from(decode('{}', 'hex'), 'UTF8')",
        hex::encode(bytes)
    )
}

/// Ends a lease now, so the next retry takes over at once instead of waiting it out: used when the
/// handler's transaction failed and provably wrote nothing, when whether it committed is unknown,
/// and when the claim's own answer was lost. It names the lease by the claim's token, so it works
/// without knowing whether the claim took the key or which attempt it was; a completed record, or
/// one another claim has taken since, is left alone.
pub async fn release_lease(
    conn: &mut PgConnection,
    scope: &Scope,
    key: &IdempotencyKey,
    token: LeaseToken,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        UPDATE idempotency_keys SET lease_expires_at = now()
         WHERE scope = $1 AND key = $2 AND lease_token = $3 AND state = 'in_flight'
        "#,
        scope.as_str(),
        key.as_str(),
        token.0,
    )
    .execute(conn)
    .await?;
    Ok(())
}

fn corrupt(column: &str) -> sqlx::Error {
    sqlx::Error::Protocol(format!(
        "idempotency_keys.{column} of a completed record is unreadable"
    ))
}

/// Deletes up to `batch` records whose retention has passed. An in-flight record whose
/// lease is still live is never deleted, and `SKIP LOCKED` leaves alone any record a claim is reusing right
/// now. Returns how many were deleted.
pub async fn delete_expired(conn: &mut PgConnection, batch: i64) -> Result<u64, sqlx::Error> {
    let result = sqlx::query!(
        r#"
        WITH doomed AS (
            SELECT scope, key FROM idempotency_keys
             WHERE expires_at <= now() AND (state = 'completed' OR lease_expires_at <= now())
             ORDER BY expires_at
             LIMIT $1
               FOR UPDATE SKIP LOCKED
        )
        DELETE FROM idempotency_keys k USING doomed
         WHERE k.scope = doomed.scope AND k.key = doomed.key
        "#,
        batch,
    )
    .execute(conn)
    .await?;
    Ok(result.rows_affected())
}

/// A record as the reconciliation endpoint shows it to its owner.
#[derive(Debug)]
pub struct RecordSummary {
    pub state: String,
    pub attempt: i32,
    pub created_at: time::OffsetDateTime,
    pub expires_at: time::OffsetDateTime,
    pub fingerprint: Fingerprint,
    pub response_status: Option<u16>,
    /// The top-level `"id"` of the stored response body, if it is a JSON object that has one: the
    /// only link between a key and the resource it produced.
    pub resource_id: Option<String>,
}

/// The caller's record for `key`, unless its retention has passed (then the key is free again).
pub async fn find(
    conn: &mut PgConnection,
    scope: &Scope,
    key: &IdempotencyKey,
) -> Result<Option<RecordSummary>, sqlx::Error> {
    let row = sqlx::query!(
        r#"
        SELECT state, attempt, created_at, expires_at, fingerprint, response_status, response_body
          FROM idempotency_keys
         WHERE scope = $1 AND key = $2 AND expires_at > now()
        "#,
        scope.as_str(),
        key.as_str(),
    )
    .fetch_optional(conn)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let resource_id = row
        .response_body
        .and_then(|body| serde_json::from_slice::<serde_json::Value>(&body).ok())
        .and_then(|body| body.get("id")?.as_str().map(str::to_owned));
    Ok(Some(RecordSummary {
        state: row.state,
        attempt: row.attempt,
        created_at: row.created_at,
        expires_at: row.expires_at,
        fingerprint: Fingerprint::from_bytes(&row.fingerprint)
            .ok_or_else(|| corrupt("fingerprint"))?,
        response_status: row.response_status.and_then(|s| u16::try_from(s).ok()),
        resource_id,
    }))
}

/// The payment intent the request stored under (`scope`, `key`) answered with, if it completed
/// with a 2xx whose body is an intent (its `id` first): how the dashboard finds a payment by its
/// Idempotency-Key while the key is kept.
pub async fn answered_intent(
    conn: &mut PgConnection,
    scope: &str,
    key: &str,
) -> Result<Option<String>, sqlx::Error> {
    Ok(sqlx::query_scalar!(
        r#"SELECT substring(convert_from(response_body, 'UTF8') FROM '^\{"id":"(pi_[0-9a-f]{24})"') AS "id"
             FROM idempotency_keys
            WHERE scope = $1 AND key = $2 AND state = 'completed'
              AND response_status BETWEEN 200 AND 299"#,
        scope,
        key,
    )
    .fetch_optional(conn)
    .await?
    .flatten())
}
