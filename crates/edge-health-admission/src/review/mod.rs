//! AdmissionReview in and out, and what to do with each request: pure, no I/O.
//!
//! This webhook must never block the cluster: anything it does not understand (another
//! resource, another operation, an object that does not decode, a node it does not know,
//! a node cache not synced yet) is allowed unchanged. Only a body that is not an
//! AdmissionReview at all is refused, with 400, because then there is no uid to answer.
//!
//! A review is read in one pass over the body without building its JSON tree ([`read`]),
//! reading the object as the hook's typed [`view`] of what its rule reads. That reading
//! gives up on anything unusual, and the body is then read as a `serde_json::Value` tree,
//! its object read as the same view. Both readings yield the same [`Review`], decided by
//! one function; the tests hold them to agree on every body an apiserver can send. The
//! first is only faster.

mod read;
mod view;

use std::borrow::Cow;
use std::collections::BTreeMap;

use base64::Engine;
use edgegrid_core::admission;
use edgegrid_core::protection::{NodeFacts, ProtectionPolicy, Timestamp};
use json_patch::Patch;
use serde_json::{Value, json};

use view::ObjectView;

/// The three webhook paths, SuperEdge's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Hook {
    /// `POST /node-taint`: Node UPDATE.
    NodeTaint,
    /// `POST /endpoint`: core Endpoints UPDATE.
    Endpoint,
    /// `POST /endpointslice`: discovery.k8s.io/v1 EndpointSlice UPDATE.
    EndpointSlice,
}

impl Hook {
    pub const ALL: [Hook; 3] = [Hook::NodeTaint, Hook::Endpoint, Hook::EndpointSlice];

    pub fn path(self) -> &'static str {
        match self {
            Self::NodeTaint => "/node-taint",
            Self::Endpoint => "/endpoint",
            Self::EndpointSlice => "/endpointslice",
        }
    }

    /// The metric label.
    pub fn name(self) -> &'static str {
        &self.path()[1..]
    }

    /// `(group, resource)` this hook handles.
    pub(crate) fn resource(self) -> (&'static str, &'static str) {
        match self {
            Self::NodeTaint => ("", "nodes"),
            Self::Endpoint => ("", "endpoints"),
            Self::EndpointSlice => ("discovery.k8s.io", "endpointslices"),
        }
    }
}

pub const API_VERSIONS: [&str; 2] = ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"];

/// A parsed AdmissionReview request, borrowing from the body.
#[derive(Clone, Debug)]
pub struct Review<'a> {
    /// Echoed in the response: the apiserver only accepts its own version back.
    pub api_version: &'static str,
    pub uid: Cow<'a, str>,
    /// `request.resource.group`, `request.resource.resource` and `request.operation`,
    /// when they are strings.
    group: Option<Cow<'a, str>>,
    resource: Option<Cow<'a, str>>,
    operation: Option<Cow<'a, str>>,
    object: ObjectReading<'a>,
    lean: bool,
}

/// What was read of `request.object`.
#[derive(Clone, Debug)]
enum ObjectReading<'a> {
    View(ObjectView<'a>),
    /// Absent, `null` or not a JSON object.
    NotAnObject,
    /// Why it does not decode as the hook's view.
    Undecodable(String),
}

impl Review<'_> {
    /// Whether the review was read without building its JSON tree (the usual case).
    pub fn read_lean(&self) -> bool {
        self.lean
    }
}

/// Why a body is not an AdmissionReview request (400).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MalformedReview {
    #[error("the body is not JSON: {0}")]
    NotJson(String),
    #[error("kind must be AdmissionReview, got {0:?}")]
    NotAReview(String),
    #[error("apiVersion must be admission.k8s.io/v1 or admission.k8s.io/v1beta1, got {0:?}")]
    UnsupportedVersion(String),
    #[error("request.uid is missing")]
    NoUid,
}

