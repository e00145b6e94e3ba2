//! The admin server: `/healthz` (the process serves), `/readyz` (the binary's own
//! readiness: caches synced, started up; never leadership, or a standby would block
//! every rolling update) and `/metrics` (a prometheus-client registry). A binary may add
//! its own routes on the `--bind-address` listener ([`with_routes`]); the admin paths
//! stay the admin server's.

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
    /// What `/readyz` answers.
    pub readiness: Readiness,
}

/// The binary's readiness as `/readyz` answers it: `200 ok` once every [`ReadinessGate`] is open,
/// else `503 not ready: <what the closed gates wait for>` (joined by `; `). A note set with
/// [`set_note`](Self::set_note) follows the word while every gate is open (e.g. `ok:
/// serving from cache, apiserver unreachable`). Once shutdown began the answer is `not
/// ready: shutting down`, whatever the gates say. A handle: clones share the state.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    state: Arc<Mutex<ReadinessState>>,
}

#[derive(Debug, Default)]
struct ReadinessState {
    /// What each gate waits for, and whether it is open.
    gates: Vec<(String, bool)>,
    note: Option<String>,
    shutting_down: bool,
}

/// One condition readiness waits for, named by what it waits for (`the node watch has not
/// listed yet`). Closed when made; clones share it.
#[derive(Clone, Debug)]
pub struct ReadinessGate {
    readiness: Readiness,
    index: usize,
}

impl Readiness {
    /// No gate (ready), no note.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ReadinessState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A new gate, closed: readiness waits for `waiting` until it is opened.
    pub fn gate(&self, waiting: impl Into<String>) -> ReadinessGate {
        let mut state = self.state();
        state.gates.push((waiting.into(), false));
        ReadinessGate { readiness: self.clone(), index: state.gates.len() - 1 }
    }

    pub fn is_ready(&self) -> bool {
        let state = self.state();
        !state.shutting_down && state.gates.iter().all(|(_, open)| *open)
    }

    /// Sets (`Some`) or clears (`None`) the note `/readyz` adds to `ok`.
    pub fn set_note(&self, note: Option<String>) {
        self.state().note = note;
    }

    /// Not ready from now on: the process is shutting down.
    pub fn shutting_down(&self) {
        self.state().shutting_down = true;
    }

    /// The `/readyz` status and body.
    pub fn answer(&self) -> (StatusCode, String) {
        let state = self.state();
        if state.shutting_down {
            return (StatusCode::SERVICE_UNAVAILABLE, "not ready: shutting down".into());
        }
        let waiting: Vec<&str> = state.gates.iter().filter(|(_, open)| !*open).map(|(w, _)| w.as_str()).collect();
        match (waiting.is_empty(), &state.note) {
            (false, _) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {}", waiting.join("; "))),
            (true, Some(note)) => (StatusCode::OK, format!("ok: {note}")),
            (true, None) => (StatusCode::OK, "ok".into()),
        }
    }
}

impl ReadinessGate {
    pub fn open(&self) {
        self.set(true);
    }

    pub fn close(&self) {
        self.set(false);
    }

    pub fn set(&self, open: bool) {
        self.readiness.state().gates[self.index].1 = open;
    }

    /// Closes the gate, saying it now waits for `waiting`.
    pub fn close_waiting_for(&self, waiting: impl Into<String>) {
        self.readiness.state().gates[self.index] = (waiting.into(), false);
    }

    pub fn is_open(&self) -> bool {
        self.readiness.state().gates[self.index].1
    }
}

/// The admin endpoints, as a router tests can call without a socket.
pub fn router(admin: Admin) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(admin)
}

/// The admin endpoints plus the binary's own `routes`. The admin paths take precedence
/// for every method: `routes` is the admin router's fallback service, so it only sees
/// requests whose path is none of `/healthz`, `/readyz`, `/metrics` (a `POST /healthz`
/// is the admin router's 405). Never panics on overlaps, unlike [`Router::merge`]: a
/// route of `routes` on an admin path is simply never reached, and a fallback of
/// `routes` answers every other path.
pub fn with_routes(admin: Admin, routes: Router) -> Router {
    router(admin).fallback_service(routes)
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
    admin.readiness.answer()
}

