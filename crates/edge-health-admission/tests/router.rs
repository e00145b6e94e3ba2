//! The webhook router called without a socket: v1 and v1beta1 reviews for each hook, the
//! exact patches applied to the original objects, and every way a request can be odd.

use std::sync::Arc;

use base64::Engine;
use edge_health_admission::metrics::Metrics;
use edge_health_admission::nodes::NodeCache;
use edge_health_admission::server::{Webhook, router};
use edgegrid_core::protection::ProtectionLimit;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Node;
use proptest::prelude::*;
use serde_json::{Value, json};
use tower::ServiceExt;

fn node(name: &str, ready: &str, unhealthy: bool) -> Value {
    let mut node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"unit": "a"}},
        "spec": {"taints": [
            {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "timeAdded": "2026-11-22T10:00:00Z"},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-11-22T10:00:05Z"}
        ]},
        "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "NodeStatusUnknown",
            "lastHeartbeatTime": "2026-11-22T09:59:00Z", "lastTransitionTime": "2026-11-22T10:00:00Z"}]},
    });
    // its edge-health daemon runs (so, with its peers, edge-health watches it)
    node["metadata"]["annotations"] = json!({"edgegrid.io/edge-health-address": "10.0.0.1:51005"});
    if unhealthy {
        node["metadata"]["annotations"]["nodeunhealth"] = json!("yes");
    }
    node
}

/// A webhook whose cache knows `alive` (Unknown, not voted), `dead` (Unknown, voted
/// unhealthy) and `fine` (Ready).
fn webhook_with(synced: bool) -> Arc<Webhook> {
    webhook_configured(synced, ProtectionLimit::Unlimited, false)
}

fn webhook_configured(
    synced: bool,
    max_unreachable_protection: ProtectionLimit,
    always_reachable: bool,
) -> Arc<Webhook> {
    let nodes = NodeCache::default();
    for n in [node("alive", "Unknown", false), node("dead", "Unknown", true), node("fine", "True", false)] {
        nodes.apply(&serde_json::from_value::<Node>(n).expect("node"));
    }
    if synced {
        nodes.done();
    }
    Arc::new(Webhook {
        nodes: Arc::new(nodes),
        metrics: Arc::new(Metrics::default()),
        max_unreachable_protection,
        always_reachable,
    })
}

fn review(api_version: &str, group: &str, resource: &str, operation: &str, object: Value) -> Value {
    json!({
        "apiVersion": api_version, "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": group, "version": "v1", "kind": "X"},
            "resource": {"group": group, "version": "v1", "resource": resource},
            "operation": operation, "userInfo": {"username": "system:serviceaccount:kube-system:node-controller"},
            "object": object, "oldObject": object,
        },
    })
}

async fn post(webhook: &Arc<Webhook>, path: &str, content_type: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
    let request = http::Request::post(path)
        .header("content-type", content_type)
        .body(axum::body::Body::from(body))
        .expect("request");
    let response = router(webhook.clone()).oneshot(request).await.expect("router answers");
    let status = response.status().as_u16();
    (status, response.into_body().collect().await.expect("body").to_bytes().to_vec())
}

/// Sends a review; checks the envelope; returns the patched object (or the original when
/// no patch came back).
async fn patched(webhook: &Arc<Webhook>, path: &str, api_version: &str, review: Value) -> Value {
    let (status, body) = post(webhook, path, "application/json", review.to_string().into_bytes()).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let answer: Value = serde_json::from_slice(&body).expect("JSON answer");
    assert_eq!(answer["apiVersion"], json!(api_version), "the request's version is echoed");
    assert_eq!(answer["kind"], json!("AdmissionReview"));
    assert_eq!(answer["response"]["uid"], review["request"]["uid"]);
    assert_eq!(answer["response"]["allowed"], json!(true));
    let mut object = review["request"]["object"].clone();
    if let Some(encoded) = answer["response"]["patch"].as_str() {
        assert_eq!(answer["response"]["patchType"], json!("JSONPatch"));
        let bytes = base64::engine::general_purpose::STANDARD.decode(encoded).expect("base64");
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).expect("a JSON patch");
        json_patch::patch(&mut object, &patch).expect("the patch applies to the original object");
    } else {
        assert_eq!(answer["response"].get("patchType"), None);
    }
    object
}

