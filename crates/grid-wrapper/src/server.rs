//! The downstream API: what kube-proxy and other local clients see.
//!
//! Served from the cache, in Kubernetes protobuf when `Accept` prefers it (kube-proxy asks
//! for it first) and JSON otherwise: GET, list and watch of Services, EndpointSlices and core
//! Endpoints, cluster-wide and namespaced, with the full list/watch protocol; the local
//! Node by name, and its list/watch by `fieldSelector=metadata.name=<node>`. Everything
//! else is passed through upstream. Until the cache serves something, served requests get
//! 503 with `Retry-After`, never an empty list: an empty answer makes kube-proxy drop
//! every rule.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, Request, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use controller_support::{Cidr, NodeLocal};
use edgegrid_core::topology::NamespacedName;
use futures::StreamExt;
use listwatch::{FieldSelector, ListOptions, Representation, WatchOptions};
use serde_json::json;
use unit_link::api_status::{not_serving, status_response};

use crate::Wrapper;
use crate::cache::{Kind, ViewSource};
use crate::metrics::{CodeLabel, KindLabel, WatcherGuard};

/// The served API, `/debug/topology` (for `debug_readers`), and pass-through for the rest.
pub fn router(wrapper: Arc<Wrapper>, debug_readers: &NodeLocal) -> Router {
    Router::new().merge(debug_readers.guard(debug_routes())).fallback(dispatch).with_state(wrapper)
}

/// `/debug/topology` alone, for the metrics listener: the API port binds the node's
/// loopback (only its own kube-proxy reads it), while the metrics port is where
/// Prometheus, `kubectl port-forward` (from the node itself) and the API server's pod
/// proxy reach a hostNetwork pod (`cargo xtask run --kubeconfig`).
pub fn debug_router(wrapper: Arc<Wrapper>, debug_readers: &NodeLocal) -> Router {
    debug_readers.guard(debug_routes()).with_state(wrapper)
}

fn debug_routes() -> Router<Arc<Wrapper>> {
    Router::new().route(DEBUG_TOPOLOGY_PATH, get(debug_topology))
}

pub const DEBUG_TOPOLOGY_PATH: &str = "/debug/topology";

/// Who may read `/debug/topology`, on either listener: the node's own processes
/// (loopback) and the networks of `--debug-allowed-from`. It tells which endpoints of
/// every Service this node keeps, and the labels that decided: the node's own business,
/// not another node's. Refusals are a `Status` (403 Forbidden), as the API's own.
pub fn debug_readers(allowed_from: Vec<Cidr>) -> NodeLocal {
    NodeLocal::new("--debug-allowed-from", allowed_from).responding_with(|code, message| {
        status_response(code.as_u16(), &listwatch::status(code.as_u16(), "Forbidden", message, None))
    })
}

/// A request the cache answers.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Target {
    kind: Kind,
    namespace: Option<String>,
    name: Option<String>,
}

/// Which requests the cache answers; `None` passes the request through.
pub(crate) fn target(method: &Method, path: &str, query: &HashMap<String, String>, local_node: &str) -> Option<Target> {
    if method != Method::GET {
        return None;
    }
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, rest) = match segments.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", "discovery.k8s.io", "v1", rest @ ..] => ("discovery.k8s.io", rest),
        _ => return None,
    };
    let kind_of = |plural: &str| match (group, plural) {
        ("", "services") => Some(Kind::Services),
        ("", "endpoints") => Some(Kind::Endpoints),
        ("discovery.k8s.io", "endpointslices") => Some(Kind::EndpointSlices),
        _ => None,
    };
    let target = |kind, namespace: Option<&str>, name: Option<&str>| {
        Some(Target { kind, namespace: namespace.map(str::to_string), name: name.map(str::to_string) })
    };
    match rest {
        ["nodes"] if group.is_empty() && selects_only(query, local_node) => target(Kind::Nodes, None, None),
        ["nodes", name] if group.is_empty() && *name == local_node => target(Kind::Nodes, None, Some(name)),
        [plural] => target(kind_of(plural)?, None, None),
        ["namespaces", ns, plural] => target(kind_of(plural)?, Some(ns), None),
        ["namespaces", ns, plural, name] => target(kind_of(plural)?, Some(ns), Some(name)),
        _ => None,
    }
}

/// Whether a node list/watch selects the local node by name (the cache holds no other).
fn selects_only(query: &HashMap<String, String>, local_node: &str) -> bool {
    let Some(raw) = query.get("fieldSelector") else { return false };
    let Ok(selector) = FieldSelector::parse(raw) else { return false };
    selector.requires_equal("metadata.name", local_node)
}

