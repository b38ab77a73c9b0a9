//! Forms that must act once whatever the browser does (a double click, a resubmitted page): each
//! carries a one-time id, claimed in the transaction that acts. Owner of `dashboard_form_uses`.

use rand::RngCore;
use sqlx::PgConnection;

/// A new one-time id for a form about to be shown.
pub fn new_id() -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// Whether `raw` can be a form's one-time id.
pub fn is_id(raw: &str) -> bool {
    raw.len() == 32 && raw.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Claims `form_id` for this transaction: `None` when it is ours now, else what the submit that
/// claimed it first made (waiting for that one's transaction to end, as the unique key does).
pub async fn claim(
    conn: &mut PgConnection,
    form_id: &str,
    user_id: &str,
) -> Result<Option<String>, sqlx::Error> {
    let claimed = sqlx::query_scalar!(
        "INSERT INTO dashboard_form_uses (form_id, user_id, made) VALUES ($1, $2, '')
         ON CONFLICT (form_id) DO NOTHING RETURNING form_id",
        form_id,
        user_id,
    )
    .fetch_optional(&mut *conn)
    .await?;
    if claimed.is_some() {
        return Ok(None);
    }
    sqlx::query_scalar!(
        "SELECT made FROM dashboard_form_uses WHERE form_id = $1",
        form_id
    )
    .fetch_optional(conn)
    .await
}

/// Notes what the claimed form made.
pub async fn made(conn: &mut PgConnection, form_id: &str, made: &str) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE dashboard_form_uses SET made = $2 WHERE form_id = $1",
        form_id,
        made
    )
    .execute(conn)
    .await?;
    Ok(())
}
