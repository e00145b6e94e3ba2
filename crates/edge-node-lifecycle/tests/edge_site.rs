//! End to end on the fake apiserver: a site's node Leases stop renewing. While the
//! site's peers have not voted its nodes unhealthy, nothing is tainted NoExecute and no
//! pod is evicted; once they vote (`nodeunhealth: "yes"`), the stock sequence follows at
//! the configured rate.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use controller_support::leader::{self, LeaderConfig};
use edge_node_lifecycle::controller;
use edge_node_lifecycle::metrics::Metrics;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;

const EDGE: [&str; 3] = ["edge-0", "edge-1", "edge-2"];
const CLOUD: [&str; 2] = ["cloud-0", "cloud-1"];

/// A node with its Lease, and two pods on it: one tolerating `unreachable:NoExecute` for
/// 2 s, one not tolerating it.
async fn create_node_with_pods(client: &kube::Client, name: &str, zone: &str) {
    create_node(client, name, zone).await;
    let tolerant = json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2}]);
    create_pod(client, &format!("{name}-tolerant"), name, tolerant).await;
    create_pod(client, &format!("{name}-intolerant"), name, json!([])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn site_cut_off_is_protected_until_voted_unhealthy() {
    let (_server, client) = start_server().await;
    for name in EDGE {
        create_node_with_pods(&client, name, "site-a").await;
    }
    for name in CLOUD {
        create_node_with_pods(&client, name, "cloud").await;
    }
    let alive = Arc::new(Mutex::new(EDGE.iter().chain(CLOUD.iter()).map(|s| s.to_string()).collect::<HashSet<_>>()));
    let kubelets = kubelets(client.clone(), alive.clone());

    // record when each NoExecute taint appears
    let nodes: Api<Node> = Api::all(client.clone());
    let seen_no_execute: Arc<Mutex<BTreeMap<String, Instant>>> = Arc::default();
    let recorder = {
        let seen = seen_no_execute.clone();
        watch_events(nodes.clone(), move |event| {
            if let watcher::Event::Apply(node) | watcher::Event::InitApply(node) = event
                && taint_keys(&node).contains(&UNREACHABLE_NO_EXECUTE.to_string())
            {
                seen.lock().unwrap().entry(node.name_any()).or_insert_with(Instant::now);
            }
        })
    };

    let (shutdown_tx, shutdown) = watch::channel(false);
    let (leader_tx, leader_rx) = watch::channel(false);
    let election = tokio::spawn(leader::run(
        client.clone(),
        LeaderConfig {
            namespace: "kube-system".into(),
            name: "edge-node-lifecycle".into(),
            identity: "test-instance".into(),
            lease_duration: Duration::from_secs(3),
            renew_deadline: Duration::from_secs(2),
            retry_period: Duration::from_millis(200),
        },
        leader_tx,
        shutdown.clone(),
    ));
    let metrics = Arc::new(Metrics::default());
    let synced = controller_support::Readiness::new().gate("the caches have not synced yet");
    let config = fast_config(Duration::from_millis(500), 1.0);
    let controller = tokio::spawn(controller::run(
        client.clone(),
        config,
        metrics.clone(),
        leader_rx,
        synced,
        shutdown.clone().into(),
    ));

    // the site loses its cloud link: its kubelets' lease renewals stop arriving
    tokio::time::sleep(Duration::from_secs(1)).await;
    alive.lock().unwrap().retain(|n| n.starts_with("cloud"));
    wait_for("edge nodes marked Unknown", Duration::from_secs(15), || {
        let nodes = nodes.clone();
        async move {
            let mut unknown = 0;
            for name in EDGE {
                let ready = ready_condition(&nodes.get(name).await.unwrap());
                unknown += usize::from(ready == Some(("Unknown".into(), Some("NodeStatusUnknown".into()))));
            }
            unknown == EDGE.len()
        }
    })
    .await;
    // give the controller several more passes and drains to (wrongly) act
    tokio::time::sleep(Duration::from_secs(3)).await;
    for name in EDGE {
        assert_eq!(taint_keys(&nodes.get(name).await.unwrap()), [UNREACHABLE_NO_SCHEDULE], "{name}");
    }
    for name in CLOUD {
        assert_eq!(taint_keys(&nodes.get(name).await.unwrap()), Vec::<String>::new(), "{name}");
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let all_pods = pods.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(all_pods.len(), 10, "no pod evicted while the site's peers see it alive");
    assert!(
        all_pods.iter().all(|p| p.status.as_ref().and_then(|s| s.conditions.as_ref()).is_none()),
        "pods of protected nodes are not marked not-ready"
    );
    assert!(seen_no_execute.lock().unwrap().is_empty());

    // the site's peers now vote its nodes unhealthy: stock handling, at 1 node/s
    for name in EDGE {
        vote_unhealthy(&client, name).await;
    }
    wait_for("every edge node tainted NoExecute", Duration::from_secs(15), || {
        let seen = seen_no_execute.clone();
        async move { seen.lock().unwrap().len() == EDGE.len() }
    })
    .await;
    let mut times: Vec<Instant> = seen_no_execute.lock().unwrap().values().copied().collect();
    times.sort();
    for pair in times.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(gap >= Duration::from_millis(800), "tainted faster than 1 node/s: {gap:?}");
    }
    wait_for("evictions", Duration::from_secs(15), || {
        let pods = pods.clone();
        async move {
            let left: Vec<String> =
                pods.list(&ListParams::default()).await.unwrap().items.iter().map(|p| p.name_any()).collect();
            left.len() == 4 && left.iter().all(|n| n.starts_with("cloud"))
        }
    })
    .await;
    for name in CLOUD {
        assert_eq!(taint_keys(&nodes.get(name).await.unwrap()), Vec::<String>::new(), "{name}");
    }
    let exposition = controller_support::metrics::exposition("edge-node-lifecycle", &*metrics);
    assert!(exposition.contains("edge_node_lifecycle_evictions_total 6"), "{exposition}");

    shutdown_tx.send_replace(true);
    controller.await.unwrap();
    election.await.unwrap();
    let released = Api::<Lease>::namespaced(client, "kube-system").get("edge-node-lifecycle").await.unwrap();
    assert_eq!(released.spec.unwrap().holder_identity, None, "the leader lease is released on shutdown");
    kubelets.abort();
    recorder.abort();
}
