//! One period's work with the peers: run the checks on the assigned peers concurrently,
//! ask helpers before accusing one the checks failed on. The relay rounds that pass
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
use edgegrid_prober::{Outcome, run_probe};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::metrics::ProbeLabels;
use super::state::{AfterDirect, Daemon, OutgoingRequest, RelayFrame, wall_clock};
use crate::config::CheckConfig;
use crate::message::MAX_FRAME_BYTES;
use crate::time::Period;

/// Where peers take messages.
pub const EXCHANGE_PATH: &str = "/exchange";

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
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(timeout));
        Self { client: Client::builder(TokioExecutor::new()).build(connector), timeout }
    }

    /// One `POST /exchange`; the reply's body on 2xx.
    pub async fn post(&self, address: SocketAddr, frame: Bytes) -> Result<Bytes, SendError> {
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
        tokio::time::timeout(self.timeout, exchange).await.unwrap_or(Err(SendError::Timeout(self.timeout)))
    }
}

/// Runs every check on the peer at `host` (concurrently, each with its retries); whether
/// its score reaches the line. `token`: read now (it rotates), sent to the kubelet only.
pub async fn check_peer(checks: &CheckConfig, host: IpAddr, token: Option<&str>, daemon: &Daemon) -> bool {
    let host = host.to_string();
    let outcomes = futures::future::join_all(checks.checks().iter().map(|spec| {
        let target = spec.target(&host, token);
        async move {
            let check = spec.kind.name();
            for _ in 0..spec.attempts() {
                let result = match run_probe(&target, spec.timeout).await {
                    Ok(report) if report.outcome == Outcome::Success => "success",
                    Ok(_) => "failure",
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

/// The service-account token, when a kubelet check needs one.
pub fn read_token(daemon: &Daemon) -> Option<String> {
    let path = daemon.settings().token_file.as_ref()?;
    match std::fs::read_to_string(path) {
        Ok(token) => Some(token.trim().to_string()),
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "service-account token unreadable: kubelet checks go without");
            None
        }
    }
}

/// One period's probes (their ballots go out with the next relay rounds).
pub async fn run(daemon: Arc<Daemon>, transport: Transport, period: Period) {
    let plan = daemon.plan(period);
    let token = read_token(&daemon);
    let checks = &daemon.settings().checks;
    let probes = plan.into_iter().map(|probe| {
        let (daemon, transport, token) = (&daemon, &transport, token.as_deref());
        async move {
            let Some(host) = probe.host else {
                daemon.metrics().probes_skipped.inc();
                tracing::debug!(target_node = %probe.target, "not probed: no address published");
                return;
            };
            let reachable = check_peer(checks, host, token, daemon).await;
            if let AfterDirect::Ask(requests) = daemon.direct_result(&probe.target, period, reachable, wall_clock()) {
                ask_helpers(daemon, transport, requests).await;
            }
        }
    });
    futures::future::join_all(probes).await;
}

/// Sends indirect probe requests and feeds their answers until one settles the probe or
/// the indirect timeout passes. A request whose round trip failed (request or answer lost,
/// timed out) is sent again, freshly sealed, up to `send_retries` times within the
/// timeout: under 30% loss a single try reaches a helper and back only ~43% of the time,
/// which made a live peer's accusation stand in ~2.5% of ballots (see the `sim` tests).
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
                let reply = transport.post(request.address, Bytes::from(frame)).await;
                match &reply {
                    Err(error) if !error.is_refusal() && attempt < retries => {
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
    use crate::daemon::metrics::{BallotLabels, ReasonLabel, SentLabels};
    use crate::daemon::server::router;
    use crate::daemon::test_support::{daemon, holding_port, member};

    /// The only helper's first answer is lost (its server fails the exchange): the asker
    /// asks again with a fresh frame (the first was accepted, so a resent copy would be
    /// refused as a replay) and the helper's answer, not the deadline, decides the ballot.
    #[tokio::test]
    async fn a_failed_indirect_round_trip_is_retried_before_the_peer_is_accused() {
        // the target's kubelet port: accepts connections (alive, seen from the helper)
        let (port, _accepting) = holding_port().await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let helper_address = listener.local_addr().unwrap();
        let nodes = [
            member("asker", Some("127.0.0.2:51005")),
            member("helper", Some(&helper_address.to_string())),
            member("target", Some(&format!("127.0.0.1:{port}"))),
        ];
        let check = format!("kind=tcp,port={port},timeout=500ms");
        let flags = ["--indirect-timeout", "5s"];
        let (asker, helper) = (daemon("asker", &check, &flags, &nodes), daemon("helper", &check, &flags, &nodes));
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
        let AfterDirect::Ask(requests) = asker.direct_result("target", period, false, wall_clock()) else {
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
    }
}
