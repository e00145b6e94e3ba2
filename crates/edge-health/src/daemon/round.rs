//! One period's work with the peers: challenge the assigned peers for their liveness proof
//! and run the checks on them, concurrently, and ask helpers before accusing one either
//! failed on (see [`crate::liveness`]: a peer is reachable only with its own signature over
//! the checker's fresh nonce; the checks can only make it look worse). The relay rounds that pass
//! ballots on to a few peers at a time (see [`crate::relay`]), and the checks a helper
//! runs for a peer that asked.
//!
//! Messages go as `POST /exchange` with the sealed frame as the body. A probe request is
//! answered in the reply (a sealed answer frame), so a helper needs no way back to the
//! requester; results get `204 No Content`.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use edgegrid_core::keys::EDGE_HEALTH_ADDRESS_ANNOTATION;
use edgegrid_prober::{Outcome, run_probe_from};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::cli::Settings;
use super::clock::wall_clock;
use super::metrics::ProbeLabels;
use super::paths::EXCHANGE_PATH;
use super::state::{AfterDirect, Daemon, OutgoingRequest, RelayFrame};
use crate::config::{CheckConfig, CheckKind};
use crate::liveness::{LivenessProof, Nonce};
use crate::message::MAX_FRAME_BYTES;
use crate::time::Period;

/// Sends frames to peers.
#[derive(Clone)]
pub struct Transport {
    client: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
}

/// Why a frame did not get through.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("no answer: {0}")]
    Unreachable(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("the peer answered {0}")]
    Status(StatusCode),
}

impl SendError {
    /// A refusal is final (the same frame would be refused again, as a replay at best).
    fn is_refusal(&self) -> bool {
        matches!(self, Self::Status(status) if status.is_client_error())
    }
}

impl Transport {
    /// `timeout`: per attempt.
    pub fn new(timeout: Duration) -> Self {
        Self::bound(timeout, None)
    }

    /// The daemon's own: its timeout, its connections from its source address.
    pub fn of(settings: &Settings) -> Self {
        Self::bound(settings.message_timeout, settings.source_ip)
    }

    /// [`Self::new`] with connections made from `source` when given.
    pub fn bound(timeout: Duration, source: Option<IpAddr>) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_local_address(source);
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(timeout));
        Self { client: Client::builder(TokioExecutor::new()).build(connector), timeout }
    }

    /// One `POST /exchange`; the reply's body on 2xx.
    pub async fn post(&self, address: SocketAddr, frame: Bytes) -> Result<Bytes, SendError> {
        self.post_within(address, frame, self.timeout).await
    }

    /// [`Self::post`] waiting up to `timeout` for the reply (the connection is still given
    /// up after the transport's own timeout, so a lost SYN is retried soon). For a probe
    /// request, whose reply comes only once the helper has run its checks.
    pub async fn post_within(&self, address: SocketAddr, frame: Bytes, timeout: Duration) -> Result<Bytes, SendError> {
        let exchange = async {
            let request = Request::builder()
                .method(Method::POST)
                .uri(format!("http://{address}{EXCHANGE_PATH}"))
                .header(header::CONTENT_TYPE, "application/json")
                .body(Full::new(frame))
                .map_err(|e| SendError::Unreachable(e.to_string()))?;
            let response = self.client.request(request).await.map_err(|e| SendError::Unreachable(e.to_string()))?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_FRAME_BYTES)
                .collect()
                .await
                .map_err(|e| SendError::Unreachable(e.to_string()))?
                .to_bytes();
            if status.is_success() { Ok(body) } else { Err(SendError::Status(status)) }
        };
        tokio::time::timeout(timeout, exchange).await.unwrap_or(Err(SendError::Timeout(timeout)))
    }
}

/// Runs every check on the peer at `host` (concurrently, each with its retries); whether
/// its score reaches the line. `token`: the kubelet-check token as read now
/// ([`read_token`]), sent to the kubelet only. For a peer's probe request, which names the
/// address: a verified kubelet certificate may name any Node that publishes `host` (its
/// SAN must still be `host`, which the CA signs for that node's own addresses only).
pub async fn check_peer(checks: &CheckConfig, host: IpAddr, token: Option<&str>, daemon: &Daemon) -> bool {
    let verifies_names =
        checks.checks().iter().any(|c| matches!(c.kind, CheckKind::KubeletHealthz { ca_bundle: Some(_), .. }));
    let names = if verifies_names { nodes_publishing(daemon, host) } else { Vec::new() };
    check_node(checks, &names, host, token, daemon).await
}