const VERSIONS: [&str; 2] = ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"];

#[tokio::test]
async fn node_taint_strips_only_the_unreachable_no_execute_taint_of_a_protected_node() {
    let webhook = webhook_with(true);
    for version in VERSIONS {
        let alive = node("alive", "Unknown", false);
        let got =
            patched(&webhook, "/node-taint", version, review(version, "", "nodes", "UPDATE", alive.clone())).await;
        let mut want = alive.clone();
        want["spec"]["taints"].as_array_mut().expect("taints").remove(1);
        assert_eq!(got, want, "{version}");
        for unchanged in [node("dead", "Unknown", true), node("fine", "True", false)] {
            let got =
                patched(&webhook, "/node-taint", version, review(version, "", "nodes", "UPDATE", unchanged.clone()))
                    .await;
            assert_eq!(got, unchanged, "{version}");
        }
    }
}

fn endpoints_object() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "web", "namespace": "ns"},
        "subsets": [{
            "addresses": [{"ip": "10.0.0.9", "nodeName": "fine"}],
            "notReadyAddresses": [
                {"ip": "10.0.0.1", "nodeName": "alive"}, {"ip": "10.0.0.2", "nodeName": "dead"},
                {"ip": "10.0.0.3", "nodeName": "ghost"}, {"ip": "10.0.0.4", "nodeName": "alive"}
            ],
            "ports": [{"port": 80, "protocol": "TCP"}]
        }]
    })
}

fn slice_object() -> Value {
    let endpoint = |ip: &str, node: &str, ready: bool, terminating: bool| json!({"addresses": [ip], "nodeName": node, "conditions": {"ready": ready, "serving": ready, "terminating": terminating}});
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
        "metadata": {"name": "web-1", "namespace": "ns", "labels": {"kubernetes.io/service-name": "web"}},
        "endpoints": [
            endpoint("10.0.0.1", "alive", false, false), endpoint("10.0.0.2", "dead", false, false),
            endpoint("10.0.0.3", "ghost", false, false), endpoint("10.0.0.4", "alive", false, true),
            endpoint("10.0.0.9", "fine", true, false)
        ],
        "ports": [{"port": 80, "protocol": "TCP"}]
    })
}

#[tokio::test]
async fn endpoint_hooks_keep_only_protected_nodes_addresses_ready() {
    let webhook = webhook_with(true);
    for version in VERSIONS {
        let got =
            patched(&webhook, "/endpoint", version, review(version, "", "endpoints", "UPDATE", endpoints_object()))
                .await;
        let mut want = endpoints_object();
        want["subsets"][0]["addresses"] = json!([
            {"ip": "10.0.0.9", "nodeName": "fine"}, {"ip": "10.0.0.1", "nodeName": "alive"}, {"ip": "10.0.0.4", "nodeName": "alive"}
        ]);
        want["subsets"][0]["notReadyAddresses"] =
            json!([{"ip": "10.0.0.2", "nodeName": "dead"}, {"ip": "10.0.0.3", "nodeName": "ghost"}]);
        assert_eq!(got, want, "{version}");

        let review = review(version, "discovery.k8s.io", "endpointslices", "UPDATE", slice_object());
        let got = patched(&webhook, "/endpointslice", version, review).await;
        let mut want = slice_object();
        want["endpoints"][0]["conditions"] = json!({"ready": true, "serving": true, "terminating": false});
        assert_eq!(got, want, "only the alive node's non-terminating endpoint: {version}");
    }
}

