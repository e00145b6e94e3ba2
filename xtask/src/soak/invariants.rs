//! The soak's checker: fed one [`Sample`] at a time (the ground truth the soak knows, and
//! what it read from the cluster at that moment), it says which of the mission's promises
//! was broken. Pure and deterministic, so each invariant is tested by feeding it a
//! history that breaks it.
//!
//! When a promise applies is part of the promise (`../shared/design/trust-model.md`, the
//! edge rule in docs/edge-node-lifecycle.md):
//! - an alive node is *owed protection* once, for [`Bounds::earn`], it and at least two
//!   unit peers were alive, watching (their edge-health daemon running: a node's own
//!   daemon is what proves it alive, by signing its peers' nonces) and heard by the cloud
//!   (links up), with those members a majority of the unit, no member joining or leaving
//!   and the admission webhook running. It stays owed while it lives, its daemon runs, it
//!   keeps two watching peers and that majority, nobody joins or leaves its unit and the
//!   webhook runs, whatever any link does. A node owed protection never carries a NoExecute
//!   taint, and none of its pods is evicted or turns not ready;
//! - a dead node is *judgeable* while at least two of its unit's live, watching peers are
//!   heard by the cloud, those peers a majority of the others (on one side of a partition
//!   inside the unit, if one splits it): judgeable for the grace period plus the bound it must carry a
//!   NoExecute taint with none of its pods ready, and for the pods' toleration more, it
//!   must have no pod left. That is stock handling, so kube's zone rules hold it back: the
//!   clock runs only while its zone may be tainted at a non-zero rate (not a partially
//!   disrupted zone of a small cluster, not every zone fully disrupted), starts again when
//!   the rate does, and grants one token's time per node queued ahead of it;
//! - a wrapper that runs on a live node whose link is up serves its unit's view of the
//!   cloud's ready endpoints, minus the dead nodes of its unit; a difference may last at
//!   most [`Bounds::view`], and once it serves, a list is never empty while the view
//!   should not be;
//! - a client applying every watch event of a wrapper holds what a fresh list says,
//!   within [`Bounds::mirror`], and never sees an event that contradicts what it holds;
//! - every grid's objects converge within [`Bounds::converge`], and the grid controller
//!   writes nothing it does not own;
//! - no process exits unasked or panics, each exits 0 promptly on SIGTERM, and none grows
//!   past [`Bounds::rss_kib`].

use std::collections::{BTreeMap, BTreeSet};

use node_lifecycle::lifecycle::{LifecycleConfig, ZoneKey, ZoneState, eviction_rate, zone_state};

/// The invariants, by the name a violation is reported under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Invariant {
    AliveNodeKept,
    DeadNodeHandled,
    WrapperServesUnitView,
    WatchMatchesList,
    GridsConverge,
    ProcessesHealthy,
}

impl Invariant {
    pub const ALL: [Invariant; 6] = [
        Self::AliveNodeKept,
        Self::DeadNodeHandled,
        Self::WrapperServesUnitView,
        Self::WatchMatchesList,
        Self::GridsConverge,
        Self::ProcessesHealthy,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::AliveNodeKept => "1 alive-node-kept",
            Self::DeadNodeHandled => "2 dead-node-handled",
            Self::WrapperServesUnitView => "3 wrapper-serves-unit-view",
            Self::WatchMatchesList => "4 watch-matches-list",
            Self::GridsConverge => "5 grids-converge",
            Self::ProcessesHealthy => "6 processes-healthy",
        }
    }
}

/// Seconds since the soak started.
pub type Secs = f64;

/// `namespace/service` -> its ready endpoints as `pod@node`, sorted; Services without a
/// ready endpoint may be absent.
pub type Endpoints = BTreeMap<String, Vec<String>>;

/// What the soak knows of a node: the truth, not what the cluster says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeTruth {
    pub name: String,
    /// Its unit label's value now.
    pub unit: String,
    pub alive: bool,
    pub link_up: bool,
    /// Its edge-health daemon runs (on a live node).
    pub watching: bool,
    /// Its grid wrapper's process runs (on a live node).
    pub wrapper_running: bool,
    /// The unit peers its site network does not reach (a partition inside the unit).
    pub cut_from: BTreeSet<String>,
}

