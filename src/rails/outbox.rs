//! The outbox of chain transactions (`docs/settlement.md`, "Relayer"): a submission is a call to
//! send (`target`, `calldata`) of a kind about a subject, queued in the caller's transaction and
//! unique per chain by its dedupe key, so the same chain effect is never queued twice. The relayer
//! sends what is queued; each kind answers whether its submission is still wanted and how to read
//! a revert; a caller can await a submission's outcome.

use std::{
    collections::HashMap,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
    time::Duration,
};

use alloy::primitives::{Address, Bytes};
use sqlx::PgConnection;
use tokio::sync::Notify;
use uuid::Uuid;

use crate::db::Pool;

/// The channel a queueing transaction notifies with the chain id: the chain's relayers wake.
pub const QUEUED_CHANNEL: &str = "chain_submissions";
/// The channel a submission's broadcast and its end notify with its id: whoever awaits it wakes.
pub const DONE_CHANNEL: &str = "chain_submission_outcomes";

/// A submission to queue.
#[derive(Debug, Clone)]
pub struct NewSubmission<'a> {
    pub kind: &'static str,
    pub subject: &'a str,
    pub chain_id: u64,
    /// What makes the chain accept the call once (for an EIP-3009 payment: token, authorizer,
    /// nonce); a second submission with the same key is the first one.
    pub dedupe_key: String,
    pub target: Address,
    pub calldata: Bytes,
    /// The only relayer key that may send it, when the call checks its sender.
    pub sender: Option<Address>,
    /// The submission that must be done before this one is sent (a wallet's deployment before
    /// the payment it signed): the chain would refuse this call until that one ran.
    pub after: Option<Uuid>,
}

/// Queues `submission` in the caller's transaction and returns its id (the existing one's, if
/// its dedupe key was queued before). The notification wakes the chain's relayers at commit; a
/// transaction that rolls back wakes nobody.
pub async fn queue(
    conn: &mut PgConnection,
    submission: &NewSubmission<'_>,
) -> Result<Uuid, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        WITH queued AS (
            INSERT INTO chain_submissions (kind, subject, chain_id, dedupe_key, target, calldata, sender, after_id)
            VALUES ($1, $2, $3, $4, $5, $6, $8, $9)
            ON CONFLICT (chain_id, dedupe_key) DO UPDATE SET dedupe_key = EXCLUDED.dedupe_key
            RETURNING id, chain_id
        )
        SELECT id AS "id!" FROM queued CROSS JOIN LATERAL (SELECT pg_notify($7, queued.chain_id::text)) AS woken
        "#,
        submission.kind,
        submission.subject,
        submission.chain_id as i64,
        submission.dedupe_key,
        submission.target.to_checksum(None),
        submission.calldata.as_ref(),
        QUEUED_CHANNEL,
        submission.sender.map(|a| a.to_checksum(None)),
        submission.after,
    )
    .fetch_one(conn)
    .await
}

/// Whether a submission should still be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wanted {
    Yes,
    /// No longer: its subject moved on. The outcome says why (e.g. `intent_succeeded`).
    No(String),
}

/// What a revert says, as far as the relayer acts on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revert {
    /// The authorization was used (perhaps by this very submission, in a block not confirmed
    /// yet), expired or canceled: sending again cannot help. A watch moves the subject.
    Spent,
    /// The token refuses the transfer for a reason the relayer cannot fix, which may pass later,
    /// before expiry: tried again with backoff, and the subject is told why it waits.
    NotYet(Hold),
    /// The contract refused the signature: what we read of it (its EIP-712 domain) may be out of
    /// date. The contract is read again, and the submission tried again with backoff.
    SignatureRefused,
    /// Anything else: recorded as an error and tried again.
    Other,
}

