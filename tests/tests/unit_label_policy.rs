//! The chart's unit label restriction (a ValidatingAdmissionPolicy and its binding, from
//! `charts/edgegrid/files/unit-label-policy.yaml` as the chart renders it) enforced by the
//! in-repo API server: a table of Node writes and deletes an unmodified kube client makes
//! as node n1's kubelet (`system:node:n1`, group `system:nodes`), and as the administrator,
//! each allowed or refused with the real server's status and message; a refused request
//! leaves the Node as it was. A kubelet may set its own Node's labels (NodeRestriction
//! allows all but `node-restriction.kubernetes.io/` and most `kubernetes.io` keys), so
//! without the policy a compromised node moves itself into any unit.

use edgegrid_testing::chart::{UNIT_LABEL_POLICY, unit_label_policy};
use fake_apiserver::{FakeApiServer, UserInfo};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

#[path = "support/policy_table.rs"]
mod policy_table;
use policy_table::{client, install};

/// The unit label key (edgeHealth.unitLabelKey) and a grid's gridUniqKey (labelKeys).
const UNIT_KEY: &str = "zone1";
const GRID_KEY: &str = "site";
/// n1's kubelet, and no token: `system:admin`.
const KUBELET_N1: &str = "kubelet-n1";
const ADMIN: &str = "";

/// How a row writes.
enum Write {
    Merge(Value),
    Status(Value),
    Delete,
}

fn node(name: &str, labels: Value) -> Node {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
}

/// `message` with the keys it lists in parentheses sorted: the policy lists them in the
/// order the server iterates a label map in (cel-go: Go's map order, which varies).
fn in_order(message: &str) -> String {
    let (Some(open), Some(close)) = (message.find('('), message.find(')')) else { return message.to_string() };
    let mut keys: Vec<&str> = message[open + 1..close].split(", ").collect();
    keys.sort();
    format!("{}({}){}", &message[..open], keys.join(", "), &message[close + 1..])
}

/// The full message of a refusal.
fn refusal(node: &str, message: &str) -> String {
    policy_table::refusal("nodes", node, UNIT_LABEL_POLICY, message)
}