/// What the cloud says of a node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeObserved {
    /// `key:Effect`, the `node.kubernetes.io/` prefix dropped.
    pub taints: Vec<String>,
    /// Its workload pods (not the node agents'): name -> ready.
    pub pods: BTreeMap<String, bool>,
    /// Its Ready condition is not `True` (missing counts as not ready, as in kube's zone
    /// count).
    pub not_ready: bool,
    /// Its `topology.kubernetes.io/region` and `zone` labels (the local cluster sets none:
    /// one zone).
    pub zone: ZoneKey,
}

/// What one node's grid wrapper served.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WrapperObserved {
    /// A fresh list (kube-proxy's), `None` when it did not answer.
    pub listed: Option<Endpoints>,
    /// How many EndpointSlices that list held.
    pub listed_slices: usize,
    /// What the client applying every watch event holds, `None` before its first list.
    pub mirror: Option<Endpoints>,
    /// Events the watching client got that contradict what it held (an ADDED for an
    /// object it has, a DELETED or MODIFIED for one it lacks), since the last sample.
    pub mirror_anomalies: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessObserved {
    pub name: String,
    /// How it exited, when it did without being asked to.
    pub exited_unasked: Option<String>,
    /// A line of its log saying it panicked.
    pub panicked: Option<String>,
    /// How a SIGTERM it was sent went, when it did not exit 0 promptly.
    pub stop_problem: Option<String>,
    pub rss_kib: u64,
}

/// Everything read at one moment.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub at: Secs,
    pub truth: Vec<NodeTruth>,
    /// The admission webhook (and its verdict writer) runs.
    pub webhook_running: bool,
    pub nodes: BTreeMap<String, NodeObserved>,
    /// The cloud's ready endpoints of every Service, and which Services are kept to a
    /// unit (`topologyKeys` naming the unit label).
    pub cloud: Endpoints,
    pub unit_services: BTreeSet<String>,
    pub wrappers: BTreeMap<String, WrapperObserved>,
    /// Pods the node lifecycle controller deleted since the last sample, as `(pod, node)`.
    pub evictions: Vec<(String, String)>,
    /// Why the grids' objects are not what the grids ask for, now.
    pub grid_problems: Vec<String>,
    /// Writes by the grid controller to objects it does not own, since the last sample.
    pub foreign_writes: Vec<String>,
    pub processes: Vec<ProcessObserved>,
}

/// How long each promise may take.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// How long a node must be watched and heard before protection is owed.
    pub earn: Secs,
    /// The lifecycle controller's grace period plus how late its stock handling may be.
    pub dead_handled: Secs,
    /// How long after that its pods must be gone (their NoExecute toleration).
    pub eviction: Secs,
    pub view: Secs,
    pub mirror: Secs,
    pub converge: Secs,
    pub rss_kib: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Violation {
    pub invariant: Invariant,
    pub at: Secs,
    /// The node, grid or process.
    pub subject: String,
    /// Which of the invariant's promises (a violation is reported again only after this
    /// one held for a sample).
    pub what: String,
    pub detail: String,
}

/// What the checker remembers between samples.
#[derive(Debug, Default)]
struct NodeMemory {
    /// Since when the conditions to earn protection hold without a break.
    earning_since: Option<Secs>,
    owed: bool,
    judgeable_since: Option<Secs>,
    /// Its handling in this judgeable spell was timed.
    handled_timed: bool,
    /// Invariant 2's clock: since when it runs (judgeable in a zone that may be tainted
    /// at a non-zero rate), and the extra time the nodes queued ahead of it take.
    handling_clock: Option<(Secs, Secs)>,
    /// Since when the cloud has seen it not ready.
    not_ready_since: Option<Secs>,
    /// Since when the wrapper's view should be served (live, link up, running).
    serving_since: Option<Secs>,
    view_wrong_since: Option<Secs>,
    mirror_wrong_since: Option<Secs>,
    /// Pods seen ready while protection was owed.
    ready_pods: BTreeSet<String>,
}

