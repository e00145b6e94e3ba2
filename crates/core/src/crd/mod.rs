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

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kube::CustomResourceExt;

/// Every CRD this project installs, in a stable order (used by `cargo xtask gen-crds`).
/// Use these rather than `Kind::crd()`: they carry the compacted schemas.
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    [ServiceGrid::crd(), DeploymentGrid::crd(), StatefulSetGrid::crd()].into_iter().map(compact).collect()
}

/// Fields of `spec` that embed whole Kubernetes specs (ServiceSpec, DeploymentSpec, ...).
const EMBEDDED_SPEC_FIELDS: [&str; 2] = ["template", "templatePool"];

/// Drops the upstream field descriptions inside embedded Kubernetes specs, keeping the
/// description of the embedding field itself. With them, a DeploymentGrid CRD (pod
/// template twice: `template` and `templatePool`) is ~1.2 MB, near etcd's 1.5 MiB object
/// limit and far beyond what client-side `kubectl apply` can annotate; `kubectl explain`
/// on the built-in kinds documents those fields anyway. Same idea as controller-gen's
/// `crd:maxDescLen=0`, applied only where the schema is not ours.
fn compact(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        let spec = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .and_then(|root| root.properties.as_mut())
            .and_then(|p| p.get_mut("spec"))
            .and_then(|spec| spec.properties.as_mut());
        for (name, field) in spec.into_iter().flatten() {
            if EMBEDDED_SPEC_FIELDS.contains(&name.as_str()) {
                strip_nested_descriptions(field);
            }
        }
    }
    crd
}

fn strip_nested_descriptions(schema: &mut JSONSchemaProps) {
    let mut children: Vec<&mut JSONSchemaProps> = Vec::new();
    children.extend(schema.properties.iter_mut().flat_map(|p| p.values_mut()));
    children.extend(schema.pattern_properties.iter_mut().flat_map(|p| p.values_mut()));
    for list in [&mut schema.all_of, &mut schema.any_of, &mut schema.one_of] {
        children.extend(list.iter_mut().flatten());
    }
    children.extend(schema.not.as_deref_mut());
    match &mut schema.items {
        Some(JSONSchemaPropsOrArray::Schema(s)) => children.push(s),
        Some(JSONSchemaPropsOrArray::Schemas(list)) => children.extend(list.iter_mut()),
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(s)) = &mut schema.additional_properties {
        children.push(s);
    }
    for child in children {
        child.description = None;
        strip_nested_descriptions(child);
    }
}

/// The name every grid-generated Service gets: `{grid}-svc` (SuperEdge's naming).
pub fn service_name_for_grid(grid_name: &str) -> String {
    format!("{grid_name}-svc")
}
