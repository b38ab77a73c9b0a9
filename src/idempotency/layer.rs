//! The middleware: claim first, then execute the handler inside a transaction that also stores
//! its answer (`docs/design.md`, "Claim, then execute").

use std::{sync::Arc, time::Duration};

use axum::{
    extract::{OriginalUri, Request, State},
    http::{HeaderMap, HeaderName, HeaderValue, Method},
    middleware::Next,
    response::{IntoResponse, Response},
};

use backon::{ExponentialBuilder, Retryable};
use tokio::time::Instant;

use super::{
    Fingerprint, IdempotencyKey, Scope, StoredResponse,
    phases::{Phases, is_provisional},
    store::{self, Claim, Incomplete, Lease, LeaseToken},
    transaction::{Checkpoint, RequestTransaction, Taken},
};
use crate::{
    config::IdempotencySettings,
    db::{CommitError, OpenTransaction, Pool, PooledConnection},
    deadline::Deadline,
    error::ApiError,
    extract::whole_body,
};

const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

#[derive(Clone)]
pub struct IdempotencyState {
    pub pool: Pool,
    pub settings: IdempotencySettings,
    pub max_body_bytes: usize,
    pub request_timeout: Duration,
    /// Where a route's body carries its key, for a protocol that puts it there (x402's payment
    /// identifier): `Ok(None)` when the body has none, `Err` naming the field when it is bad.
    pub key_in_body: Option<KeyInBody>,
}

/// Reads the key a request's body carries: see [`IdempotencyState::key_in_body`].
pub type KeyInBody = fn(&[u8]) -> Result<Option<String>, String>;

/// What the layer did with a request, attached to the response for the access log and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdempotencyOutcome {
    pub kind: OutcomeKind,
    pub attempt: Option<i32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeKind {
    /// A POST without a key: it simply ran.
    Unkeyed,
    Fresh,
    Takeover,
    Replay,
    InFlight,
    Mismatch,
    LeaseLost,
    /// The handler's transaction failed: nothing stored, lease released.
    Aborted,
    /// The `COMMIT` was sent and its answer lost: the request may or may not have been applied.
    CommitUnknown,
    /// The request ran past the request timeout and was rolled back wherever it was; its lease
    /// runs out on its own, as after a crash.
    TimedOut,
    /// The layer refused the request before claiming (bad key, body too large, ...).
    Rejected,
}

impl OutcomeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unkeyed => "unkeyed",
            Self::Fresh => "fresh",
            Self::Takeover => "takeover",
            Self::Replay => "replay",
            Self::InFlight => "in_flight",
            Self::Mismatch => "mismatch",
            Self::LeaseLost => "lease_lost",
            Self::Aborted => "aborted",
            Self::CommitUnknown => "commit_unknown",
            Self::TimedOut => "timed_out",
            Self::Rejected => "rejected",
        }
    }
}

/// Wraps side-effecting routes. GETs pass through untouched; every POST runs inside a
/// request-scoped transaction, and a POST with an Idempotency-Key is claimed before it runs.
/// Expects a [`Scope`] in the request extensions: authentication runs first.
pub async fn idempotency_layer(
    State(state): State<IdempotencyState>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (mut response, outcome) = handle_post(&state, request, next).await;
    response.extensions_mut().insert(outcome);
    response
}

