//! The `superedge.io/v1` grid custom resources.
//!
//! Field names and shapes are SuperEdge's (so existing manifests deserialise unchanged);
//! what we add is a status subresource, printer columns and typed conditions.
//! Types only: reconciling them is the grid controller's job.

// Several `printcolumn(type_ = ...)` entries repeat a key by design.
#![allow(clippy::duplicated_attributes)]

mod condition;
mod deployment_grid;
mod service_grid;
mod statefulset_grid;
mod workload_grid;

pub use condition::{ConditionStatus, GridCondition, GridConditionType, set_condition};
pub use deployment_grid::{DeploymentGrid, DeploymentGridSpec};
pub use service_grid::{ServiceGrid, ServiceGridSpec, ServiceGridStatus};
pub use statefulset_grid::{StatefulSetGrid, StatefulSetGridSpec};
pub use workload_grid::{UnitWorkloadState, WorkloadCondition, WorkloadGridStatus};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// Every CRD this project installs, in a stable order (used by `cargo xtask gen-crds`).
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    vec![
        ServiceGrid::crd(),
        DeploymentGrid::crd(),
        StatefulSetGrid::crd(),
    ]
}

/// The name every grid-generated Service gets: `{grid}-svc` (SuperEdge's naming).
pub fn service_name_for_grid(grid_name: &str) -> String {
    format!("{grid_name}-svc")
}
