//! Admin HTTP: `/healthz`, `/readyz` and `/metrics` (Prometheus text format).
//!
//! `/healthz` answers 200 while the process serves at all; `/readyz` answers 200 only while
//! the daemon accepts data (not during start-up or shutdown), so a load balancer can drain it.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::metrics::Metrics;

/// Content type of the exposition `prometheus-client` writes.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The admin routes.
pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(metrics)
}

async fn readyz(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    if m.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

async fn metrics_text(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, OPENMETRICS)], m.render())
}
