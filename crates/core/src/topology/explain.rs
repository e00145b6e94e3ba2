//! Why the local node keeps or drops each endpoint of one Service: the answer behind a
//! wrapper's `GET /debug/topology?service=ns/name`.
//!
//! [`PrunedView::explain`](super::PrunedView::explain) gathers the Service's cached inputs
//! and `explain_service` decides from them exactly as the pruning functions do (it calls
//! [`prune::service_filter`], [`EndpointFilter::keeps`] and the `default/kubernetes`
//! rewrite check), recording at each step which rule and which key decided. Whether an
//! endpoint is `kept` comes from those same functions, so the endpoints marked kept are
//! the ones [`PrunedView::pruned`](super::PrunedView::pruned) serves; the tests hold it to
//! that on random views. Pure: no I/O, and no input makes it panic.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::Endpoints;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde::Serialize;

use super::local_endpoint::LocalEndpoint;
use super::namespaced_name::NamespacedName;
use super::policy::{OrderedKey, PolicyError, TopologyPolicy};
use super::prune::{self, Candidate, EndpointFilter, Labels, NodeLabels};
use crate::keys;

/// The topology decision for one Service on this node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TopologyExplanation {
    /// `namespace/name`.
    pub service: String,
    /// Whether a Service object is cached. Without one its objects pass through.
    pub service_known: bool,
    pub local_node: String,
    /// Whether the local node's labels are cached.
    pub local_node_known: bool,
    /// The local node's value for each label key the policy reads (`null`: it lacks the
    /// key, or is unknown). Empty for a pass-through policy.
    pub local_node_values: BTreeMap<String, Option<String>>,
    /// The policy in force (`passThrough` when the annotations were unreadable).
    pub policy: PolicyExplanation,
    /// Why the topology annotations could not be read; the Service then passes through.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_error: Option<String>,
    /// What the policy decided for the local node.
    pub filter: FilterExplanations,
    /// Every slice labelled with the Service (by name), then its Endpoints object.
    pub objects: Vec<ObjectExplanation>,
}

/// The Service's policy, as read from its annotations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "mode", rename_all = "camelCase")]
pub enum PolicyExplanation {
    PassThrough,
    AnyKey {
        keys: Vec<String>,
    },
    /// Keys in order; `"*"` is the wildcard.
    Ordered {
        keys: Vec<String>,
    },
}

/// The filter is decided once over all the Service's slices and once over its Endpoints
/// object. The two differ only in ordered mode, which looks at readiness.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FilterExplanations {
    pub endpoint_slices: FilterExplanation,
    pub endpoints: FilterExplanation,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FilterExplanation {
    pub decision: FilterDecision,
    /// For `sameValueFor`: keep an endpoint whose node has any of these `[key, value]` pairs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub same_value_for: Vec<(String, String)>,
    /// Why, naming the rule and the key that decided.
    pub reason: String,
    /// Ordered mode only: what each key did, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ordered_steps: Vec<OrderedStep>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum FilterDecision {
    All,
    Nothing,
    SameValueFor,
}

/// One key of an ordered policy and its part in the decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OrderedStep {
    pub key: String,
    pub outcome: StepOutcome,
    pub reason: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum StepOutcome {
    /// The local node lacks the key (or is unknown).
    Skipped,
    /// No ready endpoint runs on a node sharing the local node's value.
    NoReadyEndpoint,
    /// This key decided (for `"*"`: every endpoint).
    Won,
    /// No key won and there is no `"*"`: this first key the local node carries applies.
    Fallback,
    /// An earlier key won.
    NotReached,
}

