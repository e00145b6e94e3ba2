//! `/metrics`, `/healthz`, `/readyz`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;

#[derive(Clone)]
pub struct Probes {
    pub metrics: Arc<Metrics>,
    /// Caches synced.
    pub ready: Arc<AtomicBool>,
}

pub fn router(probes: Probes) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(probes)
}

async fn metrics(State(probes): State<Probes>) -> impl IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        probes.metrics.encode(),
    )
}

async fn readyz(State(probes): State<Probes>) -> impl IntoResponse {
    if probes.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
    }
}
