//! `/metrics` (a prometheus-client registry), `/healthz`, `/readyz`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

#[derive(Clone)]
pub struct Probes {
    pub registry: Arc<Mutex<Registry>>,
    /// Turned true by the binary once it can do its job (e.g. caches synced).
    pub ready: Arc<AtomicBool>,
}

impl Probes {
    pub fn new(registry: Arc<Mutex<Registry>>) -> Self {
        Self { registry, ready: Arc::default() }
    }
}

pub fn router(probes: Probes) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(probes)
}

/// The OpenMetrics text of a registry.
pub fn encode(registry: &Mutex<Registry>) -> String {
    let mut out = String::new();
    if let Ok(registry) = registry.lock() {
        // writing into a String cannot fail
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    }
    out
}

async fn metrics(State(probes): State<Probes>) -> impl IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        encode(&probes.registry),
    )
}

async fn readyz(State(probes): State<Probes>) -> impl IntoResponse {
    if probes.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

/// Serves the probes on every distinct address until `shutdown` turns true.
pub async fn serve(
    probes: Probes,
    addresses: &[SocketAddr],
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let mut servers = Vec::new();
    let mut bound: Vec<SocketAddr> = Vec::new();
    for addr in addresses {
        if bound.contains(addr) {
            continue;
        }
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| anyhow::anyhow!("binding {addr}: {e}"))?;
        bound.push(*addr);
        let mut stop = shutdown.clone();
        let app = router(probes.clone());
        servers.push(tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stop.changed().await;
                })
                .await;
        }));
    }
    Ok(servers)
}