pub struct Checker {
    bounds: Bounds,
    /// The lifecycle controller's zone flags: the local cluster leaves them at Kubernetes'
    /// defaults (threshold 0.55, 50 nodes, 0.1 nodes/s).
    zone_rules: LifecycleConfig,
    nodes: BTreeMap<String, NodeMemory>,
    /// Since when each zone may be tainted at a non-zero rate, without a break.
    zones_open_since: BTreeMap<ZoneKey, Secs>,
    /// Each unit's members at the last sample.
    members: BTreeMap<String, BTreeSet<String>>,
    /// Since when the cloud has had a Service with an endpoint.
    cloud_nonempty_since: Option<Secs>,
    grid_problems: BTreeMap<String, Secs>,
    /// Violations already reported and still going on: (invariant, subject, what).
    open: BTreeSet<(Invariant, String, String)>,
    /// Checks made and failed, per invariant.
    pub checks: BTreeMap<Invariant, (u64, u64)>,
    /// Seconds from a dead node turning judgeable to its stock handling (taint and pods
    /// unready), one per death.
    pub handled_after: Vec<Secs>,
}

impl Checker {
    pub fn new(bounds: Bounds) -> Self {
        Self {
            bounds,
            zone_rules: LifecycleConfig::default(),
            nodes: BTreeMap::new(),
            zones_open_since: BTreeMap::new(),
            members: BTreeMap::new(),
            cloud_nonempty_since: None,
            grid_problems: BTreeMap::new(),
            open: BTreeSet::new(),
            checks: Invariant::ALL.iter().map(|i| (*i, (0, 0))).collect(),
            handled_after: Vec::new(),
        }
    }

    /// Whether the last sample found the system converged: every view and mirror right,
    /// every grid's objects as asked, every judgeable dead node handled.
    pub fn converged(&self) -> bool {
        self.grid_problems.is_empty()
            && self.nodes.values().all(|m| m.view_wrong_since.is_none() && m.mirror_wrong_since.is_none())
            && !self.open.iter().any(|(invariant, ..)| *invariant == Invariant::DeadNodeHandled)
    }

