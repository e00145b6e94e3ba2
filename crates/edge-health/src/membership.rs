//! Which nodes are the local node's peers: the members of the units it belongs to,
//! derived from node metadata alone (name, labels, and whether the node runs this
//! daemon) and kept current as nodes are added, relabelled and deleted.
//!
//! Only nodes running this daemon (publishing its address,
//! [`edgegrid_core::unit::membership::runs_edge_health`], the cloud components' own test
//! for "runs edge-health") are members. A node of the unit without it, such as one still
//! running SuperEdge's edge-health while its unit migrates, cannot be probed (no address),
//! casts no ballot and writes nothing: counted as a checker it would only dilute every
//! majority (its silence could keep a dead node from ever being voted down, which the cloud
//! would then keep protecting although no peer watching it says it is alive), and named the
//! writer it would leave every verdict unwritten. So it is left out whole: a member's fate
//! is decided by the peers that really watch it, and nothing this daemon concludes or
//! writes is ever about a node it does not watch.
//!
//! Two ways to say what a unit is:
//! - [`UnitSource::LabelKey`] (`--unit-label-key`): nodes sharing the local node's value
//!   of one label key are a unit, the same grouping a ServiceGrid's `gridUniqKey` makes.
//!   A node without the key belongs to no unit. An empty value is a value like any other,
//!   as in the topology engine.
//! - [`UnitSource::NodeUnits`]: SuperEdge's node units, labels `<unit>=nodeunits.superedge.io`,
//!   read as SuperEdge v0.9.0 reads its `edge-health-config` ConfigMap ([`NodeUnitCheck`]):
//!   without the ConfigMap, or with `unit-internal-check: "false"`, every node of the
//!   cluster is checked (one unit, [`UnitId::Cluster`]); otherwise only the units listed in
//!   `check-units` are, each a unit of its own. A node may be in several units.
//!
//! Where SuperEdge differs, on purpose (each is a test below):
//! - control-plane nodes (either role label) are never members; SuperEdge excluded only
//!   the legacy `master` label and only outside unit mode;
//! - a node in several checked units has the members of all of them as peers (union);
//!   SuperEdge selected nodes carrying all of them at once (a label-selector conjunction);
//! - a node in no checked unit has no peers; SuperEdge's empty selector matched every
//!   node, although its documentation says such a node "will only detect itself".
//!
//! Every member computes the same units from the same labels, so [`UnitMembership::home_unit`]
//! names, for any node, the one unit whose members write its annotation.
//!
//! This module never reads the API: the daemon feeds it node metadata and the ConfigMap.

use std::collections::{BTreeMap, BTreeSet};

// The unit definitions are core's, shared with the cloud components that decide whom the
// edge rule may protect: a daemon's peers are exactly the members core says it has.
pub use edgegrid_core::unit::membership::{
    Labels, NodeUnitCheck, UnitId, UnitSource, is_control_plane, runs_edge_health,
};

/// One unit the local node belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unit {
    pub id: UnitId,
    /// Sorted, unique, control-plane nodes excluded, the local node included.
    pub members: Vec<String>,
}

/// What a change did to the local node's peers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MembershipChange {
    /// Nodes that became peers.
    pub joined: BTreeSet<String>,
    /// Nodes that stopped being peers.
    pub left: BTreeSet<String>,
    /// Whether any unit's id or member list changed (selection and votes must follow).
    pub units_changed: bool,
}

impl MembershipChange {
    pub fn is_empty(&self) -> bool {
        self.joined.is_empty() && self.left.is_empty() && !self.units_changed
    }
}

/// What membership reads of a node.
#[derive(Clone, Debug, PartialEq, Eq)]
struct KnownNode {
    labels: Labels,
    /// It publishes this daemon's address (see the module comment).
    runs_edge_health: bool,
}

/// The local node's units and peers, fed node metadata.
#[derive(Clone, Debug)]
pub struct UnitMembership {
    local: String,
    source: UnitSource,
    check: NodeUnitCheck,
    nodes: BTreeMap<String, KnownNode>,
    units: Vec<Unit>,
    peers: BTreeSet<String>,
}

