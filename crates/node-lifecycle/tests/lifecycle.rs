//! The node lifecycle logic over a simulated cluster: exact order and timing of
//! NoExecute taints per zone, zone disruption rules, and the edge rule.

use std::collections::BTreeMap;
use std::time::Duration;

use node_lifecycle::lifecycle::*;
use tokio::time::Instant;

struct SimNode {
    zone: ZoneKey,
    /// Dead (no heartbeats) in [from, until).
    dead: Option<(u64, u64)>,
    voted_unhealthy: bool,
    reported: Option<ReadyStatus>,
    taints: Vec<Taint>,
    last_heartbeat: String,
}

struct Sim {
    nodes: BTreeMap<String, SimNode>,
    core: MonitorCore,
    start: Instant,
    /// (second, node, taint) of every taint added
    added: Vec<(u64, String, TaintRef)>,
    removed: Vec<(u64, String, TaintRef)>,
    marked_unknown: Vec<(u64, String)>,
    pods_not_ready: Vec<(u64, String)>,
}

fn zone(name: &str) -> ZoneKey {
    ZoneKey { region: "edge".into(), zone: name.into() }
}

impl Sim {
    fn new() -> Self {
        Self {
            nodes: BTreeMap::new(),
            core: MonitorCore::new(LifecycleConfig::default()),
            start: Instant::now(),
            added: vec![],
            removed: vec![],
            marked_unknown: vec![],
            pods_not_ready: vec![],
        }
    }

    fn add(
        &mut self,
        zone_name: &str,
        count: usize,
        dead: impl Fn(usize) -> Option<(u64, u64)>,
        voted: impl Fn(usize) -> bool,
    ) {
        for i in 0..count {
            self.nodes.insert(
                format!("{zone_name}-{i:02}"),
                SimNode {
                    zone: zone(zone_name),
                    dead: dead(i),
                    voted_unhealthy: voted(i),
                    reported: Some(ReadyStatus::True),
                    taints: vec![],
                    last_heartbeat: String::new(),
                },
            );
        }
    }

    /// Runs second by second: kubelets heartbeat every 10 s while alive, the controller
    /// monitors every 5 s and drains its queues every second.
    fn run(&mut self, until: u64) {
        for t in 0..=until {
            for node in self.nodes.values_mut() {
                let alive = node.dead.is_none_or(|(from, to)| t < from || t >= to);
                if alive {
                    node.last_heartbeat = format!("hb-{}", t / 10);
                    node.reported = Some(ReadyStatus::True);
                }
            }
            let now = self.start + Duration::from_secs(t);
            let mut actions = Vec::new();
            if t % 5 == 0 {
                actions.extend(self.core.monitor(&self.snapshots(), now));
            }
            actions.extend(self.core.drain(now));
            for action in actions {
                self.apply(t, action);
            }
        }
    }

    fn snapshots(&self) -> Vec<NodeSnapshot> {
        self.nodes
            .iter()
            .map(|(name, n)| NodeSnapshot {
                name: name.clone(),
                zone: n.zone.clone(),
                report: NodeReport { ready: n.reported, heartbeat: Some(n.last_heartbeat.clone()), lease_renew: None },
                voted_unhealthy: n.voted_unhealthy,
                taints: n.taints.clone(),
            })
            .collect()
    }

    fn apply(&mut self, t: u64, action: Action) {
        match action {
            Action::MarkUnknown { node } => {
                self.nodes.get_mut(&node).unwrap().reported = Some(ReadyStatus::Unknown);
                self.marked_unknown.push((t, node));
            }
            Action::MarkPodsNotReady { node } => self.pods_not_ready.push((t, node)),
            Action::AddTaint { node, taint } => {
                self.nodes.get_mut(&node).unwrap().taints.push(taint.taint());
                self.added.push((t, node, taint));
            }
            Action::RemoveTaint { node, taint } => {
                let want = taint.taint();
                self.nodes.get_mut(&node).unwrap().taints.retain(|x| !(x.key == want.key && x.effect == want.effect));
                self.removed.push((t, node, taint));
            }
        }
    }

    fn no_execute_added(&self) -> Vec<(u64, &str)> {
        self.added
            .iter()
            .filter(|(_, _, t)| matches!(t, TaintRef::NotReadyNoExecute | TaintRef::UnreachableNoExecute))
            .map(|(t, n, _)| (*t, n.as_str()))
            .collect()
    }
}

