//! The patches are computed on the raw JSON the apiserver sent (not on typed structs), so
//! fields this code does not know, from newer API versions, pass through untouched.
//!
//! Each rule reads only a few fields, through a small reading ([`NodeReading`], taint
//! keys and effects, [`SliceEndpoint`], [`Subset`]) that a caller fills however it read the
//! object: from a `serde_json::Value` (the `&Value` functions here, which read a field of
//! another type as absent) or from its own typed reading (the admission webhook's, which
//! reads one pass over the request text). The rule itself is written once, on the reading.

use std::collections::BTreeMap;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation};
use serde_json::Value;

use crate::keys;
use crate::protection::{self, NodeFacts, NodeReading, ProtectionPolicy, Timestamp};

/// What the edge rule needs to know about a node, from its JSON ([`NodeReading::of`]) and
/// whether edge-health watches it; `None` without a Ready condition.
pub fn node_facts(node: &Value, watched: bool) -> Option<NodeFacts> {
    NodeReading::of(node).facts(watched)
}

fn path(text: &str) -> PointerBuf {
    PointerBuf::parse(text).expect("paths built here are valid JSON pointers")
}

/// The nodes an Endpoints or EndpointSlice update refers to, judged at `now` under the
/// cluster-wide `policy`.
struct Judged<'a> {
    nodes: &'a BTreeMap<String, NodeFacts>,
    now: Timestamp,
    policy: ProtectionPolicy,
}

impl Judged<'_> {
    /// Whether the node named so is protected (not without a known node).
    fn protects(&self, node_name: Option<&str>) -> bool {
        let facts = node_name.and_then(|n| self.nodes.get(n));
        facts.is_some_and(|facts| protection::judge(facts, self.now, self.policy).protected())
    }

    /// Whether an Endpoints address's node is protected.
    fn protects_address(&self, address: &Value) -> bool {
        self.protects(address["nodeName"].as_str())
    }
}

/// For a Node UPDATE: removes the unreachable NoExecute taint(s) of a node protected at
/// `now` under the cluster-wide `policy` (`watched`: edge-health watches it), highest
/// index first so every index stays right however many go.
pub fn node_patch(node: &Value, watched: bool, now: Timestamp, policy: ProtectionPolicy) -> Option<Patch> {
    node_patch_judging(node, &node_facts(node, watched)?, now, policy)
}

/// [`node_patch`] judging `facts` (what is known of the node, e.g. from a cache) instead of
/// reading them from `node`; the patch is still computed on `node`.
pub fn node_patch_judging(node: &Value, facts: &NodeFacts, now: Timestamp, policy: ProtectionPolicy) -> Option<Patch> {
    let taints = node["spec"]["taints"].as_array()?;
    taints_patch(taints.iter().map(|t| (t["key"].as_str(), t["effect"].as_str())), facts, now, policy)
}

/// [`node_patch_judging`] on the node's taints, each read as its key and effect, in order.
pub fn taints_patch<'a>(
    taints: impl IntoIterator<Item = (Option<&'a str>, Option<&'a str>)>,
    facts: &NodeFacts,
    now: Timestamp,
    policy: ProtectionPolicy,
) -> Option<Patch> {
    if !protection::judge(facts, now, policy).protected() {
        return None;
    }
    let unreachable = (Some(keys::TAINT_UNREACHABLE), Some(keys::TAINT_EFFECT_NO_EXECUTE));
    let mut ops: Vec<PatchOperation> = taints
        .into_iter()
        .enumerate()
        .filter(|(_, taint)| *taint == unreachable)
        .map(|(i, _)| PatchOperation::Remove(RemoveOperation { path: path(&format!("/spec/taints/{i}")) }))
        .collect();
    ops.reverse();
    (!ops.is_empty()).then_some(Patch(ops))
}

