//! The HTTP/1.1 server behind every listener the runtime starts (plain or TLS), with the
//! limits a listener facing an edge site or an API server needs, so that slow or many
//! clients can neither hold the process's memory nor starve `/healthz`:
//! - a client has `--read-header-timeout` to send a request's headers (the same bound
//!   closes an idle keep-alive connection, and is the TLS handshake's bound);
//! - at most `--max-connections` connections are open per listener; one more is closed as
//!   it arrives (counted), before any byte of it is read (over TLS, once its handshake is
//!   done: handshakes in progress have their own bound, see [`TlsListener`](crate::tls::TlsListener));
//! - a request with a body is read whole before its handler runs, under the binary's body
//!   limit (413), by at most `--max-requests-inflight` requests at once per listener; the
//!   others wait unread (a few KiB of headers each). Waiting and reading together end
//!   within `--read-body-timeout` of the headers' arrival: 503 if the request was still
//!   waiting, 408 if its body was still arriving. So a client trickling a body is cut
//!   within the header and body timeouts (plus a moment's linger) of connecting, however
//!   many such clients queue behind the in-flight limit.
//!   Bodies held at once are thus bounded by `max-requests-inflight` times the body limit.
//! - requests without a body (every GET: probes, lists, long watches) never wait for that
//!   limit, so `/healthz` answers while bodies trickle.
//!
//! Answers to a request cut short carry `Connection: close`: its unread body would
//! otherwise be taken for the next request.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, HttpBody};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Semaphore, watch};
use tokio::task::{JoinHandle, JoinSet};
use tower::ServiceExt;

use crate::flags::parse_duration;
use crate::node_local::ClientNotAllowed;

/// What a connection's TLS handshake proved about its client (its certificate, or its raw
/// public key), for handlers that tell clients apart by identity rather than by address.
/// Requests on plain connections, or from clients that presented nothing, carry none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerCertificate(pub rustls::pki_types::CertificateDer<'static>);

/// A connection's I/O, and what it knows of its client.
pub trait ClientIdentity {
    /// The client's certificate (or raw public key), when a TLS handshake verified one.
    fn peer_certificate(&self) -> Option<PeerCertificate> {
        None
    }
}

impl ClientIdentity for tokio::net::TcpStream {}

impl ClientIdentity for tokio_rustls::server::TlsStream<tokio::net::TcpStream> {
    fn peer_certificate(&self) -> Option<PeerCertificate> {
        let certificate = self.get_ref().1.peer_certificates()?.first()?;
        Some(PeerCertificate(certificate.clone().into_owned()))
    }
}

/// The body limit of a binary that sets none, kube-apiserver's `--max-request-body-bytes`
/// default.
pub const DEFAULT_MAX_REQUEST_BODY_BYTES: usize = 3 * 1024 * 1024;
/// The most a client may send as a request line and headers (hyper's read buffer limit;
/// Kubernetes' own requests stay far below it).
const MAX_HEADER_BYTES: usize = 64 * 1024;
const MAX_HEADERS: usize = 100;

/// Limits of every listener the runtime starts (Kubernetes-style flags; part of
/// `RuntimeFlags`).
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct ServerFlags {
    /// How long a client may take to send a request's headers (or a TLS handshake); an
    /// idle keep-alive connection is closed after it too.
    #[arg(long, default_value = "10s", value_parser = positive_duration)]
    pub read_header_timeout: Duration,
    /// How long a request may take, from its headers' arrival, to wait for
    /// --max-requests-inflight (then 503) and send its whole body (then 408).
    #[arg(long, default_value = "30s", value_parser = positive_duration)]
    pub read_body_timeout: Duration,
    /// Most connections open at once per listener; more are closed as they arrive.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// Most requests with a body read and handled at once per listener; more wait unread.
    /// Request bodies held in memory stay under this times the binary's body limit.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_requests_inflight: u32,
}

impl Default for ServerFlags {
    fn default() -> Self {
        Self {
            read_header_timeout: Duration::from_secs(10),
            read_body_timeout: Duration::from_secs(30),
            max_connections: 1024,
            max_requests_inflight: 16,
        }
    }
}

fn positive_duration(value: &str) -> Result<Duration, String> {
    match parse_duration(value)? {
        Duration::ZERO => Err("must be more than 0s".into()),
        duration => Ok(duration),
    }
}

/// What one listener enforces: the flags plus the binary's body limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    pub flags: ServerFlags,
    /// The largest request body the binary accepts (413 above).
    pub max_request_body_bytes: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self { flags: ServerFlags::default(), max_request_body_bytes: DEFAULT_MAX_REQUEST_BODY_BYTES }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RejectionLabels {
    reason: Rejection,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelValue)]
#[allow(non_camel_case_types, reason = "the label values as exported")]
enum Rejection {
    read_body_timeout,
    body_too_large,
    body_unreadable,
    inflight_wait_timeout,
    /// A node-local endpoint asked by a client outside its allowed networks
    /// ([`NodeLocal`](crate::node_local::NodeLocal)).
    client_not_allowed,
}