impl Revert {
    /// How the EIP-3009 tokens we know word their reverts: ours and Circle's FiatToken in
    /// strings, OpenZeppelin 5 by custom error selectors (`ERC20InsufficientBalance`
    /// 0xe450d38c, `EnforcedPause` 0xd93c0665, the ECDSA errors).
    pub fn of_eip3009(reason: &str) -> Self {
        let reason = reason.to_ascii_lowercase();
        let any = |words: &[&str]| words.iter().any(|w| reason.contains(w));
        if any(&[
            "authorization is used",
            "authorization is expired",
            "authorization is canceled",
            "used or canceled",
        ]) {
            Self::Spent
        } else if any(&["exceeds balance", "insufficient balance", "0xe450d38c"]) {
            Self::NotYet(Hold::InsufficientBalance)
        } else if any(&["paused", "0xd93c0665"]) {
            Self::NotYet(Hold::TokenPaused)
        } else if any(&["blacklisted", "blocklisted"]) {
            Self::NotYet(Hold::AccountBlacklisted)
        } else if any(&[
            "invalid signature",
            // OpenZeppelin 5's ECDSA: ECDSAInvalidSignature, …Length, …S.
            "0xf645eedf",
            "0xfce698f7",
            "0xd78bce0c",
        ]) {
            Self::SignatureRefused
        } else {
            Self::Other
        }
    }
}

/// Why a submission waits for now: the token refuses it, or the relayer cannot send it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    InsufficientBalance,
    TokenPaused,
    AccountBlacklisted,
    /// The relayer key's native balance does not pay the transaction's gas.
    RelayerUnderfunded,
    /// The chain charges more per gas than `RELAYER_MAX_FEE_GWEI` allows.
    GasPriceAboveCap,
}

impl Hold {
    /// As the API says it (`pending_reason`, then `failure_reason` if it expires so).
    pub fn code(self) -> &'static str {
        match self {
            Self::InsufficientBalance => "insufficient_balance",
            Self::TokenPaused => "token_paused",
            Self::AccountBlacklisted => "account_blacklisted",
            Self::RelayerUnderfunded => "relayer_underfunded",
            Self::GasPriceAboveCap => "gas_price_above_cap",
        }
    }
}

/// How long a held submission waits before it is simulated again: from one second, doubling,
/// at most a minute, with jitter.
pub fn hold_delay(held_attempts: u32) -> Duration {
    use backon::BackoffBuilder;
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_secs(1))
        .with_max_delay(Duration::from_secs(60))
        .with_jitter()
        .without_max_times()
        .build()
        .nth(held_attempts as usize)
        .unwrap_or(Duration::from_secs(60))
}

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A kind of submission: what its subject is, and how its reverts read.
pub trait SubmissionKind: Send + Sync + 'static {
    fn name(&self) -> &'static str;

    /// Whether the submission about `subject` should still be sent.
    fn still_wanted<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        subject: &'a str,
    ) -> BoxFuture<'a, Result<Wanted, sqlx::Error>>;

    fn classify(&self, reason: &str) -> Revert {
        Revert::of_eip3009(reason)
    }

    /// Whether its call is all there is to it (a wallet's deployment): done once it is mined, or
    /// once the chain refuses it, with no watch to move its subject. Payments are not: the watch
    /// of their effect ends them.
    fn done_when_mined(&self) -> bool {
        false
    }

    /// The token refuses the submission about `subject` for now, for `hold`: the subject says so.
    fn held<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        subject: &'a str,
        hold: Hold,
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        let _ = (conn, subject, hold);
        Box::pin(async { Ok(()) })
    }
}

/// The kinds this server sends, by name.
#[derive(Clone, Default)]
pub struct Kinds(Arc<HashMap<&'static str, Arc<dyn SubmissionKind>>>);

impl Kinds {
    pub fn new(kinds: Vec<Arc<dyn SubmissionKind>>) -> Self {
        Self(Arc::new(kinds.into_iter().map(|k| (k.name(), k)).collect()))
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn SubmissionKind>> {
        self.0.get(name)
    }
}

/// Where a submission is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type)]
#[sqlx(type_name = "text", rename_all = "lowercase")]
pub enum State {
    /// Waiting to be sent (claimed by a key, or not yet).
    Queued,
    /// Broadcast at least once; it stays with the key whose account nonce it used.
    Sent,
    /// Ended: `outcome` says why.
    Done,
}

/// A submission as its caller sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub state: State,
    /// Why it is done, once it is.
    pub outcome: Option<String>,
    /// Every transaction broadcast for it, the last one newest.
    pub tx_hashes: Vec<String>,
    pub last_error: Option<String>,
}

/// The submission on chain `chain_id` that sends what `dedupe_key` names, if one was queued.
pub async fn find(
    conn: &mut PgConnection,
    chain_id: u64,
    dedupe_key: &str,
) -> Result<Option<Uuid>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT id FROM chain_submissions WHERE chain_id = $1 AND dedupe_key = $2",
        chain_id as i64,
        dedupe_key,
    )
    .fetch_optional(conn)
    .await
}

