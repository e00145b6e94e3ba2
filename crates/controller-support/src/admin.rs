//! The admin server: `/healthz` (the process serves), `/readyz` (the binary's own
//! readiness: caches synced, started up; never leadership, or a standby would block
//! every rolling update) and `/metrics` (a prometheus-client registry).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::flags::BindAddress;

#[derive(Clone)]
pub struct Admin {
    pub registry: Arc<Mutex<Registry>>,
    /// Set by the binary once it can do its job; cleared when shutdown begins so traffic
    /// drains away first.
    pub ready: Arc<AtomicBool>,
}

/// The admin endpoints, as a router tests can call without a socket.
pub fn router(admin: Admin) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(admin)
}

/// The OpenMetrics text of a registry.
pub fn encode(registry: &Mutex<Registry>) -> String {
    let mut out = String::new();
    // a panic elsewhere while registering must not take /metrics down
    let registry = registry.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    // writing into a String cannot fail
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

async fn metrics(State(admin): State<Admin>) -> impl IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        encode(&admin.registry),
    )
}

async fn readyz(State(admin): State<Admin>) -> impl IntoResponse {
    if admin.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

/// Binds every distinct address once (`--bind-address` and `--metrics-bind-address` may
/// be the same), before anything else starts, so a taken port fails start-up plainly.
pub async fn bind(addresses: &[BindAddress]) -> Result<Vec<TcpListener>, crate::Error> {
    let mut distinct: Vec<BindAddress> = Vec::new();
    for address in addresses {
        if !distinct.contains(address) {
            distinct.push(*address);
        }
    }
    let mut listeners = Vec::new();
    for address in distinct {
        listeners.push(bind_one(address).await?);
    }
    Ok(listeners)
}

async fn bind_one(address: BindAddress) -> Result<TcpListener, crate::Error> {
    let mut last_error = None;
    for candidate in address.candidates() {
        match TcpListener::bind(candidate).await {
            Ok(listener) => return Ok(listener),
            Err(error) => last_error = Some(error),
        }
    }
    let source = last_error.unwrap_or_else(|| std::io::Error::other("no address to bind"));
    Err(crate::Error::Bind { address, source })
}

/// Serves the router on each listener until `stop` resolves.
pub fn serve(
    admin: Admin,
    listeners: Vec<TcpListener>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Vec<(SocketAddr, tokio::task::JoinHandle<()>)> {
    listeners
        .into_iter()
        .map(|listener| {
            let address = listener.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
            let mut stop = stop.clone();
            let app = router(admin.clone());
            let server = tokio::spawn(async move {
                let served = axum::serve(listener, app).with_graceful_shutdown(async move {
                    let _ = stop.wait_for(|stop| *stop).await;
                });
                if let Err(error) = served.await {
                    tracing::error!(%error, %address, "admin server failed");
                }
            });
            (address, server)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    async fn get(admin: &Admin, path: &str) -> (u16, String) {
        let request = axum::http::Request::get(path).body(axum::body::Body::empty()).unwrap();
        let response = router(admin.clone()).oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn readyz_follows_the_binarys_readiness_only() {
        let admin = Admin { registry: Arc::default(), ready: Arc::default() };
        assert_eq!(get(&admin, "/healthz").await, (200, "ok".into()));
        assert_eq!(get(&admin, "/readyz").await, (503, "not ready".into()));
        admin.ready.store(true, Ordering::SeqCst);
        assert_eq!(get(&admin, "/readyz").await, (200, "ok".into()));
    }

    #[tokio::test]
    async fn metrics_are_the_registrys_text() {
        let mut registry = Registry::with_prefix("test");
        let gauge = prometheus_client::metrics::gauge::Gauge::<i64>::default();
        gauge.set(3);
        registry.register("things", "Things", gauge);
        let admin = Admin { registry: Arc::new(Mutex::new(registry)), ready: Arc::default() };
        let (status, body) = get(&admin, "/metrics").await;
        assert_eq!(status, 200);
        assert!(body.lines().any(|line| line == "test_things 3"), "{body}");
    }

    #[tokio::test]
    async fn the_same_address_twice_is_bound_once() {
        let address = BindAddress::Socket("127.0.0.1:0".parse().unwrap());
        // port 0 twice would be two listeners if compared after binding
        assert_eq!(bind(&[address, address]).await.unwrap().len(), 1);
        let all = BindAddress::AllInterfaces { port: 0 };
        assert_eq!(bind(&[all, address]).await.unwrap().len(), 2);
    }
}