/// [`check_peer`] for the Node(s) `node_names` at `host`.
pub async fn check_node(
    checks: &CheckConfig,
    node_names: &[String],
    host: IpAddr,
    token: Option<&str>,
    daemon: &Daemon,
) -> bool {
    let host = &host.to_string();
    let outcomes = futures::future::join_all(checks.checks().iter().map(|spec| {
        let target = spec.target(host, node_names, token);
        async move {
            let check = spec.kind.name();
            for _ in 0..spec.attempts() {
                let result = match run_probe_from(&target, spec.timeout, daemon.settings().source_ip).await {
                    Ok(report) if report.outcome == Outcome::Success => "success",
                    Ok(report) => {
                        tracing::debug!(check, host = %host, detail = %report.detail, "check failed");
                        "failure"
                    }
                    Err(error) => {
                        tracing::warn!(%error, check, "the check cannot run");
                        "error"
                    }
                };
                daemon.metrics().probes.get_or_create(&ProbeLabels { check, result }).inc();
                if result == "success" {
                    return Outcome::Success;
                }
            }
            Outcome::Failure
        }
    }))
    .await;
    checks.passes(&outcomes)
}

/// The Nodes whose published address is at `host`.
fn nodes_publishing(daemon: &Daemon, host: IpAddr) -> Vec<String> {
    let (_, cache) = daemon.peer_cache();
    cache
        .nodes
        .iter()
        .filter(|meta| {
            let address = meta.annotations.as_ref().and_then(|a| a.get(EDGE_HEALTH_ADDRESS_ANNOTATION));
            address.and_then(|a| a.parse::<SocketAddr>().ok()).is_some_and(|a| a.ip() == host)
        })
        .filter_map(|meta| meta.name.clone())
        .collect()
}

/// The token kubelet checks send now, if any: never the daemon's own (see
/// [`super::kubelet_credential`]).
pub fn read_token(daemon: &Daemon) -> Option<String> {
    daemon.settings().kubelet_credential.current(wall_clock())
}

/// One period's probes (their ballots go out with the next relay rounds).
pub async fn run(daemon: Arc<Daemon>, transport: Transport, period: Period) {
    let plan = daemon.plan(period);
    let token = read_token(&daemon);
    let checks = &daemon.settings().checks;
    let local = daemon.settings().node_name.as_str();
    let probes = plan.into_iter().map(|probe| {
        let (daemon, transport, token) = (&daemon, &transport, token.as_deref());
        async move {
            let Some(address) = probe.address else {
                daemon.metrics().probes_skipped.inc();
                tracing::debug!(target_node = %probe.target, "not probed: no address published");
                return;
            };
            let Some(nonce) = Nonce::random() else {
                daemon.metrics().probes_skipped.inc();
                tracing::error!(target_node = %probe.target, "not probed: the system random number generator failed");
                return;
            };
            let names = std::slice::from_ref(&probe.target);
            let check = |token: Option<String>| async move {
                check_node(checks, names, address.ip(), token.as_deref(), daemon).await
            };
            let proof = alive(daemon, transport, &probe.target, address, local, nonce, token, check).await;
            let reachable = proof.is_some();
            if let AfterDirect::Ask(requests) =
                daemon.direct_result(&probe.target, period, reachable, nonce, wall_clock())
            {
                ask_helpers(daemon, transport, requests).await;
            }
        }
    });
    futures::future::join_all(probes).await;
}

/// Whether peer `target` at `address` is alive: its proof over `checker`'s `nonce`
/// ([`prove_alive`]) and the configured checks (`check`, given the token to send). Without a
/// token the two run side by side; with one (a kubelet check's), the checks run only once
/// the proof has verified, so the token goes to nobody at the peer's address who cannot sign
/// as the peer (a listener bound to a dead node's IP gets no credential; the probe then
/// takes the proof's time plus the checks'). The proof, when both hold.
#[allow(clippy::too_many_arguments, reason = "one probe's whole context; a struct would only rename it")]
pub async fn alive<F: std::future::Future<Output = bool>>(
    daemon: &Daemon,
    transport: &Transport,
    target: &str,
    address: SocketAddr,
    checker: &str,
    nonce: Nonce,
    token: Option<&str>,
    check: impl FnOnce(Option<String>) -> F,
) -> Option<LivenessProof> {
    let prove = prove_alive(daemon, transport, target, address, checker, nonce, token.is_some());
    match token {
        None => {
            let (proof, checks_pass) = tokio::join!(prove, check(None));
            proof.filter(|_| checks_pass)
        }
        Some(token) => {
            let proof = prove.await?;
            check(Some(token.to_string())).await.then_some(proof)
        }
    }
}