#[tokio::test]
async fn a_kubelet_cannot_move_its_node_into_another_unit() {
    let server = FakeApiServer::start().await.unwrap();
    let kubelet = UserInfo::new("system:node:n1").with_groups(&["system:nodes", "system:authenticated"]);
    server.add_user(KUBELET_N1, kubelet);
    let admin = client(&server, ADMIN).await;
    install(&server, unit_label_policy(&[GRID_KEY, UNIT_KEY])).await;
    let nodes: Api<Node> = Api::all(admin.clone());
    let in_unit = json!({"kubernetes.io/hostname": "n1", UNIT_KEY: "unit-a", GRID_KEY: "shop-1", "unit-a": "nodeunits.superedge.io"});
    nodes.create(&PostParams::default(), &node("n1", in_unit)).await.unwrap();
    let kubelet: Api<Node> = Api::all(client(&server, KUBELET_N1).await);
    // a new node's first registration may carry its unit (kubelet --node-labels)
    kubelet
        .create(&PostParams::default(), &node("n9", json!({UNIT_KEY: "unit-b", "unit-b": "nodeunits.superedge.io"})))
        .await
        .expect("a first registration with unit labels");

    let who = "system:node:n1";
    let changing = |labels: &str| {
        format!("{who} may not change the unit labels of Node n1 ({labels}): units are set by an administrator")
    };
    // (what, token, write, None = allowed / Some(message) = refused with 403)
    let rows: Vec<(&str, &str, Write, Option<String>)> = vec![
        (
            "move into another unit",
            KUBELET_N1,
            Write::Merge(json!({"metadata": {"labels": {UNIT_KEY: "unit-b"}}})),
            Some(changing(UNIT_KEY)),
        ),
        (
            "leave its unit",
            KUBELET_N1,
            Write::Merge(json!({"metadata": {"labels": {UNIT_KEY: null}}})),
            Some(changing(UNIT_KEY)),
        ),
        (
            "move into another grid topology value",
            KUBELET_N1,
            Write::Merge(json!({"metadata": {"labels": {GRID_KEY: "shop-2"}}})),
            Some(changing(GRID_KEY)),
        ),
        (
            "join another SuperEdge node unit",
            KUBELET_N1,
            Write::Merge(json!({"metadata": {"labels": {"unit-b": "nodeunits.superedge.io"}}})),
            Some(changing("unit-b")),
        ),
        (
            "leave its SuperEdge node unit",
            KUBELET_N1,
            Write::Merge(json!({"metadata": {"labels": {"unit-a": null}}})),
            Some(changing("unit-a")),
        ),
        (
            "turn its node unit label into another value",
            KUBELET_N1,
            Write::Merge(json!({"metadata": {"labels": {"unit-a": "x"}}})),
            Some(changing("unit-a")),
        ),
        (
            "move units through the status subresource",
            KUBELET_N1,
            Write::Status(json!({"metadata": {"labels": {UNIT_KEY: "unit-b"}}})),
            Some(changing(UNIT_KEY)),
        ),
        (
            "delete its Node to register it again elsewhere",
            KUBELET_N1,
            Write::Delete,
            Some(format!(
                "{who} may not delete Node n1, which is in a unit (unit-a, {GRID_KEY}, {UNIT_KEY}): registered again \
                 it could name another unit"
            )),
        ),
        (
            "set a label that makes no unit",
            KUBELET_N1,
            Write::Merge(json!({"metadata": {"labels": {"example.com/rack": "r7"}}})),
            None,
        ),
        ("an administrator moves it", ADMIN, Write::Merge(json!({"metadata": {"labels": {UNIT_KEY: "unit-c"}}})), None),
    ];
    let mut failures = Vec::new();
    for (what, token, write, refused) in rows {
        let before = nodes.get("n1").await.unwrap();
        let api: Api<Node> = Api::all(client(&server, token).await);
        let result = match &write {
            Write::Merge(patch) => api.patch("n1", &PatchParams::default(), &Patch::Merge(patch)).await.map(|_| ()),
            Write::Status(patch) => {
                api.patch_status("n1", &PatchParams::default(), &Patch::Merge(patch)).await.map(|_| ())
            }
            Write::Delete => api.delete("n1", &DeleteParams::default()).await.map(|_| ()),
        };
        let after = nodes.get_opt("n1").await.unwrap();
        let outcome = match (result, &refused) {
            (Ok(()), None) if after.as_ref() != Some(&before) => None,
            (Ok(()), None) => Some("allowed, but the Node did not change".to_string()),
            (Err(kube::Error::Api(status)), Some(message)) => {
                let wanted = (403, "Forbidden".to_string(), in_order(&refusal("n1", message)));
                let got = (status.code, status.reason.clone(), in_order(&status.message));
                if got != wanted {
                    Some(format!("refused as {got:?}, wanted {wanted:?}"))
                } else if after.as_ref() != Some(&before) {
                    Some("refused, but the Node changed".to_string())
                } else {
                    None
                }
            }
            (Ok(()), Some(_)) => Some("allowed; wanted a refusal".to_string()),
            (Err(error), _) => Some(format!("failed: {error}")),
        };
        if let Some(problem) = outcome {
            failures.push(format!("{what} ({token:?}): {problem}"));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    let labels = nodes.get("n1").await.unwrap().metadata.labels.unwrap_or_default();
    assert_eq!(labels.get(UNIT_KEY).map(String::as_str), Some("unit-c"), "{labels:?}");
    assert_eq!(labels.get("example.com/rack").map(String::as_str), Some("r7"), "{labels:?}");
    // a Node in no unit may be deleted by its kubelet (nothing to move it out of)
    kubelet.patch("n9", &PatchParams::default(), &Patch::Merge(json!({}))).await.unwrap();
    nodes.create(&PostParams::default(), &node("n2", json!({"kubernetes.io/hostname": "n2"}))).await.unwrap();
    kubelet.delete("n2", &DeleteParams::default()).await.expect("a Node in no unit");
}
