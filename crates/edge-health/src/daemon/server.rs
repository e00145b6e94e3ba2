//! The daemon's own routes on `--bind-address` (next to the runtime's `/healthz`, `/readyz`
//! and `/metrics`): `POST /exchange` takes peers' sealed frames, `GET /verdicts` serves the
//! local view as core's [`LocalVerdicts`](edgegrid_core::unit::local_verdicts::LocalVerdicts).
//!
//! The listener is the node's address, since peers must reach `/exchange`; `/verdicts` is
//! for the node's own grid wrapper (over loopback) and is refused (403) to other hosts
//! unless `--verdicts-allowed-from` lists their network: a member reads the unit's view
//! through the vote it takes part in, never another node's conclusions.
//!
//! Exchange answers: `204` for accepted results (and answers, and requests this node
//! declines: not a node it checks, or already `--max-concurrent-probe-requests` probes
//! running for peers), `200` with a sealed answer frame for a probe request it ran (with
//! the target's liveness proof when it got one) and with a sealed proof for a peer's
//! challenge (this node's signature over the challenger's nonce), `400`
//! for a malformed frame, `401` for every other refusal (bad MAC, unknown sender,
//! misdirected, clock skew, replay), the reason in the body and in
//! `edge_health_messages_rejected_total{reason}`.
//!
//! SuperEdge's edge-health API on the same port ([`SUPEREDGE_PATHS`]: its daemons `PUT
//! /result` to the peers they check, its grid wrapper reads `/localinfo`) gets `410 Gone`
//! with a body saying this node runs edgegrid's daemon, counted in
//! `edge_health_superedge_requests_total{path}` and logged once, not per request: in a
//! unit being migrated SuperEdge's daemons send it every few seconds. Nothing they send is
//! read (see `docs/mixed-edge-health.md`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use controller_support::{Cidr, NodeLocal};
use edgegrid_core::unit::local_verdicts::VERDICTS_PATH;

use tokio::sync::Semaphore;

use super::clock::wall_clock;
use super::metrics::{PathLabel, ReasonLabel};
use super::paths::{EXCHANGE_PATH, SUPEREDGE_PATHS};
use super::round::{Transport, alive, check_peer, read_token};
use super::state::{Daemon, Received};
use crate::message::Rejection;

#[derive(Clone)]
struct Shared {
    daemon: Arc<Daemon>,
    /// Permits for the indirect probes run for peers.
    helping: Arc<Semaphore>,
    /// Whether a SuperEdge request was logged already (once per process, at info).
    superedge_logged: Arc<AtomicBool>,
    /// Challenges the targets of the indirect probes run for peers.
    transport: Transport,
}

/// The body of the 410 SuperEdge's requests get.
pub const SUPEREDGE_GONE: &str = "410 Gone: this node runs edgegrid's edge-health, not SuperEdge's: \
     SuperEdge's edge-health API is not served here and nothing sent to it is read. Its node unit is \
     being migrated: move all of the unit's nodes to one daemon (docs/mixed-edge-health.md)\n";

/// Who may read `GET /verdicts`: loopback, and the networks of `--verdicts-allowed-from`.
pub fn verdicts_readers(allowed_from: Vec<Cidr>) -> NodeLocal {
    NodeLocal::new("--verdicts-allowed-from", allowed_from)
}

/// `/exchange` for anyone (frames are authenticated), `/verdicts` for loopback clients
/// only (no `--verdicts-allowed-from`).
pub fn router(daemon: Arc<Daemon>) -> Router {
    router_with_verdicts_readers(daemon, &verdicts_readers(Vec::new()))
}

/// `/exchange` for anyone (frames are authenticated), `/verdicts` for `verdicts_readers`.
pub fn router_with_verdicts_readers(daemon: Arc<Daemon>, verdicts_readers: &NodeLocal) -> Router {
    let helping = Arc::new(Semaphore::new(daemon.settings().max_concurrent_probe_requests));
    let superedge_logged = Arc::new(AtomicBool::new(false));
    let mut router = Router::new()
        .route(EXCHANGE_PATH, post(exchange))
        .merge(verdicts_readers.guard(Router::new().route(VERDICTS_PATH, get(verdicts))));
    for path in SUPEREDGE_PATHS {
        router = router.route(path, any(move |state: State<Shared>| superedge(state, path)));
    }
    let transport = Transport::of(daemon.settings());
    router.with_state(Shared { daemon, helping, superedge_logged, transport })
}

/// A request for SuperEdge's edge-health API: `410 Gone`, counted; logged the first time.
async fn superedge(State(shared): State<Shared>, path: &'static str) -> Response {
    shared.daemon.metrics().superedge_requests.get_or_create(&PathLabel { path }).inc();
    if !shared.superedge_logged.swap(true, Ordering::Relaxed) {
        tracing::info!(
            path,
            "SuperEdge's edge-health calls this node (answered 410, counted in \
            edge_health_superedge_requests_total): a unit runs both daemons, move all of its nodes to one"
        );
    } else {
        tracing::debug!(path, "SuperEdge edge-health request answered 410");
    }
    (StatusCode::GONE, [(axum::http::header::CONTENT_TYPE, "text/plain; charset=utf-8")], SUPEREDGE_GONE)
        .into_response()
}

