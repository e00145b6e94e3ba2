//! Pass-through to the upstream API server for what kube-proxy (and a client-go program
//! pointed at the wrapper) needs besides the cached reads: discovery, `/version`,
//! ServiceCIDR reads and Event writes ([`passes_through`]); anything else is refused 403.
//! The wrapper's own credentials authenticate: the client's `Authorization` and
//! `Impersonate-*` headers are dropped. Whoever reaches the wrapper borrows its identity,
//! so the allow-list is what keeps a process on the node (or a compromised kube-proxy) from
//! reading Secrets or writing Nodes with it. Bodies stream both ways; nothing is buffered,
//! so a large response or a long watch passes through as it arrives.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::header::{self, HeaderMap, HeaderName};
use http::{Method, Request, StatusCode, Uri};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, ServiceBuilder, ServiceExt};

type Upstream = BoxCloneSyncService<Request<Body>, http::Response<hyper::body::Incoming>, BoxError>;

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("cannot build the upstream client: {0}")]
    Client(#[from] kube::Error),
}

#[derive(Clone)]
pub struct Proxy {
    upstream: Upstream,
}

/// Headers that describe one connection, not the message (RFC 9110 section 7.6.1), plus
/// the ones the wrapper replaces: `Host` (the upstream's) and `Authorization` (the
/// wrapper's own).
const NOT_FORWARDED: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::HOST,
];

fn strip(headers: &mut HeaderMap, also: Option<HeaderName>) {
    for name in NOT_FORWARDED.iter().chain(also.as_ref()) {
        headers.remove(name);
    }
}

/// Drops what would make the upstream act as someone else than the wrapper: the client's
/// credentials and every `Impersonate-*` header (the wrapper's identity may impersonate
/// nobody, but a header it passed on would be tried).
fn strip_identity(headers: &mut HeaderMap) {
    strip(headers, Some(header::AUTHORIZATION));
    let impersonation: Vec<HeaderName> =
        headers.keys().filter(|name| name.as_str().starts_with("impersonate-")).cloned().collect();
    for name in impersonation {
        headers.remove(name);
    }
}

/// Whether `method path` (a request the cache does not answer) is passed through: GET of
/// discovery (`/api`, `/apis`, a group or version document, `/openapi/...`) and
/// `/version`, which every authenticated user may read; kube-proxy's ServiceCIDR informer
/// (`networking.k8s.io` v1 and v1beta1, list, watch and get); its Event recorder (POST of
/// an Event, PATCH of one, core and `events.k8s.io`).
pub fn passes_through(method: &Method, path: &str) -> bool {
    let read = method == Method::GET || method == Method::HEAD;
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        ["version"] | ["api"] | ["api", "v1"] | ["apis"] | ["apis", _] | ["apis", _, _] => read,
        ["openapi", "v2"] | ["openapi", "v3", ..] => read,
        ["apis", "networking.k8s.io", "v1" | "v1beta1", "servicecidrs", ..] => read && segments.len() <= 5,
        ["api", "v1", "namespaces", _, "events"] | ["apis", "events.k8s.io", "v1", "namespaces", _, "events"] => {
            method == Method::POST
        }
        ["api", "v1", "namespaces", _, "events", _] | ["apis", "events.k8s.io", "v1", "namespaces", _, "events", _] => {
            method == Method::PATCH
        }
        _ => false,
    }
}

impl Proxy {
    pub fn new(config: &kube::Config) -> Result<Self, ProxyError> {
        let connector = config.rustls_https_connector()?;
        let client = HttpClient::builder(TokioExecutor::new()).build(connector);
        let service = ServiceBuilder::new()
            .layer(config.base_uri_layer())
            .option_layer(config.auth_layer()?)
            .layer(config.extra_headers_layer()?)
            .service(client.map_err(BoxError::from));
        Ok(Self { upstream: BoxCloneSyncService::new(service.map_err(BoxError::from)) })
    }

