//! The requests a real kube-proxy v1.36 sends (`../shared/design/kube-proxy-protocol.md`),
//! verbatim, headers included, against a wrapper over HTTP: the four streaming lists at
//! start-up, the re-watch from the last version, the LIST+WATCH fallback, and the Event
//! POST that must pass through.

mod common;

use bytes::Bytes;
use common::*;
use edgegrid_testing::protobuf::without_empty;
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
    fn is_protobuf(&self) -> bool {
        self.headers
            .get("content-type")
            .is_some_and(|t| t.as_bytes().starts_with(b"application/vnd.kubernetes.protobuf"))
    }

    /// The next watch event of the body, `{"type", "object"}` as in JSON, whichever encoding
    /// the server chose (client-go decodes by the response's Content-Type).
    async fn next_line(&mut self) -> Value {
        loop {
            if self.is_protobuf() {
                if let Some(len) = self.pending.get(..4).map(|l| u32::from_be_bytes([l[0], l[1], l[2], l[3]]) as usize)
                    && self.pending.len() >= 4 + len
                {
                    let frame: Vec<u8> = self.pending.drain(..4 + len).collect();
                    let mut events = edgegrid_testing::protobuf::watch_frames(&frame);
                    assert_eq!(events.len(), 1, "one frame, one event");
                    let (kind, object) = events.remove(0);
                    return json!({"type": kind, "object": object});
                }
            } else if let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
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

    async fn next_line_owned(mut self) -> Value {
        self.next_line().await
    }

    /// The whole body as JSON: decoded from protobuf when the server answered protobuf.
    async fn whole(self) -> Value {
        let protobuf = self.is_protobuf();
        let bytes = within("a body", self.body.collect()).await.expect("body").to_bytes();
        if protobuf {
            let (api_version, kind, raw) = edgegrid_testing::protobuf::unwrap_envelope(&bytes);
            return match kind.strip_suffix("List") {
                Some(_) => edgegrid_testing::protobuf::list_json(&api_version, &kind, &raw),
                None => edgegrid_testing::protobuf::object_json(&api_version, &kind, &raw),
            };
        }
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

/// What kube-proxy's client-go sends (its content type is protobuf).
const KUBE_PROXY_ACCEPT: &str = "application/vnd.kubernetes.protobuf, */*";

async fn kube_proxy_request(base: &str, method: &str, path_and_query: &str, body: Option<Value>) -> Answer {
    request_accepting(base, KUBE_PROXY_ACCEPT, method, path_and_query, body).await
}

async fn request_accepting(
    base: &str,
    accept: &str,
    method: &str,
    path_and_query: &str,
    body: Option<Value>,
) -> Answer {
    let mut request = http::Request::builder()
        .method(method)
        .uri(format!("{base}{path_and_query}"))
        .header("User-Agent", "kube-proxy/v1.36.0 (linux/amd64) kubernetes/abcdef0")
        .header("Accept", accept)
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
    assert_eq!(node.headers["content-type"], "application/vnd.kubernetes.protobuf;stream=watch");
    assert_eq!(node.initial_events().await.0, pairs(&[("ADDED", NODE)]));

    let mut cidrs = kube_proxy_request(&base, "GET", &format!(
        "/apis/networking.k8s.io/v1/servicecidrs?allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&timeoutSeconds={TIMEOUT}&watch=true"
    ), None).await;
    assert_eq!(cidrs.status, 200, "passed through to the upstream, which serves servicecidrs");
    // an API server answering JSON to kube-proxy's Accept: client-go decodes by Content-Type
    assert_eq!(cidrs.headers["content-type"], "application/json");
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

/// Objects with most of what kube-proxy reads filled in, beside the two-unit cluster's.
async fn rich_objects(upstream: &kube::Client) {
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "rich", "namespace": "ns", "labels": {"app": "rich"},
                     "annotations": {"topologyKeys": "[\"unit\"]"}},
        "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20", "fd00::20"],
                 "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "PreferDualStack",
                 "ports": [{"name": "http", "port": 80, "targetPort": "web", "protocol": "TCP", "nodePort": 30080},
                           {"name": "dns", "port": 53, "targetPort": 5353, "protocol": "UDP", "appProtocol": "dns"}],
                 "selector": {"app": "rich"}, "sessionAffinity": "ClientIP",
                 "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}},
                 "externalTrafficPolicy": "Local", "healthCheckNodePort": 31000, "internalTrafficPolicy": "Cluster",
                 "externalIPs": ["192.0.2.1"], "loadBalancerSourceRanges": ["192.0.2.0/24"],
                 "trafficDistribution": "PreferClose"},
    }))
    .expect("service");
    // the slice's owner is the Service as created (an owner reference with another uid
    // names an owner that does not exist, and the garbage collector takes the slice)
    let uid = create_namespaced(upstream, service).await.metadata.uid.expect("a uid");
    let slice: k8s_openapi::api::discovery::v1::EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "rich-1", "namespace": "ns", "labels": {"kubernetes.io/service-name": "rich"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "rich", "uid": uid,
                                          "controller": true, "blockOwnerDeletion": true}]},
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["10.0.1.1"], "nodeName": "n1", "zone": "z1", "hostname": "pod-a",
             "conditions": {"ready": true, "serving": true, "terminating": false},
             "targetRef": {"kind": "Pod", "namespace": "ns", "name": "pod-a", "uid": "u-a"},
             "hints": {"forZones": [{"name": "z1"}]}},
            {"addresses": ["10.0.1.3"], "nodeName": "n3", "conditions": {"ready": false}},
        ],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP", "appProtocol": "http"},
                  {"name": "dns", "port": 5353, "protocol": "UDP"}],
    }))
    .expect("slice");
    create_namespaced(upstream, slice).await;
    let endpoints: k8s_openapi::api::core::v1::Endpoints = serde_json::from_value(json!({
        "metadata": {"name": "rich", "namespace": "ns"},
        "subsets": [{"addresses": [{"ip": "10.0.1.1", "nodeName": "n1", "hostname": "pod-a",
                                    "targetRef": {"kind": "Pod", "namespace": "ns", "name": "pod-a"}}],
                     "notReadyAddresses": [{"ip": "10.0.1.3", "nodeName": "n3"}],
                     "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}],
    }))
    .expect("endpoints");
    create_namespaced(upstream, endpoints).await;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(upstream.clone());
    let spec = json!({"spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24", "fd00:1::/64"],
                               "providerID": "edge://n1", "taints": [{"key": "edge", "value": "true", "effect": "NoSchedule"}]}});
    nodes.patch(NODE, &PatchParams::default(), &Patch::Merge(&spec)).await.expect("node spec");
    let status = json!({"status": {
        "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
        "allocatable": {"cpu": "3500m", "memory": "7Gi"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready",
                        "lastHeartbeatTime": "2026-11-26T10:00:00Z", "lastTransitionTime": "2026-11-20T08:30:00Z"}],
        "addresses": [{"type": "InternalIP", "address": "192.168.1.11"}, {"type": "Hostname", "address": "n1"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {"machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "6.1", "osImage": "Debian",
                     "containerRuntimeVersion": "containerd://2.1", "kubeletVersion": "v1.33.0",
                     "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "arm64"},
        "images": [{"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 320368}],
    }});
    nodes.patch_status(NODE, &PatchParams::default(), &Patch::Merge(&status)).await.expect("node status");
}

/// kube-proxy's `Accept` gets Kubernetes protobuf; the same requests with `Accept:
/// application/json` get JSON. Decoded with k8s-pb's generated types (as client-go decodes
/// with its own), every list, object and watch event equals its JSON answer.
#[tokio::test]
async fn protobuf_answers_decode_to_the_json_answers_object_by_object() {
    let (server, upstream) = two_unit_cluster().await;
    rich_objects(&upstream).await;
    let wrapper = RunningWrapper::start(&server.url(), config(NODE)).await;
    let base = wrapper.url();
    let both = |path: String| {
        let base = base.clone();
        async move {
            let protobuf = kube_proxy_request(&base, "GET", &path, None).await;
            let json = request_accepting(&base, "application/json", "GET", &path, None).await;
            assert_eq!((protobuf.status, json.status), (200, 200), "{path}");
            assert_eq!(protobuf.headers["content-type"], "application/vnd.kubernetes.protobuf", "{path}");
            assert_eq!(json.headers["content-type"], "application/json", "{path}");
            (without_empty(&protobuf.whole().await), without_empty(&json.whole().await))
        }
    };
    let lists = [
        "/api/v1/services".to_string(),
        "/api/v1/namespaces/ns/services".into(),
        "/apis/discovery.k8s.io/v1/endpointslices".into(),
        "/api/v1/endpoints".into(),
        format!("/api/v1/nodes?fieldSelector=metadata.name%3D{NODE}"),
        "/apis/discovery.k8s.io/v1/endpointslices?limit=1".into(),
    ];
    for path in lists {
        let (protobuf, json) = both(path.clone()).await;
        let items = json["items"].as_array().expect("items");
        assert!(!items.is_empty(), "{path}");
        assert_eq!(protobuf["metadata"], json["metadata"], "{path}");
        assert_eq!(protobuf["items"].as_array().map(Vec::len), Some(items.len()), "{path}");
        for (decoded, answered) in protobuf["items"].as_array().into_iter().flatten().zip(items) {
            assert_eq!(decoded, answered, "{path}: {}", answered["metadata"]["name"]);
        }
    }
    let (paged, _) = both("/apis/discovery.k8s.io/v1/endpointslices?limit=1".into()).await;
    assert!(paged["metadata"]["continue"].as_str().is_some_and(|c| !c.is_empty()), "ListMeta carries continue");
    for path in [
        "/api/v1/namespaces/ns/services/rich",
        "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices/rich-1",
        "/api/v1/namespaces/ns/endpoints/rich",
        "/api/v1/nodes/n1",
    ] {
        let (protobuf, json) = both(path.to_string()).await;
        assert_eq!(protobuf, json, "{path}");
    }
    let (node, _) = both("/api/v1/nodes/n1".into()).await;
    assert_eq!(node["status"]["conditions"][0]["lastHeartbeatTime"], json!("2026-11-26T10:00:00Z"));

    // watches from one version: the same events in both encodings
    let (list, _) = both("/apis/discovery.k8s.io/v1/endpointslices".into()).await;
    let rv = list["metadata"]["resourceVersion"].as_str().expect("rv").to_string();
    let watch =
        format!("/apis/discovery.k8s.io/v1/endpointslices?allowWatchBookmarks=true&resourceVersion={rv}&watch=true");
    let mut protobuf = kube_proxy_request(&base, "GET", &watch, None).await;
    let mut json = request_accepting(&base, "application/json", "GET", &watch, None).await;
    assert_eq!(protobuf.headers["content-type"], "application/vnd.kubernetes.protobuf;stream=watch");
    // n3 joins unit a: web-1 and rich-1 gain its endpoints; then web-2 goes (two upstream
    // streams, so the second change waits for the first to be served)
    let mut bookmarks = 0;
    let mut got = (Vec::new(), Vec::new());
    let changes: [(usize, &[(&str, &str)]); 2] =
        [(2, &[("MODIFIED", "rich-1"), ("MODIFIED", "web-1")]), (1, &[("DELETED", "web-2")])];
    for (step, (count, expected)) in changes.into_iter().enumerate() {
        if step == 0 {
            relabel(&upstream, "n3", "a").await;
        } else {
            let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> = Api::namespaced(upstream.clone(), "ns");
            slices.delete("web-2", &Default::default()).await.expect("delete");
        }
        let (mut from_protobuf, mut from_json) = (Vec::new(), Vec::new());
        while from_protobuf.len() < count {
            let line = protobuf.next_line().await;
            if line["type"] == json!("BOOKMARK") {
                bookmarks += 1;
                assert_eq!(line["object"]["kind"], json!("EndpointSlice"));
                assert!(line["object"]["metadata"]["resourceVersion"].as_str().is_some(), "{line}");
                continue;
            }
            from_protobuf.push(line);
        }
        while from_json.len() < count {
            let line = json.next_line().await;
            if line["type"] != json!("BOOKMARK") {
                from_json.push(line);
            }
        }
        let events: Vec<(&str, &str)> = from_protobuf
            .iter()
            .filter_map(|e| Some((e["type"].as_str()?, e["object"]["metadata"]["name"].as_str()?)))
            .collect();
        assert_eq!(events, expected);
        got.0.extend(from_protobuf);
        got.1.extend(from_json);
    }
    let normalized = |events: &[Value]| events.iter().map(without_empty).collect::<Vec<_>>();
    assert_eq!(normalized(&got.0), normalized(&got.1), "the same events, object by object");
    // bookmarks come every 200 ms: one has arrived by the time a new one is waited for
    while bookmarks == 0 {
        let line = protobuf.next_line().await;
        bookmarks += usize::from(line["type"] == json!("BOOKMARK"));
    }

    // a version older than the history: a 410 ERROR event carrying a Status, both ways
    let expired = "/apis/discovery.k8s.io/v1/endpointslices?resourceVersion=1&watch=true";
    let protobuf = kube_proxy_request(&base, "GET", expired, None).await.next_line_owned().await;
    let json = request_accepting(&base, "application/json", "GET", expired, None).await.next_line_owned().await;
    assert_eq!(without_empty(&protobuf), without_empty(&json));
    assert_eq!((protobuf["type"].clone(), protobuf["object"]["code"].clone()), (json!("ERROR"), json!(410)));
}

/// What a client that cannot take JSON gets where there is no protobuf: 406, never a
/// body it cannot decode; with JSON among its choices it gets JSON.
#[tokio::test]
async fn protobuf_only_clients_get_406_where_protobuf_is_not_offered() {
    let (server, _upstream) = two_unit_cluster().await;
    let wrapper = RunningWrapper::start(&server.url(), config(NODE)).await;
    let base = wrapper.url();
    let metadata_only = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    let refused = request_accepting(&base, metadata_only, "GET", "/api/v1/services", None).await;
    assert_eq!(refused.status, 406);
    let status = refused.whole().await;
    assert_eq!((status["reason"].clone(), status["code"].clone()), (json!("NotAcceptable"), json!(406)));
    let fallback = format!("{metadata_only},application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1");
    let answer = request_accepting(&base, &fallback, "GET", "/api/v1/services", None).await;
    assert_eq!((answer.status, answer.headers["content-type"].to_str().ok()), (200, Some("application/json")));
    assert_eq!(answer.whole().await["kind"], json!("PartialObjectMetadataList"));
}
