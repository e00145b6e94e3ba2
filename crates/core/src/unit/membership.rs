//! Which units a node belongs to, and whether edge-health really watches it: the one
//! definition the daemon (its peers), the node lifecycle controller and the admission
//! webhook (whom the edge rule may protect) all use.
//!
//! Units come from node labels:
//! - [`UnitSource::LabelKey`] (`--unit-label-key`): nodes sharing a value of one label key
//!   are a unit (an empty value is a value like any other); a node without the key is in
//!   no unit.
//! - [`UnitSource::NodeUnits`]: SuperEdge's node units, labels `<unit>=nodeunits.superedge.io`,
//!   filtered by the `edge-health-config` ConfigMap as SuperEdge v0.9.0 reads it
//!   ([`NodeUnitCheck`]): without it, or with `unit-internal-check: "false"`, the whole
//!   cluster is one unit; otherwise only the units listed in `check-units` are checked.
//!
//! Control-plane nodes (either role label) are never members.
//!
//! **Watched** (the signal the edge rule is earned by): a node is watched when
//! 1. its edge-health daemon runs: the node carries the address its daemon publishes
//!    ([`EDGE_HEALTH_ADDRESS_ANNOTATION`]), and
//! 2. it is a member of a checked unit in which at least one *other* member carries that
//!    address too: a peer whose daemon probes it and votes on it.
//!
//! A node alone in its unit, a node in no unit (a cloud worker), a control-plane node, or a
//! node whose daemon never started is not watched: nobody could vote it unhealthy, so
//! nothing it is not voted can mean "alive". Such a node is handled exactly as stock
//! Kubernetes handles it.
//!
//! [`WatchedNodes`] is the index every cloud-side component feeds with node metadata (and
//! the ConfigMap); it answers per node and reports whose answer changed. Pure: no I/O.
//!
//! [`EDGE_HEALTH_ADDRESS_ANNOTATION`]: keys::EDGE_HEALTH_ADDRESS_ANNOTATION

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::ConfigMap;

use crate::keys;

/// A node's labels (or annotations).
pub type Labels = BTreeMap<String, String>;

/// Where units come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnitSource {
    /// Nodes sharing a value of this label key.
    LabelKey(String),
    /// SuperEdge node units, filtered by [`NodeUnitCheck`].
    NodeUnits,
}

impl UnitSource {
    /// The source a `--unit-label-key` flag names: empty means SuperEdge's node units.
    pub fn from_flag(unit_label_key: &str) -> Self {
        if unit_label_key.is_empty() { Self::NodeUnits } else { Self::LabelKey(unit_label_key.to_string()) }
    }
}

/// SuperEdge's `edge-health-config` ConfigMap, as SuperEdge v0.9.0 reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum NodeUnitCheck {
    /// No ConfigMap, or `unit-internal-check` is exactly `"false"`: every node checks every
    /// other non-control-plane node of the cluster.
    #[default]
    WholeCluster,
    /// Unit-internal checking: only these units (possibly none) are checked.
    Units(BTreeSet<String>),
}

impl NodeUnitCheck {
    /// Reads the ConfigMap's `data` (`None` when the ConfigMap does not exist).
    ///
    /// SuperEdge turns unit checking off only for the exact value `"false"`: a ConfigMap
    /// without the key, or with `"true"`, `"False"` or anything else, turns it on. That is
    /// kept so existing ConfigMaps mean what they meant.
    pub fn from_config_map(data: Option<&BTreeMap<String, String>>) -> Self {
        let Some(data) = data else {
            return Self::WholeCluster;
        };
        if data.get(keys::EDGE_HEALTH_UNIT_INTERNAL_CHECK_KEY).map(String::as_str) == Some("false") {
            return Self::WholeCluster;
        }
        let units = data
            .get(keys::EDGE_HEALTH_CHECK_UNITS_KEY)
            .map(|list| list.split(',').map(str::trim).filter(|u| !u.is_empty()).map(str::to_string).collect())
            .unwrap_or_default();
        Self::Units(units)
    }

