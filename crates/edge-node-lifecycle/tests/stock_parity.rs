//! End to end on the fake apiserver, the controller against the rows where it must behave
//! exactly as kube-controller-manager's node lifecycle controller:
//! - each condition and the cordon end with exactly the stock NoSchedule taints, other
//!   controllers' taints kept; uncordon removes its taint; a restart of the controller in
//!   the middle removes and re-adds nothing;
//! - a node no edge-health watches (a cloud worker) that stops heartbeating is tainted
//!   NoExecute and its pod deleted after its `tolerationSeconds`, while a watched node of
//!   a unit whose peers see it alive is not; when the `edge-health-config` ConfigMap stops
//!   checking that unit, the same node is handled as stock too.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use edge_node_lifecycle::controller::ControllerConfig;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

/// SuperEdge node units, the default: without the ConfigMap, one unit of the cluster.
fn config() -> ControllerConfig {
    fast_config(Duration::from_millis(300), 1.0)
}

async fn set_conditions(nodes: &Api<Node>, name: &str, extra: serde_json::Value) {
    let mut conditions = vec![json!({"type": "Ready", "status": "True", "reason": "KubeletReady",
        "lastHeartbeatTime": "2026-11-21T00:00:00Z", "lastTransitionTime": "2026-11-21T00:00:00Z"})];
    conditions.extend(extra.as_array().cloned().unwrap_or_default());
    let patch = json!({"status": {"conditions": conditions}});
    nodes.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

fn sorted(mut taints: Vec<String>) -> Vec<String> {
    taints.sort();
    taints
}

async fn wait_for_taints(nodes: &Api<Node>, want: &BTreeMap<&str, Vec<&str>>) {
    wait_for("the stock taints", Duration::from_secs(15), || {
        let nodes = nodes.clone();
        async move {
            for (name, taints) in want {
                let have = sorted(taint_keys(&nodes.get(name).await.unwrap()));
                if have != sorted(taints.iter().map(|t| t.to_string()).collect()) {
                    return false;
                }
            }
            true
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditions_and_cordon_get_the_stock_taints_and_a_restart_keeps_them() {
    let (_server, client) = start_server().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let rows: [(&str, serde_json::Value, &str); 5] = [
        (
            "memory",
            json!([{"type": "MemoryPressure", "status": "True"}]),
            "node.kubernetes.io/memory-pressure:NoSchedule",
        ),
        ("disk", json!([{"type": "DiskPressure", "status": "True"}]), "node.kubernetes.io/disk-pressure:NoSchedule"),
        ("pid", json!([{"type": "PIDPressure", "status": "True"}]), "node.kubernetes.io/pid-pressure:NoSchedule"),
        (
            "network",
            json!([{"type": "NetworkUnavailable", "status": "True"}]),
            "node.kubernetes.io/network-unavailable:NoSchedule",
        ),
        ("healthy", json!([{"type": "MemoryPressure", "status": "False"}]), ""),
    ];
    for (name, conditions, _) in &rows {
        create_cloud_node(&client, name, "z").await;
        set_conditions(&nodes, name, conditions.clone()).await;
    }
    create_cloud_node(&client, "cordoned", "z").await;
    // another controller's taint, there before ours
    let spec = json!({"spec": {"unschedulable": true,
        "taints": [{"key": "example.com/dedicated", "value": "edge", "effect": "NoSchedule"}]}});
    nodes.patch("cordoned", &PatchParams::default(), &Patch::Merge(&spec)).await.unwrap();
    let names: Vec<String> = rows.iter().map(|r| r.0.to_string()).chain(["cordoned".to_string()]).collect();
    let alive = Arc::new(Mutex::new(names.iter().cloned().collect::<HashSet<_>>()));
    let kubelets = kubelets(client.clone(), alive);
    // every taint that ever went away
    let removed: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let recorder = {
        let (removed, mut last) = (removed.clone(), BTreeMap::<String, Vec<String>>::new());
        watch_events(nodes.clone(), move |event| {
            if let watcher::Event::Apply(node) | watcher::Event::InitApply(node) = event {
                let now = taint_keys(&node);
                for gone in last.get(&node.name_any()).into_iter().flatten().filter(|t| !now.contains(t)) {
                    removed.lock().unwrap().push((node.name_any(), gone.clone()));
                }
                last.insert(node.name_any(), now);
            }
        })
    };

    let controller = RunningController::start(&client, config());
    let mut want: BTreeMap<&str, Vec<&str>> =
        rows.iter().map(|(name, _, taint)| (*name, [*taint].into_iter().filter(|t| !t.is_empty()).collect())).collect();
    want.insert("cordoned", vec!["example.com/dedicated:NoSchedule", "node.kubernetes.io/unschedulable:NoSchedule"]);
    wait_for_taints(&nodes, &want).await;
    let stamped = nodes.get("memory").await.unwrap().spec.unwrap().taints.unwrap();
    assert!(stamped[0].time_added.is_some(), "added with timeAdded, as the stock controller does: {stamped:?}");

    // a restart in the middle: a new process removes and re-adds nothing
    controller.stop().await;
    let controller = RunningController::start(&client, config());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(*removed.lock().unwrap(), vec![], "no taint flapped across the restart");
    wait_for_taints(&nodes, &want).await;

    // uncordon: only our taint goes; pressure over: its taint goes
    let spec = json!({"spec": {"unschedulable": false}});
    nodes.patch("cordoned", &PatchParams::default(), &Patch::Merge(&spec)).await.unwrap();
    set_conditions(&nodes, "memory", json!([{"type": "MemoryPressure", "status": "False"}])).await;
    want.insert("cordoned", vec!["example.com/dedicated:NoSchedule"]);
    want.insert("memory", vec![]);
    wait_for_taints(&nodes, &want).await;
    let mut gone = removed.lock().unwrap().clone();
    gone.sort();
    assert_eq!(
        gone,
        [
            ("cordoned".to_string(), "node.kubernetes.io/unschedulable:NoSchedule".to_string()),
            ("memory".to_string(), "node.kubernetes.io/memory-pressure:NoSchedule".to_string()),
        ],
        "exactly the taints no longer wanted went, nothing else ever did"
    );

    controller.stop().await;
    kubelets.abort();
    recorder.abort();
}

async fn pod_exists(pods: &Api<Pod>, name: &str) -> bool {
    pods.get_opt(name).await.unwrap().is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_nodes_edge_health_watches_are_protected() {
    let (_server, client) = start_server().await;
    let tolerate_5s = json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}]);
    // a cloud zone with a worker no edge-health runs on, and a site whose two nodes run it
    for (name, zone, edge) in
        [("cloud-0", "cloud", false), ("worker", "cloud", false), ("edge-0", "site", true), ("edge-1", "site", true)]
    {
        if edge {
            create_node(&client, name, zone).await
        } else {
            create_cloud_node(&client, name, zone).await
        }
        create_pod(&client, &format!("{name}-pod"), name, tolerate_5s.clone()).await;
    }
    let alive = Arc::new(Mutex::new(["cloud-0", "worker", "edge-0", "edge-1"].map(String::from).into_iter().collect()));
    let kubelets = kubelets(client.clone(), alive.clone());
    let controller = RunningController::start(&client, config());
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    tokio::time::sleep(Duration::from_secs(1)).await;

    // the worker and edge-0 stop heartbeating; edge-1, its peer, sees it alive (no vote)
    alive.lock().unwrap().retain(|n| n != "worker" && n != "edge-0");
    wait_for("the worker tainted NoExecute", Duration::from_secs(15), || {
        let nodes = nodes.clone();
        async move { taint_keys(&nodes.get("worker").await.unwrap()).contains(&UNREACHABLE_NO_EXECUTE.to_string()) }
    })
    .await;
    wait_for("the worker's pod deleted after its 5 s", Duration::from_secs(15), || {
        let pods = pods.clone();
        async move { !pod_exists(&pods, "worker-pod").await }
    })
    .await;
    let edge = nodes.get("edge-0").await.unwrap();
    assert_eq!(ready_condition(&edge).map(|c| c.0).as_deref(), Some("Unknown"));
    assert_eq!(taint_keys(&edge), [UNREACHABLE_NO_SCHEDULE], "watched and not voted down: protected");
    assert!(pod_exists(&pods, "edge-0-pod").await);
    assert_eq!(edge_pod_ready(&pods).await, None, "the protected node's pod is not marked not ready");

    // SuperEdge's ConfigMap turns unit checking on for a unit the site is not in: nobody
    // watches edge-0 any more, and it is handled as stock
    let config_map: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "edge-health-config", "namespace": "kube-system"},
        "data": {"unit-internal-check": "true", "check-units": "elsewhere"}
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), "kube-system")
        .create(&PostParams::default(), &config_map)
        .await
        .unwrap();
    wait_for("edge-0's pod deleted once nobody watches it", Duration::from_secs(20), || {
        let pods = pods.clone();
        async move { !pod_exists(&pods, "edge-0-pod").await }
    })
    .await;
    assert!(taint_keys(&nodes.get("edge-0").await.unwrap()).contains(&UNREACHABLE_NO_EXECUTE.to_string()));
    assert!(pod_exists(&pods, "edge-1-pod").await && pod_exists(&pods, "cloud-0-pod").await);

    controller.stop().await;
    kubelets.abort();
}

/// The Ready condition of edge-0's pod, if the controller wrote one.
async fn edge_pod_ready(pods: &Api<Pod>) -> Option<String> {
    let pod = pods.get("edge-0-pod").await.unwrap();
    let conditions = pod.status?.conditions?;
    conditions.into_iter().find(|c| c.type_ == "Ready").map(|c| c.status)
}
