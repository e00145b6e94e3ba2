//! HTTPS on the runtime's `--bind-address` listener, over real sockets on 127.0.0.1 with
//! rcgen certificates in temporary directories: the routes and admin endpoints served,
//! rotation under a stream of requests, unusable files keeping the certificate served,
//! client certificates, handshakes that fail without harm, and the shutdown drain.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use common::capture_logs;
use controller_support::tls::{ALPN_PROTOCOLS, PROTOCOL_VERSIONS, TlsError};
use controller_support::{BindAddress, CertResolver, Error, LogFormat, Runtime, RuntimeFlags, TlsConfig};
use edgegrid_testing::tls::{HttpsResponse, TestCa, TestCert, client_config, https_get};
use edgegrid_testing::{KubeconfigFile, TempDir, http_get, metric, unreachable_url};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, HandshakeKind, ProtocolVersion};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// How often the tests' servers re-read their files.
const INTERVAL: Duration = Duration::from_millis(100);

/// A runtime named `tls-test` serving `/api` and `/slow` (which waits for 400 ms, and
/// notifies `entered` first) over HTTPS on 127.0.0.1, with its metrics listener on
/// 127.0.0.2 in plain HTTP.
struct TlsTestServer {
    runtime: Runtime,
    https: SocketAddr,
    plain: SocketAddr,
    entered: Arc<Notify>,
}

async fn serve(tls: TlsConfig) -> TlsTestServer {
    capture_logs();
    let kubeconfig = KubeconfigFile::new(&unreachable_url()).unwrap();
    let flags: RuntimeFlags<0, 0> = RuntimeFlags {
        kubeconfig: Some(kubeconfig.path().to_path_buf()),
        bind_address: BindAddress::Socket(SocketAddr::from(([127, 0, 0, 1], 0))),
        metrics_bind_address: BindAddress::Socket(SocketAddr::from(([127, 0, 0, 2], 0))),
        log_format: LogFormat::Text,
        node_name: Some("node-1".into()),
        shutdown_grace_period: Duration::from_secs(1),
        server: Default::default(),
    };
    let entered = Arc::new(Notify::new());
    let slow = {
        let entered = entered.clone();
        move || async move {
            entered.notify_one();
            tokio::time::sleep(Duration::from_millis(400)).await;
            "slow"
        }
    };
    let routes = Router::new().route("/api", get(|| async { "api" })).route("/slow", get(slow));
    let runtime = Runtime::builder("tls-test", &flags).routes(routes).tls(Some(tls)).build().await.unwrap();
    runtime.mark_ready();
    let [https, plain] = runtime.admin_addresses()[..] else { panic!("{:?}", runtime.admin_addresses()) };
    TlsTestServer { runtime, https, plain, entered }
}

/// `tls.crt` and `tls.key` in `dir`, written in place.
/// Replaces `path` with `contents` at once (a sibling file renamed over it), as a kubelet
/// updates a mounted Secret: a plain write truncates first, and a reload that reads the
/// empty file in between counts an error of its own.
fn replace(path: std::path::PathBuf, contents: impl AsRef<[u8]>) -> std::io::Result<()> {
    let temporary = path.with_extension("tmp");
    std::fs::write(&temporary, contents)?;
    std::fs::rename(temporary, path)
}

fn write_files(dir: &TempDir, cert: &TestCert) {
    replace(dir.join("tls.crt"), &cert.cert_pem).unwrap();
    replace(dir.join("tls.key"), &cert.key_pem).unwrap();
}

fn files_config(dir: &TempDir) -> TlsConfig {
    TlsConfig::from_files(dir.join("tls.crt"), dir.join("tls.key")).unwrap().with_reload_interval(INTERVAL)
}

async fn get_ok(address: SocketAddr, path: &str, client: &Arc<ClientConfig>) -> HttpsResponse {
    https_get(address, path, client.clone()).await.unwrap_or_else(|error| panic!("GET {path}: {error}"))
}

/// The leaf a new connection gets.
async fn served_cert(address: SocketAddr, client: &Arc<ClientConfig>) -> CertificateDer<'static> {
    get_ok(address, "/api", client).await.peer_certificate.expect("a server certificate")
}

