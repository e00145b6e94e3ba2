//! The listener limits against hostile clients, over real sockets on 127.0.0.1, plain and
//! TLS alike: 200 connections trickling a body or their headers are each cut within the
//! timeouts of sending their headers (however many wait behind the in-flight limit: a
//! request that gets its turn late has only what is left of its time) while `/healthz`
//! answers; bodies held at once stay within
//! `--max-requests-inflight`; a body over the limit is refused unread; a connection over
//! `--max-connections` is closed as it arrives.

mod common;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::routing::post;
use controller_support::{CertResolver, Runtime, ServerFlags, TlsConfig};
use edgegrid_testing::tls::TestCa;
use edgegrid_testing::{KubeconfigFile, http_get, unreachable_url};
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

const TIMEOUT: Duration = Duration::from_secs(2);
const INFLIGHT: u32 = 4;
const BODY_LIMIT: usize = 64 * 1024;
const CLIENTS: usize = 200;

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// How a test reaches the server: plain TCP, or TLS trusting the test CA.
#[derive(Clone)]
enum Dial {
    Plain(SocketAddr),
    Tls(SocketAddr, Arc<ClientConfig>),
}

impl Dial {
    async fn connect(&self) -> Pin<Box<dyn Stream>> {
        match self {
            Dial::Plain(address) => Box::pin(TcpStream::connect(address).await.unwrap()),
            Dial::Tls(address, client) => {
                let tcp = TcpStream::connect(address).await.unwrap();
                let name = ServerName::IpAddress(address.ip().into());
                Box::pin(tokio_rustls::TlsConnector::from(client.clone()).connect(name, tcp).await.unwrap())
            }
        }
    }

    fn address(&self) -> SocketAddr {
        match self {
            Dial::Plain(address) | Dial::Tls(address, _) => *address,
        }
    }

    /// `GET path` on a connection of its own: the status and body.
    async fn get(&self, path: &str) -> (u16, String) {
        let mut stream = self.connect().await;
        stream
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let answer = read_answer(&mut stream).await;
        (answer.status.expect("an answer"), answer.body)
    }
}

/// What a connection received until the server closed it.
#[derive(Debug)]
struct Answer {
    status: Option<u16>,
    body: String,
    closing: bool,
    /// When the server closed the connection.
    closed_at: Instant,
    /// When the client had sent its request's head (trickling clients only).
    sent_at: Option<Instant>,
}

/// The most a trickling client may stay connected after sending its head: the timeout,
/// the server's linger after an answer (500 ms) and scheduling slack. A request that got
/// its turn just before its wait ran out and then had a whole body timeout of its own
/// stays up to twice the timeout.
const CUT_WITHIN: Duration = TIMEOUT.saturating_add(Duration::from_millis(900));

async fn read_answer(stream: &mut (impl AsyncRead + Unpin)) -> Answer {
    let mut received = Vec::new();
    // a TLS peer may close without close_notify: what arrived is the answer either way
    let _ = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut received))
        .await
        .expect("the server closes the connection");
    let closed_at = Instant::now();
    let text = String::from_utf8_lossy(&received).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Answer {
        status: head.split_whitespace().nth(1).and_then(|status| status.parse().ok()),
        body: body.to_string(),
        closing: head.lines().any(|line| line.eq_ignore_ascii_case("connection: close")),
        closed_at,
        sent_at: None,
    }
}