/// Reads a review sent to `hook`'s path.
pub fn parse(hook: Hook, body: &[u8]) -> Result<Review<'_>, MalformedReview> {
    match read::review(body, hook) {
        Some(review) => Ok(review),
        None => parse_tree(hook, body),
    }
}

/// The tree reading: the whole body as a `Value`, its object then read as `hook`'s view.
fn parse_tree(hook: Hook, body: &[u8]) -> Result<Review<'static>, MalformedReview> {
    let mut value: Value = serde_json::from_slice(body).map_err(|e| MalformedReview::NotJson(e.to_string()))?;
    let kind = value["kind"].as_str().unwrap_or_default();
    if kind != "AdmissionReview" {
        return Err(MalformedReview::NotAReview(kind.to_string()));
    }
    let api_version = value["apiVersion"].as_str().unwrap_or_default();
    let Some(api_version) = API_VERSIONS.into_iter().find(|v| *v == api_version) else {
        return Err(MalformedReview::UnsupportedVersion(api_version.to_string()));
    };
    let request = &mut value["request"];
    let uid = request["uid"].as_str().filter(|u| !u.is_empty()).ok_or(MalformedReview::NoUid)?;
    let text = |field: &Value| field.as_str().map(|text| Cow::Owned(text.to_string()));
    Ok(Review {
        api_version,
        uid: Cow::Owned(uid.to_string()),
        group: text(&request["resource"]["group"]),
        resource: text(&request["resource"]["resource"]),
        operation: text(&request["operation"]),
        object: match request.get_mut("object").map(Value::take) {
            Some(object @ Value::Object(_)) => match ObjectView::from_value(hook, object) {
                Ok(view) => ObjectReading::View(view),
                Err(error) => ObjectReading::Undecodable(error),
            },
            _ => ObjectReading::NotAnObject,
        },
        lean: false,
    })
}

/// Why a request was allowed without looking further.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Another resource or operation than the hook's (a misconfigured webhook).
    WrongRequest(String),
    /// The object does not decode as the hook's kind.
    Undecodable(String),
    /// The node cache has not listed yet: no verdict is safe.
    NodesNotSynced,
}

impl Skip {
    pub fn label(&self) -> &'static str {
        match self {
            Self::WrongRequest(_) => "wrong_request",
            Self::Undecodable(_) => "undecodable",
            Self::NodesNotSynced => "nodes_not_synced",
        }
    }
}

/// What the webhook answers.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    Patch(Patch),
    /// Nothing to change (no protected node involved, or an unknown one).
    Unchanged,
    Skipped(Skip),
}

impl Decision {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Patch(_) => "patched",
            Self::Unchanged => "unchanged",
            Self::Skipped(skip) => skip.label(),
        }
    }
}

/// What the webhook knows about nodes.
pub trait NodeVerdicts {
    /// Whether the cache has listed the nodes at least once.
    fn synced(&self) -> bool;
    /// Whether edge-health watches the node (`edgegrid_core::unit::membership`): only then
    /// may the rule protect it.
    fn watched(&self, node: &str) -> bool;
    /// Calls `judge` with the facts of every known node that has some (a Ready
    /// condition), by name.
    fn judge<R>(&self, judge: impl FnOnce(&BTreeMap<String, NodeFacts>) -> R) -> R;
}

/// How nodes are judged (`edgegrid_core::protection`): when, and under the cluster-wide
/// settings (`--max-unreachable-protection`, `--always-reachable`).
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    pub now: Timestamp,
    pub protection: ProtectionPolicy,
}

/// Decides one review for `hook` under `policy`.
pub fn decide(hook: Hook, review: &Review<'_>, nodes: &impl NodeVerdicts, policy: &Policy) -> Decision {
    let [group, resource, operation] =
        [&review.group, &review.resource, &review.operation].map(|field| field.as_deref().unwrap_or_default());
    if (group, resource) != hook.resource() || operation != "UPDATE" {
        let path = hook.path();
        return Decision::Skipped(Skip::WrongRequest(format!("{operation} of {group}/{resource} sent to {path}")));
    }
    let view = match &review.object {
        ObjectReading::View(view) => view,
        ObjectReading::NotAnObject => {
            return Decision::Skipped(Skip::Undecodable("request.object is not an object".into()));
        }
        ObjectReading::Undecodable(error) => return Decision::Skipped(Skip::Undecodable(error.clone())),
    };
    rule(view, nodes, policy)
}