/// One EndpointSlice or Endpoints object of the Service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectExplanation {
    pub kind: ExplainedKind,
    pub name: String,
    /// Set when the object is served as the `default/kubernetes` local apiserver address
    /// instead of its own endpoints.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_rewrite: Option<LocalRewrite>,
    /// In the object's order (core Endpoints: per subset, ready then not-ready addresses).
    pub endpoints: Vec<EndpointExplanation>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ExplainedKind {
    EndpointSlice,
    Endpoints,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LocalRewrite {
    pub ip: String,
    pub port: i32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointExplanation {
    pub addresses: Vec<String>,
    pub node_name: Option<String>,
    pub ready: bool,
    /// Core Endpoints only: the index of the subset in the upstream object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subset: Option<usize>,
    /// Whether the pruned object served to this node contains this endpoint.
    pub kept: bool,
    pub rule: EndpointRule,
    /// `kept: …`, `dropped: …` or `rewritten: …`, naming the rule and the key.
    pub reason: String,
}

/// The rule that decided one endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum EndpointRule {
    PassThrough,
    OrderedWildcard,
    SameValue,
    DifferentValue,
    NoNodeName,
    UnknownNode,
    LocalNodeUnknown,
    LocalNodeLacksKeys,
    LocalRewrite,
    /// The local unit's edge-health voted the endpoint's node down.
    NodeDown,
}

impl EndpointRule {
    /// Whether the rule keeps the endpoint in the served object.
    pub fn keeps(self) -> bool {
        matches!(self, Self::PassThrough | Self::OrderedWildcard | Self::SameValue)
    }
}

/// What [`explain_service`] reads: one Service's cached inputs.
pub(super) struct ExplainInput<'a, N: NodeLabels> {
    pub service: &'a NamespacedName,
    pub local_node: &'a str,
    pub nodes: &'a N,
    pub rewrite_local_apiserver: bool,
    /// The cached Service's policy and annotation error; `None` when no Service is cached.
    pub policy: Option<(&'a TopologyPolicy, Option<&'a PolicyError>)>,
    /// The slices labelled with the Service, in the order to report them.
    pub slices: Vec<&'a EndpointSlice>,
    /// The Endpoints object named like the Service.
    pub endpoints: Option<&'a Endpoints>,
}

const PASS_THROUGH: TopologyPolicy = TopologyPolicy::PassThrough;

pub(super) fn explain_service<N: NodeLabels>(input: ExplainInput<'_, N>) -> TopologyExplanation {
    let local = input.nodes.labels(input.local_node);
    let (policy, state) = match input.policy {
        None => (&PASS_THROUGH, PolicyState::NotCached),
        Some((_, Some(_))) => (&PASS_THROUGH, PolicyState::Unreadable),
        Some((policy, None)) => (policy, PolicyState::Read),
    };
    let base = Base { policy, state, local_node: input.local_node, local, nodes: input.nodes };

    let slice_candidates: Vec<Candidate<'_>> = input.slices.iter().flat_map(|s| prune::slice_candidates(s)).collect();
    let slice_decision = base.decide(&slice_candidates);
    let endpoints_candidates: Vec<Candidate<'_>> =
        input.endpoints.into_iter().flat_map(prune::endpoints_candidates).collect();
    let endpoints_decision = base.decide(&endpoints_candidates);

    let mut objects = Vec::with_capacity(input.slices.len() + 1);
    for slice in &input.slices {
        let rewrite =
            if input.rewrite_local_apiserver { LocalEndpoint::for_slice(slice, input.endpoints) } else { None };
        let rows =
            slice.endpoints.iter().zip(prune::slice_candidates(slice)).map(|(e, c)| (e.addresses.clone(), None, c));
        objects.push(base.object(ExplainedKind::EndpointSlice, &slice.metadata.name, rows, &slice_decision, rewrite));
    }
    if let Some(endpoints) = input.endpoints {
        let rewrite = if input.rewrite_local_apiserver { LocalEndpoint::for_endpoints(endpoints) } else { None };
        let ips = endpoints.subsets.iter().flatten().enumerate().flat_map(|(i, subset)| {
            let ready = subset.addresses.iter().flatten();
            let not_ready = subset.not_ready_addresses.iter().flatten();
            ready.chain(not_ready).map(move |a| (vec![a.ip.clone()], Some(i)))
        });
        let rows = ips.zip(prune::endpoints_candidates(endpoints)).map(|((ips, i), c)| (ips, i, c));
        objects.push(base.object(
            ExplainedKind::Endpoints,
            &endpoints.metadata.name,
            rows,
            &endpoints_decision,
            rewrite,
        ));
    }

    TopologyExplanation {
        service: format!("{}/{}", input.service.namespace, input.service.name),
        service_known: input.policy.is_some(),
        local_node: input.local_node.to_string(),
        local_node_known: local.is_some(),
        local_node_values: label_keys(policy)
            .into_iter()
            .map(|k| (k.to_string(), local.and_then(|l| l.get(k)).cloned()))
            .collect(),
        policy: match policy {
            TopologyPolicy::PassThrough => PolicyExplanation::PassThrough,
            TopologyPolicy::AnyKey(keys) => PolicyExplanation::AnyKey { keys: keys.clone() },
            TopologyPolicy::Ordered(keys) => {
                PolicyExplanation::Ordered { keys: keys.iter().map(|k| ordered_key_name(k).to_string()).collect() }
            }
        },
        policy_error: input.policy.and_then(|(_, e)| e).map(ToString::to_string),
        filter: FilterExplanations {
            endpoint_slices: slice_decision.explanation,
            endpoints: endpoints_decision.explanation,
        },
        objects,
    }
}

