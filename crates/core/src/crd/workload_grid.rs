//! Status of the workload grids (DeploymentGrid, StatefulSetGrid): one state per unit.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::GridCondition;

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadGridStatus {
    /// Unit value -> state of that unit's workload.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub states: BTreeMap<String, UnitWorkloadState>,
    /// Number of units with a generated workload.
    #[serde(default)]
    pub units: i32,
    /// Units whose workload has every desired replica ready.
    #[serde(default)]
    pub ready_units: i32,
    /// Names of the generated workloads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<GridCondition>,
}

/// The state of the workload generated for one unit value. Field names follow
/// `DeploymentStatus`/`StatefulSetStatus`, which SuperEdge stored here whole, so tools
/// reading `status.states.<unit>.readyReplicas` keep working.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnitWorkloadState {
    /// Name of the generated Deployment/StatefulSet.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub workload: String,
    #[serde(default)]
    pub replicas: i32,
    #[serde(default)]
    pub ready_replicas: i32,
    #[serde(default)]
    pub available_replicas: i32,
    #[serde(default)]
    pub updated_replicas: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<WorkloadCondition>,
}

/// A Deployment or StatefulSet condition, copied from the generated workload.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}