/// One subset of a core Endpoints, as far as the rule reads it: its two address lists,
/// which a patch copies whole.
#[derive(Clone, Copy, Debug, Default)]
pub struct Subset<'a> {
    pub addresses: Option<&'a [Value]>,
    pub not_ready_addresses: Option<&'a [Value]>,
}

/// For core Endpoints: moves the not-ready addresses of nodes protected at `now` (under
/// the cluster-wide `policy`) to `addresses`. A touched subset's two lists are
/// written whole (the moved addresses as they were), which cannot get indices wrong when
/// several addresses move. `nodes`: what is known of the nodes, by name; an address whose
/// node is not there is left alone.
pub fn endpoints_patch(
    endpoints: &Value,
    nodes: &BTreeMap<String, NodeFacts>,
    now: Timestamp,
    policy: ProtectionPolicy,
) -> Option<Patch> {
    let subsets = endpoints["subsets"].as_array()?.iter().map(|subset| Subset {
        addresses: subset["addresses"].as_array().map(Vec::as_slice),
        not_ready_addresses: subset["notReadyAddresses"].as_array().map(Vec::as_slice),
    });
    subsets_patch(subsets, nodes, now, policy)
}

/// [`endpoints_patch`] on the Endpoints' subsets, in order.
pub fn subsets_patch<'a>(
    subsets: impl IntoIterator<Item = Subset<'a>>,
    nodes: &BTreeMap<String, NodeFacts>,
    now: Timestamp,
    policy: ProtectionPolicy,
) -> Option<Patch> {
    let judged = Judged { nodes, now, policy };
    let mut ops = Vec::new();
    for (i, subset) in subsets.into_iter().enumerate() {
        let Some(not_ready) = subset.not_ready_addresses else { continue };
        let (moving, staying): (Vec<&Value>, Vec<&Value>) = not_ready.iter().partition(|a| judged.protects_address(a));
        if moving.is_empty() {
            continue;
        }
        let mut ready: Vec<Value> = subset.addresses.map(<[Value]>::to_vec).unwrap_or_default();
        ready.extend(moving.into_iter().cloned());
        ops.push(PatchOperation::Add(AddOperation {
            path: path(&format!("/subsets/{i}/addresses")),
            value: Value::Array(ready),
        }));
        let not_ready_path = path(&format!("/subsets/{i}/notReadyAddresses"));
        ops.push(if staying.is_empty() {
            PatchOperation::Remove(RemoveOperation { path: not_ready_path })
        } else {
            PatchOperation::Add(AddOperation {
                path: not_ready_path,
                value: Value::Array(staying.into_iter().cloned().collect()),
            })
        });
    }
    (!ops.is_empty()).then_some(Patch(ops))
}

/// One endpoint of an EndpointSlice, as far as the rule reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SliceEndpoint<'a> {
    pub node_name: Option<&'a str>,
    /// `conditions.ready`, `conditions.terminating`.
    pub ready: Option<bool>,
    pub terminating: Option<bool>,
}

/// For EndpointSlices: marks the not-ready endpoints of nodes protected at `now` (under
/// the cluster-wide `policy`) ready and serving again, unless they are terminating
/// (a pod going away must not get traffic back). `nodes` as for [`endpoints_patch`].
pub fn endpoint_slice_patch(
    slice: &Value,
    nodes: &BTreeMap<String, NodeFacts>,
    now: Timestamp,
    policy: ProtectionPolicy,
) -> Option<Patch> {
    let endpoints = slice["endpoints"].as_array()?.iter().map(|endpoint| SliceEndpoint {
        node_name: endpoint["nodeName"].as_str(),
        ready: endpoint["conditions"]["ready"].as_bool(),
        terminating: endpoint["conditions"]["terminating"].as_bool(),
    });
    slice_endpoints_patch(endpoints, nodes, now, policy)
}