    /// Checks one sample; returns the new violations (one per broken promise, not one per
    /// sample while it stays broken).
    pub fn check(&mut self, sample: &Sample) -> Vec<Violation> {
        self.open_zones(sample);
        let owed_before: BTreeSet<String> =
            self.nodes.iter().filter(|(_, m)| m.owed).map(|(name, _)| name.clone()).collect();
        let not_ready_since: BTreeMap<String, Secs> =
            self.nodes.iter().filter_map(|(name, m)| Some((name.clone(), m.not_ready_since?))).collect();
        let mut found = Found { at: sample.at, now: BTreeSet::new(), new: Vec::new(), checks: &mut self.checks };
        let members: BTreeMap<String, BTreeSet<String>> = sample.truth.iter().fold(BTreeMap::new(), |mut m, n| {
            m.entry(n.unit.clone()).or_default().insert(n.name.clone());
            m
        });
        let truth: BTreeMap<&str, &NodeTruth> = sample.truth.iter().map(|n| (n.name.as_str(), n)).collect();
        let split: BTreeSet<&str> =
            sample.truth.iter().filter(|n| !n.cut_from.is_empty()).map(|n| n.unit.as_str()).collect();
        let cloud = normalised(&sample.cloud);
        if cloud.is_empty() {
            self.cloud_nonempty_since = None;
        } else {
            self.cloud_nonempty_since.get_or_insert(sample.at);
        }
        for node in &sample.truth {
            let memory = self.nodes.entry(node.name.clone()).or_default();
            let unit_changed = self.members.get(&node.unit) != members.get(&node.unit);
            let peers: Vec<&NodeTruth> = members[&node.unit]
                .iter()
                .filter(|p| **p != node.name)
                .filter_map(|p| truth.get(p.as_str()).copied())
                .collect();
            let size = peers.len() + 1;
            // a peer across a partition neither watches it nor is heard for it
            let reached = |p: &&&NodeTruth| p.alive && p.watching && !node.cut_from.contains(&p.name);
            let watching = peers.iter().filter(reached).count();
            let heard = peers.iter().filter(reached).filter(|p| p.link_up).count();
            let observed = sample.nodes.get(&node.name).cloned().unwrap_or_default();

            // 1: protection owed to a live node
            // its own daemon proves it alive (it signs its peers' nonces): without it, nothing
            let keep =
                node.alive && node.watching && watching >= 2 && 2 * (watching + 1) > size && sample.webhook_running;
            let earn = keep && node.link_up && heard >= 2;
            if !keep || unit_changed {
                memory.owed = false;
                memory.earning_since = None;
            } else if earn {
                let since = *memory.earning_since.get_or_insert(sample.at);
                memory.owed |= sample.at - since >= self.bounds.earn;
            } else {
                memory.earning_since = None;
            }
            if memory.owed {
                let noexecute: Vec<&String> = observed.taints.iter().filter(|t| t.ends_with(":NoExecute")).collect();
                found.check(Invariant::AliveNodeKept, &node.name, "tainted", noexecute.is_empty(), || {
                    format!("alive and owed protection, but tainted {noexecute:?}")
                });
                for (pod, ready) in &observed.pods {
                    if *ready {
                        memory.ready_pods.insert(pod.clone());
                    }
                }
                let unready: Vec<&String> =
                    memory.ready_pods.iter().filter(|p| observed.pods.get(*p) == Some(&false)).collect();
                found.check(Invariant::AliveNodeKept, &node.name, "unready", unready.is_empty(), || {
                    format!("alive and owed protection, but its pods {unready:?} were marked not ready")
                });
                let evicted: Vec<&String> =
                    sample.evictions.iter().filter(|(_, n)| *n == node.name).map(|(p, _)| p).collect();
                found.check(Invariant::AliveNodeKept, &node.name, "evicted", evicted.is_empty(), || {
                    format!("alive and owed protection, but its pods {evicted:?} were evicted")
                });
                memory.ready_pods.retain(|p| observed.pods.contains_key(p));
            } else {
                memory.ready_pods.clear();
            }

            // 2: stock handling of a dead node its unit can judge, once its zone may be
            // tainted: a clock that stops while the zone's rate is 0 and starts again when
            // it is not (the bucket starts empty), widened by one token per node queued ahead
            // judged by a side of its unit: live, watching peers that reach each other (all
            // of them unless a partition splits the unit), two heard, a majority of the others
            let judging: Vec<&NodeTruth> = peers.iter().copied().filter(|p| p.alive && p.watching).collect();
            let judged_by = |p: &&NodeTruth| {
                let side: Vec<&&NodeTruth> = judging.iter().filter(|q| !p.cut_from.contains(&q.name)).collect();
                side.iter().filter(|q| q.link_up).count() >= 2 && 2 * side.len() > size - 1
            };
            let judgeable = !node.alive && judging.iter().any(judged_by);
            if !judgeable || unit_changed {
                memory.judgeable_since = None;
                memory.handled_timed = false;
                memory.handling_clock = None;
            } else {
                memory.judgeable_since.get_or_insert(sample.at);
            }
            if let Some(judgeable_since) = memory.judgeable_since {
                let zone_open_since = self.zones_open_since.get(&observed.zone).copied();
                memory.handling_clock = zone_open_since.map(|open| {
                    let start = judgeable_since.max(open);
                    match memory.handling_clock {
                        Some(clock) if clock.0 == start => clock,
                        _ => {
                            let ahead = queued_ahead(sample, &node.name, &owed_before, &not_ready_since);
                            (start, ahead as Secs / self.zone_rules.eviction_rate)
                        }
                    }
                });
                let tainted = observed.taints.iter().any(|t| t.ends_with(":NoExecute"));
                let ready: Vec<&String> = observed.pods.iter().filter(|(_, r)| **r).map(|(p, _)| p).collect();
                let handled = tainted && ready.is_empty();
                if handled && !memory.handled_timed {
                    memory.handled_timed = true;
                    self.handled_after.push(sample.at - judgeable_since);
                }
                let (waited, due) = match memory.handling_clock {
                    Some((start, queue)) => (sample.at - start, self.bounds.dead_handled + queue),
                    None => (0.0, Secs::INFINITY),
                };
                let late = waited >= due;
                if !handled && !late {
                    found.pending(Invariant::DeadNodeHandled, &node.name);
                }
                found.check(Invariant::DeadNodeHandled, &node.name, "handled", handled || !late, || {
                    format!(
                        "dead and judgeable for {:.0} s, its zone open for {waited:.0} s, but {}",
                        sample.at - judgeable_since,
                        if tainted { format!("its pods {ready:?} are ready") } else { "not tainted NoExecute".into() }
                    )
                });
                if waited >= due + self.bounds.eviction {
                    found.check(Invariant::DeadNodeHandled, &node.name, "evicted", observed.pods.is_empty(), || {
                        format!(
                            "dead and judgeable for {:.0} s, but its pods {:?} are not evicted",
                            sample.at - judgeable_since,
                            observed.pods
                        )
                    });
                }
            }

            // 3 and 4: the node's grid wrapper; a contradicting event counts whenever it
            // came (a cut link does not excuse it)
            let wrapper = sample.wrappers.get(&node.name).cloned().unwrap_or_default();
            for anomaly in &wrapper.mirror_anomalies {
                found.check(Invariant::WatchMatchesList, &node.name, anomaly, false, || {
                    format!("a watch event contradicts what its client held: {anomaly}")
                });
            }
            let serving = node.alive && node.link_up && node.wrapper_running;
            if !serving {
                memory.serving_since = None;
                memory.view_wrong_since = None;
                memory.mirror_wrong_since = None;
                continue;
            }
            let serving_for = sample.at - *memory.serving_since.get_or_insert(sample.at);
            // while its unit is split, what the unit votes of its members is its own
            // business: their endpoints may be served or not (after the heal, the view is
            // due within the bound as after any change)
            let undecided: BTreeSet<&str> = if split.contains(node.unit.as_str()) {
                members[&node.unit].iter().map(String::as_str).collect()
            } else {
                BTreeSet::new()
            };
            let expected = without_nodes(&unit_view(&cloud, &sample.unit_services, &node.unit, &truth), &undecided);
            let listed_whole = wrapper.listed.as_ref().map(normalised);
            let listed = listed_whole.as_ref().map(|listed| without_nodes(listed, &undecided));
            if listed.as_ref() == Some(&expected) {
                memory.view_wrong_since = None;
            } else {
                memory.view_wrong_since.get_or_insert(sample.at);
            }
            if let Some(since) = memory.view_wrong_since
                && serving_for >= self.bounds.view
            {
                let wrong_for = sample.at - since;
                found.check(Invariant::WrapperServesUnitView, &node.name, "view", wrong_for < self.bounds.view, || {
                    match &listed {
                        None => format!("its grid wrapper has not answered for {wrong_for:.0} s"),
                        Some(listed) => format!(
                            "its grid wrapper has served a view other than its unit's for {wrong_for:.0} s: {}",
                            difference(listed, &expected)
                        ),
                    }
                });
            }
            let cloud_settled = self.cloud_nonempty_since.is_some_and(|s| sample.at - s >= self.bounds.view);
            if wrapper.listed.is_some() && cloud_settled && serving_for >= self.bounds.view && !expected.is_empty() {
                found.check(Invariant::WrapperServesUnitView, &node.name, "empty", wrapper.listed_slices > 0, || {
                    "its grid wrapper answered an empty list".into()
                });
            }
            match (&wrapper.mirror, &listed_whole) {
                (Some(mirror), Some(listed)) => {
                    let mirror = normalised(mirror);
                    if mirror == *listed {
                        memory.mirror_wrong_since = None;
                    }
                    let wrong_for = memory.mirror_wrong_since.map_or(0.0, |since| sample.at - since);
                    if mirror != *listed {
                        memory.mirror_wrong_since.get_or_insert(sample.at);
                    }
                    found.check(
                        Invariant::WatchMatchesList,
                        &node.name,
                        "mirror",
                        wrong_for < self.bounds.mirror,
                        || {
                            format!(
                                "its watching client has held other than a fresh list for {wrong_for:.0} s: {}",
                                difference(&mirror, listed)
                            )
                        },
                    );
                }
                _ => memory.mirror_wrong_since = None,
            }
        }
        self.members = members;

        // 5: grids
        let problems: BTreeSet<&String> = sample.grid_problems.iter().collect();
        self.grid_problems.retain(|p, _| problems.contains(p));
        for problem in problems {
            let since = *self.grid_problems.entry(problem.clone()).or_insert(sample.at);
            let waited = sample.at - since;
            found.check(Invariant::GridsConverge, problem, "converge", waited < self.bounds.converge, || {
                format!("not converged for {waited:.0} s")
            });
        }
        if sample.grid_problems.is_empty() {
            found.count(Invariant::GridsConverge);
        }
        for write in &sample.foreign_writes {
            found.check(Invariant::GridsConverge, write, "foreign", false, || {
                "the grid controller wrote an object it does not own".into()
            });
        }
        if sample.foreign_writes.is_empty() {
            found.count(Invariant::GridsConverge);
        }

        // 6: processes
        for process in &sample.processes {
            let name = &process.name;
            found.check(Invariant::ProcessesHealthy, name, "exit", process.exited_unasked.is_none(), || {
                format!("exited unasked ({})", process.exited_unasked.clone().unwrap_or_default())
            });
            found.check(Invariant::ProcessesHealthy, name, "panic", process.panicked.is_none(), || {
                format!("panicked: {}", process.panicked.clone().unwrap_or_default())
            });
            found.check(Invariant::ProcessesHealthy, name, "stop", process.stop_problem.is_none(), || {
                format!("on SIGTERM: {}", process.stop_problem.clone().unwrap_or_default())
            });
            found.check(Invariant::ProcessesHealthy, name, "rss", process.rss_kib <= self.bounds.rss_kib, || {
                format!(
                    "resident memory {} MiB, over the {} MiB bound",
                    process.rss_kib / 1024,
                    self.bounds.rss_kib / 1024
                )
            });
        }

        let Found { now, new, .. } = found;
        // a violation is reported again only after it stopped for a sample
        let reported: Vec<Violation> = new
            .into_iter()
            .filter(|v| !self.open.contains(&(v.invariant, v.subject.clone(), v.what.clone())))
            .collect();
        self.open = now;
        reported
    }
}

