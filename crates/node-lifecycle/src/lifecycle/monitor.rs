//! One node lifecycle controller, minus the API: each monitor pass turns node snapshots
//! into actions (conditions to Unknown, NoSchedule taints, NoExecute taints through the
//! per-zone rate-limited queues), with the edge rule on top.
//!
//! Level-triggered: every decision is taken from what the snapshots say now plus what this
//! core itself observed, so a core built fresh in the middle of a disruption (a restart,
//! a new leader) resumes from the observed state:
//! - a node whose Ready condition already says Unknown is Unknown at once (the written
//!   Unknown stands until a heartbeat changes), with no new grace period;
//! - taints already on a node are kept, not removed and queued again (so a NoExecute
//!   taint keeps its `timeAdded` and the taint manager's `tolerationSeconds` keep counting);
//! - zone states are computed, and queue rates set, before the first drain;
//! - every zone queue starts with an empty token bucket, so the first NoExecute taint
//!   after a start waits one interval and a restart never taints faster than the rate.
//!
//! NoSchedule taints are kube-controller-manager's `doNoScheduleTaintingPass`: a pure
//! function of the node's written conditions and `spec.unschedulable`
//! ([`condition_taint_actions`]), which the binary also runs whenever a node changes.
//!
//! Zones follow kube-controller-manager's `handleDisruption`: a zone first seen is
//! `Initial`; when every zone becomes fully disrupted the controller assumes it is the one
//! cut off, removes every NoExecute taint it manages and stops tainting; when some zone
//! recovers from that, every node gets a fresh grace period.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use tokio::time::Instant;

use super::LifecycleConfig;
use super::health::{HealthTracker, NodeReport, ReadyStatus};
use super::queue::RateLimitedTimedQueue;
use super::tolerations::Taint;
use super::zones::{ZoneKey, ZoneState, zone_rate, zone_state};
use edgegrid_core::keys;
use edgegrid_core::protection::{self, LimitAnnotation, NodeFacts, Protection, ProtectionPolicy, Timestamp};

/// A node as the controller reads it from the API.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeSnapshot {
    pub name: String,
    pub zone: ZoneKey,
    pub report: NodeReport,
    /// Every condition as written, `(type, status)`, in the node's order (Ready included).
    pub conditions: Vec<(String, String)>,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// Labelled `node.kubernetes.io/exclude-disruption`: not counted in its zone's state.
    pub excluded_from_disruption: bool,
    /// Edge-health watches the node (`edgegrid_core::unit::membership`): only then may the
    /// edge rule protect it.
    pub watched: bool,
    /// The node carries `nodeunhealth` (any value, as SuperEdge reads it): its unit's
    /// peers voted it unhealthy.
    pub voted_unhealthy: bool,
    /// The node's `superedge.io/max-unreachable-protection` annotation, read.
    pub protection_limit: LimitAnnotation,
    pub taints: Vec<Taint>,
}

/// The taints the controller manages: the condition and spec NoSchedule taints and the two
/// NoExecute taints. A taint is identified by key and effect, as Kubernetes matches them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TaintRef {
    NotReadyNoSchedule,
    UnreachableNoSchedule,
    MemoryPressureNoSchedule,
    DiskPressureNoSchedule,
    PidPressureNoSchedule,
    NetworkUnavailableNoSchedule,
    UnschedulableNoSchedule,
    NotReadyNoExecute,
    UnreachableNoExecute,
}

impl TaintRef {
    /// Every NoSchedule taint [`condition_taint_actions`] manages.
    pub const NO_SCHEDULE: [TaintRef; 7] = [
        Self::NotReadyNoSchedule,
        Self::UnreachableNoSchedule,
        Self::MemoryPressureNoSchedule,
        Self::DiskPressureNoSchedule,
        Self::PidPressureNoSchedule,
        Self::NetworkUnavailableNoSchedule,
        Self::UnschedulableNoSchedule,
    ];

