//! Every probe kind against real local servers and commands: success, failure, timeout,
//! redirects, large bodies, TLS verification, gRPC health statuses.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Redirect;
use axum::routing::get;
use edgegrid_prober::*;

const TIMEOUT: Duration = Duration::from_secs(2);

async fn http_server() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let other_host = format!("http://localhost:{}/ok", addr.port());
    let app = Router::new()
        .route("/ok", get(|| async { "fine" }))
        .route("/fail", get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "broken") }))
        .route("/teapot", get(|| async { StatusCode::IM_A_TEAPOT }))
        .route("/moved", get(|| async { (StatusCode::MULTIPLE_CHOICES, "3xx without location") }))
        .route("/redirect-same", get(|| async { Redirect::temporary("/ok") }))
        .route("/redirect-to-fail", get(|| async { Redirect::temporary("/fail") }))
        .route("/redirect-other", get(move || async move { Redirect::temporary(&other_host) }))
        .route("/loop", get(|| async { Redirect::temporary("/loop") }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                "late"
            }),
        )
        .route("/big", get(|| async { "x".repeat(1024 * 1024) }))
        .route(
            "/auth",
            get(|headers: HeaderMap| async move {
                let auth = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
                let custom = headers.get("x-probe").and_then(|v| v.to_str().ok());
                if auth == Some("Bearer s3cret") && custom == Some("yes") {
                    StatusCode::OK
                } else {
                    StatusCode::UNAUTHORIZED
                }
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

fn http(addr: SocketAddr, path: &str) -> ProbeTarget {
    ProbeTarget::Http(HttpProbe {
        https: false,
        host: addr.ip().to_string(),
        port: addr.port(),
        path: path.into(),
        headers: vec![],
        bearer_token: None,
        tls: TlsVerification::InsecureSkipVerify,
        extra_success_statuses: vec![],
    })
}

async fn outcome(target: &ProbeTarget, timeout: Duration) -> (Outcome, String) {
    let report = run_probe(target, timeout).await.expect("no prober error");
    (report.outcome, report.detail)
}

#[tokio::test]
async fn http_status_redirects_bodies_and_timeouts() {
    let addr = http_server().await;
    let cases = [
        ("/ok", Outcome::Success, "fine"),
        ("/fail", Outcome::Failure, "HTTP probe failed with statuscode: 500"),
        ("/teapot", Outcome::Failure, "HTTP probe failed with statuscode: 418"),
        ("/moved", Outcome::Success, "3xx without location"),
        ("/redirect-same", Outcome::Success, "fine"),
        ("/redirect-to-fail", Outcome::Failure, "HTTP probe failed with statuscode: 500"),
        ("/redirect-other", Outcome::Success, "Probe terminated redirects, Response: 307 Temporary Redirect"),
        ("/loop", Outcome::Failure, "stopped after 10 redirects"),
        ("/auth", Outcome::Failure, "HTTP probe failed with statuscode: 401"),
    ];
    for (path, want, detail) in cases {
        assert_eq!(outcome(&http(addr, path), TIMEOUT).await, (want, detail.to_string()), "{path}");
    }
    let (slow, detail) = outcome(&http(addr, "/slow"), Duration::from_millis(200)).await;
    assert_eq!((slow, detail.as_str()), (Outcome::Failure, "probe timed out after 200ms"));
    let (big, body) = outcome(&http(addr, "/big"), TIMEOUT).await;
    assert_eq!((big, body.len()), (Outcome::Success, MAX_BODY_BYTES), "body read capped at 10 KiB");

    let mut auth = http(addr, "/auth");
    if let ProbeTarget::Http(probe) = &mut auth {
        probe.bearer_token = Some("s3cret".into());
        probe.headers.push(("X-Probe".into(), "yes".into()));
    }
    assert_eq!(outcome(&auth, TIMEOUT).await.0, Outcome::Success, "bearer token and headers sent");

    let closed = std::net::SocketAddr::from(([127, 0, 0, 1], edgegrid_testing::free_port()));
    let (refused, detail) = outcome(&http(closed, "/ok"), TIMEOUT).await;
    assert_eq!(refused, Outcome::Failure);
    assert!(detail.contains("Connection refused"), "{detail}");
    let mut bad = http(addr, "/ok");
    if let ProbeTarget::Http(probe) = &mut bad {
        probe.host = "bad/host".into();
    }
    assert!(matches!(run_probe(&bad, TIMEOUT).await, Err(ProberError::Invalid(_))));
}

fn ca_and_server_config() -> (String, Arc<rustls::ServerConfig>) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params.subject_alt_names.push(rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap()));
    let cert = params.signed_by(&key, &ca).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()))
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    (ca.pem(), Arc::new(config))
}