#[tokio::test]
async fn odd_requests_are_allowed_unchanged_and_counted() {
    let webhook = webhook_with(true);
    let v1 = VERSIONS[0];
    let cases = [
        ("/node-taint", review(v1, "", "endpoints", "UPDATE", endpoints_object()), "wrong_request"),
        ("/node-taint", review(v1, "", "nodes", "CREATE", node("alive", "Unknown", false)), "wrong_request"),
        ("/endpoint", review(v1, "", "endpoints", "UPDATE", json!({"subsets": "not a list"})), "undecodable"),
        ("/endpointslice", review(v1, "discovery.k8s.io", "endpointslices", "UPDATE", json!(42)), "undecodable"),
        ("/node-taint", review(v1, "", "nodes", "UPDATE", json!({"metadata": {"name": "x"}})), "unchanged"),
    ];
    for (path, review, outcome) in cases {
        let object = review["request"]["object"].clone();
        assert_eq!(patched(&webhook, path, v1, review).await, object, "{path} {outcome}");
    }
    let metrics = controller_support::metrics::exposition("edge-health-admission", &*webhook.metrics);
    for line in [
        "edge_health_admission_reviews_total{hook=\"node-taint\",outcome=\"wrong_request\"} 2",
        "edge_health_admission_reviews_total{hook=\"endpoint\",outcome=\"undecodable\"} 1",
        "edge_health_admission_reviews_total{hook=\"endpointslice\",outcome=\"undecodable\"} 1",
        "edge_health_admission_reviews_total{hook=\"node-taint\",outcome=\"unchanged\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "missing {line} in\n{metrics}");
    }
    // a cache that has not listed yet decides nothing about endpoints
    let unsynced = webhook_with(false);
    let review = review(v1, "", "endpoints", "UPDATE", endpoints_object());
    assert_eq!(patched(&unsynced, "/endpoint", v1, review).await, endpoints_object());
}

#[tokio::test]
async fn malformed_bodies_and_content_types_are_400_with_a_message() {
    let webhook = webhook_with(true);
    let good = review(VERSIONS[0], "", "nodes", "UPDATE", node("alive", "Unknown", false)).to_string().into_bytes();
    let cases: [(&str, Vec<u8>, &str); 5] = [
        ("text/plain", good.clone(), "Content-Type must be application/json"),
        ("application/json", b"{".to_vec(), "the body is not JSON"),
        ("application/json", br#"{"kind":"Pod","apiVersion":"v1"}"#.to_vec(), "kind must be AdmissionReview"),
        (
            "application/json",
            br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v2"}"#.to_vec(),
            "apiVersion must be",
        ),
        (
            "application/json",
            br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{}}"#.to_vec(),
            "request.uid is missing",
        ),
    ];
    for (content_type, body, message) in cases {
        let (status, answer) = post(&webhook, "/node-taint", content_type, body).await;
        let answer = String::from_utf8_lossy(&answer).into_owned();
        assert_eq!(status, 400, "{answer}");
        assert!(answer.contains(message), "{answer:?} should say {message:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Whatever the bytes, the answer is a well-formed review for that request or a 400.
    #[test]
    fn any_body_gets_a_review_or_a_400(
        path in prop::sample::select(vec!["/node-taint", "/endpoint", "/endpointslice"]),
        body in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..200),
            (any::<bool>(), prop::sample::select(vec!["", "nodes", "endpoints", "endpointslices"]), ".{0,30}")
                .prop_map(|(v1, resource, junk)| {
                    let version = if v1 { "admission.k8s.io/v1" } else { "admission.k8s.io/v1beta1" };
                    let object = serde_json::from_str::<Value>(&junk).unwrap_or(json!({"metadata": {"name": junk}}));
                    review(version, "", resource, "UPDATE", object).to_string().into_bytes()
                }),
            // a real review with a few bytes changed: the lean reading's every way out
            (0usize..3, prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4)).prop_map(|(which, flips)| {
                let v1 = VERSIONS[0];
                let mut body = match which {
                    0 => review(v1, "", "nodes", "UPDATE", node("alive", "Unknown", false)),
                    1 => review(v1, "", "endpoints", "UPDATE", endpoints_object()),
                    _ => review(v1, "discovery.k8s.io", "endpointslices", "UPDATE", slice_object()),
                }
                .to_string()
                .into_bytes();
                for (at, byte) in flips {
                    let at = at.index(body.len());
                    body[at] = byte;
                }
                body
            }),
        ],
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        let (status, answer) = runtime.block_on(post(&webhook_with(true), path, "application/json", body.clone()));
        if status == 400 {
            prop_assert!(!answer.is_empty());
        } else {
            prop_assert_eq!(status, 200);
            let answer: Value = serde_json::from_slice(&answer).expect("JSON");
            prop_assert!(serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_ok(), "only JSON is answered 200");
            // (JSON a `Value` cannot hold, in a part nobody reads, is answered too)
            if let Ok(request) = serde_json::from_slice::<Value>(&body) {
                prop_assert_eq!(&answer["response"]["uid"], &request["request"]["uid"]);
            }
            prop_assert_eq!(&answer["response"]["allowed"], &json!(true));
        }
    }
}