/// `<prefix>_http_connections` (open now), `<prefix>_http_connections_refused_total`
/// (closed at once: --max-connections) and `<prefix>_http_requests_rejected_total{reason}`
/// (answered by the server itself, or refused by a node-local route), over every listener
/// of the process.
#[derive(Clone, Debug, Default)]
pub struct ServerMetrics {
    connections: Gauge,
    connections_refused: Counter,
    requests_rejected: Family<RejectionLabels, Counter>,
}

impl crate::metrics::Register for ServerMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register("http_connections", "Connections open on the HTTP listeners", self.connections.clone());
        registry.register(
            "http_connections_refused",
            "Connections closed as they arrived because --max-connections were open",
            self.connections_refused.clone(),
        );
        registry.register(
            "http_requests_rejected",
            "Requests the HTTP server answered itself: a body too slow or too large, a wait for \
             --max-requests-inflight too long, or a node-local endpoint asked from another host \
             (client_not_allowed)",
            self.requests_rejected.clone(),
        );
    }
}

impl ServerMetrics {
    fn reject(&self, reason: Rejection) {
        self.requests_rejected.get_or_create(&RejectionLabels { reason }).inc();
    }
}

/// Serves `app` on `listener` (plain TCP, or HTTPS through a
/// [`TlsListener`](crate::tls::TlsListener)) under `limits` until `stop` turns true; then
/// stops accepting, lets each open connection finish the request it is in and closes it
/// (the caller bounds how long it waits for that). Handlers may extract
/// `ConnectInfo<SocketAddr>`, the peer's address.
pub fn serve<L>(
    listener: L,
    app: Router,
    limits: ServerLimits,
    metrics: ServerMetrics,
    stop: watch::Receiver<bool>,
) -> (SocketAddr, JoinHandle<()>)
where
    L: axum::serve::Listener<Addr = SocketAddr>,
    L::Io: AsyncRead + AsyncWrite + ClientIdentity + Unpin + Send + 'static,
{
    let address = listener.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let guard = BodyGuard {
        inflight: Arc::new(Semaphore::new(limits.flags.max_requests_inflight as usize)),
        read_body_timeout: limits.flags.read_body_timeout,
        max_body_bytes: limits.max_request_body_bytes,
        metrics: metrics.clone(),
    };
    let app = app
        .layer(axum::middleware::from_fn_with_state(guard, read_body_first))
        .layer(axum::middleware::from_fn_with_state(metrics.clone(), count_refusals));
    let server = tokio::spawn(accept(listener, app, limits.flags, metrics, stop));
    (address, server)
}

async fn accept<L>(
    mut listener: L,
    app: Router,
    flags: ServerFlags,
    metrics: ServerMetrics,
    mut stop: watch::Receiver<bool>,
) where
    L: axum::serve::Listener<Addr = SocketAddr>,
    L::Io: AsyncRead + AsyncWrite + ClientIdentity + Unpin + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(flags.max_connections as usize));
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            (io, peer) = listener.accept() => {
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    metrics.connections_refused.inc();
                    tracing::debug!(%peer, max_connections = flags.max_connections, "too many connections: closing");
                    continue;
                };
                let connection = Connection { peer, app: app.clone(), metrics: metrics.clone(), stop: stop.clone() };
                connections.spawn(async move {
                    connection.serve(io, flags.read_header_timeout).await;
                    drop(slot);
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = stopped(&mut stop) => break,
        }
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

struct Connection {
    peer: SocketAddr,
    app: Router,
    metrics: ServerMetrics,
    stop: watch::Receiver<bool>,
}

impl Connection {
    async fn serve<I>(mut self, io: I, read_header_timeout: Duration)
    where
        I: AsyncRead + AsyncWrite + ClientIdentity + Unpin + Send + 'static,
    {
        self.metrics.connections.inc();
        let (peer, app) = (self.peer, self.app.clone());
        let certificate = io.peer_certificate();
        // a boxed future, so hyper can hand the connection back once it is done with it
        let service = hyper::service::service_fn(move |mut request: Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            if let Some(certificate) = &certificate {
                request.extensions_mut().insert(certificate.clone());
            }
            let app = app.clone();
            Box::pin(async move { app.oneshot(request).await }) as Pin<Box<dyn Future<Output = _> + Send>>
        });
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(read_header_timeout)
            .max_buf_size(MAX_HEADER_BYTES)
            .max_headers(MAX_HEADERS);
        let mut connection = http.serve_connection(TokioIo::new(io), service);
        let mut stopping = false;
        let served = loop {
            tokio::select! {
                served = std::future::poll_fn(|cx| connection.poll_without_shutdown(cx)) => break served,
                _ = stopped(&mut self.stop), if !stopping => {
                    stopping = true;
                    Pin::new(&mut connection).graceful_shutdown();
                }
            }
        };
        match served {
            Ok(()) => linger(connection.into_parts().io.into_inner()).await,
            // a client gone, a header timeout, a malformed request: the client's doing
            Err(error) => tracing::debug!(%peer, %error, "connection ended"),
        }
        self.metrics.connections.dec();
    }
}

