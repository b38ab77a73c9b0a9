//! Signing in and staying signed in (`docs/dashboard.md`, "Sessions"): failed attempts slowed and
//! then refused per account and per address, sessions in PostgreSQL (every replica knows them; a
//! sign-out ends one everywhere), a fresh id at every sign-in, 12 hours of idleness at most, and a
//! CSRF token per session that every state-changing request must carry. Owner of
//! `dashboard_sessions` and `dashboard_sign_in_failures`.

use std::time::Duration;

use rand::RngCore;
use sha2::{Digest, Sha256};
use sqlx::PgConnection;
use subtle::ConstantTimeEq;

use super::people::{self, Email, Role, User};
use crate::{
    audit::{self, Who},
    db::OpenTransaction,
    error::ApiError,
};

/// The cookie that carries the session id.
pub const COOKIE: &str = "dashboard_session";
/// A session unused this long is over.
pub const IDLE_EXPIRY: time::Duration = time::Duration::hours(12);

/// Failed sign-ins are counted over this window.
const FAILURE_WINDOW_SECS: f64 = 15.0 * 60.0;
/// After this many failures of an account (or five times as many from one address) each failed
/// attempt is answered [`DELAY_STEP`] later than the one before, up to [`MAX_DELAY`]; at
/// [`REFUSED_AFTER`] an attempt is refused unheard until the window has passed.
const SLOWED_AFTER: i64 = 3;
const REFUSED_AFTER: i64 = 10;
const PER_ADDRESS: i64 = 5;
const DELAY_STEP: Duration = Duration::from_millis(500);
const MAX_DELAY: Duration = Duration::from_secs(3);

/// A signed-in person and their session's CSRF token.
#[derive(Debug, Clone)]
pub struct Session {
    pub user: User,
    pub csrf_token: String,
}

impl Session {
    /// Whether `token` is this session's CSRF token, compared in constant time.
    pub fn csrf_matches(&self, token: &str) -> bool {
        self.csrf_token.as_bytes().ct_eq(token.as_bytes()).into()
    }

    pub fn role(&self) -> Role {
        self.user.role
    }

    pub fn merchant(&self) -> &str {
        &self.user.merchant_id
    }
}

fn id_hash(id: &str) -> Vec<u8> {
    Sha256::digest(id.as_bytes()).to_vec()
}

fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// What a sign-in came to.
pub enum SignIn {
    /// A new session: its id goes into the cookie.
    Started { session_id: String, user: User },
    /// Wrong email or password (one answer for both), after the delay the failures so far earn.
    Refused,
    /// Too many failures lately for this account or address: not even checked.
    Locked,
}

/// Checks an email and password, throttled by the failures of the account and of the address.
/// On success the person gets a new session (never one a client brought: no fixation).
pub async fn sign_in(
    pool: &crate::db::Pool,
    email: &str,
    password: &str,
    address: Option<String>,
) -> Result<SignIn, ApiError> {
    let email_subject = format!("email:{}", email.trim().to_lowercase());
    let address_subject = address.as_ref().map(|a| format!("address:{a}"));
    let (account_failures, address_failures) = {
        let mut conn = pool.acquire().await?;
        (
            failures(&mut conn, &email_subject).await?,
            match &address_subject {
                Some(subject) => failures(&mut conn, subject).await?,
                None => 0,
            },
        )
    };
    let strikes = account_failures.max(address_failures / PER_ADDRESS);
    if strikes >= REFUSED_AFTER {
        return Ok(SignIn::Locked);
    }
    let user = match Email::parse(email) {
        Ok(email) => people::check_password(&mut *pool.acquire().await?, &email, password).await?,
        Err(_) => None,
    };
    let mut tx = OpenTransaction::begin_on_pool(pool).await?;
    let Some(user) = user else {
        for subject in std::iter::once(&email_subject).chain(address_subject.as_ref()) {
            sqlx::query!(
                "INSERT INTO dashboard_sign_in_failures (subject) VALUES ($1)",
                subject
            )
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        if strikes >= SLOWED_AFTER {
            let delay = (DELAY_STEP * (strikes - SLOWED_AFTER + 1) as u32).min(MAX_DELAY);
            tokio::time::sleep(delay).await;
        }
        return Ok(SignIn::Refused);
    };
    sqlx::query!(
        "DELETE FROM dashboard_sign_in_failures WHERE subject = $1",
        email_subject
    )
    .execute(&mut *tx)
    .await?;
    // Sessions idle past their expiry go when their person signs in again.
    sqlx::query!(
        "DELETE FROM dashboard_sessions
          WHERE user_id = $1 AND last_seen_at < now() - make_interval(secs => $2)",
        user.id,
        IDLE_EXPIRY.as_seconds_f64(),
    )
    .execute(&mut *tx)
    .await?;
    let session_id = random_hex();
    sqlx::query!(
        "INSERT INTO dashboard_sessions (id_sha256, user_id, csrf_token) VALUES ($1, $2, $3)",
        id_hash(&session_id),
        user.id,
        random_hex(),
    )
    .execute(&mut *tx)
    .await?;
    let who = Who::user(&user.email, address);
    audit::record(&mut tx, &user.merchant_id, &who, "session.sign_in", None).await?;
    tx.commit().await?;
    Ok(SignIn::Started { session_id, user })
}

/// Failures of `subject` within the window; older ones are deleted on the way.
async fn failures(conn: &mut PgConnection, subject: &str) -> Result<i64, sqlx::Error> {
    sqlx::query!(
        "DELETE FROM dashboard_sign_in_failures
          WHERE subject = $1 AND at < now() - make_interval(secs => $2)",
        subject,
        FAILURE_WINDOW_SECS,
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM dashboard_sign_in_failures WHERE subject = $1"#,
        subject
    )
    .fetch_one(conn)
    .await
}

/// The session `session_id` names, if it is live; its idle clock starts again.
pub async fn find(
    conn: &mut PgConnection,
    session_id: &str,
) -> Result<Option<Session>, sqlx::Error> {
    let row = sqlx::query!(
        r#"WITH touched AS (
               UPDATE dashboard_sessions SET last_seen_at = now()
                WHERE id_sha256 = $1 AND last_seen_at > now() - make_interval(secs => $2)
               RETURNING user_id, csrf_token
           )
           SELECT u.id, u.merchant_id, u.email, u.role, u.created_at, t.csrf_token AS "csrf_token!"
             FROM touched t JOIN dashboard_users u ON u.id = t.user_id"#,
        id_hash(session_id),
        IDLE_EXPIRY.as_seconds_f64(),
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| Session {
        user: User::signed_up(r.id, r.merchant_id, r.email, &r.role, r.created_at, true),
        csrf_token: r.csrf_token,
    }))
}

/// Ends the session `session_id` names, on every replica at once.
pub async fn end(
    conn: &mut PgConnection,
    session: &Session,
    session_id: &str,
    address: Option<String>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "DELETE FROM dashboard_sessions WHERE id_sha256 = $1",
        id_hash(session_id)
    )
    .execute(&mut *conn)
    .await?;
    let who = Who::user(&session.user.email, address);
    audit::record(conn, session.merchant(), &who, "session.sign_out", None).await
}

/// Ends every session of a person.
pub async fn end_all(conn: &mut PgConnection, user_id: &str) -> Result<(), sqlx::Error> {
    sqlx::query!("DELETE FROM dashboard_sessions WHERE user_id = $1", user_id)
        .execute(conn)
        .await?;
    Ok(())
}
