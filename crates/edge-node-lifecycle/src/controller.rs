//! The controller loop: caches Nodes, node Leases and Pods, runs the lifecycle logic every
//! monitor period, drains the NoExecute queues, and runs the taint manager, only while
//! leader. Every decision is the pure core's; this module only reads caches and writes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use edgegrid_core::keys;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use node_lifecycle::lifecycle::{
    Action, EvictionDecision, LifecycleConfig, MonitorCore, Taint, Toleration, eviction_decision,
};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::metrics::Metrics;
use crate::snapshot::node_snapshot;

#[derive(Clone, Debug)]
pub struct ControllerConfig {
    pub lifecycle: LifecycleConfig,
    /// How often the NoExecute queues are drained (kube-controller-manager: 100 ms).
    pub drain_period: Duration,
    /// How often the taint manager looks at pods on NoExecute-tainted nodes.
    pub taint_manager_period: Duration,
    /// Taint manager workers; nodes are sharded over them by name hash.
    pub taint_manager_shards: usize,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            lifecycle: LifecycleConfig::default(),
            drain_period: Duration::from_millis(100),
            taint_manager_period: Duration::from_secs(1),
            taint_manager_shards: 8,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("node {0} is not in the cache")]
    NodeNotCached(String),
    #[error("kubernetes API: {0}")]
    Api(#[from] kube::Error),
}

impl Error {
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::NodeNotCached(_) => "node_not_cached",
            Self::Api(kube::Error::Api(s)) if s.code == 409 => "conflict",
            Self::Api(_) => "api",
        }
    }
}

struct Caches {
    nodes: Store<Node>,
    leases: Store<Lease>,
    pods: Store<Pod>,
}

/// Runs until `shutdown` flips to true. Acts only while `leader` is true; `ready` turns
/// true once every cache has synced.
pub async fn run(
    client: Client,
    config: ControllerConfig,
    metrics: Arc<Metrics>,
    leader: watch::Receiver<bool>,
    ready: Arc<AtomicBool>,
    mut shutdown: watch::Receiver<bool>,
) {
    let (caches, drivers) = start_caches(&client);
    tokio::select! {
        _ = async {
            let _ = caches.nodes.wait_until_ready().await;
            let _ = caches.leases.wait_until_ready().await;
            let _ = caches.pods.wait_until_ready().await;
        } => {}
        _ = shutdown.changed() => return,
    }
    ready.store(true, Ordering::SeqCst);
    tracing::info!("caches synced");

    // One core per leadership term, built when it starts: a core kept from an earlier
    // term would judge with what it saw before another instance led, and its queues would
    // have refilled their buckets meanwhile. A new core resumes from what the API says now
    // (see `node_lifecycle::lifecycle::MonitorCore`), exactly as a restarted process does.
    let mut term: Option<MonitorCore> = None;
    let mut ticker = tokio::time::interval(config.drain_period);
    let mut next_monitor = Instant::now();
    let mut next_taint_manager = Instant::now();
    let nodes_api: Api<Node> = Api::all(client.clone());
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.changed() => break,
        }
        if !*leader.borrow() {
            term = None;
            continue;
        }
        let now = Instant::now();
        let core = term.get_or_insert_with(|| {
            next_monitor = now;
            next_taint_manager = now;
            MonitorCore::new(config.lifecycle.clone())
        });
        let mut actions = Vec::new();
        if now >= next_monitor {
            next_monitor = now + config.lifecycle.monitor_period;
            let snapshots = snapshots(&caches);
            actions.extend(core.monitor(&snapshots, now, jiff::Timestamp::now()));
            metrics.monitor_passes.inc();
            for (zone, state) in core.zone_states() {
                metrics.set_zone_state(&zone.region, &zone.zone, state);
            }
        }
        actions.extend(core.drain(now));
        for action in actions {
            let kind = action_label(&action);
            match execute(&client, &nodes_api, &caches, &action).await {
                Ok(()) => metrics.action(kind),
                Err(e) => {
                    tracing::warn!(?action, error = %e, "action failed (retried on a later pass)");
                    metrics.error(e.metric_label());
                    core.action_failed(&action);
                }
            }
        }
        if now >= next_taint_manager {
            next_taint_manager = now + config.taint_manager_period;
            taint_manager_pass(&client, &caches, core, &metrics, config.taint_manager_shards).await;
        }
    }
    for driver in drivers {
        driver.abort();
    }
}

