//! The checkout page and its API: `GET /checkout/{id}` (the page; the client secret travels in
//! the URL's fragment) with its script and style, and, opened by the client secret,
//! `GET /v1/checkout/{id}` (the intent's public view), `GET /v1/checkout/{id}/authorization` (what
//! the payer signs), `POST /v1/checkout/{id}/confirm` (the signature, behind the idempotency layer
//! and rate limited per intent) and `GET /v1/checkout/{id}/events` (its changes as Server-Sent
//! Events). The rules are `ways_to_pay::authorization::payments`'s, as for a merchant's confirm.

use std::{convert::Infallible, num::NonZeroU32, sync::Arc, time::Duration};

use axum::{
    Extension, Json, Router,
    extract::{FromRef, Path, State},
    http::HeaderMap,
    middleware::from_fn_with_state,
    response::{
        Response,
        sse::{Event, KeepAlive, Sse},
    },
    routing::{get, post},
};
use futures::Stream;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use super::{
    access::{CheckoutAccess, require_client_secret},
    changes::Changes,
    page,
    view::{self, CheckoutView},
};
use crate::{
    db::Pool,
    error::{ApiError, ErrorBody},
    extract::{JsonBody, QueryParams},
    idempotency::Tx,
    idempotency::{IdempotencyState, idempotency_layer},
    intents::state::Actor,
    rails::{Chains, eip3009::AuthorizationDocument, finality::Finality, tokens},
    ways_to_pay::authorization::payments::{self, Choose, PayRequest},
};

/// Confirms a page may send per intent and minute (a payer retrying is a handful).
const CONFIRMS_PER_MINUTE: u32 = 10;
/// How long one event stream stays open; the page opens the next.
const STREAM_FOR: Duration = Duration::from_secs(60);
/// How often an open stream reads its intent even without a notification.
const STREAM_POLL: Duration = Duration::from_secs(5);

/// How many confirms of one intent a replica's checkout pages take a minute.
#[derive(Clone)]
pub struct ConfirmLimiter(Arc<DefaultKeyedRateLimiter<String>>);

impl Default for ConfirmLimiter {
    fn default() -> Self {
        Self(Arc::new(RateLimiter::keyed(Quota::per_minute(
            NonZeroU32::new(CONFIRMS_PER_MINUTE).expect("not zero"),
        ))))
    }
}

/// The page, its assets and its API. `idempotency` and `deadline` are the layers the merchant API
/// has, in the same order.
pub fn router<S>(idempotency: IdempotencyState, pool: Pool, request_timeout: Duration) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Pool: FromRef<S>,
    Chains: FromRef<S>,
    Changes: FromRef<S>,
    ConfirmLimiter: FromRef<S>,
{
    let api = Router::new()
        .route("/v1/checkout/{id}", get(show))
        .route("/v1/checkout/{id}/authorization", get(authorization))
        .route("/v1/checkout/{id}/confirm", post(confirm))
        .route("/v1/checkout/{id}/events", get(events))
        .route_layer(from_fn_with_state(idempotency, idempotency_layer))
        .route_layer(from_fn_with_state(pool, require_client_secret))
        .route_layer(from_fn_with_state(
            request_timeout,
            crate::deadline::enforce,
        ));
    Router::new()
        .route("/checkout/{id}", get(document))
        .route("/checkout/assets/{name}", get(asset))
        .merge(api)
}

/// The checkout page of an intent: the same document for every intent, which its script fills
/// from the API with the secret in the URL's fragment.
#[utoipa::path(
    get,
    path = "/checkout/{id}",
    operation_id = "checkout_page",
    tag = "checkout",
    params(("id" = String, Path, description = "The intent id; the client secret follows in the URL's fragment")),
    responses((status = 200, description = "The page (text/html), in the language `Accept-Language` prefers: English or Traditional Chinese"))
)]
pub async fn document(headers: HeaderMap) -> Response {
    page::document(&headers)
}

async fn asset(Path(name): Path<String>) -> Response {
    page::asset(&name)
}

