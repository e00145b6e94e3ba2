//! Pass-through to the upstream API server for every request the wrapper does not serve
//! from its cache (discovery, `/version`, servicecidrs, Event POSTs, any write), with the
//! wrapper's own credentials: the client's `Authorization` is dropped, the wrapper's
//! kubeconfig or service account authenticates. Bodies stream both ways; nothing is
//! buffered, so a large response or a long watch passes through as it arrives.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::header::{self, HeaderMap, HeaderName};
use http::{Request, StatusCode, Uri};
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
        strip(&mut parts.headers, Some(header::AUTHORIZATION));
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
