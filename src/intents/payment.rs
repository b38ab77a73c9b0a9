//! An intent's payment as the outbox sends it, whichever way to pay queued it (the payer's
//! authorization, an x402 settle): its kind, while it is wanted, and how a hold shows on the
//! intent.

use sqlx::PgConnection;

use super::{
    repo::{self, TransitionError},
    state::{Action, Actor, IntentState},
};
use crate::rails::outbox::{BoxFuture, Hold, SubmissionKind, Wanted};

/// The outbox kind of an intent's payment: its subject is the intent's id.
pub const KIND: &str = "intent_payment";

/// An intent's payment is wanted while the intent is `processing`: once the payment watch (or
/// expiry) moved it, there is nothing left to send.
pub struct IntentPayment;

impl SubmissionKind for IntentPayment {
    fn name(&self) -> &'static str {
        KIND
    }

    fn still_wanted<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        subject: &'a str,
    ) -> BoxFuture<'a, Result<Wanted, sqlx::Error>> {
        Box::pin(async move {
            let state = sqlx::query_scalar!(
                r#"SELECT state AS "state: IntentState" FROM payment_intents WHERE id = $1"#,
                subject
            )
            .fetch_optional(conn)
            .await?;
            Ok(match state {
                Some(IntentState::Processing) => Wanted::Yes,
                Some(other) => Wanted::No(format!("intent_{other}")),
                None => Wanted::No("intent_missing".to_owned()),
            })
        })
    }

    /// The intent says why it waits (`pending_reason`, an event once per change).
    fn held<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        subject: &'a str,
        hold: Hold,
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            let intent = sqlx::query!(
                r#"SELECT merchant_id, state AS "state: IntentState", pending_reason
                     FROM payment_intents WHERE id = $1"#,
                subject
            )
            .fetch_optional(&mut *conn)
            .await?;
            let Some(intent) = intent else { return Ok(()) };
            if intent.state != IntentState::Processing
                || intent.pending_reason.as_deref() == Some(hold.code())
            {
                return Ok(());
            }
            let moved = repo::apply_with(
                conn,
                &intent.merchant_id,
                subject,
                Action::Hold,
                &Actor::Chain,
                None,
                Some(hold.code()),
            )
            .await;
            match moved {
                Ok(_) | Err(TransitionError::NotFound | TransitionError::Forbidden { .. }) => {
                    Ok(())
                }
                Err(TransitionError::Database(e)) => Err(e),
            }
        })
    }
}
