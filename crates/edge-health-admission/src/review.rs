//! AdmissionReview in and out, and what to do with each request: pure, no I/O.
//!
//! This webhook must never block the cluster: anything it does not understand (another
//! resource, another operation, an object that does not decode, a node it does not know,
//! a node cache not synced yet) is allowed unchanged. Only a body that is not an
//! AdmissionReview at all is refused, with 400, because then there is no uid to answer.

use std::collections::BTreeMap;

use base64::Engine;
use edgegrid_core::admission;
use edgegrid_core::protection::{NodeFacts, ProtectionLimit, Timestamp};
use json_patch::Patch;
use k8s_openapi::api::core::v1::{Endpoints, Node};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::{Value, json};

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

/// A parsed AdmissionReview request.
#[derive(Clone, Debug, PartialEq)]
pub struct Review {
    /// Echoed in the response: the apiserver only accepts its own version back.
    pub api_version: String,
    pub uid: String,
    pub request: Value,
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

pub fn parse(body: &[u8]) -> Result<Review, MalformedReview> {
    let value: Value = serde_json::from_slice(body).map_err(|e| MalformedReview::NotJson(e.to_string()))?;
    let kind = value["kind"].as_str().unwrap_or_default();
    if kind != "AdmissionReview" {
        return Err(MalformedReview::NotAReview(kind.to_string()));
    }
    let api_version = value["apiVersion"].as_str().unwrap_or_default();
    if !API_VERSIONS.contains(&api_version) {
        return Err(MalformedReview::UnsupportedVersion(api_version.to_string()));
    }
    let uid = value["request"]["uid"].as_str().filter(|u| !u.is_empty()).ok_or(MalformedReview::NoUid)?;
    Ok(Review { api_version: api_version.to_string(), uid: uid.to_string(), request: value["request"].clone() })
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
    /// The node's state, `None` when unknown or without a Ready condition.
    fn state(&self, node: &str) -> Option<NodeFacts>;
}

/// How nodes are judged (`edgegrid_core::protection`).
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    pub now: Timestamp,
    /// The cluster-wide `--max-unreachable-protection`.
    pub default: ProtectionLimit,
    /// SuperEdge's `--always-reachable`: protect an Unknown node even when its unit voted
    /// it unhealthy.
    pub always_reachable: bool,
}

impl Policy {
    fn facts(&self, mut facts: NodeFacts) -> NodeFacts {
        if self.always_reachable {
            facts.voted_unhealthy = false;
        }
        facts
    }
}

/// Decides one request for `hook` under `policy`.
pub fn decide(hook: Hook, request: &Value, nodes: &impl NodeVerdicts, policy: &Policy) -> Decision {
    let (group, resource) = hook.resource();
    let got = (
        request["resource"]["group"].as_str().unwrap_or_default(),
        request["resource"]["resource"].as_str().unwrap_or_default(),
        request["operation"].as_str().unwrap_or_default(),
    );
    if (got.0, got.1) != (group, resource) || got.2 != "UPDATE" {
        return Decision::Skipped(Skip::WrongRequest(format!(
            "{} of {}/{} sent to {}",
            got.2,
            got.0,
            got.1,
            hook.path()
        )));
    }
    let object = &request["object"];
    let decodable = match hook {
        Hook::NodeTaint => decodes::<Node>(object),
        Hook::Endpoint => decodes::<Endpoints>(object),
        Hook::EndpointSlice => decodes::<EndpointSlice>(object),
    };
    if let Err(error) = decodable {
        return Decision::Skipped(Skip::Undecodable(error));
    }
    let patch = match hook {
        // the node in the request is the verdict's subject: its own state decides
        Hook::NodeTaint => admission::node_facts(object)
            .and_then(|facts| admission::node_patch_judging(object, &policy.facts(facts), policy.now, policy.default)),
        Hook::Endpoint | Hook::EndpointSlice => {
            if !nodes.synced() {
                return Decision::Skipped(Skip::NodesNotSynced);
            }
            let states: BTreeMap<String, NodeFacts> = node_names(object)
                .filter_map(|name| Some((name.to_string(), policy.facts(nodes.state(name)?))))
                .collect();
            match hook {
                Hook::Endpoint => admission::endpoints_patch(object, &states, policy.now, policy.default),
                _ => admission::endpoint_slice_patch(object, &states, policy.now, policy.default),
            }
        }
    };
    patch.map_or(Decision::Unchanged, Decision::Patch)
}

fn decodes<T: serde::de::DeserializeOwned>(object: &Value) -> Result<(), String> {
    if !object.is_object() {
        return Err("request.object is not an object".into());
    }
    T::deserialize(object).map(|_| ()).map_err(|e| e.to_string())
}

/// The node names an Endpoints or EndpointSlice object refers to.
fn node_names(object: &Value) -> impl Iterator<Item = &str> {
    let slice = object["endpoints"].as_array().into_iter().flatten();
    let subsets = object["subsets"].as_array().into_iter().flatten().flat_map(|s| {
        let ready = s["addresses"].as_array().into_iter().flatten();
        ready.chain(s["notReadyAddresses"].as_array().into_iter().flatten())
    });
    slice.chain(subsets).filter_map(|e| e["nodeName"].as_str())
}

/// The AdmissionReview response: always allowed, with the patch if there is one.
pub fn response(review: &Review, decision: &Decision) -> Value {
    let mut response = json!({"uid": review.uid, "allowed": true});
    if let Decision::Patch(patch) = decision {
        let encoded = serde_json::to_vec(patch).unwrap_or_default();
        response["patchType"] = json!("JSONPatch");
        response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(encoded));
    }
    json!({"apiVersion": review.api_version, "kind": "AdmissionReview", "response": response})
}
