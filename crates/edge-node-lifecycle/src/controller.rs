//! The controller loop: caches Nodes, node Leases and Pods, runs the lifecycle logic every
//! monitor period, drains the NoExecute queues, and runs the taint manager, only while
//! leader. Every decision is the pure core's; this module only reads caches and writes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use controller_support::watch::follow_object;
use controller_support::{Gate, ShutdownSignal};
use edgegrid_core::keys;
use edgegrid_core::membership::{Labels, NodeUnitCheck, UnitSource, WatchedNodes};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use node_lifecycle::lifecycle::{
    Action, EvictionDecision, LifecycleConfig, MonitorCore, Taint, TaintRef, Toleration, condition_taint_actions,
    eviction_decision,
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
    /// How edge-health groups nodes into units (`--unit-label-key`; empty: SuperEdge's
    /// node units, read with the `edge-health-config` ConfigMap): the edge rule protects
    /// only the nodes edge-health watches (`edgegrid_core::membership`).
    pub unit_source: UnitSource,
    /// Where the `edge-health-config` ConfigMap lives (read only for SuperEdge node units).
    pub edge_health_config_namespace: String,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            lifecycle: LifecycleConfig::default(),
            drain_period: Duration::from_millis(100),
            taint_manager_period: Duration::from_secs(1),
            taint_manager_shards: 8,
            unit_source: UnitSource::NodeUnits,
            edge_health_config_namespace: "kube-system".to_string(),
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
    /// Fed by the node watch (and the ConfigMap's): whom edge-health watches, and which
    /// nodes changed since their NoSchedule taints were last looked at.
    membership: Arc<Mutex<Membership>>,
    /// The ConfigMap watch has listed (always true when it is not read).
    config_synced: Arc<AtomicBool>,
}

struct Membership {
    watched: WatchedNodes,
    /// Nodes added or changed since the last NoSchedule pass (kube-controller-manager runs
    /// that pass on every node event).
    changed: BTreeSet<String>,
    /// The names listed so far while a relist is under way.
    relisting: Option<Vec<ListedNode>>,
}

/// A node's name, labels and annotations, as a relist delivers them.
type ListedNode = (String, Labels, Option<Labels>);

impl Membership {
    fn on_node(&mut self, event: &watcher::Event<Node>) {
        let entry = |node: &Node| {
            (node.name_any(), node.metadata.labels.clone().unwrap_or_default(), node.metadata.annotations.clone())
        };
        match event {
            watcher::Event::Apply(node) => {
                let empty = Labels::new();
                let name = node.name_any();
                self.watched.apply(
                    &name,
                    node.metadata.labels.as_ref().unwrap_or(&empty),
                    node.metadata.annotations.as_ref(),
                );
                self.changed.insert(name);
            }
            watcher::Event::Delete(node) => {
                self.watched.delete(&node.name_any());
            }
            watcher::Event::Init => self.relisting = Some(Vec::new()),
            watcher::Event::InitApply(node) => {
                let listed = entry(node);
                self.changed.insert(listed.0.clone());
                self.relisting.get_or_insert_default().push(listed);
            }
            watcher::Event::InitDone => {
                let listed = self.relisting.take().unwrap_or_default();
                self.watched.replace_all(listed.iter().map(|(n, l, a)| (n.clone(), l.clone(), a.as_ref())));
            }
        }
    }
}

