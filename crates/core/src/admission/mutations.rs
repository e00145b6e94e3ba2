//! The patches are computed on the raw JSON the apiserver sent (not on typed structs), so
//! fields this code does not know, from newer API versions, pass through untouched.

use std::collections::BTreeMap;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation};
use serde_json::Value;

use crate::keys;

/// What the webhook needs to know about a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeState {
    /// The Ready condition is Unknown (the cloud stopped hearing from the node).
    pub ready_unknown: bool,
    /// `nodeunhealth: "yes"`: the node's unit voted it unhealthy.
    pub voted_unhealthy: bool,
}

impl NodeState {
    pub fn protected(self) -> bool {
        self.ready_unknown && !self.voted_unhealthy
    }
}

/// A node's state from its JSON; `None` without a Ready condition (nothing to judge by).
pub fn node_state(node: &Value) -> Option<NodeState> {
    let ready = node["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == keys::NODE_CONDITION_READY)?;
    Some(NodeState {
        ready_unknown: ready["status"] == keys::CONDITION_UNKNOWN,
        voted_unhealthy: node["metadata"]["annotations"][keys::NODE_UNHEALTH_ANNOTATION] == keys::NODE_UNHEALTH_YES,
    })
}

fn path(text: &str) -> PointerBuf {
    PointerBuf::parse(text).expect("paths built here are valid JSON pointers")
}

fn protected_node(value: &Value, nodes: &BTreeMap<String, NodeState>) -> bool {
    value["nodeName"].as_str().and_then(|n| nodes.get(n)).is_some_and(|s| s.protected())
}

/// For a Node UPDATE: removes the unreachable NoExecute taint(s) of a protected node,
/// highest index first so every index stays right however many go.
pub fn node_patch(node: &Value) -> Option<Patch> {
    if !node_state(node)?.protected() {
        return None;
    }
    let ops: Vec<PatchOperation> = node["spec"]["taints"]
        .as_array()?
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, t)| t["key"] == keys::TAINT_UNREACHABLE && t["effect"] == keys::TAINT_EFFECT_NO_EXECUTE)
        .map(|(i, _)| PatchOperation::Remove(RemoveOperation { path: path(&format!("/spec/taints/{i}")) }))
        .collect();
    (!ops.is_empty()).then_some(Patch(ops))
}

