//! The chaos run's webhook receiver: one endpoint (path) per merchant, a 500 now and then so retries happen
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
use sqlx::{Connection, PgConnection};

/// (merchant, event id) of every delivery answered 2xx.
pub type Received = Arc<Mutex<HashSet<(String, String)>>>;

#[derive(Clone, Default)]
struct Shared {
    received: Received,
    requests: Arc<AtomicU64>,
}

/// Serves on a free port and registers an endpoint there for each merchant, before any load, so
/// every event is owed to it. Returns the record of what arrived.
pub async fn start_for(database_url: &str, merchants: &[&str]) -> anyhow::Result<Received> {
    let shared = Shared::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let app = Router::new()
        .route("/{merchant}", axum::routing::post(receive))
        .with_state(shared.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let mut db = PgConnection::connect(database_url).await?;
    for (i, merchant) in merchants.iter().enumerate() {
        sqlx::query(
            "INSERT INTO webhook_endpoints (merchant_id, id, url, secret) \
             VALUES ($1, $2, $3, 'whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=')",
        )
        .bind(merchant)
        .bind(format!("we_{i:024}"))
        .bind(format!("{base}/{merchant}"))
        .execute(&mut db)
        .await?;
    }
    Ok(shared.received)
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
