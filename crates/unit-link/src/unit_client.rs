//! A follower's API client to its unit's leader: a `kube::Client` the wrapper's unchanged
//! upstream watchers use as they would the cloud's, over mutual TLS with the node
//! identities (`crate::node_identity::client_config`: only the chosen
//! leader's key is accepted).
//!
//! kube-rs takes no custom rustls verifier through `kube::Config`, so the stack kube-rs
//! builds from a `Config` is built here by hand around the given rustls configuration: TCP
//! connector, rustls (https only, HTTP/1.1), connect and read timeouts, hyper's pooled
//! client, then the base URI. The read timeout is what notices a leader that went silent
//! without closing the connection (a host gone from the LAN): the leader's bookmarks keep
//! a healthy watch busy far more often than it.
//!
//! Response bodies are counted per upstream stream (what a follower receives from its
//! leader is the traffic sharing saves the cloud link).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::{Body, Frame};
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::middleware::BaseUriLayer;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tower::{Layer, Service, ServiceBuilder};

use crate::metrics::StreamLabel;
use crate::stream::Stream;

/// Why a link to the leader cannot be set up (the last two for callers that build the
/// follower's TLS settings and the leader's URL along with the client).
#[derive(Debug, thiserror::Error)]
pub enum UnitClientError {
    #[error("the leader's URL {url} is not https://<address>:<port>")]
    Url { url: String },
    #[error("the leader's URL is malformed")]
    MalformedUrl(#[from] http::uri::InvalidUri),
    #[error("the follower's TLS settings")]
    Identity(#[from] crate::node_identity::NodeIdentityError),
}

/// How a follower's connections to its leader are made.
#[derive(Clone, Copy, Debug)]
pub struct LinkSettings {
    /// A response, list or watch that sends nothing this long fails (a leader silent this
    /// long is taken for dead).
    pub read_timeout: Duration,
    /// A connection (TCP and TLS handshake) not set up this soon fails.
    pub connect_timeout: Duration,
    /// The address the connections come from (`None`: the kernel's choice).
    pub source: Option<std::net::IpAddr>,
}

/// A client of the leader at `url` (`https://<leader address>:<port>`) over `tls` (the
/// follower's `node_identity::client_config`), from the kernel's choice of address. A
/// connection (TCP and TLS handshake) not set up within `connect_timeout` fails, and so
/// does a response, list or watch that sends nothing for `read_timeout`. Call within a
/// tokio runtime (kube's client spawns its request buffer).
pub fn leader_client(
    url: &http::Uri,
    tls: Arc<rustls::ClientConfig>,
    read_timeout: Duration,
    connect_timeout: Duration,
) -> Result<kube::Client, UnitClientError> {
    let link = LinkSettings { read_timeout, connect_timeout, source: None };
    leader_client_counted(url, tls, link, Family::default())
}

/// [`leader_client`] with `link`'s settings, the body bytes received counted into
/// `received` by stream ([`received_stream`]).
pub fn leader_client_counted(
    url: &http::Uri,
    tls: Arc<rustls::ClientConfig>,
    link: LinkSettings,
    received: Family<StreamLabel, Counter>,
) -> Result<kube::Client, UnitClientError> {
    if url.scheme() != Some(&http::uri::Scheme::HTTPS) || url.authority().is_none() {
        return Err(UnitClientError::Url { url: url.to_string() });
    }
    let mut tcp = HttpConnector::new();
    // the scheme is https: the TLS connector below enforces it
    tcp.enforce_http(false);
    // a watch event is a small write on the leader's side; requests are on ours
    tcp.set_nodelay(true);
    tcp.set_local_address(link.source);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(rustls::ClientConfig::clone(&tls))
        .https_only()
        .enable_http1()
        .wrap_connector(tcp);
    let mut connector = TimeoutConnector::new(https);
    // covers the TLS handshake too: a host that accepts and never answers is given up
    connector.set_connect_timeout(Some(link.connect_timeout));
    connector.set_read_timeout(Some(link.read_timeout));
    // the read timeout counts from the last request written, not from when a pooled
    // connection went idle (it would otherwise fire on a request sent just before it)
    connector.set_reset_reader_on_write(true);
    let client: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(connector);
    let service = ServiceBuilder::new()
        .layer(BaseUriLayer::new(url.clone()))
        .layer(CountReceivedLayer { received })
        .service(client);
    Ok(kube::Client::new(service, "default"))
}

/// A follower's link to whichever member leads its unit: one client for the follower's
/// watches, whose requests go to the leader set last. A leader change does not restart the
/// watches: they resume where they were, which a leader leading from its replica of the
/// previous leader's log ([`crate::replication`]) serves as the differences since; any
/// other leader answers 410 and they relist.
///
/// Each upstream stream (one watcher) sends the term of the log its last answer came from
/// (`unit_server::TERM_HEADER`): the versions it resumes from are that log's, and only a
/// log of that term (or one that inherited it) takes them.
///
/// Nothing of the previous leader outlives a change: a request still waiting for its
/// answer is asked again of the new leader, and an answer still streaming ends (a watch
/// cleanly, so its watcher resumes at once; a list with [`LeaderChanged`], which is not
/// the new leader's failure). So the new leader is judged only by what it answers.
/// Followers only GET: a request asked again is sent without a body.
#[derive(Clone)]
pub struct LeaderRoute(Arc<RouteShared>);

struct RouteShared {
    route: std::sync::Mutex<Route>,
    /// Counts the leader changes.
    generation: tokio::sync::watch::Sender<u64>,
}

#[derive(Default)]
struct Route {
    leader: Option<kube::Client>,
    terms: std::collections::HashMap<&'static str, http::HeaderValue>,
}

impl Default for LeaderRoute {
    fn default() -> Self {
        let route = std::sync::Mutex::new(Route::default());
        Self(Arc::new(RouteShared { route, generation: tokio::sync::watch::channel(0).0 }))
    }
}

/// What a request or answer of a previous leader ends with (see [`LeaderRoute`]).
#[derive(Debug, thiserror::Error)]
#[error("the unit leader changed while this was in flight")]
pub struct LeaderChanged;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl LeaderRoute {
    /// The client the follower's watches use.
    pub fn client(&self) -> kube::Client {
        kube::Client::new(Routed(self.clone()), "default")
    }

    /// Sends every later request to `leader` (a [`leader_client_counted`]), and ends what
    /// is still in flight with the previous one.
    pub fn set_leader(&self, leader: kube::Client) {
        self.route().leader = Some(leader);
        self.0.generation.send_modify(|generation| *generation += 1);
    }

    fn route(&self) -> std::sync::MutexGuard<'_, Route> {
        self.0.route.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn send(
        &self,
        parts: http::request::Parts,
        body: kube::client::Body,
    ) -> Result<Response<RoutedBody>, kube::Error> {
        let stream =
            received_stream(parts.uri.path(), parts.headers.get(http::header::ACCEPT).and_then(|a| a.to_str().ok()));
        let watch =
            parts.uri.query().is_some_and(|query| query.split('&').any(|p| p == "watch=true" || p == "watch=1"));
        let mut generations = self.0.generation.subscribe();
        let mut body = Some(body);
        loop {
            let generation = *generations.borrow_and_update();
            let (leader, term) = {
                let route = self.route();
                (route.leader.clone(), route.terms.get(stream).cloned())
            };
            let leader = leader.ok_or_else(|| kube::Error::Service("no unit leader chosen yet".into()))?;
            let mut request = Request::from_parts(parts.clone(), body.take().unwrap_or_else(kube::client::Body::empty));
            if let Some(term) = term {
                request.headers_mut().insert(crate::unit_server::TERM_HEADER, term);
            }
            tokio::select! {
                biased;
                // the leader changed before it answered: ask the new one
                _ = generations.changed() => continue,
                response = leader.send(request) => {
                    let response = response?;
                    if let Some(term) = response.headers().get(crate::unit_server::TERM_HEADER) {
                        self.route().terms.insert(stream, term.clone());
                    }
                    let changed = self.0.generation.subscribe();
                    return Ok(response.map(|body| cut_on_change(body, changed, generation, watch)));
                }
            }
        }
    }
}

type RoutedBody = UnsyncBoxBody<Bytes, BoxError>;

/// `body`, ended when the leader changes from `generation`: cleanly for a watch, with
/// [`LeaderChanged`] for anything else (a list cut short must not decode as a whole one).
fn cut_on_change(
    body: kube::client::Body,
    mut generations: tokio::sync::watch::Receiver<u64>,
    generation: u64,
    watch: bool,
) -> RoutedBody {
    use futures::StreamExt as _;
    let changed: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async move {
        let _ = generations.wait_for(|now| *now != generation).await;
    });
    let data = body.into_data_stream().map(|chunk| chunk.map(Frame::data).map_err(BoxError::from)).boxed();
    let frames = futures::stream::unfold((data, changed, false), move |(mut data, mut changed, ended)| async move {
        if ended {
            return None;
        }
        tokio::select! {
            biased;
            () = &mut changed => (!watch).then(|| (Err(BoxError::from(LeaderChanged)), (data, changed, true))),
            chunk = data.next() => chunk.map(|chunk| (chunk, (data, changed, false))),
        }
    });
    http_body_util::StreamBody::new(frames).boxed_unsync()
}

#[derive(Clone)]
struct Routed(LeaderRoute);

impl Service<Request<kube::client::Body>> for Routed {
    type Response = Response<RoutedBody>;
    type Error = kube::Error;
    type Future = ResponseFuture<RoutedBody, kube::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<kube::client::Body>) -> Self::Future {
        let route = self.0.clone();
        let (parts, body) = request.into_parts();
        Box::pin(async move { route.send(parts, body).await })
    }
}