/// Runs until `shutdown` fires. Acts only while `leader` is true; opens `synced` once
/// every cache has synced.
pub async fn run(
    client: Client,
    config: ControllerConfig,
    metrics: Arc<Metrics>,
    leader: watch::Receiver<bool>,
    synced: Gate,
    shutdown: ShutdownSignal,
) {
    let mut shutdown = shutdown.receiver();
    let (caches, drivers) = start_caches(&client, &config);
    tokio::select! {
        _ = async {
            let _ = caches.nodes.wait_until_ready().await;
            let _ = caches.leases.wait_until_ready().await;
            let _ = caches.pods.wait_until_ready().await;
            while !caches.config_synced.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        } => {}
        _ = shutdown.changed() => return,
    }
    synced.open();
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
            caches.membership.lock().expect("membership lock").changed.clear();
            let snapshots = snapshots(&caches);
            actions.extend(core.monitor(&snapshots, now, jiff::Timestamp::now()));
            metrics.monitor_passes.inc();
            for (zone, state) in core.zone_states() {
                metrics.set_zone_state(&zone.region, &zone.zone, state);
            }
        } else {
            actions.extend(changed_nodes_taints(&caches));
        }
        actions.extend(core.drain(now));
        for (node, batch) in by_node(actions) {
            let outcome = execute(&client, &nodes_api, &caches, &node, &batch).await;
            for action in &batch {
                match &outcome {
                    Ok(()) => metrics.action(action_label(action)),
                    Err(e) => {
                        tracing::warn!(?action, error = %e, "action failed (retried on a later pass)");
                        metrics.error(e.metric_label());
                        core.action_failed(action);
                    }
                }
            }
            if outcome.is_err() {
                // decided again from the next snapshot
                caches.membership.lock().expect("membership lock").changed.insert(node);
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

/// kube-controller-manager's NoSchedule pass for the nodes that changed since the last
/// look (it runs on every node event; between monitor passes, so does this).
fn changed_nodes_taints(caches: &Caches) -> Vec<Action> {
    let changed = std::mem::take(&mut caches.membership.lock().expect("membership lock").changed);
    changed
        .iter()
        .filter_map(|name| cached_node(caches, name).ok())
        // condition taints do not depend on the edge rule: no watched answer needed
        .flat_map(|node| condition_taint_actions(&node_snapshot(&node, None, false)))
        .collect()
}

/// Actions grouped per node, in order: one node's taint changes go out as one write (a
/// second write with the same cached resourceVersion would only conflict).
fn by_node(actions: Vec<Action>) -> Vec<(String, Vec<Action>)> {
    let mut grouped: Vec<(String, Vec<Action>)> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for action in actions {
        let node = match &action {
            Action::MarkUnknown { node }
            | Action::MarkPodsNotReady { node }
            | Action::AddTaint { node, .. }
            | Action::RemoveTaint { node, .. } => node,
        };
        match index.get(node) {
            Some(&at) => grouped[at].1.push(action),
            None => {
                index.insert(node.clone(), grouped.len());
                grouped.push((node.clone(), vec![action]));
            }
        }
    }
    grouped
}

fn start_caches(client: &Client, config: &ControllerConfig) -> (Caches, Vec<tokio::task::JoinHandle<()>>) {
    fn cache<K>(
        api: Api<K>,
        mut on_event: impl FnMut(&watcher::Event<K>) + Send + 'static,
    ) -> (Store<K>, tokio::task::JoinHandle<()>)
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
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(event) => on_event(&event),
                    Err(e) => tracing::warn!(error = %e, "watch error"),
                }
            }
        });
        (reader, driver)
    }
    let membership = Arc::new(Mutex::new(Membership {
        watched: WatchedNodes::new(config.unit_source.clone()),
        changed: BTreeSet::new(),
        relisting: None,
    }));
    let fed = membership.clone();
    let (nodes, n) =
        cache(Api::<Node>::all(client.clone()), move |event| fed.lock().expect("membership lock").on_node(event));
    let (leases, l) = cache(Api::<Lease>::namespaced(client.clone(), keys::NODE_LEASE_NAMESPACE), |_| {});
    let (pods, p) = cache(Api::<Pod>::all(client.clone()), |_| {});
    let mut drivers = vec![n, l, p];
    let config_synced = Arc::new(AtomicBool::new(config.unit_source != UnitSource::NodeUnits));
    if config.unit_source == UnitSource::NodeUnits {
        let (fed, synced, client) = (membership.clone(), config_synced.clone(), client.clone());
        let namespace = config.edge_health_config_namespace.clone();
        drivers.push(tokio::spawn(async move {
            let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
            let on_change = |map: Option<&ConfigMap>| {
                fed.lock().expect("membership lock").watched.set_node_unit_check(NodeUnitCheck::of_config_map(map));
            };
            follow_object(api, keys::EDGE_HEALTH_CONFIGMAP, on_change, || synced.store(true, Ordering::SeqCst)).await
        }));
    }
    (Caches { nodes, leases, pods, membership, config_synced }, drivers)
}

fn snapshots(caches: &Caches) -> Vec<node_lifecycle::lifecycle::NodeSnapshot> {
    let leases: BTreeMap<String, Arc<Lease>> = caches.leases.state().into_iter().map(|l| (l.name_any(), l)).collect();
    let membership = caches.membership.lock().expect("membership lock");
    caches
        .nodes
        .state()
        .iter()
        .map(|node| {
            let name = node.name_any();
            node_snapshot(node, leases.get(&name).map(|l| l.as_ref()), membership.watched.is_watched(&name))
        })
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
    caches.nodes.get(&reflector::ObjectRef::new(name)).ok_or_else(|| Error::NodeNotCached(name.into()))
}