async fn handle_post(
    state: &IdempotencyState,
    request: Request,
    next: Next,
) -> (Response, IdempotencyOutcome) {
    let admitted = match admit(state, request).await {
        Ok(admitted) => admitted,
        Err(error) => return outcome(error.into_response(), OutcomeKind::Rejected, None),
    };
    let deadline = admitted.deadline;
    let mut request = admitted.request;
    let Some((key, fingerprint)) = admitted.keyed else {
        request.extensions_mut().insert(Phases::default());
        let (response, ending) = execute(state, request, next, None, deadline).await;
        return outcome(response, ending.or(OutcomeKind::Unkeyed), None);
    };
    let scope = admitted.scope;
    let (claim, connection, token) = match claim(state, &scope, &key, &fingerprint).await {
        Ok(claimed) => claimed,
        Err(e) => {
            return outcome(
                ApiError::from(e).into_response(),
                OutcomeKind::Rejected,
                None,
            );
        }
    };
    let (attempt, kind, recovery_point) = match claim {
        Claim::Fresh { attempt } => (attempt, OutcomeKind::Fresh, None),
        Claim::Takeover {
            attempt,
            recovery_point,
        } => (attempt, OutcomeKind::Takeover, recovery_point),
        Claim::Replay { attempt, response } => {
            return outcome(replayed(response), OutcomeKind::Replay, Some(attempt));
        }
        Claim::InFlight => {
            // The other attempt usually finishes within milliseconds; a retry in a second is the
            // useful hint, and the client's backoff covers a crashed attempt until its lease ends.
            let key = key.to_string();
            let error = ApiError::IdempotencyKeyInFlight {
                key,
                retry_after_seconds: 1,
            };
            return outcome(error.into_response(), OutcomeKind::InFlight, None);
        }
        Claim::Mismatch { stored } => {
            let (key, stored, got) = (key.to_string(), stored.short(), fingerprint.short());
            let error = ApiError::IdempotencyKeyReused { key, stored, got };
            return outcome(error.into_response(), OutcomeKind::Mismatch, None);
        }
    };
    let lease = Lease {
        scope,
        key,
        attempt,
        token,
    };
    request
        .extensions_mut()
        .insert(Phases::new(Some(lease.key.clone()), recovery_point));
    let claimed = Some((lease, connection));
    let (response, ending) = execute(state, request, next, claimed, deadline).await;
    outcome(response, ending.or(kind), Some(attempt))
}

fn outcome(
    response: Response,
    kind: OutcomeKind,
    attempt: Option<i32>,
) -> (Response, IdempotencyOutcome) {
    (response, IdempotencyOutcome { kind, attempt })
}

/// Claims the key on a pooled connection, which the handler's transaction then begins on when the
/// claim wins: a keyed request takes one connection, not two.
async fn claim(
    state: &IdempotencyState,
    scope: &Scope,
    key: &IdempotencyKey,
    fingerprint: &Fingerprint,
) -> Result<(Claim, PooledConnection, LeaseToken), sqlx::Error> {
    let mut connection = state.pool.acquire().await?;
    let mut pending = PendingClaim {
        pool: &state.pool,
        scope,
        key,
        token: LeaseToken::generate(),
        answered: false,
    };
    let (lease, retention) = (state.settings.lease, state.settings.retention);
    let claim = store::claim(
        &mut connection,
        scope,
        key,
        fingerprint,
        pending.token,
        lease,
        retention,
    )
    .await?;
    pending.answered = true;
    Ok((claim, connection, pending.token))
}

/// A claim sent whose answer has not arrived. Dropped unanswered (its connection failed, or the
/// deadline cut the request short), it ends the lease the claim may have taken, by its token:
/// nothing will run under it, and the retry should not wait out the lease.
struct PendingClaim<'a> {
    pool: &'a Pool,
    scope: &'a Scope,
    key: &'a IdempotencyKey,
    token: LeaseToken,
    answered: bool,
}

impl Drop for PendingClaim<'_> {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        let (pool, scope, key, token) = (
            self.pool.clone(),
            self.scope.clone(),
            self.key.clone(),
            self.token,
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                release(&pool, &scope, &key, token, Instant::now() + RELEASE_GRACE).await;
            });
        }
    }
}

fn replayed(stored: StoredResponse) -> Response {
    let mut response = stored.into_response();
    response
        .headers_mut()
        .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    response
}

