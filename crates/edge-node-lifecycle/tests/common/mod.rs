//! Fixtures the end-to-end tests share: a fake API server with nodes, node Leases and
//! pods, kubelets renewing Leases, watches recording what the controller did, and a
//! controller that can be started and stopped (a process restart).

// each test binary uses a subset
#![allow(dead_code)]

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use controller_support::Readiness;
use edge_node_lifecycle::controller::{self, ControllerConfig};
use edge_node_lifecycle::metrics::Metrics;
use fake_apiserver::FakeApiServer;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, Resource};
use node_lifecycle::lifecycle::LifecycleConfig;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub const UNREACHABLE_NO_EXECUTE: &str = "node.kubernetes.io/unreachable:NoExecute";
pub const UNREACHABLE_NO_SCHEDULE: &str = "node.kubernetes.io/unreachable:NoSchedule";

/// A controller at test speed: 2 s grace periods, a monitor pass every `monitor_period`,
/// queues drained every 100 ms at `eviction_rate`, the taint manager every 200 ms over 4
/// shards; everything else the defaults (SuperEdge node units, no protection bound).
pub fn fast_config(monitor_period: Duration, eviction_rate: f64) -> ControllerConfig {
    ControllerConfig {
        lifecycle: LifecycleConfig {
            monitor_period,
            grace_period: Duration::from_secs(2),
            startup_grace_period: Duration::from_secs(2),
            eviction_rate,
            ..Default::default()
        },
        drain_period: Duration::from_millis(100),
        taint_manager_period: Duration::from_millis(200),
        taint_manager_shards: 4,
        ..Default::default()
    }
}

pub async fn start_server() -> (FakeApiServer, Client) {
    let server = FakeApiServer::start().await.unwrap();
    let client = Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    (server, client)
}

/// A Lease `renewTime` (microsecond precision, as kubelets write it).
pub fn micro_now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// A Ready edge node in region `r`, zone `zone`, with its Lease just renewed and the
/// address its edge-health daemon publishes (so, with a peer, edge-health watches it: the
/// controllers' default unit source is SuperEdge's, whole cluster without a ConfigMap).
pub async fn create_node(client: &Client, name: &str, zone: &str) {
    create_node_with(client, name, zone, true).await
}

/// A cloud worker: no edge-health on it, so nobody watches it.
pub async fn create_cloud_node(client: &Client, name: &str, zone: &str) {
    create_node_with(client, name, zone, false).await
}

async fn create_node_with(client: &Client, name: &str, zone: &str, edge_health: bool) {
    let annotations =
        if edge_health { json!({"edgegrid.io/edge-health-address": "10.0.0.1:51005"}) } else { json!({}) };
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations,
            "labels": {"topology.kubernetes.io/region": "r", "topology.kubernetes.io/zone": zone}},
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
}

/// A pod in `default` bound to `node`, with these tolerations (`json!([])` for none).
pub async fn create_pod(client: &Client, name: &str, node: &str, tolerations: Value) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"nodeName": node, "tolerations": tolerations, "containers": [{"name": "c", "image": "i"}]},
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), "default").create(&PostParams::default(), &pod).await.unwrap();
}

/// The node's unit peers vote it unhealthy (`nodeunhealth: "yes"`).
pub async fn vote_unhealthy(client: &Client, name: &str) {
    let patch = json!({"metadata": {"annotations": {"nodeunhealth": "yes"}}});
    Api::<Node>::all(client.clone()).patch(name, &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
}

/// Renews the Lease of every node in `alive` every 300 ms, as kubelets do.
pub fn kubelets(client: Client, alive: Arc<Mutex<HashSet<String>>>) -> JoinHandle<()> {
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

/// `key:effect` of every taint on the node.
pub fn taint_keys(node: &Node) -> Vec<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .map(|t| format!("{}:{}", t.key, t.effect))
        .collect()
}

/// The node's Ready condition status and reason.
pub fn ready_condition(node: &Node) -> Option<(String, Option<String>)> {
    let conditions = node.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find(|c| c.type_ == "Ready").map(|c| (c.status.clone(), c.reason.clone()))
}

/// Polls `check` every 100 ms; fails the test after `timeout`.
pub async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Calls `on_event` with every event of a watch on `api`, as it arrives, until aborted.
pub fn watch_events<K>(api: Api<K>, mut on_event: impl FnMut(watcher::Event<K>) + Send + 'static) -> JoinHandle<()>
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
        while let Some(event) = stream.next().await {
            if let Ok(event) = event {
                on_event(event);
            }
        }
    })
}

/// A controller process: `controller::run` with its own caches, leading as the test says.
pub struct RunningController {
    pub metrics: Arc<Metrics>,
    shutdown: watch::Sender<bool>,
    leader: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl RunningController {
    /// Starts one that leads at once.
    pub fn start(client: &Client, config: ControllerConfig) -> Self {
        Self::start_with(client, config, true)
    }

    pub fn start_with(client: &Client, config: ControllerConfig, leading: bool) -> Self {
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (leader, leader_rx) = watch::channel(leading);
        let metrics = Arc::new(Metrics::default());
        let synced = Readiness::new().gate("the caches have not synced yet");
        let task = tokio::spawn(controller::run(
            client.clone(),
            config,
            metrics.clone(),
            leader_rx,
            synced,
            shutdown_rx.into(),
        ));
        Self { metrics, shutdown, leader, task }
    }

    /// Gains or loses leadership (as the Lease election would tell it).
    pub fn set_leader(&self, leading: bool) {
        self.leader.send_replace(leading);
    }

    /// Stops it as SIGTERM would, and waits until it has.
    pub async fn stop(self) {
        self.shutdown.send_replace(true);
        self.task.await.unwrap();
    }
}
