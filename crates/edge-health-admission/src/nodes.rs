//! The node verdicts the endpoint hooks read: a watch-backed cache of each node's Ready
//! condition and `nodeunhealth` annotation, never a GET per request.
//!
//! Only what the verdict needs is kept: a node's [`NodeFacts`], read once from its
//! annotations and Ready condition when the watch delivers it (not again per review),
//! so a 5k-node cluster costs little memory and a 100-endpoint slice review 100 lookups.
//! Fed by controller-support's watch (a relist arrives as its differences) through its
//! [`Index`] methods, which tests call directly.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use controller_support::ReadinessGate;
use controller_support::watch::{Index, Key, Watch, follow_object};
use edgegrid_core::keys;
use edgegrid_core::protection::{NodeFacts, NodeReading};
use edgegrid_core::unit::membership::{NodeUnitCheck, UnitSource, WatchedNodes};
use edgegrid_core::unit::verdict::{self, AnnotationPatch, ObservedNode, ViewBook, VoteRule, annotation_patch};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::Api;
use serde_json::json;

use crate::metrics::Metrics;
use crate::review::NodeVerdicts;

pub struct NodeCache {
    synced: AtomicBool,
    nodes: RwLock<Known>,
    /// How many agreeing views a verdict takes (`--allow-units-of-two`).
    vote_rule: VoteRule,
}

impl Default for NodeCache {
    /// SuperEdge's node units, as without `--unit-label-key`.
    fn default() -> Self {
        Self::new(UnitSource::NodeUnits)
    }
}

/// The cached nodes' facts, kept whole for the rules of `edgegrid_core::admission`,
/// which look nodes up by name in a map: a review borrows it instead of building one.
struct Known {
    /// Whom edge-health watches; each node's facts carry its answer, updated when a
    /// change elsewhere in its unit changes it.
    watched: WatchedNodes,
    /// Every cached node (some have no facts).
    names: HashSet<String>,
    /// The facts of every node with a Ready condition (nothing to judge by without).
    facts: BTreeMap<String, NodeFacts>,
    /// The nodes that carry an unreachable NoExecute taint (few: the ones a controller
    /// tainted while this webhook could not strip it), as far as the remover reads them.
    tainted: BTreeMap<String, Tainted>,
    /// What the verdict writer reads of each node in a unit (see [`crate::verdict_writer`]).
    voters: BTreeMap<String, VoterRecord>,
    /// The memberships and last readable views the writer reads views against.
    views: ViewBook,
}

/// A unit member as the verdict writer reads it: its labels (its units), the view its
/// daemon publishes, whether the cloud hears it (Ready `True`) and its verdict annotation.
#[derive(Clone, Debug)]
struct VoterRecord {
    labels: BTreeMap<String, String>,
    view: Option<String>,
    fresh: bool,
    observed: ObservedNode,
}

/// A node carrying the unreachable NoExecute taint: its resourceVersion (the removal is
/// conditional on it) and each taint's key and effect, in order (the removal's indices).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tainted {
    pub resource_version: Option<String>,
    pub taints: Vec<(Option<String>, Option<String>)>,
}

impl Tainted {
    fn of(node: &Node) -> Option<Self> {
        let taints = node.spec.as_ref().and_then(|s| s.taints.as_ref())?;
        let unreachable = |t: &k8s_openapi::api::core::v1::Taint| {
            t.key == keys::TAINT_UNREACHABLE && t.effect == keys::TAINT_EFFECT_NO_EXECUTE
        };
        taints.iter().any(unreachable).then(|| Self {
            resource_version: node.metadata.resource_version.clone(),
            taints: taints.iter().map(|t| (Some(t.key.clone()), Some(t.effect.clone()))).collect(),
        })
    }
}

impl Known {
    /// Brings the facts of nodes whose watched answer changed up to date.
    fn rewatch(&mut self, changed: impl IntoIterator<Item = String>) {
        for name in changed {
            if let Some(facts) = self.facts.get_mut(&name) {
                facts.watched = self.watched.is_watched(&name);
            }
        }
    }

    fn insert(&mut self, name: String, facts: Option<NodeFacts>) {
        match facts {
            Some(facts) => self.facts.insert(name.clone(), facts),
            None => self.facts.remove(&name),
        };
        self.names.insert(name);
    }

