//! End to end on the fake apiserver: a site's node Leases stop renewing. While the
//! site's peers have not voted its nodes unhealthy, nothing is tainted NoExecute and no
//! pod is evicted; once they vote (`nodeunhealth: "yes"`), the stock sequence follows at
//! the configured rate.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use controller_support::leader::{self, LeaderConfig};
use edge_node_lifecycle::controller::{self, ControllerConfig};
use edge_node_lifecycle::metrics::Metrics;
use fake_apiserver::FakeApiServer;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use node_lifecycle::lifecycle::LifecycleConfig;
use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;

const EDGE: [&str; 3] = ["edge-0", "edge-1", "edge-2"];
const CLOUD: [&str; 2] = ["cloud-0", "cloud-1"];

fn micro_now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

async fn create_node(client: &Client, name: &str, zone: &str) {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"topology.kubernetes.io/region": "r", "topology.kubernetes.io/zone": zone}},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
            "lastHeartbeatTime": "2026-11-21T00:00:00Z", "lastTransitionTime": "2026-11-21T00:00:00Z"}]}
    }))
    .unwrap();
    Api::<Node>::all(client.clone()).create(&PostParams::default(), &node).await.unwrap();
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": micro_now()}
    }))
    .unwrap();
    Api::<Lease>::namespaced(client.clone(), "kube-node-lease").create(&PostParams::default(), &lease).await.unwrap();
    for (suffix, tolerations) in [
        (
            "tolerant",
            json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2}]),
        ),
        ("intolerant", json!([])),
    ] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-{suffix}")},
            "spec": {"nodeName": name, "tolerations": tolerations, "containers": [{"name": "c", "image": "i"}]},
        }))
        .unwrap();
        Api::<Pod>::namespaced(client.clone(), "default").create(&PostParams::default(), &pod).await.unwrap();
    }
}

/// Renews the Lease of every node in `alive` every 300 ms, as kubelets do.
fn kubelets(client: Client, alive: Arc<Mutex<HashSet<String>>>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let leases: Api<Lease> = Api::namespaced(client, "kube-node-lease");
        loop {
            let names: Vec<String> = alive.lock().unwrap().iter().cloned().collect();
            for name in names {
                let patch = json!({"spec": {"renewTime": micro_now()}});
                let _ = leases.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
}

fn taint_keys(node: &Node) -> Vec<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .map(|t| format!("{}:{}", t.key, t.effect))
        .collect()
}

async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn site_cut_off_is_protected_until_voted_unhealthy() {
    let server = FakeApiServer::start().await.unwrap();
    let client = Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    for name in EDGE {
        create_node(&client, name, "site-a").await;
    }
    for name in CLOUD {
        create_node(&client, name, "cloud").await;
    }
    let alive = Arc::new(Mutex::new(EDGE.iter().chain(CLOUD.iter()).map(|s| s.to_string()).collect::<HashSet<_>>()));
    let kubelets = kubelets(client.clone(), alive.clone());

    // record when each NoExecute taint appears
    let nodes: Api<Node> = Api::all(client.clone());
    let seen_no_execute: Arc<Mutex<BTreeMap<String, Instant>>> = Arc::default();
    let recorder = {
        let seen = seen_no_execute.clone();
        let stream = watcher(nodes.clone(), Default::default());
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(event)) = stream.next().await {
                if let watcher::Event::Apply(node) | watcher::Event::InitApply(node) = event
                    && taint_keys(&node).contains(&"node.kubernetes.io/unreachable:NoExecute".to_string())
                {
                    seen.lock().unwrap().entry(node.name_any()).or_insert_with(Instant::now);
                }
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
    let ready = Arc::new(AtomicBool::new(false));
    let config = ControllerConfig {
        lifecycle: LifecycleConfig {
            monitor_period: Duration::from_millis(500),
            grace_period: Duration::from_secs(2),
            startup_grace_period: Duration::from_secs(2),
            eviction_rate: 1.0,
            ..Default::default()
        },
        drain_period: Duration::from_millis(100),
        taint_manager_period: Duration::from_millis(200),
        taint_manager_shards: 4,
    };
    let controller = tokio::spawn(controller::run(
        client.clone(),
        config,
        metrics.clone(),
        leader_rx,
        ready.clone(),
        shutdown.clone(),
    ));

    // the site loses its cloud link: its kubelets' lease renewals stop arriving
    tokio::time::sleep(Duration::from_secs(1)).await;
    alive.lock().unwrap().retain(|n| n.starts_with("cloud"));
    wait_for("edge nodes marked Unknown", Duration::from_secs(15), || {
        let nodes = nodes.clone();
        async move {
            let mut unknown = 0;
            for name in EDGE {
                let node = nodes.get(name).await.unwrap();
                let ready = node.status.unwrap().conditions.unwrap().into_iter().find(|c| c.type_ == "Ready").unwrap();
                unknown +=
                    usize::from(ready.status == "Unknown" && ready.reason.as_deref() == Some("NodeStatusUnknown"));
            }
            unknown == EDGE.len()
        }
    })
    .await;
    // give the controller several more passes and drains to (wrongly) act
    tokio::time::sleep(Duration::from_secs(3)).await;
    for name in EDGE {
        assert_eq!(
            taint_keys(&nodes.get(name).await.unwrap()),
            ["node.kubernetes.io/unreachable:NoSchedule"],
            "{name}"
        );
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
        nodes
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"nodeunhealth": "yes"}}})),
            )
            .await
            .unwrap();
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
    let exposition = metrics.encode();
    assert!(exposition.contains("edge_node_lifecycle_evictions_total 6"), "{exposition}");

    shutdown_tx.send_replace(true);
    controller.await.unwrap();
    election.await.unwrap();
    let released = Api::<Lease>::namespaced(client, "kube-system").get("edge-node-lifecycle").await.unwrap();
    assert_eq!(released.spec.unwrap().holder_identity, None, "the leader lease is released on shutdown");
    kubelets.abort();
    recorder.abort();
}