fn start_caches(client: &Client) -> (Caches, Vec<tokio::task::JoinHandle<()>>) {
    fn cache<K>(api: Api<K>) -> (Store<K>, tokio::task::JoinHandle<()>)
    where
        K: kube::Resource<DynamicType = ()>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + Sync
            + 'static,
    {
        let (reader, writer) = reflector::store();
        let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()).default_backoff());
        let driver = tokio::spawn(async move {
            stream
                .for_each(|event| async move {
                    if let Err(e) = event {
                        tracing::warn!(error = %e, "watch error");
                    }
                })
                .await;
        });
        (reader, driver)
    }
    let (nodes, n) = cache(Api::<Node>::all(client.clone()));
    let (leases, l) = cache(Api::<Lease>::namespaced(client.clone(), keys::NODE_LEASE_NAMESPACE));
    let (pods, p) = cache(Api::<Pod>::all(client.clone()));
    (Caches { nodes, leases, pods }, vec![n, l, p])
}

fn snapshots(caches: &Caches) -> Vec<node_lifecycle::lifecycle::NodeSnapshot> {
    let leases: BTreeMap<String, Arc<Lease>> = caches.leases.state().into_iter().map(|l| (l.name_any(), l)).collect();
    caches
        .nodes
        .state()
        .iter()
        .map(|node| node_snapshot(node, leases.get(&node.name_any()).map(|l| l.as_ref())))
        .collect()
}

fn action_label(action: &Action) -> &'static str {
    match action {
        Action::MarkUnknown { .. } => "mark_unknown",
        Action::MarkPodsNotReady { .. } => "mark_pods_not_ready",
        Action::AddTaint { .. } => "add_taint",
        Action::RemoveTaint { .. } => "remove_taint",
    }
}

fn now_rfc3339() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn cached_node(caches: &Caches, name: &str) -> Result<Arc<Node>, Error> {
    caches.nodes.state().into_iter().find(|n| n.name_any() == name).ok_or_else(|| Error::NodeNotCached(name.into()))
}

async fn execute(client: &Client, nodes: &Api<Node>, caches: &Caches, action: &Action) -> Result<(), Error> {
    match action {
        Action::MarkUnknown { node } => {
            let cached = cached_node(caches, node)?;
            let now = now_rfc3339();
            let mut conditions: Vec<Value> = cached
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .map(|c| serde_json::to_value(c).unwrap_or_default())
                .collect();
            if !conditions.iter().any(|c| c["type"] == keys::NODE_CONDITION_READY) {
                conditions.push(json!({"type": keys::NODE_CONDITION_READY, "reason": "NodeStatusNeverUpdated",
                    "message": "Kubelet never posted node status."}));
            }
            for condition in &mut conditions {
                if condition["status"] != keys::CONDITION_UNKNOWN {
                    condition["lastTransitionTime"] = json!(now);
                }
                condition["status"] = json!(keys::CONDITION_UNKNOWN);
                if condition["reason"] != "NodeStatusNeverUpdated" {
                    condition["reason"] = json!("NodeStatusUnknown");
                    condition["message"] = json!("Kubelet stopped posting node status.");
                }
            }
            let patch = json!({
                "metadata": {"resourceVersion": cached.resource_version()},
                "status": {"conditions": conditions},
            });
            nodes.patch_status(node, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        }
        Action::MarkPodsNotReady { node } => {
            for pod in pods_on(caches, node) {
                let ready = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|c| c.iter().find(|c| c.type_ == keys::NODE_CONDITION_READY))
                    .map(|c| c.status.clone());
                if ready.as_deref() == Some(keys::CONDITION_FALSE) {
                    continue;
                }
                let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
                let patch = json!({"status": {"conditions": [{"type": keys::NODE_CONDITION_READY,
                    "status": keys::CONDITION_FALSE, "lastTransitionTime": now_rfc3339()}]}});
                api.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Strategic(&patch)).await?;
            }
        }
        Action::AddTaint { node, taint } | Action::RemoveTaint { node, taint } => {
            let cached = cached_node(caches, node)?;
            let wanted = taint.taint();
            let mut taints: Vec<Value> = cached
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .into_iter()
                .flatten()
                .filter(|t| !(t.key == wanted.key && t.effect == wanted.effect))
                .map(|t| serde_json::to_value(t).unwrap_or_default())
                .collect();
            if matches!(action, Action::AddTaint { .. }) {
                let mut added = json!({"key": wanted.key, "effect": wanted.effect});
                if wanted.effect == keys::TAINT_EFFECT_NO_EXECUTE {
                    added["timeAdded"] = json!(now_rfc3339());
                }
                taints.push(added);
            }
            let patch = json!({"metadata": {"resourceVersion": cached.resource_version()}, "spec": {"taints": taints}});
            nodes.patch(node, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        }
    }
    Ok(())
}

