//! The node lifecycle logic over a simulated cluster: exact order and timing of
//! NoExecute taints per zone, zone disruption rules, and the edge rule with its
//! protection limits.

use std::collections::BTreeMap;
use std::time::Duration;

use edgegrid_core::protection::{LimitAnnotation, Protection, ProtectionLimit, Timestamp};
use node_lifecycle::lifecycle::*;
use tokio::time::Instant;

struct SimNode {
    zone: ZoneKey,
    /// Dead (no heartbeats) in [from, until).
    dead: Option<(u64, u64)>,
    voted_unhealthy: bool,
    /// Edge-health watches it (a member of a unit with a peer running edge-health).
    watched: bool,
    /// The node's `superedge.io/max-unreachable-protection` annotation.
    limit: Option<&'static str>,
    reported: Option<ReadyStatus>,
    /// The Ready condition's `lastTransitionTime`.
    ready_transition: Option<Timestamp>,
    taints: Vec<Taint>,
    last_heartbeat: String,
}

/// A cluster and the controller driving it, second by second. The run can be paused
/// (`run` continues where the last one stopped), the controller restarted, and the
/// controller cut off from the API server.
struct Sim {
    nodes: BTreeMap<String, SimNode>,
    core: MonitorCore,
    start: Instant,
    /// The wall clock at second 0.
    wall_start: Timestamp,
    /// The next second to simulate.
    next_t: u64,
    /// The second of the next monitor pass (a started controller monitors at once).
    next_monitor: u64,
    /// [from, until): the controller's caches stop updating: it keeps seeing the cluster
    /// as it was just before `from`.
    view_frozen: Option<(u64, u64)>,
    frozen: Option<Vec<NodeSnapshot>>,
    /// [from, until): the controller's writes fail.
    writes_fail: Option<(u64, u64)>,
    /// (second, action) of every action carried out
    log: Vec<(u64, Action)>,
    /// (second, action) of every action that failed
    failed: Vec<(u64, Action)>,
}

fn zone(name: &str) -> ZoneKey {
    ZoneKey { region: "edge".into(), zone: name.into() }
}

fn during(window: Option<(u64, u64)>, t: u64) -> bool {
    window.is_some_and(|(from, until)| t >= from && t < until)
}

impl Sim {
    fn new() -> Self {
        Self::with_config(LifecycleConfig::default())
    }

