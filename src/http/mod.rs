//! The HTTP surface: one router assembled from each capability's routes, and the layers every
//! request passes through, outermost first: request id, access log, metrics, then for the API
//! routes authentication and idempotency.

pub mod health;
pub mod openapi;
pub mod state;

use axum::{
    Router,
    extract::{DefaultBodyLimit, State},
    http::HeaderName,
    middleware::{from_fn, from_fn_with_state},
    routing::{any, get},
};
use tower::ServiceBuilder;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};

use crate::{
    auth, checkout,
    config::Settings,
    dashboard,
    db::{Background, Pool},
    deadline,
    error::ApiError,
    events,
    idempotency::{self, IdempotencyState, idempotency_layer},
    intents::{
        self,
        routes::{PublicBaseUrl, SettledChains},
    },
    ledger, merchants, rails,
    telemetry::{self, metrics},
    tenants, ways_to_pay, webhooks,
    workers::Heartbeats,
};

pub use state::AppState;

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// What the routes share with the workers of their replica.
pub struct Shared {
    /// The requests' pool.
    pub pool: Pool,
    /// The background work's pool, which `/readyz` uses too: it never waits behind requests.
    pub background: Pool,
    /// One `Chains` for the routes and the workers: who waits in a request is woken by them.
    pub chains: rails::Chains,
    pub bootstrap: auth::Bootstrap,
    pub heartbeats: Heartbeats,
    pub changes: checkout::changes::Changes,
    pub limiter: tenants::Limiter,
}

pub fn router(settings: &Settings, shared: Shared) -> Router {
    let Shared {
        pool,
        background,
        chains,
        bootstrap,
        heartbeats,
        changes,
        limiter,
    } = shared;
    let idempotency = IdempotencyState {
        pool: pool.clone(),
        settings: settings.idempotency,
        max_body_bytes: settings.max_body_bytes,
        request_timeout: settings.request_timeout,
        key_in_body: None,
    };
    // route_layer: later layers wrap earlier ones, so the deadline covers everything,
    // authentication runs first, then the merchant's limits and its turn at the database, before
    // the idempotency layer ever reads a key (a refused request leaves no record).
    let checkout = checkout::router(idempotency.clone(), pool.clone(), settings.request_timeout);
    let authenticator = auth::Authenticator::new(pool.clone());
    // `DB_REQUEST_TURNS` `/v1` requests at once; x402's settle waits for its block without a
    // connection, so it takes no turn (`docs/design.md`).
    let request_turns = tenants::Turns::for_pool(
        settings.db_request_turns.map(|turns| turns as usize),
        settings.db_max_connections as usize,
    );
    let turns = tenants::TurnGate {
        turns: request_turns.clone(),
        wait: settings.db_wait_timeout,
        max_body_bytes: settings.max_body_bytes,
        request_timeout: settings.request_timeout,
    };
    let ways_to_pay = ways_to_pay::routes(&idempotency, &chains);
    let api = intents::router()
        .merge(ways_to_pay.api)
        .merge(merchants::router())
        .merge(ledger::router())
        .merge(idempotency::router())
        .merge(events::router())
        .merge(webhooks::router())
        .route_layer(from_fn_with_state(idempotency.clone(), idempotency_layer))
        .route_layer(from_fn_with_state(turns, tenants::take_turn))
        .route_layer(from_fn_with_state(limiter.clone(), tenants::limit))
        .route_layer(from_fn_with_state(
            authenticator.clone(),
            auth::require_merchant,
        ))
        .route_layer(from_fn_with_state(
            settings.request_timeout,
            deadline::enforce,
        ));
    // Ways to pay with their own idempotency and no turn (the x402 facilitator, `docs/x402.md`):
    // the merchant's key and limits, the deadline.
    let own = ways_to_pay
        .own
        .route_layer(from_fn_with_state(limiter, tenants::limit))
        .route_layer(from_fn_with_state(
            authenticator.clone(),
            auth::require_merchant,
        ))
        .route_layer(from_fn_with_state(
            settings.request_timeout,
            deadline::enforce,
        ));
    // Every `/v1` path is authenticated first, even one that does not exist: without a valid key
    // it is 401 like every other, so an unknown path tells a stranger nothing.
    let unknown_api = Router::new()
        .route("/v1", any(no_such_endpoint))
        .route("/v1/{*rest}", any(no_such_endpoint))
        .route_layer(from_fn_with_state(authenticator, auth::require_merchant));

    let operations = Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(metrics_page))
        .route("/openapi.json", get(openapi::openapi_json));
    let state = AppState::new(state::Parts {
        pool: pool.clone(),
        background: Background(background),
        chains,
        bootstrap,
        heartbeats,
        changes,
        checkout_confirms: checkout::routes::ConfirmLimiter::default(),
        turns: request_turns,
        settled_chains: SettledChains::new(settings.settlement.chains.clone()),
        public_base_url: PublicBaseUrl::new(&settings.public_base_url),
        webhooks: webhooks::WebhookState {
            pool,
            settings: settings.webhooks,
        },
        order_terms: crate::merchants::TermsCache::default(),
    });

    Router::new()
        .merge(api)
        .merge(checkout)
        .merge(dashboard::router())
        .merge(own)
        .merge(unknown_api)
        .merge(operations)
        .fallback(no_such_endpoint)
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .with_state(state)
        .layer(DefaultBodyLimit::max(settings.max_body_bytes))
        .layer(from_fn(metrics::track))
        .layer(
            ServiceBuilder::new()
                .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
                .layer(telemetry::access_log())
                .layer(PropagateRequestIdLayer::new(REQUEST_ID)),
        )
}

/// `/metrics`, with the gauges only the router can read: the turns, and requests in line for one.
async fn metrics_page(
    State(turns): State<tenants::Turns>,
    pool: State<Pool>,
    background: State<Background>,
) -> axum::response::Response {
    ::metrics::gauge!(tenants::turns::TURNS_WAITING).set(turns.waiting() as f64);
    ::metrics::gauge!(tenants::turns::TURN_COUNT).set(turns.count() as f64);
    metrics::render(pool, background).await
}

async fn no_such_endpoint() -> ApiError {
    ApiError::NotFound("no such endpoint".to_owned())
}