impl UnitMembership {
    pub fn new(local: impl Into<String>, source: UnitSource) -> Self {
        Self {
            local: local.into(),
            source,
            check: NodeUnitCheck::default(),
            nodes: BTreeMap::new(),
            units: Vec::new(),
            peers: BTreeSet::new(),
        }
    }

    pub fn local(&self) -> &str {
        &self.local
    }

    /// The local node's units, ordered by id.
    pub fn units(&self) -> &[Unit] {
        &self.units
    }

    pub fn unit(&self, id: &UnitId) -> Option<&Unit> {
        self.units.iter().find(|u| &u.id == id)
    }

    /// Members of any of the local node's units, the local node excluded.
    pub fn peers(&self) -> &BTreeSet<String> {
        &self.peers
    }

    pub fn is_peer(&self, name: &str) -> bool {
        self.peers.contains(name)
    }

    /// The lowest of the units `node` belongs to: the unit whose members write its
    /// annotation, so a node in several units still has exactly one writer. `None` for an
    /// unknown or control-plane node, one in no checked unit, or one not running this
    /// daemon.
    pub fn home_unit(&self, node: &str) -> Option<UnitId> {
        self.nodes.get(node).and_then(|known| self.units_of(known).into_iter().next())
    }

    /// A node running this daemon was added or its labels changed (the simulation's and
    /// the tests' shorthand for [`UnitMembership::apply_node`]).
    pub fn apply(&mut self, name: &str, labels: &Labels) -> MembershipChange {
        self.apply_node(name, labels, true)
    }

    /// A node was added or its metadata changed. `runs_edge_health`: whether it publishes
    /// this daemon's address ([`runs_edge_health`] of its annotations).
    pub fn apply_node(&mut self, name: &str, labels: &Labels, runs_edge_health: bool) -> MembershipChange {
        // node heartbeats arrive as metadata updates that change neither: nothing to do
        if self.nodes.get(name).is_some_and(|k| k.runs_edge_health == runs_edge_health && k.labels == *labels) {
            return MembershipChange::default();
        }
        self.nodes.insert(name.to_string(), KnownNode { labels: labels.clone(), runs_edge_health });
        self.recompute()
    }

    /// A node was deleted.
    pub fn delete(&mut self, name: &str) -> MembershipChange {
        if self.nodes.remove(name).is_none() {
            return MembershipChange::default();
        }
        self.recompute()
    }

    /// A relist of nodes that all run this daemon (shorthand for
    /// [`UnitMembership::replace_all_nodes`]).
    pub fn replace_all(&mut self, nodes: impl IntoIterator<Item = (String, Labels)>) -> MembershipChange {
        self.replace_all_nodes(nodes.into_iter().map(|(name, labels)| (name, labels, true)))
    }

    /// A relist: these are all the nodes there are, with whether each runs this daemon.
    pub fn replace_all_nodes(&mut self, nodes: impl IntoIterator<Item = (String, Labels, bool)>) -> MembershipChange {
        self.nodes = nodes
            .into_iter()
            .map(|(name, labels, runs_edge_health)| (name, KnownNode { labels, runs_edge_health }))
            .collect();
        self.recompute()
    }

    /// The `edge-health-config` ConfigMap changed (only read with [`UnitSource::NodeUnits`]).
    pub fn set_node_unit_check(&mut self, check: NodeUnitCheck) -> MembershipChange {
        if self.check == check {
            return MembershipChange::default();
        }
        self.check = check;
        self.recompute()
    }

    /// The ids of the units a node belongs to, lowest first: none when it does not run
    /// this daemon.
    fn units_of(&self, node: &KnownNode) -> BTreeSet<UnitId> {
        if !node.runs_edge_health {
            return BTreeSet::new();
        }
        edgegrid_core::unit::membership::units_of(&self.source, &self.check, &node.labels)
    }

