//! The requests a real kube-proxy v1.36 sends (`../shared/design/kube-proxy-protocol.md`),
//! verbatim, headers included, against a wrapper over HTTP: the four streaming lists at
//! start-up, the re-watch from the last version, the LIST+WATCH fallback, and the Event
//! POST that must pass through.

mod common;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const NODE: &str = "n1";
const TIMEOUT: &str = "417";

type Http = HttpClient<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

fn http() -> Http {
    HttpClient::builder(TokioExecutor::new()).build_http()
}

/// An open response: its status, headers, and the body read line by line.
struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: hyper::body::Incoming,
    pending: Vec<u8>,
}

impl Answer {
    /// The next newline-terminated JSON value of the body.
    async fn next_line(&mut self) -> Value {
        loop {
            if let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                return serde_json::from_slice(&line).expect("a JSON line");
            }
            let frame = within("a body frame", self.body.frame()).await.expect("body open").expect("frame");
            if let Ok(data) = frame.into_data() {
                self.pending.extend_from_slice(&data);
            }
        }
    }

    /// (type, name) of the next `n` events that are not bookmarks.
    async fn events(&mut self, n: usize) -> Vec<(String, String)> {
        let mut events = Vec::new();
        while events.len() < n {
            let line = self.next_line().await;
            if line["type"] != json!("BOOKMARK") {
                events.push((
                    line["type"].as_str().unwrap_or_default().to_string(),
                    line["object"]["metadata"]["name"].as_str().unwrap_or_default().to_string(),
                ));
            }
        }
        events
    }

    async fn whole(self) -> Value {
        let bytes = within("a body", self.body.collect()).await.expect("body").to_bytes();
        serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&bytes)))
    }

    /// (type, name) of watch events until the initial-events-end bookmark; returns them
    /// and the bookmark's resourceVersion.
    async fn initial_events(&mut self) -> (Vec<(String, String)>, String) {
        let mut events = Vec::new();
        loop {
            let line = self.next_line().await;
            let kind = line["type"].as_str().unwrap_or_default().to_string();
            if kind == "BOOKMARK" {
                if line["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == json!("true") {
                    let rv = line["object"]["metadata"]["resourceVersion"].as_str().expect("bookmark rv").to_string();
                    return (events, rv);
                }
                continue;
            }
            events.push((kind, line["object"]["metadata"]["name"].as_str().unwrap_or_default().to_string()));
        }
    }
}

async fn kube_proxy_request(base: &str, method: &str, path_and_query: &str, body: Option<Value>) -> Answer {
    let mut request = http::Request::builder()
        .method(method)
        .uri(format!("{base}{path_and_query}"))
        .header("User-Agent", "kube-proxy/v1.36.0 (linux/amd64) kubernetes/abcdef0")
        .header("Accept", "application/vnd.kubernetes.protobuf, */*")
        .header("Accept-Encoding", "gzip");
    if body.is_some() {
        request = request.header("Content-Type", "application/json");
    }
    let body = Full::new(body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string())));
    let response = within("a response", http().request(request.body(body).expect("request"))).await.expect("answered");
    let (parts, body) = response.into_parts();
    Answer { status: parts.status.as_u16(), headers: parts.headers, body, pending: Vec::new() }
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

fn sorted(mut v: Vec<(String, String)>) -> Vec<(String, String)> {
    v.sort();
    v
}

/// Services kube-proxy must not see: headless, and proxied by another service proxy.
async fn services_kube_proxy_ignores(upstream: &kube::Client) {
    let services: Api<Service> = Api::namespaced(upstream.clone(), "ns");
    let headless: Service = serde_json::from_value(json!({
        "metadata": {"name": "headless", "namespace": "ns"},
        "spec": {"clusterIP": "None", "ports": [{"port": 80}]},
    }))
    .expect("service");
    let other_proxy: Service = serde_json::from_value(json!({
        "metadata": {"name": "other-proxy", "namespace": "ns", "labels": {"service.kubernetes.io/service-proxy-name": "x"}},
        "spec": {"clusterIP": "10.96.0.99", "ports": [{"port": 80}]},
    }))
    .expect("service");
    for service in [headless, other_proxy] {
        services.create(&PostParams::default(), &service).await.expect("create");
    }
}

