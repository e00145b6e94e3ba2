//! The unit leader's server: the [`UpstreamLog`] served to the unit's other wrappers over
//! the site LAN, with the Kubernetes list/watch protocol their unmodified kube-rs watchers
//! speak to the cloud, over mutual TLS keyed by the members' node identities
//! (`crate::node_identity`; the TLS layer admits members only).
//!
//! Served: the log itself to the unit's standby (`GET /unit/v1/log`, see
//! [`crate::replication`]), and GET list and watch, cluster-wide, of `/api/v1/services`,
//! `/apis/discovery.k8s.io/v1/endpointslices`, `/api/v1/endpoints` and `/api/v1/nodes`
//! (metadata-only requests, as kube-rs' `Api<PartialObjectMeta<Node>>` sends, get every
//! node's metadata; whole-object requests the members' Nodes, which followers select by
//! `fieldSelector=metadata.name=<node>`). Nothing else: other paths are 404, other
//! methods 405, both as `Status` objects.
//!
//! It must never answer a list or watch before the log has synced (503 with
//! `Retry-After`): an empty answer would make a follower delete everything it serves.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderValue, Method, Request, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use controller_support::metrics::Register;
use controller_support::server::{ServerLimits, ServerMetrics};
use controller_support::tls::{TlsListener, TlsMetrics};
use futures::{Stream, StreamExt};
use listwatch::{ListOptions, Representation, Shape, WatchConfig, WatchOptions};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use controller_support::server::PeerCertificate;

use crate::api_status::{not_serving, status_response};
use crate::upstream_log::{LogSlot, UpstreamKind, UpstreamLog};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabel {
    /// [`UpstreamKind::name`]
    pub resource: &'static str,
}

/// What the leader's server counts, for the caller's registry.
#[derive(Clone, Debug, Default)]
pub struct UnitServerMetrics {
    /// Followers (distinct verified keys; addresses on plain connections) with at least
    /// one open watch now.
    pub followers: Gauge,
    /// Body bytes of lists and watches sent to followers, by kind.
    pub served_bytes: Family<ResourceLabel, Counter>,
    /// Open watches per follower.
    watching: Arc<Mutex<HashMap<FollowerId, usize>>>,
}

impl Register for UnitServerMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "unit_followers",
            "Unit members (distinct verified keys) watching this wrapper as their unit's leader",
            self.followers.clone(),
        );
        registry.register(
            "unit_served_bytes",
            "Body bytes of lists and watches sent to the unit's followers, by resource",
            self.served_bytes.clone(),
        );
    }
}

impl UnitServerMetrics {
    /// Counts one open watch of `peer` for as long as the guard lives.
    fn watching(&self, peer: FollowerId) -> FollowerGuard {
        let mut watching = self.watching.lock().unwrap_or_else(PoisonError::into_inner);
        let open = watching.entry(peer.clone()).or_default();
        *open += 1;
        if *open == 1 {
            self.followers.inc();
        }
        FollowerGuard { metrics: self.clone(), peer }
    }
}

struct FollowerGuard {
    metrics: UnitServerMetrics,
    peer: FollowerId,
}

/// Who a follower is: the key its TLS handshake proved (several wrappers can share one
/// source address, e.g. behind NAT), or its address on a plain connection.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum FollowerId {
    Key(Vec<u8>),
    Address(IpAddr),
}

impl Drop for FollowerGuard {
    fn drop(&mut self) {
        let mut watching = self.metrics.watching.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(open) = watching.get_mut(&self.peer) {
            *open -= 1;
            if *open == 0 {
                watching.remove(&self.peer);
                self.metrics.followers.dec();
            }
        }
    }
}

/// What a server serves: one log, or whichever the unit's leader slot holds now.
pub trait ServedLog: Send + Sync + 'static {
    /// The log requests are answered from now; `None` (this wrapper does not lead) is 503.
    fn current(&self) -> Option<Arc<UpstreamLog>>;
}