async fn dispatch(State(wrapper): State<Arc<Wrapper>>, request: Request<Body>) -> Response {
    // a query this server cannot parse is still the upstream's to judge, unless it is
    // one of ours
    let parsed = Query::<HashMap<String, String>>::try_from_uri(request.uri()).map(|Query(q)| q);
    let query = parsed.as_ref().cloned().unwrap_or_default();
    let target = target(request.method(), request.uri().path(), &query, wrapper.local_node());
    if let (Some(_), Err(rejection)) = (&target, &parsed) {
        let message = format!("invalid query: {}", rejection.body_text());
        return status_response(400, &listwatch::status(400, "BadRequest", &message, None));
    }
    let Some(target) = target else {
        if !crate::proxy::passes_through(request.method(), request.uri().path()) {
            wrapper.metrics().refused_requests.inc();
            let message = format!(
                "the grid wrapper does not pass {} {} through: it serves Services, EndpointSlices, \
                 Endpoints and its node's Node, and passes through only discovery, /version, \
                 ServiceCIDR reads and Event writes",
                request.method(),
                request.uri().path()
            );
            return status_response(403, &listwatch::status(403, "Forbidden", &message, None));
        }
        let (code, response) = wrapper.proxy().forward(request).await;
        wrapper.metrics().proxied_requests.get_or_create(&CodeLabel { code }).inc();
        return response;
    };
    match serve(&wrapper, &target, &query, request.headers()) {
        Ok(response) => response,
        Err(error) => status_response(error.code(), &error.status()),
    }
}

