//! The chaos run's webhook receiver: one path per merchant, a 500 now and then so retries happen
//! under the faults too, and a record of every event id each merchant's endpoint received.

use std::{
    collections::HashSet,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use axum::{
    Router,
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
};

/// (merchant, event id) of every delivery answered 2xx.
pub type Received = Arc<Mutex<HashSet<(String, String)>>>;

#[derive(Clone, Default)]
struct Shared {
    received: Received,
    requests: Arc<AtomicU64>,
}

/// Serves on a free port; returns the base URL (`http://127.0.0.1:port`) and the record.
pub async fn start() -> anyhow::Result<(String, Received)> {
    let shared = Shared::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let app = Router::new()
        .route("/{merchant}", axum::routing::post(receive))
        .with_state(shared.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((base, shared.received))
}

async fn receive(
    State(shared): State<Shared>,
    Path(merchant): Path<String>,
    headers: HeaderMap,
) -> StatusCode {
    // Every seventh request fails: the event must come again.
    if shared.requests.fetch_add(1, Ordering::Relaxed) % 7 == 6 {
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    shared.received.lock().unwrap().insert((merchant, id));
    StatusCode::NO_CONTENT
}