/// Binds every distinct address once (`--bind-address` and `--metrics-bind-address` may
/// be the same), before anything else starts, so a taken port fails start-up plainly.
/// One listener per distinct address, in the order the addresses are first given.
pub async fn bind(addresses: &[BindAddress]) -> Result<Vec<(BindAddress, TcpListener)>, crate::Error> {
    let mut distinct: Vec<BindAddress> = Vec::new();
    for address in addresses {
        if !distinct.contains(address) {
            distinct.push(*address);
        }
    }
    let mut listeners = Vec::new();
    for address in distinct {
        listeners.push((address, bind_one(address).await?));
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

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    fn admin() -> Admin {
        Admin { registry: Arc::default(), readiness: Readiness::new() }
    }

    async fn call(app: Router, method: &str, path: &str) -> (u16, String) {
        let request = axum::http::Request::builder().method(method).uri(path).body(axum::body::Body::empty()).unwrap();
        let response = app.oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    async fn get(admin: &Admin, path: &str) -> (u16, String) {
        call(router(admin.clone()), "GET", path).await
    }

    #[tokio::test]
    async fn readyz_waits_for_every_gate_and_says_for_what() {
        let admin = admin();
        assert_eq!(get(&admin, "/readyz").await, (200, "ok".into()), "no gate: ready");
        let nodes = admin.readiness.gate("the node watch has not listed yet");
        // a clone, as a binary's task holds one: the same state
        let certificate = admin.readiness.clone().gate("no certificate is served yet");
        assert_eq!(
            get(&admin, "/readyz").await,
            (503, "not ready: the node watch has not listed yet; no certificate is served yet".into())
        );
        nodes.clone().open();
        assert!(nodes.is_open() && !certificate.is_open());
        assert_eq!(get(&admin, "/readyz").await, (503, "not ready: no certificate is served yet".into()));
        admin.readiness.set_note(Some("serving from cache, apiserver unreachable".into()));
        assert_eq!(
            get(&admin, "/readyz").await,
            (503, "not ready: no certificate is served yet".into()),
            "gates first"
        );
        certificate.open();
        assert_eq!(get(&admin, "/readyz").await, (200, "ok: serving from cache, apiserver unreachable".into()));
        admin.readiness.set_note(None);
        assert_eq!(get(&admin, "/readyz").await, (200, "ok".into()));
        nodes.close();
        assert_eq!(get(&admin, "/readyz").await, (503, "not ready: the node watch has not listed yet".into()));
        nodes.close_waiting_for("the node watch failed");
        assert_eq!(get(&admin, "/readyz").await, (503, "not ready: the node watch failed".into()));
        assert_eq!(get(&admin, "/healthz").await, (200, "ok".into()), "readiness is /readyz's only");
        nodes.open();
        admin.readiness.shutting_down();
        assert!(!admin.readiness.is_ready());
        assert_eq!(get(&admin, "/readyz").await, (503, "not ready: shutting down".into()));
    }

    #[tokio::test]
    async fn metrics_are_the_registrys_text() {
        let mut registry = Registry::with_prefix("test");
        let gauge = prometheus_client::metrics::gauge::Gauge::<i64>::default();
        gauge.set(3);
        registry.register("things", "Things", gauge);
        let admin = Admin { registry: Arc::new(Mutex::new(registry)), readiness: Readiness::new() };
        let (status, body) = get(&admin, "/metrics").await;
        assert_eq!(status, 200);
        assert!(body.lines().any(|line| line == "test_things 3"), "{body}");
    }

    #[tokio::test]
    async fn admin_paths_win_over_a_binarys_routes_and_its_fallback_gets_the_rest() {
        let admin = admin();
        // a proxy's router: its own paths, a fallback for every other one, and (by
        // mistake) the admin paths, which must neither panic nor shadow the admin's
        let routes = Router::new()
            .route("/api/v1/endpoints", axum::routing::get(|| async { "endpoints" }))
            .route("/healthz", axum::routing::get(|| async { "shadowed" }))
            .route("/metrics", axum::routing::get(|| async { "shadowed" }).post(|| async { "shadowed" }))
            .route("/readyz", axum::routing::get(|| async { "shadowed" }))
            .fallback(|uri: axum::http::Uri| async move { format!("upstream {uri}") });
        let app = with_routes(admin.clone(), routes);
        let call = |method, path| call(app.clone(), method, path);

        assert_eq!(call("GET", "/healthz").await, (200, "ok".into()));
        assert_eq!(call("GET", "/readyz").await, (200, "ok".into()));
        let (status, exposition) = call("GET", "/metrics").await;
        assert_eq!(status, 200);
        assert!(exposition.ends_with("# EOF\n"), "{exposition}");
        // for every method: the admin's 405, not the binary's handler
        assert_eq!(call("POST", "/metrics").await.0, 405);

        assert_eq!(call("GET", "/api/v1/endpoints").await, (200, "endpoints".into()));
        assert_eq!(call("GET", "/anything").await, (200, "upstream /anything".into()));
        assert_eq!(call("POST", "/api/v1/pods?watch=1").await, (200, "upstream /api/v1/pods?watch=1".into()));
        assert_eq!(call("GET", "/healthz/deeper").await, (200, "upstream /healthz/deeper".into()));
    }

    #[tokio::test]
    async fn without_a_fallback_the_binarys_router_answers_unknown_paths_404() {
        let routes = Router::new().route("/api", axum::routing::get(|| async { "api" }));
        let app = with_routes(admin(), routes);
        assert_eq!(call(app.clone(), "GET", "/api").await, (200, "api".into()));
        assert_eq!(call(app.clone(), "GET", "/healthz").await, (200, "ok".into()));
        assert_eq!(call(app, "GET", "/nothing").await.0, 404);
    }

    #[tokio::test]
    async fn the_same_address_twice_is_bound_once() {
        let address = BindAddress::Socket("127.0.0.1:0".parse().unwrap());
        // port 0 twice would be two listeners if compared after binding
        assert_eq!(bind(&[address, address]).await.unwrap().len(), 1);
        let all = BindAddress::AllInterfaces { port: 0 };
        assert_eq!(bind(&[all, address]).await.unwrap().len(), 2);
        let other = BindAddress::Socket("127.0.0.2:0".parse().unwrap());
        let both = bind(&[address, other, address]).await.unwrap();
        let bound: Vec<_> =
            both.iter().map(|(given, listener)| (*given, listener.local_addr().unwrap().ip())).collect();
        assert_eq!(bound, [(address, [127, 0, 0, 1].into()), (other, [127, 0, 0, 2].into())], "in the order given");
    }
}