#[test]
fn hundred_nodes_three_zones_scripted_failures() {
    let mut sim = Sim::new();
    // zone a: 5 of 40 die at t=100 and are voted unhealthy by their peers
    sim.add("a", 40, |i| (i < 5).then_some((100, u64::MAX)), |_| true);
    // zone b: the whole site loses its cloud link at t=200; peers still see each other
    sim.add("b", 30, |_| Some((200, u64::MAX)), |_| false);
    // zone c: 20 of 30 die at t=300 (voted); 15 come back at t=400
    sim.add("c", 30, |i| (i < 20).then_some((300, if i < 15 { 400 } else { u64::MAX })), |_| true);
    sim.run(600);

    // Last heartbeats were seen at t=90 / 190 / 290; Unknown once 50 s passed without one.
    let first_unknown = |zone: &str| sim.marked_unknown.iter().find(|(_, n)| n.starts_with(zone)).map(|(t, _)| *t);
    assert_eq!((first_unknown("a"), first_unknown("b"), first_unknown("c")), (Some(145), Some(245), Some(345)));
    assert_eq!(sim.marked_unknown.len(), 5 + 30 + 20);
    // pods lose readiness only where peers voted the node unhealthy: never in zone b
    assert_eq!(sim.pods_not_ready.len(), 5 + 20);
    assert!(sim.pods_not_ready.iter().all(|(_, n)| !n.starts_with("b-")));

    assert_eq!(
        sim.no_execute_added(),
        vec![
            // zone a stays Normal (5/40 not ready): 0.1 nodes/s, a full bucket first
            (145, "a-00"),
            (155, "a-01"),
            (165, "a-02"),
            (175, "a-03"),
            (185, "a-04"),
            // zone b: fully disrupted, but never tainted: peers see every node alive
            // zone c: 20/30 not ready is a partial disruption of a small zone: rate 0 ...
            // ... until 15 return at t=400: Normal again, the bucket starts empty
            (410, "c-15"),
            (420, "c-16"),
            (430, "c-17"),
            (440, "c-18"),
            (450, "c-19"),
        ]
    );
    assert!(
        sim.added.iter().all(|(_, _, t)| *t != TaintRef::NotReadyNoExecute),
        "Unknown nodes get the unreachable variant"
    );
    let b_no_schedule = sim
        .added
        .iter()
        .filter(|(t, n, x)| *t == 245 && n.starts_with("b-") && *x == TaintRef::UnreachableNoSchedule)
        .count();
    assert_eq!(b_no_schedule, 30, "protected nodes still get the NoSchedule taint");
    let c_back: Vec<&str> = sim
        .removed
        .iter()
        .filter(|(t, _, x)| *t == 400 && *x == TaintRef::UnreachableNoSchedule)
        .map(|(_, n, _)| n.as_str())
        .collect();
    assert_eq!(c_back.len(), 15, "recovered nodes lose their NoSchedule taint at once");
    let states: BTreeMap<String, ZoneState> = sim.core.zone_states().map(|(z, s)| (z.zone.clone(), s)).collect();
    assert_eq!(
        states,
        BTreeMap::from([
            ("a".to_string(), ZoneState::Normal),
            ("b".to_string(), ZoneState::FullDisruption),
            ("c".to_string(), ZoneState::Normal),
        ])
    );
}

#[test]
fn large_zone_partial_disruption_drains_at_the_secondary_rate() {
    let mut sim = Sim::new();
    sim.add("big", 60, |i| (i < 40).then_some((100, u64::MAX)), |_| true);
    sim.add("other", 5, |_| None, |_| false);
    sim.run(400);
    let times: Vec<u64> = sim.no_execute_added().iter().map(|(t, _)| *t).collect();
    // 40/60 not ready in a zone larger than 50 nodes: 0.01 nodes/s, one per 100 s
    assert_eq!(times, [145, 245, 345]);
    assert_eq!(sim.core.queue_rate(&zone("big")), Some(0.01));
}

#[test]
fn every_zone_down_means_the_controller_is_cut_off_and_stops() {
    let mut sim = Sim::new();
    sim.add("a", 10, |_| Some((100, u64::MAX)), |_| true);
    sim.add("b", 10, |_| Some((100, u64::MAX)), |_| true);
    sim.run(400);
    assert_eq!(sim.no_execute_added(), Vec::<(u64, &str)>::new());
    assert_eq!(sim.core.queue_rate(&zone("a")), Some(0.0));
}

fn node(name: &str, ready: ReadyStatus, voted: bool, taints: &[TaintRef]) -> NodeSnapshot {
    NodeSnapshot {
        name: name.into(),
        zone: zone("z"),
        report: NodeReport { ready: Some(ready), heartbeat: Some("hb".into()), lease_renew: None },
        voted_unhealthy: voted,
        taints: taints.iter().map(|t| t.taint()).collect(),
    }
}

