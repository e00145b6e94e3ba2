//! Node + Lease objects -> what the lifecycle logic reads. Pure.

use edgegrid_core::keys;
use edgegrid_core::protection::NodeReading;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use node_lifecycle::lifecycle::{NodeReport, NodeSnapshot, ReadyStatus, Taint, ZoneKey};

/// `watched`: whether edge-health watches the node (`edgegrid_core::unit::membership`),
/// which takes the node's unit and its peers, so the caller's index answers it. What the
/// edge rule reads of the node (its Ready condition's status and `lastTransitionTime`, its
/// vote and limit annotations) comes through core's [`NodeReading`].
pub fn node_snapshot(node: &Node, lease: Option<&Lease>, watched: bool) -> NodeSnapshot {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
    let reading = NodeReading::of_node(node);
    let heartbeat = conditions
        .into_iter()
        .flatten()
        .find(|c| c.type_ == keys::NODE_CONDITION_READY)
        .and_then(|c| c.last_heartbeat_time.as_ref());
    NodeSnapshot {
        name: node.metadata.name.clone().unwrap_or_default(),
        zone: ZoneKey::of_labels(&labels),
        report: NodeReport {
            ready: reading.ready.map(|c| match c.status {
                Some(keys::CONDITION_TRUE) => ReadyStatus::True,
                Some(keys::CONDITION_FALSE) => ReadyStatus::False,
                _ => ReadyStatus::Unknown,
            }),
            heartbeat: heartbeat.map(|t| t.0.to_string()),
            ready_transition: reading.ready.and_then(|c| c.last_transition_time),
            lease_renew: lease
                .and_then(|l| l.spec.as_ref())
                .and_then(|s| s.renew_time.as_ref())
                .map(|t| t.0.to_string()),
        },
        conditions: conditions.into_iter().flatten().map(|c| (c.type_.clone(), c.status.clone())).collect(),
        unschedulable: node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false),
        excluded_from_disruption: labels.contains_key(keys::EXCLUDE_DISRUPTION_LABEL),
        watched,
        voted_unhealthy: reading.voted_unhealthy(),
        protection_limit: reading.limit(),
        taints: node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .map(|t| Taint { key: t.key.clone(), value: t.value.clone(), effect: t.effect.clone() })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgegrid_core::protection::{LimitAnnotation, ProtectionLimit};
    use serde_json::json;
    use std::time::Duration;

    #[test]
    fn reads_zone_ready_heartbeats_vote_and_taints() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "edge-1",
                "labels": {"topology.kubernetes.io/region": "r1", "topology.kubernetes.io/zone": "z1",
                    "node.kubernetes.io/exclude-disruption": ""},
                "annotations": {"nodeunhealth": "yes", "superedge.io/max-unreachable-protection": "1h30m"}},
            "spec": {"unschedulable": true,
                "taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}]},
            "status": {"conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "Unknown", "lastHeartbeatTime": "2026-11-21T10:00:00Z",
                 "lastTransitionTime": "2026-11-21T09:59:00Z"}
            ]}
        }))
        .unwrap();
        let lease: Lease = serde_json::from_value(json!({
            "metadata": {"name": "edge-1", "namespace": "kube-node-lease"},
            "spec": {"renewTime": "2026-11-21T10:00:05.000000Z"}
        }))
        .unwrap();
        let snapshot = node_snapshot(&node, Some(&lease), true);
        assert_eq!(
            snapshot,
            NodeSnapshot {
                name: "edge-1".into(),
                conditions: vec![("MemoryPressure".into(), "False".into()), ("Ready".into(), "Unknown".into())],
                unschedulable: true,
                excluded_from_disruption: true,
                watched: true,
                zone: ZoneKey { region: "r1".into(), zone: "z1".into() },
                report: NodeReport {
                    ready: Some(ReadyStatus::Unknown),
                    heartbeat: Some("2026-11-21T10:00:00Z".into()),
                    lease_renew: Some("2026-11-21T10:00:05Z".into()),
                    ready_transition: Some("2026-11-21T09:59:00Z".parse().unwrap()),
                },
                voted_unhealthy: true,
                protection_limit: LimitAnnotation::Valid(ProtectionLimit::After(Duration::from_secs(5400))),
                taints: vec![Taint {
                    key: "node.kubernetes.io/unreachable".into(),
                    value: None,
                    effect: "NoSchedule".into()
                }],
            }
        );
        let bare: Node =
            serde_json::from_value(json!({"metadata": {"name": "n", "annotations": {"other": "x"}}})).unwrap();
        let snapshot = node_snapshot(&bare, None, false);
        assert_eq!(
            (snapshot.report, snapshot.voted_unhealthy, snapshot.protection_limit, snapshot.unschedulable),
            (NodeReport::default(), false, LimitAnnotation::Absent, false)
        );
        // SuperEdge's readers: the vote is the annotation's presence, whatever its value
        for value in ["yes", "", "no", "true"] {
            let voted: Node =
                serde_json::from_value(json!({"metadata": {"name": "n", "annotations": {"nodeunhealth": value}}}))
                    .unwrap();
            assert!(node_snapshot(&voted, None, false).voted_unhealthy, "nodeunhealth {value:?}");
        }
        assert!(snapshot.conditions.is_empty() && !snapshot.watched && !snapshot.excluded_from_disruption);
        let typo: Node = serde_json::from_value(
            json!({"metadata": {"name": "n", "annotations": {"superedge.io/max-unreachable-protection": "1 hour"}}}),
        )
        .unwrap();
        let snapshot = node_snapshot(&typo, None, false);
        assert_eq!(snapshot.protection_limit.invalid().map(|e| e.value.as_str()), Some("1 hour"));
    }
}