/// The upstream stream (as [`Stream::name`] names it) a request to an API path belongs
/// to: its resource, and for nodes whether metadata only (every node) or whole objects
/// (the local one) are asked; `"other"` for anything else.
pub fn received_stream(path: &str, accept: Option<&str>) -> &'static str {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segments.as_slice() {
        ["api", _, rest @ ..] | ["apis", _, _, rest @ ..] => rest,
        _ => return "other",
    };
    let resource = match rest {
        ["namespaces", _namespace, resource, ..] => *resource,
        [resource, ..] => *resource,
        [] => return "other",
    };
    let stream = match resource {
        "services" => Stream::Services,
        "endpointslices" => Stream::EndpointSlices,
        "endpoints" => Stream::Endpoints,
        "nodes" if accept.is_some_and(|a| listwatch::Shape::from_accept(a) == listwatch::Shape::Metadata) => {
            Stream::RemoteNodes
        }
        "nodes" => Stream::LocalNode,
        _ => return "other",
    };
    stream.name()
}

/// Counts the data of response bodies into a counter per [`received_stream`].
#[derive(Clone)]
pub struct CountReceivedLayer {
    received: Family<StreamLabel, Counter>,
}

impl CountReceivedLayer {
    /// Counts response body bytes into `received`, by stream (any kube client's stack: the
    /// cloud's too).
    pub fn new(received: Family<StreamLabel, Counter>) -> Self {
        Self { received }
    }
}