impl ServedLog for Arc<UpstreamLog> {
    fn current(&self) -> Option<Arc<UpstreamLog>> {
        Some(self.clone())
    }
}

/// A server that outlives terms of leadership answers from the current term's log (the
/// unit's leader slot).
impl ServedLog for LogSlot {
    fn current(&self) -> Option<Arc<UpstreamLog>> {
        LogSlot::current(self)
    }
}

/// How the leader answers its followers.
#[derive(Clone, Copy, Debug)]
pub struct ServeConfig {
    pub watch: WatchConfig,
    /// How long a request waits for a new leader's first sync before it is answered 503:
    /// followers' relists wait for the sync here rather than being told to come back
    /// (their watchers' backoff would add a second or more to a failover).
    pub sync_wait: Duration,
}

/// How long a follower's watch that names no `timeoutSeconds` lasts: kube-apiserver's
/// `--min-request-timeout`, as the wrapper's own server answers kube-proxy.
const WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

/// For followers: a bookmark every second keeps a healthy watch talking, so a follower's
/// read timeout of a few seconds tells a silent leader from a quiet cluster.
pub const UNIT_SERVE: ServeConfig = ServeConfig {
    watch: WatchConfig { bookmark_interval: Duration::from_secs(1), default_timeout: WATCH_TIMEOUT },
    sync_wait: Duration::from_secs(10),
};

#[derive(Clone)]
struct Served {
    log: Arc<dyn ServedLog>,
    watch: WatchConfig,
    sync_wait: Duration,
    metrics: UnitServerMetrics,
    /// Turns true when the server stops: every open watch ends.
    stop: watch::Receiver<bool>,
}

/// The served API, answered from `log` ([`ServedLog`]). `stop` (the one given to
/// [`listen`]) ends every open watch when it turns true, which lets the server's graceful
/// shutdown complete; [`UpstreamLog::close`] ends the watches of that log.
pub fn router(
    log: impl ServedLog,
    config: ServeConfig,
    metrics: UnitServerMetrics,
    stop: watch::Receiver<bool>,
) -> Router {
    let served = Served { log: Arc::new(log), watch: config.watch, sync_wait: config.sync_wait, metrics, stop };
    Router::new().fallback(dispatch).with_state(served)
}

/// A resource a path names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resource {
    Services,
    EndpointSlices,
    Endpoints,
    /// Node metadata or the unit's Nodes, by the `Accept` header.
    Nodes,
    /// The unit signer's ConfigMap (any namespace's path: the leader holds one object).
    ConfigMaps,
}

fn resource(path: &str) -> Option<Resource> {
    match path {
        "/api/v1/services" => Some(Resource::Services),
        "/apis/discovery.k8s.io/v1/endpointslices" => Some(Resource::EndpointSlices),
        "/api/v1/endpoints" => Some(Resource::Endpoints),
        "/api/v1/nodes" => Some(Resource::Nodes),
        _ => path
            .strip_prefix("/api/v1/namespaces/")
            .and_then(|rest| rest.strip_suffix("/configmaps"))
            .filter(|namespace| !namespace.is_empty() && !namespace.contains('/'))
            .map(|_| Resource::ConfigMaps),
    }
}