#[tokio::test]
async fn kube_proxys_start_up_requests_are_served_verbatim() {
    let (server, upstream) = two_unit_cluster().await;
    services_kube_proxy_ignores(&upstream).await;
    let wrapper = RunningWrapper::start(&server.url(), config(NODE)).await;
    let base = wrapper.url();
    // the wrapper's five upstream watches are open once their lists are done
    eventually("the wrapper's upstream watches", || async {
        let watches = server.requests().since(0).iter().filter(|r| r.query.contains("watch=true")).count();
        (watches == 5).then_some(())
    })
    .await;
    let before = server.requests().mark();

    let mut node = kube_proxy_request(&base, "GET", &format!(
        "/api/v1/nodes?allowWatchBookmarks=true&fieldSelector=metadata.name%3D{NODE}&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&timeoutSeconds={TIMEOUT}&watch=true"
    ), None).await;
    assert_eq!(node.status, 200);
    assert_eq!(node.headers["content-type"], "application/json");
    assert_eq!(node.initial_events().await.0, pairs(&[("ADDED", NODE)]));

    let mut cidrs = kube_proxy_request(&base, "GET", &format!(
        "/apis/networking.k8s.io/v1/servicecidrs?allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&timeoutSeconds={TIMEOUT}&watch=true"
    ), None).await;
    assert_eq!(cidrs.status, 200, "passed through to the upstream, which serves servicecidrs");
    assert_eq!(cidrs.initial_events().await.0, Vec::<(String, String)>::new());

    let mut slices = kube_proxy_request(&base, "GET", &format!(
        "/apis/discovery.k8s.io/v1/endpointslices?allowWatchBookmarks=true&labelSelector=%21service.kubernetes.io%2Fheadless&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&timeoutSeconds={TIMEOUT}&watch=true"
    ), None).await;
    assert_eq!(slices.status, 200);
    let (initial, slices_rv) = slices.initial_events().await;
    assert_eq!(sorted(initial), pairs(&[("ADDED", "plain-1"), ("ADDED", "web-1"), ("ADDED", "web-2")]));

    let mut services = kube_proxy_request(&base, "GET", &format!(
        "/api/v1/services?allowWatchBookmarks=true&fieldSelector=spec.clusterIP%21%3DNone&labelSelector=%21service.kubernetes.io%2Fservice-proxy-name&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&timeoutSeconds={TIMEOUT}&watch=true"
    ), None).await;
    assert_eq!(services.status, 200);
    assert_eq!(sorted(services.initial_events().await.0), pairs(&[("ADDED", "plain"), ("ADDED", "web")]));

    let event = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "kube-proxy.1", "namespace": "default"},
        "eventTime": "2026-11-22T00:00:00.000000Z", "reportingController": "kube-proxy",
        "reportingInstance": "kube-proxy-n1", "action": "StartKubeProxy", "reason": "Starting", "type": "Normal",
        "regarding": {"kind": "Node", "name": NODE},
    });
    let posted =
        kube_proxy_request(&base, "POST", "/apis/events.k8s.io/v1/namespaces/default/events", Some(event)).await;
    assert_eq!(posted.status, 201, "the Event POST passes through");
    let upstream_requests: Vec<(String, String)> =
        server.requests().since(before).into_iter().map(|r| (r.method, r.path)).collect();
    assert_eq!(
        upstream_requests,
        pairs(&[
            ("GET", "/apis/networking.k8s.io/v1/servicecidrs"),
            ("POST", "/apis/events.k8s.io/v1/namespaces/default/events")
        ]),
        "nodes, slices and services come from the cache; the rest passes through"
    );
    let stored: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(upstream.clone(), "default");
    assert_eq!(stored.get("kube-proxy.1").await.expect("created upstream").reason.as_deref(), Some("Starting"));

    // the open streaming list carries live events: the local node moves to unit b
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(upstream.clone());
    let patch = json!({"metadata": {"labels": {"unit": "b"}}});
    nodes.patch(NODE, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("relabel");
    let live = slices.events(2).await;
    assert_eq!(sorted(live), pairs(&[("MODIFIED", "web-1"), ("MODIFIED", "web-2")]));
    let node_line = node.next_line().await;
    assert_eq!(
        (node_line["type"].clone(), node_line["object"]["metadata"]["labels"]["unit"].clone()),
        (json!("MODIFIED"), json!("b"))
    );

    // when a watch times out kube-proxy re-watches from its last version
    drop(slices);
    nodes
        .patch(NODE, &PatchParams::default(), &Patch::Merge(&json!({"metadata": {"labels": {"unit": "a"}}})))
        .await
        .expect("relabel");
    let mut rewatch = kube_proxy_request(&base, "GET", &format!(
        "/apis/discovery.k8s.io/v1/endpointslices?allowWatchBookmarks=true&labelSelector=%21service.kubernetes.io%2Fheadless&resourceVersion={slices_rv}&timeoutSeconds={TIMEOUT}&watch=true"
    ), None).await;
    let replayed = rewatch.events(4).await;
    assert_eq!(
        sorted(replayed),
        pairs(&[("MODIFIED", "web-1"), ("MODIFIED", "web-1"), ("MODIFIED", "web-2"), ("MODIFIED", "web-2")]),
        "both relabels, exactly once each"
    );
}