impl<S> Layer<S> for CountReceivedLayer {
    type Service = CountReceived<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CountReceived { inner, received: self.received.clone() }
    }
}

#[derive(Clone)]
pub struct CountReceived<S> {
    inner: S,
    received: Family<StreamLabel, Counter>,
}

type ResponseFuture<B, E> = Pin<Box<dyn Future<Output = Result<Response<B>, E>> + Send>>;

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for CountReceived<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
{
    type Response = Response<UnsyncBoxBody<Bytes, ResBody::Error>>;
    type Error = S::Error;
    type Future = ResponseFuture<UnsyncBoxBody<Bytes, ResBody::Error>, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let accept = request.headers().get(http::header::ACCEPT).and_then(|a| a.to_str().ok());
        let stream = received_stream(request.uri().path(), accept);
        let counter = self.received.get_or_create(&StreamLabel { stream }).clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|body| {
                body.map_frame(move |frame: Frame<Bytes>| {
                    if let Some(data) = frame.data_ref() {
                        counter.inc_by(data.len() as u64);
                    }
                    frame
                })
                .boxed_unsync()
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_by_the_upstream_stream_they_serve() {
        let metadata = Some("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json");
        let cases = [
            ("/api/v1/services", None, "services"),
            ("/api/v1/namespaces/ns/services/web", None, "services"),
            ("/apis/discovery.k8s.io/v1/endpointslices", Some("application/json"), "endpointslices"),
            ("/api/v1/endpoints", None, "endpoints"),
            ("/api/v1/nodes", metadata, "nodes"),
            ("/api/v1/nodes", Some("application/json"), "localnode"),
            ("/api/v1/nodes", None, "localnode"),
            ("/api/v1/namespaces", None, "other"),
            ("/api/v1", None, "other"),
            ("/version", None, "other"),
        ];
        for (path, accept, want) in cases {
            assert_eq!(received_stream(path, accept), want, "{path} {accept:?}");
        }
    }
}
