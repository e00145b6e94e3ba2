//! Carrying out the core's actions on the API server: one node's actions as one batch, its
//! status and taint writes conditional on the resourceVersion they were decided from, and
//! its pods marked not ready.

use edgegrid_core::keys;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use node_lifecycle::lifecycle::{Action, TaintRef};
use serde_json::{Value, json};

use super::Error;
use super::caches::{Caches, cached_node, pods_on};

/// Actions grouped per node, in order: one node's taint changes go out as one write (a
/// second write with the same cached resourceVersion would only conflict).
pub(super) fn by_node(actions: Vec<Action>) -> Vec<(String, Vec<Action>)> {
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

pub(super) fn action_label(action: &Action) -> &'static str {
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

/// Carries out one node's actions of a pass, in order. Writes are conditional on the
/// resourceVersion the previous one left (the cached one first), so a node changed
/// meanwhile is decided again on the next pass rather than overwritten.
pub(super) async fn execute(
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