#[tokio::test]
async fn https_with_and_without_verification() {
    let (ca_pem, config) = ca_and_server_config();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route("/healthz", get(|| async { "ok" }));
    let tls = axum_server::tls_rustls::RustlsConfig::from_config(config);
    tokio::spawn(axum_server::from_tcp_rustls(listener, tls).unwrap().serve(app.into_make_service()));
    let (other_ca, _) = ca_and_server_config();
    let target = |tls: TlsVerification| {
        ProbeTarget::Http(HttpProbe {
            https: true,
            host: "127.0.0.1".into(),
            port: addr.port(),
            path: "/healthz".into(),
            headers: vec![],
            bearer_token: None,
            tls,
            extra_success_statuses: vec![],
        })
    };
    assert_eq!(outcome(&target(TlsVerification::InsecureSkipVerify), TIMEOUT).await, (Outcome::Success, "ok".into()));
    assert_eq!(outcome(&target(TlsVerification::CaBundle(ca_pem.into_bytes())), TIMEOUT).await.0, Outcome::Success);
    let (untrusted, detail) = outcome(&target(TlsVerification::CaBundle(other_ca.into_bytes())), TIMEOUT).await;
    assert_eq!(untrusted, Outcome::Failure);
    assert!(detail.contains("tls"), "{detail}");
}

/// A kubelet's serving certificate is verified for the node probed: a CA-signed certificate
/// with its `CN=system:node:<node>` and an IP SAN of the address dialled passes; another
/// node's name, another address, a self-signed certificate (whatever its names) or
/// another CA's are refused during the handshake, before the request (and its token) is
/// sent.
#[tokio::test]
async fn kubelet_serving_certificates_are_verified_for_the_node_and_its_address() {
    use edgegrid_testing::tls::{RecordingHttpsServer, TestCa, self_signed_kubelet_cert};
    let (ca, other_ca) = (TestCa::new("kubelet-serving"), TestCa::new("other"));
    let here: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    let elsewhere: std::net::IpAddr = "127.0.0.2".parse().unwrap();
    let probe = |server: &RecordingHttpsServer, node_names: &[&str]| {
        ProbeTarget::Http(HttpProbe {
            https: true,
            host: "127.0.0.1".into(),
            port: server.addr().port(),
            path: "/healthz".into(),
            headers: vec![],
            bearer_token: Some("check-token".into()),
            tls: TlsVerification::KubeletServing {
                ca_bundle: ca.cert_pem().into_bytes(),
                node_names: node_names.iter().map(|n| n.to_string()).collect(),
            },
            extra_success_statuses: vec![],
        })
    };
    let start = |cert| async move { RecordingHttpsServer::start("127.0.0.1:0".parse().unwrap(), &cert, 200).await };

    let kubelet = start(ca.kubelet_serving_cert(2, "edge-1", &[here])).await.unwrap();
    assert_eq!(outcome(&probe(&kubelet, &["edge-1"]), TIMEOUT).await, (Outcome::Success, "ok".into()));
    assert_eq!(
        outcome(&probe(&kubelet, &["edge-0", "edge-1"]), TIMEOUT).await.0,
        Outcome::Success,
        "one of the names publishing the address"
    );
    assert_eq!(kubelet.authorizations(), [Some("Bearer check-token".to_string()), Some("Bearer check-token".into())]);

    let refused = [
        ("another node's name", start(ca.kubelet_serving_cert(3, "edge-2", &[here])).await.unwrap(), "edge-1"),
        ("another address", start(ca.kubelet_serving_cert(4, "edge-1", &[elsewhere])).await.unwrap(), "edge-1"),
        ("self-signed", start(self_signed_kubelet_cert("edge-1", &[here])).await.unwrap(), "edge-1"),
        ("another CA", start(other_ca.kubelet_serving_cert(5, "edge-1", &[here])).await.unwrap(), "edge-1"),
        ("a server certificate", start(ca.server_cert(6)).await.unwrap(), "edge-1"),
    ];
    for (case, server, node) in &refused {
        let (result, detail) = outcome(&probe(server, &[node]), TIMEOUT).await;
        assert_eq!(result, Outcome::Failure, "{case}: {detail}");
        assert!(detail.contains("tls: invalid peer certificate"), "{case}: {detail}");
        assert_eq!((server.handshakes(), server.authorizations()), (0, vec![]), "{case}: nothing sent");
    }
    let (no_name, detail) = outcome(&probe(&kubelet, &[]), TIMEOUT).await;
    assert_eq!(no_name, Outcome::Failure, "no node name, no certificate passes: {detail}");
    assert_eq!(kubelet.authorizations().len(), 2, "nothing more sent");
}