    fn with_config(config: LifecycleConfig) -> Self {
        Self {
            nodes: BTreeMap::new(),
            core: MonitorCore::new(config),
            start: Instant::now(),
            wall_start: "2026-11-21T10:00:00Z".parse().unwrap(),
            next_t: 0,
            next_monitor: 0,
            view_frozen: None,
            frozen: None,
            writes_fail: None,
            log: vec![],
            failed: vec![],
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
                    watched: true,
                    limit: None,
                    reported: Some(ReadyStatus::True),
                    ready_transition: Some(self.wall_start),
                    taints: vec![],
                    last_heartbeat: String::new(),
                },
            );
        }
    }

    /// The nodes' peers vote them unhealthy (`nodeunhealth: "yes"`).
    fn vote(&mut self, names: &[&str]) {
        for name in names {
            self.nodes.get_mut(*name).unwrap().voted_unhealthy = true;
        }
    }

    /// The wall clock at second `t`.
    fn wall(&self, t: u64) -> Timestamp {
        self.wall_start + Duration::from_secs(t)
    }

    /// The controller process is replaced by a new one (same flags), which monitors at once.
    fn restart(&mut self) {
        self.core = MonitorCore::new(self.core.config().clone());
        self.next_monitor = self.next_t;
    }

    /// Runs up to second `until` included: kubelets heartbeat every 10 s while alive, the
    /// controller monitors every 5 s and drains its queues every second.
    fn run(&mut self, until: u64) {
        for t in self.next_t..=until {
            let frozen = during(self.view_frozen, t);
            if !frozen {
                self.frozen = None;
            } else if self.frozen.is_none() {
                self.frozen = Some(self.snapshots());
            }
            let wall = self.wall(t);
            for node in self.nodes.values_mut() {
                let alive = node.dead.is_none_or(|(from, to)| t < from || t >= to);
                if alive {
                    node.last_heartbeat = format!("hb-{}", t / 10);
                    if node.reported != Some(ReadyStatus::True) {
                        node.ready_transition = Some(wall);
                    }
                    node.reported = Some(ReadyStatus::True);
                }
            }
            let now = self.start + Duration::from_secs(t);
            let mut actions = Vec::new();
            if t >= self.next_monitor {
                self.next_monitor = t + 5;
                let snapshots = match &self.frozen {
                    Some(frozen) => frozen.clone(),
                    None => self.snapshots(),
                };
                actions.extend(self.core.monitor(&snapshots, now, wall));
            }
            actions.extend(self.core.drain(now));
            for action in actions {
                if during(self.writes_fail, t) {
                    self.core.action_failed(&action);
                    self.failed.push((t, action));
                } else {
                    self.apply(&action, wall);
                    self.log.push((t, action));
                }
            }
        }
        self.next_t = until + 1;
    }

    fn snapshots(&self) -> Vec<NodeSnapshot> {
        self.nodes
            .iter()
            .map(|(name, n)| NodeSnapshot {
                name: name.clone(),
                zone: n.zone.clone(),
                report: NodeReport {
                    ready: n.reported,
                    heartbeat: Some(n.last_heartbeat.clone()),
                    lease_renew: None,
                    ready_transition: n.ready_transition,
                },
                conditions: ready_condition(n.reported),
                watched: n.watched,
                voted_unhealthy: n.voted_unhealthy,
                protection_limit: LimitAnnotation::read(n.limit),
                taints: n.taints.clone(),
                ..Default::default()
            })
            .collect()
    }

    fn apply(&mut self, action: &Action, wall: Timestamp) {
        match action {
            Action::MarkUnknown { node } => {
                let node = self.nodes.get_mut(node).unwrap();
                node.reported = Some(ReadyStatus::Unknown);
                node.ready_transition = Some(wall);
            }
            Action::MarkPodsNotReady { .. } => {}
            Action::AddTaint { node, taint } => self.nodes.get_mut(node).unwrap().taints.push(taint.taint()),
            Action::RemoveTaint { node, taint } => {
                let want = taint.taint();
                self.nodes.get_mut(node).unwrap().taints.retain(|x| !(x.key == want.key && x.effect == want.effect));
            }
        }
    }

    fn log_before(&self, until: u64) -> Vec<(u64, Action)> {
        self.log.iter().filter(|(t, _)| *t < until).cloned().collect()
    }

    /// The actions carried out from second `from` on.
    fn log_from(&self, from: u64) -> Vec<(u64, Action)> {
        self.log.iter().filter(|(t, _)| *t >= from).cloned().collect()
    }

    fn added(&self) -> Vec<(u64, &str, TaintRef)> {
        self.log
            .iter()
            .filter_map(|(t, a)| match a {
                Action::AddTaint { node, taint } => Some((*t, node.as_str(), *taint)),
                _ => None,
            })
            .collect()
    }

    fn removed(&self) -> Vec<(u64, &str, TaintRef)> {
        self.log
            .iter()
            .filter_map(|(t, a)| match a {
                Action::RemoveTaint { node, taint } => Some((*t, node.as_str(), *taint)),
                _ => None,
            })
            .collect()
    }

    fn marked_unknown(&self) -> Vec<(u64, &str)> {
        self.log
            .iter()
            .filter_map(|(t, a)| match a {
                Action::MarkUnknown { node } => Some((*t, node.as_str())),
                _ => None,
            })
            .collect()
    }

    fn pods_not_ready(&self) -> Vec<(u64, &str)> {
        self.log
            .iter()
            .filter_map(|(t, a)| match a {
                Action::MarkPodsNotReady { node } => Some((*t, node.as_str())),
                _ => None,
            })
            .collect()
    }

    fn no_execute_added(&self) -> Vec<(u64, &str)> {
        self.added().into_iter().filter(|(_, _, t)| is_no_execute(*t)).map(|(t, n, _)| (t, n)).collect()
    }

    fn no_execute_removed(&self) -> Vec<(u64, &str)> {
        self.removed().into_iter().filter(|(_, _, t)| is_no_execute(*t)).map(|(t, n, _)| (t, n)).collect()
    }
}