async fn dispatch(State(served): State<Served>, request: Request<Body>) -> Response {
    if request.uri().path() == crate::replication::PATH && request.method() == Method::GET {
        return replicate(&served);
    }
    let Some(resource) = resource(request.uri().path()) else {
        let message = "the server could not find the requested resource";
        return status_response(404, &listwatch::status(404, "NotFound", message, None));
    };
    if request.method() != Method::GET {
        let message = format!("{} is not supported: the unit leader serves list and watch only", request.method());
        let mut response = status_response(405, &listwatch::status(405, "MethodNotAllowed", &message, None));
        response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET"));
        return response;
    }
    let query = match Query::<HashMap<String, String>>::try_from_uri(request.uri()) {
        Ok(Query(query)) => query,
        Err(rejection) => {
            let message = format!("invalid query: {}", rejection.body_text());
            return status_response(400, &listwatch::status(400, "BadRequest", &message, None));
        }
    };
    let accept = request.headers().get(header::ACCEPT).and_then(|a| a.to_str().ok());
    let term = request.headers().get(TERM_HEADER).and_then(|t| t.to_str().ok());
    let key = request.extensions().get::<PeerCertificate>().map(|PeerCertificate(key)| FollowerId::Key(key.to_vec()));
    let address =
        request.extensions().get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(peer)| FollowerId::Address(peer.ip()));
    let peer = key.or(address);
    // a leader that just took over syncs from the cloud first (see `ServeConfig::sync_wait`)
    if let Some(log) = served.log.current() {
        let mut synced = log.synced_changes();
        let _ = tokio::time::timeout(served.sync_wait, synced.wait_for(|synced| *synced)).await;
    }
    match serve(&served, resource, &query, accept, term, peer) {
        Ok(response) => response,
        Err(error) => status_response(error.code(), &error.status()),
    }
}

fn serve(
    served: &Served,
    resource: Resource,
    query: &HashMap<String, String>,
    accept: Option<&str>,
    term: Option<&str>,
    peer: Option<FollowerId>,
) -> Result<Response, listwatch::Error> {
    let kind = match resource {
        Resource::Services => UpstreamKind::Services,
        Resource::EndpointSlices => UpstreamKind::EndpointSlices,
        Resource::Endpoints => UpstreamKind::Endpoints,
        // both node kinds are served as v1 Node: the negotiated shape picks one
        Resource::Nodes => UpstreamKind::UnitNodes,
        Resource::ConfigMaps => UpstreamKind::Digests,
    };
    let representation = Representation::negotiate(kind.served(), accept)?;
    let kind = match (resource, representation.shape) {
        (Resource::Nodes, Shape::Metadata) => UpstreamKind::NodeMetadata,
        _ => kind,
    };
    let Some(log) = served.log.current() else {
        return Ok(not_serving("this grid wrapper does not lead its unit"));
    };
    // `synced` never turns back, and a log closed in between ends its watches at once
    if !log.serving() {
        return Ok(not_serving("the unit leader has not synced with the upstream API server yet"));
    }
    let sent = served.metrics.served_bytes.get_or_create(&ResourceLabel { resource: kind.name() }).clone();
    // a version (or continue token) of another leader's log means nothing in this one
    let term: Option<u64> = term.map(|term| term.parse().unwrap_or(u64::MAX));
    let foreign = |resumed: Option<u64>| {
        let taken = term.is_none_or(|term| log.resumes(term, resumed));
        (!taken).then(|| listwatch::Error::Expired {
            requested: resumed.unwrap_or_default(),
            oldest: log.read(|log| log.current_rv()),
        })
    };
    if !listwatch::is_watch(query) {
        let opts = ListOptions::from_query(query, None)?;
        // a continue token, or a version other than "any" (0) and "latest" (none)
        let expired = match (&opts.continue_token, opts.resource_version) {
            (Some(_), _) => foreign(None),
            (None, Some(rv)) if rv > 0 => foreign(Some(rv)),
            (None, _) => None,
        };
        if let Some(expired) = expired {
            return Err(expired);
        }
        let page = log.read(|log| log.list(&kind, &opts))?;
        let content_type = representation.content_type(false);
        let chunks = futures::stream::iter(listwatch::ListBody::new(page, representation));
        let headers = [(header::CONTENT_TYPE, content_type)];
        return Ok((headers, [term_header(&log)], counted(chunks, sent, None)).into_response());
    }
    let opts = WatchOptions::from_query(query, None)?;
    // as kube-apiserver answers a version it no longer has: 410 in the watch stream
    let expired = opts.resume_after().and_then(|rv| foreign(Some(rv)));
    let answered_here = expired.is_none();
    let start = match expired {
        Some(expired) => Err(expired),
        None => log.read(|log| log.watch(&kind, &opts)),
    };
    tracing::debug!(peer = ?peer, resource = kind.name(), "follower watch started");
    let follower = peer.map(|peer| served.metrics.watching(peer));
    let content_type = representation.content_type(true);
    let (server_stopped, log_closed) = (stopped(served.stop.clone()), log.closed());
    let stop = async move {
        tokio::select! {
            () = server_stopped => {}
            () = log_closed => {}
        }
    };
    let events = listwatch::watch_stream(start, opts, representation, served.watch, stop);
    let headers = [(header::CONTENT_TYPE, content_type)];
    // a foreign answer (410 in the stream) names no term: a client cut off before that
    // line must not resume its version as this log's
    let mut response = (headers, counted(events, sent, follower)).into_response();
    if answered_here {
        let (name, value) = term_header(&log);
        response.headers_mut().insert(name, value);
    }
    Ok(response)
}