async fn verdicts(State(Shared { daemon, .. }): State<Shared>) -> Response {
    axum::Json(daemon.view()).into_response()
}

/// `200` with a sealed frame.
fn sealed(frame: Vec<u8>) -> Response {
    (StatusCode::OK, [(axum::http::header::CONTENT_TYPE, "application/json")], frame).into_response()
}

fn declined(daemon: &Daemon, reason: &'static str) -> Response {
    daemon.metrics().probe_requests_declined.get_or_create(&ReasonLabel { reason }).inc();
    StatusCode::NO_CONTENT.into_response()
}

async fn exchange(State(Shared { daemon, helping, transport, .. }): State<Shared>, frame: Bytes) -> Response {
    match daemon.receive(&frame, wall_clock()) {
        Received::Rejected(rejection) => {
            let status =
                if rejection == Rejection::Malformed { StatusCode::BAD_REQUEST } else { StatusCode::UNAUTHORIZED };
            tracing::debug!(reason = rejection.metric_label(), "message refused");
            (status, rejection.to_string()).into_response()
        }
        Received::Results | Received::Answer { .. } => StatusCode::NO_CONTENT.into_response(),
        Received::Declined => declined(&daemon, "not_checked"),
        Received::Challenged(proof) => sealed(proof),
        Received::Proof { .. } => StatusCode::NO_CONTENT.into_response(),
        Received::Help { requester, id, target, address, nonce } => {
            let Ok(_permit) = helping.try_acquire() else {
                tracing::debug!(%requester, target_node = %target, "probe request declined: busy");
                return declined(&daemon, "busy");
            };
            let token = read_token(&daemon);
            let checks = &daemon.settings().checks;
            // the requester believes "reachable" only with the target's proof over its nonce
            let helper = &daemon;
            let check =
                |token: Option<String>| async move { check_peer(checks, address.ip(), token.as_deref(), helper).await };
            let proof = alive(&daemon, &transport, &target, address, &requester, nonce, token.as_deref(), check).await;
            tracing::debug!(%requester, target_node = %target, reachable = proof.is_some(), "indirect probe run for a peer");
            sealed(daemon.seal_answer(&requester, id, &target, proof, wall_clock()))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use std::net::SocketAddr;

    use axum::body::Body;
    use axum::extract::ConnectInfo;
    use axum::http::Request;
    use clap::Parser;
    use edgegrid_core::unit::local_verdicts::LocalVerdicts;
    use tower::ServiceExt;

    use super::*;
    use crate::daemon::cli::Flags;
    use crate::daemon::test_support::{KEY, daemon, holding_port, member, signing_key};
    use crate::liveness::Nonce;
    use crate::message::{HmacKey, Payload, Signer};

    /// `request` as the runtime's server hands it over: from a client at `peer`.
    fn from(peer: &str, mut request: Request<Body>) -> Request<Body> {
        request.extensions_mut().insert(ConnectInfo(peer.parse::<SocketAddr>().expect("a socket address")));
        request
    }

    async fn read_verdicts(app: &Router, peer: &str) -> (StatusCode, String) {
        let request = from(peer, Request::get(VERDICTS_PATH).body(Body::empty()).expect("request"));
        let response = app.clone().oneshot(request).await.expect("answered");
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("body");
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    fn unit() -> Arc<Daemon> {
        let nodes = [member("edge-1", Some("127.0.0.1:51005")), member("edge-2", Some("10.0.0.2:51005"))];
        daemon("edge-1", "kind=tcp,port=1,timeout=100ms", &[], &nodes)
    }

    /// By default only the node itself reads its view: a peer's address gets 403, while
    /// `/exchange` still takes its frames (a garbage frame is judged, 400, not refused).
    #[tokio::test]
    async fn the_view_is_served_to_loopback_only_and_the_exchange_to_anyone() {
        let app = router(unit());
        let (status, body) = read_verdicts(&app, "10.0.0.2:40000").await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert!(body.contains("--verdicts-allowed-from"), "{body}");
        for local in ["127.0.0.1:40000", "[::1]:40000", "[::ffff:127.0.0.1]:40000"] {
            let (status, body) = read_verdicts(&app, local).await;
            assert_eq!(status, StatusCode::OK, "{local}: {body}");
            let view: LocalVerdicts = serde_json::from_str(&body).expect("the view");
            assert_eq!(view.node, "edge-1");
        }
        let frame = from("10.0.0.2:40000", Request::post(EXCHANGE_PATH).body(Body::from("garbage")).expect("request"));
        assert_eq!(app.oneshot(frame).await.expect("answered").status(), StatusCode::BAD_REQUEST);
    }

    /// SuperEdge's edge-health API, as its daemons and grid wrapper call it, from anyone:
    /// `410 Gone` saying why, counted by path; nothing it sends is read (the view is
    /// unchanged).
    #[tokio::test]
    async fn superedge_requests_are_gone_and_counted() {
        let daemon = unit();
        let app = router(daemon.clone());
        let view_before = serde_json::to_value(daemon.view()).unwrap();
        // SuperEdge's `data.CommunicateData`, as `CommunicateEdge.Client` sends it
        let result =
            r#"{"sourceIP":"10.0.0.2","resultDetail":{"10.0.0.1":{"normal":false,"time":1700000000}},"hmac":"x"}"#;
        let requests = [
            (Request::put("/result").body(Body::from(result)).unwrap(), "/result"),
            (Request::post("/result").body(Body::from(result)).unwrap(), "/result"),
            (Request::get("/localinfo").body(Body::empty()).unwrap(), "/localinfo"),
            (Request::post("/probe").body(Body::from(r#"{"targets":[]}"#)).unwrap(), "/probe"),
        ];
        for (request, path) in requests {
            let response = app.clone().oneshot(from("10.0.0.2:40000", request)).await.unwrap();
            assert_eq!(response.status(), StatusCode::GONE, "{path}");
            let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
            assert_eq!(body, SUPEREDGE_GONE.as_bytes(), "{path}");
        }
        let count = |path| daemon.metrics().superedge_requests.get_or_create(&PathLabel { path }).get();
        assert_eq!((count("/result"), count("/localinfo"), count("/probe")), (2, 1, 1));
        assert_eq!(serde_json::to_value(daemon.view()).unwrap(), view_before, "nothing read");
        assert_eq!(app.oneshot(Request::get("/other").body(Body::empty()).unwrap()).await.unwrap().status(), 404);
    }

    /// `--verdicts-allowed-from` opens the view to the networks it lists, and only those.
    #[tokio::test]
    async fn verdicts_allowed_from_opens_the_view_to_the_networks_it_lists() {
        let flags = Flags::try_parse_from([
            "edge-health",
            "--hmac-key-file",
            "/k",
            "--signing-key-file",
            "/s",
            "--verdicts-allowed-from",
            "10.0.0.0/24,fd00::/8",
        ])
        .expect("flags");
        let app = router_with_verdicts_readers(unit(), &verdicts_readers(flags.verdicts_allowed_from));
        for (peer, status) in [
            ("10.0.0.2:40000", StatusCode::OK),
            ("[fd00::7]:40000", StatusCode::OK),
            ("127.0.0.1:40000", StatusCode::OK),
            ("10.0.1.2:40000", StatusCode::FORBIDDEN),
            ("[fe80::1]:40000", StatusCode::FORBIDDEN),
        ] {
            assert_eq!(read_verdicts(&app, peer).await.0, status, "{peer}");
        }
        let wrong = Flags::try_parse_from([
            "edge-health",
            "--hmac-key-file",
            "/k",
            "--signing-key-file",
            "/s",
            "--verdicts-allowed-from",
            "10.0.0.1",
        ]);
        assert!(wrong.expect_err("not a CIDR").to_string().contains("is not a CIDR"));
    }

    /// A peer asks twice at once while this node may run one probe for peers: one request
    /// is run (its check hangs until its timeout), the other declined at once as busy.
    #[tokio::test]
    async fn probe_requests_beyond_the_limit_are_declined_not_queued() {
        // the target's "kubelet": accepts and never answers
        let (port, _held) = holding_port().await;
        let check = format!("kind=http,port={port},path=/healthz,timeout=300ms");
        let target_address = format!("127.0.0.1:{port}");
        let nodes = [
            member("helper", Some("127.0.0.1:51005")),
            member("asker", Some("127.0.0.2:51005")),
            member("target", Some(&target_address)),
        ];
        let daemon = daemon("helper", &check, &["--max-concurrent-probe-requests", "1"], &nodes);
        let now = wall_clock();
        let mut asker = Signer::new(HmacKey::new(KEY).unwrap(), "asker", now);
        let mut request = |id| {
            let payload = Payload::ProbeRequest { id, target: "target".into(), nonce: Nonce([id as u8; 16]) };
            let frame = asker.seal(&signing_key("asker"), wall_clock(), Some("helper".into()), payload);
            Request::post(EXCHANGE_PATH).body(Body::from(frame)).unwrap()
        };
        let app = router(daemon.clone());
        let started = tokio::time::Instant::now();
        let (first, second) = tokio::join!(app.clone().oneshot(request(1)), async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            app.clone().oneshot(request(2)).await
        });
        let (first, second) = (first.unwrap(), second.unwrap());
        assert_eq!(first.status(), StatusCode::OK, "the first request is run and answered");
        assert_eq!(second.status(), StatusCode::NO_CONTENT, "the second is declined");
        assert!(started.elapsed() >= Duration::from_millis(300), "the first waited for its check");
        let busy = daemon.metrics().probe_requests_declined.get_or_create(&ReasonLabel { reason: "busy" }).get();
        assert_eq!(busy, 1);
        // the permit is back: the next request is run again
        let third = app.oneshot(request(3)).await.unwrap();
        assert_eq!(third.status(), StatusCode::OK);
    }
}