/// A POST the layer accepted to run or to claim: its body read whole, its key parsed.
struct Admitted {
    request: Request,
    scope: Scope,
    /// The key and the request's fingerprint; `None` for a POST without a key, which is never
    /// fingerprinted.
    keyed: Option<(IdempotencyKey, Fingerprint)>,
    deadline: Instant,
}

/// Checks what the layer needs before anything is claimed: a well-formed key (or none, where none
/// is allowed), the caller's scope, and the whole body within the size and time limits.
async fn admit(state: &IdempotencyState, request: Request) -> Result<Admitted, ApiError> {
    let key = parse_key_header(request.headers())?;
    if key.is_none() && state.settings.key_required {
        return Err(ApiError::IdempotencyKeyMissing);
    }
    let scope = request
        .extensions()
        .get::<Scope>()
        .cloned()
        .ok_or_else(|| ApiError::internal("idempotency layer mounted without authentication"))?;
    let deadline = Deadline::of(&request, state.request_timeout);
    let (request, body) = whole_body(
        request,
        state.max_body_bytes,
        deadline,
        state.request_timeout,
    )
    .await?;
    let key = match (key, state.key_in_body) {
        (key, None) => key,
        (key, Some(read)) => body_key(key, read(&body))?,
    };
    let keyed = key.map(|key| (key, fingerprint(&request, &body)));
    Ok(Admitted {
        request,
        scope,
        keyed,
        deadline,
    })
}

/// The request's fingerprint: method, the target as the client sent it, raw body.
fn fingerprint(request: &Request, body: &[u8]) -> Fingerprint {
    let target = request
        .extensions()
        .get::<OriginalUri>()
        .map_or_else(|| request.uri(), |original| &original.0);
    let path_and_query = target
        .path_and_query()
        .map_or(target.path(), |pq| pq.as_str());
    Fingerprint::of(request.method().as_str(), path_and_query, body)
}

/// How a request's transaction ended, when not as the claim said it would.
#[derive(Debug, Clone, Copy)]
enum Ending {
    /// Committed (with its stored answer, when keyed): the request's own outcome stands.
    Committed,
    LeaseLost,
    Aborted,
    CommitUnknown,
    TimedOut,
}

impl Ending {
    /// The outcome to report: `committed` when the transaction committed, else how it ended.
    fn or(self, committed: OutcomeKind) -> OutcomeKind {
        match self {
            Self::Committed => committed,
            Self::LeaseLost => OutcomeKind::LeaseLost,
            Self::Aborted => OutcomeKind::Aborted,
            Self::CommitUnknown => OutcomeKind::CommitUnknown,
            Self::TimedOut => OutcomeKind::TimedOut,
        }
    }
}

/// Runs the handler in a request-scoped transaction and, for a claimed key, stores its response in
/// that same transaction. It runs as its own task so a client that hangs up does not abort a claimed
/// execution half-way: the work still completes and the client's retry gets the replay. It stops at
/// the request's deadline, which comes before the lease ends.
async fn execute(
    state: &IdempotencyState,
    request: Request,
    next: Next,
    lease: Option<(Lease, PooledConnection)>,
    deadline: Instant,
) -> (Response, Ending) {
    let held = lease.as_ref().map(|(lease, _)| lease.clone());
    let task = tokio::spawn({
        let (state, held) = (state.clone(), held.clone());
        async move {
            let run = run_in_transaction(&state, request, next, lease, deadline);
            match tokio::time::timeout_at(deadline, run).await {
                Ok(ran) => ran,
                // Dropping the transaction rolled it back, unless its COMMIT was already on its
                // way: the answer says the outcome is unknown. Ending the lease is safe either way
                // (`docs/design.md`, "Deadlines").
                Err(_) => {
                    if let Some(lease) = &held {
                        release_lease(&state.pool, lease, Instant::now() + RELEASE_GRACE).await;
                    }
                    let seconds = state.request_timeout.as_secs();
                    let keyed = held.is_some();
                    let error = ApiError::Timeout { seconds, keyed };
                    (error.into_response(), Ending::TimedOut)
                }
            }
        }
    });
    match task.await {
        Ok(ran) => ran,
        // A panicking handler: its transaction was dropped before any COMMIT, so nothing was
        // written.
        Err(join_error) => {
            let error = ApiError::internal(&format!("request task failed: {join_error}"));
            abort(state, held.as_ref(), deadline, error.into_response()).await
        }
    }
}

