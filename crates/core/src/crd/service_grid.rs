use k8s_openapi::api::core::v1::ServiceSpec;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::GridCondition;

/// One ServiceGrid yields one Service `{name}-svc` whose traffic stays inside the
/// caller's node unit (annotation `topologyKeys: '["<gridUniqKey>"]'`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "superedge.io",
    version = "v1",
    kind = "ServiceGrid",
    namespaced,
    status = "ServiceGridStatus",
    shortname = "sg",
    category = "grids",
    derive = "PartialEq",
    doc = "A Service whose traffic stays inside the caller's node unit",
    printcolumn(
        name = "Key",
        type_ = "string",
        json_path = ".spec.gridUniqKey",
        description = "node label key that defines a unit"
    ),
    printcolumn(
        name = "Service",
        type_ = "string",
        json_path = ".status.service",
        description = "the generated Service"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct ServiceGridSpec {
    /// Node label key whose value names a unit, e.g. `zone1`.
    pub grid_uniq_key: String,
    /// Spec of the generated Service.
    pub template: ServiceSpec,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceGridStatus {
    /// Name of the generated Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<GridCondition>,
}