/// Writes `head`, then `trickle` one byte every 100 ms while reading the answer (so a
/// reset after the server's close cannot hide it); counts `started` once `head` is sent.
async fn trickle(stream: Pin<Box<dyn Stream>>, head: &[u8], trickle: &[u8], started: Arc<Semaphore>) -> Answer {
    let (mut reader, mut writer) = tokio::io::split(stream);
    writer.write_all(head).await.unwrap();
    let sent_at = Instant::now();
    started.add_permits(1);
    let writing = async {
        for byte in trickle.iter().cycle().take(150) {
            if writer.write_all(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        std::future::pending::<()>().await
    };
    tokio::select! {
        answer = read_answer(&mut reader) => Answer { sent_at: Some(sent_at), ..answer },
        _ = writing => unreachable!("writing never ends"),
    }
}

/// Opens `CLIENTS` connections, each trickling (see [`trickle`]); returns once every one
/// has sent its `head`. The first `INFLIGHT` start a moment before the others, so that
/// the others' waits for the in-flight limit end just after the first ones' time does.
async fn trickling_clients(
    dial: &Dial,
    head: &'static [u8],
    bytes: &'static [u8],
) -> Vec<tokio::task::JoinHandle<Answer>> {
    let started = Arc::new(Semaphore::new(0));
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        if client == INFLIGHT as usize {
            let _first = started.acquire_many(INFLIGHT).await.unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let stream = dial.connect().await;
        clients.push(tokio::spawn(trickle(stream, head, bytes, started.clone())));
    }
    let _all = started.acquire_many(CLIENTS as u32 - INFLIGHT).await.unwrap();
    clients
}

/// Asserts that `answer`'s connection was cut within [`CUT_WITHIN`] of its head.
fn assert_cut_in_time(answer: &Answer) {
    let held = answer.closed_at - answer.sent_at.expect("a trickling client");
    assert!(held <= CUT_WITHIN, "held {held:?} after its head, more than {CUT_WITHIN:?}: {answer:?}");
}

/// A runtime serving `POST /echo` (the body's length, after 20 ms) with the test limits,
/// over TLS when `tls`; the handler records how many bodies it holds at once.
struct Server {
    _runtime: Runtime,
    dial: Dial,
    admin: SocketAddr,
    holding: Arc<AtomicUsize>,
    most_held: Arc<AtomicUsize>,
    _kubeconfig: KubeconfigFile,
}

async fn server(tls: bool, max_connections: u32) -> Server {
    common::capture_logs();
    let kubeconfig = KubeconfigFile::new(&unreachable_url()).unwrap();
    let mut flags = common::flags(&kubeconfig, Duration::from_secs(1));
    flags.metrics_bind_address = "127.0.0.2:0".parse().unwrap();
    flags.server = ServerFlags {
        read_header_timeout: TIMEOUT,
        read_body_timeout: TIMEOUT,
        max_connections,
        max_requests_inflight: INFLIGHT,
    };
    let (holding, most_held) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let echo = {
        let (holding, most_held) = (holding.clone(), most_held.clone());
        move |body: Bytes| async move {
            let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
            most_held.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            holding.fetch_sub(1, Ordering::SeqCst);
            body.len().to_string()
        }
    };
    let ca = TestCa::new("slow-clients-ca");
    let mut builder = Runtime::builder("slow-clients", &flags)
        .routes(Router::new().route("/echo", post(echo)))
        .max_request_body_bytes(BODY_LIMIT);
    if tls {
        let cert = ca.server_cert(1);
        let resolver = CertResolver::from_pem(cert.cert_pem.as_bytes(), cert.key_pem.as_bytes()).unwrap();
        builder = builder.tls(Some(TlsConfig::from_resolver(Arc::new(resolver))));
    }
    let runtime = builder.build().await.unwrap();
    runtime.mark_ready();
    let [api, admin] = runtime.admin_addresses()[..] else { panic!("{:?}", runtime.admin_addresses()) };
    let dial = if tls { Dial::Tls(api, ca.client_config(None)) } else { Dial::Plain(api) };
    Server { _runtime: runtime, dial, admin, holding, most_held, _kubeconfig: kubeconfig }
}

impl Server {
    async fn metrics(&self) -> String {
        http_get(self.admin, "/metrics").await.expect("metrics").1
    }

    /// Waits (5 s at most) until `open` connections other than the metrics scrape are open.
    async fn wait_for_connections(&self, open: u64) {
        let mut seen = None;
        for _ in 0..500 {
            // the scrape's own connection is one of them
            seen = sample(&self.metrics().await, "slow_clients_http_connections").map(|all| all - 1);
            if seen == Some(open) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{open} connections open, not {seen:?}");
    }
}

fn sample(exposition: &str, line_start: &str) -> Option<u64> {
    exposition.lines().find_map(|line| line.strip_prefix(line_start)?.strip_prefix(' ')?.parse().ok())
}

async fn trickling_bodies_are_cut_while_healthz_answers(tls: bool) {
    let server = server(tls, 1024).await;
    let head = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n";
    let clients = trickling_clients(&server.dial, head, b"x").await;
    let healthz = server.dial.get("/healthz").await;
    let healthz_at = Instant::now();
    assert_eq!(healthz, (200, "ok".into()), "/healthz while {CLIENTS} bodies trickle");

    let mut by_status = std::collections::BTreeMap::<u16, usize>::new();
    for (index, client) in clients.into_iter().enumerate() {
        let answer = client.await.unwrap();
        // (the first INFLIGHT started earlier, and may be cut before /healthz is asked)
        let later = index >= INFLIGHT as usize;
        assert!(!later || answer.closed_at > healthz_at, "cut only after /healthz answered: {answer:?}");
        assert!(answer.closing, "the answer closes the connection: {answer:?}");
        assert_cut_in_time(&answer);
        *by_status.entry(answer.status.expect("an answer before the close")).or_default() += 1;
    }
    let timed_out = by_status.get(&408).copied().unwrap_or(0);
    let waited = by_status.get(&503).copied().unwrap_or(0);
    assert_eq!(timed_out + waited, CLIENTS, "408 or 503 only: {by_status:?}");
    assert!(timed_out >= INFLIGHT as usize, "the {INFLIGHT} readers timed out: {by_status:?}");
    assert!(server.most_held.load(Ordering::SeqCst) == 0, "no trickled body reached the handler");

    let metrics = server.metrics().await;
    // (a waiter given its turn just before its deadline times out reading: 408; the split
    // depends on timing)
    let rejected = |reason: &str| {
        sample(&metrics, &format!("slow_clients_http_requests_rejected_total{{reason=\"{reason}\"}}")).unwrap_or(0)
    };
    assert_eq!(rejected("read_body_timeout"), timed_out as u64, "{metrics}");
    assert_eq!(rejected("inflight_wait_timeout"), waited as u64, "{metrics}");
    // and the server holds none of them any more (each lingers 500 ms after its answer)
    server.wait_for_connections(0).await;
}

async fn slow_headers_are_cut_while_healthz_answers(tls: bool) {
    let server = server(tls, 1024).await;
    let clients = trickling_clients(&server.dial, b"GET /healthz HTTP/1.1\r\n", b"X-Slow: x\r\n").await;
    assert_eq!(server.dial.get("/healthz").await, (200, "ok".into()), "/healthz while {CLIENTS} headers trickle");
    let healthz_at = Instant::now();
    for (index, client) in clients.into_iter().enumerate() {
        let answer = client.await.unwrap();
        assert!(index < INFLIGHT as usize || answer.closed_at > healthz_at, "{answer:?}");
        assert_cut_in_time(&answer);
        // hyper closes a connection whose headers are late without an answer (as Go does)
        assert_eq!((answer.status, answer.body.as_str()), (None, ""), "{answer:?}");
    }
}

async fn bodies_held_at_once_stay_within_the_inflight_limit(tls: bool) {
    let server = server(tls, 1024).await;
    let mut clients = Vec::new();
    for _ in 0..50 {
        let dial = server.dial.clone();
        clients.push(tokio::spawn(async move {
            let mut stream = dial.connect().await;
            let body = vec![b'x'; 60_000];
            let head = format!(
                "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            stream.write_all(head.as_bytes()).await.unwrap();
            stream.write_all(&body).await.unwrap();
            read_answer(&mut stream).await
        }));
    }
    for client in clients {
        let answer = client.await.unwrap();
        assert_eq!((answer.status, answer.body.as_str()), (Some(200), "60000"), "{answer:?}");
    }
    assert_eq!(server.holding.load(Ordering::SeqCst), 0);
    assert_eq!(server.most_held.load(Ordering::SeqCst), INFLIGHT as usize, "at most {INFLIGHT} bodies at once");

    // over the limit: refused before the body is read, the connection closed
    let mut stream = server.dial.connect().await;
    let head = format!("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n", BODY_LIMIT + 1);
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&vec![b'x'; BODY_LIMIT + 1]).await.unwrap();
    let answer = read_answer(&mut stream).await;
    assert_eq!(
        (answer.status, answer.body.as_str(), answer.closing),
        (Some(413), "the request body is larger than 65536 bytes", true)
    );
}

async fn connections_over_the_limit_are_closed_as_they_arrive(tls: bool) {
    let server = server(tls, 8).await;
    let mut held = Vec::new();
    for _ in 0..8 {
        let mut stream = server.dial.connect().await;
        // a request in progress keeps the connection open past the header timeout
        stream.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n").await.unwrap();
        held.push(stream);
    }
    // the server has taken the 8 (their requests are waiting for their bodies)
    server.wait_for_connections(8).await;
    // over TLS the handshake may finish first (handshakes in progress have their own bound)
    let refused = match &server.dial {
        Dial::Tls(address, client) => {
            let tcp = TcpStream::connect(address).await.unwrap();
            let name = ServerName::IpAddress(address.ip().into());
            match tokio_rustls::TlsConnector::from(client.clone()).connect(name, tcp).await {
                Ok(stream) => unanswered(Box::pin(stream)).await,
                Err(_) => true,
            }
        }
        Dial::Plain(address) => unanswered(Box::pin(TcpStream::connect(address).await.unwrap())).await,
    };
    assert!(refused, "the ninth connection is closed unanswered");
    let metrics = server.metrics().await;
    assert_eq!(sample(&metrics, "slow_clients_http_connections_refused_total"), Some(1), "{metrics}");

    // a finished request frees its place
    let mut first = held.remove(0);
    first.write_all(b"0123456789").await.unwrap();
    let answer = read_answer_of_one(&mut first).await;
    assert_eq!(answer, (200, "10".into()));
    drop(first);
    server.wait_for_connections(7).await;
    assert_eq!(server.dial.get("/healthz").await, (200, "ok".into()), "address {}", server.dial.address());
    drop(held);
}

/// Whether a request on `stream` gets nothing back before the connection closes.
async fn unanswered(mut stream: Pin<Box<dyn Stream>>) -> bool {
    let _ = stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let mut received = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut received)).await;
    read.is_ok() && received.is_empty()
}

/// The first answer on a kept-alive connection (its Content-Length says where it ends).
async fn read_answer_of_one(stream: &mut Pin<Box<dyn Stream>>) -> (u16, String) {
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer)).await.unwrap().unwrap();
        assert!(read > 0, "closed before a whole answer: {:?}", String::from_utf8_lossy(&received));
        received.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&received).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|line| line.to_ascii_lowercase().strip_prefix("content-length: ")?.parse().ok())
                .unwrap_or(0);
            if body.len() >= length {
                let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
                return (status, body[..length].to_string());
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_trickling_bodies_are_cut_while_healthz_answers() {
    trickling_bodies_are_cut_while_healthz_answers(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_trickling_bodies_are_cut_while_healthz_answers() {
    trickling_bodies_are_cut_while_healthz_answers(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_slow_headers_are_cut_while_healthz_answers() {
    slow_headers_are_cut_while_healthz_answers(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_slow_headers_are_cut_while_healthz_answers() {
    slow_headers_are_cut_while_healthz_answers(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_bodies_held_at_once_stay_within_the_inflight_limit() {
    bodies_held_at_once_stay_within_the_inflight_limit(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_bodies_held_at_once_stay_within_the_inflight_limit() {
    bodies_held_at_once_stay_within_the_inflight_limit(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_connections_over_the_limit_are_closed_as_they_arrive() {
    connections_over_the_limit_are_closed_as_they_arrive(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_connections_over_the_limit_are_closed_as_they_arrive() {
    connections_over_the_limit_are_closed_as_they_arrive(true).await;
}