    pub fn key(self) -> &'static str {
        match self {
            Self::NotReadyNoSchedule | Self::NotReadyNoExecute => keys::TAINT_NOT_READY,
            Self::UnreachableNoSchedule | Self::UnreachableNoExecute => keys::TAINT_UNREACHABLE,
            Self::MemoryPressureNoSchedule => keys::TAINT_MEMORY_PRESSURE,
            Self::DiskPressureNoSchedule => keys::TAINT_DISK_PRESSURE,
            Self::PidPressureNoSchedule => keys::TAINT_PID_PRESSURE,
            Self::NetworkUnavailableNoSchedule => keys::TAINT_NETWORK_UNAVAILABLE,
            Self::UnschedulableNoSchedule => keys::TAINT_UNSCHEDULABLE,
        }
    }

    pub fn effect(self) -> &'static str {
        match self {
            Self::NotReadyNoExecute | Self::UnreachableNoExecute => keys::TAINT_EFFECT_NO_EXECUTE,
            _ => keys::TAINT_EFFECT_NO_SCHEDULE,
        }
    }

    pub fn taint(self) -> Taint {
        Taint { key: self.key().to_string(), value: None, effect: self.effect().to_string() }
    }

    /// Whether a taint with this key and effect is on the node (whatever its value).
    pub fn on(self, taints: &[Taint]) -> bool {
        taints.iter().any(|t| t.key == self.key() && t.effect == self.effect())
    }

    /// The NoSchedule taint stock Kubernetes derives from a condition with this status
    /// (`nodeConditionToTaintKeyStatusMap`): Ready False/Unknown, and MemoryPressure,
    /// DiskPressure, PIDPressure and NetworkUnavailable True.
    pub fn for_condition(condition: &str, status: &str) -> Option<Self> {
        match (condition, status) {
            (keys::NODE_CONDITION_READY, keys::CONDITION_FALSE) => Some(Self::NotReadyNoSchedule),
            (keys::NODE_CONDITION_READY, keys::CONDITION_UNKNOWN) => Some(Self::UnreachableNoSchedule),
            (keys::NODE_CONDITION_MEMORY_PRESSURE, keys::CONDITION_TRUE) => Some(Self::MemoryPressureNoSchedule),
            (keys::NODE_CONDITION_DISK_PRESSURE, keys::CONDITION_TRUE) => Some(Self::DiskPressureNoSchedule),
            (keys::NODE_CONDITION_PID_PRESSURE, keys::CONDITION_TRUE) => Some(Self::PidPressureNoSchedule),
            (keys::NODE_CONDITION_NETWORK_UNAVAILABLE, keys::CONDITION_TRUE) => {
                Some(Self::NetworkUnavailableNoSchedule)
            }
            _ => None,
        }
    }
}

/// The NoSchedule taints stock Kubernetes wants on a node with these written conditions and
/// `spec.unschedulable`, in the order it adds them (conditions in the node's order, then
/// unschedulable).
pub fn wanted_no_schedule(conditions: &[(String, String)], unschedulable: bool) -> Vec<TaintRef> {
    let mut wanted: Vec<TaintRef> = Vec::new();
    let from_conditions = conditions.iter().filter_map(|(kind, status)| TaintRef::for_condition(kind, status));
    for taint in from_conditions.chain(unschedulable.then_some(TaintRef::UnschedulableNoSchedule)) {
        if !wanted.contains(&taint) {
            wanted.push(taint);
        }
    }
    wanted
}

/// kube-controller-manager's `doNoScheduleTaintingPass` for one node: adds the wanted
/// NoSchedule taints that are missing (in [`wanted_no_schedule`]'s order), then removes
/// the managed NoSchedule taints no longer wanted. Every other taint (other keys, other
/// effects, the NoExecute ones) is left alone; a managed taint already present stays as it
/// is (value and `timeAdded` kept). Pure, and independent of the edge rule: protection is
/// about NoExecute and pods only.
pub fn condition_taint_actions(node: &NodeSnapshot) -> Vec<Action> {
    let wanted = wanted_no_schedule(&node.conditions, node.unschedulable);
    let add =
        wanted.iter().filter(|t| !t.on(&node.taints)).map(|&taint| Action::AddTaint { node: node.name.clone(), taint });
    let remove = TaintRef::NO_SCHEDULE
        .into_iter()
        .filter(|t| t.on(&node.taints) && !wanted.contains(t))
        .map(|taint| Action::RemoveTaint { node: node.name.clone(), taint });
    add.chain(remove).collect()
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Set the node's conditions to Unknown: its kubelet stopped reporting.
    MarkUnknown {
        node: String,
    },
    /// Mark the node's pods not ready (their endpoints stop taking traffic). Not done for
    /// a node the edge rule protects: its pods are still serving their unit.
    MarkPodsNotReady {
        node: String,
    },
    AddTaint {
        node: String,
        taint: TaintRef,
    },
    RemoveTaint {
        node: String,
        taint: TaintRef,
    },
}