impl Checker {
    /// Each zone's state from the cloud's Ready conditions, as the lifecycle controller
    /// counts them (kube's `ComputeZoneState` and `setLimiterInZone`), and since when each
    /// may be tainted at a non-zero rate; also when each node turned not ready.
    fn open_zones(&mut self, sample: &Sample) {
        let mut counts: BTreeMap<&ZoneKey, (usize, usize)> = BTreeMap::new();
        for (name, node) in &sample.nodes {
            let count = counts.entry(&node.zone).or_default();
            if node.not_ready {
                count.1 += 1
            } else {
                count.0 += 1
            }
            let memory = self.nodes.entry(name.clone()).or_default();
            if node.not_ready {
                memory.not_ready_since.get_or_insert(sample.at);
            } else {
                memory.not_ready_since = None;
            }
        }
        let rules = &self.zone_rules;
        let states: BTreeMap<ZoneKey, (ZoneState, usize)> = counts
            .into_iter()
            .map(|(zone, (ready, not_ready))| {
                (zone.clone(), (zone_state(ready, not_ready, rules.unhealthy_zone_threshold), ready + not_ready))
            })
            .collect();
        self.zones_open_since.retain(|zone, _| eviction_rate(zone, &states, rules) > 0.0);
        for zone in states.keys() {
            if eviction_rate(zone, &states, rules) > 0.0 {
                self.zones_open_since.entry(zone.clone()).or_insert(sample.at);
            }
        }
    }
}

