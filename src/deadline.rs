//! The request deadline: `REQUEST_TIMEOUT_SECONDS` bounds the whole request (authentication,
//! waiting for a connection, the claim, reads, the handler and the commit), so no request waits on
//! a dead network longer than that (`docs/design.md`, "Deadlines").

use std::time::Duration;

use axum::{
    extract::{Request, State},
    middleware::Next,
    response::{IntoResponse, Response},
};
use tokio::time::Instant;

use crate::error::ApiError;

/// When the request must have been answered. Work that outlives its request (a claimed execution
/// runs as a task of its own) stops at this instant too.
#[derive(Debug, Clone, Copy)]
pub struct Deadline(pub Instant);

impl Deadline {
    /// The request's deadline; a request that came in without [`enforce`] (a test's router) gets
    /// `timeout` from now.
    pub fn of(request: &Request, timeout: Duration) -> Instant {
        request
            .extensions()
            .get::<Deadline>()
            .map_or_else(|| Instant::now() + timeout, |d| d.0)
    }
}

/// How much later than the deadline the answer is forced, so that work which stops at the deadline
/// itself gets to say how it ended (rolled back, unknown) before a generic timeout does.
const ANSWER_MARGIN: Duration = Duration::from_millis(250);

/// Puts a [`Deadline`] on the request and answers 503 if nothing else has by then.
pub async fn enforce(
    State(timeout): State<Duration>,
    mut request: Request,
    next: Next,
) -> Response {
    let deadline = Instant::now() + timeout;
    request.extensions_mut().insert(Deadline(deadline));
    let keyed = request.headers().contains_key("idempotency-key");
    match tokio::time::timeout_at(deadline + ANSWER_MARGIN, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::Timeout {
            seconds: timeout.as_secs(),
            keyed,
        }
        .into_response(),
    }
}
