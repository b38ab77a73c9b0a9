//! The audit log (`docs/dashboard.md`, "Audit"): every change made to a merchant from the
//! dashboard or the CLI, who made it, when and from which address. Written in the change's own
//! transaction, so a change is never without its line; never a secret; kept a year and not
//! editable (the table's trigger refuses updates, and deletes of lines younger than a year).

use sqlx::PgConnection;
use time::OffsetDateTime;

/// Who made a change: a dashboard user (by email) from an address, or an operator at the CLI.
#[derive(Debug, Clone)]
pub struct Who {
    pub actor: String,
    pub address: Option<String>,
}

impl Who {
    pub fn cli() -> Self {
        Self {
            actor: "cli".to_owned(),
            address: None,
        }
    }

    pub fn user(email: &str, address: Option<String>) -> Self {
        Self {
            actor: format!("user:{email}"),
            address,
        }
    }
}

/// Writes one line: `action` (a dotted name, `api_key.revoke`) on `target` (an id or prefix).
pub async fn record(
    conn: &mut PgConnection,
    merchant: &str,
    who: &Who,
    action: &str,
    target: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO audit_log (merchant_id, actor, action, target, address)
         VALUES ($1, $2, $3, $4, $5)",
        merchant,
        who.actor,
        action,
        target,
        who.address,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// One line of the log as the dashboard shows it.
#[derive(Debug)]
pub struct Line {
    pub id: i64,
    pub at: OffsetDateTime,
    pub actor: String,
    pub action: String,
    pub target: Option<String>,
    pub address: Option<String>,
}

/// Up to `limit` of the merchant's lines, newest first, older than line `before`.
pub async fn list(
    conn: &mut PgConnection,
    merchant: &str,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<Line>, sqlx::Error> {
    sqlx::query_as!(
        Line,
        "SELECT id, at, actor, action, target, address FROM audit_log
          WHERE merchant_id = $1 AND ($2::bigint IS NULL OR id < $2)
          ORDER BY id DESC LIMIT $3",
        merchant,
        before,
        limit,
    )
    .fetch_all(conn)
    .await
}