/// Every transaction broadcast for the submission of `kind` about `subject`, the last one newest;
/// none if nothing was queued.
pub async fn tx_hashes_of(
    conn: &mut PgConnection,
    kind: &str,
    subject: &str,
) -> Result<Vec<String>, sqlx::Error> {
    let hashes = sqlx::query_scalar!(
        "SELECT tx_hashes FROM chain_submissions WHERE kind = $1 AND subject = $2",
        kind,
        subject,
    )
    .fetch_optional(conn)
    .await?;
    Ok(hashes.unwrap_or_default())
}

pub async fn status(conn: &mut PgConnection, id: Uuid) -> Result<Option<Status>, sqlx::Error> {
    sqlx::query_as!(
        Status,
        r#"SELECT state AS "state: State", outcome, tx_hashes, last_error FROM chain_submissions WHERE id = $1"#,
        id
    )
    .fetch_optional(conn)
    .await
}

/// Who awaits which submission in this process; the wake-up worker passes on `DONE_CHANNEL`.
#[derive(Clone, Default)]
pub struct Outcomes(Arc<Mutex<HashMap<Uuid, Arc<Notify>>>>);

impl Outcomes {
    /// What wakes whoever awaits `id` here; [`Outcomes::forget`] it when done.
    pub fn waiter(&self, id: Uuid) -> Arc<Notify> {
        let mut waiting = self.0.lock().unwrap_or_else(|e| e.into_inner());
        waiting.entry(id).or_default().clone()
    }

    /// Wakes whoever awaits `id` here.
    pub fn done(&self, id: Uuid) {
        let waiting = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(notify) = waiting.get(&id) {
            notify.notify_waiters();
        }
    }

    pub fn forget(&self, id: Uuid, notify: &Arc<Notify>) {
        let mut waiting = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // Only the last waiter removes the entry: the map and this function hold one each.
        if Arc::strong_count(notify) <= 2 {
            waiting.remove(&id);
        }
    }
}

/// How often an awaited submission is read even without a notification (one may be missed while
/// the listening connection reconnects).
const AWAIT_POLL: Duration = Duration::from_secs(1);

/// The submission's status once it is done, or as it is when `timeout` runs out; `None` if there
/// is no such submission.
pub async fn await_outcome(
    pool: &Pool,
    outcomes: &Outcomes,
    id: Uuid,
    timeout: Duration,
) -> Result<Option<Status>, sqlx::Error> {
    let deadline = tokio::time::Instant::now() + timeout;
    let notify = outcomes.waiter(id);
    let result = loop {
        // Registered before reading, so a notification between the read and the wait counts.
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let current = {
            let mut conn = pool.acquire().await?;
            status(&mut conn, id).await?
        };
        match current {
            Some(status)
                if status.state != State::Done && tokio::time::Instant::now() < deadline => {}
            other => break other,
        }
        let wait = AWAIT_POLL.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
        let _ = tokio::time::timeout(wait, notified).await;
    };
    outcomes.forget(id, &notify);
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::{Hold, Revert};

    #[test]
    fn reverts_read_as_the_tokens_word_them() {
        for (reason, read) in [
            (
                "execution reverted: EIP3009: authorization is used or canceled",
                Revert::Spent,
            ),
            (
                "execution reverted: FiatTokenV2: authorization is used or canceled",
                Revert::Spent,
            ),
            (
                "execution reverted: FiatTokenV2: authorization is expired",
                Revert::Spent,
            ),
            (
                "execution reverted: ERC20: transfer amount exceeds balance",
                Revert::NotYet(Hold::InsufficientBalance),
            ),
            (
                "execution reverted: Pausable: paused",
                Revert::NotYet(Hold::TokenPaused),
            ),
            (
                "execution reverted: Blacklistable: account is blacklisted",
                Revert::NotYet(Hold::AccountBlacklisted),
            ),
            (
                "execution reverted: custom error 0xe450d38c (data \"0xe450d38c00\")",
                Revert::NotYet(Hold::InsufficientBalance),
            ),
            (
                "execution reverted: FiatTokenV2: invalid signature",
                Revert::SignatureRefused,
            ),
            (
                "execution reverted: EIP3009: authorization is not yet valid",
                Revert::Other,
            ),
        ] {
            assert_eq!(Revert::of_eip3009(reason), read, "{reason}");
        }
    }
}
