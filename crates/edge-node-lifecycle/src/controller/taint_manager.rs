//! The taint manager: which pods their nodes' NoExecute taints evict by now (a pure
//! decision), and the pass that deletes them, sharded over workers by node name.

use std::sync::Arc;
use std::time::Duration;

use edgegrid_core::keys;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Preconditions};
use kube::{Client, ResourceExt};
use node_lifecycle::lifecycle::{EvictionDecision, MonitorCore, Taint, Toleration, eviction_decision};
use tokio::time::Instant;

use super::Error;
use super::caches::Caches;
use crate::metrics::Metrics;
use crate::snapshot::node_snapshot;

/// Evicts pods that do not tolerate their node's NoExecute taints (now, or once their
/// `tolerationSeconds` ran out), never on a node the edge rule protects. Nodes are
/// sharded over workers by name hash; decisions are recomputed every pass, so a taint
/// that goes away cancels the pending evictions of its pods.
pub(super) async fn taint_manager_pass(
    client: &Client,
    caches: &Caches,
    core: &MonitorCore,
    metrics: &Metrics,
    shards: usize,
) {
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
    use serde_json::json;

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