/// For core Endpoints: moves protected nodes' not-ready addresses to `addresses`. A
/// touched subset's two lists are written whole (the moved addresses as they were),
/// which cannot get indices wrong when several addresses move.
pub fn endpoints_patch(endpoints: &Value, nodes: &BTreeMap<String, NodeState>) -> Option<Patch> {
    let mut ops = Vec::new();
    for (i, subset) in endpoints["subsets"].as_array()?.iter().enumerate() {
        let Some(not_ready) = subset["notReadyAddresses"].as_array() else { continue };
        let (moving, staying): (Vec<&Value>, Vec<&Value>) = not_ready.iter().partition(|a| protected_node(a, nodes));
        if moving.is_empty() {
            continue;
        }
        let mut ready: Vec<Value> = subset["addresses"].as_array().cloned().unwrap_or_default();
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

/// For EndpointSlices: marks protected nodes' not-ready endpoints ready and serving again,
/// unless they are terminating (a pod going away must not get traffic back).
pub fn endpoint_slice_patch(slice: &Value, nodes: &BTreeMap<String, NodeState>) -> Option<Patch> {
    let mut ops = Vec::new();
    for (i, endpoint) in slice["endpoints"].as_array()?.iter().enumerate() {
        let conditions = &endpoint["conditions"];
        if !protected_node(endpoint, nodes) || conditions["terminating"] == true || conditions["ready"] != false {
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
    use proptest::prelude::*;
    use serde_json::json;

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
            (
                "vote is something else than yes",
                node(Some("Unknown"), Some("no"), taints.clone()),
                Some(
                    json!([{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}, {"key": "dedicated", "value": "edge", "effect": "NoExecute"}]),
                ),
            ),
            ("voted unhealthy: untouched", node(Some("Unknown"), Some("yes"), taints.clone()), None),
            ("Ready=False (the kubelet says so): untouched", node(Some("False"), None, taints.clone()), None),
            ("Ready=True: untouched", node(Some("True"), None, taints.clone()), None),
            ("no Ready condition: untouched, no panic", node(None, None, taints.clone()), None),
            ("no taints at all", node(Some("Unknown"), None, Value::Null), None),
            ("nothing to remove", node(Some("Unknown"), None, json!([other.clone()])), None),
        ];
        for (name, object, want) in cases {
            let got = node_patch(&object).map(|p| apply(object.clone(), &p)["spec"]["taints"].clone());
            assert_eq!(got, want, "{name}");
        }
    }

    fn states() -> BTreeMap<String, NodeState> {
        BTreeMap::from([
            ("alive".to_string(), NodeState { ready_unknown: true, voted_unhealthy: false }),
            ("dead".to_string(), NodeState { ready_unknown: true, voted_unhealthy: true }),
            ("fine".to_string(), NodeState { ready_unknown: false, voted_unhealthy: false }),
        ])
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
                {"ip": "10.244.0.6", "nodeName": "ghost"}],
             "ports": [{"port": 80}]},
            {"notReadyAddresses": [{"ip": "10.244.1.1", "nodeName": "alive"}], "ports": [{"port": 81}]},
            {"addresses": [{"ip": "10.244.2.1", "nodeName": "alive"}]}
        ]});
        let patched = apply(endpoints.clone(), &endpoints_patch(&endpoints, &states()).unwrap());
        assert_eq!(
            patched,
            json!({"metadata": {"name": "web"}, "subsets": [
                {"addresses": [
                    {"ip": "10.244.0.1", "nodeName": "fine"},
                    {"ip": "10.244.0.2", "nodeName": "alive", "targetRef": {"kind": "Pod", "name": "a"}, "futureField": 7},
                    {"ip": "10.244.0.5", "nodeName": "alive"}],
                 "notReadyAddresses": [{"ip": "10.244.0.3", "nodeName": "dead"}, {"ip": "10.244.0.4"}, {"ip": "10.244.0.6", "nodeName": "ghost"}],
                 "ports": [{"port": 80}]},
                {"addresses": [{"ip": "10.244.1.1", "nodeName": "alive"}], "ports": [{"port": 81}]},
                {"addresses": [{"ip": "10.244.2.1", "nodeName": "alive"}]}
            ]})
        );
        let nothing = json!({"subsets": [{"notReadyAddresses": [{"ip": "10.244.0.3", "nodeName": "dead"}]}]});
        assert_eq!(endpoints_patch(&nothing, &states()), None);
        assert_eq!(endpoints_patch(&json!({"metadata": {}}), &states()), None);
    }

    #[test]
    fn slices_mark_protected_endpoints_ready_but_never_terminating_ones() {
        let slice = json!({"addressType": "IPv4", "endpoints": [
            {"addresses": ["10.244.0.1"], "nodeName": "alive", "conditions": {"ready": false, "serving": false, "terminating": false}, "zone": "z"},
            {"addresses": ["10.244.0.2"], "nodeName": "alive", "conditions": {"ready": false, "serving": true, "terminating": true}},
            {"addresses": ["10.244.0.3"], "nodeName": "dead", "conditions": {"ready": false}},
            {"addresses": ["10.244.0.4"], "nodeName": "alive", "conditions": {"ready": true}},
            {"addresses": ["10.244.0.5"], "conditions": {"ready": false}},
            {"addresses": ["10.244.0.6"], "nodeName": "alive", "conditions": {"ready": false}}
        ]});
        let patched = apply(slice.clone(), &endpoint_slice_patch(&slice, &states()).unwrap());
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
            ]
        );
        assert_eq!(patched["endpoints"][0]["zone"], "z", "other fields untouched");
        assert_eq!(endpoint_slice_patch(&json!({"endpoints": []}), &states()), None);
    }

    fn arb_address() -> impl Strategy<Value = Value> {
        (0u8..255, prop::option::of(prop::sample::select(vec!["alive", "dead", "fine", "ghost"]))).prop_map(
            |(ip, node)| match node {
                Some(node) => json!({"ip": format!("10.244.0.{ip}"), "nodeName": node}),
                None => json!({"ip": format!("10.244.0.{ip}")}),
            },
        )
    }

    proptest! {
        /// The patch only ever moves protected nodes' addresses from not-ready to ready:
        /// nothing is lost, duplicated or moved the other way, and it always applies.
        #[test]
        fn endpoints_patch_only_promotes_protected(subsets in prop::collection::vec(
            (prop::option::of(prop::collection::vec(arb_address(), 0..4)), prop::option::of(prop::collection::vec(arb_address(), 0..4))), 0..4)
        ) {
            let subsets: Vec<Value> = subsets.into_iter().map(|(ready, not_ready)| {
                let mut s = json!({"ports": [{"port": 80}]});
                if let Some(r) = ready { s["addresses"] = Value::Array(r); }
                if let Some(n) = not_ready { s["notReadyAddresses"] = Value::Array(n); }
                s
            }).collect();
            let endpoints = json!({"subsets": subsets});
            let states = states();
            let patched = match endpoints_patch(&endpoints, &states) {
                Some(patch) => apply(endpoints.clone(), &patch),
                None => endpoints.clone(),
            };
            let list = |v: &Value, field: &str| v[field].as_array().cloned().unwrap_or_default();
            for (before, after) in endpoints["subsets"].as_array().unwrap().iter().zip(patched["subsets"].as_array().unwrap()) {
                let promoted: Vec<Value> = list(before, "notReadyAddresses").into_iter().filter(|a| protected_node(a, &states)).collect();
                let kept: Vec<Value> = list(before, "notReadyAddresses").into_iter().filter(|a| !protected_node(a, &states)).collect();
                let mut want_ready = list(before, "addresses");
                want_ready.extend(promoted);
                prop_assert_eq!(list(after, "addresses"), want_ready);
                prop_assert_eq!(list(after, "notReadyAddresses"), kept);
                prop_assert_eq!(&after["ports"], &before["ports"]);
            }
        }
    }
}
