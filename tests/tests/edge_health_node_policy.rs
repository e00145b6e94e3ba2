//! The chart's edge-health node restriction (a ValidatingAdmissionPolicy and its binding,
//! from `charts/edgegrid/files/edge-health-node-policy.yaml` as the chart renders it)
//! enforced by the in-repo API server: a table of Node writes an unmodified kube client
//! makes as the edge-health service account of node n1 (its token's node name), and as
//! other users, each allowed or refused with the real server's status and message; a
//! refused write leaves the Node as it was. Under both verdict writers: with `cloud` (the
//! chart's default) the daemon writes nothing on other Nodes; with `edge` it may write their
//! `nodeunhealth` and nothing else.

use edgegrid_core::keys::{
    EDGE_HEALTH_ADDRESS_ANNOTATION, EDGE_HEALTH_PUBLIC_KEY_ANNOTATION, EDGE_HEALTH_UNHEALTHY_VIEW_ANNOTATION,
    MAX_UNREACHABLE_PROTECTION_ANNOTATION, NODE_UNHEALTH_ANNOTATION,
};
use edgegrid_testing::chart::{EDGE_HEALTH_NODE_POLICY, edge_health_node_policy};
use fake_apiserver::{FakeApiServer, UserInfo};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

#[path = "support/policy_table.rs"]
mod policy_table;
use policy_table::{client, install};

/// The release namespace the policy is rendered for.
const NAMESPACE: &str = "edgegrid";
const UNIT_LABEL: &str = "zone1";
/// Tokens: edge-health's on n1 and on n2, one naming no node, the grid controller's.
const EDGE_HEALTH_N1: &str = "edge-health-n1";
const EDGE_HEALTH_N2: &str = "edge-health-n2";
const EDGE_HEALTH_UNBOUND: &str = "edge-health-unbound";
const GRID_CONTROLLER: &str = "grid-controller";
/// No token: `system:admin`.
const ADMIN: &str = "";

/// A Node of `unit` (none: in no unit); `cp` is a tainted control-plane node.
fn node(name: &str, unit: Option<&str>) -> Node {
    let mut labels = json!({"kubernetes.io/hostname": name});
    if let Some(unit) = unit {
        labels[UNIT_LABEL] = json!(unit);
    }
    let mut spec = json!({"podCIDR": "10.244.0.0/24"});
    if name == "cp" {
        labels["node-role.kubernetes.io/control-plane"] = json!("");
        spec["taints"] = json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]);
    }
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels, "annotations": {"kept": "yes"}},
        "spec": spec}))
    .unwrap()
}

/// How a row writes.
enum Write {
    Patch(Patch<Value>),
    Status(Patch<Value>),
    /// The daemon's verdict write: a JSON patch testing the Node's current resourceVersion,
    /// then adding `nodeunhealth: "yes"` (true) or removing it.
    Verdict(bool),
}

fn json_patch(ops: Value) -> Patch<Value> {
    Patch::Json(serde_json::from_value(ops).unwrap())
}

/// The full message of a refusal of a write to Node `node`.
fn refusal(node: &str, message: &str) -> String {
    policy_table::refusal("nodes", node, EDGE_HEALTH_NODE_POLICY, message)
}

#[tokio::test]
async fn with_the_cloud_writing_verdicts_edge_health_writes_only_its_own_nodes_annotations() {
    table("cloud").await;
}

#[tokio::test]
async fn with_the_edge_writing_verdicts_edge_health_also_writes_other_nodes_verdicts_and_nothing_else() {
    table("edge").await;
}

