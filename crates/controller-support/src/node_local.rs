//! Endpoints meant for the node's own processes only, served on a listener other hosts
//! reach as well (edge-health's `GET /verdicts` beside the peers' `/exchange`; the grid
//! wrapper's `/debug/topology` beside `/metrics`): a client whose address is not loopback
//! gets `403` unless it is in a network the operator listed (`--<what>-allowed-from`,
//! CIDRs). A compromised node must not read what another node's processes keep for
//! themselves, so the default is loopback only, and a request without a known client
//! address (a router called without the runtime's server) is refused too.
//!
//! Refusals carry [`ClientNotAllowed`] in their extensions: the runtime's server counts
//! them in `<binary>_http_requests_rejected_total{reason="client_not_allowed"}`. The
//! address judged is the TCP peer's (`ConnectInfo`, set by [`crate::server`]), never a
//! header a client can write.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// A network in CIDR notation (`10.244.0.0/16`, `fd00::/8`), read as Go's
/// `net.ParseCIDR` reads it: host bits given are masked off (`10.244.3.1/24` is
/// `10.244.3.0/24`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub fn contains(&self, address: IpAddr) -> bool {
        match (self.network, address.to_canonical()) {
            (IpAddr::V4(network), IpAddr::V4(address)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                u32::from(address) & mask == u32::from(network)
            }
            (IpAddr::V6(network), IpAddr::V6(address)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                u128::from(address) & mask == u128::from(network)
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let invalid = || format!("{text:?} is not a CIDR (e.g. 10.244.0.0/16 or fd00::/8)");
        let (address, prefix) = text.trim().split_once('/').ok_or_else(invalid)?;
        let address: IpAddr = address.parse().map_err(|_| invalid())?;
        let prefix: u8 = prefix.parse().map_err(|_| invalid())?;
        let network = match address {
            IpAddr::V4(v4) if prefix <= 32 => {
                let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V4((u32::from(v4) & mask).into())
            }
            IpAddr::V6(v6) if prefix <= 128 => {
                let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V6((u128::from(v6) & mask).into())
            }
            _ => return Err(format!("{text:?}: prefix length /{prefix} is too long for the address")),
        };
        Ok(Self { network, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// Marks a response as a refusal of a client outside the allowed networks, for the
/// server's `client_not_allowed` count.
#[derive(Clone, Copy, Debug)]
pub struct ClientNotAllowed;

/// Who may call a node-local endpoint: loopback clients, and those in `allowed`.
#[derive(Clone, Debug)]
pub struct NodeLocal {
    allowed: Arc<[Cidr]>,
    /// The flag that lists `allowed`, named in refusals.
    flag: &'static str,
    respond: fn(StatusCode, &str) -> Response,
}

impl NodeLocal {
    /// Loopback and the clients in `allowed`, which `flag` (e.g.
    /// `--verdicts-allowed-from`) lists; refusals are plain text.
    pub fn new(flag: &'static str, allowed: Vec<Cidr>) -> Self {
        Self { allowed: allowed.into(), flag, respond: plain_text }
    }

    /// Refusals rendered by `respond` (e.g. a Kubernetes `Status`).
    pub fn responding_with(self, respond: fn(StatusCode, &str) -> Response) -> Self {
        Self { respond, ..self }
    }

    /// Whether a client at `address` may call the endpoints (an IPv4 client on a
    /// dual-stack socket, `::ffff:a.b.c.d`, is judged as IPv4).
    pub fn allows(&self, address: IpAddr) -> bool {
        address.to_canonical().is_loopback() || self.allowed.iter().any(|cidr| cidr.contains(address))
    }

    /// `routes` (every route in it, not a fallback) served to allowed clients only.
    pub fn guard<S: Clone + Send + Sync + 'static>(&self, routes: Router<S>) -> Router<S> {
        routes.route_layer(axum::middleware::from_fn_with_state(self.clone(), admit))
    }
}

async fn admit(State(access): State<NodeLocal>, request: Request, next: Next) -> Response {
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(peer)| *peer);
    if let Some(peer) = peer
        && access.allows(peer.ip())
    {
        return next.run(request).await;
    }
    let path = request.uri().path();
    tracing::debug!(?peer, path, "node-local endpoint refused to a client outside {}", access.flag);
    let message =
        format!("{path} is served to this node's own processes only (loopback) and to the networks in {}", access.flag);
    let mut response = (access.respond)(StatusCode::FORBIDDEN, &message);
    response.extensions_mut().insert(ClientNotAllowed);
    response
}

fn plain_text(status: StatusCode, message: &str) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], message.to_string()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt;

    fn cidr(text: &str) -> Cidr {
        text.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("an address")
    }

    #[test]
    fn cidrs_parse_as_go_parses_them_and_contain_their_addresses() {
        assert_eq!(cidr("10.244.3.7/24").to_string(), "10.244.3.0/24", "host bits are masked off");
        assert_eq!(cidr("fd00::1/8").to_string(), "fd00::/8");
        for bad in ["10.0.0.0", "10.0.0.0/33", "fd00::/129", "10.0.0/8", "/8", "x/8", "10.0.0.0/-1", ""] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad:?} parsed");
        }
        let subnet = cidr("10.244.3.0/24");
        assert!(subnet.contains(ip("10.244.3.0")) && subnet.contains(ip("10.244.3.255")));
        assert!(!subnet.contains(ip("10.244.4.1")) && !subnet.contains(ip("10.244.2.255")));
        assert!(subnet.contains(ip("::ffff:10.244.3.9")), "IPv4 on a dual-stack socket");
        assert!(!subnet.contains(ip("fd00::1")));
        assert!(cidr("0.0.0.0/0").contains(ip("192.0.2.1")));
        assert!(cidr("192.0.2.1/32").contains(ip("192.0.2.1")) && !cidr("192.0.2.1/32").contains(ip("192.0.2.2")));
        assert!(cidr("fd00::/8").contains(ip("fdff::1")) && !cidr("fd00::/8").contains(ip("fe00::1")));
    }

    #[test]
    fn loopback_is_always_allowed_other_clients_only_when_listed() {
        let local = NodeLocal::new("--x-allowed-from", Vec::new());
        for address in ["127.0.0.1", "127.3.4.5", "::1", "::ffff:127.0.0.1"] {
            assert!(local.allows(ip(address)), "{address}");
        }
        for address in ["10.0.0.5", "192.0.2.1", "fd00::1", "0.0.0.0", "::"] {
            assert!(!local.allows(ip(address)), "{address}");
        }
        let opened = NodeLocal::new("--x-allowed-from", vec![cidr("10.0.0.0/24")]);
        assert!(opened.allows(ip("10.0.0.5")) && opened.allows(ip("::ffff:10.0.0.5")) && opened.allows(ip("::1")));
        assert!(!opened.allows(ip("10.0.1.5")));
    }

    async fn get_from(app: &Router, peer: Option<&str>, path: &str) -> (StatusCode, String, bool) {
        let mut request = axum::http::Request::get(path).body(Body::empty()).expect("request");
        if let Some(peer) = peer {
            request.extensions_mut().insert(ConnectInfo(peer.parse::<SocketAddr>().expect("peer")));
        }
        let response = app.clone().oneshot(request).await.expect("answered");
        let marked = response.extensions().get::<ClientNotAllowed>().is_some();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16).await.expect("body");
        (status, String::from_utf8_lossy(&body).into_owned(), marked)
    }

    #[tokio::test]
    async fn only_the_guarded_routes_are_refused_and_refusals_are_marked() {
        let local = NodeLocal::new("--x-allowed-from", Vec::new());
        let app = Router::new()
            .merge(local.guard(Router::new().route("/local", get(|| async { "mine" }))))
            .route("/open", get(|| async { "anyone's" }));
        let (status, body, marked) = get_from(&app, Some("10.0.0.5:4000"), "/local").await;
        assert_eq!((status, marked), (StatusCode::FORBIDDEN, true));
        assert_eq!(
            body,
            "/local is served to this node's own processes only (loopback) and to the networks in --x-allowed-from"
        );
        assert_eq!(get_from(&app, Some("127.0.0.1:4000"), "/local").await, (StatusCode::OK, "mine".into(), false));
        assert_eq!(get_from(&app, None, "/local").await.0, StatusCode::FORBIDDEN, "no client address: refused");
        let open = get_from(&app, Some("10.0.0.5:4000"), "/open").await;
        assert_eq!(open, (StatusCode::OK, "anyone's".into(), false));
    }
}