/// Waits up to `limit` for new connections to get `cert`; how long that took.
async fn wait_for_cert(address: SocketAddr, client: &Arc<ClientConfig>, cert: &TestCert, limit: Duration) -> Duration {
    let start = Instant::now();
    loop {
        if served_cert(address, client).await == cert.cert_der {
            return start.elapsed();
        }
        assert!(start.elapsed() < limit, "still not serving the new certificate after {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn counter(plain: SocketAddr, name: &str) -> u64 {
    let value = metric(plain, &format!("tls_test_{name}_total")).await;
    value.unwrap_or_else(|| panic!("no {name}")).parse().unwrap()
}

/// Waits up to 5 s for the counter `name` to reach `value`, then checks that it stays
/// there while the files are read five more times.
async fn counts_once(plain: SocketAddr, name: &str, value: u64) {
    let start = Instant::now();
    while counter(plain, name).await < value {
        assert!(start.elapsed() < Duration::from_secs(5), "{name} did not reach {value}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(INTERVAL * 5).await;
    assert_eq!(counter(plain, name).await, value, "{name}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_routes_and_admin_endpoints_are_served_over_https_and_metrics_stay_plain() {
    let dir = TempDir::new("tls-serving").unwrap();
    let ca = TestCa::new("serving-ca");
    let cert = ca.server_cert(1);
    write_files(&dir, &cert);
    let served = serve(files_config(&dir)).await;
    let client = ca.client_config(None);

    let api = get_ok(served.https, "/api", &client).await;
    assert_eq!((api.status, api.body.as_str()), (200, "api"));
    assert_eq!(api.peer_certificate.as_ref(), Some(&cert.cert_der));
    assert_eq!(api.alpn_protocol.as_deref(), Some(&b"http/1.1"[..]));
    assert_eq!(api.protocol_version, Some(ProtocolVersion::TLSv1_3));
    for (path, body) in [("/healthz", "ok"), ("/readyz", "ok")] {
        let response = get_ok(served.https, path, &client).await;
        assert_eq!((response.status, response.body.as_str()), (200, body), "{path}");
        // the same client configuration again: no session is resumed
        assert_eq!(response.handshake_kind, Some(HandshakeKind::Full));
    }
    let metrics = get_ok(served.https, "/metrics", &client).await;
    assert!(metrics.status == 200 && metrics.body.ends_with("# EOF\n"), "{metrics:?}");

    // TLS 1.2 clients are served too; nothing older is (rustls has nothing older)
    let tls12 = client_config(&[ca.cert_der()], None, &[&rustls::version::TLS12]);
    assert_eq!(get_ok(served.https, "/api", &tls12).await.protocol_version, Some(ProtocolVersion::TLSv1_2));
    assert_eq!(PROTOCOL_VERSIONS, [&rustls::version::TLS13, &rustls::version::TLS12]);
    assert_eq!(ALPN_PROTOCOLS, [b"http/1.1"]);

    // the separate metrics listener: plain HTTP, admin endpoints only
    assert_eq!(http_get(served.plain, "/healthz").await, Some((200, "ok".into())));
    assert_eq!(http_get(served.plain, "/api").await, Some((404, String::new())));
    assert_eq!(counter(served.plain, "tls_reloads").await, 0);
    assert_eq!(counter(served.plain, "tls_handshake_errors").await, 0);
    assert!(served.runtime.tls_resolver().is_some());
}

/// A ClientHello offering TLS 1.1 at most (no supported_versions extension), with suites,
/// groups and signature schemes the server has, so that only the version is wrong.
fn tls11_client_hello() -> Vec<u8> {
    let mut body = vec![0x03, 0x02];
    body.extend([0x5a; 32]);
    // no session id; ECDHE-ECDSA-AES128-GCM-SHA256; null compression
    body.extend([0x00, 0x00, 0x02, 0xc0, 0x2b, 0x01, 0x00]);
    let extensions = [
        // supported_groups: x25519, secp256r1
        &[0x00, 0x0a, 0x00, 0x06, 0x00, 0x04, 0x00, 0x1d, 0x00, 0x17][..],
        // ec_point_formats: uncompressed
        &[0x00, 0x0b, 0x00, 0x02, 0x01, 0x00],
        // signature_algorithms: ecdsa_secp256r1_sha256
        &[0x00, 0x0d, 0x00, 0x04, 0x00, 0x02, 0x04, 0x03],
    ]
    .concat();
    body.extend(u16::try_from(extensions.len()).unwrap().to_be_bytes());
    body.extend(extensions);
    let mut handshake = vec![0x01, 0x00, 0x00, u8::try_from(body.len()).unwrap()];
    handshake.extend(body);
    let mut record = vec![0x16, 0x03, 0x01, 0x00, u8::try_from(handshake.len()).unwrap()];
    record.extend(handshake);
    record
}

/// Sends `bytes` on a new connection and reads until the server closes it (within 2 s).
async fn exchange_raw(address: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut connection = TcpStream::connect(address).await.unwrap();
    connection.write_all(bytes).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(2), connection.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the server neither answered nor closed: a hang");
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_handshakes_end_their_connection_only() {
    let dir = TempDir::new("tls-handshakes").unwrap();
    let ca = TestCa::new("handshake-ca");
    write_files(&dir, &ca.server_cert(1));
    let served = serve(files_config(&dir)).await;
    let client = ca.client_config(None);

    // a client that connects and says nothing holds up no other
    let idle = TcpStream::connect(served.https).await.unwrap();
    let answered = tokio::time::timeout(Duration::from_secs(2), https_get(served.https, "/api", client.clone())).await;
    assert_eq!(answered.expect("answered beside a stalled handshake").unwrap().status, 200);

    // plain HTTP: a TLS alert and the connection closed, not a hang nor an HTTP answer
    let answer = exchange_raw(served.https, b"GET /api HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(answer.first(), Some(&0x15), "an alert record: {answer:?}");
    assert_eq!(http_get(served.https, "/healthz").await, None);

    // TLS 1.1: the protocol_version alert (fatal, 70)
    let answer = exchange_raw(served.https, &tls11_client_hello()).await;
    assert_eq!(answer, [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 70], "{answer:?}");

    // a client that does not trust the certificate
    let stranger = TestCa::new("stranger").client_config(None);
    let error = https_get(served.https, "/api", stranger).await.unwrap_err();
    assert!(error.to_string().contains("UnknownIssuer"), "{error}");

    drop(idle);
    assert_eq!(get_ok(served.https, "/api", &client).await.status, 200, "still serving");
    // the two plain HTTP requests, TLS 1.1, the stranger and the idle client's hang-up
    assert_eq!(counter(served.plain, "tls_handshake_errors").await, 5);
}

/// What a stream of requests saw: how many were answered, the failures, and the
/// certificates presented, in order, without repeats.
#[derive(Debug, Default)]
struct Seen {
    answered: usize,
    failures: Vec<String>,
    certs: Vec<CertificateDer<'static>>,
}

impl Seen {
    fn cert(&mut self, cert: Option<CertificateDer<'static>>) {
        if let Some(cert) = cert
            && self.certs.last() != Some(&cert)
        {
            self.certs.push(cert);
        }
    }
}

/// GET /api on a new connection each time, until `stop`.
async fn new_connections(address: SocketAddr, client: Arc<ClientConfig>, stop: Arc<AtomicBool>) -> Seen {
    let mut seen = Seen::default();
    while !stop.load(Ordering::SeqCst) {
        match https_get(address, "/api", client.clone()).await {
            Ok(response) if response.status == 200 && response.body == "api" => {
                seen.answered += 1;
                seen.cert(response.peer_certificate);
            }
            Ok(response) => seen.failures.push(format!("{response:?}")),
            Err(error) => seen.failures.push(error.to_string()),
        }
    }
    seen
}

/// GET /api over one kept-alive connection, until `stop`; a failure ends it.
async fn one_connection(address: SocketAddr, client: Arc<ClientConfig>, stop: Arc<AtomicBool>) -> Seen {
    let mut seen = Seen::default();
    let failed = async {
        let connection = TcpStream::connect(address).await.map_err(|e| e.to_string())?;
        let server_name = ServerName::IpAddress(address.ip().into());
        let tls = tokio_rustls::TlsConnector::from(client).connect(server_name, connection).await;
        let tls = tls.map_err(|e| e.to_string())?;
        seen.cert(tls.get_ref().1.peer_certificates().and_then(|chain| chain.first()).cloned());
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        while !stop.load(Ordering::SeqCst) {
            let request = http::Request::get("/api").header("host", "localhost").body(Empty::<Bytes>::new()).unwrap();
            let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
            let status = response.status();
            let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
            if status != 200 || body != "api" {
                return Err(format!("{status} {body:?}"));
            }
            seen.answered += 1;
        }
        Ok::<(), String>(())
    }
    .await;
    if let Err(error) = failed {
        seen.failures.push(error);
    }
    seen
}

/// Points `dir/tls.crt` and `dir/tls.key` at `dir/..data/`, a symlink to a directory of
/// its own holding `cert`, replaced at once as the kubelet updates a Secret volume.
fn write_secret_volume(dir: &TempDir, cert: &TestCert, version: u32) {
    use std::os::unix::fs::symlink;
    let data = format!("..{version}");
    std::fs::create_dir(dir.join(&data)).unwrap();
    replace(dir.join(&data).join("tls.crt"), &cert.cert_pem).unwrap();
    replace(dir.join(&data).join("tls.key"), &cert.key_pem).unwrap();
    symlink(&data, dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    for name in ["tls.crt", "tls.key"] {
        if !dir.join(name).exists() {
            symlink(Path::new("..data").join(name), dir.join(name)).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rotated_files_reach_new_connections_and_no_request_fails() {
    let dir = TempDir::new("tls-rotation").unwrap();
    let ca = TestCa::new("rotation-ca");
    let certs: Vec<TestCert> = (1..=4).map(|serial| ca.server_cert(serial)).collect();
    write_secret_volume(&dir, &certs[0], 1);
    let served = serve(files_config(&dir)).await;
    let client = ca.client_config(None);
    assert_eq!(served_cert(served.https, &client).await, certs[0].cert_der);

    let stop = Arc::new(AtomicBool::new(false));
    let mut kept_alive = Vec::new();
    let mut reconnecting = Vec::new();
    for _ in 0..2 {
        kept_alive.push(tokio::spawn(one_connection(served.https, client.clone(), stop.clone())));
        reconnecting.push(tokio::spawn(new_connections(served.https, client.clone(), stop.clone())));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut latencies = Vec::new();
    // as the kubelet does: the whole Secret at once
    write_secret_volume(&dir, &certs[1], 2);
    latencies.push(wait_for_cert(served.https, &client, &certs[1], Duration::from_secs(5)).await);
    tokio::time::sleep(Duration::from_millis(200)).await;
    // in place, the certificate first: for a moment the key is not the certificate's
    for name in ["tls.crt", "tls.key"] {
        // the same contents, now in regular files
        let contents = std::fs::read(dir.join(name)).unwrap();
        std::fs::remove_file(dir.join(name)).unwrap();
        replace(dir.join(name), contents).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    replace(dir.join("tls.crt"), &certs[2].cert_pem).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    replace(dir.join("tls.key"), &certs[2].key_pem).unwrap();
    latencies.push(wait_for_cert(served.https, &client, &certs[2], Duration::from_secs(5)).await);
    tokio::time::sleep(Duration::from_millis(200)).await;
    write_files(&dir, &certs[3]);
    latencies.push(wait_for_cert(served.https, &client, &certs[3], Duration::from_secs(5)).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);

    for worker in kept_alive {
        let seen = worker.await.unwrap();
        assert!(seen.failures.is_empty(), "kept-alive connection: {:?}", seen.failures);
        assert!(seen.answered > 10, "{seen:?}");
        // an open connection keeps the certificate it was set up with
        assert_eq!(seen.certs, [certs[0].cert_der.clone()]);
    }
    for worker in reconnecting {
        let seen = worker.await.unwrap();
        assert!(seen.failures.is_empty(), "new connections: {:?}", seen.failures);
        assert!(seen.answered > 10, "{seen:?}");
        assert_eq!(seen.certs.first(), Some(&certs[0].cert_der));
        assert_eq!(seen.certs.last(), Some(&certs[3].cert_der), "{seen:?}");
    }
    // each change found within one interval of the files being complete (100 ms; the
    // rest is slack for a loaded machine)
    for latency in &latencies {
        assert!(*latency < Duration::from_secs(1), "{latencies:?}");
    }
    assert!(counter(served.plain, "tls_reloads").await >= 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_files_keep_the_certificate_served_and_are_reported_once() {
    let dir = TempDir::new("tls-unusable").unwrap();
    let ca = TestCa::new("unusable-ca");
    let (first, second) = (ca.server_cert(1), ca.server_cert(2));
    write_files(&dir, &first);
    let served = serve(files_config(&dir)).await;
    let client = ca.client_config(None);
    replace(dir.join("tls.crt"), "not a certificate").unwrap();
    // once for these contents, however many times they are read
    counts_once(served.plain, "tls_reload_errors", 1).await;
    assert_eq!(served_cert(served.https, &client).await, first.cert_der, "a broken certificate file");

    replace(dir.join("tls.crt"), &second.cert_pem).unwrap();
    counts_once(served.plain, "tls_reload_errors", 2).await;
    assert_eq!(served_cert(served.https, &client).await, first.cert_der, "a key that is not the certificate's");

    std::fs::remove_file(dir.join("tls.key")).unwrap();
    counts_once(served.plain, "tls_reload_errors", 3).await;
    assert_eq!(served_cert(served.https, &client).await, first.cert_der, "a missing key file");

    let truncated = &second.key_pem[..second.key_pem.len() / 2];
    replace(dir.join("tls.key"), truncated).unwrap();
    counts_once(served.plain, "tls_reload_errors", 4).await;
    assert_eq!(served_cert(served.https, &client).await, first.cert_der, "a truncated key");
    assert_eq!(counter(served.plain, "tls_reloads").await, 0);

    replace(dir.join("tls.key"), &second.key_pem).unwrap();
    wait_for_cert(served.https, &client, &second, Duration::from_secs(5)).await;
    assert_eq!(counter(served.plain, "tls_reloads").await, 1);
    assert_eq!(counter(served.plain, "tls_reload_errors").await, 4);
}

#[tokio::test]
async fn unusable_files_at_start_are_an_error() {
    let dir = TempDir::new("tls-start").unwrap();
    let ca = TestCa::new("start-ca");
    let (first, second) = (ca.server_cert(1), ca.server_cert(2));
    let missing = TlsConfig::from_files(dir.join("tls.crt"), dir.join("tls.key")).unwrap_err();
    assert!(matches!(missing, TlsError::Read { .. }), "{missing:?}");
    replace(dir.join("tls.crt"), &first.cert_pem).unwrap();
    replace(dir.join("tls.key"), &second.key_pem).unwrap();
    let mismatched = TlsConfig::from_files(dir.join("tls.crt"), dir.join("tls.key")).unwrap_err();
    assert!(matches!(mismatched, TlsError::KeyMismatch { .. }), "{mismatched:?}");
    replace(dir.join("ca.pem"), "no certificate here").unwrap();
    write_files(&dir, &first);
    let config = TlsConfig::from_files(dir.join("tls.crt"), dir.join("tls.key")).unwrap();
    let no_ca = config.with_client_ca_file(dir.join("ca.pem")).unwrap_err();
    assert!(matches!(no_ca, TlsError::NoCertificate { .. }), "{no_ca:?}");
    // into the runtime's error, for a binary's `?`
    assert!(matches!(Error::from(no_ca), Error::Tls(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_set_in_memory_reaches_new_connections_at_once() {
    let ca = TestCa::new("memory-ca");
    let (first, second) = (ca.server_cert(1), ca.server_cert(2));
    let resolver = Arc::new(CertResolver::from_pem(first.cert_pem.as_bytes(), first.key_pem.as_bytes()).unwrap());
    let served = serve(TlsConfig::from_resolver(resolver.clone())).await;
    let client = ca.client_config(None);
    assert_eq!(served_cert(served.https, &client).await, first.cert_der);
    // the runtime hands out the same resolver
    let runtime_resolver = served.runtime.tls_resolver().unwrap();
    assert!(Arc::ptr_eq(&resolver, &runtime_resolver));
    // the same client again: its session of the first certificate must not resume
    runtime_resolver.set_pem(second.cert_pem.as_bytes(), second.key_pem.as_bytes()).unwrap();
    assert_eq!(served_cert(served.https, &client).await, second.cert_der);
    assert!(runtime_resolver.set_pem(first.cert_pem.as_bytes(), second.key_pem.as_bytes()).is_err());
    assert_eq!(served_cert(served.https, &client).await, second.cert_der);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_client_ca_only_its_certificates_are_let_in() {
    let dir = TempDir::new("tls-clients").unwrap();
    let server_ca = TestCa::new("server-ca");
    let (clients_ca, other_ca) = (TestCa::new("clients-ca"), TestCa::new("other-ca"));
    write_files(&dir, &server_ca.server_cert(1));
    replace(dir.join("client-ca.pem"), clients_ca.cert_pem()).unwrap();
    let tls = files_config(&dir).with_client_ca_file(dir.join("client-ca.pem")).unwrap();
    assert!(tls.requires_client_certificates());
    let served = serve(tls).await;
    let roots = [server_ca.cert_der()];
    let apiserver = clients_ca.client_cert("kube-apiserver", 10);
    let intruder = other_ca.client_cert("intruder", 11);

    for versions in [rustls::DEFAULT_VERSIONS, &[&rustls::version::TLS12]] {
        let anonymous = https_get(served.https, "/api", client_config(&roots, None, versions)).await.unwrap_err();
        assert!(
            anonymous.to_string().contains("CertificateRequired") || anonymous.to_string().contains("HandshakeFailure"),
            "{anonymous}"
        );
        let stranger = https_get(served.https, "/api", client_config(&roots, Some(&intruder), versions)).await;
        assert!(stranger.as_ref().unwrap_err().to_string().contains("UnknownCA"), "{stranger:?}");
        let known = get_ok(served.https, "/api", &client_config(&roots, Some(&apiserver), versions)).await;
        assert_eq!((known.status, known.body.as_str()), (200, "api"), "{versions:?}");
    }
    // probes without a certificate go to the plain listener
    assert_eq!(http_get(served.plain, "/readyz").await, Some((200, "ok".into())));

    // the bundle is re-read: now the other CA's clients only
    replace(dir.join("client-ca.pem"), other_ca.cert_pem()).unwrap();
    let start = Instant::now();
    let intruder_client = client_config(&roots, Some(&intruder), rustls::DEFAULT_VERSIONS);
    while https_get(served.https, "/api", intruder_client.clone()).await.is_err() {
        assert!(start.elapsed() < Duration::from_secs(5), "the changed client CA bundle was not taken up");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let apiserver_client = client_config(&roots, Some(&apiserver), rustls::DEFAULT_VERSIONS);
    assert!(https_get(served.https, "/api", apiserver_client).await.is_err());
    // an unusable bundle keeps the one in use
    replace(dir.join("client-ca.pem"), "garbage").unwrap();
    counts_once(served.plain, "tls_reload_errors", 1).await;
    assert_eq!(get_ok(served.https, "/api", &intruder_client).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_accepting_and_lets_open_requests_finish() {
    let dir = TempDir::new("tls-shutdown").unwrap();
    let ca = TestCa::new("shutdown-ca");
    write_files(&dir, &ca.server_cert(1));
    let served = serve(files_config(&dir)).await;
    let client = ca.client_config(None);

    // an idle kept-alive connection must not hold the drain up
    let connection = TcpStream::connect(served.https).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(client.clone())
        .connect(ServerName::IpAddress(served.https.ip().into()), connection)
        .await
        .unwrap();
    let (mut idle, idle_connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.unwrap();
    let idle_connection = tokio::spawn(idle_connection);
    let request = http::Request::get("/api").header("host", "localhost").body(Empty::<Bytes>::new()).unwrap();
    assert_eq!(idle.send_request(request).await.unwrap().status(), 200);

    let slow = tokio::spawn(https_get(served.https, "/slow", client.clone()));
    let entered = served.entered.clone();
    let start = Instant::now();
    // the work ends once the slow request is being handled: shutdown begins
    let result = served.runtime.run(async move { entered.notified().await }).await;
    assert!(matches!(result, Err(Error::WorkEnded)), "{result:?}");
    let response = slow.await.unwrap().expect("the open request finished");
    assert_eq!((response.status, response.body.as_str()), (200, "slow"));
    assert!(start.elapsed() < Duration::from_millis(900), "drained, not timed out: {:?}", start.elapsed());
    let closed = tokio::time::timeout(Duration::from_secs(1), idle_connection).await;
    assert!(closed.expect("the idle connection closed").is_ok());
    assert!(https_get(served.https, "/api", client).await.is_err(), "no longer served");
    assert!(TcpStream::connect(served.https).await.is_err(), "the port is closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_address_for_both_everything_is_https() {
    capture_logs();
    let dir = TempDir::new("tls-one-address").unwrap();
    let ca = TestCa::new("one-address-ca");
    write_files(&dir, &ca.server_cert(1));
    let kubeconfig = KubeconfigFile::new(&unreachable_url()).unwrap();
    let runtime = Runtime::builder("tls-test", &common::flags(&kubeconfig, Duration::from_secs(1)))
        .tls(Some(files_config(&dir)))
        .build()
        .await
        .unwrap();
    let [address] = runtime.admin_addresses()[..] else { panic!("{:?}", runtime.admin_addresses()) };
    let metrics = get_ok(address, "/metrics", &ca.client_config(None)).await;
    assert!(metrics.status == 200 && metrics.body.contains("tls_test_tls_reloads_total 0"), "{metrics:?}");
    assert_eq!(http_get(address, "/metrics").await, None, "no plain HTTP");
}