#[derive(Clone, Copy)]
enum PolicyState {
    NotCached,
    Unreadable,
    Read,
}

/// Why a filter is what it is; the per-endpoint reasons follow from it.
enum Basis {
    NoService,
    Unreadable,
    NoKeys,
    Wildcard,
    LocalUnknown,
    LocalLacksEveryKey(String),
    SameValue,
}

struct Decision {
    filter: EndpointFilter,
    basis: Basis,
    explanation: FilterExplanation,
}

/// What every decision of one Service shares.
struct Base<'a, N: NodeLabels> {
    policy: &'a TopologyPolicy,
    state: PolicyState,
    local_node: &'a str,
    local: Option<&'a Labels>,
    nodes: &'a N,
}

impl<N: NodeLabels> Base<'_, N> {
    fn decide(&self, candidates: &[Candidate<'_>]) -> Decision {
        let filter = prune::service_filter(self.policy, self.local, self.nodes, candidates.iter().copied());
        let ordered_steps = match self.policy {
            TopologyPolicy::Ordered(keys) => self.ordered_steps(keys, candidates),
            _ => Vec::new(),
        };
        let basis = match (&filter, self.policy) {
            (EndpointFilter::All, TopologyPolicy::PassThrough) => match self.state {
                PolicyState::NotCached => Basis::NoService,
                PolicyState::Unreadable => Basis::Unreadable,
                PolicyState::Read => Basis::NoKeys,
            },
            (EndpointFilter::All, _) => Basis::Wildcard,
            (EndpointFilter::Nothing, _) if self.local.is_none() => Basis::LocalUnknown,
            (EndpointFilter::Nothing, _) => Basis::LocalLacksEveryKey(label_keys(self.policy).join(", ")),
            (EndpointFilter::SameValueFor(_), _) => Basis::SameValue,
        };
        let (decision, same_value_for) = match &filter {
            EndpointFilter::All => (FilterDecision::All, Vec::new()),
            EndpointFilter::Nothing => (FilterDecision::Nothing, Vec::new()),
            EndpointFilter::SameValueFor(pairs) => (FilterDecision::SameValueFor, pairs.clone()),
        };
        let reason = self.filter_reason(&basis, &filter, &ordered_steps);
        Decision { filter, basis, explanation: FilterExplanation { decision, same_value_for, reason, ordered_steps } }
    }

    fn local_unknown(&self) -> String {
        format!("local node {} is unknown (no labels cached)", self.local_node)
    }

    fn filter_reason(&self, basis: &Basis, filter: &EndpointFilter, steps: &[OrderedStep]) -> String {
        let annotation = keys::TOPOLOGY_KEYS_ANNOTATION;
        let wildcard = keys::TOPOLOGY_WILDCARD;
        match basis {
            Basis::NoService => "pass-through: no cached Service object".to_string(),
            Basis::Unreadable => "pass-through: topology annotations unreadable (see policyError)".to_string(),
            Basis::NoKeys => format!("pass-through: Service has no {annotation}"),
            Basis::Wildcard => format!(
                "ordered wildcard \"{wildcard}\" reached: no earlier key has a ready endpoint on a node \
                 sharing the local node's value, so every endpoint is kept"
            ),
            Basis::LocalUnknown => self.local_unknown(),
            Basis::LocalLacksEveryKey(keys) => format!("local node {} lacks every key ({keys})", self.local_node),
            Basis::SameValue => {
                let pairs = match filter {
                    EndpointFilter::SameValueFor(pairs) => pairs.as_slice(),
                    _ => &[],
                };
                let listed = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" or ");
                match self.policy {
                    TopologyPolicy::Ordered(_) => {
                        let decided =
                            steps.iter().find(|s| matches!(s.outcome, StepOutcome::Won | StepOutcome::Fallback));
                        match decided {
                            Some(step) if step.outcome == StepOutcome::Won => format!(
                                "ordered key \"{}\" decided ({listed}): the first key with a ready endpoint on a \
                                 node sharing the local node's value",
                                step.key
                            ),
                            Some(step) => format!(
                                "ordered key \"{}\" decided ({listed}) as a fallback: no key has a ready endpoint \
                                 on a node sharing the local node's value and there is no \"{wildcard}\", so the \
                                 first key the local node carries applies and no traffic leaks to other values",
                                step.key
                            ),
                            None => format!("ordered: keep endpoints on nodes with {listed}"),
                        }
                    }
                    _ => {
                        let mut reason = format!("any key (SuperEdge rule): keep endpoints on nodes with {listed}");
                        let lacking: Vec<&str> = label_keys(self.policy)
                            .into_iter()
                            .filter(|k| self.local.and_then(|l| l.get(*k)).is_none())
                            .collect();
                        if !lacking.is_empty() {
                            let _ = write!(reason, "; local node lacks {}", lacking.join(", "));
                        }
                        reason
                    }
                }
            }
        }
    }

    /// The ordered walk of [`prune::service_filter`], recording each key's part.
    fn ordered_steps(&self, keys: &[OrderedKey], candidates: &[Candidate<'_>]) -> Vec<OrderedStep> {
        let mut steps = Vec::with_capacity(keys.len());
        let mut decided = false;
        let mut first_applicable = None;
        for key in keys {
            let name = ordered_key_name(key).to_string();
            if decided {
                steps.push(OrderedStep {
                    key: name,
                    outcome: StepOutcome::NotReached,
                    reason: "an earlier key decided".into(),
                });
                continue;
            }
            let label = match key {
                OrderedKey::Wildcard => {
                    decided = true;
                    let reason = "every endpoint, with or without a node".to_string();
                    steps.push(OrderedStep { key: name, outcome: StepOutcome::Won, reason });
                    continue;
                }
                OrderedKey::Label(label) => label,
            };
            let Some(value) = self.local.and_then(|l| l.get(label)) else {
                let reason =
                    if self.local.is_none() { self.local_unknown() } else { format!("local node lacks {label}") };
                steps.push(OrderedStep { key: name, outcome: StepOutcome::Skipped, reason });
                continue;
            };
            let filter = EndpointFilter::SameValueFor(vec![(label.clone(), value.clone())]);
            let ready = candidates.iter().filter(|c| c.ready && filter.keeps(**c, self.nodes)).count();
            if ready > 0 {
                decided = true;
                let reason = format!("{ready} ready endpoint(s) on nodes with {label}={value}");
                steps.push(OrderedStep { key: name, outcome: StepOutcome::Won, reason });
            } else {
                first_applicable.get_or_insert(steps.len());
                let reason = format!("no ready endpoint on a node with {label}={value}");
                steps.push(OrderedStep { key: name, outcome: StepOutcome::NoReadyEndpoint, reason });
            }
        }
        if !decided && let Some(step) = first_applicable.and_then(|i| steps.get_mut(i)) {
            step.outcome = StepOutcome::Fallback;
            step.reason.push_str("; applies as the first key the local node carries");
        }
        steps
    }

    fn object<'c>(
        &self,
        kind: ExplainedKind,
        name: &Option<String>,
        rows: impl Iterator<Item = (Vec<String>, Option<usize>, Candidate<'c>)>,
        decision: &Decision,
        rewrite: Option<LocalEndpoint>,
    ) -> ObjectExplanation {
        let endpoints = rows
            .map(|(addresses, subset, candidate)| {
                let (kept, rule, reason) = match &rewrite {
                    Some(local) => (
                        false,
                        EndpointRule::LocalRewrite,
                        format!(
                            "rewritten: {}/{} local apiserver endpoint (served as {} port {} instead)",
                            keys::KUBERNETES_SERVICE_NAMESPACE,
                            keys::KUBERNETES_SERVICE_NAME,
                            local.ip,
                            local.port
                        ),
                    ),
                    None => {
                        let (rule, reason) = self.endpoint_reason(decision, candidate);
                        (decision.filter.keeps(candidate, self.nodes), rule, reason)
                    }
                };
                EndpointExplanation {
                    addresses,
                    node_name: candidate.node.map(str::to_string),
                    ready: candidate.ready,
                    subset,
                    kept,
                    rule,
                    reason,
                }
            })
            .collect();
        ObjectExplanation {
            kind,
            name: name.clone().unwrap_or_default(),
            local_rewrite: rewrite.map(|l| LocalRewrite { ip: l.ip.to_string(), port: l.port }),
            endpoints,
        }
    }

    fn endpoint_reason(&self, decision: &Decision, candidate: Candidate<'_>) -> (EndpointRule, String) {
        if let Some(node) = candidate.node.filter(|n| self.nodes.is_down(n)) {
            let reason = format!("dropped: node {node} was voted down by the local unit's edge-health");
            return (EndpointRule::NodeDown, reason);
        }
        let pairs = match (&decision.basis, &decision.filter) {
            (Basis::NoService, _) => {
                return (EndpointRule::PassThrough, "kept: pass-through (no cached Service object)".into());
            }
            (Basis::Unreadable, _) => {
                return (EndpointRule::PassThrough, "kept: pass-through (topology annotations unreadable)".into());
            }
            (Basis::NoKeys, _) => {
                let reason = format!("kept: pass-through (Service has no {})", keys::TOPOLOGY_KEYS_ANNOTATION);
                return (EndpointRule::PassThrough, reason);
            }
            (Basis::Wildcard, _) => {
                return (
                    EndpointRule::OrderedWildcard,
                    format!("kept: ordered wildcard \"{}\"", keys::TOPOLOGY_WILDCARD),
                );
            }
            (Basis::LocalUnknown, _) => {
                return (EndpointRule::LocalNodeUnknown, format!("dropped: {}", self.local_unknown()));
            }
            (Basis::LocalLacksEveryKey(keys), _) => {
                let reason = format!("dropped: local node {} lacks every key ({keys})", self.local_node);
                return (EndpointRule::LocalNodeLacksKeys, reason);
            }
            (Basis::SameValue, EndpointFilter::SameValueFor(pairs)) => pairs.as_slice(),
            (Basis::SameValue, _) => &[],
        };
        let Some(node) = candidate.node else {
            return (EndpointRule::NoNodeName, "dropped: endpoint has no nodeName".into());
        };
        let Some(labels) = self.nodes.labels(node) else {
            return (EndpointRule::UnknownNode, format!("dropped: node {node} is unknown (no labels cached)"));
        };
        if let Some((key, value)) = pairs.iter().find(|(k, v)| labels.get(k) == Some(v)) {
            return (EndpointRule::SameValue, format!("kept: node {node} has {key}={value} like the local node"));
        }
        let theirs: Vec<String> = pairs
            .iter()
            .map(|(k, _)| match labels.get(k) {
                Some(v) => format!("{k}={v}"),
                None => format!("no {k}"),
            })
            .collect();
        let ours: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let reason =
            format!("dropped: node {node} has {}, local node has {}", theirs.join(" and "), ours.join(" and "));
        (EndpointRule::DifferentValue, reason)
    }
}

/// The label keys a policy reads, in order, once each (the ordered wildcard is no label).
fn label_keys(policy: &TopologyPolicy) -> Vec<&str> {
    let all: Vec<&str> = match policy {
        TopologyPolicy::PassThrough => Vec::new(),
        TopologyPolicy::AnyKey(keys) => keys.iter().map(String::as_str).collect(),
        TopologyPolicy::Ordered(keys) => keys
            .iter()
            .filter_map(|k| match k {
                OrderedKey::Label(label) => Some(label.as_str()),
                OrderedKey::Wildcard => None,
            })
            .collect(),
    };
    let mut out: Vec<&str> = Vec::with_capacity(all.len());
    for key in all {
        if !out.contains(&key) {
            out.push(key);
        }
    }
    out
}

fn ordered_key_name(key: &OrderedKey) -> &str {
    match key {
        OrderedKey::Label(label) => label,
        OrderedKey::Wildcard => keys::TOPOLOGY_WILDCARD,
    }
}

#[cfg(test)]
mod tests;
