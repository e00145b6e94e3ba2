//! The topology engine: which endpoints of a Service a node may see.
//!
//! Pure: no I/O, no async, no clock. [`policy`] reads a Service's annotations, [`prune`]
//! decides per object, [`view`] keeps the pruned form of every cached object up to date
//! and, for each input change, names exactly the objects whose pruned form changed;
//! [`explain`] says, for one Service, which rule and key kept or dropped each endpoint.

pub mod explain;
pub mod local_endpoint;
pub mod namespaced_name;
pub mod policy;
pub mod prune;
pub mod view;

#[cfg(test)]
mod fixtures;

pub use explain::{
    EndpointExplanation, EndpointRule, ExplainedKind, FilterDecision, FilterExplanation, FilterExplanations,
    LocalRewrite, ObjectExplanation, OrderedStep, PolicyExplanation, StepOutcome, TopologyExplanation,
};
pub use local_endpoint::LocalEndpoint;
pub use namespaced_name::NamespacedName;
pub use policy::{OrderedKey, PolicyError, TopologyPolicy};
pub use prune::{
    Candidate, EndpointFilter, Labels, NodeLabels, PruneContext, Selection, prune_endpoints, prune_service_slices,
};
pub use view::{
    InputChange, ObjectKey, ObjectKind, PrunedObject, PrunedView, VOLATILE_ANNOTATIONS, ViewChange, ViewChangeKind,
};