/// How many nodes of `name`'s zone the lifecycle controller's queue may hold ahead of it:
/// not ready since no later than it, not yet tainted NoExecute, and not owed protection
/// (one that is takes no token: were it tainted, invariant 1 would say so).
fn queued_ahead(
    sample: &Sample,
    name: &str,
    owed: &BTreeSet<String>,
    not_ready_since: &BTreeMap<String, Secs>,
) -> usize {
    let Some(own) = sample.nodes.get(name) else { return 0 };
    let own_since = not_ready_since.get(name).copied().unwrap_or(Secs::INFINITY);
    sample
        .nodes
        .iter()
        .filter(|(other, node)| {
            *other != name
                && node.zone == own.zone
                && node.not_ready
                && !node.taints.iter().any(|t| t.ends_with(":NoExecute"))
                && !owed.contains(*other)
                && not_ready_since.get(*other).is_some_and(|s| *s <= own_since)
        })
        .count()
}

/// The violations of one sample, and the checks counted.
struct Found<'a> {
    at: Secs,
    /// (invariant, subject, what) broken in this sample.
    now: BTreeSet<(Invariant, String, String)>,
    new: Vec<Violation>,
    checks: &'a mut BTreeMap<Invariant, (u64, u64)>,
}

impl Found<'_> {
    fn count(&mut self, invariant: Invariant) {
        self.checks.entry(invariant).or_default().0 += 1;
    }

    fn check(&mut self, invariant: Invariant, subject: &str, what: &str, holds: bool, detail: impl FnOnce() -> String) {
        let counts = self.checks.entry(invariant).or_default();
        counts.0 += 1;
        if holds {
            return;
        }
        counts.1 += 1;
        self.now.insert((invariant, subject.to_string(), what.to_string()));
        self.new.push(Violation {
            invariant,
            at: self.at,
            subject: subject.to_string(),
            what: what.to_string(),
            detail: detail(),
        });
    }

    /// Not yet due, but not yet true either (for [`Checker::converged`]).
    fn pending(&mut self, invariant: Invariant, subject: &str) {
        self.now.insert((invariant, subject.to_string(), "pending".into()));
    }
}