pub struct MonitorCore {
    config: LifecycleConfig,
    health: HealthTracker,
    zones: BTreeMap<ZoneKey, (ZoneState, usize)>,
    queues: BTreeMap<ZoneKey, RateLimitedTimedQueue>,
    /// Per node, from the last pass: its zone and whether it still wants a NoExecute taint.
    pending: HashMap<String, (ZoneKey, Option<TaintRef>)>,
    /// Nodes whose pods were marked not ready since they were last Ready.
    pods_marked: std::collections::HashSet<String>,
}

impl MonitorCore {
    pub fn new(config: LifecycleConfig) -> Self {
        Self {
            config,
            health: HealthTracker::default(),
            zones: BTreeMap::new(),
            queues: BTreeMap::new(),
            pending: HashMap::new(),
            pods_marked: Default::default(),
        }
    }

    pub fn config(&self) -> &LifecycleConfig {
        &self.config
    }

    pub fn zone_states(&self) -> impl Iterator<Item = (&ZoneKey, ZoneState)> {
        self.zones.iter().map(|(k, (s, _))| (k, *s))
    }

    pub fn queue_rate(&self, zone: &ZoneKey) -> Option<f64> {
        self.queues.get(zone).map(RateLimitedTimedQueue::rate)
    }

    /// The readiness the controller judges a node to have now.
    pub fn status(&self, node: &str, now: Instant) -> ReadyStatus {
        self.health.status(node, now, self.config.grace_period, self.config.startup_grace_period)
    }

    /// The edge rule's answer for the node (`edgegrid_core::protection`): protected while
    /// judged Unknown, not voted unhealthy, and within its protection limit at `wall_now`.
    pub fn protection(&self, node: &NodeSnapshot, now: Instant, wall_now: Timestamp) -> Protection {
        self.judge(node, self.status(&node.name, now), wall_now)
    }

    /// Whether the edge rule protects the node (see [`Self::protection`]).
    pub fn protected(&self, node: &NodeSnapshot, now: Instant, wall_now: Timestamp) -> bool {
        self.protection(node, now, wall_now).protected()
    }

    /// The rule's input from what this controller judged (`status`) and the node's
    /// objects. The Unknown period is the one the API records: it starts at the Ready
    /// condition's `lastTransitionTime` once the condition says Unknown, so a restarted
    /// controller counts on from there; while this controller has judged the node Unknown
    /// but the condition does not say so yet (its `MarkUnknown` is this pass's), it
    /// starts now.
    fn judge(&self, node: &NodeSnapshot, status: ReadyStatus, wall_now: Timestamp) -> Protection {
        let written_unknown = node.report.ready == Some(ReadyStatus::Unknown);
        let facts = NodeFacts {
            ready_unknown: status == ReadyStatus::Unknown,
            watched: node.watched,
            unknown_since: if written_unknown { node.report.ready_transition } else { Some(wall_now) },
            voted_unhealthy: node.voted_unhealthy,
            limit: node.protection_limit.clone(),
        };
        protection::judge(
            &facts,
            wall_now,
            ProtectionPolicy::with_default_limit(self.config.max_unreachable_protection),
        )
    }

    /// The controller could not see for `blind` (its view was not current, so no pass ran):
    /// that time does not count against any node's grace period. Kubelets cut off with it
    /// (an API server outage) renew only some seconds after it is back; judged on their
    /// old renewals at once, every live node would look silent past a grace period shorter
    /// than the outage, every zone fully disrupted.
    pub fn discount_blind(&mut self, blind: Duration) {
        self.health.discount_blind(blind);
    }