fn is_no_execute(taint: TaintRef) -> bool {
    matches!(taint, TaintRef::NotReadyNoExecute | TaintRef::UnreachableNoExecute)
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
    let marked_unknown = sim.marked_unknown();
    let first_unknown = |zone: &str| marked_unknown.iter().find(|(_, n)| n.starts_with(zone)).map(|(t, _)| *t);
    assert_eq!((first_unknown("a"), first_unknown("b"), first_unknown("c")), (Some(145), Some(245), Some(345)));
    assert_eq!(marked_unknown.len(), 5 + 30 + 20);
    // pods lose readiness only where peers voted the node unhealthy: never in zone b
    assert_eq!(sim.pods_not_ready().len(), 5 + 20);
    assert!(sim.pods_not_ready().iter().all(|(_, n)| !n.starts_with("b-")));

    assert_eq!(
        sim.no_execute_added(),
        vec![
            // zone a stays Normal (5/40 not ready): 0.1 nodes/s; its queue started empty at
            // t=0 and has had a token since t=10
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
        sim.added().iter().all(|(_, _, t)| *t != TaintRef::NotReadyNoExecute),
        "Unknown nodes get the unreachable variant"
    );
    let b_no_schedule = sim
        .added()
        .iter()
        .filter(|(t, n, x)| *t == 250 && n.starts_with("b-") && *x == TaintRef::UnreachableNoSchedule)
        .count();
    // from the written Unknown (t=245), as stock derives it: the next pass adds it
    assert_eq!(b_no_schedule, 30, "protected nodes still get the NoSchedule taint");
    let c_back: Vec<&str> = sim
        .removed()
        .iter()
        .filter(|(t, _, x)| *t == 400 && *x == TaintRef::UnreachableNoSchedule)
        .map(|(_, n, _)| *n)
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

fn wall() -> Timestamp {
    "2026-11-21T10:00:00Z".parse().unwrap()
}

fn node(name: &str, ready: ReadyStatus, voted: bool, taints: &[TaintRef]) -> NodeSnapshot {
    NodeSnapshot {
        name: name.into(),
        zone: zone("z"),
        report: NodeReport {
            ready: Some(ready),
            heartbeat: Some("hb".into()),
            lease_renew: None,
            ready_transition: None,
        },
        conditions: ready_condition(Some(ready)),
        watched: true,
        voted_unhealthy: voted,
        protection_limit: LimitAnnotation::Absent,
        taints: taints.iter().map(|t| t.taint()).collect(),
        ..Default::default()
    }
}

/// The Ready condition as written, for a node that reported `ready`.
fn ready_condition(ready: Option<ReadyStatus>) -> Vec<(String, String)> {
    let status = match ready {
        None => return vec![],
        Some(ReadyStatus::True) => "True",
        Some(ReadyStatus::False) => "False",
        Some(ReadyStatus::Unknown) => "Unknown",
    };
    vec![("Ready".into(), status.into())]
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
                report: NodeReport::default(),
                conditions: vec![],
                ..node("n", ReadyStatus::Unknown, true, &[])
            },
            vec![
                Action::MarkUnknown { node: "n".into() },
                Action::MarkPodsNotReady { node: "n".into() },
                // no NoSchedule taint before the Unknown is written: stock derives it from
                // the written condition (the next pass, or the node's update, adds it)
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
            "Unknown, alive to its peers, but Unknown for 2 h with a 1 h limit: stock handling",
            NodeSnapshot {
                report: NodeReport {
                    ready_transition: Some(wall() - Duration::from_secs(7200)),
                    ..node("n", ReadyStatus::Unknown, false, &[]).report
                },
                protection_limit: LimitAnnotation::read(Some("1h")),
                ..node("n", ReadyStatus::Unknown, false, &[UnreachableNoSchedule])
            },
            vec![
                Action::MarkPodsNotReady { node: "n".into() },
                Action::AddTaint { node: "n".into(), taint: UnreachableNoExecute },
            ],
        ),
        (
            "Unknown for 2 h with a 3 h limit: still protected, a stock controller's taint is taken off",
            NodeSnapshot {
                report: NodeReport {
                    ready_transition: Some(wall() - Duration::from_secs(7200)),
                    ..node("n", ReadyStatus::Unknown, false, &[]).report
                },
                protection_limit: LimitAnnotation::read(Some("3h")),
                ..node("n", ReadyStatus::Unknown, false, &[UnreachableNoSchedule, UnreachableNoExecute])
            },
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
        let mut got = core.monitor(&[snapshot, healthy.clone()], now, wall());
        assert_eq!(core.drain(now), vec![], "{name}: a new core's queues start empty");
        // the first token comes one interval (10 s at 0.1 nodes/s) after the start
        got.extend(core.drain(now + Duration::from_secs(10)));
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn queued_nodes_that_recover_or_get_protected_are_not_tainted() {
    let mut core = MonitorCore::new(LifecycleConfig::default());
    let t0 = Instant::now();
    let s = |d: u64| t0 + Duration::from_secs(d);
    // two NotReady nodes: the first is tainted at the first token, the second waits 10 s more
    let healthy = NodeSnapshot { zone: zone("elsewhere"), ..node("healthy", ReadyStatus::True, false, &[]) };
    let nodes =
        vec![node("a", ReadyStatus::False, false, &[]), node("b", ReadyStatus::False, false, &[]), healthy.clone()];
    core.monitor(&nodes, s(0), wall());
    let drained = core.drain(s(10));
    assert_eq!(drained, vec![Action::AddTaint { node: "a".into(), taint: TaintRef::NotReadyNoExecute }]);
    // b recovers before its turn
    let recovered = vec![
        node("a", ReadyStatus::False, false, &[TaintRef::NotReadyNoSchedule, TaintRef::NotReadyNoExecute]),
        NodeSnapshot {
            report: NodeReport { ready: Some(ReadyStatus::True), heartbeat: Some("hb2".into()), ..Default::default() },
            ..node("b", ReadyStatus::True, false, &[TaintRef::NotReadyNoSchedule])
        },
        healthy,
    ];
    core.monitor(&recovered, s(15), wall());
    assert_eq!(core.drain(s(40)), vec![], "b left the queue when it became Ready");
}

fn pods_not_ready(t: u64, node: &str) -> (u64, Action) {
    (t, Action::MarkPodsNotReady { node: node.into() })
}

fn marked_unknown(t: u64, node: &str) -> (u64, Action) {
    (t, Action::MarkUnknown { node: node.into() })
}

fn added(t: u64, node: &str, taint: TaintRef) -> (u64, Action) {
    (t, Action::AddTaint { node: node.into(), taint })
}

/// A site of 10 nodes loses its cloud link at t=100 while a cloud zone of 5 stays up;
/// the site's peers vote four of its nodes unhealthy at t=190 (they really died) and a
/// fifth at t=230. With `restart_at`, the controller is replaced by a new one then.
fn site_disconnect(restart_at: Option<u64>) -> Sim {
    let mut sim = Sim::new();
    sim.add("cloud", 5, |_| None, |_| false);
    sim.add("site", 10, |_| Some((100, u64::MAX)), |_| false);
    let votes: [(u64, &[&str]); 2] = [(190, &["site-00", "site-01", "site-02", "site-03"]), (230, &["site-04"])];
    let mut stops: Vec<u64> = votes.iter().map(|(t, _)| *t).chain(restart_at).collect();
    stops.sort();
    for stop in stops {
        sim.run(stop - 1);
        if restart_at == Some(stop) {
            sim.restart();
        }
        for (_, names) in votes.iter().filter(|(t, _)| *t == stop) {
            sim.vote(names);
        }
    }
    sim.run(300);
    sim
}

#[test]
fn restart_mid_disconnect_resumes_from_the_observed_state() {
    use TaintRef::UnreachableNoExecute as NoExecute;
    let uninterrupted = site_disconnect(None);
    // last heartbeats seen at t=90: the site is Unknown (and protected) from t=145
    let site: Vec<String> = (0..10).map(|i| format!("site-{i:02}")).collect();
    assert_eq!(uninterrupted.marked_unknown(), site.iter().map(|n| (145, n.as_str())).collect::<Vec<_>>());
    // the site is fully disrupted but the cloud zone is not: 0.1 nodes/s; the NoSchedule
    // taint follows the written Unknown at the next pass
    let no_schedule = site.iter().map(|n| added(150, n, TaintRef::UnreachableNoSchedule));
    assert_eq!(
        uninterrupted.log_from(146),
        no_schedule
            .chain([
                pods_not_ready(190, "site-00"),
                pods_not_ready(190, "site-01"),
                pods_not_ready(190, "site-02"),
                pods_not_ready(190, "site-03"),
                added(190, "site-00", NoExecute),
                added(200, "site-01", NoExecute),
                added(210, "site-02", NoExecute),
                added(220, "site-03", NoExecute),
                pods_not_ready(230, "site-04"),
                added(230, "site-04", NoExecute),
            ])
            .collect::<Vec<_>>()
    );

    // Restarted while the site is Unknown and protected: the new controller takes the
    // written Unknown as it is (no grace period of its own, no NoSchedule taint removed
    // and re-added) and everything after is exactly what the old one would have done.
    let restarted = site_disconnect(Some(170));
    assert_eq!(restarted.log, uninterrupted.log);

    // Restarted between two NoExecute taints (the old controller added site-01's at
    // t=200, site-02 was next at t=210). The new controller keeps the taints it finds,
    // re-checks that the pods of the nodes voted unhealthy are not ready (idempotent:
    // their pods already are), and goes on tainting at 0.1 nodes/s from an empty bucket:
    // its first taint comes one interval after its start, never sooner.
    let restarted = site_disconnect(Some(205));
    assert_eq!(restarted.log_before(205), uninterrupted.log_before(205));
    assert_eq!(
        restarted.log_from(205),
        vec![
            pods_not_ready(205, "site-00"),
            pods_not_ready(205, "site-01"),
            pods_not_ready(205, "site-02"),
            pods_not_ready(205, "site-03"),
            added(215, "site-02", NoExecute),
            added(225, "site-03", NoExecute),
            // voted after the restart: queued at once (it has been Unknown since t=145,
            // a restart does not start its grace period over) and tainted at the next token
            pods_not_ready(230, "site-04"),
            added(235, "site-04", NoExecute),
        ]
    );
    // The invariant across the restart: the same nodes in the same order, never two
    // NoExecute taints less than an interval apart, none earlier than without the
    // restart and none more than one interval later.
    let before: Vec<(u64, &str)> = uninterrupted.no_execute_added();
    let after: Vec<(u64, &str)> = restarted.no_execute_added();
    assert_eq!(after.iter().map(|(_, n)| *n).collect::<Vec<_>>(), before.iter().map(|(_, n)| *n).collect::<Vec<_>>());
    for pair in after.windows(2) {
        assert!(pair[1].0 - pair[0].0 >= 10, "tainted faster than 0.1 nodes/s across the restart: {after:?}");
    }
    for ((late, _), (on_time, _)) in after.iter().zip(&before) {
        assert!((*on_time..=on_time + 10).contains(late), "{after:?} against {before:?}");
    }
    assert_eq!(restarted.removed().iter().filter(|(t, _, _)| *t >= 205).count(), 0);
}

/// Two zones of 10. a-00 dies at t=50 and a-01 at t=120, both voted unhealthy by their
/// peers; at t=120 every other node loses its link too, until t=300: every zone is fully
/// disrupted, so the controller assumes it is the one cut off and stops tainting.
fn every_site_cut_off(restart_at: Option<u64>) -> Sim {
    let mut sim = Sim::new();
    let dead = |zone: &str| {
        let zone = zone.to_string();
        move |i: usize| match (zone.as_str(), i) {
            ("a", 0) => Some((50, u64::MAX)),
            ("a", 1) => Some((120, u64::MAX)),
            _ => Some((120, 300)),
        }
    };
    sim.add("a", 10, dead("a"), |i| i < 2);
    sim.add("b", 10, dead("b"), |_| false);
    if let Some(at) = restart_at {
        sim.run(at - 1);
        sim.restart();
    }
    sim.run(400);
    sim
}

#[test]
fn full_disruption_untaints_everything_and_leaving_it_starts_over() {
    use TaintRef::{UnreachableNoExecute as NoExecute, UnreachableNoSchedule as NoSchedule};
    let sim = every_site_cut_off(None);
    // a-00 (last heartbeat seen at t=40) is tainted at t=95, while zone a is Normal;
    // everyone else goes Unknown at t=165 (last heartbeats seen at t=110), when every zone
    // is fully disrupted: as kube-controller-manager, the controller takes itself to be the
    // one cut off, removes every NoExecute taint (a-00's) and stops tainting. At t=300 the
    // others are back: the rate returns (its bucket empty) and the two dead nodes, queued
    // again at t=170 in name order, are tainted one interval apart.
    assert_eq!(sim.no_execute_added(), [(95, "a-00"), (310, "a-00"), (320, "a-01")]);
    assert_eq!(sim.no_execute_removed(), [(165, "a-00")]);
    assert_eq!(sim.pods_not_ready(), [(95, "a-00"), (165, "a-01")]);
    let back: Vec<String> = sim.nodes.keys().filter(|n| !["a-00", "a-01"].contains(&n.as_str())).cloned().collect();
    let mut expected: Vec<(u64, Action)> =
        back.iter().map(|n| (300, Action::RemoveTaint { node: n.clone(), taint: NoSchedule })).collect();
    expected.extend([added(310, "a-00", NoExecute), added(320, "a-01", NoExecute)]);
    assert_eq!(sim.log_from(171), expected);
    assert_eq!(sim.marked_unknown().len(), 20);
    assert_eq!(sim.core.queue_rate(&zone("a")), Some(0.1));

    // Restarted in the middle of it: the new controller's zones start Initial, its first
    // pass finds every zone fully disrupted (nothing left to untaint), does not taint, and
    // after t=300 does exactly what the old one would have.
    let restarted = every_site_cut_off(Some(200));
    let mut expected = vec![pods_not_ready(200, "a-00"), pods_not_ready(200, "a-01")];
    expected.extend(sim.log_from(200));
    assert_eq!(restarted.log_from(200), expected);
    assert_eq!(restarted.log_before(200), sim.log_before(200));
}

/// kube-controller-manager's zone states: a zone first seen is Initial until the end of
/// its first pass; a controller (re)started while every zone is down enters full
/// disruption on that pass and takes the NoExecute taints it finds off.
#[test]
fn a_new_controller_starts_initial_and_enters_full_disruption_on_its_first_pass() {
    let mut core = MonitorCore::new(LifecycleConfig::default());
    assert_eq!(core.zone_states().count(), 0);
    let now = Instant::now();
    let down = |name: &str| NodeSnapshot {
        report: NodeReport { ready: Some(ReadyStatus::Unknown), ..Default::default() },
        ..node(name, ReadyStatus::Unknown, true, &[TaintRef::UnreachableNoSchedule, TaintRef::UnreachableNoExecute])
    };
    let actions = core.monitor(&[down("n1"), down("n2")], now, wall());
    assert_eq!(
        actions,
        [
            Action::MarkPodsNotReady { node: "n1".into() },
            Action::MarkPodsNotReady { node: "n2".into() },
            Action::RemoveTaint { node: "n1".into(), taint: TaintRef::UnreachableNoExecute },
            Action::RemoveTaint { node: "n2".into(), taint: TaintRef::UnreachableNoExecute },
        ]
    );
    assert!(core.zones_fully_disrupted());
    assert_eq!(core.queue_rate(&zone("z")), Some(0.0));
    // a zone with a ready node, first seen: Initial during the pass, Normal after it
    let mut core = MonitorCore::new(LifecycleConfig::default());
    core.monitor(&[node("n1", ReadyStatus::True, false, &[])], now, wall());
    assert_eq!(core.zone_states().map(|(_, s)| s).collect::<Vec<_>>(), [ZoneState::Normal]);
    assert_eq!(core.queue_rate(&zone("z")), Some(0.1));
}

#[test]
fn controller_cut_off_from_the_api_server_judges_the_dead_by_what_it_saw() {
    use TaintRef::{UnreachableNoExecute as NoExecute, UnreachableNoSchedule as NoSchedule};
    // a-00 dies at t=50 and a-01 at t=100, both voted unhealthy; every other node is
    // fine. From t=120 to t=300 the controller is cut off from the API server: its caches
    // stop updating (so to it every heartbeat stops) and its writes fail; the first
    // writes after it (carrying stale resourceVersions) fail too, until t=305. (The
    // edge-node-lifecycle binary does not judge a view it knows is stale, a failed or
    // relisting watch: `edge-node-lifecycle/tests/stale_caches.rs`. This is the core
    // fed a view stale without anyone knowing, e.g. a watch that hangs.)
    let mut sim = Sim::new();
    sim.add("a", 10, |i| [Some((50, u64::MAX)), Some((100, u64::MAX))].get(i).copied().flatten(), |i| i < 2);
    sim.add("b", 10, |_| None, |_| false);
    sim.view_frozen = Some((120, 300));
    sim.writes_fail = Some((120, 305));
    sim.run(400);

    assert_eq!(sim.no_execute_added().first(), Some(&(95, "a-00")));
    // While cut off it judged a-01 Unknown at t=145 (last heartbeat seen at t=90), then
    // everyone at t=165 (seen at t=110): all zones down, no tainting; its writes failed.
    assert!(sim.failed.contains(&marked_unknown(145, "a-01")));
    assert!(sim.failed.contains(&marked_unknown(165, "b-00")));
    // entering full disruption it tried to take a-00's taint off: that write failed too
    assert!(sim.failed.contains(&(165, Action::RemoveTaint { node: "a-00".into(), taint: NoExecute })));
    assert!(sim.failed.iter().all(|(t, _)| *t < 305));
    // At t=300 it sees again: everyone but the dead has heartbeated meanwhile, so it
    // leaves full disruption and, as kube-controller-manager, gives every node a fresh
    // grace period. a-01's Ready condition still says True (the controller could not
    // write Unknown): it is Unknown 50 s later, at t=355, and tainted at once (the bucket
    // has refilled); the NoSchedule taint follows the written Unknown. a-00 kept its taint.
    assert_eq!(
        sim.log_from(120),
        vec![
            marked_unknown(355, "a-01"),
            pods_not_ready(355, "a-01"),
            added(355, "a-01", NoExecute),
            added(360, "a-01", NoSchedule),
        ]
    );
}

/// A site of 10 loses its cloud link at t=100 (last heartbeats seen at t=90, marked
/// Unknown at t=145) while a cloud zone of 5 stays up; no node is ever voted unhealthy.
/// The cluster-wide limit is 60 s; site-00 is annotated `0` (unlimited), site-01 `2m`,
/// site-02 with a typo (so the default applies to it).
fn bounded_site_disconnect(restart_at: Option<u64>) -> Sim {
    let mut sim = Sim::with_config(LifecycleConfig {
        max_unreachable_protection: ProtectionLimit::After(Duration::from_secs(60)),
        ..Default::default()
    });
    sim.add("cloud", 5, |_| None, |_| false);
    sim.add("site", 10, |_| Some((100, u64::MAX)), |_| false);
    sim.nodes.get_mut("site-00").unwrap().limit = Some("0");
    sim.nodes.get_mut("site-01").unwrap().limit = Some("30s");
    sim.nodes.get_mut("site-02").unwrap().limit = Some("2 minutes");
    sim.nodes.get_mut("site-03").unwrap().limit = Some("2m");
    if let Some(at) = restart_at {
        sim.run(at - 1);
        sim.restart();
    }
    sim.run(400);
    sim
}

#[test]
fn protection_ends_at_the_limit_counted_from_the_unknown_transition() {
    use TaintRef::UnreachableNoExecute as NoExecute;
    let sim = bounded_site_disconnect(None);
    let site: Vec<String> = (0..10).map(|i| format!("site-{i:02}")).collect();
    assert_eq!(sim.marked_unknown(), site.iter().map(|n| (145, n.as_str())).collect::<Vec<_>>());
    // Unknown since t=145 (the written lastTransitionTime, not the last heartbeat at t=90
    // nor the Ready transition at t=0): protected through t=205 (exactly 60 s is still
    // within the limit), so the first pass past it is t=210. An annotation only shortens:
    // the node annotated 30s goes at t=180, the ones annotated 0 (unlimited) and 2m get
    // the operator's 60 s like the rest. The site is fully disrupted but the cloud zone is
    // not: NoExecute at 0.1 nodes/s, in the order the nodes queued.
    let mut want: Vec<(u64, Action)> = site.iter().map(|n| added(150, n, TaintRef::UnreachableNoSchedule)).collect();
    want.extend([pods_not_ready(180, "site-01"), added(180, "site-01", NoExecute)]);
    want.extend(site.iter().filter(|n| *n != "site-01").map(|n| pods_not_ready(210, n)));
    want.extend([
        added(210, "site-00", NoExecute),
        added(220, "site-02", NoExecute),
        added(230, "site-03", NoExecute),
        added(240, "site-04", NoExecute),
        added(250, "site-05", NoExecute),
        added(260, "site-06", NoExecute),
        added(270, "site-07", NoExecute),
        added(280, "site-08", NoExecute),
        added(290, "site-09", NoExecute),
    ]);
    assert_eq!(sim.log_from(146), want);
    let protection_at = |sim: &Sim, name: &str, t: u64| {
        let snapshot = sim.snapshots().into_iter().find(|n| n.name == name).unwrap();
        sim.core.protection(&snapshot, sim.start + Duration::from_secs(t), sim.wall(t))
    };
    assert_eq!(
        protection_at(&sim, "site-00", 400),
        Protection::LimitPassed { since: sim.wall(145), limit: Duration::from_secs(60) },
        "an annotation cannot lift the operator's bound"
    );
    assert_eq!(
        protection_at(&sim, "site-01", 400),
        Protection::LimitPassed { since: sim.wall(145), limit: Duration::from_secs(30) }
    );
    assert_eq!(
        protection_at(&sim, "site-03", 400),
        Protection::LimitPassed { since: sim.wall(145), limit: Duration::from_secs(60) }
    );
    assert_eq!(
        protection_at(&sim, "site-02", 400),
        Protection::LimitPassed { since: sim.wall(145), limit: Duration::from_secs(60) },
        "an invalid annotation falls back to the default"
    );
    let snapshot = sim.snapshots().into_iter().find(|n| n.name == "site-02").unwrap();
    assert_eq!(snapshot.protection_limit.invalid().map(|e| e.value.as_str()), Some("2 minutes"));

    // A controller restarted while the site is protected counts on from the written
    // transition, not from its own start: exactly the same actions.
    let restarted = bounded_site_disconnect(Some(170));
    assert_eq!(restarted.log, sim.log);
}

/// While this controller has judged a node Unknown but the Ready condition does not say
/// so yet, the Unknown period starts now: the condition's old transition (to True, long
/// ago) must not count, or a bounded node would lose its protection the moment it
/// went Unknown.
#[test]
fn protection_counts_from_now_until_the_unknown_is_written() {
    let config = LifecycleConfig {
        max_unreachable_protection: ProtectionLimit::After(Duration::from_secs(60)),
        ..Default::default()
    };
    let mut core = MonitorCore::new(config);
    let t0 = Instant::now();
    let long_ago = wall() - Duration::from_secs(86_400);
    let ready = NodeSnapshot {
        report: NodeReport { ready_transition: Some(long_ago), ..node("n", ReadyStatus::True, false, &[]).report },
        ..node("n", ReadyStatus::True, false, &[])
    };
    core.monitor(std::slice::from_ref(&ready), t0, wall());
    assert_eq!(core.protection(&ready, t0, wall()), Protection::NotUnknown);
    // no heartbeat for longer than the grace period: judged Unknown, not written yet
    let later = t0 + Duration::from_secs(51);
    let wall_later = wall() + Duration::from_secs(51);
    assert_eq!(
        core.protection(&ready, later, wall_later),
        Protection::Protected { until: Some(wall_later + Duration::from_secs(60)) }
    );
    let actions = core.monitor(std::slice::from_ref(&ready), later, wall_later);
    assert!(!actions.iter().any(|a| matches!(a, Action::MarkPodsNotReady { .. })), "{actions:?}");
    // written Unknown, but without a lastTransitionTime: nothing shows the bound holds
    let untimed = NodeSnapshot {
        report: NodeReport { ready: Some(ReadyStatus::Unknown), ready_transition: None, ..ready.report.clone() },
        conditions: vec![("Ready".into(), "Unknown".into())],
        ..ready.clone()
    };
    assert_eq!(
        core.protection(&untimed, later, wall_later),
        Protection::UnknownSince { limit: Duration::from_secs(60) }
    );
    let actions = core.monitor(std::slice::from_ref(&untimed), later, wall_later);
    assert_eq!(
        actions,
        vec![
            Action::MarkPodsNotReady { node: "n".into() },
            Action::AddTaint { node: "n".into(), taint: TaintRef::UnreachableNoSchedule }
        ]
    );
    // an unlimited annotation cannot lift the bound: still not protected
    let unlimited = NodeSnapshot { protection_limit: LimitAnnotation::read(Some("0")), ..untimed.clone() };
    assert_eq!(
        core.protection(&unlimited, later, wall_later),
        Protection::UnknownSince { limit: Duration::from_secs(60) }
    );
    // nor is a node nobody watches, whatever the limit
    let unwatched = NodeSnapshot { watched: false, ..ready.clone() };
    assert_eq!(core.protection(&unwatched, later, wall_later), Protection::NotWatched);
}

/// Nodes labelled `node.kubernetes.io/exclude-disruption` do not count in their zone's
/// state (kube-controller-manager's `isNodeExcludedFromDisruptionChecks`): a zone whose only
/// not-ready nodes are excluded stays Normal, so its dead node is tainted at the normal
/// rate; counted, 3 of 4 not ready would make it a small partially disrupted zone (rate 0).
#[test]
fn excluded_nodes_do_not_count_in_the_zone_state() {
    let now = Instant::now();
    let dead = |name: &str, excluded: bool| NodeSnapshot {
        excluded_from_disruption: excluded,
        ..node(name, ReadyStatus::False, false, &[TaintRef::NotReadyNoSchedule])
    };
    let zone_of = |excluded: bool| {
        let mut core = MonitorCore::new(LifecycleConfig::default());
        let nodes =
            [dead("d1", false), dead("d2", excluded), dead("d3", excluded), node("ok", ReadyStatus::True, false, &[])];
        core.monitor(&nodes, now, wall());
        let state = core.zone_states().map(|(_, s)| s).collect::<Vec<_>>();
        (state, core.queue_rate(&zone("z")))
    };
    assert_eq!(zone_of(true), (vec![ZoneState::Normal], Some(0.1)));
    assert_eq!(zone_of(false), (vec![ZoneState::PartialDisruption], Some(0.0)));
}
