//! A lock taken from outside the app, so tests can stall its writes with no hook in production code.

use sqlx::{Connection, PgConnection};

use super::TestApp;

/// Holds `LOCK TABLE payment_intents IN SHARE MODE` on a connection of its own until released:
/// every intent insert stalls behind it, inside its request's transaction, with no hook in the
/// production code.
pub struct IntentInsertBlocker(PgConnection);

impl TestApp {
    pub async fn block_intent_inserts(&self) -> IntentInsertBlocker {
        let mut conn = PgConnection::connect(&self.database_url).await.unwrap();
        sqlx::raw_sql("BEGIN; LOCK TABLE payment_intents IN SHARE MODE")
            .execute(&mut conn)
            .await
            .unwrap();
        IntentInsertBlocker(conn)
    }
}

impl IntentInsertBlocker {
    pub async fn release(mut self) {
        sqlx::raw_sql("ROLLBACK")
            .execute(&mut self.0)
            .await
            .unwrap();
    }
}