#[tokio::test]
async fn extra_success_statuses_count_as_success() {
    let addr = http_server().await;
    let mut unauthorized = http(addr, "/auth");
    assert_eq!(outcome(&unauthorized, TIMEOUT).await.0, Outcome::Failure, "401 fails a plain probe");
    if let ProbeTarget::Http(probe) = &mut unauthorized {
        probe.extra_success_statuses = vec![401, 403];
    }
    assert_eq!(
        outcome(&unauthorized, TIMEOUT).await,
        (Outcome::Success, "HTTP probe answered 401, counted as a success".into())
    );
    let mut failing = http(addr, "/fail");
    if let ProbeTarget::Http(probe) = &mut failing {
        probe.extra_success_statuses = vec![401, 403];
    }
    assert_eq!(outcome(&failing, TIMEOUT).await.0, Outcome::Failure, "only the statuses named");
}

#[tokio::test]
async fn tcp_connect() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    assert_eq!(outcome(&ProbeTarget::Tcp { host: "127.0.0.1".into(), port }, TIMEOUT).await.0, Outcome::Success);
    drop(listener);
    let (closed, detail) = outcome(&ProbeTarget::Tcp { host: "127.0.0.1".into(), port }, TIMEOUT).await;
    assert_eq!(closed, Outcome::Failure);
    assert!(detail.starts_with(&format!("dial tcp 127.0.0.1:{port}:")), "{detail}");
}

/// A daemon bound to one address probes from it: every network kind's connection comes
/// from the source given (or the kernel's choice, 127.0.0.1 on loopback, without one),
/// and a host with no address of the source's family is a failure saying so.
#[tokio::test]
async fn network_probes_dial_from_the_source_address_given() {
    let mut recorder = edgegrid_testing::SourceRecorder::start().await;
    let addr = recorder.addr;
    let tcp = ProbeTarget::Tcp { host: addr.ip().to_string(), port: addr.port() };
    let grpc = ProbeTarget::Grpc { host: addr.ip().to_string(), port: addr.port(), service: None };
    let source: std::net::IpAddr = "127.0.0.7".parse().unwrap();
    for target in [&tcp, &http(addr, "/ok"), &grpc] {
        run_probe_from(target, TIMEOUT, Some(source)).await.expect("no prober error");
        assert_eq!(recorder.next().await, Some(source), "{target:?}");
        run_probe(target, TIMEOUT).await.expect("no prober error");
        assert_eq!(recorder.next().await, Some("127.0.0.1".parse().unwrap()), "{target:?}");
    }
    let v6 = run_probe_from(&tcp, TIMEOUT, Some("::1".parse().unwrap())).await.expect("no prober error");
    assert_eq!(v6.outcome, Outcome::Failure);
    assert!(v6.detail.contains("127.0.0.1 has no address to reach from ::1"), "{}", v6.detail);
}