    fn remove(&mut self, name: &str) {
        self.names.remove(name);
        self.facts.remove(name);
        self.tainted.remove(name);
        self.voters.remove(name);
    }
}

impl NodeCache {
    pub fn new(source: UnitSource) -> Self {
        Self {
            synced: AtomicBool::new(false),
            nodes: RwLock::new(Known {
                watched: WatchedNodes::new(source),
                names: HashSet::new(),
                facts: BTreeMap::new(),
                tainted: BTreeMap::new(),
                voters: BTreeMap::new(),
                views: ViewBook::default(),
            }),
            vote_rule: VoteRule::default(),
        }
    }

    /// The cache with the vote's setting (`--allow-units-of-two`).
    pub fn with_vote_rule(mut self, rule: VoteRule) -> Self {
        self.vote_rule = rule;
        self
    }

    /// Whether units are read from the `edge-health-config` ConfigMap.
    pub fn reads_config_map(&self) -> bool {
        self.nodes.read().unwrap_or_else(|p| p.into_inner()).watched.reads_config_map()
    }

    /// The `edge-health-config` ConfigMap changed.
    pub fn set_node_unit_check(&self, check: NodeUnitCheck) {
        let mut known = self.nodes.write().unwrap_or_else(|p| p.into_inner());
        let changed = known.watched.set_node_unit_check(check);
        known.rewatch(changed);
    }

    /// `node` exists as given.
    pub fn apply(&self, node: &Node) {
        let Some(name) = node.metadata.name.clone() else { return };
        let mut known = self.nodes.write().unwrap_or_else(|p| p.into_inner());
        let empty = BTreeMap::new();
        let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
        let changed = known.watched.apply(&name, labels, node.metadata.annotations.as_ref());
        let facts = NodeReading::of_node(node).facts(known.watched.is_watched(&name));
        match Tainted::of(node) {
            Some(tainted) => known.tainted.insert(name.clone(), tainted),
            None => known.tainted.remove(&name),
        };
        // every node of a unit running edge-health may vote or be voted on (a ConfigMap
        // change can put a node with unit labels into a checked unit, so labels decide, not
        // today's units). A node without it (SuperEdge's edge-health, mid-migration) does
        // neither, as the daemons keep it out of their units: its silence must not dilute
        // the majority that votes a dead node down, and a verdict on it from views that
        // never held it would remove what SuperEdge's daemons write (a write fight).
        let runs = edgegrid_core::unit::membership::runs_edge_health(node.metadata.annotations.as_ref());
        if edgegrid_core::unit::membership::is_control_plane(labels) || !runs {
            known.voters.remove(&name);
        } else {
            let view =
                node.metadata.annotations.as_ref().and_then(|a| a.get(keys::EDGE_HEALTH_UNHEALTHY_VIEW_ANNOTATION));
            let ready = NodeReading::of_node(node).ready;
            let record = VoterRecord {
                labels: labels.clone(),
                view: view.cloned(),
                fresh: ready.is_some_and(|r| r.status == Some(keys::CONDITION_TRUE)),
                observed: ObservedNode::from_meta(&node.metadata),
            };
            known.voters.insert(name.clone(), record);
        }
        known.insert(name, facts);
        known.rewatch(changed);
    }

    /// The node is gone (a node that ran edge-health leaves its unit's index too: it can
    /// no longer make a newcomer watched).
    pub fn delete(&self, name: &str) {
        let mut known = self.nodes.write().unwrap_or_else(|p| p.into_inner());
        let changed = known.watched.delete(name);
        known.remove(name);
        known.rewatch(changed);
    }

    /// A full list has been applied: reviews may trust the cache from now on.
    pub fn done(&self) {
        self.synced.store(true, Ordering::SeqCst);
    }