/// Challenges `target` at its exchange `address` for its proof over `checker`'s `nonce`
/// (`checker`: this node, or the peer it helps), each attempt freshly sealed. An attempt
/// that timed out is tried again while another fits in the proof's time: the checks' worst
/// case when they run alongside (on a lossy link the proof gets the time the checks get),
/// `--send-retries` more attempts when they wait for it (`before_checks`: a token to send,
/// see [`alive`]), so a probe fits the period the settings checked it against
/// ([`super::cli::Flags::settings`]). One that failed at once (nothing listens: connection
/// refused) is not. The proof, verified against the key `target` publishes. Whoever else
/// answers at the address (an impostor bound to a dead node's IP) cannot make one.
pub async fn prove_alive(
    daemon: &Daemon,
    transport: &Transport,
    target: &str,
    address: SocketAddr,
    checker: &str,
    nonce: Nonce,
    before_checks: bool,
) -> Option<LivenessProof> {
    let settings = daemon.settings();
    let until = tokio::time::Instant::now() + settings.proof_time(false);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let started = tokio::time::Instant::now();
        let frame = daemon.seal_challenge(target, checker, nonce, wall_clock());
        match transport.post(address, Bytes::from(frame)).await {
            Ok(reply) => {
                daemon.metrics().sent("challenge", "delivered");
                return daemon.take_proof(&reply, target, checker, &nonce, wall_clock()).ok();
            }
            Err(error) if error.is_refusal() => {
                daemon.metrics().sent("challenge", "refused");
                tracing::debug!(target_node = %target, %address, %error, "challenge refused");
                break;
            }
            Err(error) => {
                daemon.metrics().sent("challenge", "failed");
                tracing::debug!(target_node = %target, %address, %error, "challenge not answered");
                let timed_out = started.elapsed() >= settings.message_timeout / 2;
                let another = match before_checks {
                    true => attempt <= settings.protocol.send_retries,
                    false => tokio::time::Instant::now() + settings.message_timeout <= until,
                };
                if !timed_out || !another {
                    break;
                }
            }
        }
    }
    daemon.metrics().liveness_proofs.get_or_create(&super::metrics::ResultLabel { result: "unanswered" }).inc();
    None
}

