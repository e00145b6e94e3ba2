//! The two enforcers of the edge rule agree: the admission mutations (on the Node JSON
//! the apiserver sends) and this controller (on its snapshot of the same Node, through
//! `node_snapshot` and `MonitorCore`) reach the same answer, and so the same fate for
//! the unreachable NoExecute taint, for any Node, time and cluster-wide default.

use std::time::Duration;

use edge_node_lifecycle::snapshot::node_snapshot;
use edgegrid_core::admission;
use edgegrid_core::protection::{self, Protection, ProtectionLimit, ProtectionPolicy, Timestamp};
use k8s_openapi::api::core::v1::Node;
use node_lifecycle::lifecycle::{
    Action, LifecycleConfig, MonitorCore, NodeReport, NodeSnapshot, ReadyStatus, TaintRef, ZoneKey,
};
use proptest::prelude::*;
use serde_json::{Value, json};
use tokio::time::Instant;

const BASE: &str = "2026-11-21T10:00:00Z";

fn base() -> Timestamp {
    BASE.parse().unwrap()
}

fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A Node as the apiserver would send it.
fn node_json(ready: Option<&str>, since: Option<Timestamp>, vote: Option<&str>, limit: Option<&str>) -> Value {
    let mut annotations = json!({});
    if let Some(vote) = vote {
        annotations["nodeunhealth"] = json!(vote);
    }
    if let Some(limit) = limit {
        annotations["superedge.io/max-unreachable-protection"] = json!(limit);
    }
    let mut conditions = vec![json!({"type": "MemoryPressure", "status": "Unknown"})];
    if let Some(ready) = ready {
        let mut condition = json!({"type": "Ready", "status": ready, "lastHeartbeatTime": BASE});
        if let Some(since) = since {
            condition["lastTransitionTime"] = json!(rfc3339(since));
        }
        conditions.push(condition);
    }
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "edge-1", "annotations": annotations},
        "spec": {"taints": [
            {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": BASE}]},
        "status": {"conditions": conditions},
    })
}

/// What the webhook does to the node: whether it protects it, and whether it strips the
/// taint (the patch applied to the object).
fn admission_side(node: &Value, watched: bool, now: Timestamp, default: ProtectionLimit) -> (bool, bool) {
    let policy = ProtectionPolicy::with_default_limit(default);
    let protected =
        admission::node_facts(node, watched).is_some_and(|f| protection::judge(&f, now, policy).protected());
    let stripped = admission::node_patch(node, watched, now, policy).is_some_and(|patch| {
        let mut patched = node.clone();
        json_patch_apply(&mut patched, &patch);
        patched["spec"]["taints"].as_array().unwrap().iter().all(|t| t["effect"] != "NoExecute")
    });
    (protected, stripped)
}

fn json_patch_apply(object: &mut Value, patch: &json_patch::Patch) {
    json_patch::patch(object, patch).expect("every emitted patch applies to its object");
}

/// What this controller does on a fresh monitor pass over the node: its answer and its
/// actions on the node.
fn lifecycle_side(
    node: &Value,
    watched: bool,
    at: Instant,
    now: Timestamp,
    default: ProtectionLimit,
) -> (Protection, Vec<Action>) {
    let typed: Node = serde_json::from_value(node.clone()).expect("the generated Node decodes");
    let snapshot = node_snapshot(&typed, None, watched);
    // a healthy node elsewhere: otherwise the only zone is fully disrupted and nothing
    // would be tainted whatever the rule says
    let healthy = NodeSnapshot {
        name: "cloud-0".into(),
        zone: ZoneKey { region: "cloud".into(), zone: "cloud".into() },
        report: NodeReport { ready: Some(ReadyStatus::True), heartbeat: Some("hb".into()), ..Default::default() },
        ..Default::default()
    };
    let mut core = MonitorCore::new(LifecycleConfig { max_unreachable_protection: default, ..Default::default() });
    let actions = core.monitor(&[snapshot.clone(), healthy], at, now);
    let actions = actions.into_iter().filter(|a| matches!(a, Action::MarkUnknown { node } | Action::MarkPodsNotReady { node } | Action::AddTaint { node, .. } | Action::RemoveTaint { node, .. } if node == "edge-1")).collect();
    (core.protection(&snapshot, at, now), actions)
}

