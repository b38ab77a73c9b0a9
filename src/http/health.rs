//! Liveness and readiness probes.

use std::time::Duration;

use axum::{Json, extract::State, response::IntoResponse};
use serde_json::json;

use crate::{
    auth::Bootstrap,
    db::{self, Background},
    error::{ApiError, ErrorBody},
    rails::Chains,
    workers::Heartbeats,
};

/// `GET /healthz`: the process is alive and serving HTTP; says nothing of the database.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, description = "Alive")))]
pub async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

/// `GET /readyz`: the database answers, every migration this binary knows is applied, the
/// bootstrap keys are stored and no background worker stopped ticking. Still ready, it says what
/// is degraded: a chain none of whose RPC endpoints answers, a relayer key low on its chain's
/// native coin.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    responses(
        (status = 200, description = "Ready to serve: `{\"status\":\"ready\"}`, or `{\"status\":\"degraded\",\"degraded\":[…]}` with a line per chain none of whose RPC endpoints answers and per relayer key low on its chain's native coin"),
        (status = 503, description = "Database unreachable or not migrated", body = ErrorBody),
    )
)]
pub async fn readyz(
    State(Background(pool)): State<Background>,
    State(bootstrap): State<Bootstrap>,
    State(heartbeats): State<Heartbeats>,
    State(chains): State<Chains>,
) -> Result<impl IntoResponse, ApiError> {
    // A probe must answer quickly even while the pool waits on a dead database.
    let pending = tokio::time::timeout(Duration::from_secs(2), async {
        db::migrate::pending(&mut *pool.acquire().await?).await
    })
    .await
    .map_err(|_| ApiError::Unready("the database did not answer within 2 s".to_owned()))?
    .map_err(|e| {
        tracing::warn!(error = %e, "readiness check failed");
        ApiError::Unready(
            db::advice(&e)
                .unwrap_or("the database is unreachable")
                .to_owned(),
        )
    })?;
    if pending > 0 {
        return Err(ApiError::Unready(db::migrate::advice(pending)));
    }
    if !bootstrap.is_done() {
        return Err(ApiError::Unready(
            "the keys of BOOTSTRAP_API_KEYS are not stored yet".to_owned(),
        ));
    }
    let stalled = heartbeats.stalled();
    if !stalled.is_empty() {
        return Err(ApiError::Unready(format!(
            "stopped ticking: {}",
            stalled.join(", ")
        )));
    }
    let degraded = chains.degraded();
    if !degraded.is_empty() {
        return Ok(Json(json!({"status": "degraded", "degraded": degraded})));
    }
    Ok(Json(json!({"status": "ready"})))
}