/// The intent as its page shows it. A token never read yet is read first (once: its units are
/// kept with its domain); one whose chain is not served or does not answer shows base units.
async fn current(
    conn: &mut sqlx::PgConnection,
    chains: &Chains,
    access: &CheckoutAccess,
) -> Result<CheckoutView, ApiError> {
    let not_found = || ApiError::NotFound("no checkout for that intent".to_owned());
    let (mut view, read) = view::find(conn, &access.intent)
        .await?
        .ok_or_else(not_found)?;
    let chain = view.chain.as_deref().and_then(|chain| chains.get(chain));
    let token = view.token.as_deref().map(str::parse);
    if let (false, Some((endpoint, node)), Some(Ok(token))) = (read, chain, token) {
        match tokens::resolve(conn, endpoint, node, token).await {
            Ok(_) => {
                view = view::find(conn, &access.intent)
                    .await?
                    .ok_or_else(not_found)?
                    .0
            }
            Err(tokens::ResolveError::Chain(_)) => {}
            Err(tokens::ResolveError::Database(e)) => return Err(e.into()),
        }
    }
    let required = match view.chain.as_deref().and_then(|c| chains.get(c)) {
        Some((endpoint, _)) => match chains.settings.finality_of(endpoint) {
            Finality::Confirmations(n) => Some(n),
            Finality::Safe | Finality::Finalized => None,
        },
        None => Some(chains.settings.confirmations),
    };
    Ok(view.with_deposit_progress(conn, required).await?)
}

/// The intent as its checkout page shows it.
#[utoipa::path(
    get,
    path = "/v1/checkout/{id}",
    operation_id = "retrieve_checkout",
    tag = "checkout",
    params(("id" = String, Path, description = "The intent id")),
    responses(
        (status = 200, description = "What the page may see of the intent", body = CheckoutView),
        (status = 401, description = "`unauthorized`: no client secret", body = ErrorBody),
        (status = 404, description = "`not_found`: no such intent, or not its secret", body = ErrorBody),
    )
)]
pub async fn show(
    State(pool): State<Pool>,
    State(chains): State<Chains>,
    Extension(access): Extension<CheckoutAccess>,
) -> Result<Json<CheckoutView>, ApiError> {
    let mut conn = pool.acquire().await?;
    Ok(Json(current(&mut conn, &chains, &access).await?))
}

/// What the payer signs: the intent's EIP-3009 authorization, as the merchant's
/// `GET /v1/payment_intents/{id}/authorization` answers it.
#[utoipa::path(
    get,
    path = "/v1/checkout/{id}/authorization",
    operation_id = "get_checkout_authorization",
    tag = "checkout",
    params(("id" = String, Path, description = "The intent id"), Choose),
    responses(
        (status = 200, description = "What the payer signs", body = AuthorizationDocument),
        (status = 400, description = "`invalid_request`: an option or payer it cannot be paid with", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`invalid_state_transition`: not `created`", body = ErrorBody),
        (status = 422, description = "`token_not_supported`, or `chain_not_settled`", body = ErrorBody),
    )
)]
pub async fn authorization(
    State(pool): State<Pool>,
    State(chains): State<Chains>,
    Extension(access): Extension<CheckoutAccess>,
    QueryParams(choose): QueryParams<Choose>,
) -> Result<Json<AuthorizationDocument>, ApiError> {
    let mut conn = pool.acquire().await?;
    let document = payments::authorization(
        &mut conn,
        &chains,
        &access.merchant,
        access.intent.as_str(),
        &choose,
    )
    .await?;
    Ok(Json(document))
}

