//! The middleware: claim first, then execute the handler inside a transaction that also stores
//! the response (SPEC §5.3–§5.6).

use std::time::Duration;

use axum::{
    body::{Body, Bytes, to_bytes},
    extract::{OriginalUri, Request, State},
    http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};

use super::{
    Fingerprint, IdempotencyKey, Scope,
    store::{self, Claim, StoredResponse},
};
use crate::{
    config::IdempotencySettings,
    db::{Pool, PooledConnection, RequestTransaction},
    http::errors::{ApiError, TransactionFailed},
};

const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// Headers that describe one transmission rather than the answer, so they are never stored.
const UNSTORED_HEADERS: [HeaderName; 5] = [
    header::DATE,
    header::CONTENT_LENGTH,
    header::TRANSFER_ENCODING,
    header::CONNECTION,
    HeaderName::from_static("x-request-id"),
];

#[derive(Clone)]
pub struct IdempotencyState {
    pub pool: Pool,
    pub settings: IdempotencySettings,
    pub max_body_bytes: usize,
    pub request_timeout: Duration,
}

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
            Self::Rejected => "rejected",
        }
    }
}

/// Wraps side-effecting routes. GETs pass through untouched; every POST runs inside a
/// request-scoped transaction, and a POST with an Idempotency-Key is claimed before it runs.
/// Expects a [`Scope`] in the request extensions: authentication runs first (SPEC §2).
pub async fn idempotency_layer(
    State(state): State<IdempotencyState>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (response, kind, attempt) = match handle_post(&state, request, next).await {
        Ok(done) => done,
        Err((error, kind)) => (error.into_response(), kind, None),
    };
    with_outcome(response, kind, attempt)
}

type LayerResult = Result<(Response, OutcomeKind, Option<i32>), (ApiError, OutcomeKind)>;

async fn handle_post(state: &IdempotencyState, request: Request, next: Next) -> LayerResult {
    let rejected = |e| (e, OutcomeKind::Rejected);
    let key = parse_key_header(request.headers()).map_err(rejected)?;
    let scope = request
        .extensions()
        .get::<Scope>()
        .cloned()
        .ok_or_else(|| {
            rejected(ApiError::Internal(anyhow::anyhow!(
                "idempotency layer mounted without authentication"
            )))
        })?;
    // A client that trickles its body must not hold the request open past the request timeout.
    let (request, body) = tokio::time::timeout(
        state.request_timeout,
        buffer_body(request, state.max_body_bytes),
    )
    .await
    .map_err(|_| {
        rejected(ApiError::BodyTimeout {
            seconds: state.request_timeout.as_secs(),
        })
    })?
    .map_err(rejected)?;

    let Some(key) = key else {
        if state.settings.key_required {
            return Err(rejected(ApiError::IdempotencyKeyMissing));
        }
        let response = execute(state, request, next, None).await;
        let kind = verdict_or(&response, OutcomeKind::Unkeyed);
        return Ok((response, kind, None));
    };

    let target = request
        .extensions()
        .get::<OriginalUri>()
        .map_or_else(|| request.uri().clone(), |original| original.0.clone());
    let path_and_query = target
        .path_and_query()
        .map_or(target.path(), |pq| pq.as_str());
    let fingerprint = Fingerprint::of(request.method().as_str(), path_and_query, &body);

    // The claim and, when it wins, the handler's transaction share one connection.
    let mut connection = state
        .pool
        .acquire()
        .await
        .map_err(|e| (ApiError::Database(e), OutcomeKind::Rejected))?;
    let settings = &state.settings;
    let claim = store::claim(
        &mut connection,
        &scope,
        &key,
        &fingerprint,
        settings.lease,
        settings.retention,
    )
    .await
    .map_err(|e| (ApiError::Database(e), OutcomeKind::Rejected))?;

    let (attempt, kind) = match claim {
        Claim::Replay { attempt, response } => {
            let mut replayed = response_from(response);
            replayed
                .headers_mut()
                .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
            return Ok((replayed, OutcomeKind::Replay, Some(attempt)));
        }
        Claim::InFlight => {
            // The other attempt usually finishes within milliseconds; a retry in a second is the
            // useful hint, and the client's backoff covers a crashed attempt until its lease ends.
            let error = ApiError::IdempotencyKeyInFlight {
                key: key.to_string(),
                retry_after_seconds: 1,
            };
            return Err((error, OutcomeKind::InFlight));
        }
        Claim::Mismatch { stored } => {
            let error = ApiError::IdempotencyKeyReused {
                key: key.to_string(),
                stored: stored.short(),
                got: fingerprint.short(),
            };
            return Err((error, OutcomeKind::Mismatch));
        }
        Claim::Fresh { attempt } => (attempt, OutcomeKind::Fresh),
        Claim::Takeover { attempt } => (attempt, OutcomeKind::Takeover),
    };

    let claimed = Claimed {
        scope,
        key,
        attempt,
    };
    let response = execute(state, request, next, Some((claimed, connection))).await;
    let kind = verdict_or(&response, kind);
    Ok((response, kind, Some(attempt)))
}