    fn recompute(&mut self) -> MembershipChange {
        let local_units = self.nodes.get(&self.local).map(|known| self.units_of(known)).unwrap_or_default();
        let mut members: BTreeMap<UnitId, Vec<String>> =
            local_units.iter().map(|id| (id.clone(), Vec::new())).collect();
        if !members.is_empty() {
            // nodes iterate in name order, so member lists come out sorted
            for (name, known) in &self.nodes {
                for id in self.units_of(known) {
                    if let Some(list) = members.get_mut(&id) {
                        list.push(name.clone());
                    }
                }
            }
        }
        let units: Vec<Unit> = members.into_iter().map(|(id, members)| Unit { id, members }).collect();
        let peers: BTreeSet<String> =
            units.iter().flat_map(|u| u.members.iter()).filter(|m| **m != self.local).cloned().collect();
        let change = MembershipChange {
            joined: peers.difference(&self.peers).cloned().collect(),
            left: self.peers.difference(&peers).cloned().collect(),
            units_changed: units != self.units,
        };
        self.units = units;
        self.peers = peers;
        change
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgegrid_core::keys::{
        CONTROL_PLANE_ROLE_LABEL, EDGE_HEALTH_CHECK_UNITS_KEY, EDGE_HEALTH_UNIT_INTERNAL_CHECK_KEY, MASTER_ROLE_LABEL,
        NODE_UNIT_LABEL_VALUE,
    };

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn members(m: &UnitMembership) -> Vec<(UnitId, Vec<&str>)> {
        m.units().iter().map(|u| (u.id.clone(), u.members.iter().map(String::as_str).collect())).collect()
    }

    fn zone(value: &str) -> Labels {
        labels(&[("zone", value)])
    }

    #[test]
    fn label_key_peers_share_the_local_value() {
        let mut m = UnitMembership::new("a", UnitSource::LabelKey("zone".into()));
        m.apply("b", &zone("z1"));
        m.apply("c", &zone("z2"));
        m.apply("d", &labels(&[]));
        assert!(m.peers().is_empty(), "the local node is not known yet");
        let change = m.apply("a", &zone("z1"));
        assert_eq!(change, MembershipChange { joined: names(&["b"]), left: names(&[]), units_changed: true });
        assert_eq!(members(&m), vec![(UnitId::LabelValue("z1".into()), vec!["a", "b"])]);
        assert!(m.is_peer("b") && !m.is_peer("c") && !m.is_peer("d") && !m.is_peer("a"));
    }

    #[test]
    fn membership_follows_relabels_and_deletes() {
        let mut m = UnitMembership::new("a", UnitSource::LabelKey("zone".into()));
        m.replace_all([("a".into(), zone("z1")), ("b".into(), zone("z1")), ("c".into(), zone("z2"))]);
        assert_eq!(m.peers(), &names(&["b"]));

        let change = m.apply("c", &zone("z1"));
        assert_eq!(change.joined, names(&["c"]));
        assert_eq!(m.peers(), &names(&["b", "c"]));

        let change = m.delete("b");
        assert_eq!(change, MembershipChange { joined: names(&[]), left: names(&["b"]), units_changed: true });

        // the local node moves: its old peer leaves, the new unit's members join
        m.apply("d", &zone("z3"));
        let change = m.apply("a", &zone("z3"));
        assert_eq!(change, MembershipChange { joined: names(&["d"]), left: names(&["c"]), units_changed: true });

        // the local node loses the key: no unit, no peers
        let change = m.apply("a", &labels(&[]));
        assert_eq!(change.left, names(&["d"]));
        assert!(m.units().is_empty());

        // a relist drops what it does not mention
        m.apply("a", &zone("z3"));
        let change = m.replace_all([("a".into(), zone("z3"))]);
        assert_eq!(change.left, names(&["d"]));
    }

    #[test]
    fn unchanged_metadata_is_no_change() {
        let mut m = UnitMembership::new("a", UnitSource::LabelKey("zone".into()));
        m.apply("a", &zone("z1"));
        m.apply("b", &zone("z1"));
        assert!(m.apply("b", &zone("z1")).is_empty());
        assert!(m.delete("unknown").is_empty());
        // a label unrelated to units changes nothing visible either
        assert!(m.apply("b", &labels(&[("zone", "z1"), ("other", "x")])).is_empty());
    }

    #[test]
    fn control_plane_nodes_are_never_members() {
        let mut m = UnitMembership::new("a", UnitSource::LabelKey("zone".into()));
        m.apply("a", &zone("z1"));
        m.apply("cp1", &labels(&[("zone", "z1"), (CONTROL_PLANE_ROLE_LABEL, "")]));
        m.apply("cp2", &labels(&[("zone", "z1"), (MASTER_ROLE_LABEL, "true")]));
        m.apply("b", &zone("z1"));
        assert_eq!(m.peers(), &names(&["b"]));
        assert_eq!(m.home_unit("cp1"), None);

        // a node that becomes control plane leaves
        let change = m.apply("b", &labels(&[("zone", "z1"), (CONTROL_PLANE_ROLE_LABEL, "")]));
        assert_eq!(change.left, names(&["b"]));

        // a control-plane local node has no peers at all
        let mut cp = UnitMembership::new("cp1", UnitSource::NodeUnits);
        cp.apply("cp1", &labels(&[(CONTROL_PLANE_ROLE_LABEL, "")]));
        cp.apply("b", &labels(&[]));
        assert!(cp.peers().is_empty());
    }

    /// A node of the unit not running this daemon (SuperEdge's edge-health mid-migration,
    /// or ours not started yet) is no member: not a peer, never anyone's writer; it joins
    /// once it publishes the address, and leaves again if it stops publishing it. The local
    /// node is held to the same rule, so every member computes the same member list.
    #[test]
    fn nodes_not_running_this_daemon_are_not_members() {
        let mut m = UnitMembership::new("b", UnitSource::LabelKey("zone".into()));
        m.replace_all_nodes([
            ("a".into(), zone("z1"), false),
            ("b".into(), zone("z1"), true),
            ("c".into(), zone("z1"), true),
            ("d".into(), zone("z1"), false),
        ]);
        assert_eq!(members(&m), vec![(UnitId::LabelValue("z1".into()), vec!["b", "c"])]);
        assert_eq!(m.peers(), &names(&["c"]));
        assert_eq!((m.home_unit("a"), m.home_unit("c")), (None, Some(UnitId::LabelValue("z1".into()))));
        // "a" starts our daemon: it publishes its address and joins
        let change = m.apply_node("a", &zone("z1"), true);
        assert_eq!(change, MembershipChange { joined: names(&["a"]), left: names(&[]), units_changed: true });
        assert!(m.apply_node("a", &zone("z1"), true).is_empty(), "the same again");
        // and leaves once it no longer does
        let change = m.apply_node("a", &zone("z1"), false);
        assert_eq!(change, MembershipChange { joined: names(&[]), left: names(&["a"]), units_changed: true });
        // a local node not publishing its own address is in no unit either
        let mut local = UnitMembership::new("a", UnitSource::LabelKey("zone".into()));
        local.replace_all_nodes([("a".into(), zone("z1"), false), ("b".into(), zone("z1"), true)]);
        assert!(local.units().is_empty() && local.peers().is_empty());
        assert_eq!(local.apply_node("a", &zone("z1"), true).joined, names(&["b"]));
    }

    #[test]
    fn empty_label_value_is_a_unit_like_any_other() {
        let mut m = UnitMembership::new("a", UnitSource::LabelKey("zone".into()));
        m.apply("a", &zone(""));
        m.apply("b", &zone(""));
        m.apply("c", &zone("z1"));
        assert_eq!(m.peers(), &names(&["b"]));
    }

    fn unit_labels(units: &[&str]) -> Labels {
        units.iter().map(|u| (u.to_string(), NODE_UNIT_LABEL_VALUE.to_string())).collect()
    }

    fn config(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        labels(pairs)
    }

    #[test]
    fn without_unit_checking_the_whole_cluster_is_one_unit() {
        let mut m = UnitMembership::new("a", UnitSource::NodeUnits);
        m.apply("a", &unit_labels(&["u1"]));
        m.apply("b", &unit_labels(&["u2"]));
        m.apply("c", &labels(&[]));
        m.apply("cp", &labels(&[(MASTER_ROLE_LABEL, "")]));
        assert_eq!(members(&m), vec![(UnitId::Cluster, vec!["a", "b", "c"])]);
        assert_eq!(m.home_unit("c"), Some(UnitId::Cluster));
    }

    #[test]
    fn unit_checking_uses_the_listed_units_the_local_node_is_in() {
        let mut m = UnitMembership::new("a", UnitSource::NodeUnits);
        m.apply("a", &unit_labels(&["u1", "u2", "u3"]));
        m.apply("b", &unit_labels(&["u1"]));
        m.apply("c", &unit_labels(&["u2"]));
        m.apply("d", &unit_labels(&["u3"]));
        m.apply("e", &unit_labels(&["u1", "u2"]));
        m.apply("f", &labels(&[("u1", "something-else")]));
        let change = m.set_node_unit_check(NodeUnitCheck::from_config_map(Some(&config(&[
            (EDGE_HEALTH_UNIT_INTERNAL_CHECK_KEY, "true"),
            (EDGE_HEALTH_CHECK_UNITS_KEY, "u1,u2"),
        ]))));
        assert!(change.left.contains("d") && change.left.contains("f"));
        // union of the checked units (SuperEdge: only nodes in both u1 and u2, i.e. e)
        assert_eq!(
            members(&m),
            vec![
                (UnitId::NodeUnit("u1".into()), vec!["a", "b", "e"]),
                (UnitId::NodeUnit("u2".into()), vec!["a", "c", "e"]),
            ]
        );
        assert_eq!(m.peers(), &names(&["b", "c", "e"]));
        // one writer per node: the lowest checked unit it is in
        assert_eq!(m.home_unit("e"), Some(UnitId::NodeUnit("u1".into())));
        assert_eq!(m.home_unit("c"), Some(UnitId::NodeUnit("u2".into())));
        assert_eq!(m.home_unit("d"), None, "u3 is not checked");
        assert_eq!(m.home_unit("unknown"), None);
    }

    #[test]
    fn a_node_in_no_checked_unit_has_no_peers() {
        // SuperEdge's empty label selector matched every node here
        let mut m = UnitMembership::new("a", UnitSource::NodeUnits);
        m.set_node_unit_check(NodeUnitCheck::Units(names(&["u1"])));
        m.apply("a", &unit_labels(&["u9"]));
        m.apply("b", &unit_labels(&["u1"]));
        m.apply("c", &labels(&[]));
        assert!(m.peers().is_empty());
        assert!(m.units().is_empty());
        // and with an empty check-units list, nobody has peers
        m.set_node_unit_check(NodeUnitCheck::Units(names(&[])));
        m.apply("a", &unit_labels(&["u1"]));
        assert!(m.peers().is_empty());
    }

    #[test]
    fn config_map_changes_move_membership() {
        let mut m = UnitMembership::new("a", UnitSource::NodeUnits);
        m.apply("a", &unit_labels(&["u1"]));
        m.apply("b", &unit_labels(&["u1"]));
        m.apply("c", &unit_labels(&["u2"]));
        assert_eq!(m.peers(), &names(&["b", "c"]));
        let change = m.set_node_unit_check(NodeUnitCheck::Units(names(&["u1"])));
        assert_eq!(change.left, names(&["c"]));
        assert!(m.set_node_unit_check(NodeUnitCheck::Units(names(&["u1"]))).is_empty());
        let change = m.set_node_unit_check(NodeUnitCheck::WholeCluster);
        assert_eq!(change.joined, names(&["c"]));
    }
}