    /// Every cached node carrying the unreachable NoExecute taint that `remove` says should
    /// lose it, with the JSON patch doing so: the taint's removal, after a `test` of the
    /// resourceVersion it was computed from (a node changed since is judged again from the
    /// next event instead). `remove` gets the node's facts and its taints' keys and effects.
    pub fn unreachable_taint_removals(
        &self,
        mut remove: impl FnMut(&NodeFacts, &Tainted) -> Option<json_patch::Patch>,
    ) -> Vec<(String, json_patch::Patch)> {
        let known = self.nodes.read().unwrap_or_else(|p| p.into_inner());
        known
            .tainted
            .iter()
            .filter_map(|(name, tainted)| {
                let mut patch = remove(known.facts.get(name)?, tainted)?;
                let version = tainted.resource_version.clone()?;
                let test = json_patch::PatchOperation::Test(json_patch::TestOperation {
                    path: json_patch::jsonptr::PointerBuf::parse("/metadata/resourceVersion").ok()?,
                    value: json!(version),
                });
                patch.0.insert(0, test);
                Some((name.clone(), patch))
            })
            .collect()
    }

    /// The verdict patches the unit members' published views call for (see
    /// [`crate::verdict_writer`]): each conditional on the resourceVersion it was computed
    /// from.
    pub fn verdict_patches(&self) -> Vec<AnnotationPatch> {
        let mut known = self.nodes.write().unwrap_or_else(|p| p.into_inner());
        let voters: Vec<verdict::Voter> = known
            .voters
            .iter()
            .map(|(name, record)| verdict::Voter {
                name: name.clone(),
                units: known.watched.units_of(&record.labels),
                view: record.view.clone(),
                condemned: record.observed.condemned(),
                fresh: record.fresh,
            })
            .collect();
        let verdicts = verdict::verdicts(&voters, &mut known.views, self.vote_rule);
        verdicts
            .into_iter()
            .filter_map(|(name, verdict)| annotation_patch(&known.voters.get(&name)?.observed, verdict))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.nodes.read().unwrap_or_else(|p| p.into_inner()).names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Index<Node> for &NodeCache {
    fn apply(&mut self, node: Node) {
        NodeCache::apply(self, &node);
    }

    fn delete(&mut self, key: Key) {
        NodeCache::delete(self, &key.name);
    }

    fn done(&mut self) {
        NodeCache::done(self);
    }
}

impl NodeVerdicts for NodeCache {
    fn synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    fn watched(&self, node: &str) -> bool {
        self.nodes.read().unwrap_or_else(|p| p.into_inner()).watched.is_watched(node)
    }

    fn judge<R>(&self, judge: impl FnOnce(&BTreeMap<String, NodeFacts>) -> R) -> R {
        judge(&self.nodes.read().unwrap_or_else(|p| p.into_inner()).facts)
    }
}

/// Keeps `nodes` following the API server: every Node, and (for SuperEdge node units) the
/// `edge-health-config` ConfigMap in `config_namespace`; opens `listed` once both have
/// listed. Runs until the watches end.
pub async fn follow(
    client: kube::Client,
    nodes: Arc<NodeCache>,
    metrics: Arc<Metrics>,
    listed: ReadinessGate,
    config_namespace: String,
) {
    let config_synced = Arc::new(AtomicBool::new(!nodes.reads_config_map()));
    let unit_config = async {
        if !nodes.reads_config_map() {
            return std::future::pending().await;
        }
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &config_namespace);
        let on_change = |map: Option<&ConfigMap>| {
            nodes.set_node_unit_check(NodeUnitCheck::of_config_map(map));
            listed.set(nodes.synced() && config_synced.load(Ordering::SeqCst));
        };
        follow_object(api, keys::EDGE_HEALTH_CONFIGMAP, on_change, || config_synced.store(true, Ordering::SeqCst)).await
    };
    let feed = NodeFeed { nodes: &nodes, metrics, listed: listed.clone(), config_synced: config_synced.clone() };
    tokio::select! {
        () = Watch::new(Api::<Node>::all(client.clone())).run(feed) => {}
        () = unit_config => {}
    }
}

/// The node cache, counted, and readiness once it (and the ConfigMap) has listed.
struct NodeFeed<'a> {
    nodes: &'a NodeCache,
    metrics: Arc<Metrics>,
    listed: ReadinessGate,
    config_synced: Arc<AtomicBool>,
}

impl NodeFeed<'_> {
    fn changed(&self) {
        self.metrics.cached_nodes.set(i64::try_from(self.nodes.len()).unwrap_or(i64::MAX));
        self.listed.set(self.nodes.synced() && self.config_synced.load(Ordering::SeqCst));
    }
}