#[tokio::test]
async fn the_list_then_watch_fallback_and_a_refused_streaming_list() {
    let (server, _upstream) = two_unit_cluster().await;
    let wrapper = RunningWrapper::start(&server.url(), config(NODE)).await;
    let base = wrapper.url();
    let list = kube_proxy_request(&base, "GET", "/apis/discovery.k8s.io/v1/endpointslices?labelSelector=%21service.kubernetes.io%2Fheadless&limit=500&resourceVersion=0", None).await;
    assert_eq!(list.status, 200);
    let list = list.whole().await;
    assert_eq!(list["kind"], json!("EndpointSliceList"));
    let rv = list["metadata"]["resourceVersion"].as_str().expect("list rv").to_string();
    let mut names: Vec<&str> =
        list["items"].as_array().expect("items").iter().filter_map(|i| i["metadata"]["name"].as_str()).collect();
    names.sort();
    assert_eq!(names, vec!["plain-1", "web-1", "web-2"]);
    let watch = kube_proxy_request(&base, "GET", &format!("/apis/discovery.k8s.io/v1/endpointslices?allowWatchBookmarks=true&labelSelector=%21service.kubernetes.io%2Fheadless&resourceVersion={rv}&timeoutSeconds={TIMEOUT}&watch=true"), None).await;
    assert_eq!(watch.status, 200);
    // a streaming list without resourceVersionMatch is refused with 422, which makes
    // client-go fall back to LIST at once instead of waiting for a bookmark
    let refused = kube_proxy_request(
        &base,
        "GET",
        "/apis/discovery.k8s.io/v1/endpointslices?allowWatchBookmarks=true&sendInitialEvents=true&watch=true",
        None,
    )
    .await;
    let status = refused.whole().await;
    assert_eq!((status["code"].clone(), status["reason"].clone()), (json!(422), json!("Invalid")));
}

/// A process on the node (or a compromised kube-proxy) borrowing the wrapper's identity:
/// reading Secrets, listing every node, patching a Node, impersonating an admin. Each is
/// refused 403 with a Status and never reaches the API server; what kube-proxy needs still
/// passes, without the client's `Impersonate-*` headers.
#[tokio::test]
async fn what_kube_proxy_does_not_need_is_refused_and_never_reaches_the_api_server() {
    let (server, _upstream) = two_unit_cluster().await;
    let wrapper = RunningWrapper::start(&server.url(), config(NODE)).await;
    let base = wrapper.url();
    let before = server.requests().mark();
    let attempts = [
        ("GET", "/api/v1/secrets", None),
        ("GET", "/api/v1/namespaces/kube-system/secrets", None),
        ("GET", "/api/v1/nodes", None),
        ("GET", "/api/v1/nodes/n2", None),
        ("PATCH", "/api/v1/nodes/n2", Some(json!({"metadata": {"labels": {"unit": "a"}}}))),
        ("POST", "/api/v1/namespaces/ns/pods", Some(json!({"metadata": {"name": "trampoline"}}))),
        ("DELETE", "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices/web-1", None),
    ];
    for (method, path, body) in attempts {
        let answer = kube_proxy_request(&base, method, path, body).await;
        assert_eq!(answer.status, 403, "{method} {path}");
        let status = answer.whole().await;
        assert_eq!((status["kind"].as_str(), status["reason"].as_str()), (Some("Status"), Some("Forbidden")));
        let message = status["message"].as_str().unwrap_or_default();
        assert!(message.starts_with(&format!("the grid wrapper does not pass {method} {path} through")), "{message}");
    }
    // (the wrapper's own watches may be renewed meanwhile)
    let clients = || server.requests().since(before).into_iter().filter(|r| !r.query.contains("watch=true"));
    let reached: Vec<_> = clients().collect();
    assert!(reached.is_empty(), "refused requests never reach the API server: {reached:?}");
    assert_eq!(wrapper.wrapper.metrics().refused_requests.get(), 7);

    // discovery still passes; an impersonation header is dropped on the way
    let request = http::Request::builder()
        .uri(format!("{base}/version"))
        .header("Impersonate-User", "system:admin")
        .header("Impersonate-Group", "system:masters")
        .body(Full::new(Bytes::new()))
        .expect("request");
    let version = within("/version", http().request(request)).await.expect("answered");
    assert_eq!(version.status(), 200);
    let passed: Vec<_> = clients().collect();
    assert_eq!(passed.iter().map(|r| (r.method.as_str(), r.path.as_str())).collect::<Vec<_>>(), [("GET", "/version")]);
    assert_eq!(passed[0].impersonating, None, "the client's Impersonate-User was dropped");
}
