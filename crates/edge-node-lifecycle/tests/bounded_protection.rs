//! End to end on the fake apiserver: bounded autonomy. A site loses its cloud link and
//! nobody votes its nodes unhealthy. With a cluster-wide `--max-unreachable-protection`
//! of 3 s, every node is protected for 3 s after its Ready condition went Unknown, then
//! tainted NoExecute and its pods evicted as stock Kubernetes would: the node annotated
//! `0` (unlimited) and the one annotated `10m` too, since a node's annotation may only
//! shorten the operator's bound (an edge node must not extend its own protection).

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use edgegrid_core::protection::ProtectionLimit;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

const EDGE: [&str; 3] = ["edge-unlimited", "edge-default", "edge-10m"];
const CLOUD: [&str; 2] = ["cloud-0", "cloud-1"];

async fn annotate_limit(client: &kube::Client, name: &str, limit: &str) {
    let patch = json!({"metadata": {"annotations": {"superedge.io/max-unreachable-protection": limit}}});
    Api::<Node>::all(client.clone()).patch(name, &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
}

/// The Ready condition's `lastTransitionTime` and the unreachable NoExecute taint's
/// `timeAdded`, if the node has them.
fn ready_since_and_tainted_at(node: &Node) -> (Option<jiff::Timestamp>, Option<jiff::Timestamp>) {
    let ready =
        node.status.as_ref().and_then(|s| s.conditions.as_ref()).and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    let since = ready.and_then(|c| c.last_transition_time.as_ref()).map(|t| t.0);
    let taint = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .and_then(|t| t.iter().find(|t| t.key == "node.kubernetes.io/unreachable" && t.effect == "NoExecute"));
    (since, taint.and_then(|t| t.time_added.as_ref()).map(|t| t.0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protection_ends_at_the_limit_then_stock_handling() {
    let (_server, client) = start_server().await;
    for name in EDGE.iter().chain(&CLOUD) {
        let zone = if name.starts_with("edge") { "site-a" } else { "cloud" };
        create_node(&client, name, zone).await;
        create_pod(&client, &format!("{name}-pod"), name, json!([])).await;
    }
    annotate_limit(&client, "edge-unlimited", "0").await;
    annotate_limit(&client, "edge-10m", "10m").await;
    let alive = Arc::new(Mutex::new(EDGE.iter().chain(CLOUD.iter()).map(|s| s.to_string()).collect::<HashSet<_>>()));
    let kubelets = kubelets(client.clone(), alive.clone());
    let controller = RunningController::start(&client, {
        let mut config = fast_config(Duration::from_millis(300), 1.0);
        config.lifecycle.max_unreachable_protection = ProtectionLimit::After(Duration::from_secs(3));
        config
    });

    tokio::time::sleep(Duration::from_secs(1)).await;
    alive.lock().unwrap().retain(|n| n.starts_with("cloud"));
    let nodes: Api<Node> = Api::all(client.clone());
    for name in EDGE {
        wait_for(&format!("{name} tainted NoExecute"), Duration::from_secs(20), || {
            let nodes = nodes.clone();
            async move { ready_since_and_tainted_at(&nodes.get(name).await.unwrap()).1.is_some() }
        })
        .await;
        // Both times are written in whole seconds: the limit had passed (more than 3 s
        // after the Unknown transition) when the taint was added, and not much more (the
        // queue drains one node a second).
        let (since, tainted_at) = ready_since_and_tainted_at(&nodes.get(name).await.unwrap());
        let waited = tainted_at.unwrap().duration_since(since.unwrap());
        assert!(
            (jiff::SignedDuration::from_secs(3)..=jiff::SignedDuration::from_secs(8)).contains(&waited),
            "{name} tainted {waited:?} after going Unknown"
        );
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    wait_for("the edge pods evicted", Duration::from_secs(10), || {
        let pods = pods.clone();
        async move { pods.list(&ListParams::default()).await.unwrap().items.len() == 2 }
    })
    .await;
    let left = pods.list(&ListParams::default()).await.unwrap().items;
    let mut names: Vec<String> = left.iter().map(|p| p.name_any()).collect();
    names.sort();
    assert_eq!(names, ["cloud-0-pod", "cloud-1-pod"]);
    for name in EDGE {
        let node = nodes.get(name).await.unwrap();
        assert_eq!(ready_condition(&node).map(|c| c.0).as_deref(), Some("Unknown"), "{name}");
        let mut taints = taint_keys(&node);
        taints.sort();
        assert_eq!(taints, [UNREACHABLE_NO_EXECUTE, UNREACHABLE_NO_SCHEDULE], "{name}");
    }

    controller.stop().await;
    kubelets.abort();
}