fn limits() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        (0u64..7200).prop_map(|s| Some(format!("{s}s"))),
        prop::sample::select(vec!["0", "10m", "1h", "1h30m", "2h", "30 minutes", "-5m", "5", ""])
            .prop_map(|s| Some(s.to_string())),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn admission_and_node_lifecycle_agree(
        ready in prop::option::of(prop::sample::select(vec!["True", "False", "Unknown"])),
        since in prop::option::of(0i64..7200),
        vote in prop::option::of(prop::sample::select(vec!["yes", "no", "YES", ""])),
        limit in limits(),
        watched in prop::bool::weighted(0.8),
        default_secs in prop_oneof![Just(0u64), 1u64..7200],
        now_secs in 0i64..7200,
        now_nanos in prop_oneof![Just(0i64), 1i64..1_000_000_000],
    ) {
        let since = since.map(|s| base() + Duration::from_secs(s as u64));
        let now = base() + jiff::SignedDuration::new(now_secs, now_nanos as i32);
        let default = ProtectionLimit::from_duration(Duration::from_secs(default_secs));
        let node = node_json(ready, since, vote, limit.as_deref());
        let (admission_protects, admission_strips) = admission_side(&node, watched, now, default);
        let (answer, actions) = lifecycle_side(&node, watched, Instant::now(), now, default);
        match ready {
            Some(status) => {
                // a controller that has just seen the node judges it as its condition says
                let facts = admission::node_facts(&node, watched).unwrap();
                prop_assert_eq!(answer, protection::judge(&facts, now, ProtectionPolicy::with_default_limit(default)));
                prop_assert_eq!(answer.protected(), admission_protects);
                if status == "Unknown" {
                    // the same fate for the NoExecute taint: stripped by the webhook iff
                    // taken off (not kept) by the controller
                    let removes = actions.contains(&Action::RemoveTaint { node: "edge-1".into(), taint: TaintRef::UnreachableNoExecute });
                    prop_assert_eq!(admission_strips, removes);
                    prop_assert_eq!(admission_strips, admission_protects);
                    let pods_marked = actions.contains(&Action::MarkPodsNotReady { node: "edge-1".into() });
                    prop_assert_eq!(pods_marked, !admission_protects, "{:?}", actions);
                } else {
                    prop_assert!(!admission_strips && !answer.protected());
                }
            }
            None => {
                // No Ready condition: the webhook has nothing to judge by (it leaves the
                // object alone), while this controller judges the node Unknown and writes
                // the condition (Unknown, lastTransitionTime now). Once written, which is
                // what the webhook would see next, they agree.
                prop_assert!(!admission_protects && !admission_strips);
                let marks_unknown = actions.contains(&Action::MarkUnknown { node: "edge-1".into() });
                prop_assert!(marks_unknown, "{:?}", actions);
                let written = node_json(Some("Unknown"), Some(now), vote, limit.as_deref());
                prop_assert_eq!(admission_side(&written, watched, now, default), (answer.protected(), answer.protected()));
            }
        }
    }

    /// The annotation and `--max-unreachable-protection` read durations exactly as every
    /// other duration flag of this binary does (controller-support's Go-notation parser).
    #[test]
    fn limits_parse_like_the_other_duration_flags(text in "[-+]?[0-9.]{0,4}(h|m|s|ms|us|µs|ns|x|)[0-9.]{0,3}(h|m|s|)") {
        let flag = controller_support::parse_duration(&text);
        let limit = ProtectionLimit::parse(&text);
        match flag {
            Ok(duration) => prop_assert_eq!(limit, Ok(ProtectionLimit::from_duration(duration))),
            Err(_) => prop_assert!(limit.is_err(), "{:?} accepted as {:?}", text, limit),
        }
    }
}
