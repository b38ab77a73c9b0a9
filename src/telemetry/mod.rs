//! Logging and metrics: the subscriber, the access log that writes one line per request with its
//! idempotency outcome and attempt as fields (e.g. `201`, `201 replayed`, `422`), and the
//! Prometheus metrics in [`metrics`].

pub mod metrics;

use std::{io::IsTerminal, time::Duration};

use axum::{
    extract::{MatchedPath, Request},
    response::Response,
};
use tower_http::{
    classify::{ServerErrorsAsFailures, SharedClassifier},
    trace::{MakeSpan, OnResponse, TraceLayer},
};
use tracing::Span;
use tracing_subscriber::{EnvFilter, fmt, layer::SubscriberExt, util::SubscriberInitExt};

use crate::{
    config::LogFormat,
    error::{ApiError, RenderedError},
    idempotency::{IdempotencyOutcome, OutcomeKind},
    tenants::RefusedByLimits,
};

/// Keeps the log writer thread alive; dropping it flushes the lines still queued.
#[must_use = "logs are flushed when the guard is dropped"]
pub struct LogGuard(#[allow(dead_code)] tracing_appender::non_blocking::WorkerGuard);

/// Installs the subscriber. Lines are written by a dedicated thread, so a slow stdout (a pipe to
/// a log collector) never stalls request handling; none are dropped. Returns `None` if a
/// subscriber was already installed (tests start many apps in one process).
pub fn init(format: LogFormat) -> Option<LogGuard> {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,tower_http=warn"));
    let ansi = std::io::stdout().is_terminal();
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(false)
        // The thread drains every queued line, then flushes: under load, one write for many lines.
        .finish(std::io::BufWriter::new(std::io::stdout()));
    let registry = tracing_subscriber::registry().with(filter);
    let installed = match format {
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(true)
                    .with_writer(writer),
            )
            .try_init(),
        LogFormat::Pretty => registry
            .with(fmt::layer().compact().with_ansi(ansi).with_writer(writer))
            .try_init(),
    };
    installed.ok().map(|()| LogGuard(guard))
}

pub type AccessLogLayer = TraceLayer<
    SharedClassifier<ServerErrorsAsFailures>,
    RequestSpan,
    (),
    AccessLogLine,
    (),
    (),
    (),
>;

/// One span per request carrying its id, so every line logged inside it names the request.
pub fn access_log() -> AccessLogLayer {
    TraceLayer::new_for_http()
        .make_span_with(RequestSpan)
        .on_request(())
        .on_response(AccessLogLine)
        .on_body_chunk(())
        .on_eos(())
        .on_failure(())
}

#[derive(Clone, Copy)]
pub struct RequestSpan;

impl<B> MakeSpan<B> for RequestSpan {
    fn make_span(&mut self, request: &Request<B>) -> Span {
        let request_id = request
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        // The matched route, never the raw path: ids in paths would make every line unique.
        let route = request.extensions().get::<MatchedPath>().map_or_else(
            || request.uri().path().to_owned(),
            |p| p.as_str().to_owned(),
        );
        tracing::info_span!("request", method = %request.method(), route, request_id)
    }
}

#[derive(Clone, Copy)]
pub struct AccessLogLine;

impl<B> OnResponse<B> for AccessLogLine {
    fn on_response(self, response: &Response<B>, latency: Duration, _span: &Span) {
        // Summarized by the limiter instead: a runaway loop must not flood the log.
        if response.extensions().get::<RefusedByLimits>().is_some() {
            return;
        }
        if let Some(RenderedError(error)) = response.extensions().get::<RenderedError>() {
            log_cause(error);
        }
        let status = response.status().as_u16();
        let outcome = response.extensions().get::<IdempotencyOutcome>();
        let kind = outcome.map(|o| o.kind);
        let idempotency = kind.map(OutcomeKind::as_str).unwrap_or("none");
        let attempt = outcome.and_then(|o| o.attempt);
        // Hundredths of a millisecond: more digits would be noise, not precision.
        let latency_ms = (latency.as_secs_f64() * 100_000.0).round() / 100.0;
        if kind == Some(OutcomeKind::Replay) {
            tracing::info!(
                status,
                idempotency,
                attempt,
                latency_ms,
                "{status} replayed"
            );
        } else {
            tracing::info!(status, idempotency, attempt, latency_ms, "{status}");
        }
    }
}

/// Logs what an error response does not tell its client: the cause of a failure on our side.
fn log_cause(error: &ApiError) {
    match error {
        ApiError::Internal(cause) => tracing::error!(error = ?cause, "internal error"),
        ApiError::Database(cause) => tracing::error!(error = %cause, "database error"),
        ApiError::CommitOutcomeUnknown { cause, .. } => tracing::error!(
            error = %cause,
            "the connection was lost after the commit was sent; the outcome is unknown"
        ),
        _ => {}
    }
}