/// Without Services that have no ready endpoint (present or absent means the same).
fn normalised(endpoints: &Endpoints) -> Endpoints {
    endpoints.iter().filter(|(_, e)| !e.is_empty()).map(|(s, e)| (s.clone(), e.clone())).collect()
}

/// `endpoints` without those on `nodes`.
fn without_nodes(endpoints: &Endpoints, nodes: &BTreeSet<&str>) -> Endpoints {
    let on = |endpoint: &String| endpoint.rsplit_once('@').is_some_and(|(_, node)| nodes.contains(node));
    let kept = endpoints.iter().map(|(service, e)| (service.clone(), e.iter().filter(|e| !on(e)).cloned().collect()));
    normalised(&kept.collect())
}

/// What a wrapper in `unit` should serve: a unit-kept Service's endpoints on the unit's
/// nodes, any other Service's endpoints; in both, none on a node of the unit that is dead
/// (its unit votes it down, and the wrapper drops what its unit votes down).
fn unit_view(
    cloud: &Endpoints,
    unit_services: &BTreeSet<String>,
    unit: &str,
    truth: &BTreeMap<&str, &NodeTruth>,
) -> Endpoints {
    let node_of = |endpoint: &str| endpoint.rsplit_once('@').map(|(_, n)| n.to_string()).unwrap_or_default();
    let mut out = Endpoints::new();
    for (service, endpoints) in cloud {
        let kept: Vec<String> = endpoints
            .iter()
            .filter(|e| {
                let node = truth.get(node_of(e).as_str());
                let in_unit = node.is_some_and(|n| n.unit == unit);
                let voted_down = node.is_some_and(|n| in_unit && !n.alive);
                (in_unit || !unit_services.contains(service)) && !voted_down
            })
            .cloned()
            .collect();
        if !kept.is_empty() {
            out.insert(service.clone(), kept);
        }
    }
    out
}

/// What `got` has that `want` lacks and the reverse, as `service endpoint` pairs.
pub fn difference(got: &Endpoints, want: &Endpoints) -> String {
    let pairs = |endpoints: &Endpoints| -> BTreeSet<String> {
        endpoints.iter().flat_map(|(s, e)| e.iter().map(move |e| format!("{s} {e}"))).collect()
    };
    let (got, want) = (pairs(got), pairs(want));
    let list = |items: Vec<&String>| {
        if items.is_empty() { "nothing".to_string() } else { items.into_iter().cloned().collect::<Vec<_>>().join(", ") }
    };
    format!("lacks {}; has besides {}", list(want.difference(&got).collect()), list(got.difference(&want).collect()))
}

#[cfg(test)]
mod tests;