async fn run_in_transaction(
    state: &IdempotencyState,
    mut request: Request,
    next: Next,
    lease: Option<(Lease, PooledConnection)>,
    deadline: Instant,
) -> (Response, Ending) {
    let (lease, begun) = match lease {
        Some((lease, connection)) => {
            let checkpoint: Checkpoint = Arc::new({
                let lease = lease.clone();
                move |point: &str| store::checkpoint_statement(&lease, point)
            });
            let begun = RequestTransaction::begin_on(connection, &state.pool, Some(checkpoint));
            (Some(lease), begun.await)
        }
        None => (None, RequestTransaction::begin(&state.pool).await),
    };
    let lease = lease.as_ref();
    let slot = match begun {
        Ok(slot) => slot,
        Err(e) => return abort(state, lease, deadline, ApiError::from(e).into_response()).await,
    };
    request.extensions_mut().insert(slot.clone());
    let response = next.run(request).await;
    let Some(Taken { open, phased }) = slot.take().await else {
        let error = ApiError::internal("the handler kept the request transaction");
        return abort(state, lease, deadline, error.into_response()).await;
    };
    let failed = ApiError::of(&response).is_some_and(ApiError::changed_nothing);
    let tx = match open {
        // The handler failed at the database or a chain, so provably nothing was written since
        // its last phase (if any); what a committed phase wrote stays, and a retry resumes there.
        Some(tx) if failed => {
            tx.rollback().await;
            return abort(state, lease, deadline, response).await;
        }
        Some(tx) => tx,
        // Between phases, with a failure or a "not yet": nothing is stored, the lease ends, and
        // the retry resumes at the recovery point.
        None if phased && (failed || is_provisional(&response)) => {
            return abort(state, lease, deadline, response).await;
        }
        None if phased && lease.is_none() => return (response, Ending::Committed),
        // Between phases with a final answer: it is stored in a transaction of its own.
        None if phased => match OpenTransaction::begin_on_pool(&state.pool).await {
            Ok(tx) => tx,
            Err(e) => {
                return abort(state, lease, deadline, ApiError::from(e).into_response()).await;
            }
        },
        // A phase's own commit failed (the handler answered how): nothing more is open.
        None => return abort(state, lease, deadline, response).await,
    };
    match lease {
        Some(lease) if is_provisional(&response) => {
            let (response, ending) = commit(tx, response).await;
            release_lease(&state.pool, lease, deadline).await;
            (response, ending)
        }
        Some(lease) => complete(state, tx, lease, deadline, response).await,
        None => commit(tx, response).await,
    }
}

/// Commits an unkeyed request's transaction.
async fn commit(tx: OpenTransaction, response: Response) -> (Response, Ending) {
    match tx.commit().await {
        Ok(()) => (response, Ending::Committed),
        Err(CommitError::RolledBack(e)) => (ApiError::from(e).into_response(), Ending::Aborted),
        Err(CommitError::OutcomeUnknown(cause)) => {
            let error = ApiError::CommitOutcomeUnknown { key: None, cause };
            (error.into_response(), Ending::CommitUnknown)
        }
    }
}