fn serve(
    wrapper: &Arc<Wrapper>,
    target: &Target,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<Response, listwatch::Error> {
    let accept = headers.get(header::ACCEPT).and_then(|a| a.to_str().ok());
    let representation = Representation::negotiate(target.kind.served(), accept)?;
    let cache = wrapper.lock();
    if cache.serving() == ViewSource::Nothing {
        drop(cache);
        return Ok(not_serving("the grid wrapper has not synced with the upstream API server yet"));
    }
    if let Some(name) = &target.name {
        let id = (target.namespace.clone().unwrap_or_default(), name.clone());
        return Ok(match cache.log().get(&target.kind, &id) {
            Some(object) => {
                let body = listwatch::object_body(object, &representation);
                ([(header::CONTENT_TYPE, representation.content_type(false))], body).into_response()
            }
            None => {
                let message = format!("{} \"{name}\" not found", target.kind.plural());
                let details = json!({"name": name, "kind": target.kind.plural()});
                status_response(404, &listwatch::status(404, "NotFound", &message, Some(details)))
            }
        });
    }
    if !listwatch::is_watch(query) {
        let opts = ListOptions::from_query(query, target.namespace.clone())?;
        let page = cache.log().list(&target.kind, &opts)?;
        drop(cache);
        let content_type = representation.content_type(false);
        let chunks = listwatch::ListBody::new(page, representation).map(Ok::<_, std::convert::Infallible>);
        let body = Body::from_stream(futures::stream::iter(chunks));
        return Ok(([(header::CONTENT_TYPE, content_type)], body).into_response());
    }
    let opts = WatchOptions::from_query(query, target.namespace.clone())?;
    let start = cache.log().watch(&target.kind, &opts);
    drop(cache);
    let guard =
        WatcherGuard::new(wrapper.metrics().watchers.get_or_create(&KindLabel { kind: target.kind.plural() }).clone());
    let content_type = representation.content_type(true);
    let events = listwatch::watch_stream(start, opts, representation, wrapper.watch_config(), wrapper.stopped());
    let body = Body::from_stream(events.map(move |line| {
        let _counted = &guard;
        Ok::<_, Infallible>(line)
    }));
    Ok(([(header::CONTENT_TYPE, content_type)], body).into_response())
}

/// `GET /debug/topology?service=<namespace>/<name>`: which endpoints this node keeps for a
/// Service and why the others were dropped.
async fn debug_topology(State(wrapper): State<Arc<Wrapper>>, Query(query): Query<HashMap<String, String>>) -> Response {
    let Some((namespace, name)) = query.get("service").and_then(|s| s.split_once('/')) else {
        let message = "query parameter service=<namespace>/<name> is required";
        return status_response(400, &listwatch::status(400, "BadRequest", message, None));
    };
    let explanation = wrapper.lock().view().explain(&NamespacedName::new(namespace, name));
    axum::Json(explanation).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    use axum::extract::ConnectInfo;
    use tower::ServiceExt;

    fn wrapper() -> Arc<Wrapper> {
        let config = crate::WrapperConfig {
            node_name: "n1".into(),
            rewrite_local_apiserver: false,
            log: listwatch::LogConfig { history_limit: 10, watch_buffer: 10 },
            watch: listwatch::WatchConfig {
                bookmark_interval: std::time::Duration::from_secs(60),
                default_timeout: std::time::Duration::from_secs(60),
            },
            cache_dir: None,
            unit_label_key: None,
        };
        // never contacted: nothing here passes through
        let upstream = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        Wrapper::new(&config, &upstream, Arc::default()).expect("wrapper")
    }

    /// The status of `GET path` from a client at `peer`, and the body's `reason` if a Status.
    async fn get_from(app: &Router, peer: &str, path: &str) -> (u16, Option<String>) {
        let mut request = Request::get(path).body(Body::empty()).expect("request");
        request.extensions_mut().insert(ConnectInfo(peer.parse::<SocketAddr>().expect("peer")));
        let response = app.clone().oneshot(request).await.expect("answered");
        let status = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("body");
        let reason = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|status| status["reason"].as_str().map(str::to_string));
        (status, reason)
    }

    const TOPOLOGY: &str = "/debug/topology?service=ns/web";

    /// On both listeners `/debug/topology` answers the node's own processes only; other
    /// hosts get a 403 Status. The served API behind it is not judged by this rule.
    #[tokio::test]
    async fn the_debug_view_is_served_to_loopback_only_by_default() {
        let wrapper = wrapper();
        let readers = debug_readers(Vec::new());
        for app in [router(wrapper.clone(), &readers), debug_router(wrapper.clone(), &readers)] {
            assert_eq!(get_from(&app, "10.0.0.5:40000", TOPOLOGY).await, (403, Some("Forbidden".into())));
            assert_eq!(get_from(&app, "[fd00::5]:40000", TOPOLOGY).await.0, 403);
            assert_eq!(get_from(&app, "127.0.0.1:40000", TOPOLOGY).await.0, 200);
            assert_eq!(get_from(&app, "[::1]:40000", TOPOLOGY).await.0, 200);
        }
        // the API (here unsynced: 503) is for whoever the listener admits
        let api = router(wrapper, &readers);
        assert_eq!(get_from(&api, "10.0.0.5:40000", "/api/v1/services").await.0, 503);
    }

    /// `--debug-allowed-from` opens the debug view to the networks it lists, and only those.
    #[tokio::test]
    async fn debug_allowed_from_opens_the_debug_view_to_the_networks_it_lists() {
        use clap::Parser;
        let flags = crate::cli::Flags::try_parse_from(["grid-wrapper", "--debug-allowed-from", "10.0.0.0/24,fd00::/8"])
            .expect("flags");
        let wrapper = wrapper();
        let readers = flags.debug_readers();
        for app in [router(wrapper.clone(), &readers), debug_router(wrapper.clone(), &readers)] {
            for (peer, status) in
                [("10.0.0.5:40000", 200), ("[fd00::5]:40000", 200), ("127.0.0.1:40000", 200), ("10.0.1.5:40000", 403)]
            {
                assert_eq!(get_from(&app, peer, TOPOLOGY).await.0, status, "{peer}");
            }
        }
        let not_a_cidr = crate::cli::Flags::try_parse_from(["grid-wrapper", "--debug-allowed-from", "10.0.0.5"]);
        assert!(not_a_cidr.expect_err("refused").to_string().contains("is not a CIDR"));
    }

    /// (kind, namespace, name) of a request the cache answers.
    type Routed = Option<(Kind, Option<&'static str>, Option<String>)>;

    fn routed(method: Method, path: &str, field_selector: Option<&str>) -> Routed {
        let query: HashMap<String, String> =
            field_selector.map(|f| ("fieldSelector".to_string(), f.to_string())).into_iter().collect();
        target(&method, path, &query, "n1").map(|t| {
            let namespace = t.namespace.map(|ns| if ns == "ns" { "ns" } else { "other" });
            (t.kind, namespace, t.name)
        })
    }

    #[test]
    fn the_cache_answers_reads_of_served_kinds_and_the_local_node_only() {
        use Kind::*;
        let get = Method::GET;
        let cases: Vec<(Method, &str, Option<&str>, Routed)> = vec![
            (get.clone(), "/api/v1/services", None, Some((Services, None, None))),
            (get.clone(), "/api/v1/namespaces/ns/services", None, Some((Services, Some("ns"), None))),
            (get.clone(), "/api/v1/namespaces/ns/services/web", None, Some((Services, Some("ns"), Some("web".into())))),
            (get.clone(), "/api/v1/endpoints", None, Some((Endpoints, None, None))),
            (get.clone(), "/apis/discovery.k8s.io/v1/endpointslices", None, Some((EndpointSlices, None, None))),
            (
                get.clone(),
                "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices/web-1",
                None,
                Some((EndpointSlices, Some("ns"), Some("web-1".into()))),
            ),
            (get.clone(), "/api/v1/nodes", Some("metadata.name=n1"), Some((Nodes, None, None))),
            (get.clone(), "/api/v1/nodes/n1", None, Some((Nodes, None, Some("n1".into())))),
            // other nodes, all nodes, other groups and versions, writes: the upstream's
            (get.clone(), "/api/v1/nodes", None, None),
            (get.clone(), "/api/v1/nodes", Some("metadata.name=n2"), None),
            (get.clone(), "/api/v1/nodes/n2", None, None),
            (get.clone(), "/api/v1/namespaces/ns/pods", None, None),
            (get.clone(), "/apis/discovery.k8s.io/v1beta1/endpointslices", None, None),
            (get.clone(), "/apis/networking.k8s.io/v1/servicecidrs", None, None),
            (get.clone(), "/api/v1/services/web", None, None),
            (get.clone(), "/api", None, None),
            (get.clone(), "/version", None, None),
            (Method::POST, "/api/v1/namespaces/ns/services", None, None),
            (Method::DELETE, "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices/web-1", None, None),
            (Method::PATCH, "/api/v1/nodes/n1", None, None),
        ];
        for (method, path, fields, want) in cases {
            assert_eq!(routed(method.clone(), path, fields), want, "{method} {path} {fields:?}");
        }
    }
}