fn pods_on(caches: &Caches, node: &str) -> Vec<Arc<Pod>> {
    caches
        .pods
        .state()
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .collect()
}

/// Evicts pods that do not tolerate their node's NoExecute taints (now, or once their
/// `tolerationSeconds` ran out), never on a node the edge rule protects. Nodes are
/// sharded over workers by name hash; decisions are recomputed every pass, so a taint
/// that goes away cancels the pending evictions of its pods.
async fn taint_manager_pass(client: &Client, caches: &Caches, core: &MonitorCore, metrics: &Metrics, shards: usize) {
    let now = Instant::now();
    let wall_now = jiff::Timestamp::now();
    let nodes = caches.nodes.state();
    let pods = caches.pods.state();
    let protected = |node: &Node| core.protected(&node_snapshot(node, None), now, wall_now);
    let due = pods_due_for_eviction(&nodes, &pods, protected, wall_now, now);
    let mut work: Vec<Vec<Arc<Pod>>> = vec![Vec::new(); shards.max(1)];
    for (node, pod) in due {
        work[shard_of(&node, shards.max(1))].push(pod);
    }
    let passes = work.into_iter().map(|pods| async move {
        for pod in pods {
            let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
            let params = DeleteParams {
                preconditions: Some(Preconditions { uid: pod.uid(), resource_version: None }),
                ..Default::default()
            };
            match api.delete(&pod.name_any(), &params).await {
                Ok(_) => {
                    tracing::info!(pod = %pod.name_any(), "evicted by the taint manager");
                    metrics.evictions.inc();
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => metrics.error(Error::from(e).metric_label()),
            }
        }
    });
    futures::future::join_all(passes).await;
}

/// The taint manager's decision for one pass, pure: (node, pod) for every pod whose
/// eviction is due at `now`. A node's NoExecute taints count from their `timeAdded`
/// (wall clock, converted to the monotonic `now`), or from now when it is absent.
pub fn pods_due_for_eviction(
    nodes: &[Arc<Node>],
    pods: &[Arc<Pod>],
    protected: impl Fn(&Node) -> bool,
    wall_now: jiff::Timestamp,
    now: Instant,
) -> Vec<(String, Arc<Pod>)> {
    let mut due = Vec::new();
    for node in nodes {
        let no_execute: Vec<&k8s_openapi::api::core::v1::Taint> = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .filter(|t| t.effect == keys::TAINT_EFFECT_NO_EXECUTE)
            .collect();
        if no_execute.is_empty() || protected(node) {
            continue;
        }
        let taints: Vec<Taint> = no_execute
            .iter()
            .map(|t| Taint { key: t.key.clone(), value: t.value.clone(), effect: t.effect.clone() })
            .collect();
        let ago = no_execute
            .iter()
            .filter_map(|t| t.time_added.as_ref().map(|time| time.0))
            .min()
            .map_or(Duration::ZERO, |added| {
                Duration::try_from(wall_now.duration_since(added)).unwrap_or(Duration::ZERO)
            });
        let tainted_at = now.checked_sub(ago).unwrap_or(now);
        let name = node.name_any();
        for pod in pods.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name.as_str())) {
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let tolerations: Vec<Toleration> = pod
                .spec
                .as_ref()
                .and_then(|s| s.tolerations.as_ref())
                .into_iter()
                .flatten()
                .map(|t| Toleration {
                    key: t.key.clone(),
                    operator: t.operator.clone(),
                    value: t.value.clone(),
                    effect: t.effect.clone(),
                    toleration_seconds: t.toleration_seconds,
                })
                .collect();
            let is_due = match eviction_decision(&tolerations, &taints, tainted_at) {
                EvictionDecision::Keep => false,
                EvictionDecision::EvictNow => true,
                EvictionDecision::EvictAt(at) => at <= now,
            };
            if is_due {
                due.push((name.clone(), pod.clone()));
            }
        }
    }
    due
}