async fn table(writer: &str) {
    let edge = writer == "edge";
    let server = FakeApiServer::start().await.unwrap();
    let edge_health = UserInfo::service_account(NAMESPACE, "edge-health");
    server.add_user(EDGE_HEALTH_N1, edge_health.clone().on_node("n1"));
    server.add_user(EDGE_HEALTH_N2, edge_health.clone().on_node("n2"));
    server.add_user(EDGE_HEALTH_UNBOUND, edge_health);
    server.add_user(GRID_CONTROLLER, UserInfo::service_account(NAMESPACE, "grid-controller"));

    let admin = client(&server, ADMIN).await;
    install(&server, edge_health_node_policy(NAMESPACE, writer)).await;
    let nodes: Api<Node> = Api::all(admin.clone());
    for (name, unit) in
        [("n1", Some("unit-a")), ("n2", Some("unit-a")), ("b1", Some("unit-b")), ("cp", None), ("lone", None)]
    {
        nodes.create(&PostParams::default(), &node(name, unit)).await.unwrap();
    }

    let address = EDGE_HEALTH_ADDRESS_ANNOTATION;
    let key = EDGE_HEALTH_PUBLIC_KEY_ANNOTATION;
    let unhealth = NODE_UNHEALTH_ANNOTATION;
    let view = EDGE_HEALTH_UNHEALTHY_VIEW_ANNOTATION;
    let own = format!("{address}, {key}, {view}");
    let not = |node: &str, allowed: &str, key: &str| match (node == "n1", edge) {
        (false, false) => {
            format!(
                "edge-health of node n1 may change no annotation of Node {node} (the cloud writes the verdicts), not {key}"
            )
        }
        _ => format!("edge-health of node n1 may change only {allowed} on Node {node}, not {key}"),
    };
    let verdict_refused = (!edge).then(|| not("n2", unhealth, unhealth));
    // (what, token, node, write, None = allowed / Some(message) = refused with 403)
    let rows: Vec<(&str, &str, &str, Write, Option<String>)> = vec![
        (
            "taint the control-plane node (strategic merge)",
            EDGE_HEALTH_N1,
            "cp",
            Write::Patch(Patch::Strategic(json!({"spec": {"taints": [{"key": "evil", "effect": "NoExecute"}]}}))),
            Some("edge-health may not change the spec (taints, unschedulable, ...) of Node cp".into()),
        ),
        (
            "cordon a peer",
            EDGE_HEALTH_N1,
            "n2",
            Write::Patch(Patch::Merge(json!({"spec": {"unschedulable": true}}))),
            Some("edge-health may not change the spec (taints, unschedulable, ...) of Node n2".into()),
        ),
        (
            "annotate a node of no unit with another key",
            EDGE_HEALTH_N1,
            "lone",
            Write::Patch(Patch::Merge(json!({"metadata": {"annotations": {"example.com/owned": "yes"}}}))),
            Some(not("lone", unhealth, "example.com/owned")),
        ),
        (
            "shorten a peer's unreachable protection (JSON patch)",
            EDGE_HEALTH_N1,
            "n2",
            Write::Patch(json_patch(json!([
                {"op": "add", "path": "/metadata/annotations/superedge.io~1max-unreachable-protection", "value": "1s"},
            ]))),
            Some(not("n2", unhealth, MAX_UNREACHABLE_PROTECTION_ANNOTATION)),
        ),
        (
            "relabel a node of unit-b into unit-a",
            EDGE_HEALTH_N1,
            "b1",
            Write::Patch(Patch::Merge(json!({"metadata": {"labels": {UNIT_LABEL: "unit-a"}}}))),
            Some("edge-health may not change the labels of Node b1".into()),
        ),
        (
            "rewrite a peer's address",
            EDGE_HEALTH_N1,
            "n2",
            Write::Patch(Patch::Merge(json!({"metadata": {"annotations": {address: "10.0.0.66:51005"}}}))),
            Some(not("n2", unhealth, address)),
        ),
        (
            "rewrite a peer's public key",
            EDGE_HEALTH_N1,
            "n2",
            Write::Patch(Patch::Strategic(json!({"metadata": {"annotations": {key: "ZXZpbA=="}}}))),
            Some(not("n2", unhealth, key)),
        ),
        (
            "hold a peer with a finalizer",
            EDGE_HEALTH_N1,
            "n2",
            Write::Patch(Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold"]}}))),
            Some("edge-health may not change the finalizers or ownerReferences of Node n2".into()),
        ),
        (
            "publish its own address and public key",
            EDGE_HEALTH_N1,
            "n1",
            Write::Patch(Patch::Merge(json!({"metadata": {"annotations": {address: "10.0.0.1:51005", key: "a2V5"}}}))),
            None,
        ),
        (
            "publish its own view",
            EDGE_HEALTH_N1,
            "n1",
            Write::Patch(Patch::Merge(json!({"metadata": {"annotations": {view: "n2"}}}))),
            None,
        ),
        (
            "vote a peer unhealthy (the daemon's JSON patch)",
            EDGE_HEALTH_N1,
            "n2",
            Write::Verdict(true),
            verdict_refused.clone(),
        ),
        (
            "relabel its own node",
            EDGE_HEALTH_N1,
            "n1",
            Write::Patch(Patch::Merge(json!({"metadata": {"labels": {UNIT_LABEL: "unit-b"}}}))),
            Some("edge-health may not change the labels of Node n1".into()),
        ),
        (
            "vote its own node unhealthy",
            EDGE_HEALTH_N1,
            "n1",
            Write::Patch(Patch::Merge(json!({"metadata": {"annotations": {unhealth: "yes"}}}))),
            Some(not("n1", &own, unhealth)),
        ),
        (
            "write its own node's status",
            EDGE_HEALTH_N1,
            "n1",
            Write::Status(Patch::Merge(json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}))),
            Some("edge-health never writes Node status".into()),
        ),
        (
            "create a node by server-side apply",
            EDGE_HEALTH_N1,
            "ghost",
            Write::Patch(Patch::Apply(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ghost"}}))),
            Some("edge-health never creates Nodes".into()),
        ),
        (
            "publish its address with a token naming no node",
            EDGE_HEALTH_UNBOUND,
            "n1",
            Write::Patch(Patch::Merge(json!({"metadata": {"annotations": {address: "10.0.0.1:51006"}}}))),
            Some(
                "the edge-health token carries no node name (user extra authentication.kubernetes.io/node-name): \
                 it must be the pod's projected service account token, on Kubernetes 1.32 or later \
                 (ServiceAccountTokenPodNodeInfo); on an older cluster set the chart value \
                 edgeHealth.nodeRestrictionPolicy=false"
                    .into(),
            ),
        ),
        (
            "n2's daemon publishes its own address",
            EDGE_HEALTH_N2,
            "n2",
            Write::Patch(Patch::Merge(json!({"metadata": {"annotations": {address: "10.0.0.2:51005"}}}))),
            None,
        ),
        (
            "the grid controller's identity relabels a node",
            GRID_CONTROLLER,
            "b1",
            Write::Patch(Patch::Merge(json!({"metadata": {"labels": {"example.com/role": "cache"}}}))),
            None,
        ),
        (
            "the admin taints the control-plane node",
            ADMIN,
            "cp",
            Write::Patch(Patch::Strategic(
                json!({"spec": {"taints": [{"key": "maintenance", "effect": "NoSchedule"}]}}),
            )),
            None,
        ),
    ];

    let mut rows = rows;
    if edge {
        let at = rows.iter().position(|r| r.0.starts_with("vote a peer unhealthy")).unwrap() + 1;
        rows.insert(at, ("clear the verdict again", EDGE_HEALTH_N1, "n2", Write::Verdict(false), None));
    }
    let mut failures = Vec::new();
    for (what, token, name, write, refused) in rows {
        let before = nodes.get_opt(name).await.unwrap();
        let api: Api<Node> = Api::all(client(&server, token).await);
        let params = PatchParams::apply("edge-health");
        let result = match &write {
            Write::Patch(patch @ Patch::Apply(_)) => api.patch(name, &params, patch).await,
            Write::Patch(patch) => api.patch(name, &PatchParams::default(), patch).await,
            Write::Status(patch) => api.patch_status(name, &PatchParams::default(), patch).await,
            Write::Verdict(unhealthy) => {
                let rv = before.as_ref().and_then(|n| n.resource_version());
                let change = match unhealthy {
                    true => json!({"op": "add", "path": "/metadata/annotations/nodeunhealth", "value": "yes"}),
                    false => json!({"op": "remove", "path": "/metadata/annotations/nodeunhealth"}),
                };
                let ops = json!([{"op": "test", "path": "/metadata/resourceVersion", "value": rv}, change]);
                api.patch(name, &PatchParams::default(), &json_patch(ops)).await
            }
        };
        let after = nodes.get_opt(name).await.unwrap();
        let outcome = match (result, &refused) {
            (Ok(_), None) if after != before => None,
            (Ok(_), None) => Some("allowed, but the Node did not change".to_string()),
            (Err(kube::Error::Api(status)), Some(message)) => {
                let wanted = (403, "Forbidden".to_string(), refusal(name, message));
                let got = (status.code, status.reason.clone(), status.message.clone());
                if got != wanted {
                    Some(format!("refused as {got:?}, wanted {wanted:?}"))
                } else if after != before {
                    Some("refused, but the Node changed".to_string())
                } else {
                    None
                }
            }
            (Ok(_), Some(_)) => Some("allowed; wanted a refusal".to_string()),
            (Err(error), _) => Some(format!("failed: {error}")),
        };
        if let Some(problem) = outcome {
            failures.push(format!("{writer}: {what} ({token:?} on {name}): {problem}"));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));

    // what the allowed rows left
    let annotations = |name: &str| {
        let nodes = nodes.clone();
        let name = name.to_string();
        async move { nodes.get(&name).await.unwrap().annotations().clone() }
    };
    let n1 = annotations("n1").await;
    assert_eq!((n1[address].as_str(), n1[key].as_str(), n1[view].as_str()), ("10.0.0.1:51005", "a2V5", "n2"));
    let n2 = annotations("n2").await;
    assert_eq!(n2[address], "10.0.0.2:51005");
    assert!(!n2.contains_key(unhealth), "the verdict was cleared: {n2:?}");
}