/// Carries out one node's actions of a pass, in order. Writes are conditional on the
/// resourceVersion the previous one left (the cached one first), so a node changed
/// meanwhile is decided again on the next pass rather than overwritten.
async fn execute(
    client: &Client,
    nodes: &Api<Node>,
    caches: &Caches,
    node: &str,
    batch: &[Action],
) -> Result<(), Error> {
    let cached = cached_node(caches, node)?;
    let mut resource_version = cached.resource_version();
    for action in batch {
        match action {
            Action::MarkUnknown { .. } => {
                let patch = mark_unknown_patch(&cached, &now_rfc3339(), resource_version.as_deref());
                let written = nodes.patch_status(node, &PatchParams::default(), &Patch::Merge(&patch)).await?;
                resource_version = written.resource_version();
            }
            Action::MarkPodsNotReady { .. } => mark_pods_not_ready(client, caches, node).await?,
            _ => {}
        }
    }
    let taints: Vec<(bool, TaintRef)> = batch
        .iter()
        .filter_map(|action| match action {
            Action::AddTaint { taint, .. } => Some((true, *taint)),
            Action::RemoveTaint { taint, .. } => Some((false, *taint)),
            _ => None,
        })
        .collect();
    if taints.is_empty() {
        return Ok(());
    }
    let current: Vec<Value> = cached
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .map(|t| serde_json::to_value(t).unwrap_or_default())
        .collect();
    if let Some(updated) = swap_taints(&current, &taints, &now_rfc3339()) {
        let patch = json!({"metadata": {"resourceVersion": resource_version}, "spec": {"taints": updated}});
        nodes.patch(node, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    Ok(())
}

/// kube-controller-manager's `SwapNodeControllerTaint` on a node's taints, as JSON: each
/// taint to add that is missing (by key and effect) is appended with `timeAdded` = `now`,
/// each one to remove goes; every other taint stays as it is, where it is. `None` when
/// nothing changes.
pub fn swap_taints(current: &[Value], changes: &[(bool, TaintRef)], now: &str) -> Option<Vec<Value>> {
    let matches = |t: &Value, taint: &TaintRef| t["key"] == taint.key() && t["effect"] == taint.effect();
    let mut taints = current.to_vec();
    for (add, taint) in changes {
        if *add {
            if !taints.iter().any(|t| matches(t, taint)) {
                taints.push(json!({"key": taint.key(), "effect": taint.effect(), "timeAdded": now}));
            }
        } else {
            taints.retain(|t| !matches(t, taint));
        }
    }
    (taints != current).then_some(taints)
}

/// kube-controller-manager's status write for a node whose heartbeats stopped: Ready,
/// MemoryPressure, DiskPressure and PIDPressure (not NetworkUnavailable, which the control
/// plane manages) go Unknown, their transition time now; a missing one is added as never
/// updated by the kubelet.
pub fn mark_unknown_patch(node: &Node, now: &str, resource_version: Option<&str>) -> Value {
    const MARKED: [&str; 4] = [
        keys::NODE_CONDITION_READY,
        keys::NODE_CONDITION_MEMORY_PRESSURE,
        keys::NODE_CONDITION_DISK_PRESSURE,
        keys::NODE_CONDITION_PID_PRESSURE,
    ];
    let mut conditions: Vec<Value> = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .map(|c| serde_json::to_value(c).unwrap_or_default())
        .collect();
    let created = node.metadata.creation_timestamp.as_ref().map(|t| t.0.to_string());
    for kind in MARKED {
        match conditions.iter_mut().find(|c| c["type"] == kind) {
            None => conditions.push(json!({"type": kind, "status": keys::CONDITION_UNKNOWN,
                "reason": "NodeStatusNeverUpdated", "message": "Kubelet never posted node status.",
                "lastHeartbeatTime": created, "lastTransitionTime": now})),
            Some(condition) if condition["status"] != keys::CONDITION_UNKNOWN => {
                condition["status"] = json!(keys::CONDITION_UNKNOWN);
                condition["reason"] = json!("NodeStatusUnknown");
                condition["message"] = json!("Kubelet stopped posting node status.");
                condition["lastTransitionTime"] = json!(now);
            }
            Some(_) => {}
        }
    }
    json!({"metadata": {"resourceVersion": resource_version}, "status": {"conditions": conditions}})
}

async fn mark_pods_not_ready(client: &Client, caches: &Caches, node: &str) -> Result<(), Error> {
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
    let due = {
        // held only while deciding (no await): the node watch waits at most that long
        let membership = caches.membership.lock().expect("membership lock");
        let protected = |node: &Node| {
            let watched = membership.watched.is_watched(&node.name_any());
            core.protected(&node_snapshot(node, None, watched), now, wall_now)
        };
        pods_due_for_eviction(&nodes, &pods, protected, wall_now, now)
    };
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

    /// The taint write: every patch applied to the node it was computed from.
    #[test]
    fn swap_taints_keeps_foreign_taints_and_stamps_only_the_added() {
        let foreign = json!({"key": "dedicated", "value": "edge", "effect": "NoSchedule"});
        let pressure = json!({"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule",
            "timeAdded": "2026-11-20T00:00:00Z"});
        let reachable = json!({"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "value": "x"});
        let current = vec![foreign.clone(), pressure.clone(), reachable.clone()];
        let now = "2026-11-25T10:00:00Z";
        let changes = [
            (true, TaintRef::UnschedulableNoSchedule),
            (true, TaintRef::MemoryPressureNoSchedule),
            (false, TaintRef::UnreachableNoSchedule),
            (true, TaintRef::UnreachableNoExecute),
        ];
        let updated = swap_taints(&current, &changes, now).expect("a change");
        assert_eq!(
            updated,
            vec![
                foreign.clone(),
                pressure.clone(),
                json!({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": now}),
                json!({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": now}),
            ]
        );
        let mut node = json!({"metadata": {"name": "n"}, "spec": {"taints": current.clone()}});
        json_patch::merge(&mut node, &json!({"spec": {"taints": updated.clone()}}));
        assert_eq!(node["spec"]["taints"], Value::Array(updated));
        assert_eq!(swap_taints(&current, &[(true, TaintRef::MemoryPressureNoSchedule)], now), None, "already there");
        assert_eq!(swap_taints(&current, &[(false, TaintRef::PidPressureNoSchedule)], now), None, "nothing to remove");
    }

    /// The status write for a node gone silent, merged into the node as the apiserver does.
    #[test]
    fn mark_unknown_marks_the_four_kubelet_conditions_only() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n", "creationTimestamp": "2026-11-01T00:00:00Z", "resourceVersion": "7"},
            "status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok",
                 "lastHeartbeatTime": "2026-11-25T09:00:00Z", "lastTransitionTime": "2026-11-24T00:00:00Z"},
                {"type": "MemoryPressure", "status": "Unknown", "reason": "NodeStatusUnknown",
                 "lastTransitionTime": "2026-11-24T12:00:00Z"},
                {"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated",
                 "lastTransitionTime": "2026-11-01T00:00:00Z"}
            ]}
        }))
        .unwrap();
        let now = "2026-11-25T10:00:00Z";
        let patch = mark_unknown_patch(&node, now, Some("7"));
        let mut object = serde_json::to_value(&node).unwrap();
        json_patch::merge(&mut object, &patch);
        assert_eq!(object["metadata"]["resourceVersion"], "7");
        assert_eq!(
            object["status"]["conditions"],
            json!([
                {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                 "message": "Kubelet stopped posting node status.",
                 "lastHeartbeatTime": "2026-11-25T09:00:00Z", "lastTransitionTime": now},
                {"type": "MemoryPressure", "status": "Unknown", "reason": "NodeStatusUnknown",
                 "lastTransitionTime": "2026-11-24T12:00:00Z"},
                {"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated",
                 "lastTransitionTime": "2026-11-01T00:00:00Z"},
                {"type": "DiskPressure", "status": "Unknown", "reason": "NodeStatusNeverUpdated",
                 "message": "Kubelet never posted node status.",
                 "lastHeartbeatTime": "2026-11-01T00:00:00Z", "lastTransitionTime": now},
                {"type": "PIDPressure", "status": "Unknown", "reason": "NodeStatusNeverUpdated",
                 "message": "Kubelet never posted node status.",
                 "lastHeartbeatTime": "2026-11-01T00:00:00Z", "lastTransitionTime": now},
            ])
        );
    }

    #[test]
    fn actions_are_grouped_per_node_in_order() {
        let a = |node: &str, taint| Action::AddTaint { node: node.into(), taint };
        let actions = vec![
            Action::MarkUnknown { node: "x".into() },
            a("y", TaintRef::UnschedulableNoSchedule),
            a("x", TaintRef::UnreachableNoExecute),
            Action::MarkPodsNotReady { node: "y".into() },
        ];
        assert_eq!(
            by_node(actions),
            vec![
                (
                    "x".to_string(),
                    vec![Action::MarkUnknown { node: "x".into() }, a("x", TaintRef::UnreachableNoExecute)]
                ),
                (
                    "y".to_string(),
                    vec![a("y", TaintRef::UnschedulableNoSchedule), Action::MarkPodsNotReady { node: "y".into() }]
                ),
            ]
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