    /// [`Self::from_config_map`] of the ConfigMap object itself (one without `data` reads
    /// as empty data: unit checking on).
    pub fn of_config_map(map: Option<&ConfigMap>) -> Self {
        Self::from_config_map(map.map(|m| m.data.clone().unwrap_or_default()).as_ref())
    }
}

/// A unit's identity. Ordered, so "the lowest unit" is the same for every member.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum UnitId {
    /// Every non-control-plane node of the cluster (SuperEdge without unit checking).
    Cluster,
    /// Nodes with this value of the configured label key.
    LabelValue(String),
    /// A SuperEdge node unit, by name.
    NodeUnit(String),
}

/// Whether a node carries either control-plane role label (any value, as Kubernetes
/// role labels are conventionally empty).
pub fn is_control_plane(labels: &Labels) -> bool {
    labels.contains_key(keys::CONTROL_PLANE_ROLE_LABEL) || labels.contains_key(keys::MASTER_ROLE_LABEL)
}

/// The ids of the checked units a node with these labels belongs to, lowest first.
pub fn units_of(source: &UnitSource, check: &NodeUnitCheck, labels: &Labels) -> BTreeSet<UnitId> {
    if is_control_plane(labels) {
        return BTreeSet::new();
    }
    match source {
        UnitSource::LabelKey(key) => labels.get(key).map(|v| UnitId::LabelValue(v.clone())).into_iter().collect(),
        UnitSource::NodeUnits => match check {
            NodeUnitCheck::WholeCluster => BTreeSet::from([UnitId::Cluster]),
            NodeUnitCheck::Units(checked) => labels
                .iter()
                .filter(|(unit, value)| {
                    value.as_str() == keys::NODE_UNIT_LABEL_VALUE && checked.contains(unit.as_str())
                })
                .map(|(unit, _)| UnitId::NodeUnit(unit.clone()))
                .collect(),
        },
    }
}

/// What [`WatchedNodes`] keeps of a node: its labels and whether its daemon published an
/// address.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Member {
    labels: Labels,
    runs_edge_health: bool,
}

/// Whether the node's edge-health daemon published its address.
pub fn runs_edge_health(annotations: Option<&Labels>) -> bool {
    annotations.and_then(|a| a.get(keys::EDGE_HEALTH_ADDRESS_ANNOTATION)).is_some_and(|address| !address.is_empty())
}

/// The watched-node index (see the module documentation for what "watched" means).
#[derive(Clone, Debug)]
pub struct WatchedNodes {
    source: UnitSource,
    check: NodeUnitCheck,
    nodes: HashMap<String, Member>,
    /// Per unit, how many of its members run edge-health.
    running: HashMap<UnitId, usize>,
    watched: BTreeSet<String>,
}

impl WatchedNodes {
    pub fn new(source: UnitSource) -> Self {
        Self {
            source,
            check: NodeUnitCheck::default(),
            nodes: HashMap::new(),
            running: HashMap::new(),
            watched: BTreeSet::new(),
        }
    }

    /// Whether edge-health watches the node (unknown nodes are not watched).
    pub fn is_watched(&self, node: &str) -> bool {
        self.watched.contains(node)
    }

    /// Every watched node, by name.
    pub fn watched(&self) -> &BTreeSet<String> {
        &self.watched
    }

    /// The checked units a node with these labels is in, lowest first (under the current
    /// ConfigMap, for node units).
    pub fn units_of(&self, labels: &Labels) -> BTreeSet<UnitId> {
        units_of(&self.source, &self.check, labels)
    }

    /// Whether units are read from the ConfigMap (only [`UnitSource::NodeUnits`] does).
    pub fn reads_config_map(&self) -> bool {
        self.source == UnitSource::NodeUnits
    }