    /// One monitor pass over every node (nodes absent from `nodes` are forgotten).
    /// Actions come in node-name order. `now` is the controller's monotonic clock, which
    /// judges heartbeats; `wall_now` the wall clock, which the edge rule's protection
    /// limit is counted on (from the Ready condition's `lastTransitionTime`).
    pub fn monitor(&mut self, nodes: &[NodeSnapshot], now: Instant, wall_now: Timestamp) -> Vec<Action> {
        let mut nodes: Vec<&NodeSnapshot> = nodes.iter().collect();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let known: std::collections::HashSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        let gone: Vec<String> = self.pending.keys().filter(|n| !known.contains(n.as_str())).cloned().collect();
        for name in gone {
            self.health.forget(&name);
            self.pods_marked.remove(&name);
            if let Some((zone, _)) = self.pending.remove(&name)
                && let Some(queue) = self.queues.get_mut(&zone)
            {
                queue.remove(&name);
            }
        }

        let mut actions = Vec::new();
        let mut counts: BTreeMap<ZoneKey, (usize, usize)> = BTreeMap::new();
        for node in &nodes {
            self.health.observe(&node.name, node.report.clone(), now);
            let status = self.status(&node.name, now);
            if !node.excluded_from_disruption {
                let count = counts.entry(node.zone.clone()).or_default();
                if status == ReadyStatus::True { count.0 += 1 } else { count.1 += 1 }
            }
            if status == ReadyStatus::Unknown && node.report.ready != Some(ReadyStatus::Unknown) {
                actions.push(Action::MarkUnknown { node: node.name.clone() });
            }
            let protected = self.judge(node, status, wall_now).protected();
            match status {
                ReadyStatus::True => {
                    self.pods_marked.remove(&node.name);
                }
                ReadyStatus::Unknown if !protected && self.pods_marked.insert(node.name.clone()) => {
                    actions.push(Action::MarkPodsNotReady { node: node.name.clone() });
                }
                _ => {}
            }
            actions.extend(condition_taint_actions(node));
            let wanted = self.no_execute_taints(node, status, protected, now, &mut actions);
            self.pending.insert(node.name.clone(), (node.zone.clone(), wanted));
        }
        self.handle_disruption(&nodes, counts, now, &mut actions);
        actions
    }

    /// kube-controller-manager's `handleDisruption`: zone states from this pass's counts,
    /// a new zone starting `Initial`; the rate of a zone changes only when its state does.
    fn handle_disruption(
        &mut self,
        nodes: &[&NodeSnapshot],
        counts: BTreeMap<ZoneKey, (usize, usize)>,
        now: Instant,
        actions: &mut Vec<Action>,
    ) {
        let new: BTreeMap<ZoneKey, (ZoneState, usize)> = counts
            .into_iter()
            .map(|(zone, (ready, not_ready))| {
                (zone, (zone_state(ready, not_ready, self.config.unhealthy_zone_threshold), ready + not_ready))
            })
            .collect();
        for zone in new.keys() {
            self.zones.entry(zone.clone()).or_insert((ZoneState::Initial, 0));
        }
        self.zones.retain(|zone, _| new.contains_key(zone));
        let all_are_fully_disrupted = new.values().all(|(state, _)| *state == ZoneState::FullDisruption);
        let all_were_fully_disrupted = self.zones.values().all(|(state, _)| *state == ZoneState::FullDisruption);
        if all_are_fully_disrupted && all_were_fully_disrupted {
            return;
        }
        if all_are_fully_disrupted {
            // every node unreachable: this controller is the one cut off. Untaint every
            // node and stop tainting until some zone answers again.
            for node in nodes {
                for taint in [TaintRef::UnreachableNoExecute, TaintRef::NotReadyNoExecute] {
                    if taint.on(&node.taints) {
                        actions.push(Action::RemoveTaint { node: node.name.clone(), taint });
                    }
                }
                if let Some(queue) = self.queues.get_mut(&node.zone) {
                    queue.remove(&node.name);
                }
            }
            for (zone, (state, size)) in self.zones.iter_mut() {
                *state = ZoneState::FullDisruption;
                *size = new[zone].1;
            }
            for queue in self.queues.values_mut() {
                queue.swap_rate(0.0, now);
            }
            return;
        }
        if all_were_fully_disrupted {
            // leaving that mode: every node gets a fresh grace period
            for node in nodes {
                self.health.reset_probe(&node.name, now);
            }
        }
        for (zone, (state, size)) in &new {
            let known = self.zones.get_mut(zone).expect("every zone of this pass was entered above");
            if all_were_fully_disrupted || known.0 != *state {
                let rate = zone_rate(*state, *size, &self.config);
                self.queues
                    .entry(zone.clone())
                    .or_insert_with(|| RateLimitedTimedQueue::new_empty(rate, now))
                    .swap_rate(rate, now);
            }
            *known = (*state, *size);
        }
    }

