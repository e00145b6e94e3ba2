use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSetSpec;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::WorkloadGridStatus;

/// One StatefulSetGrid yields one StatefulSet `{name}-{unit value}` per distinct value of
/// the `gridUniqKey` node label, pinned to that unit by a nodeSelector.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "superedge.io",
    version = "v1",
    kind = "StatefulSetGrid",
    namespaced,
    status = "WorkloadGridStatus",
    shortname = "ssg",
    category = "grids",
    derive = "PartialEq",
    doc = "One StatefulSet per node unit",
    printcolumn(
        name = "Key",
        type_ = "string",
        json_path = ".spec.gridUniqKey",
        description = "node label key that defines a unit"
    ),
    printcolumn(
        name = "Units",
        type_ = "integer",
        json_path = ".status.units",
        description = "units with a generated StatefulSet"
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.readyUnits",
        description = "units whose StatefulSet has all replicas ready"
    ),
    printcolumn(
        name = "Workloads",
        type_ = "string",
        json_path = ".status.workloads",
        description = "generated StatefulSets",
        priority = 1
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct StatefulSetGridSpec {
    /// Node label key whose value names a unit, e.g. `zone1`.
    pub grid_uniq_key: String,
    /// Spec of the units whose template name (their `templates` entry, else
    /// `defaultTemplateName`) is `default` or empty. Optional, as in SuperEdge: a grid whose
    /// units all take a `templatePool` entry needs none, and a unit that would use it while
    /// it is absent gets no workload (condition `TemplatesResolved=False`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<StatefulSetSpec>,
    /// Named alternative specs that `templates` can point units at.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub template_pool: BTreeMap<String, StatefulSetSpec>,
    /// Unit value -> template name: a `templatePool` entry, or `default` (or empty) for
    /// `template`. A name the pool lacks leaves the unit without a workload; there is no
    /// fallback to `defaultTemplateName` (SuperEdge's rule).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub templates: BTreeMap<String, String>,
    /// Template name of the units not listed in `templates`: a `templatePool` entry, or
    /// `default` (also when unset or empty) for `template`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_template_name: Option<String>,
    /// Remove pool entries no unit uses.
    #[serde(default)]
    pub auto_delete_unused_template: bool,
}
