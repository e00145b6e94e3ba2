//! The condition and spec NoSchedule taints against kube-controller-manager's own mapping
//! (`nodeConditionToTaintKeyStatusMap` and `doNoScheduleTaintingPass` in
//! `pkg/controller/nodelifecycle`), and the edge rule applying only to watched nodes.

use std::time::Duration;

use edgegrid_core::protection::{LimitAnnotation, Protection};
use node_lifecycle::lifecycle::*;
use proptest::prelude::*;
use tokio::time::Instant;

/// kube-controller-manager's table, restated as data: (condition, status) -> taint key.
const STOCK_MAP: [(&str, &str, &str); 6] = [
    ("Ready", "False", "node.kubernetes.io/not-ready"),
    ("Ready", "Unknown", "node.kubernetes.io/unreachable"),
    ("MemoryPressure", "True", "node.kubernetes.io/memory-pressure"),
    ("DiskPressure", "True", "node.kubernetes.io/disk-pressure"),
    ("NetworkUnavailable", "True", "node.kubernetes.io/network-unavailable"),
    ("PIDPressure", "True", "node.kubernetes.io/pid-pressure"),
];
const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

fn conditions(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(t, s)| (t.to_string(), s.to_string())).collect()
}

fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
    Taint { key: key.into(), value: value.map(str::to_string), effect: effect.into() }
}

fn snapshot(conditions: Vec<(String, String)>, unschedulable: bool, taints: Vec<Taint>) -> NodeSnapshot {
    NodeSnapshot { name: "n".into(), conditions, unschedulable, taints, ..Default::default() }
}

/// What an executor does with the actions: kube-controller-manager's
/// `AddOrUpdateTaintOnNode` (appends) then `RemoveTaintOffNode` (by key and effect).
fn apply(mut taints: Vec<Taint>, actions: &[Action]) -> Vec<Taint> {
    for action in actions {
        match action {
            Action::AddTaint { taint, .. } if !taint.on(&taints) => taints.push(taint.taint()),
            Action::RemoveTaint { taint, .. } => {
                taints.retain(|t| !(t.key == taint.key() && t.effect == taint.effect()))
            }
            _ => {}
        }
    }
    taints
}