    /// A node was added or its metadata changed. Returns the nodes whose answer changed.
    pub fn apply(&mut self, name: &str, labels: &Labels, annotations: Option<&Labels>) -> BTreeSet<String> {
        let runs = runs_edge_health(annotations);
        // node heartbeats arrive as updates that change neither: nothing to copy or do
        if self.nodes.get(name).is_some_and(|m| m.runs_edge_health == runs && m.labels == *labels) {
            return BTreeSet::new();
        }
        self.count(name, -1);
        self.nodes.insert(name.to_string(), Member { labels: labels.clone(), runs_edge_health: runs });
        self.count(name, 1);
        self.refresh()
    }

    /// A node was deleted. Returns the nodes whose answer changed.
    pub fn delete(&mut self, name: &str) -> BTreeSet<String> {
        if !self.nodes.contains_key(name) {
            return BTreeSet::new();
        }
        self.count(name, -1);
        self.nodes.remove(name);
        self.refresh()
    }

    /// A relist: these are all the nodes there are. Returns the nodes whose answer changed.
    pub fn replace_all<'a>(
        &mut self,
        nodes: impl IntoIterator<Item = (String, Labels, Option<&'a Labels>)>,
    ) -> BTreeSet<String> {
        self.nodes = nodes
            .into_iter()
            .map(|(name, labels, annotations)| {
                (name, Member { labels, runs_edge_health: runs_edge_health(annotations) })
            })
            .collect();
        self.recount();
        self.refresh()
    }

    /// The `edge-health-config` ConfigMap changed (it matters only for
    /// [`UnitSource::NodeUnits`]). Returns the nodes whose answer changed.
    pub fn set_node_unit_check(&mut self, check: NodeUnitCheck) -> BTreeSet<String> {
        if self.check == check {
            return BTreeSet::new();
        }
        self.check = check;
        self.recount();
        self.refresh()
    }

    fn units(&self, member: &Member) -> BTreeSet<UnitId> {
        units_of(&self.source, &self.check, &member.labels)
    }

    fn count(&mut self, name: &str, delta: isize) {
        let Some(member) = self.nodes.get(name) else { return };
        if !member.runs_edge_health {
            return;
        }
        for unit in self.units(member) {
            let count = self.running.entry(unit.clone()).or_default();
            *count = count.saturating_add_signed(delta);
            if *count == 0 {
                self.running.remove(&unit);
            }
        }
    }

    fn recount(&mut self) {
        self.running.clear();
        let names: Vec<String> = self.nodes.keys().cloned().collect();
        for name in names {
            self.count(&name, 1);
        }
    }

    /// Runs edge-health with at least one peer running it in its home unit (its first, as
    /// [`crate::unit::verdict`] counts votes in that one only): a node whose other units
    /// watch it but whose home unit has no other daemon (mid-migration, SuperEdge's daemon
    /// still there) would be protected with nobody able to vote it down.
    fn is_watched_now(&self, member: &Member) -> bool {
        member.runs_edge_health
            && self.units(member).first().is_some_and(|home| self.running.get(home).copied().unwrap_or(0) >= 2)
    }