/// [`endpoint_slice_patch`] on the slice's endpoints, in order.
pub fn slice_endpoints_patch<'a>(
    endpoints: impl IntoIterator<Item = SliceEndpoint<'a>>,
    nodes: &BTreeMap<String, NodeFacts>,
    now: Timestamp,
    policy: ProtectionPolicy,
) -> Option<Patch> {
    let judged = Judged { nodes, now, policy };
    let mut ops = Vec::new();
    for (i, endpoint) in endpoints.into_iter().enumerate() {
        if endpoint.ready != Some(false) || endpoint.terminating == Some(true) || !judged.protects(endpoint.node_name) {
            continue;
        }
        for field in ["ready", "serving"] {
            ops.push(PatchOperation::Add(AddOperation {
                path: path(&format!("/endpoints/{i}/conditions/{field}")),
                value: Value::Bool(true),
            }));
        }
    }
    (!ops.is_empty()).then_some(Patch(ops))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protection::{LimitAnnotation, ProtectionLimit};
    use proptest::prelude::*;
    use serde_json::json;
    use std::time::Duration;

    /// The Unknown nodes of these tests went Unknown at 10:00; it is 10:30.
    const SINCE: &str = "2026-11-21T10:00:00Z";

    fn now() -> Timestamp {
        "2026-11-21T10:30:00Z".parse().unwrap()
    }

    fn minutes(m: u64) -> ProtectionLimit {
        ProtectionLimit::After(Duration::from_secs(60 * m))
    }

    fn apply(mut object: Value, patch: &Patch) -> Value {
        json_patch::patch(&mut object, patch).expect("every emitted patch applies to its object");
        object
    }

    fn node(ready: Option<&str>, unhealthy: Option<&str>, taints: Value) -> Value {
        let mut node = json!({"metadata": {"name": "n"}, "spec": {"taints": taints}, "status": {"conditions": []}});
        if let Some(ready) = ready {
            node["status"]["conditions"] =
                json!([{"type": "MemoryPressure", "status": "Unknown"}, {"type": "Ready", "status": ready}]);
        }
        if let Some(vote) = unhealthy {
            node["metadata"]["annotations"] = json!({"nodeunhealth": vote});
        }
        node
    }

    /// A node whose Ready condition is `ready` since `since` (`None`: no
    /// `lastTransitionTime`), with these annotations.
    fn node_since(ready: &str, since: Option<&str>, annotations: Value, taints: Value) -> Value {
        let mut ready = json!({"type": "Ready", "status": ready, "reason": "NodeStatusUnknown"});
        if let Some(since) = since {
            ready["lastTransitionTime"] = json!(since);
        }
        json!({"metadata": {"name": "n", "annotations": annotations}, "spec": {"taints": taints},
            "status": {"conditions": [ready]}})
    }

    #[test]
    fn node_taint_table() {
        let unreachable = json!({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-11-21T10:00:00Z"});
        let unreachable_ns = json!({"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"});
        let other = json!({"key": "dedicated", "value": "edge", "effect": "NoExecute"});
        let taints = json!([unreachable.clone(), unreachable_ns.clone(), other.clone(), unreachable.clone()]);
        let cases = [
            (
                "Unknown, not voted: both unreachable NoExecute go",
                node(Some("Unknown"), None, taints.clone()),
                Some(json!([unreachable_ns, other])),
            ),
            ("voted unhealthy: untouched", node(Some("Unknown"), Some("yes"), taints.clone()), None),
            // SuperEdge's readers: the annotation's presence is the vote, whatever its value
            ("voted with an empty value: untouched", node(Some("Unknown"), Some(""), taints.clone()), None),
            ("voted with \"no\": untouched", node(Some("Unknown"), Some("no"), taints.clone()), None),
            ("voted with \"true\": untouched", node(Some("Unknown"), Some("true"), taints.clone()), None),
            ("Ready=False (the kubelet says so): untouched", node(Some("False"), None, taints.clone()), None),
            ("Ready=True: untouched", node(Some("True"), None, taints.clone()), None),
            ("no Ready condition: untouched, no panic", node(None, None, taints.clone()), None),
            ("no taints at all", node(Some("Unknown"), None, Value::Null), None),
            ("nothing to remove", node(Some("Unknown"), None, json!([other.clone()])), None),
        ];
        for (name, object, want) in cases {
            let got = node_patch(&object, true, now(), ProtectionPolicy::default())
                .map(|p| apply(object.clone(), &p)["spec"]["taints"].clone());
            assert_eq!(got, want, "{name}");
            let unwatched = node_patch(&object, false, now(), ProtectionPolicy::default());
            assert_eq!(unwatched, None, "{name}: a node nobody watches keeps its taints");
        }
        // `--always-reachable`: the vote is not counted
        let always_reachable = ProtectionPolicy { always_reachable: true, ..ProtectionPolicy::default() };
        let voted = node(Some("Unknown"), Some("yes"), taints.clone());
        let got = node_patch(&voted, true, now(), always_reachable)
            .map(|p| apply(voted.clone(), &p)["spec"]["taints"].clone());
        assert_eq!(got, Some(json!([taints[1], taints[2]])), "voted unhealthy, always reachable");
        assert_eq!(node_patch(&voted, false, now(), always_reachable), None, "not watched, always reachable");
    }

    /// Bounded autonomy on the node path: the default, the annotation overriding it both
    /// ways, the exact boundary, and unusable annotations and transition times.
    #[test]
    fn node_taint_table_with_protection_limits() {
        let unreachable = json!({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"});
        let unreachable_ns = json!({"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"});
        let taints = json!([unreachable_ns.clone(), unreachable.clone()]);
        let limit = |value: &str| json!({"superedge.io/max-unreachable-protection": value});
        let unknown =
            |since: Option<&str>, annotations: Value| node_since("Unknown", since, annotations, taints.clone());
        let none = json!({});
        const UNLIMITED: ProtectionLimit = ProtectionLimit::Unlimited;
        let cases = [
            ("unlimited default", unknown(Some(SINCE), none.clone()), UNLIMITED, true),
            ("1h default, 30m in", unknown(Some(SINCE), none.clone()), minutes(60), true),
            (
                "30m default: exactly at the limit, still protected",
                unknown(Some(SINCE), none.clone()),
                minutes(30),
                true,
            ),
            ("29m default: passed", unknown(Some(SINCE), none.clone()), minutes(29), false),
            (
                "the limit counts from the instant, whatever the offset it is written in",
                unknown(Some("2026-11-21T11:00:00+01:00"), none.clone()),
                minutes(30),
                true,
            ),
            ("annotation 1h cannot extend a 10m default", unknown(Some(SINCE), limit("1h")), minutes(10), false),
            ("annotation 1h under a 1h default", unknown(Some(SINCE), limit("1h")), minutes(60), true),
            ("annotation 20m shortens a 1h default", unknown(Some(SINCE), limit("20m")), minutes(60), false),
            ("annotation 10m beats an unlimited default", unknown(Some(SINCE), limit("10m")), UNLIMITED, false),
            ("annotation 0 cannot lift a 10m default", unknown(Some(SINCE), limit("0")), minutes(10), false),
            ("annotation exactly at the limit", unknown(Some(SINCE), limit("30m")), UNLIMITED, true),
            ("annotation 1799s: passed", unknown(Some(SINCE), limit("1799s")), UNLIMITED, false),
            ("invalid annotation: 10m default applies", unknown(Some(SINCE), limit("30 minutes")), minutes(10), false),
            ("invalid annotation: unlimited default applies", unknown(Some(SINCE), limit("-1h")), UNLIMITED, true),
            ("bounded, no lastTransitionTime: not protected", unknown(None, none.clone()), minutes(60), false),
            (
                "bounded, malformed lastTransitionTime: not protected",
                unknown(Some("yesterday"), none.clone()),
                minutes(60),
                false,
            ),
            ("unlimited needs no lastTransitionTime", unknown(Some("yesterday"), none.clone()), UNLIMITED, true),
            (
                "voted unhealthy, even if annotated unlimited",
                unknown(Some(SINCE), json!({"nodeunhealth": "yes", "superedge.io/max-unreachable-protection": "0"})),
                ProtectionLimit::Unlimited,
                false,
            ),
            (
                "Ready=False with a limit",
                node_since("False", Some(SINCE), limit("1h"), taints.clone()),
                minutes(60),
                false,
            ),
            (
                "Ready=True with a limit",
                node_since("True", Some(SINCE), limit("1h"), taints.clone()),
                minutes(60),
                false,
            ),
        ];
        for (name, object, default, stripped) in cases {
            let got = node_patch(&object, true, now(), ProtectionPolicy::with_default_limit(default))
                .map(|p| apply(object.clone(), &p)["spec"]["taints"].clone());
            let want = stripped.then(|| json!([unreachable_ns.clone()]));
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn node_facts_from_json() {
        let since: Timestamp = SINCE.parse().unwrap();
        let annotated = node_since(
            "Unknown",
            Some(SINCE),
            json!({"nodeunhealth": "yes", "superedge.io/max-unreachable-protection": "2h"}),
            json!([]),
        );
        assert_eq!(
            node_facts(&annotated, true),
            Some(NodeFacts {
                ready_unknown: true,
                watched: true,
                unknown_since: Some(since),
                voted_unhealthy: true,
                limit: LimitAnnotation::Valid(minutes(120)),
            })
        );
        let typo =
            node_since("True", Some("10:00"), json!({"superedge.io/max-unreachable-protection": "2 hours"}), json!([]));
        let facts = node_facts(&typo, true).unwrap();
        assert_eq!((facts.ready_unknown, facts.unknown_since, facts.voted_unhealthy), (false, None, false));
        assert_eq!(facts.limit.invalid().map(|e| e.value.as_str()), Some("2 hours"), "reported to the caller");
        let odd = json!({"metadata": {"annotations": {"superedge.io/max-unreachable-protection": 30}},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown", "lastTransitionTime": 7}]}});
        assert_eq!(
            node_facts(&odd, false),
            Some(NodeFacts { ready_unknown: true, ..Default::default() }),
            "non-string values are as good as absent"
        );
        assert_eq!(node_facts(&node(None, None, json!([])), true), None);
        assert_eq!(node_facts(&json!({"status": {"conditions": "Ready"}}), true), None);
    }

    /// What the endpoint hooks know about nodes, read through [`node_facts`].
    fn states() -> BTreeMap<String, NodeFacts> {
        let node = |ready: &str, annotations: Value| {
            node_facts(&node_since(ready, Some(SINCE), annotations, json!([])), true).unwrap()
        };
        let unwatched = node_facts(&node_since("Unknown", Some(SINCE), json!({}), json!([])), false).unwrap();
        BTreeMap::from([
            ("alive".to_string(), node("Unknown", json!({}))),
            ("unwatched".to_string(), unwatched),
            ("dead".to_string(), node("Unknown", json!({"nodeunhealth": "yes"}))),
            ("fine".to_string(), node("True", json!({}))),
            ("bounded".to_string(), node("Unknown", json!({"superedge.io/max-unreachable-protection": "1h"}))),
            ("expired".to_string(), node("Unknown", json!({"superedge.io/max-unreachable-protection": "10m"}))),
        ])
    }

    /// SuperEdge's readers: a present `nodeunhealth` is the vote whatever its value, on
    /// the endpoint paths as on the node path; each emitted patch applied to its object.
    #[test]
    fn endpoint_hooks_read_the_vote_by_its_presence() {
        let values = [(None, false), (Some("yes"), true), (Some(""), true), (Some("no"), true), (Some("true"), true)];
        for (value, voted) in values {
            let annotations = value.map_or(json!({}), |v| json!({"nodeunhealth": v}));
            let facts = node_facts(&node_since("Unknown", Some(SINCE), annotations, json!([])), true).unwrap();
            let states = BTreeMap::from([("n".to_string(), facts)]);
            let endpoints = json!({"subsets": [{"addresses": [{"ip": "10.244.0.9", "nodeName": "other"}],
                "notReadyAddresses": [{"ip": "10.244.0.1", "nodeName": "n"}]}]});
            let got = endpoints_patch(&endpoints, &states, now(), ProtectionPolicy::default())
                .map(|p| apply(endpoints.clone(), &p));
            let moved = json!({"subsets": [{"addresses": [{"ip": "10.244.0.9", "nodeName": "other"},
                {"ip": "10.244.0.1", "nodeName": "n"}]}]});
            assert_eq!(got, (!voted).then_some(moved), "Endpoints, nodeunhealth {value:?}");
            let slice = json!({"addressType": "IPv4", "endpoints": [
                {"addresses": ["10.244.0.1"], "nodeName": "n", "conditions": {"ready": false}}]});
            let got = endpoint_slice_patch(&slice, &states, now(), ProtectionPolicy::default())
                .map(|p| apply(slice.clone(), &p));
            let ready = json!({"addressType": "IPv4", "endpoints": [
                {"addresses": ["10.244.0.1"], "nodeName": "n", "conditions": {"ready": true, "serving": true}}]});
            assert_eq!(got, (!voted).then_some(ready), "EndpointSlice, nodeunhealth {value:?}");
        }
    }

    #[test]
    fn endpoints_move_only_protected_addresses_and_keep_unknown_fields() {
        let endpoints = json!({"metadata": {"name": "web"}, "subsets": [
            {"addresses": [{"ip": "10.244.0.1", "nodeName": "fine"}],
             "notReadyAddresses": [
                {"ip": "10.244.0.2", "nodeName": "alive", "targetRef": {"kind": "Pod", "name": "a"}, "futureField": 7},
                {"ip": "10.244.0.3", "nodeName": "dead"},
                {"ip": "10.244.0.4"},
                {"ip": "10.244.0.5", "nodeName": "alive"},
                {"ip": "10.244.0.6", "nodeName": "ghost"},
                {"ip": "10.244.0.7", "nodeName": "expired"},
                {"ip": "10.244.0.8", "nodeName": "bounded"},
                {"ip": "10.244.0.9", "nodeName": "unwatched"}],
             "ports": [{"port": 80}]},
            {"notReadyAddresses": [{"ip": "10.244.1.1", "nodeName": "alive"}], "ports": [{"port": 81}]},
            {"addresses": [{"ip": "10.244.2.1", "nodeName": "alive"}]}
        ]});
        let patch = endpoints_patch(&endpoints, &states(), now(), ProtectionPolicy::default()).unwrap();
        let patched = apply(endpoints.clone(), &patch);
        assert_eq!(
            patched,
            json!({"metadata": {"name": "web"}, "subsets": [
                {"addresses": [
                    {"ip": "10.244.0.1", "nodeName": "fine"},
                    {"ip": "10.244.0.2", "nodeName": "alive", "targetRef": {"kind": "Pod", "name": "a"}, "futureField": 7},
                    {"ip": "10.244.0.5", "nodeName": "alive"},
                    {"ip": "10.244.0.8", "nodeName": "bounded"}],
                 "notReadyAddresses": [
                    {"ip": "10.244.0.3", "nodeName": "dead"},
                    {"ip": "10.244.0.4"},
                    {"ip": "10.244.0.6", "nodeName": "ghost"},
                    {"ip": "10.244.0.7", "nodeName": "expired"},
                    {"ip": "10.244.0.9", "nodeName": "unwatched"}],
                 "ports": [{"port": 80}]},
                {"addresses": [{"ip": "10.244.1.1", "nodeName": "alive"}], "ports": [{"port": 81}]},
                {"addresses": [{"ip": "10.244.2.1", "nodeName": "alive"}]}
            ]})
        );
        let nothing = json!({"subsets": [{"notReadyAddresses": [{"ip": "10.244.0.3", "nodeName": "dead"}]}]});
        assert_eq!(endpoints_patch(&nothing, &states(), now(), ProtectionPolicy::default()), None);
        assert_eq!(endpoints_patch(&json!({"metadata": {}}), &states(), now(), ProtectionPolicy::default()), None);
    }

    #[test]
    fn slices_mark_protected_endpoints_ready_but_never_terminating_ones() {
        let slice = json!({"addressType": "IPv4", "endpoints": [
            {"addresses": ["10.244.0.1"], "nodeName": "alive", "conditions": {"ready": false, "serving": false, "terminating": false}, "zone": "z"},
            {"addresses": ["10.244.0.2"], "nodeName": "alive", "conditions": {"ready": false, "serving": true, "terminating": true}},
            {"addresses": ["10.244.0.3"], "nodeName": "dead", "conditions": {"ready": false}},
            {"addresses": ["10.244.0.4"], "nodeName": "alive", "conditions": {"ready": true}},
            {"addresses": ["10.244.0.5"], "conditions": {"ready": false}},
            {"addresses": ["10.244.0.6"], "nodeName": "alive", "conditions": {"ready": false}},
            {"addresses": ["10.244.0.7"], "nodeName": "expired", "conditions": {"ready": false}},
            {"addresses": ["10.244.0.8"], "nodeName": "bounded", "conditions": {"ready": false}},
            {"addresses": ["10.244.0.9"], "nodeName": "unwatched", "conditions": {"ready": false}}
        ]});
        let patch = endpoint_slice_patch(&slice, &states(), now(), ProtectionPolicy::default()).unwrap();
        let patched = apply(slice.clone(), &patch);
        let conditions: Vec<Value> =
            patched["endpoints"].as_array().unwrap().iter().map(|e| e["conditions"].clone()).collect();
        assert_eq!(
            conditions,
            vec![
                json!({"ready": true, "serving": true, "terminating": false}),
                json!({"ready": false, "serving": true, "terminating": true}),
                json!({"ready": false}),
                json!({"ready": true}),
                json!({"ready": false}),
                json!({"ready": true, "serving": true}),
                json!({"ready": false}),
                json!({"ready": true, "serving": true}),
                json!({"ready": false}),
            ]
        );
        assert_eq!(patched["endpoints"][0]["zone"], "z", "other fields untouched");
        assert_eq!(
            endpoint_slice_patch(&json!({"endpoints": []}), &states(), now(), ProtectionPolicy::default()),
            None
        );
    }

    /// The endpoint hooks judge with the `now` and default they are given: a 20 m default
    /// ends the protection of every node Unknown for 30 m (the one annotated 1h too: an
    /// annotation only shortens), a 45 m default not, except for the one annotated 10m;
    /// at 10:05 a 10m annotation still protects.
    #[test]
    fn endpoint_hooks_obey_the_default_limit_and_the_time() {
        let endpoints = json!({"subsets": [{"notReadyAddresses": [
            {"ip": "10.244.0.2", "nodeName": "alive"}, {"ip": "10.244.0.8", "nodeName": "bounded"},
            {"ip": "10.244.0.7", "nodeName": "expired"}]}]});
        let slice = json!({"endpoints": [
            {"addresses": ["10.244.0.2"], "nodeName": "alive", "conditions": {"ready": false}},
            {"addresses": ["10.244.0.8"], "nodeName": "bounded", "conditions": {"ready": false}},
            {"addresses": ["10.244.0.7"], "nodeName": "expired", "conditions": {"ready": false}}]});
        let early: Timestamp = "2026-11-21T10:05:00Z".parse().unwrap();
        let cases = [
            (now(), minutes(45), vec!["alive", "bounded"]),
            (now(), ProtectionLimit::Unlimited, vec!["alive", "bounded"]),
            (early, minutes(20), vec!["alive", "bounded", "expired"]),
        ];
        assert_eq!(
            endpoints_patch(&endpoints, &states(), now(), ProtectionPolicy::with_default_limit(minutes(20))),
            None,
            "a 20m default ends them all"
        );
        for (at, default, want) in cases {
            let patched = endpoints_patch(&endpoints, &states(), at, ProtectionPolicy::with_default_limit(default))
                .map(|p| apply(endpoints.clone(), &p));
            let ready: Vec<&str> = patched.as_ref().unwrap()["subsets"][0]["addresses"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a["nodeName"].as_str().unwrap())
                .collect();
            assert_eq!(ready, want, "endpoints at {at} under {default:?}");
            let patched = apply(
                slice.clone(),
                &endpoint_slice_patch(&slice, &states(), at, ProtectionPolicy::with_default_limit(default)).unwrap(),
            );
            let ready: Vec<&str> = patched["endpoints"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["conditions"]["ready"] == true)
                .map(|e| e["nodeName"].as_str().unwrap())
                .collect();
            assert_eq!(ready, want, "slice at {at} under {default:?}");
        }
    }

    fn arb_address() -> impl Strategy<Value = Value> {
        let nodes = vec!["alive", "dead", "fine", "ghost", "bounded", "expired", "unwatched"];
        (0u8..255, prop::option::of(prop::sample::select(nodes))).prop_map(|(ip, node)| match node {
            Some(node) => json!({"ip": format!("10.244.0.{ip}"), "nodeName": node}),
            None => json!({"ip": format!("10.244.0.{ip}")}),
        })
    }

    proptest! {
        /// The patch only ever moves protected nodes' addresses from not-ready to ready:
        /// nothing is lost, duplicated or moved the other way, and it always applies.
        #[test]
        fn endpoints_patch_only_promotes_protected(subsets in prop::collection::vec(
            (prop::option::of(prop::collection::vec(arb_address(), 0..4)), prop::option::of(prop::collection::vec(arb_address(), 0..4))), 0..4),
            minutes_in in 0i64..90, default in prop::sample::select(vec![ProtectionLimit::Unlimited, minutes(10), minutes(45)]),
        ) {
            let subsets: Vec<Value> = subsets.into_iter().map(|(ready, not_ready)| {
                let mut s = json!({"ports": [{"port": 80}]});
                if let Some(r) = ready { s["addresses"] = Value::Array(r); }
                if let Some(n) = not_ready { s["notReadyAddresses"] = Value::Array(n); }
                s
            }).collect();
            let endpoints = json!({"subsets": subsets});
            let states = states();
            let at = SINCE.parse::<Timestamp>().unwrap() + jiff::SignedDuration::from_mins(minutes_in);
            let patched = match endpoints_patch(&endpoints, &states, at, ProtectionPolicy::with_default_limit(default)) {
                Some(patch) => apply(endpoints.clone(), &patch),
                None => endpoints.clone(),
            };
            let protected = |a: &Value| {
                let facts = a["nodeName"].as_str().and_then(|n| states.get(n));
                facts.is_some_and(|f| protection::judge(f, at, ProtectionPolicy::with_default_limit(default)).protected())
            };
            let list = |v: &Value, field: &str| v[field].as_array().cloned().unwrap_or_default();
            for (before, after) in endpoints["subsets"].as_array().unwrap().iter().zip(patched["subsets"].as_array().unwrap()) {
                let promoted: Vec<Value> = list(before, "notReadyAddresses").into_iter().filter(protected).collect();
                let kept: Vec<Value> = list(before, "notReadyAddresses").into_iter().filter(|a| !protected(a)).collect();
                let mut want_ready = list(before, "addresses");
                want_ready.extend(promoted);
                prop_assert_eq!(list(after, "addresses"), want_ready);
                prop_assert_eq!(list(after, "notReadyAddresses"), kept);
                prop_assert_eq!(&after["ports"], &before["ports"]);
            }
        }
    }
}