impl Index<Node> for NodeFeed<'_> {
    fn apply(&mut self, node: Node) {
        self.nodes.apply(&node);
        self.changed();
    }

    fn delete(&mut self, key: Key) {
        self.nodes.delete(&key.name);
        self.changed();
    }

    fn done(&mut self) {
        self.nodes.done();
        self.changed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgegrid_core::protection::ProtectionPolicy;

    fn node(name: &str, unit: &str, runs_edge_health: bool) -> Node {
        let annotations =
            if runs_edge_health { json!({keys::EDGE_HEALTH_ADDRESS_ANNOTATION: "10.0.0.1:51005"}) } else { json!({}) };
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"zone": unit}, "annotations": annotations},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-11-22T10:00:00Z"}]}}))
        .expect("a node")
    }

    /// The facts a review judges by, for `name`, as the endpoint hooks see them.
    fn watched(cache: &NodeCache, name: &str) -> (bool, Option<bool>) {
        (cache.watched(name), cache.judge(|f| f.get(name).map(|f| f.watched)))
    }

    /// A node's facts follow its unit: a peer running edge-health joining, leaving by a
    /// relabel, by deletion, and by a relist that no longer finds it.
    #[test]
    fn facts_follow_whether_a_peer_watches_the_node() {
        let cache = NodeCache::new(UnitSource::LabelKey("zone".into()));
        let yes = (true, Some(true));
        let no = (false, Some(false));
        cache.apply(&node("a", "u1", true));
        cache.done();
        assert_eq!(watched(&cache, "a"), no, "alone in its unit");
        cache.apply(&node("b", "u1", false));
        assert_eq!(watched(&cache, "a"), no, "its peer runs no edge-health");
        cache.apply(&node("b", "u1", true));
        assert_eq!((watched(&cache, "a"), watched(&cache, "b")), (yes, yes));
        cache.apply(&node("b", "u2", true));
        assert_eq!(watched(&cache, "a"), no, "relabelled away");
        cache.apply(&node("b", "u1", true));
        assert_eq!(watched(&cache, "a"), yes);
        cache.delete("b");
        assert_eq!(watched(&cache, "a"), no, "deleted");
        cache.apply(&node("b", "u1", true));
        assert_eq!(watched(&cache, "a"), yes);
        cache.apply(&node("c", "u3", true));
        assert_eq!(watched(&cache, "c"), no, "alone in u3");
        // a relist that finds only `a` (`b` and `c` were deleted while the watch was down),
        // as the watch reports it
        cache.apply(&node("a", "u1", true));
        cache.delete("b");
        cache.delete("c");
        cache.done();
        assert_eq!((watched(&cache, "a"), cache.len()), (no, 1), "gone by relist");
        // `c` is gone from the index too: it cannot watch a newcomer to u3
        cache.apply(&node("d", "u3", true));
        assert_eq!(watched(&cache, "d"), no, "no ghost peer");
    }

    /// The remover's patch, applied to the node it was computed from: the unreachable
    /// NoExecute taint goes, the rest stays; against a newer resourceVersion it does not apply.
    #[test]
    fn removal_patches_apply_only_to_the_node_they_were_computed_from() {
        let cache = NodeCache::new(UnitSource::LabelKey("zone".into()));
        let tainted = |name: &str| {
            let mut node = serde_json::to_value(node(name, "u1", true)).unwrap();
            node["metadata"]["resourceVersion"] = json!("41");
            node["spec"] = json!({"taints": [
                {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
                {"key": "dedicated", "value": "x", "effect": "NoExecute"},
                {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-11-22T10:00:05Z"}]});
            node
        };
        for name in ["a", "b"] {
            cache.apply(&serde_json::from_value(tainted(name)).unwrap());
        }
        cache.apply(&node("c", "u1", true));
        let now = "2026-11-22T10:30:00Z".parse().unwrap();
        let removals = cache.unreachable_taint_removals(|facts, tainted| {
            let taints = tainted.taints.iter().map(|(k, e)| (k.as_deref(), e.as_deref()));
            edgegrid_core::admission::taints_patch(taints, facts, now, ProtectionPolicy::default())
        });
        assert_eq!(removals.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["a", "b"], "c carries no taint");
        let mut object = tainted("a");
        json_patch::patch(&mut object, &removals[0].1).expect("applies to the node it was computed from");
        assert_eq!(
            object["spec"]["taints"],
            json!([{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
                {"key": "dedicated", "value": "x", "effect": "NoExecute"}])
        );
        let mut newer = tainted("a");
        newer["metadata"]["resourceVersion"] = json!("42");
        assert!(json_patch::patch(&mut newer, &removals[0].1).is_err(), "a changed node is judged again");
        // the taint gone from the cache: nothing left to remove for it
        cache.apply(&serde_json::from_value(object).unwrap());
        let left = cache.unreachable_taint_removals(|_, _| Some(json_patch::Patch(vec![])));
        assert_eq!(left.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["b"]);
    }

    #[test]
    fn node_units_follow_the_config_map() {
        let unit = |name: &str, u: &str| {
            let mut n = node(name, "", true);
            n.metadata.labels = Some(BTreeMap::from([(u.to_string(), keys::NODE_UNIT_LABEL_VALUE.to_string())]));
            n
        };
        let cache = NodeCache::default();
        assert!(cache.reads_config_map());
        cache.apply(&unit("a", "u1"));
        cache.apply(&unit("b", "u2"));
        assert!(cache.watched("a") && cache.watched("b"), "no ConfigMap: the whole cluster is one unit");
        cache.set_node_unit_check(NodeUnitCheck::Units(["u1".to_string()].into()));
        assert_eq!(watched(&cache, "a"), (false, Some(false)), "u1 checked, but a is alone in it");
    }

    /// A view over `members` holding `unhealthy` Unhealthy (what a daemon publishes).
    fn view(members: &[&str], unhealthy: &[&str]) -> String {
        verdict::View {
            members: verdict::members_version(members.iter().copied()),
            unhealthy: unhealthy.iter().map(|s| s.to_string()).collect(),
            undecided: Default::default(),
        }
        .format()
    }

    /// A unit member publishing `view`, at resourceVersion 7, Ready `ready`.
    fn voter(name: &str, unit: &str, view: Option<&str>, unhealth: Option<&str>, ready: &str) -> serde_json::Value {
        let mut annotations = json!({keys::EDGE_HEALTH_ADDRESS_ANNOTATION: "10.0.0.1:51005"});
        if let Some(view) = view {
            annotations[keys::EDGE_HEALTH_UNHEALTHY_VIEW_ANNOTATION] = json!(view);
        }
        if let Some(value) = unhealth {
            annotations[keys::NODE_UNHEALTH_ANNOTATION] = json!(value);
        }
        json!({"metadata": {"name": name, "resourceVersion": "7", "labels": {"zone": unit}, "annotations": annotations},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}})
    }

    fn apply_all(cache: &NodeCache, nodes: &[serde_json::Value]) {
        for node in nodes {
            cache.apply(&serde_json::from_value(node.clone()).unwrap());
        }
    }

    fn written(patches: &[AnnotationPatch]) -> Vec<(&str, &str)> {
        patches.iter().map(|p| (p.node.as_str(), p.verdict.as_str())).collect()
    }

    const U1: [&str; 4] = ["a1", "a2", "a3", "a4"];

    /// The writer marks a node two agreeing views hold unhealthy, marks it undecided on a
    /// tie, and clears it once two clear it; each patch applies to the node it was computed
    /// from (and, by its resourceVersion test, to no later one). A node in no unit, and the
    /// nodes of a unit whose members publish nothing, are left alone.
    #[test]
    fn verdict_patches_follow_the_published_views() {
        let cache = NodeCache::new(UnitSource::LabelKey("zone".into()));
        let (accuse, clear) = (view(&U1, &["a4"]), view(&U1, &[]));
        let unsure = verdict::View {
            members: verdict::members_version(U1),
            undecided: ["a4".to_string()].into(),
            ..Default::default()
        }
        .format();
        let nodes = [
            voter("a1", "u1", Some(&accuse), None, "True"),
            voter("a2", "u1", Some(&accuse), None, "True"),
            // a3 is undecided about a4: silent on it
            voter("a3", "u1", Some(&unsure), None, "True"),
            voter("a4", "u1", Some(&clear), None, "True"),
            // u2's members publish nothing (edge writers): b2's annotation stays
            voter("b1", "u2", None, None, "True"),
            voter("b2", "u2", None, Some("yes"), "True"),
        ];
        apply_all(&cache, &nodes);
        let mut lone = voter("lone", "", Some(&view(&["lone"], &[])), None, "True");
        lone["metadata"]["labels"] = json!({});
        apply_all(&cache, &[lone]);
        let patches = cache.verdict_patches();
        assert_eq!(written(&patches), [("a4", "unhealthy")], "the others are cleared by two or three");
        let mut a4 = nodes[3].clone();
        json_patch::patch(&mut a4, &patches[0].patch).expect("applies to the node it was computed from");
        assert_eq!(a4["metadata"]["annotations"][keys::NODE_UNHEALTH_ANNOTATION], "yes");
        let mut newer = nodes[3].clone();
        newer["metadata"]["resourceVersion"] = json!("8");
        assert!(json_patch::patch(&mut newer, &patches[0].patch).is_err(), "not to a newer node");

        // written; then a1 sees it back: one against one is a tie, which protects nobody
        a4["metadata"]["resourceVersion"] = json!("9");
        apply_all(&cache, &[a4.clone(), voter("a1", "u1", Some(&clear), None, "True")]);
        let patches = cache.verdict_patches();
        assert_eq!(written(&patches), [("a4", "undecided")]);
        json_patch::patch(&mut a4, &patches[0].patch).expect("applies");
        assert_eq!(a4["metadata"]["annotations"][keys::NODE_UNHEALTH_ANNOTATION], "undecided");
        a4["metadata"]["resourceVersion"] = json!("10");
        apply_all(&cache, &[a4.clone(), voter("a2", "u1", Some(&clear), None, "True")]);
        let patches = cache.verdict_patches();
        assert_eq!(written(&patches), [("a4", "healthy")]);
        json_patch::patch(&mut a4, &patches[0].patch).expect("applies");
        assert_eq!(a4["metadata"]["annotations"].get(keys::NODE_UNHEALTH_ANNOTATION), None);
        assert_eq!(a4["metadata"]["annotations"][keys::EDGE_HEALTH_UNHEALTHY_VIEW_ANNOTATION], clear, "the rest stays");
    }

    /// A unit mid-migration: s1..s3 run SuperEdge's edge-health (no address, no view), a1
    /// and a2 ours. a3 of ours is dead and both of ours hold it unhealthy: voted down (the
    /// SuperEdge nodes neither vote nor dilute the majority). s1, dead and annotated by
    /// SuperEdge's daemons, is left alone although every view of ours omits it: ours never
    /// watched it, and clearing it would fight SuperEdge's writes.
    #[test]
    fn nodes_not_running_edge_health_neither_vote_nor_are_voted_on() {
        let cache = NodeCache::new(UnitSource::LabelKey("zone".into()));
        let superedge = |name: &str, unhealth: Option<&str>| {
            let mut node = json!({"metadata": {"name": name, "resourceVersion": "7", "labels": {"zone": "u1"}}});
            if let Some(value) = unhealth {
                node["metadata"]["annotations"] = json!({keys::NODE_UNHEALTH_ANNOTATION: value});
            }
            node
        };
        let ours = ["a1", "a2", "a3"];
        let nodes = [
            superedge("s1", Some("yes")),
            superedge("s2", None),
            superedge("s3", None),
            voter("a1", "u1", Some(&view(&ours, &["a3"])), None, "True"),
            voter("a2", "u1", Some(&view(&ours, &["a3"])), None, "True"),
            voter("a3", "u1", Some(&view(&ours, &[])), None, "Unknown"),
        ];
        apply_all(&cache, &nodes);
        let patches = cache.verdict_patches();
        assert_eq!(written(&patches), [("a3", "unhealthy")]);
        let mut a3 = nodes[5].clone();
        json_patch::patch(&mut a3, &patches[0].patch).expect("applies to the node it was computed from");
        assert_eq!(a3["metadata"]["annotations"][keys::NODE_UNHEALTH_ANNOTATION], "yes");
        // s2 starts our daemon (publishes its address) without a view yet: it is silent,
        // and the views written before it joined still read
        apply_all(&cache, &[voter("s2", "u1", None, None, "True")]);
        let patches = cache.verdict_patches();
        assert_eq!(written(&patches), [("a3", "unhealthy"), ("s2", "undecided")], "nobody's view knew s2");
    }

    /// SuperEdge's readers: a present `nodeunhealth` is the vote whatever its value. A
    /// member so annotated (but "undecided") no longer votes (a1 and a3's accusation of a5
    /// then outnumbers a4 alone), and two clearing views remove the annotation, whatever
    /// its value; the patches applied to the nodes they were computed from.
    #[test]
    fn the_writer_reads_the_annotation_by_its_presence() {
        let five = ["a1", "a2", "a3", "a4", "a5"];
        for value in [None, Some("yes"), Some(""), Some("no"), Some("true"), Some("undecided")] {
            let cache = NodeCache::new(UnitSource::LabelKey("zone".into()));
            let (accuse, clear) = (view(&five, &["a5"]), view(&five, &[]));
            let nodes = [
                voter("a1", "u1", Some(&accuse), None, "True"),
                voter("a2", "u1", Some(&clear), value, "True"),
                voter("a3", "u1", Some(&accuse), None, "True"),
                voter("a4", "u1", Some(&clear), None, "True"),
                voter("a5", "u1", Some(&clear), None, "True"),
            ];
            apply_all(&cache, &nodes);
            let patches = cache.verdict_patches();
            let condemned = value.is_some_and(|v| v != "undecided");
            let a5 = if condemned { "unhealthy" } else { "undecided" };
            let want: Vec<(&str, &str)> =
                if value.is_none() { vec![("a5", a5)] } else { vec![("a2", "healthy"), ("a5", a5)] };
            assert_eq!(written(&patches), want, "nodeunhealth {value:?}");
            if value.is_some() {
                let mut a2 = nodes[1].clone();
                json_patch::patch(&mut a2, &patches[0].patch).expect("applies to the node it was computed from");
                assert_eq!(
                    a2["metadata"]["annotations"].get(keys::NODE_UNHEALTH_ANNOTATION),
                    None,
                    "{value:?} removed"
                );
                assert_eq!(a2["metadata"]["annotations"][keys::EDGE_HEALTH_UNHEALTHY_VIEW_ANNOTATION], clear);
            }
            let mut node = nodes[4].clone();
            json_patch::patch(&mut node, &patches.last().unwrap().patch)
                .expect("applies to the node it was computed from");
            let want = if condemned { "yes" } else { "undecided" };
            assert_eq!(node["metadata"]["annotations"][keys::NODE_UNHEALTH_ANNOTATION], want);
        }
    }

    /// Three members die at once and their last views clear each other; the two the cloud
    /// still hears accuse them. The views of the members the cloud hears (Ready True) decide
    /// first, so the dead are voted down (counted all together, two against two would be a
    /// tie, and the stale views of a larger group would keep them protected).
    #[test]
    fn the_views_of_members_the_cloud_hears_decide_first() {
        let five = ["a1", "a2", "a3", "a4", "a5"];
        let cache = NodeCache::new(UnitSource::LabelKey("zone".into()));
        let (accuse, stale) = (view(&five, &["a3", "a4", "a5"]), view(&five, &[]));
        apply_all(
            &cache,
            &[
                voter("a1", "u1", Some(&accuse), None, "True"),
                voter("a2", "u1", Some(&accuse), None, "True"),
                voter("a3", "u1", Some(&stale), None, "Unknown"),
                voter("a4", "u1", Some(&stale), None, "Unknown"),
                voter("a5", "u1", Some(&stale), None, "Unknown"),
            ],
        );
        assert_eq!(written(&cache.verdict_patches()), [("a3", "unhealthy"), ("a4", "unhealthy"), ("a5", "unhealthy")]);
        // a whole unit cut from the cloud: nobody fresh, the last views protect everyone
        let cut = NodeCache::new(UnitSource::LabelKey("zone".into()));
        apply_all(&cut, &five.map(|n| voter(n, "u1", Some(&stale), None, "Unknown")));
        assert_eq!(written(&cut.verdict_patches()), []);
    }
}