/// The outcome `execute` recorded on its response, or `otherwise` when the handler's own answer
/// went out.
fn verdict_or(response: &Response, otherwise: OutcomeKind) -> OutcomeKind {
    match response.extensions().get::<LayerVerdict>() {
        Some(LayerVerdict::LeaseLost) => OutcomeKind::LeaseLost,
        Some(LayerVerdict::Aborted) => OutcomeKind::Aborted,
        None => otherwise,
    }
}

/// The claim this request holds. Its transaction begins on the connection it was claimed on.
struct Claimed {
    scope: Scope,
    key: IdempotencyKey,
    attempt: i32,
}

/// How `execute` ended when it did not deliver the handler's own response.
#[derive(Debug, Clone, Copy)]
enum LayerVerdict {
    LeaseLost,
    Aborted,
}

/// Runs the handler in a request-scoped transaction and, for a claimed key, stores its response in
/// that same transaction. It runs as its own task so a client that hangs up does not abort a claimed
/// execution half-way: the work still completes and the client's retry gets the replay. The request
/// timeout applies inside the task, and it is shorter than the lease (SPEC §5.6).
async fn execute(
    state: &IdempotencyState,
    request: Request,
    next: Next,
    claimed: Option<(Claimed, PooledConnection)>,
) -> Response {
    let state = state.clone();
    let timeout = state.request_timeout;
    let task = tokio::spawn(async move {
        match tokio::time::timeout(timeout, run_in_transaction(&state, request, next, claimed))
            .await
        {
            Ok(response) => response,
            // Dropping the transaction rolled it back; the lease stays, as after a crash.
            Err(_) => ApiError::Timeout {
                seconds: timeout.as_secs(),
            }
            .into_response(),
        }
    });
    match task.await {
        Ok(response) => response,
        Err(join_error) => {
            // A panicking handler: its transaction was dropped, so nothing was written.
            ApiError::Internal(anyhow::anyhow!("request task failed: {join_error}")).into_response()
        }
    }
}

async fn run_in_transaction(
    state: &IdempotencyState,
    mut request: Request,
    next: Next,
    claimed: Option<(Claimed, PooledConnection)>,
) -> Response {
    let (claimed, begun) = match claimed {
        Some((claimed, connection)) => (
            Some(claimed),
            RequestTransaction::begin_on(connection).await,
        ),
        None => (None, RequestTransaction::begin(&state.pool).await),
    };
    let claimed = claimed.as_ref();
    let slot = match begun {
        Ok(slot) => slot,
        Err(e) => return abort(state, claimed, ApiError::Database(e).into_response()).await,
    };
    request.extensions_mut().insert(slot.clone());
    let response = next.run(request).await;
    let Some(tx) = slot.take().await else {
        let error = ApiError::Internal(anyhow::anyhow!("the handler kept the request transaction"));
        return abort(state, claimed, error.into_response()).await;
    };

    if response.extensions().get::<TransactionFailed>().is_some() {
        tx.rollback().await;
        return abort(state, claimed, response).await;
    }

    let Some(claimed) = claimed else {
        return match tx.commit().await {
            Ok(()) => response,
            Err(e) => abort(state, None, ApiError::Database(e).into_response()).await,
        };
    };

    let stored = match store_form(response).await {
        Ok(stored) => stored,
        Err(error) => {
            tx.rollback().await;
            return abort(state, Some(claimed), error.into_response()).await;
        }
    };
    let completion =
        store::completion_statement(&claimed.scope, &claimed.key, claimed.attempt, &stored);
    match tx.commit_after(completion).await {
        Ok(()) => response_from(stored),
        Err(e) if store::is_lease_lost(&e) => {
            // Another attempt took the key over while this one ran: only one result may ever
            // leave the server per key, so this attempt's writes vanished with the rollback
            // (SPEC §5.4).
            let mut response = ApiError::IdempotencyKeyLeaseLost {
                key: claimed.key.to_string(),
            }
            .into_response();
            response.extensions_mut().insert(LayerVerdict::LeaseLost);
            response
        }
        // Rolled back, or the connection was lost around the COMMIT and its outcome is unknown: if
        // it happened, the retry replays it; if not, the released lease lets the retry take over at
        // once. Either way exactly one result stands.
        Err(e) => abort(state, Some(claimed), ApiError::Database(e).into_response()).await,
    }
}