#[test]
fn per_node_taint_rules() {
    use TaintRef::*;
    let now = Instant::now();
    let cases: Vec<(&str, NodeSnapshot, Vec<Action>)> = vec![
        (
            "kubelet says NotReady: stock handling, NoExecute queued and drained",
            node("n", ReadyStatus::False, false, &[]),
            vec![
                Action::AddTaint { node: "n".into(), taint: NotReadyNoSchedule },
                Action::AddTaint { node: "n".into(), taint: NotReadyNoExecute },
            ],
        ),
        (
            "Unknown and voted unhealthy: conditions Unknown, pods not ready, unreachable taints",
            NodeSnapshot {
                report: NodeReport { ready: None, heartbeat: None, lease_renew: None },
                ..node("n", ReadyStatus::Unknown, true, &[])
            },
            vec![
                Action::MarkUnknown { node: "n".into() },
                Action::MarkPodsNotReady { node: "n".into() },
                Action::AddTaint { node: "n".into(), taint: UnreachableNoSchedule },
                Action::AddTaint { node: "n".into(), taint: UnreachableNoExecute },
            ],
        ),
        (
            "unreachable NoExecute swapped to not-ready at once",
            node("n", ReadyStatus::False, false, &[UnreachableNoSchedule, UnreachableNoExecute]),
            vec![
                Action::AddTaint { node: "n".into(), taint: NotReadyNoSchedule },
                Action::RemoveTaint { node: "n".into(), taint: UnreachableNoSchedule },
                Action::RemoveTaint { node: "n".into(), taint: UnreachableNoExecute },
                Action::AddTaint { node: "n".into(), taint: NotReadyNoExecute },
            ],
        ),
        (
            "Unknown and voted unhealthy while not-ready NoExecute: swapped to unreachable",
            node("n", ReadyStatus::Unknown, true, &[UnreachableNoSchedule, NotReadyNoExecute]),
            vec![
                Action::MarkPodsNotReady { node: "n".into() },
                Action::RemoveTaint { node: "n".into(), taint: NotReadyNoExecute },
                Action::AddTaint { node: "n".into(), taint: UnreachableNoExecute },
            ],
        ),
        (
            "Unknown but alive to its peers: a stock controller's NoExecute taint is taken off",
            node("n", ReadyStatus::Unknown, false, &[UnreachableNoSchedule, UnreachableNoExecute]),
            vec![Action::RemoveTaint { node: "n".into(), taint: UnreachableNoExecute }],
        ),
        (
            "ready again: every managed taint goes",
            node("n", ReadyStatus::True, false, &[UnreachableNoSchedule, UnreachableNoExecute]),
            vec![
                Action::RemoveTaint { node: "n".into(), taint: UnreachableNoSchedule },
                Action::RemoveTaint { node: "n".into(), taint: UnreachableNoExecute },
            ],
        ),
    ];
    // a healthy node in another zone: otherwise every zone would be fully disrupted and
    // the controller would (rightly) stop tainting altogether
    let healthy = NodeSnapshot { zone: zone("elsewhere"), ..node("healthy", ReadyStatus::True, false, &[]) };
    for (name, snapshot, want) in cases {
        let mut core = MonitorCore::new(LifecycleConfig::default());
        let mut got = core.monitor(&[snapshot, healthy.clone()], now);
        got.extend(core.drain(now));
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn queued_nodes_that_recover_or_get_protected_are_not_tainted() {
    let mut core = MonitorCore::new(LifecycleConfig::default());
    let t0 = Instant::now();
    let s = |d: u64| t0 + Duration::from_secs(d);
    // two NotReady nodes: the first is tainted at once, the second waits for a token
    let healthy = NodeSnapshot { zone: zone("elsewhere"), ..node("healthy", ReadyStatus::True, false, &[]) };
    let nodes =
        vec![node("a", ReadyStatus::False, false, &[]), node("b", ReadyStatus::False, false, &[]), healthy.clone()];
    core.monitor(&nodes, s(0));
    let drained = core.drain(s(0));
    assert_eq!(drained, vec![Action::AddTaint { node: "a".into(), taint: TaintRef::NotReadyNoExecute }]);
    // b recovers before its turn
    let recovered = vec![
        node("a", ReadyStatus::False, false, &[TaintRef::NotReadyNoSchedule, TaintRef::NotReadyNoExecute]),
        NodeSnapshot {
            report: NodeReport { ready: Some(ReadyStatus::True), heartbeat: Some("hb2".into()), lease_renew: None },
            ..node("b", ReadyStatus::True, false, &[TaintRef::NotReadyNoSchedule])
        },
        healthy,
    ];
    core.monitor(&recovered, s(5));
    assert_eq!(core.drain(s(30)), vec![], "b left the queue when it became Ready");
}