/// Which log a list or watch was answered from (its term, [`UpstreamLog::term`]), and, on
/// a request, which log the version or continue token it resumes from belongs to: a log
/// that does not take it ([`UpstreamLog::resumes`]) answers 410 (the client relists)
/// instead of taking the version for one of its own. A standby leading from its replica
/// takes its old leader's versions up to the last it replicated, so followers resume on it.
pub const TERM_HEADER: &str = "edgegrid-unit-log-term";

fn term_header(log: &UpstreamLog) -> (axum::http::HeaderName, HeaderValue) {
    (axum::http::HeaderName::from_static(TERM_HEADER), HeaderValue::from(log.term()))
}

/// The log to the unit's standby ([`crate::replication`]): only a synced log is replicated
/// (a standby must never take a partial state for its leader's).
fn replicate(served: &Served) -> Response {
    let Some(log) = served.log.current().filter(|log| log.serving()) else {
        return not_serving("this grid wrapper does not lead its unit, or has not synced yet");
    };
    let sent = served.metrics.served_bytes.get_or_create(&ResourceLabel { resource: "log" }).clone();
    let lines = crate::replication::stream(log, crate::replication::TICK, stopped(served.stop.clone()));
    tracing::info!("the unit's standby replicates this leader's log");
    ([(header::CONTENT_TYPE, "application/x-ndjson")], counted(lines, sent, None)).into_response()
}

/// A body of `chunks`, each counted into `sent` as it is handed to the connection; a
/// watch's `follower` guard lives as long as the body.
fn counted(chunks: impl Stream<Item = Bytes> + Send + 'static, sent: Counter, follower: Option<FollowerGuard>) -> Body {
    Body::from_stream(chunks.map(move |chunk| {
        let _watching = &follower;
        sent.inc_by(chunk.len() as u64);
        Ok::<_, Infallible>(chunk)
    }))
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

#[derive(Debug, thiserror::Error)]
pub enum UnitServerError {
    #[error("binding {address}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Serves `router` over HTTPS with `tls` (the leader's `node_identity::server_config`) on
/// `address`, under `limits` (header and body timeouts, connection limits; the TLS
/// handshake is bounded by the header timeout), until `stop` turns true. Returns the bound
/// address and the server task, which ends once every connection is closed.
pub async fn listen(
    address: SocketAddr,
    tls: Arc<rustls::ServerConfig>,
    router: Router,
    limits: ServerLimits,
    server_metrics: ServerMetrics,
    tls_metrics: TlsMetrics,
    stop: watch::Receiver<bool>,
) -> Result<(SocketAddr, JoinHandle<()>), UnitServerError> {
    let listener =
        tokio::net::TcpListener::bind(address).await.map_err(|source| UnitServerError::Bind { address, source })?;
    let handshake_timeout: Duration = limits.flags.read_header_timeout;
    let listener = TlsListener::with_server_config(listener, tls, handshake_timeout, tls_metrics);
    let (bound, task) = controller_support::server::serve(listener, router, limits, server_metrics, stop);
    tracing::info!(address = %bound, "serving the unit's upstream objects to its followers");
    Ok((bound, task))
}

#[cfg(test)]
mod tests;