#[tokio::test]
async fn always_reachable_protects_voted_nodes_too() {
    let webhook = webhook_configured(true, ProtectionLimit::Unlimited, true);
    let v1 = VERSIONS[0];
    let dead = node("dead", "Unknown", true);
    let got = patched(&webhook, "/node-taint", v1, review(v1, "", "nodes", "UPDATE", dead.clone())).await;
    let mut want = dead;
    want["spec"]["taints"].as_array_mut().expect("taints").remove(1);
    assert_eq!(got, want);
    let got = patched(&webhook, "/endpoint", v1, review(v1, "", "endpoints", "UPDATE", endpoints_object())).await;
    assert_eq!(
        got["subsets"][0]["notReadyAddresses"],
        json!([{"ip": "10.0.0.3", "nodeName": "ghost"}]),
        "only the unknown node's address stays not ready"
    );
}

#[tokio::test]
async fn protection_ends_after_the_limit_and_a_node_may_only_shorten_it() {
    let hour = ProtectionLimit::parse("1h").expect("a duration");
    let webhook = webhook_configured(true, hour, false);
    let v1 = VERSIONS[0];
    let mut long_gone = node("alive", "Unknown", false);
    long_gone["status"]["conditions"][0]["lastTransitionTime"] = json!("2020-01-01T00:00:00Z");
    let got = patched(&webhook, "/node-taint", v1, review(v1, "", "nodes", "UPDATE", long_gone.clone())).await;
    assert_eq!(got, long_gone, "unknown for years, past the 1h limit: as sent");
    let mut unlimited = long_gone.clone();
    unlimited["metadata"]["annotations"] = json!({"superedge.io/max-unreachable-protection": "0"});
    let got = patched(&webhook, "/node-taint", v1, review(v1, "", "nodes", "UPDATE", unlimited.clone())).await;
    assert_eq!(got, unlimited, "a node's own annotation cannot lift the operator's limit");
    // it can shorten it: a node Unknown for a minute, under 1h, annotated 30s
    let mut recent = node("alive", "Unknown", false);
    let minute_ago = edgegrid_core::protection::Timestamp::now() - std::time::Duration::from_secs(60);
    recent["status"]["conditions"][0]["lastTransitionTime"] = json!(minute_ago.to_string());
    let got = patched(&webhook, "/node-taint", v1, review(v1, "", "nodes", "UPDATE", recent.clone())).await;
    let mut want = recent.clone();
    want["spec"]["taints"].as_array_mut().expect("taints").remove(1);
    assert_eq!(got, want, "a minute into a 1h limit: protected");
    recent["metadata"]["annotations"]["superedge.io/max-unreachable-protection"] = json!("30s");
    let got = patched(&webhook, "/node-taint", v1, review(v1, "", "nodes", "UPDATE", recent.clone())).await;
    assert_eq!(got, recent, "the node's own 30s shortens it: as sent");
}