/// Confirm the intent with the payer's signature, as the merchant's confirm does; the answer is
/// the page's view of it.
#[utoipa::path(
    post,
    path = "/v1/checkout/{id}/confirm",
    operation_id = "confirm_checkout",
    tag = "checkout",
    params(("id" = String, Path, description = "The intent id")),
    request_body(content = PayRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Processing: the authorization is queued", body = CheckoutView),
        (status = 400, description = "`invalid_request`: the signature is malformed or not the payer's", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`invalid_state_transition`", body = ErrorBody),
        (status = 422, description = "`token_not_supported`, `chain_not_settled`, or `permit2_allowance_required`: the payer approves Permit2 for the token first", body = ErrorBody),
        (status = 429, description = "`rate_limited`: too many confirms of this intent", body = ErrorBody,
         headers(("Retry-After" = u64, description = "Seconds until a confirm of this intent is accepted again"))),
    )
)]
pub async fn confirm(
    State(chains): State<Chains>,
    Extension(access): Extension<CheckoutAccess>,
    State(ConfirmLimiter(limiter)): State<ConfirmLimiter>,
    mut tx: Tx,
    JsonBody(request): JsonBody<PayRequest>,
) -> Result<Json<CheckoutView>, ApiError> {
    // Intents paid long ago need no bucket: the map is pruned as it grows.
    if limiter.len() > 4096 {
        limiter.retain_recent();
    }
    if let Err(not_until) = limiter.check_key(&access.intent.as_str().to_owned()) {
        let wait = not_until.wait_time_from(governor::clock::Clock::now(
            &governor::clock::DefaultClock::default(),
        ));
        return Err(ApiError::RateLimited {
            retry_after_seconds: wait.as_secs().max(1),
            reason: "too many confirms of this intent",
        });
    }
    payments::confirm(
        &mut tx,
        &chains,
        &access.merchant,
        access.intent.as_str(),
        &request,
        &Actor::Checkout,
    )
    .await?;
    Ok(Json(current(&mut tx, &chains, &access).await?))
}

/// What a page was last sent of its intent: version, pending reason, and a deposit's progress
/// (the amount confirming and its confirmations).
type Shown = (i32, Option<String>, (String, Option<u64>));

/// The intent's view now and after each change, as Server-Sent Events (`event: intent`, the view
/// as data), for a minute; woken by `changes`, and reading the intent every few seconds anyway.
#[utoipa::path(
    get,
    path = "/v1/checkout/{id}/events",
    operation_id = "follow_checkout",
    tag = "checkout",
    params(("id" = String, Path, description = "The intent id")),
    responses(
        (status = 200, description = "text/event-stream of `intent` events, each a CheckoutView"),
        (status = 404, description = "`not_found`: no such intent, or not its secret", body = ErrorBody),
    )
)]
pub async fn events(
    State(pool): State<Pool>,
    State(chains): State<Chains>,
    State(changes): State<Changes>,
    Extension(access): Extension<CheckoutAccess>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    struct Following {
        pool: Pool,
        chains: Chains,
        access: CheckoutAccess,
        changes: tokio::sync::broadcast::Receiver<Arc<str>>,
        stopping: tokio::sync::watch::Receiver<bool>,
        shown: Option<Shown>,
        until: tokio::time::Instant,
    }
    let start = Following {
        pool,
        chains,
        changes: changes.subscribe(),
        stopping: changes.stopping(),
        access,
        shown: None,
        until: tokio::time::Instant::now() + STREAM_FOR,
    };
    let stream = futures::stream::unfold(start, |mut f| async move {
        loop {
            if f.shown.is_some() {
                let woken = async {
                    loop {
                        match f.changes.recv().await {
                            Ok(subject) if &*subject == f.access.intent.as_str() => return,
                            Ok(_) => {}
                            // Behind: whatever was missed may be ours.
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => return,
                            Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                                std::future::pending::<()>().await
                            }
                        }
                    }
                };
                let wait = STREAM_POLL.min(
                    f.until
                        .saturating_duration_since(tokio::time::Instant::now()),
                );
                let stopping = f.stopping.wait_for(|stopping| *stopping);
                tokio::select! {
                    _ = tokio::time::timeout(wait, woken) => {}
                    _ = stopping => return None,
                }
            }
            if tokio::time::Instant::now() >= f.until || *f.stopping.borrow() {
                return None;
            }
            let read = match f.pool.acquire().await {
                Ok(mut conn) => current(&mut conn, &f.chains, &f.access).await.ok(),
                Err(_) => None,
            };
            let Some(now) = read else {
                // The database is away for now: try again shortly, as the page's poll would.
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            };
            // A deposit seen on chain and its confirmations change no version: shown too.
            let seen = (
                now.version,
                now.pending_reason.clone(),
                (now.amount_confirming.clone(), now.confirmations),
            );
            if f.shown.as_ref() != Some(&seen) {
                f.shown = Some(seen);
                let event = Event::default()
                    .event("intent")
                    .json_data(&now)
                    .unwrap_or_default();
                return Some((Ok(event), f));
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