    /// Recomputes the watched set; O(nodes), cheap next to the API event that caused it,
    /// and only run when a node's labels or address (not a heartbeat) changed.
    fn refresh(&mut self) -> BTreeSet<String> {
        let watched: BTreeSet<String> =
            self.nodes.iter().filter(|(_, member)| self.is_watched_now(member)).map(|(name, _)| name.clone()).collect();
        let changed = watched.symmetric_difference(&self.watched).cloned().collect();
        self.watched = watched;
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn addressed() -> Labels {
        labels(&[(keys::EDGE_HEALTH_ADDRESS_ANNOTATION, "10.0.0.1:51005")])
    }

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn watched_needs_an_address_and_a_peer_with_one_in_a_unit() {
        let mut w = WatchedNodes::new(UnitSource::LabelKey("zone".into()));
        let zone = |v: &str| labels(&[("zone", v)]);
        assert_eq!(w.apply("a", &zone("z1"), Some(&addressed())), names(&[]), "alone in its unit");
        assert_eq!(w.apply("b", &zone("z1"), None), names(&[]), "b runs no daemon: nobody watches a");
        assert_eq!(w.apply("b", &zone("z1"), Some(&addressed())), names(&["a", "b"]), "now they watch each other");
        assert_eq!(w.apply("c", &zone("z2"), Some(&addressed())), names(&[]), "alone in z2");
        assert_eq!(w.apply("cloud", &labels(&[]), Some(&addressed())), names(&[]), "no unit");
        let cp = labels(&[("zone", "z2"), (keys::CONTROL_PLANE_ROLE_LABEL, "")]);
        assert_eq!(w.apply("cp", &cp, Some(&addressed())), names(&[]), "control plane is never a member");
        let empty_address = labels(&[(keys::EDGE_HEALTH_ADDRESS_ANNOTATION, "")]);
        assert_eq!(w.apply("d", &zone("z2"), Some(&empty_address)), names(&[]), "an empty address is none");
        assert_eq!(w.watched(), &names(&["a", "b"]));
        // relabel b away: a is alone again
        assert_eq!(w.apply("b", &zone("z2"), Some(&addressed())), names(&["a", "c"]));
        assert_eq!(w.watched(), &names(&["b", "c"]));
        // heartbeat-only updates change nothing
        assert_eq!(w.apply("b", &zone("z2"), Some(&addressed())), names(&[]));
        assert_eq!(w.delete("c"), names(&["b", "c"]));
        assert_eq!(w.delete("c"), names(&[]));
        assert!(!w.is_watched("ghost"));
        assert!(!w.reads_config_map());
    }

    #[test]
    fn only_peers_in_its_home_unit_make_a_node_watched() {
        let mut w = WatchedNodes::new(UnitSource::NodeUnits);
        let unit =
            |units: &[&str]| labels(&units.iter().map(|u| (*u, keys::NODE_UNIT_LABEL_VALUE)).collect::<Vec<_>>());
        w.set_node_unit_check(NodeUnitCheck::Units(names(&["u1", "u2"])));
        // a's home is u1, where nobody else runs edge-health; only u2 has a peer of a's
        w.apply("a", &unit(&["u1", "u2"]), Some(&addressed()));
        w.apply("b", &unit(&["u2"]), Some(&addressed()));
        w.apply("c", &unit(&["u1"]), None);
        assert_eq!(w.watched(), &names(&["b"]), "u1's votes on a could never be cast");
        assert_eq!(w.apply("c", &unit(&["u1"]), Some(&addressed())), names(&["a", "c"]), "c now runs it in u1");
    }

    #[test]
    fn node_units_follow_the_config_map() {
        let mut w = WatchedNodes::new(UnitSource::NodeUnits);
        assert!(w.reads_config_map());
        let unit = |u: &str| labels(&[(u, keys::NODE_UNIT_LABEL_VALUE)]);
        w.apply("a", &unit("u1"), Some(&addressed()));
        w.apply("b", &unit("u2"), Some(&addressed()));
        assert_eq!(w.watched(), &names(&["a", "b"]), "no ConfigMap: the whole cluster is one unit");
        let check = NodeUnitCheck::Units(names(&["u1"]));
        assert_eq!(w.set_node_unit_check(check.clone()), names(&["a", "b"]), "u1 has one member, u2 is not checked");
        assert_eq!(w.set_node_unit_check(check), names(&[]));
        assert_eq!(w.apply("c", &unit("u1"), Some(&addressed())), names(&["a", "c"]));
        assert_eq!(
            w.replace_all([("a".into(), unit("u1"), Some(&addressed())), ("c".into(), unit("u1"), None)]),
            names(&["a", "c"])
        );
    }

    #[test]
    fn config_map_semantics_match_superedge() {
        let units = |list: &[&str]| NodeUnitCheck::Units(names(list));
        type Case = (&'static str, Option<BTreeMap<String, String>>, NodeUnitCheck);
        let cases: Vec<Case> = vec![
            ("no ConfigMap: whole cluster", None, NodeUnitCheck::WholeCluster),
            (
                "exactly false: whole cluster",
                Some(labels(&[
                    (keys::EDGE_HEALTH_UNIT_INTERNAL_CHECK_KEY, "false"),
                    (keys::EDGE_HEALTH_CHECK_UNITS_KEY, "u1"),
                ])),
                NodeUnitCheck::WholeCluster,
            ),
            (
                "true",
                Some(labels(&[
                    (keys::EDGE_HEALTH_UNIT_INTERNAL_CHECK_KEY, "true"),
                    (keys::EDGE_HEALTH_CHECK_UNITS_KEY, "u1"),
                ])),
                units(&["u1"]),
            ),
            ("key absent turns it on", Some(labels(&[(keys::EDGE_HEALTH_CHECK_UNITS_KEY, "u1")])), units(&["u1"])),
            ("False is not false", Some(labels(&[(keys::EDGE_HEALTH_UNIT_INTERNAL_CHECK_KEY, "False")])), units(&[])),
            (
                "on without check-units: nothing",
                Some(labels(&[(keys::EDGE_HEALTH_UNIT_INTERNAL_CHECK_KEY, "true")])),
                units(&[]),
            ),
            (
                "list trimmed, empties dropped",
                Some(labels(&[(keys::EDGE_HEALTH_CHECK_UNITS_KEY, " u1, ,u2 ,")])),
                units(&["u1", "u2"]),
            ),
        ];
        for (name, data, want) in cases {
            assert_eq!(NodeUnitCheck::from_config_map(data.as_ref()), want, "{name}");
        }
    }

    fn arbitrary_node() -> impl Strategy<Value = (u8, Option<u8>, bool, bool)> {
        // (name index, unit value, runs edge-health, control plane)
        (0u8..6, prop::option::of(0u8..3), any::<bool>(), prop::bool::weighted(0.1))
    }

    proptest! {
        /// The incremental index always equals the definition applied to the final state,
        /// whatever order nodes were applied, relabelled and deleted in, and the changes it
        /// reports add up to the set.
        #[test]
        fn the_index_matches_the_definition(ops in prop::collection::vec((arbitrary_node(), any::<bool>()), 0..40)) {
            let mut w = WatchedNodes::new(UnitSource::LabelKey("zone".into()));
            let mut state: BTreeMap<String, (Labels, Option<Labels>)> = BTreeMap::new();
            let mut seen = BTreeSet::new();
            for ((name, unit, running, cp), delete) in ops {
                let name = format!("n{name}");
                let changed = if delete {
                    state.remove(&name);
                    w.delete(&name)
                } else {
                    let mut l = Labels::new();
                    if let Some(unit) = unit { l.insert("zone".into(), format!("u{unit}")); }
                    if cp { l.insert(keys::MASTER_ROLE_LABEL.into(), String::new()); }
                    let a = running.then(addressed);
                    state.insert(name.clone(), (l.clone(), a.clone()));
                    w.apply(&name, &l, a.as_ref())
                };
                prop_assert_eq!(&changed, &seen.symmetric_difference(w.watched()).cloned().collect::<BTreeSet<_>>());
                seen = w.watched().clone();
            }
            let unit_of = |(l, _): &(Labels, Option<Labels>)| if is_control_plane(l) { None } else { l.get("zone").cloned() };
            let running = |(_, a): &(Labels, Option<Labels>)| runs_edge_health(a.as_ref());
            for (name, node) in &state {
                let peers = state.iter().filter(|(other, o)| {
                    *other != name && running(o) && unit_of(o).is_some() && unit_of(o) == unit_of(node)
                }).count();
                let want = running(node) && unit_of(node).is_some() && peers >= 1;
                prop_assert_eq!(w.is_watched(name), want, "{}", name);
            }
        }
    }
}
