//! Prometheus metrics (`GET /metrics`). Route labels come from the matched route, never the raw
//! path, so ids in paths cannot explode the series count.

use std::{sync::OnceLock, time::Instant};

use axum::{
    extract::{MatchedPath, Request, State},
    http::{StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::{
    db::{Background, DB_POOL_WAIT, Pool},
    idempotency::IdempotencyOutcome,
    tenants::RefusedByLimits,
};

pub const HTTP_REQUESTS: &str = "http_requests_total";
pub const HTTP_DURATION: &str = "http_request_duration_seconds";
pub const IDEMPOTENCY_OUTCOMES: &str = "idempotency_outcomes_total";
pub const SWEEP_RUNS: &str = "sweeper_runs_total";
pub const SWEEP_INTENTS_EXPIRED: &str = "sweeper_intents_expired_total";
pub const SWEEP_KEYS_DELETED: &str = "sweeper_keys_deleted_total";
pub const SWEEP_EVENTS_DELETED: &str = "sweeper_events_deleted_total";
pub const WEBHOOK_ATTEMPTS: &str = "webhook_attempts_total";
pub const WEBHOOK_QUEUE_DEPTH: &str = "webhook_queue_depth";
pub const WEBHOOK_OLDEST_PENDING: &str = "webhook_oldest_pending_seconds";
pub const CHAIN_HEAD: &str = "chain_head_block";
pub const CHAIN_LISTENER_LAG: &str = "chain_listener_lag_blocks";
pub const CHAIN_LISTENER_HALTED: &str = "chain_listener_halted";
pub const CHAIN_REORGS: &str = "chain_reorgs_total";
pub const RPC_CALLS: &str = "rpc_calls_total";
pub const RPC_CALL_SECONDS: &str = "rpc_call_seconds";
pub const RPC_HEAD_LAG: &str = "rpc_endpoint_head_lag_blocks";
pub const CHAIN_LOGS_RANGE: &str = "chain_logs_range_blocks";
pub const CHAIN_LOGS_RANGE_REFUSALS: &str = "chain_logs_range_refusals_total";
pub const CHAIN_ENDPOINTS_DISAGREE: &str = "chain_endpoints_disagreements_total";
pub const RELAYER_PENDING: &str = "relayer_submissions_pending";
pub const RELAYER_SENT: &str = "relayer_transactions_sent_total";
pub const RELAYER_BALANCE: &str = "relayer_balance_wei";
pub const SETTLEMENTS: &str = "settlements_total";
pub const DB_POOL_CONNECTIONS: &str = "db_pool_connections";
pub const DB_POOL_WAITING: &str = "db_pool_waiting_requests";

/// Latency buckets from 1 ms to 10 s: an idempotent create is a few ms, a stalled one seconds.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Waits for a connection from 0.1 ms (one was free) to 5 s (the background pool's limit).
const POOL_WAIT_BUCKETS: &[f64] = &[
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// The process-wide recorder, installed once (several apps in one test process share it).
pub fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Full(HTTP_DURATION.to_owned()), LATENCY_BUCKETS)
            .expect("buckets are not empty")
            .set_buckets_for_metric(Matcher::Full(DB_POOL_WAIT.to_owned()), POOL_WAIT_BUCKETS)
            .expect("buckets are not empty")
            .install_recorder()
            .expect("no other metrics recorder is installed")
    })
}

/// Counts every request by method, matched route and status, times it, and counts the
/// idempotency layer's outcome. A refusal of the merchant's limits is counted, not timed: its
/// time is the refusal pause, and a runaway loop's would fill the route's histogram.
pub async fn track(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().to_string();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    if response.extensions().get::<RefusedByLimits>().is_none() {
        metrics::histogram!(HTTP_DURATION, "method" => method.clone(), "route" => route.clone())
            .record(started.elapsed().as_secs_f64());
    }
    metrics::counter!(HTTP_REQUESTS, "method" => method, "route" => route, "status" => status)
        .increment(1);
    if let Some(outcome) = response.extensions().get::<IdempotencyOutcome>() {
        metrics::counter!(IDEMPOTENCY_OUTCOMES, "outcome" => outcome.kind.as_str()).increment(1);
    }
    response
}

/// `GET /metrics` in the Prometheus text format.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain", body = String))
)]
pub async fn render(
    State(pool): State<Pool>,
    State(Background(background)): State<Background>,
) -> Response {
    for pool in [&pool, &background] {
        let (name, usage) = (pool.name(), pool.usage());
        metrics::gauge!(DB_POOL_CONNECTIONS, "pool" => name, "state" => "idle")
            .set(usage.idle as f64);
        metrics::gauge!(DB_POOL_CONNECTIONS, "pool" => name, "state" => "in_use")
            .set(usage.in_use as f64);
        metrics::gauge!(DB_POOL_WAITING, "pool" => name).set(usage.waiting as f64);
    }
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle().render(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use axum::{Router, http::Request as HttpRequest, middleware::from_fn, routing::get};
    use tower::ServiceExt;

    use super::*;

    /// A refusal of the merchant's limits is counted by status, and never timed.
    #[tokio::test]
    async fn refusals_of_the_limits_are_counted_and_not_timed() {
        let refused = || async {
            let mut response = StatusCode::TOO_MANY_REQUESTS.into_response();
            response.extensions_mut().insert(RefusedByLimits);
            response
        };
        let app = Router::new()
            .route("/refused-by-limits", get(refused))
            .route("/answered", get(|| async { StatusCode::OK }))
            .layer(from_fn(track));
        let handle = handle();
        for path in ["/refused-by-limits", "/answered"] {
            let request = HttpRequest::get(path)
                .body(axum::body::Body::empty())
                .unwrap();
            app.clone().oneshot(request).await.unwrap();
        }

        let page = handle.render();
        assert!(page.contains(
            r#"http_requests_total{method="GET",route="/refused-by-limits",status="429"} 1"#
        ));
        assert!(!page.contains(
            r#"http_request_duration_seconds_count{method="GET",route="/refused-by-limits"}"#
        ));
        assert!(
            page.contains(
                r#"http_request_duration_seconds_count{method="GET",route="/answered"} 1"#
            )
        );
    }
}