/// The handler's transaction failed and was rolled back: end the lease at once so the next retry
/// takes over (the record stays, its attempt kept), and answer without storing anything.
async fn abort(
    state: &IdempotencyState,
    claimed: Option<&Claimed>,
    mut response: Response,
) -> Response {
    if let Some(claimed) = claimed {
        let released = async {
            let mut connection = state.pool.acquire().await?;
            store::release_lease(
                &mut connection,
                &claimed.scope,
                &claimed.key,
                claimed.attempt,
            )
            .await
        };
        if let Err(e) = released.await {
            tracing::warn!(error = %e, "could not release the lease; it will expire on its own");
        }
    }
    response.extensions_mut().insert(LayerVerdict::Aborted);
    response
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

/// Reads the whole body (the fingerprint hashes its raw bytes), refusing more than the limit
/// before reading it when Content-Length already says so.
async fn buffer_body(request: Request, limit: usize) -> Result<(Request, Bytes), ApiError> {
    let too_large = ApiError::PayloadTooLarge { limit };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(too_large);
    }
    let (parts, body) = request.into_parts();
    let bytes = to_bytes(body, limit).await.map_err(|e| {
        let is_limit = std::error::Error::source(&e)
            .is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
        if is_limit {
            too_large
        } else {
            ApiError::InvalidRequest(format!("cannot read the request body: {e}"))
        }
    })?;
    Ok((Request::from_parts(parts, Body::from(bytes.clone())), bytes))
}

/// The handler's response as it will be stored and replayed.
async fn store_form(response: Response) -> Result<StoredResponse, ApiError> {
    let (parts, body) = response.into_parts();
    let body = to_bytes(body, usize::MAX).await.map_err(|e| {
        ApiError::Internal(anyhow::anyhow!("cannot buffer the handler's response: {e}"))
    })?;
    let headers = parts
        .headers
        .iter()
        .filter(|(name, _)| !UNSTORED_HEADERS.contains(name))
        .map(|(name, value)| {
            value
                .to_str()
                .map(|v| (name.as_str().to_owned(), v.to_owned()))
                .map_err(|_| {
                    ApiError::Internal(anyhow::anyhow!("header {name} is not visible ASCII"))
                })
        })
        .collect::<Result<_, _>>()?;
    Ok(StoredResponse {
        status: parts.status.as_u16(),
        headers,
        body: body.to_vec(),
    })
}

/// Builds the response from its stored form: the first answer and every replay come from the
/// same bytes, so they cannot drift apart.
fn response_from(stored: StoredResponse) -> Response {
    let mut response = Response::new(Body::from(stored.body));
    *response.status_mut() =
        StatusCode::from_u16(stored.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    for (name, value) in stored.headers {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            headers.append(name, value);
        }
    }
    response
}

fn with_outcome(mut response: Response, kind: OutcomeKind, attempt: Option<i32>) -> Response {
    response
        .extensions_mut()
        .insert(IdempotencyOutcome { kind, attempt });
    response
}