    /// Forwards one request and returns the upstream's answer, or 502 when the upstream
    /// cannot be reached.
    pub async fn forward(&self, request: Request<Body>) -> (u16, Response) {
        let (mut parts, body) = request.into_parts();
        strip_identity(&mut parts.headers);
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
        parts.uri = match path.parse::<Uri>() {
            Ok(uri) => uri,
            Err(error) => return (400, bad_gateway(StatusCode::BAD_REQUEST, &format!("invalid path: {error}"))),
        };
        match self.upstream.clone().oneshot(Request::from_parts(parts, body)).await {
            Ok(response) => {
                let (mut parts, body) = response.into_parts();
                strip(&mut parts.headers, None);
                (parts.status.as_u16(), Response::from_parts(parts, Body::new(body)))
            }
            Err(error) => {
                tracing::warn!(%error, %path, "upstream request failed");
                (0, bad_gateway(StatusCode::BAD_GATEWAY, &format!("upstream API server unreachable: {error}")))
            }
        }
    }
}

fn bad_gateway(code: StatusCode, message: &str) -> Response {
    let reason = if code == StatusCode::BAD_GATEWAY { "ServiceUnavailable" } else { "BadRequest" };
    let status = listwatch::status(code.as_u16(), reason, message, None);
    (code, [(header::CONTENT_TYPE, "application/json")], status.to_string()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_kube_proxy_needs_passes_through() {
        let (get, post, patch, put, delete) = (Method::GET, Method::POST, Method::PATCH, Method::PUT, Method::DELETE);
        let allowed = [
            (&get, "/version"),
            (&get, "/api"),
            (&get, "/api/v1"),
            (&get, "/apis"),
            (&get, "/apis/discovery.k8s.io"),
            (&get, "/apis/discovery.k8s.io/v1"),
            (&Method::HEAD, "/apis"),
            (&get, "/openapi/v2"),
            (&get, "/openapi/v3/apis/apps/v1"),
            (&get, "/apis/networking.k8s.io/v1/servicecidrs"),
            (&get, "/apis/networking.k8s.io/v1beta1/servicecidrs"),
            (&get, "/apis/networking.k8s.io/v1/servicecidrs/kubernetes"),
            (&post, "/apis/events.k8s.io/v1/namespaces/default/events"),
            (&patch, "/apis/events.k8s.io/v1/namespaces/default/events/kube-proxy.1"),
            (&post, "/api/v1/namespaces/kube-system/events"),
            (&patch, "/api/v1/namespaces/kube-system/events/kube-proxy.1"),
        ];
        for (method, path) in allowed {
            assert!(passes_through(method, path), "{method} {path}");
        }
        let refused = [
            // the wrapper's identity reads every Secret, Node and Pod it may: not for clients
            (&get, "/api/v1/secrets"),
            (&get, "/api/v1/namespaces/kube-system/secrets/token"),
            (&get, "/api/v1/nodes"),
            (&get, "/api/v1/nodes/n2"),
            (&get, "/api/v1/namespaces/ns/pods"),
            (&get, "/api/v1/namespaces/ns/configmaps"),
            (&get, "/apis/apps/v1/deployments"),
            (&get, "/apis/networking.k8s.io/v1/servicecidrs/x/status"),
            // writes other than Events
            (&patch, "/api/v1/nodes/n1"),
            (&patch, "/api/v1/nodes/n1/status"),
            (&post, "/api/v1/namespaces/ns/services"),
            (&delete, "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices/web-1"),
            (&post, "/apis/networking.k8s.io/v1/servicecidrs"),
            (&put, "/api/v1/namespaces/default/events/e"),
            (&delete, "/api/v1/namespaces/default/events/e"),
            (&post, "/api/v1/namespaces/default/events/e"),
            (&post, "/apis"),
            (&post, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"),
            (&get, "/logs/kubelet.log"),
            (&get, "/metrics"),
            (&get, "/"),
        ];
        for (method, path) in refused {
            assert!(!passes_through(method, path), "{method} {path}");
        }
    }

    #[test]
    fn the_clients_identity_headers_are_dropped() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("authorization", "Bearer client"),
            ("impersonate-user", "system:admin"),
            ("impersonate-group", "system:masters"),
            ("impersonate-extra-scopes", "x"),
            ("impersonate-uid", "1"),
            ("accept", "application/json"),
            ("user-agent", "kube-proxy/v1.36.0"),
            ("connection", "keep-alive"),
        ] {
            headers.append(HeaderName::from_static(name), value.parse().unwrap());
        }
        strip_identity(&mut headers);
        let mut left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        left.sort();
        assert_eq!(left, ["accept", "user-agent"]);
    }
}