    /// Whether every zone is fully disrupted: the controller takes itself to be cut off.
    pub fn zones_fully_disrupted(&self) -> bool {
        !self.zones.is_empty() && self.zones.values().all(|(state, _)| *state == ZoneState::FullDisruption)
    }

    /// NoExecute decisions for one node; returns the NoExecute taint it is queued for.
    fn no_execute_taints(
        &mut self,
        node: &NodeSnapshot,
        status: ReadyStatus,
        protected: bool,
        now: Instant,
        actions: &mut Vec<Action>,
    ) -> Option<TaintRef> {
        use TaintRef::{NotReadyNoExecute as NotReady, UnreachableNoExecute as Unreachable};
        let queue = self
            .queues
            .entry(node.zone.clone())
            .or_insert_with(|| RateLimitedTimedQueue::new_empty(self.config.eviction_rate, now));
        let remove = |taint: TaintRef, actions: &mut Vec<Action>| {
            if taint.on(&node.taints) {
                actions.push(Action::RemoveTaint { node: node.name.clone(), taint });
            }
        };
        let (wanted, other) = match status {
            ReadyStatus::True => {
                queue.remove(&node.name);
                remove(NotReady, actions);
                remove(Unreachable, actions);
                return None;
            }
            ReadyStatus::Unknown if protected => {
                // the edge rule: peers see it alive, so the cloud link is what failed
                queue.remove(&node.name);
                remove(NotReady, actions);
                remove(Unreachable, actions);
                return None;
            }
            ReadyStatus::False => (NotReady, Unreachable),
            ReadyStatus::Unknown => (Unreachable, NotReady),
        };
        if wanted.on(&node.taints) {
            queue.remove(&node.name);
            return None;
        }
        if other.on(&node.taints) {
            // never both NoExecute variants: swap at once, no new rate-limit wait
            actions.push(Action::RemoveTaint { node: node.name.clone(), taint: other });
            actions.push(Action::AddTaint { node: node.name.clone(), taint: wanted });
            queue.remove(&node.name);
            return None;
        }
        queue.add(&node.name, now);
        Some(wanted)
    }

    /// Tells the core that an action it returned was not carried out (the API refused it
    /// or could not be reached), so that it is decided again on the next pass. Only
    /// `MarkPodsNotReady` needs this: the core remembers having asked for it, while every
    /// other action is re-derived from the next snapshots (a condition still not Unknown, a
    /// taint still missing or still present; a NoExecute taint that did not land is queued
    /// again and waits for a token like any other).
    pub fn action_failed(&mut self, action: &Action) {
        if let Action::MarkPodsNotReady { node } = action {
            self.pods_marked.remove(node);
        }
    }

    /// Drains the per-zone queues at their rates: the NoExecute taints now due.
    pub fn drain(&mut self, now: Instant) -> Vec<Action> {
        let mut actions = Vec::new();
        for queue in self.queues.values_mut() {
            let pending = &self.pending;
            queue.try_process(now, |name| {
                if let Some((_, Some(taint))) = pending.get(name) {
                    actions.push(Action::AddTaint { node: name.to_string(), taint: *taint });
                }
                Ok(())
            });
        }
        for action in &actions {
            if let Action::AddTaint { node, .. } = action
                && let Some(entry) = self.pending.get_mut(node)
            {
                entry.1 = None;
            }
        }
        actions
    }
}