/// Closes a connection as Go's server does after answering a request whose body it did
/// not read: our side first, then whatever the client still sends is read and dropped for
/// a moment. Closing with unread bytes would reset the connection, and a client whose
/// socket is reset may lose the answer (a 408 or 413) before reading it.
async fn linger<I: AsyncRead + AsyncWrite + Unpin>(mut io: I) {
    const LINGER: Duration = Duration::from_millis(500);
    let drain = async {
        io.shutdown().await?;
        let mut discard = [0u8; 8192];
        while io.read(&mut discard).await? > 0 {}
        Ok::<_, std::io::Error>(())
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

#[derive(Clone)]
struct BodyGuard {
    inflight: Arc<Semaphore>,
    read_body_timeout: Duration,
    max_body_bytes: usize,
    metrics: ServerMetrics,
}

/// Reads a request's body whole (bounded in size, time and concurrency) before the handler
/// runs; a request without one goes straight through.
async fn read_body_first(State(guard): State<BodyGuard>, request: Request, next: Next) -> Response {
    if request.body().size_hint().exact() == Some(0) {
        return next.run(request).await;
    }
    // one deadline for the wait and the read: a request that got its turn just before its
    // wait ran out must not start a whole body timeout anew (slow bodies queued behind the
    // in-flight limit would otherwise be held twice as long, and so on down the queue)
    let deadline = tokio::time::Instant::now() + guard.read_body_timeout;
    let Ok(Ok(permit)) = tokio::time::timeout_at(deadline, guard.inflight.clone().acquire_owned()).await else {
        guard.metrics.reject(Rejection::inflight_wait_timeout);
        let mut response = closing(StatusCode::SERVICE_UNAVAILABLE, "too many requests in flight, retry later");
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return response;
    };
    let (parts, body) = request.into_parts();
    let read = tokio::time::timeout_at(deadline, Limited::new(body, guard.max_body_bytes).collect());
    let body = match read.await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Err(_) => {
            guard.metrics.reject(Rejection::read_body_timeout);
            let message = format!("the request body was not received within {:?}", guard.read_body_timeout);
            return closing(StatusCode::REQUEST_TIMEOUT, message);
        }
        Ok(Err(error)) if error.downcast_ref::<LengthLimitError>().is_some() => {
            guard.metrics.reject(Rejection::body_too_large);
            let message = format!("the request body is larger than {} bytes", guard.max_body_bytes);
            return closing(StatusCode::PAYLOAD_TOO_LARGE, message);
        }
        Ok(Err(error)) => {
            guard.metrics.reject(Rejection::body_unreadable);
            return closing(StatusCode::BAD_REQUEST, format!("reading the request body: {error}"));
        }
    };
    let response = next.run(Request::from_parts(parts, Body::from(body))).await;
    drop(permit);
    response
}

/// Counts the refusals a route layer marked (see [`ClientNotAllowed`]).
async fn count_refusals(State(metrics): State<ServerMetrics>, request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    if response.extensions().get::<ClientNotAllowed>().is_some() {
        metrics.reject(Rejection::client_not_allowed);
    }
    response
}

/// Sends small writes at once (as Go servers do): a watch event is one small write, and
/// Nagle's algorithm would hold it back until the previous one is acknowledged.
pub fn no_delay(connection: &mut tokio::net::TcpStream) {
    if let Err(error) = connection.set_nodelay(true) {
        tracing::debug!(%error, "TCP_NODELAY not set");
    }
}

fn closing(status: StatusCode, message: impl Into<String>) -> Response {
    let mut response = (status, message.into()).into_response();
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;

    /// A route's refusal of a client (marked [`ClientNotAllowed`]) is counted once; other
    /// answers, 403s included, are not.
    #[tokio::test]
    async fn refusals_of_clients_marked_by_a_route_are_counted() {
        let refuse = || async {
            let mut response = StatusCode::FORBIDDEN.into_response();
            response.extensions_mut().insert(ClientNotAllowed);
            response
        };
        let app = Router::new()
            .route("/refused", get(refuse))
            .route("/forbidden", get(|| async { StatusCode::FORBIDDEN }))
            .route("/ok", get(|| async { "ok" }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let metrics = ServerMetrics::default();
        let (stop, stopped) = watch::channel(false);
        let (address, server) = serve(listener, app, ServerLimits::default(), metrics.clone(), stopped);
        for path in ["/refused", "/forbidden", "/ok"] {
            edgegrid_testing::http_get(address, path).await.expect("answered");
        }
        let counted = |reason| metrics.requests_rejected.get_or_create(&RejectionLabels { reason }).get();
        assert_eq!(counted(Rejection::client_not_allowed), 1);
        stop.send_replace(true);
        server.await.expect("stopped");
    }
}
