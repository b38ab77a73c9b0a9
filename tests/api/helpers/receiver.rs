//! A real HTTP receiver for webhooks: it records every request and answers as scripted.

use std::{
    collections::VecDeque,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use tokio::{net::TcpListener, sync::Notify};

/// How the receiver answers one request.
#[derive(Debug, Clone)]
pub enum Reply {
    Status(u16),
    /// Never answers.
    Hang,
    /// 302 to this URL.
    Redirect(String),
    /// 200 with a body of this many bytes, then the rest never comes.
    EndlessBody(usize),
}

#[derive(Debug, Clone)]
pub struct Received {
    pub headers: HeaderMap,
    pub body: Bytes,
}

#[derive(Clone, Default)]
struct Shared {
    script: Arc<Mutex<VecDeque<Reply>>>,
    received: Arc<Mutex<Vec<Received>>>,
    arrived: Arc<Notify>,
}

pub struct Receiver {
    pub url: String,
    shared: Shared,
}

impl Receiver {
    /// Answers the scripted replies in order, then 200 to everything.
    pub async fn start(script: Vec<Reply>) -> Self {
        Self::start_on(TcpListener::bind("127.0.0.1:0").await.unwrap(), script)
    }

    /// Serves on `address` (a receiver that was down and comes back).
    pub async fn start_at(address: SocketAddr, script: Vec<Reply>) -> Self {
        Self::start_on(TcpListener::bind(address).await.unwrap(), script)
    }

    fn start_on(listener: TcpListener, script: Vec<Reply>) -> Self {
        let shared = Shared {
            script: Arc::new(Mutex::new(script.into())),
            ..Shared::default()
        };
        let url = format!("http://{}/hooks", listener.local_addr().unwrap());
        let app = Router::new().fallback(receive).with_state(shared.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, shared }
    }

    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }

    /// Waits until `count` requests have arrived (at most 30 s), and returns them all.
    pub async fn wait_for(&self, count: usize) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let arrived = self.shared.arrived.notified();
            let received = self.received();
            if received.len() >= count {
                return received;
            }
            assert!(
                tokio::time::timeout_at(deadline, arrived).await.is_ok(),
                "{} of {count} webhooks arrived",
                received.len()
            );
        }
    }
}

async fn receive(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    shared
        .received
        .lock()
        .unwrap()
        .push(Received { headers, body });
    shared.arrived.notify_waiters();
    let reply = shared.script.lock().unwrap().pop_front();
    match reply.unwrap_or(Reply::Status(200)) {
        Reply::Status(status) => StatusCode::from_u16(status).unwrap().into_response(),
        Reply::Hang => std::future::pending().await,
        Reply::Redirect(to) => (StatusCode::FOUND, [(header::LOCATION, to)]).into_response(),
        Reply::EndlessBody(sent) => {
            let first = futures::stream::once(async move {
                Ok::<_, std::convert::Infallible>(Bytes::from(vec![b'x'; sent]))
            });
            let body = futures::StreamExt::chain(first, futures::stream::pending());
            axum::body::Body::from_stream(body).into_response()
        }
    }
}