/// Sends indirect probe requests and feeds their answers until one settles the probe or
/// the indirect timeout passes. A request whose round trip failed (request or answer lost,
/// connection refused) is sent again, freshly sealed, up to `send_retries` times within
/// the timeout: under 30% loss a single try reaches a helper and back only ~43% of the
/// time, which made a live peer's accusation stand in ~2.5% of ballots (see the `sim`
/// tests). Each try waits for its answer until the indirect deadline, not just
/// `--message-timeout`: the helper answers only after its own proof and checks, which on a
/// lossy link take their retries (cut at `--message-timeout`, helpers were asked and
/// abandoned twice in 2 x 250 ms on a 30%-lossy network, and every unhealthy ballot there
/// was a live peer's, by the deadline).
async fn ask_helpers(daemon: &Daemon, transport: &Transport, requests: Vec<OutgoingRequest>) {
    let timeout = daemon.settings().protocol.indirect_timeout;
    let retries = daemon.settings().protocol.send_retries;
    let deadline = tokio::time::Instant::now() + timeout;
    let expires_at = wall_clock().saturating_add(timeout);
    let mut replies: FuturesUnordered<_> = requests
        .into_iter()
        .map(|request| async move {
            let mut attempt = 0;
            loop {
                let frame = daemon.seal_request(&request, wall_clock());
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                let reply = transport.post_within(request.address, Bytes::from(frame), left).await;
                match &reply {
                    Err(error)
                        if !error.is_refusal() && attempt < retries && tokio::time::Instant::now() < deadline =>
                    {
                        daemon.metrics().sent("probe_request", "retried");
                        tracing::debug!(helper = %request.helper, %error, attempt, "probe request failed, retrying");
                        attempt += 1;
                    }
                    _ => return (request.helper, reply),
                }
            }
        })
        .collect();
    let settled = tokio::time::timeout_at(deadline, async {
        while let Some((helper, reply)) = replies.next().await {
            match reply {
                Ok(frame) if !frame.is_empty() => {
                    daemon.metrics().sent("probe_request", "delivered");
                    if daemon.take_answer(&frame, wall_clock()) {
                        return true;
                    }
                }
                Ok(_) => {
                    daemon.metrics().sent("probe_request", "delivered");
                    tracing::debug!(%helper, "helper declined the probe request");
                }
                Err(error) => {
                    daemon.metrics().sent("probe_request", if error.is_refusal() { "refused" } else { "failed" });
                    tracing::debug!(%helper, %error, "probe request failed");
                }
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    if !settled {
        // no helper reached it, or some never answered: the accusation stands at the deadline
        tokio::time::sleep_until(deadline).await;
        daemon.expire(expires_at);
    }
}

/// Relay round `round` of the current period: sends each unit's frame to its peers,
/// retrying failed deliveries.
pub async fn relay(daemon: &Daemon, transport: &Transport, round: u32) {
    let frames = daemon.relay_round(round, wall_clock());
    futures::future::join_all(frames.into_iter().map(|frame| send_relay_frame(daemon, transport, frame))).await;
}

async fn send_relay_frame(daemon: &Daemon, transport: &Transport, RelayFrame { frame, peers }: RelayFrame) {
    let frame = Bytes::from(frame);
    let retries = daemon.settings().protocol.send_retries;
    let sends = peers.into_iter().map(|(peer, address)| {
        let frame = frame.clone();
        async move {
            let mut attempt = 0;
            loop {
                match transport.post(address, frame.clone()).await {
                    Ok(_) => return daemon.metrics().sent("results", "delivered"),
                    Err(error) if error.is_refusal() || attempt >= retries => {
                        daemon.metrics().sent("results", if error.is_refusal() { "refused" } else { "failed" });
                        tracing::debug!(%peer, %address, %error, attempts = attempt + 1, "results not delivered");
                        return;
                    }
                    Err(_) => attempt += 1,
                }
            }
        }
    });
    futures::future::join_all(sends).await;
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::body::Body;
    use axum::response::IntoResponse;
    use tower::ServiceExt;

    use super::*;
    use crate::daemon::metrics::{BallotLabels, ReasonLabel, ResultLabel, SentLabels};
    use crate::daemon::server::router;
    use crate::daemon::test_support::{KEY, daemon, member, signing_key};

    /// A daemon bound to one address speaks from it: its checks and its exchanges reach a
    /// peer from that address (what a firewall between members, or the soak's partition,
    /// matches on), not from the kernel's pick (127.0.0.1 on loopback).
    #[tokio::test]
    async fn a_daemon_bound_to_one_address_checks_and_exchanges_from_it() {
        let mut recorder = edgegrid_testing::SourceRecorder::start().await;
        let addr = recorder.addr;
        let check = format!("kind=tcp,port={},timeout=1s", addr.port());
        let nodes = [member("checker", Some("127.0.0.12:51005")), member("target", Some("127.0.0.1:51005"))];
        let bound = daemon("checker", &check, &["--bind-address", "127.0.0.12:0"], &nodes);
        assert!(check_node(&bound.settings().checks, &[], addr.ip(), None, &bound).await);
        assert_eq!(recorder.next().await, Some("127.0.0.12".parse().unwrap()), "the check");
        let _ = Transport::of(bound.settings()).post(addr, Bytes::from_static(b"{}")).await;
        assert_eq!(recorder.next().await, Some("127.0.0.12".parse().unwrap()), "the exchange");
        let _ = Transport::new(Duration::from_secs(1)).post(addr, Bytes::from_static(b"{}")).await;
        assert_eq!(recorder.next().await, Some("127.0.0.1".parse().unwrap()), "no source: the kernel's pick");
    }

    /// With a `ca-file`, a kubelet check passes only on a peer presenting a certificate of
    /// that CA for its node (`CN=system:node:<name>`) and its address (an IP SAN): another
    /// node's certificate, one for another address, or a self-signed one for the right
    /// names are refused in the handshake, so the token goes to the verified peer only. A
    /// peer's probe request names an address: the names are those of the Nodes publishing it.
    #[tokio::test]
    async fn a_verified_kubelet_check_sends_its_token_to_the_named_peer_only() {
        use edgegrid_testing::TempDir;
        use edgegrid_testing::tls::{RecordingHttpsServer, TestCa, self_signed_kubelet_cert};
        let ca = TestCa::new("kubelet-serving");
        let dir = TempDir::new("kubelet-check").unwrap();
        std::fs::write(dir.join("ca.pem"), ca.cert_pem()).unwrap();
        std::fs::write(dir.join("token"), "check-token\n").unwrap();
        let host: IpAddr = "127.0.0.1".parse().unwrap();
        let cases = [
            ("its own certificate", ca.kubelet_serving_cert(2, "target", &[host]), true),
            ("another node's", ca.kubelet_serving_cert(3, "other", &[host]), false),
            ("for another address", ca.kubelet_serving_cert(4, "target", &["127.0.0.9".parse().unwrap()]), false),
            ("self-signed", self_signed_kubelet_cert("target", &[host]), false),
        ];
        for (case, cert, passes) in cases {
            let server = RecordingHttpsServer::start("127.0.0.1:0".parse().unwrap(), &cert, 200).await.unwrap();
            let port = server.addr().port();
            let check = format!("kind=kubelet,port={port},timeout=1s,ca-file={}", dir.join("ca.pem").display());
            let token_file = dir.join("token").display().to_string();
            let nodes = [member("checker", Some("127.0.0.2:51005")), member("target", Some("127.0.0.1:51005"))];
            let checker = daemon("checker", &check, &["--token-file", &token_file], &nodes);
            let (checks, token) = (&checker.settings().checks, read_token(&checker));
            assert_eq!(token.as_deref(), Some("check-token"));
            let direct = check_node(checks, &["target".into()], host, token.as_deref(), &checker).await;
            let asked = check_peer(checks, host, token.as_deref(), &checker).await;
            assert_eq!((direct, asked), (passes, passes), "{case}");
            let sent = if passes { vec![Some("Bearer check-token".to_string()); 2] } else { vec![] };
            assert_eq!(server.authorizations(), sent, "{case}");
            // nobody publishes the address: no name, no certificate passes
            let elsewhere = [member("checker", Some("127.0.0.2:51005")), member("target", Some("127.0.0.3:51005"))];
            checker.replace_nodes(&elsewhere);
            assert!(!check_peer(checks, host, token.as_deref(), &checker).await, "{case}");
            assert_eq!(server.authorizations().len(), if passes { 2 } else { 0 }, "{case}");
        }
    }

    /// A listener at a dead member's address (its IP taken on the site LAN) gets no
    /// kubelet-check token: the checks that carry one run only once the peer's proof has
    /// verified, and an impostor cannot make one. Without a `ca-file` (the default) the
    /// kubelet check takes any certificate, so before that order the token went out beside
    /// the challenge. A peer that proves itself gets its check, token included.
    #[tokio::test]
    async fn no_kubelet_token_goes_to_an_impostor_at_a_dead_members_address() {
        use edgegrid_testing::TempDir;
        use edgegrid_testing::tls::{RecordingHttpsServer, self_signed_kubelet_cert};
        let dir = TempDir::new("kubelet-token").unwrap();
        std::fs::write(dir.join("token"), "check-token\n").unwrap();
        let token_file = dir.join("token").display().to_string();
        let host: IpAddr = "127.0.0.1".parse().unwrap();
        for (case, proves) in [("an impostor", false), ("the peer itself", true)] {
            let cert = self_signed_kubelet_cert("peer", &[host]);
            let kubelet = RecordingHttpsServer::start("127.0.0.1:0".parse().unwrap(), &cert, 200).await.unwrap();
            let check = format!("kind=kubelet,port={},timeout=500ms", kubelet.addr().port());
            let exchange = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = exchange.local_addr().unwrap();
            let nodes = [member("checker", Some("127.0.0.2:51005")), member("peer", Some(&address.to_string()))];
            let app = if proves {
                router(daemon("peer", &check, &[], &nodes))
            } else {
                axum::Router::new().fallback(|| async { StatusCode::OK })
            };
            let _server = tokio::spawn(async move { axum::serve(exchange, app).await });
            let flags = ["--token-file", &token_file, "--message-timeout", "500ms"];
            let checker = daemon("checker", &check, &flags, &nodes);
            let token = read_token(&checker);
            assert_eq!(token.as_deref(), Some("check-token"));
            let (checks, names, checker) = (&checker.settings().checks, &["peer".to_string()], &checker);
            let run_checks =
                |token: Option<String>| async move { check_node(checks, names, host, token.as_deref(), checker).await };
            let transport = Transport::new(Duration::from_millis(500));
            let nonce = Nonce([7; 16]);
            let proof =
                alive(checker, &transport, "peer", address, "checker", nonce, token.as_deref(), run_checks).await;
            assert_eq!(proof.is_some(), proves, "{case}");
            let sent = if proves { vec![Some("Bearer check-token".to_string())] } else { vec![] };
            assert_eq!(kubelet.authorizations(), sent, "{case}: the token went to");
        }
    }

    /// A challenge lost on the way (the peer's exchange never answers) is tried again: while
    /// the checks may still run when they run alongside (no token), `--send-retries` times
    /// when they wait for the proof (a token), which is what the period was checked to hold.
    #[tokio::test]
    async fn a_lost_challenge_is_tried_again_within_the_proofs_time() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        // checks that may take 450 ms; challenges time out after 100 ms
        let check = "kind=tcp,port=9,timeout=150ms,retries=2";
        for (case, token, want) in [("alongside the checks", false, 4), ("before them", true, 2)] {
            let exchange = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = exchange.local_addr().unwrap();
            let challenges = Arc::new(AtomicUsize::new(0));
            let counted = challenges.clone();
            let app = axum::Router::new().fallback(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<StatusCode>()
            });
            let _server = tokio::spawn(async move { axum::serve(exchange, app).await });
            let nodes = [member("checker", Some("127.0.0.2:51005")), member("peer", Some(&address.to_string()))];
            let flags = ["--message-timeout", "100ms", "--send-retries", "1"];
            let checker = daemon("checker", check, &flags, &nodes);
            assert_eq!(checker.settings().proof_time(token), Duration::from_millis(if token { 200 } else { 450 }));
            let transport = Transport::new(Duration::from_millis(100));
            let proof = prove_alive(&checker, &transport, "peer", address, "checker", Nonce([9; 16]), token).await;
            assert!(proof.is_none(), "{case}");
            assert_eq!(challenges.load(Ordering::SeqCst), want, "{case}: challenges sent");
        }
    }

    /// A kubelet that answers at all is serving: its 401 (a token it cannot review, or
    /// none) and 403 pass a kind=kubelet check; its 500 (`/healthz` failing) does not; an
    /// HTTPS check counts 401 as the failure kubelet's probes make it.
    #[tokio::test]
    async fn a_kubelet_refusing_the_request_is_alive() {
        use edgegrid_testing::tls::{RecordingHttpsServer, TestCa};
        let cert = TestCa::new("kubelet-serving").kubelet_serving_cert(2, "target", &["127.0.0.1".parse().unwrap()]);
        let host: IpAddr = "127.0.0.1".parse().unwrap();
        for (status, kubelet_passes, https_passes) in
            [(200, true, true), (401, true, false), (403, true, false), (404, false, false), (500, false, false)]
        {
            let server = RecordingHttpsServer::start("127.0.0.1:0".parse().unwrap(), &cert, status).await.unwrap();
            let port = server.addr().port();
            let nodes = [member("checker", Some("127.0.0.2:51005")), member("target", Some("127.0.0.1:51005"))];
            for (kind, passes) in [("kubelet", kubelet_passes), ("https", https_passes)] {
                let checker = daemon("checker", &format!("kind={kind},port={port},timeout=1s"), &[], &nodes);
                let reachable = check_node(&checker.settings().checks, &["target".into()], host, None, &checker).await;
                assert_eq!(reachable, passes, "{kind} answered {status}");
            }
            assert_eq!(server.authorizations(), [None, None], "no token configured, none sent");
        }
    }

    /// A unit of three with `flags`: the asker, the helper (its daemon; the test serves it,
    /// with the link it wants in front, on the listener returned, the helper's published
    /// address) and the target, served, whose daemon answers challenges and whose port
    /// takes the tcp check.
    async fn asker_helper_target(flags: &[&str]) -> (Arc<Daemon>, Arc<Daemon>, tokio::net::TcpListener) {
        let target_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target_address = target_listener.local_addr().unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let nodes = [
            member("asker", Some("127.0.0.2:51005")),
            member("helper", Some(&listener.local_addr().unwrap().to_string())),
            member("target", Some(&target_address.to_string())),
        ];
        let check = format!("kind=tcp,port={},timeout=500ms", target_address.port());
        let (asker, helper) = (daemon("asker", &check, flags, &nodes), daemon("helper", &check, flags, &nodes));
        let target = daemon("target", &check, flags, &nodes);
        tokio::spawn(async move { axum::serve(target_listener, router(target)).await });
        (asker, helper, listener)
    }

    /// The only helper's first answer is lost (its server fails the exchange): the asker
    /// asks again with a fresh frame (the first was accepted, so a resent copy would be
    /// refused as a replay) and the helper's answer, not the deadline, decides the ballot.
    #[tokio::test]
    async fn a_failed_indirect_round_trip_is_retried_before_the_peer_is_accused() {
        let (asker, helper, listener) = asker_helper_target(&["--indirect-timeout", "5s"]).await;
        let seen = Arc::new(AtomicUsize::new(0));
        let helper_router = router(helper.clone());
        let lossy = axum::Router::new().route(
            EXCHANGE_PATH,
            axum::routing::post({
                let seen = seen.clone();
                move |request: axum::extract::Request| async move {
                    let answer = helper_router.oneshot(request).await.unwrap();
                    if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                        // the helper ran the probe, but its answer never arrives
                        return (StatusCode::BAD_GATEWAY, Body::empty()).into_response();
                    }
                    answer
                }
            }),
        );
        let _server = tokio::spawn(async move { axum::serve(listener, lossy).await });

        let period = asker.clock().period_at(wall_clock());
        let nonce = Nonce([9; 16]);
        let AfterDirect::Ask(requests) = asker.direct_result("target", period, false, nonce, wall_clock()) else {
            panic!("a failed direct probe with a helper available asks it");
        };
        assert_eq!(requests.iter().map(|r| r.helper.as_str()).collect::<Vec<_>>(), ["helper"]);
        let transport = Transport::new(Duration::from_secs(2));
        let started = tokio::time::Instant::now();
        ask_helpers(&asker, &transport, requests).await;

        assert_eq!(seen.load(Ordering::SeqCst), 2, "asked twice");
        assert!(started.elapsed() < Duration::from_secs(5), "settled by the answer, before the deadline");
        let metrics = asker.metrics();
        let ballots = |verdict, basis| metrics.ballots.get_or_create(&BallotLabels { verdict, basis }).get();
        assert_eq!((ballots("healthy", "helper"), ballots("unhealthy", "deadline")), (1, 0));
        let sent = |result| metrics.messages_sent.get_or_create(&SentLabels { kind: "probe_request", result }).get();
        assert_eq!((sent("retried"), sent("delivered")), (1, 1));
        let rejected: u64 = crate::message::Rejection::ALL
            .into_iter()
            .map(|rejection| {
                let label = ReasonLabel { reason: rejection.metric_label() };
                helper.metrics().messages_rejected.get_or_create(&label).get()
            })
            .sum();
        assert_eq!(rejected, 0, "the second request was not refused as a replay");
        let proofs = |result| metrics.liveness_proofs.get_or_create(&ResultLabel { result }).get();
        assert_eq!(proofs("verified"), 1, "the helper relayed the target's proof over the asker's nonce");
    }

    /// The only helper answers after longer than the asker's `--message-timeout` (its own
    /// proof and checks take their retries on a lossy link; here its link is slow): the
    /// asker waits for the answer until its indirect deadline, and the answer, not the
    /// deadline, decides the ballot. Cut at the message timeout, the request was abandoned
    /// and resent, and the live target was accused.
    #[tokio::test]
    async fn a_helper_slower_than_the_message_timeout_is_waited_for_until_the_deadline() {
        let flags = ["--indirect-timeout", "3s", "--message-timeout", "100ms"];
        let (asker, helper, listener) = asker_helper_target(&flags).await;
        let seen = Arc::new(AtomicUsize::new(0));
        let helper_router = router(helper.clone());
        let slow = axum::Router::new().route(
            EXCHANGE_PATH,
            axum::routing::post({
                let seen = seen.clone();
                move |request: axum::extract::Request| async move {
                    seen.fetch_add(1, Ordering::SeqCst);
                    let answer = helper_router.oneshot(request).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(400)).await;
                    answer
                }
            }),
        );
        let _server = tokio::spawn(async move { axum::serve(listener, slow).await });

        let period = asker.clock().period_at(wall_clock());
        let AfterDirect::Ask(requests) = asker.direct_result("target", period, false, Nonce([4; 16]), wall_clock())
        else {
            panic!("a failed direct probe with a helper available asks it");
        };
        let transport = Transport::new(asker.settings().message_timeout);
        ask_helpers(&asker, &transport, requests).await;

        assert_eq!(seen.load(Ordering::SeqCst), 1, "asked once");
        let metrics = asker.metrics();
        let ballots = |verdict, basis| metrics.ballots.get_or_create(&BallotLabels { verdict, basis }).get();
        assert_eq!((ballots("healthy", "helper"), ballots("unhealthy", "deadline")), (1, 0));
        let sent = |result| metrics.messages_sent.get_or_create(&SentLabels { kind: "probe_request", result }).get();
        assert_eq!((sent("retried"), sent("delivered")), (0, 1));
    }

    /// The challenge's nonce and checker, read from a frame (what anyone holding the unit's
    /// HMAC key can read).
    fn challenge_of(frame: &[u8]) -> (String, Nonce) {
        let value: serde_json::Value = serde_json::from_slice(frame).unwrap();
        let challenge = &value["body"]["payload"]["challenge"];
        let nonce = serde_json::from_value(challenge["nonce"].clone()).unwrap();
        (challenge["checker"].as_str().unwrap().to_string(), nonce)
    }

    /// What an impostor bound at a dead member's address answers a challenge with.
    #[derive(Clone, Copy, Debug)]
    enum Impostor {
        /// Any listener: `200` and nothing (a tcp or http check passes on it).
        Listener,
        /// The liar's own daemon: a proof, signed by the liar, in its own name.
        LiarsDaemon,
        /// A frame in the dead member's name, sealed with the unit key, proof and frame
        /// signed with the only node key the liar has, its own.
        Forged,
    }

    /// A dead member's address taken over by a liar: the tcp check passes on the liar's
    /// listener, but no answer carries the dead member's signature over the checker's
    /// nonce, so the checker's ballot says unhealthy (a unit of two: no helper to ask).
    /// Without the proof, the tcp check alone passed (the attack of issue 35).
    #[tokio::test]
    async fn an_impostor_at_a_dead_members_address_proves_nothing() {
        for impostor in [Impostor::Listener, Impostor::LiarsDaemon, Impostor::Forged] {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let dead_address = listener.local_addr().unwrap();
            let nodes = [member("checker", Some("127.0.0.2:51005")), member("dead", Some(&dead_address.to_string()))];
            let check = format!("kind=tcp,port={},timeout=500ms", dead_address.port());
            let checker = daemon("checker", &check, &["--message-timeout", "500ms"], &nodes);
            let liar = daemon("liar", &check, &[], &[member("liar", None), member("checker", Some("127.0.0.2:51005"))]);
            let app = match impostor {
                Impostor::Listener => axum::Router::new().fallback(|| async { StatusCode::OK }),
                Impostor::LiarsDaemon => router(liar),
                Impostor::Forged => axum::Router::new().route(
                    EXCHANGE_PATH,
                    axum::routing::post(|frame: Bytes| async move {
                        let (checker, nonce) = challenge_of(&frame);
                        let proof = crate::liveness::prove(&signing_key("liar"), "dead", &checker, nonce);
                        let mut as_dead = crate::message::Signer::new(
                            crate::message::HmacKey::new(KEY).unwrap(),
                            "dead",
                            wall_clock(),
                        );
                        let payload = crate::message::Payload::Proof { proof };
                        as_dead.seal(&signing_key("liar"), wall_clock(), Some(checker), payload)
                    }),
                ),
            };
            let _impostor = tokio::spawn(async move { axum::serve(listener, app).await });

            let transport = Transport::new(Duration::from_millis(500));
            let period = checker.clock().period_at(wall_clock());
            assert!(
                check_node(&checker.settings().checks, &["dead".into()], dead_address.ip(), None, &checker).await,
                "{impostor:?}: the tcp check alone passes on the impostor"
            );
            run(checker.clone(), transport, period).await;
            let metrics = checker.metrics();
            let ballots = |verdict, basis| metrics.ballots.get_or_create(&BallotLabels { verdict, basis }).get();
            assert_eq!((ballots("unhealthy", "no_helpers"), ballots("healthy", "direct")), (1, 0), "{impostor:?}");
            let proofs = |result| metrics.liveness_proofs.get_or_create(&ResultLabel { result }).get();
            let refused = match impostor {
                Impostor::Listener => "missing",
                // its verifier refuses a frame addressed to another node: no answer at all
                Impostor::LiarsDaemon => "unanswered",
                Impostor::Forged => "bad_signature",
            };
            assert_eq!((proofs(refused), proofs("verified")), (1, 0), "{impostor:?}");
        }
    }

    /// A helper (holding the unit key and its own node key) answering "reachable" for a
    /// dead target, without a proof, or with one it signed itself, or with a real proof the
    /// target once made for another checker's nonce: not believed; the accusation stands.
    #[tokio::test]
    async fn a_helpers_reachable_without_the_targets_proof_is_not_believed() {
        let replayed = crate::liveness::prove(&signing_key("dead"), "dead", "other", Nonce([1; 16]));
        type Lie = Box<dyn Fn(Nonce) -> Option<LivenessProof> + Send + Sync>;
        let cases: [(&str, Lie, &str); 3] = [
            ("no proof", Box::new(|_| None), "missing"),
            (
                "its own signature",
                Box::new(|n| Some(crate::liveness::prove(&signing_key("liar"), "dead", "asker", n))),
                "bad_signature",
            ),
            ("another challenge's proof", Box::new(move |_| Some(replayed.clone())), "other_challenge"),
        ];
        for (case, proof, refused) in cases {
            let proof = Arc::new(proof);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let liar_address = listener.local_addr().unwrap();
            let nodes = [
                member("asker", Some("127.0.0.2:51005")),
                member("liar", Some(&liar_address.to_string())),
                member("dead", Some("127.0.0.1:9")),
            ];
            let asker = daemon("asker", "kind=tcp,port=9,timeout=200ms", &["--indirect-timeout", "3s"], &nodes);
            let lying_helper = axum::Router::new().route(
                EXCHANGE_PATH,
                axum::routing::post(move |frame: Bytes| {
                    let proof = proof.clone();
                    async move {
                        let value: serde_json::Value = serde_json::from_slice(&frame).unwrap();
                        let request = &value["body"]["payload"]["probeRequest"];
                        let id = request["id"].as_u64().unwrap();
                        let nonce: Nonce = serde_json::from_value(request["nonce"].clone()).unwrap();
                        let mut liar = crate::message::Signer::new(
                            crate::message::HmacKey::new(KEY).unwrap(),
                            "liar",
                            wall_clock(),
                        );
                        let payload = crate::message::Payload::ProbeAnswer {
                            id,
                            target: "dead".into(),
                            reachable: true,
                            proof: proof(nonce),
                        };
                        liar.seal(&signing_key("liar"), wall_clock(), Some("asker".into()), payload)
                    }
                }),
            );
            let _liar = tokio::spawn(async move { axum::serve(listener, lying_helper).await });
            let period = asker.clock().period_at(wall_clock());
            let AfterDirect::Ask(requests) = asker.direct_result("dead", period, false, Nonce([5; 16]), wall_clock())
            else {
                panic!("{case}: the liar is asked");
            };
            ask_helpers(&asker, &Transport::new(Duration::from_secs(1)), requests).await;
            let metrics = asker.metrics();
            let ballots = |verdict, basis| metrics.ballots.get_or_create(&BallotLabels { verdict, basis }).get();
            assert_eq!(
                (ballots("unhealthy", "all_helpers_failed"), ballots("healthy", "helper")),
                (1, 0),
                "{case}: the accusation stands"
            );
            let proofs = |result| metrics.liveness_proofs.get_or_create(&ResultLabel { result }).get();
            assert_eq!(proofs(refused), 1, "{case}");
        }
    }
}
