//! The `nodeunhealth` verdict as the cloud writes it, from what each edge-health daemon
//! publishes on its own Node.
//!
//! Why the cloud writes it: an edge identity may write only its own Node (the chart's
//! ValidatingAdmissionPolicy keys it on the node name in the pod's token), and a policy
//! cannot learn which unit a requester is in, so a compromised node allowed to write
//! `nodeunhealth` on other nodes could write it on any node of any unit. Instead each
//! daemon publishes on its own Node the members it holds Unhealthy
//! ([`crate::keys::EDGE_HEALTH_UNHEALTHY_VIEW_ANNOTATION`], changed only when its view changes:
//! a few writes per death, not per period), and a cloud component that watches Nodes
//! anyway (the admission webhook's deployment) applies the vote's rule to those views and
//! writes the verdict: the split node-feature-discovery and OVN-Kubernetes make between
//! node agents and the one writer.
//!
//! The voters are the nodes running edge-health (publishing its address,
//! [`crate::membership::runs_edge_health`]; the caller passes no other): a node of a unit
//! running SuperEdge's edge-health instead, mid-migration, neither votes nor is voted on,
//! as edge-health's daemons keep it out of their units.
//!
//! The rule, for a node `t` of home unit `U` (the lowest of its units, as edge-health's
//! writer rule): the **eligible** voters are `U`'s members other than `t` not currently
//! annotated unhealthy (a dead voter cannot update its view: once voted down it no
//! longer counts, as in the daemons' vote). `t` is **Unhealthy** when more than half of
//! them publish a view holding it so, **Healthy** when more than half publish a view that
//! does not; otherwise (members without a published view, ties) nothing changes. Each
//! honest view is itself the outcome of the unit's signed-ballot vote, and a node can
//! only publish its own view, so fewer than half of the eligible voters lying cannot move
//! a verdict either way.

use std::collections::{BTreeMap, BTreeSet};

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, TestOperation};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

use crate::health::Verdict;
use crate::keys::{NODE_UNHEALTH_ANNOTATION, NODE_UNHEALTH_YES};
use crate::membership::UnitId;

/// The view annotation's value: the names, sorted, comma-separated (`""`: nobody).
pub fn format_view<'a>(unhealthy: impl IntoIterator<Item = &'a str>) -> String {
    let names: BTreeSet<&str> = unhealthy.into_iter().collect();
    names.into_iter().collect::<Vec<_>>().join(",")
}

/// The names a view annotation holds unhealthy (blanks and empty entries ignored).
pub fn parse_view(value: &str) -> BTreeSet<String> {
    value.split(',').map(str::trim).filter(|n| !n.is_empty()).map(String::from).collect()
}

/// One node as the cloud's vote reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Voter {
    pub name: String,
    /// The units it is in, lowest (its home unit) first.
    pub units: BTreeSet<UnitId>,
    /// What its daemon publishes (`None`: nothing yet).
    pub view: Option<BTreeSet<String>>,
    /// Its Node carries `nodeunhealth` (any value: [`ObservedNode::annotated_unhealthy`]).
    pub annotated_unhealthy: bool,
}

/// The verdict of every node in a unit (see the module comment), before comparing with
/// what its Node says. Nodes in no unit get none.
pub fn verdicts(voters: &[Voter]) -> BTreeMap<String, Verdict> {
    let mut members: BTreeMap<&UnitId, Vec<&Voter>> = BTreeMap::new();
    for voter in voters {
        for unit in &voter.units {
            members.entry(unit).or_default().push(voter);
        }
    }
    let mut out = BTreeMap::new();
    for target in voters {
        let Some(home) = target.units.first() else { continue };
        let eligible: Vec<&Voter> =
            members[home].iter().copied().filter(|v| v.name != target.name && !v.annotated_unhealthy).collect();
        let (mut accusing, mut clearing) = (0, 0);
        for voter in &eligible {
            match &voter.view {
                Some(view) if view.contains(&target.name) => accusing += 1,
                Some(_) => clearing += 1,
                None => {}
            }
        }
        let verdict = if 2 * accusing > eligible.len() {
            Verdict::Unhealthy
        } else if 2 * clearing > eligible.len() {
            Verdict::Healthy
        } else {
            Verdict::Undecided
        };
        out.insert(target.name.clone(), verdict);
    }
    out
}

/// What the writer needs to know of a Node to patch it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedNode {
    pub name: String,
    pub resource_version: String,
    /// Whether `metadata.annotations` exists at all (a JSON patch cannot add a key to a
    /// map that is not there).
    pub has_annotations: bool,
    /// The current value of the `nodeunhealth` annotation.
    pub unhealth: Option<String>,
}

impl ObservedNode {
    pub fn from_meta(meta: &ObjectMeta) -> Self {
        Self {
            name: meta.name.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            has_annotations: meta.annotations.is_some(),
            unhealth: meta.annotations.as_ref().and_then(|a| a.get(NODE_UNHEALTH_ANNOTATION)).cloned(),
        }
    }

    /// What the annotation says: present, whatever its value, means unhealthy, as every
    /// reader reads it ([`crate::protection::voted_unhealthy`], SuperEdge's included).
    pub fn annotated_unhealthy(&self) -> bool {
        crate::protection::voted_unhealthy(self.unhealth.as_deref())
    }
}

/// A JSON patch (RFC 6902) for one Node.
#[derive(Clone, Debug, PartialEq)]
pub struct AnnotationPatch {
    pub node: String,
    /// What the patch makes the annotation say.
    pub unhealthy: bool,
    pub patch: json_patch::Patch,
}

/// The smallest patch making `observed` say `verdict`, or `None` when it already does or
/// the verdict is Undecided (nothing is known, so nothing is written).
///
/// Marking adds `nodeunhealth: "yes"` (creating the annotation map if there is none);
/// clearing removes the key whatever its value. A present value other than `"yes"`
/// already reads as unhealthy to every reader, so marking leaves it alone, as SuperEdge's
/// writer does. Every patch first tests `metadata.resourceVersion`.
pub fn annotation_patch(observed: &ObservedNode, verdict: Verdict) -> Option<AnnotationPatch> {
    let unhealthy = match verdict {
        Verdict::Undecided => return None,
        Verdict::Unhealthy if observed.annotated_unhealthy() => return None,
        Verdict::Healthy if !observed.annotated_unhealthy() => return None,
        Verdict::Unhealthy => true,
        Verdict::Healthy => false,
    };
    let pointer = |tokens: &[&str]| PointerBuf::from_tokens(tokens.iter().copied());
    let key = || pointer(&["metadata", "annotations", NODE_UNHEALTH_ANNOTATION]);
    let precondition = PatchOperation::Test(TestOperation {
        path: pointer(&["metadata", "resourceVersion"]),
        value: json!(observed.resource_version),
    });
    let change = match (unhealthy, observed.has_annotations) {
        (true, true) => PatchOperation::Add(AddOperation { path: key(), value: json!(NODE_UNHEALTH_YES) }),
        (true, false) => PatchOperation::Add(AddOperation {
            path: pointer(&["metadata", "annotations"]),
            value: json!({NODE_UNHEALTH_ANNOTATION: NODE_UNHEALTH_YES}),
        }),
        (false, _) => PatchOperation::Remove(RemoveOperation { path: key() }),
    };
    Some(AnnotationPatch { node: observed.name.clone(), unhealthy, patch: Patch(vec![precondition, change]) })
}

#[cfg(test)]
mod tests;