#[tokio::test]
async fn exec_commands() {
    let exec = |args: &[&str]| ProbeTarget::Exec { command: args.iter().map(|s| s.to_string()).collect() };
    assert_eq!(outcome(&exec(&["true"]), TIMEOUT).await, (Outcome::Success, String::new()));
    assert_eq!(outcome(&exec(&["sh", "-c", "echo alive"]), TIMEOUT).await, (Outcome::Success, "alive\n".into()));
    assert_eq!(
        outcome(&exec(&["sh", "-c", "echo dying; exit 3"]), TIMEOUT).await,
        (Outcome::Failure, "command exited with exit status: 3: dying\n".into())
    );
    assert_eq!(
        outcome(&exec(&["sleep", "5"]), Duration::from_millis(200)).await,
        (Outcome::Failure, "command timed out after 200ms".into())
    );
    assert!(matches!(run_probe(&exec(&["/nonexistent/probe"]), TIMEOUT).await, Err(ProberError::Exec(_))));
    assert!(matches!(run_probe(&exec(&[]), TIMEOUT).await, Err(ProberError::Invalid(_))));
}

/// A plaintext HTTP/2 gRPC health server: "" serving, "down" not serving, others unknown.
async fn grpc_server() -> SocketAddr {
    use bytes::Bytes;
    use http_body_util::{BodyExt, StreamBody};
    use hyper::body::Frame;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let service = hyper::service::service_fn(|request: hyper::Request<hyper::body::Incoming>| async move {
                let body = request.into_body().collect().await.unwrap().to_bytes();
                let service = String::from_utf8_lossy(body.get(7..).unwrap_or_default()).into_owned();
                let (status, grpc_status) = match service.as_str() {
                    "" => (Some(1u8), "0"),
                    "down" => (Some(2), "0"),
                    _ => (None, "5"),
                };
                let mut frames: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = Vec::new();
                if let Some(status) = status {
                    frames.push(Ok(Frame::data(Bytes::from(vec![0, 0, 0, 0, 2, 0x08, status]))));
                }
                let mut trailers = hyper::HeaderMap::new();
                trailers.insert("grpc-status", grpc_status.parse().unwrap());
                frames.push(Ok(Frame::trailers(trailers)));
                let body = StreamBody::new(futures::stream::iter(frames));
                Ok::<_, std::convert::Infallible>(
                    hyper::Response::builder().header("content-type", "application/grpc").body(body).unwrap(),
                )
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn grpc_health() {
    let addr = grpc_server().await;
    let grpc = |service: Option<&str>| ProbeTarget::Grpc {
        host: "127.0.0.1".into(),
        port: addr.port(),
        service: service.map(str::to_string),
    };
    assert_eq!(outcome(&grpc(None), TIMEOUT).await, (Outcome::Success, "status: SERVING".into()));
    assert_eq!(
        outcome(&grpc(Some("down")), TIMEOUT).await,
        (Outcome::Failure, "service unhealthy (responded with status 2)".into())
    );
    let (unknown, detail) = outcome(&grpc(Some("missing")), TIMEOUT).await;
    assert_eq!(unknown, Outcome::Failure);
    assert!(detail.contains("grpc-status \"5\""), "{detail}");
    let closed = edgegrid_testing::free_port();
    let (refused, _) =
        outcome(&ProbeTarget::Grpc { host: "127.0.0.1".into(), port: closed, service: None }, TIMEOUT).await;
    assert_eq!(refused, Outcome::Failure);
}