/// Stores a keyed request's answer and commits it with the handler's writes.
async fn complete(
    state: &IdempotencyState,
    tx: OpenTransaction,
    lease: &Lease,
    deadline: Instant,
    response: Response,
) -> (Response, Ending) {
    let stored = match StoredResponse::capture(response).await {
        Ok(stored) => stored,
        Err(error) => {
            tx.rollback().await;
            return abort(state, Some(lease), deadline, error.into_response()).await;
        }
    };
    match store::complete(tx, lease, &stored).await {
        Ok(()) => (stored.into_response(), Ending::Committed),
        Err(Incomplete::LeaseLost) => {
            let key = lease.key.to_string();
            let error = ApiError::IdempotencyKeyLeaseLost { key };
            (error.into_response(), Ending::LeaseLost)
        }
        Err(Incomplete::RolledBack(e)) => {
            abort(
                state,
                Some(lease),
                deadline,
                ApiError::from(e).into_response(),
            )
            .await
        }
        Err(Incomplete::OutcomeUnknown(cause)) => {
            // If it committed, the retry replays it (the release leaves a completed record alone);
            // if not, the released lease lets the retry take over at once.
            release_lease(&state.pool, lease, deadline).await;
            let key = Some(lease.key.to_string());
            let error = ApiError::CommitOutcomeUnknown { key, cause };
            (error.into_response(), Ending::CommitUnknown)
        }
    }
}

/// The handler's transaction failed and was rolled back: end the lease at once so the next retry
/// takes over (the record stays, its attempt kept), and answer without storing anything.
async fn abort(
    state: &IdempotencyState,
    lease: Option<&Lease>,
    deadline: Instant,
    response: Response,
) -> (Response, Ending) {
    if let Some(lease) = lease {
        release_lease(&state.pool, lease, deadline).await;
    }
    (response, Ending::Aborted)
}

/// How long a lease release may keep trying after its request's deadline passed: it then runs in
/// the background, and is worth a retry that need not wait out the lease.
const RELEASE_GRACE: Duration = Duration::from_secs(5);

async fn release_lease(pool: &Pool, lease: &Lease, until: Instant) {
    release(pool, &lease.scope, &lease.key, lease.token, until).await;
}

/// Ends a lease by its token, on a fresh connection for each try, until `until`; a lease that
/// cannot be ended by then expires on its own.
async fn release(
    pool: &Pool,
    scope: &Scope,
    key: &IdempotencyKey,
    token: LeaseToken,
    until: Instant,
) {
    let once =
        || async { store::release_lease(&mut *pool.acquire().await?, scope, key, token).await };
    let retried = once
        .retry(
            ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(10))
                .with_max_delay(Duration::from_millis(500))
                .with_jitter()
                .without_max_times(),
        )
        .when(|e| crate::db::observe(e).is_transient());
    match tokio::time::timeout_at(until, retried).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "could not end the lease; it will expire on its own")
        }
        Err(_) => tracing::warn!("could not end the lease in time; it will expire on its own"),
    }
}

/// The key of a request whose body may carry one: the body's or the header's, never both.
fn body_key(
    header: Option<IdempotencyKey>,
    in_body: Result<Option<String>, String>,
) -> Result<Option<IdempotencyKey>, ApiError> {
    let in_body = in_body
        .map_err(ApiError::InvalidRequest)?
        .map(|raw| {
            IdempotencyKey::parse_bytes(raw.as_bytes())
                .map_err(|e| ApiError::InvalidRequest(format!("the key in the body: {e}")))
        })
        .transpose()?;
    match (header, in_body) {
        (Some(header), Some(body)) => Err(ApiError::IdempotencyKeyInvalid(format!(
            "the body carries its key ({}): send no Idempotency-Key header ({}) with it",
            body.as_str(),
            header.as_str()
        ))),
        (header, body) => Ok(body.or(header)),
    }
}

/// Reads the `Idempotency-Key` header: absent is `None`, present must parse, twice is an error.
fn parse_key_header(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, ApiError> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::IdempotencyKeyInvalid(
            "send exactly one Idempotency-Key header".to_owned(),
        ));
    }
    IdempotencyKey::parse(value)
        .map(Some)
        .map_err(|e| ApiError::IdempotencyKeyInvalid(e.to_string()))
}