/// The hook's rule (`edgegrid_core::admission`) on its view of the object.
fn rule(view: &ObjectView<'_>, nodes: &impl NodeVerdicts, policy: &Policy) -> Decision {
    let (now, protection) = (policy.now, policy.protection);
    // the endpoint hooks judge the nodes their objects name: no verdict before the cache
    // has listed them
    if !matches!(view, ObjectView::Node(_)) && !nodes.synced() {
        return Decision::Skipped(Skip::NodesNotSynced);
    }
    let patch = match view {
        // the node in the request is the verdict's subject: its own state decides
        ObjectView::Node(node) => node
            .reading()
            .facts(node.name().is_some_and(|n| nodes.watched(n)))
            .and_then(|facts| admission::taints_patch(node.taints()?, &facts, now, protection)),
        ObjectView::Endpoints(endpoints) => {
            nodes.judge(|states| admission::subsets_patch(endpoints.subsets()?, states, now, protection))
        }
        ObjectView::Slice(slice) => {
            nodes.judge(|states| admission::slice_endpoints_patch(slice.endpoints()?, states, now, protection))
        }
    };
    patch.map_or(Decision::Unchanged, Decision::Patch)
}

/// The AdmissionReview response: always allowed, with the patch if there is one.
pub fn response(review: &Review<'_>, decision: &Decision) -> Value {
    let mut response = json!({"uid": review.uid, "allowed": true});
    if let Decision::Patch(patch) = decision {
        let encoded = serde_json::to_vec(patch).unwrap_or_default();
        response["patchType"] = json!("JSONPatch");
        response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(encoded));
    }
    json!({"apiVersion": review.api_version, "kind": "AdmissionReview", "response": response})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodes::NodeCache;
    use edgegrid_core::protection::ProtectionLimit;
    use k8s_openapi::api::core::v1::Node;
    use proptest::prelude::*;

    const NODE_NAMES: [&str; 6] = ["alive", "dead", "fine", "bounded", "odd", "ghost"];

    /// `alive` Unknown since 10:00, `dead` voted unhealthy, `fine` Ready, `bounded`
    /// limited to 1h, `odd` with an unparsable limit; `ghost` unknown.
    fn cache() -> NodeCache {
        let cache = NodeCache::default();
        let node = |name: &str, ready: &str, mut annotations: Value| {
            // every one runs edge-health, so (the whole cluster one unit) each is watched
            annotations["edgegrid.io/edge-health-address"] = json!("10.0.0.1:51005");
            serde_json::from_value::<Node>(json!({"metadata": {"name": name, "annotations": annotations},
                "status": {"conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": "2026-11-22T10:00:00Z"}]}}))
            .expect("a node")
        };
        for node in [
            node("alive", "Unknown", json!({})),
            node("dead", "Unknown", json!({"nodeunhealth": "yes"})),
            node("fine", "True", json!({})),
            node("bounded", "Unknown", json!({"superedge.io/max-unreachable-protection": "1h"})),
            node("odd", "Unknown", json!({"superedge.io/max-unreachable-protection": "soon"})),
        ] {
            cache.apply(&node);
        }
        cache.done();
        cache
    }

    fn policy(minutes_after_ten: i64, default: ProtectionLimit, always_reachable: bool) -> Policy {
        let (hours, minutes) = (10 + minutes_after_ten / 60, minutes_after_ten % 60);
        let now = format!("2026-11-22T{hours:02}:{minutes:02}:00Z").parse().expect("a time");
        Policy { now, protection: ProtectionPolicy { default_limit: default, always_reachable } }
    }

    fn review_body(hook: Hook, object: &Value) -> String {
        let (group, resource) = hook.resource();
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "7f0b", "kind": {"group": group, "version": "v1", "kind": "X"},
            "resource": {"group": group, "version": "v1", "resource": resource}, "operation": "UPDATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:node-controller"},
            "object": object, "oldObject": object, "dryRun": false}})
        .to_string()
    }

    fn node_object() -> Value {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "alive", "annotations": {"a": "b"}},
            "spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-11-22T10:00:05Z"}]},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-11-22T10:00:00Z"}],
                "images": [{"names": ["a@sha256:00"], "sizeBytes": 5}]}})
    }

    fn slice_object() -> Value {
        let endpoint = |node: &str, ready: bool| {
            json!({"addresses": ["10.0.0.1"], "nodeName": node,
            "conditions": {"ready": ready, "serving": ready, "terminating": false}, "zone": "z"})
        };
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"name": "web-1", "namespace": "ns"},
            "endpoints": [endpoint("alive", false), endpoint("dead", false), endpoint("fine", true), endpoint("ghost", false)],
            "ports": [{"port": 80}]})
    }

    fn endpoints_object() -> Value {
        json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "web", "namespace": "ns"},
            "subsets": [{"addresses": [{"ip": "10.0.0.9", "nodeName": "fine"}],
                "notReadyAddresses": [{"ip": "10.0.0.1", "nodeName": "alive", "futureField": {"x": [1, 2.5, null]}},
                    {"ip": "10.0.0.2", "nodeName": "dead"}],
                "ports": [{"port": 80}]}]})
    }

    /// Which reading answered a body.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Reading {
        /// Both read it (and decided alike); the lean reading answered.
        Lean,
        /// The lean reading gave up; the tree reading answered.
        Tree,
        /// The lean reading answered; the tree reading would have refused the body (JSON
        /// no apiserver writes, in a part nobody reads).
        LeanOnly,
    }

    /// Both readings of `body` for `hook`, and their decisions; asserts they agree
    /// wherever both read the body, and that `parse` answers as the reading it names; that
    /// reading, and what was answered (a decision's label, or `malformed`).
    fn agree(hook: Hook, body: &[u8], nodes: &NodeCache, policy: &Policy) -> (Reading, &'static str) {
        let tree = parse_tree(hook, body);
        let Some(lean) = read::review(body, hook) else {
            // given up: `parse` is the tree reading
            let parsed = parse(hook, body).map(|r| (r.api_version, r.read_lean(), r.uid.into_owned()));
            assert_eq!(parsed, tree.clone().map(|r| (r.api_version, false, r.uid.into_owned())));
            let answer = tree.map_or("malformed", |tree| decide(hook, &tree, nodes, policy).label());
            return (Reading::Tree, answer);
        };
        assert!(parse(hook, body).expect("a review").read_lean());
        let decision = decide(hook, &lean, nodes, policy);
        let Ok(tree) = tree else { return (Reading::LeanOnly, decision.label()) };
        assert_eq!((lean.api_version, &lean.uid), (tree.api_version, &tree.uid));
        assert_eq!(decision, decide(hook, &tree, nodes, policy), "{hook:?}: {}", String::from_utf8_lossy(body));
        (Reading::Lean, decision.label())
    }

    #[test]
    fn the_usual_reviews_are_read_lean_and_decided_as_from_the_tree() {
        let nodes = cache();
        let at = policy(30, ProtectionLimit::Unlimited, false);
        let cases = [
            (Hook::NodeTaint, node_object()),
            (Hook::EndpointSlice, slice_object()),
            (Hook::Endpoint, endpoints_object()),
        ];
        for (hook, object) in cases {
            let body = review_body(hook, &object);
            assert_eq!(agree(hook, body.as_bytes(), &nodes, &at), (Reading::Lean, "patched"), "{hook:?}");
            let decision = decide(hook, &parse(hook, body.as_bytes()).expect("a review"), &nodes, &at);
            let Decision::Patch(patch) = decision else { panic!("{hook:?}: {decision:?}") };
            let mut patched = object.clone();
            json_patch::patch(&mut patched, &patch).expect("applies");
            let expected = match hook {
                Hook::NodeTaint => {
                    let mut node = object.clone();
                    node["spec"]["taints"].as_array_mut().expect("taints").remove(1);
                    node
                }
                Hook::EndpointSlice => {
                    let mut slice = object.clone();
                    slice["endpoints"][0]["conditions"] = json!({"ready": true, "serving": true, "terminating": false});
                    slice
                }
                Hook::Endpoint => {
                    let mut endpoints = object.clone();
                    endpoints["subsets"][0]["addresses"] = json!([{"ip": "10.0.0.9", "nodeName": "fine"},
                        {"ip": "10.0.0.1", "nodeName": "alive", "futureField": {"x": [1, 2.5, null]}}]);
                    endpoints["subsets"][0]["notReadyAddresses"] = json!([{"ip": "10.0.0.2", "nodeName": "dead"}]);
                    endpoints
                }
            };
            assert_eq!(patched, expected, "{hook:?}");
        }
    }

    /// SuperEdge's readers: a present `nodeunhealth` is the vote whatever its value, for
    /// the node hook (both readings of the review) and the endpoint hooks (the node cache).
    #[test]
    fn the_vote_is_the_annotations_presence() {
        let at = policy(30, ProtectionLimit::Unlimited, false);
        for (value, voted) in
            [(None, false), (Some("yes"), true), (Some(""), true), (Some("no"), true), (Some("true"), true)]
        {
            let want = if voted { "unchanged" } else { "patched" };
            let mut node = node_object();
            if let Some(value) = value {
                node["metadata"]["annotations"]["nodeunhealth"] = json!(value);
            }
            let body = review_body(Hook::NodeTaint, &node);
            assert_eq!(agree(Hook::NodeTaint, body.as_bytes(), &cache(), &at), (Reading::Lean, want), "{value:?}");

            // `alive` as the cache knows it, annotated so
            let nodes = cache();
            let mut cached = json!({"metadata": {"name": "alive", "annotations": {"edgegrid.io/edge-health-address": "10.0.0.1:51005"}},
                "status": {"conditions": [{"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-11-22T10:00:00Z"}]}});
            if let Some(value) = value {
                cached["metadata"]["annotations"]["nodeunhealth"] = json!(value);
            }
            nodes.apply(&serde_json::from_value(cached).expect("a node"));
            let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
                "metadata": {"name": "web-1", "namespace": "ns"},
                "endpoints": [{"addresses": ["10.0.0.1"], "nodeName": "alive", "conditions": {"ready": false}}]});
            let endpoints = json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "web", "namespace": "ns"},
                "subsets": [{"notReadyAddresses": [{"ip": "10.0.0.1", "nodeName": "alive"}]}]});
            for (hook, object) in [(Hook::EndpointSlice, slice), (Hook::Endpoint, endpoints)] {
                let body = review_body(hook, &object);
                assert_eq!(agree(hook, body.as_bytes(), &nodes, &at), (Reading::Lean, want), "{hook:?} {value:?}");
                let decision = decide(hook, &parse(hook, body.as_bytes()).expect("a review"), &nodes, &at);
                if let Decision::Patch(patch) = decision {
                    let mut patched = object.clone();
                    json_patch::patch(&mut patched, &patch).expect("applies");
                    let expected = match hook {
                        Hook::EndpointSlice => json!([{"addresses": ["10.0.0.1"], "nodeName": "alive",
                            "conditions": {"ready": true, "serving": true}}]),
                        _ => json!([{"addresses": [{"ip": "10.0.0.1", "nodeName": "alive"}]}]),
                    };
                    let field = if hook == Hook::EndpointSlice { "endpoints" } else { "subsets" };
                    assert_eq!(patched[field], expected, "{hook:?}");
                }
            }
        }
    }

    /// Odd bodies: each read lean or not as said, and answered as said (as the tree
    /// reading answers them wherever it reads them).
    #[test]
    fn odd_bodies_are_answered_as_the_tree_reading_answers_them() {
        use Reading::{Lean, LeanOnly, Tree};
        let nodes = cache();
        let at = policy(30, ProtectionLimit::Unlimited, false);
        let node = review_body(Hook::NodeTaint, &node_object());
        let in_old_object = |from: &str, to: &str| {
            let at = node.rfind(from).expect("in oldObject");
            format!("{}{to}{}", &node[..at], &node[at + from.len()..])
        };
        let nested = |depth: usize| format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        let cases: Vec<(&str, String, Reading, &str)> = vec![
            (
                "keys and strings escaped",
                node.replace("\"uid\"", "\"u\\u0069d\"").replace("\"Ready\"", "\"Re\\u0061dy\""),
                Lean,
                "patched",
            ),
            ("whitespace", node.replace(",\"", " ,\n\t\"").replace("\":", "\" : "), Lean, "patched"),
            (
                "a read field given twice: the last counts",
                node.replacen("\"spec\":", "\"spec\":{\"taints\":[]},\"spec\":", 1),
                Tree,
                "patched",
            ),
            (
                "a read field given twice, first of another type",
                node.replacen("\"taints\":", "\"taints\":7,\"taints\":", 1),
                Tree,
                "patched",
            ),
            (
                "a read annotation of another type",
                node.replace("\"a\":\"b\"", "\"nodeunhealth\":7"),
                Tree,
                "undecodable",
            ),
            (
                "read taints not a list",
                node.replacen("\"taints\":[", "\"taints\":{\"x\":[", 1).replacen("}]}", "}]}}", 1),
                Tree,
                "undecodable",
            ),
            (
                "a transition time that is no time",
                node.replace("2026-11-22T10:00:00Z", "yesterday"),
                Tree,
                "undecodable",
            ),
            (
                "a field nobody reads of another type: not judged",
                node.replace("\"annotations\":{\"a\":\"b\"}", "\"annotations\":{\"a\":\"b\"},\"labels\":5"),
                Lean,
                "patched",
            ),
            ("no object", node.replacen("\"object\":", "\"objectX\":", 1), Lean, "undecodable"),
            ("an object that is a number", review_body(Hook::NodeTaint, &json!(42)), Tree, "undecodable"),
            ("a CREATE", node.replace("\"UPDATE\"", "\"CREATE\""), Lean, "wrong_request"),
            (
                "resource not an object",
                node.replacen(
                    "\"resource\":{\"group\":\"\",\"resource\":\"nodes\",\"version\":\"v1\"}",
                    "\"resource\":[\"nodes\"]",
                    1,
                ),
                Lean,
                "wrong_request",
            ),
            (
                "nesting 120 deep where nothing is read",
                node.replacen("\"dryRun\":false", &format!("\"dryRun\":{}", nested(120)), 1),
                Lean,
                "patched",
            ),
            ("the object given twice", node.replacen("\"object\":", "\"object\":{},\"object\":", 1), Tree, "patched"),
            (
                "the request given twice",
                node.replacen("\"request\":", "\"request\":{},\"request\":", 1),
                Tree,
                "patched",
            ),
            ("uid given twice", node.replacen("\"uid\":", "\"uid\":\"a\",\"uid\":", 1), Tree, "patched"),
            (
                "serde_json's raw-value marker where keys are read (Value makes it an array)",
                node.replacen("\"a\":\"b\"", "\"$serde_json::private::RawValue\":\"[1]\"", 1),
                Tree,
                "undecodable",
            ),
            (
                "a lone surrogate in a read field",
                node.replacen("\"type\":\"Ready\"", "\"type\":\"\\ud800\"", 1),
                Tree,
                "malformed",
            ),
            ("kind not a review", node.replace("\"kind\":\"AdmissionReview\"", "\"kind\":\"Pod\""), Tree, "malformed"),
            ("no uid", node.replace("\"uid\":\"7f0b\"", "\"uid\":\"\""), Tree, "malformed"),
            ("trailing garbage", format!("{node} x"), Tree, "malformed"),
            ("not JSON", node[..node.len() - 1].to_string(), Tree, "malformed"),
            ("not an object", "[1]".to_string(), Tree, "malformed"),
            ("a lone surrogate in oldObject", in_old_object("\"a\":\"b\"", "\"a\":\"\\ud800\""), LeanOnly, "patched"),
            (
                "a number out of range where nothing is read",
                node.replacen("\"sizeBytes\":5", "\"sizeBytes\":1e400", 1),
                LeanOnly,
                "patched",
            ),
            (
                "a number out of range in oldObject",
                in_old_object("\"sizeBytes\":5", "\"sizeBytes\":1e400"),
                LeanOnly,
                "patched",
            ),
            (
                "nesting deeper than serde_json's Value goes, where nothing is read",
                node.replacen("\"dryRun\":false", &format!("\"dryRun\":{}", nested(130)), 1),
                LeanOnly,
                "patched",
            ),
            (
                "the raw-value marker holding no JSON, where nothing is read",
                node.replacen("\"dryRun\":false", "\"dryRun\":{\"$serde_json::private::RawValue\":\"[\"}", 1),
                LeanOnly,
                "patched",
            ),
        ];
        for (name, body, reading, answer) in cases {
            assert_ne!(body, node, "{name}: the case changes the body");
            assert_eq!(agree(Hook::NodeTaint, body.as_bytes(), &nodes, &at), (reading, answer), "{name}");
        }
        let mut invalid = node.clone().into_bytes();
        let at_old = node.rfind("\"b\"").expect("oldObject's annotation") + 1;
        invalid[at_old] = 0xff;
        assert_eq!(agree(Hook::NodeTaint, &invalid, &nodes, &at), (Tree, "malformed"), "invalid UTF-8 in oldObject");
        assert!(matches!(parse(Hook::NodeTaint, &invalid), Err(MalformedReview::NotJson(_))));
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let words = prop::sample::select(vec![
            "Ready",
            "Unknown",
            "True",
            "yes",
            "no",
            "NoExecute",
            "NoSchedule",
            "node.kubernetes.io/unreachable",
            "2026-11-22T10:00:00Z",
            "later",
            "1h",
            "0",
            "alive",
            "dead",
            "ghost",
            "bounded",
            "é\u{1F600}\"\\",
        ]);
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            words.prop_map(Value::from),
        ];
        let keys = prop::sample::select(vec![
            "type",
            "status",
            "key",
            "effect",
            "nodeName",
            "ready",
            "terminating",
            "conditions",
            "taints",
            "annotations",
            "nodeunhealth",
            "superedge.io/max-unreachable-protection",
            "lastTransitionTime",
            "ip",
            "x",
        ]);
        leaf.prop_recursive(4, 24, 4, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((keys.clone(), inner), 0..4)
                    .prop_map(|fields| Value::Object(fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
            ]
        })
    }

    /// A plausible object for `hook` (mostly decodable), with random values put in.
    fn arb_object() -> impl Strategy<Value = (Hook, Value)> {
        let node_name = prop::sample::select(NODE_NAMES.to_vec());
        let taint = (
            prop::sample::select(vec!["node.kubernetes.io/unreachable", "other"]),
            prop::sample::select(vec!["NoExecute", "NoSchedule"]),
        )
            .prop_map(|(key, effect)| json!({"key": key, "effect": effect}));
        let condition = (
            prop::sample::select(vec!["Ready", "MemoryPressure"]),
            prop::sample::select(vec!["Unknown", "True", "False"]),
            prop::sample::select(vec!["2026-11-22T10:00:00Z", "2026-11-22T11:00:00+01:00", "2026-11-22T09:00:00Z"]),
        )
            .prop_map(|(kind, status, since)| json!({"type": kind, "status": status, "lastTransitionTime": since}));
        let annotations = prop::collection::btree_map(
            prop::sample::select(vec!["nodeunhealth", "superedge.io/max-unreachable-protection", "other"]),
            prop::sample::select(vec!["yes", "no", "1h", "10m", "0", "soon"]),
            0..3,
        );
        let node = (prop::collection::vec(taint, 0..4), prop::collection::vec(condition, 0..3), annotations).prop_map(
            |(taints, conditions, annotations)| {
                (
                    Hook::NodeTaint,
                    json!({"metadata": {"name": "n", "annotations": annotations},
                    "spec": {"taints": taints}, "status": {"conditions": conditions}}),
                )
            },
        );
        let endpoint = (node_name.clone(), any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
            |(node, ready, terminating, named)| {
                let mut endpoint =
                    json!({"addresses": ["10.0.0.1"], "conditions": {"ready": ready, "terminating": terminating}});
                if named {
                    endpoint["nodeName"] = json!(node);
                }
                endpoint
            },
        );
        let slice = prop::collection::vec(endpoint, 0..6)
            .prop_map(|endpoints| (Hook::EndpointSlice, json!({"addressType": "IPv4", "endpoints": endpoints})));
        let address =
            (node_name, 0u8..9).prop_map(|(node, ip)| json!({"ip": format!("10.0.0.{ip}"), "nodeName": node}));
        let subset = (prop::collection::vec(address.clone(), 0..3), prop::collection::vec(address, 0..4))
            .prop_map(|(ready, not_ready)| json!({"addresses": ready, "notReadyAddresses": not_ready}));
        let endpoints =
            prop::collection::vec(subset, 0..3).prop_map(|subsets| (Hook::Endpoint, json!({"subsets": subsets})));
        // a random value at a random place, now and then
        let paths = prop::sample::select(vec![
            "/spec/taints/0",
            "/spec/taints/0/key",
            "/status/conditions/0/status",
            "/status/conditions",
            "/metadata/annotations",
            "/metadata/annotations/nodeunhealth",
            "/endpoints/0/conditions",
            "/endpoints/0/nodeName",
            "/endpoints/1",
            "/subsets/0/notReadyAddresses",
            "/subsets/0/notReadyAddresses/0/nodeName",
            "/extra",
            "/spec",
        ]);
        (prop_oneof![node, slice, endpoints], prop::option::weighted(0.3, (paths, arb_json()))).prop_map(
            |((hook, mut object), odd)| {
                match odd {
                    Some(("/extra", value)) => object["extra"] = value,
                    Some((path, value)) => {
                        if let Some(slot) = object.pointer_mut(path) {
                            *slot = value;
                        }
                    }
                    None => {}
                }
                (hook, object)
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Whatever the object, the other fields and the policy, the lean reading answers
        /// as the tree reading; and it reads every such body.
        #[test]
        fn the_lean_reading_decides_as_the_tree_reading(
            (hook, object) in arb_object(),
            sent_to in prop::sample::select(Hook::ALL.to_vec()),
            old in arb_json(),
            minutes in 0i64..120,
            default in prop::sample::select(vec![ProtectionLimit::Unlimited, ProtectionLimit::parse("30m").expect("a limit")]),
            always_reachable in any::<bool>(),
            v1 in any::<bool>(),
        ) {
            let mut body: Value = serde_json::from_str(&review_body(hook, &object)).expect("JSON");
            body["request"]["oldObject"] = old;
            if !v1 {
                body["apiVersion"] = json!("admission.k8s.io/v1beta1");
            }
            let (reading, _) = agree(sent_to, body.to_string().as_bytes(), &cache(), &policy(minutes, default, always_reachable));
            // given up only where the object does not decode (it never is malformed JSON here)
            prop_assert_eq!(reading == Reading::Lean, ObjectView::from_value(sent_to, object).is_ok());
        }
    }
}