/// The taint manager worker a node belongs to (stable for a node name).
pub fn shard_of(node: &str, shards: usize) -> usize {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    node.hash(&mut hasher);
    (hasher.finish() % shards.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, taints: serde_json::Value) -> Arc<Node> {
        Arc::new(serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"taints": taints}})).unwrap())
    }

    fn pod(name: &str, node: &str, tolerations: serde_json::Value, deleting: bool) -> Arc<Pod> {
        let mut meta = json!({"name": name, "namespace": "default"});
        if deleting {
            meta["deletionTimestamp"] = json!("2026-11-21T10:00:00Z");
        }
        Arc::new(
            serde_json::from_value(json!({"metadata": meta, "spec": {"nodeName": node, "tolerations": tolerations,
            "containers": [{"name": "c", "image": "i"}]}}))
            .unwrap(),
        )
    }

    #[test]
    fn eviction_selection() {
        let wall: jiff::Timestamp = "2026-11-21T10:00:30Z".parse().unwrap();
        let now = Instant::now();
        let unreachable_since =
            |t: &str| json!([{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": t}]);
        let tolerate = |secs: i64| json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": secs}]);
        let nodes = vec![
            node("tainted-20s-ago", unreachable_since("2026-11-21T10:00:10Z")),
            node("protected", unreachable_since("2026-11-21T10:00:00Z")),
            node("untainted", json!([{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}])),
        ];
        let pods = vec![
            pod("intolerant", "tainted-20s-ago", json!([]), false),
            pod("tolerates-10s", "tainted-20s-ago", tolerate(10), false),
            pod("tolerates-60s", "tainted-20s-ago", tolerate(60), false),
            pod("tolerates-forever", "tainted-20s-ago", json!([{"operator": "Exists"}]), false),
            pod("already-deleting", "tainted-20s-ago", json!([]), true),
            pod("on-protected", "protected", json!([]), false),
            pod("on-untainted", "untainted", json!([]), false),
        ];
        let due = pods_due_for_eviction(&nodes, &pods, |n| n.name_any() == "protected", wall, now);
        let names: Vec<(String, String)> = due.iter().map(|(n, p)| (n.clone(), p.name_any())).collect();
        assert_eq!(
            names,
            vec![
                ("tainted-20s-ago".to_string(), "intolerant".to_string()),
                ("tainted-20s-ago".to_string(), "tolerates-10s".to_string()),
            ]
        );
        // the taint went away: nothing is due any more (pending evictions are cancelled)
        let cleared = vec![node("tainted-20s-ago", json!([]))];
        assert!(pods_due_for_eviction(&cleared, &pods, |_| false, wall, now).is_empty());
        // 40 more seconds: the 60 s toleration ran out too
        let later = wall + jiff::SignedDuration::from_secs(40);
        let due = pods_due_for_eviction(&nodes[..1], &pods, |_| false, later, now);
        assert_eq!(
            due.iter().map(|(_, p)| p.name_any()).collect::<Vec<_>>(),
            ["intolerant", "tolerates-10s", "tolerates-60s"]
        );
    }

    #[test]
    fn shards_are_stable_and_in_range() {
        for shards in [1, 4, 8] {
            for node in ["a", "edge-1", "cloud-99"] {
                let shard = shard_of(node, shards);
                assert!(shard < shards);
                assert_eq!(shard, shard_of(node, shards));
            }
        }
    }
}