/// The rows of the issue that found the gap, and the rest of the stock mapping: the taints
/// each node ends with, in the order they are added.
#[test]
fn every_condition_and_the_cordon_map_to_the_stock_taints() {
    let no_schedule = |key: &str| taint(key, None, "NoSchedule");
    /// (name, written conditions, cordoned, the taints it ends with)
    type Case = (&'static str, Vec<(String, String)>, bool, Vec<Taint>);
    let cases: Vec<Case> = vec![
        ("healthy", conditions(&[("Ready", "True"), ("MemoryPressure", "False")]), false, vec![]),
        (
            "MemoryPressure=True",
            conditions(&[("Ready", "True"), ("MemoryPressure", "True")]),
            false,
            vec![no_schedule("node.kubernetes.io/memory-pressure")],
        ),
        (
            "DiskPressure=True",
            conditions(&[("Ready", "True"), ("DiskPressure", "True")]),
            false,
            vec![no_schedule("node.kubernetes.io/disk-pressure")],
        ),
        (
            "PIDPressure=True",
            conditions(&[("Ready", "True"), ("PIDPressure", "True")]),
            false,
            vec![no_schedule("node.kubernetes.io/pid-pressure")],
        ),
        (
            "NetworkUnavailable=True",
            conditions(&[("NetworkUnavailable", "True"), ("Ready", "True")]),
            false,
            vec![no_schedule("node.kubernetes.io/network-unavailable")],
        ),
        ("cordoned", conditions(&[("Ready", "True")]), true, vec![no_schedule(UNSCHEDULABLE)]),
        ("Ready=False", conditions(&[("Ready", "False")]), false, vec![no_schedule("node.kubernetes.io/not-ready")]),
        (
            "Ready=Unknown",
            conditions(&[("Ready", "Unknown"), ("MemoryPressure", "Unknown")]),
            false,
            vec![no_schedule("node.kubernetes.io/unreachable")],
        ),
        (
            "everything at once, in the node's condition order, the cordon last",
            conditions(&[
                ("PIDPressure", "True"),
                ("Ready", "False"),
                ("DiskPressure", "True"),
                ("MemoryPressure", "True"),
                ("NetworkUnavailable", "True"),
            ]),
            true,
            vec![
                no_schedule("node.kubernetes.io/pid-pressure"),
                no_schedule("node.kubernetes.io/not-ready"),
                no_schedule("node.kubernetes.io/disk-pressure"),
                no_schedule("node.kubernetes.io/memory-pressure"),
                no_schedule("node.kubernetes.io/network-unavailable"),
                no_schedule(UNSCHEDULABLE),
            ],
        ),
        ("no conditions yet (a new node)", vec![], false, vec![]),
        (
            "an unknown status is no taint",
            conditions(&[("Ready", "Bogus"), ("DiskPressure", "Unknown")]),
            false,
            vec![],
        ),
    ];
    for (name, conditions, unschedulable, want) in cases {
        let node = snapshot(conditions, unschedulable, vec![]);
        let actions = condition_taint_actions(&node);
        assert!(actions.iter().all(|a| matches!(a, Action::AddTaint { .. })), "{name}: {actions:?}");
        assert_eq!(apply(vec![], &actions), want, "{name}");
    }
}

/// A cordon and uncordon round trip, with another controller's taint and an earlier
/// managed taint (with its value) kept as they are.
#[test]
fn cordon_round_trip_keeps_foreign_taints() {
    let dedicated = taint("dedicated", Some("edge"), "NoSchedule");
    let pressure = taint("node.kubernetes.io/memory-pressure", Some("set-by-someone"), "NoSchedule");
    let ready = conditions(&[("Ready", "True"), ("MemoryPressure", "True")]);
    let start = vec![dedicated.clone(), pressure.clone()];
    let cordon = condition_taint_actions(&snapshot(ready.clone(), true, start.clone()));
    assert_eq!(cordon, [Action::AddTaint { node: "n".into(), taint: TaintRef::UnschedulableNoSchedule }]);
    let cordoned = apply(start.clone(), &cordon);
    assert_eq!(cordoned, [dedicated.clone(), pressure.clone(), taint(UNSCHEDULABLE, None, "NoSchedule")]);
    assert_eq!(condition_taint_actions(&snapshot(ready.clone(), true, cordoned.clone())), []);
    let uncordon = condition_taint_actions(&snapshot(ready, false, cordoned.clone()));
    assert_eq!(uncordon, [Action::RemoveTaint { node: "n".into(), taint: TaintRef::UnschedulableNoSchedule }]);
    assert_eq!(apply(cordoned, &uncordon), start);
}

fn arb_conditions() -> impl Strategy<Value = Vec<(String, String)>> {
    let kind =
        prop::sample::select(vec!["Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"]);
    let status = prop::sample::select(vec!["True", "False", "Unknown"]);
    prop::collection::vec((kind, status), 0..6).prop_map(|pairs| {
        // a node has each condition type at most once
        let mut seen = std::collections::BTreeSet::new();
        pairs.into_iter().filter(|(k, _)| seen.insert(*k)).map(|(k, s)| (k.to_string(), s.to_string())).collect()
    })
}

fn arb_taint() -> impl Strategy<Value = Taint> {
    let key = prop::sample::select(vec![
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/disk-pressure",
        "dedicated",
        "example.com/gpu",
    ]);
    let effect = prop::sample::select(vec!["NoSchedule", "NoExecute", "PreferNoSchedule"]);
    (key, prop::option::of("[a-z]{1,3}"), effect).prop_map(|(k, v, e)| taint(k, v.as_deref(), e))
}

fn managed_no_schedule(t: &Taint) -> bool {
    t.effect == "NoSchedule" && (t.key == UNSCHEDULABLE || STOCK_MAP.iter().any(|(_, _, key)| *key == t.key))
}

proptest! {
    /// The managed NoSchedule taints a node ends with are a function of its conditions and
    /// spec alone (the stock map, whatever taints it had and whether the edge rule would
    /// protect it); every other taint is kept, in order, value and all; a second pass
    /// changes nothing.
    #[test]
    fn condition_taints_are_a_function_of_conditions_and_spec(
        conditions in arb_conditions(), unschedulable: bool, watched: bool, voted: bool,
        taints in prop::collection::vec(arb_taint(), 0..6),
    ) {
        let node = NodeSnapshot {
            watched,
            voted_unhealthy: voted,
            protection_limit: LimitAnnotation::Absent,
            ..snapshot(conditions.clone(), unschedulable, taints.clone())
        };
        let after = apply(taints.clone(), &condition_taint_actions(&node));
        let mut want: Vec<&str> = conditions
            .iter()
            .filter_map(|(kind, status)| STOCK_MAP.iter().find(|(k, s, _)| k == kind && s == status).map(|(_, _, key)| *key))
            .collect();
        if unschedulable {
            want.push(UNSCHEDULABLE);
        }
        let mut have: Vec<&str> = after.iter().filter(|t| managed_no_schedule(t)).map(|t| t.key.as_str()).collect();
        have.sort();
        have.dedup();
        want.sort();
        prop_assert_eq!(have, want);
        let foreign = |list: &[Taint]| list.iter().filter(|t| !managed_no_schedule(t)).cloned().collect::<Vec<_>>();
        prop_assert_eq!(foreign(&after), foreign(&taints));
        // a managed taint already there is kept as it was (its value, its place)
        for kept in taints.iter().filter(|t| managed_no_schedule(t) && after.contains(t)) {
            prop_assert!(after.iter().position(|t| t == kept) <= taints.iter().position(|t| t == kept));
        }
        let again = NodeSnapshot { taints: after, ..node };
        prop_assert_eq!(condition_taint_actions(&again), vec![]);
    }
}

/// A cloud worker (no unit: nobody watches it) that stops heartbeating is handled exactly as
/// stock Kubernetes handles it: Unknown, pods not ready, unreachable NoExecute at the rate.
/// A watched node in the same state, not voted unhealthy, is not.
#[test]
fn only_watched_nodes_are_protected() {
    let mut core = MonitorCore::new(LifecycleConfig::default());
    let t0 = Instant::now();
    let wall: edgegrid_core::protection::Timestamp = "2026-11-21T10:00:00Z".parse().unwrap();
    let node = |name: &str, watched: bool, heartbeat: &str, ready: &str| NodeSnapshot {
        name: name.into(),
        report: NodeReport {
            ready: Some(if ready == "True" { ReadyStatus::True } else { ReadyStatus::Unknown }),
            heartbeat: Some(heartbeat.into()),
            ready_transition: Some(wall),
            ..Default::default()
        },
        conditions: conditions(&[("Ready", ready)]),
        watched,
        ..Default::default()
    };
    let healthy = node("healthy", false, "h", "True");
    core.monitor(&[node("cloud", false, "h0", "True"), node("edge", true, "h0", "True"), healthy.clone()], t0, wall);
    let later = t0 + Duration::from_secs(51);
    let wall_later = wall + Duration::from_secs(51);
    let healthy_later = node("healthy", false, "h1", "True");
    let actions = core.monitor(
        &[node("cloud", false, "h0", "True"), node("edge", true, "h0", "True"), healthy_later.clone()],
        later,
        wall_later,
    );
    assert_eq!(
        actions,
        [
            Action::MarkUnknown { node: "cloud".into() },
            Action::MarkPodsNotReady { node: "cloud".into() },
            Action::MarkUnknown { node: "edge".into() },
        ]
    );
    let cloud = node("cloud", false, "h0", "Unknown");
    let edge = node("edge", true, "h0", "Unknown");
    assert_eq!(core.protection(&cloud, later, wall_later), Protection::NotWatched);
    assert_eq!(core.protection(&edge, later, wall_later), Protection::Protected { until: None });
    let next = later + Duration::from_secs(5);
    let mut actions = core.monitor(&[cloud, edge, node("healthy", false, "h2", "True")], next, wall_later);
    actions.extend(core.drain(next + Duration::from_secs(10)));
    assert_eq!(
        actions,
        [
            Action::AddTaint { node: "cloud".into(), taint: TaintRef::UnreachableNoSchedule },
            Action::AddTaint { node: "edge".into(), taint: TaintRef::UnreachableNoSchedule },
            Action::AddTaint { node: "cloud".into(), taint: TaintRef::UnreachableNoExecute },
        ]
    );
}
