//! What a grid should produce, decided without I/O.
//!
//! - ServiceGrid `x` -> Service `x-svc` with annotation `topologyKeys: '["<key>"]'`.
//! - DeploymentGrid / StatefulSetGrid `x` -> one workload `x-<unit>` per distinct value of
//!   the node label `<key>` (one per unit, never one per node, unlike SuperEdge), with
//!   `nodeSelector[<key>] = <unit>`, the spec taken from `templates`/`templatePool`.
//!
//! Generated objects carry the grid's labels plus `superedge.io/grid-selector` and
//! `superedge.io/grid-uniq-key`, and a controller ownerReference to the grid. A unit whose
//! name would be invalid is skipped with a reason, never silently.

use std::collections::{BTreeMap, BTreeSet};

use edgegrid_core::crd::{DeploymentGrid, ServiceGrid, StatefulSetGrid, WorkloadGridStatus, service_name_for_grid};
use edgegrid_core::keys;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{PodTemplateSpec, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

use crate::names::{check_dns1035_label, check_dns1123_subdomain, check_label_key};

/// The template name meaning "use `spec.template`".
pub const DEFAULT_TEMPLATE_NAME: &str = "default";

/// Why a grid as a whole cannot be reconciled (reported as a condition and an Event).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("the grid has no name, namespace or uid yet")]
    NotPersisted,
    #[error("gridUniqKey {key:?} is invalid: {reason}")]
    InvalidKey { key: String, reason: String },
    #[error("grid name {name:?} is longer than 63 characters, too long for the grid-selector label")]
    NameTooLong { name: String },
    #[error("generated Service name is invalid: {0}")]
    InvalidServiceName(String),
}

impl PlanError {
    /// The CamelCase reason for conditions and Events.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotPersisted => "NotPersisted",
            Self::InvalidKey { .. } => "InvalidGridUniqKey",
            Self::NameTooLong { .. } => "GridNameTooLong",
            Self::InvalidServiceName(_) => "InvalidServiceName",
        }
    }
}

/// A unit value that got no workload, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedUnit {
    pub unit: String,
    pub reason: String,
}

/// The workloads a workload grid should own, by unit value.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadPlan<W> {
    pub desired: BTreeMap<String, W>,
    pub skipped: Vec<SkippedUnit>,
}

/// Metadata shared by everything a grid generates.
fn generated_meta<K: Resource<DynamicType = ()>>(grid: &K, name: String, key: &str) -> Result<ObjectMeta, PlanError> {
    let (Some(namespace), Some(_)) = (grid.namespace(), grid.uid()) else {
        return Err(PlanError::NotPersisted);
    };
    let grid_name = grid.name_any();
    if grid_name.len() > 63 {
        return Err(PlanError::NameTooLong { name: grid_name });
    }
    check_label_key(key).map_err(|reason| PlanError::InvalidKey { key: key.into(), reason })?;
    let mut labels = grid.labels().clone();
    labels.insert(keys::GRID_SELECTOR_LABEL.into(), grid_name);
    labels.insert(keys::GRID_UNIQ_KEY_LABEL.into(), uniq_key_label_value(key));
    let owner: OwnerReference = grid.controller_owner_ref(&()).ok_or(PlanError::NotPersisted)?;
    Ok(ObjectMeta {
        name: Some(name),
        namespace: Some(namespace),
        labels: Some(labels),
        owner_references: Some(vec![owner]),
        ..Default::default()
    })
}

/// Label values cannot hold '/', which prefixed keys (`topology.kubernetes.io/zone`) have.
pub fn uniq_key_label_value(key: &str) -> String {
    key.replace('/', "_")
}

pub fn plan_service_grid(grid: &ServiceGrid) -> Result<Service, PlanError> {
    let name = service_name_for_grid(&grid.name_any());
    check_dns1035_label(&name).map_err(PlanError::InvalidServiceName)?;
    let mut metadata = generated_meta(grid, name, &grid.spec.grid_uniq_key)?;
    let topology_keys = serde_json::to_string(&[&grid.spec.grid_uniq_key]).unwrap_or_default();
    metadata.annotations = Some(BTreeMap::from([(keys::TOPOLOGY_KEYS_ANNOTATION.to_string(), topology_keys)]));
    Ok(Service { metadata, spec: Some(grid.spec.template.clone()), status: None })
}

/// The distinct values of `key` among the nodes' labels: the units.
pub fn unit_values<'a>(key: &str, nodes: impl IntoIterator<Item = &'a BTreeMap<String, String>>) -> BTreeSet<String> {
    nodes.into_iter().filter_map(|labels| labels.get(key).cloned()).collect()
}

/// A workload spec with a pod template.
pub trait WorkloadSpec: Clone {
    fn pod_template_mut(&mut self) -> &mut PodTemplateSpec;
}

impl WorkloadSpec for DeploymentSpec {
    fn pod_template_mut(&mut self) -> &mut PodTemplateSpec {
        &mut self.template
    }
}

impl WorkloadSpec for StatefulSetSpec {
    fn pod_template_mut(&mut self) -> &mut PodTemplateSpec {
        &mut self.template
    }
}

/// The template-related fields both workload grids have.
pub struct Templates<'a, S> {
    pub template: &'a S,
    pub pool: &'a BTreeMap<String, S>,
    pub by_unit: &'a BTreeMap<String, String>,
    pub default_name: Option<&'a str>,
}

impl<S> Templates<'_, S> {
    /// `templatePool` entries that neither `templates` nor `defaultTemplateName` names:
    /// what SuperEdge's `autoDeleteUnusedTemplate` removes from the grid's spec.
    pub fn unused(&self) -> Vec<String> {
        self.pool
            .keys()
            .filter(|name| self.default_name != Some(name.as_str()) && !self.by_unit.values().any(|n| n == *name))
            .cloned()
            .collect()
    }

    /// The spec for a unit: its `templates` entry, else `defaultTemplateName`, else `template`.
    fn for_unit(&self, unit: &str) -> Result<&S, String> {
        let name = self.by_unit.get(unit).map(String::as_str).or(self.default_name);
        match name {
            None | Some(DEFAULT_TEMPLATE_NAME) => Ok(self.template),
            Some(name) => self.pool.get(name).ok_or_else(|| format!("templatePool has no entry {name:?}")),
        }
    }
}

/// Plans one workload per unit value (generic over Deployment/StatefulSet specs).
pub fn plan_workloads<K, S>(
    grid: &K,
    key: &str,
    templates: Templates<'_, S>,
    units: &BTreeSet<String>,
) -> Result<WorkloadPlan<(ObjectMeta, S)>, PlanError>
where
    K: Resource<DynamicType = ()>,
    S: WorkloadSpec,
{
    // the grid itself must be plannable even with no unit yet
    generated_meta(grid, grid.name_any(), key)?;
    let mut plan = WorkloadPlan { desired: BTreeMap::new(), skipped: Vec::new() };
    for unit in units {
        let name = format!("{}-{unit}", grid.name_any());
        if let Err(reason) = check_dns1123_subdomain(&name) {
            plan.skipped.push(SkippedUnit { unit: unit.clone(), reason: format!("workload name {reason}") });
            continue;
        }
        let spec = match templates.for_unit(unit) {
            Ok(spec) => spec,
            Err(reason) => {
                plan.skipped.push(SkippedUnit { unit: unit.clone(), reason });
                continue;
            }
        };
        let mut spec = spec.clone();
        let pod_spec = spec.pod_template_mut().spec.get_or_insert_with(Default::default);
        pod_spec.node_selector.get_or_insert_with(BTreeMap::new).insert(key.to_string(), unit.clone());
        let meta = generated_meta(grid, name, key)?;
        plan.desired.insert(unit.clone(), (meta, spec));
    }
    Ok(plan)
}

/// A grid kind that produces one workload per unit: DeploymentGrid or StatefulSetGrid.
pub trait WorkloadGrid: Resource<DynamicType = ()> {
    type Spec: WorkloadSpec;
    type Workload;
    fn grid_uniq_key(&self) -> &str;
    fn templates(&self) -> Templates<'_, Self::Spec>;
    fn status(&self) -> Option<&WorkloadGridStatus>;
    /// SuperEdge's `autoDeleteUnusedTemplate`: drop pool entries no unit is pointed at.
    fn auto_delete_unused_template(&self) -> bool;
    fn workload(metadata: ObjectMeta, spec: Self::Spec) -> Self::Workload;
}

/// Both workload grid kinds have the same fields around a different spec type.
macro_rules! workload_grid {
    ($grid:ty, $spec:ty, $workload:ident) => {
        impl WorkloadGrid for $grid {
            type Spec = $spec;
            type Workload = $workload;

            fn grid_uniq_key(&self) -> &str {
                &self.spec.grid_uniq_key
            }

            fn templates(&self) -> Templates<'_, $spec> {
                Templates {
                    template: &self.spec.template,
                    pool: &self.spec.template_pool,
                    by_unit: &self.spec.templates,
                    default_name: self.spec.default_template_name.as_deref(),
                }
            }

            fn status(&self) -> Option<&WorkloadGridStatus> {
                self.status.as_ref()
            }

            fn auto_delete_unused_template(&self) -> bool {
                self.spec.auto_delete_unused_template
            }

            fn workload(metadata: ObjectMeta, spec: $spec) -> $workload {
                $workload { metadata, spec: Some(spec), status: None }
            }
        }
    };
}

workload_grid!(DeploymentGrid, DeploymentSpec, Deployment);
workload_grid!(StatefulSetGrid, StatefulSetSpec, StatefulSet);

/// The workloads a DeploymentGrid/StatefulSetGrid should own for these unit values.
pub fn plan_workload_grid<G: WorkloadGrid>(
    grid: &G,
    units: &BTreeSet<String>,
) -> Result<WorkloadPlan<G::Workload>, PlanError> {
    let plan = plan_workloads(grid, grid.grid_uniq_key(), grid.templates(), units)?;
    Ok(WorkloadPlan {
        desired: plan.desired.into_iter().map(|(unit, (metadata, spec))| (unit, G::workload(metadata, spec))).collect(),
        skipped: plan.skipped,
    })
}

/// An existing object to delete, with the uid to delete it under (a precondition, so an
/// object re-created under the same name in between is never deleted).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stale {
    pub name: String,
    pub uid: String,
}

/// Existing workloads this grid controls (by controller ownerReference uid) that the
/// plan no longer wants. Objects of anyone else are never returned.
pub fn stale_workloads<'a>(
    grid_uid: &str,
    existing: impl IntoIterator<Item = &'a ObjectMeta>,
    desired_names: &BTreeSet<String>,
) -> Vec<Stale> {
    let mut stale: Vec<Stale> = existing
        .into_iter()
        .filter(|meta| meta.owner_references.iter().flatten().any(|o| o.controller == Some(true) && o.uid == grid_uid))
        .filter_map(|meta| Some(Stale { name: meta.name.clone()?, uid: meta.uid.clone()? }))
        .filter(|stale| !desired_names.contains(&stale.name))
        .collect();
    stale.sort();
    stale
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgegrid_core::crd::{DeploymentGridSpec, ServiceGridSpec};
    use k8s_openapi::api::core::v1::{PodSpec, ServicePort, ServiceSpec};
    use proptest::prelude::*;
    use serde_json::json;

    fn persisted(name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            labels: Some(BTreeMap::from([("team".to_string(), "edge".to_string())])),
            ..Default::default()
        }
    }

    fn service_grid(name: &str, key: &str) -> ServiceGrid {
        let mut grid = ServiceGrid::new(
            name,
            ServiceGridSpec {
                grid_uniq_key: key.into(),
                template: ServiceSpec {
                    ports: Some(vec![ServicePort { port: 80, ..Default::default() }]),
                    ..Default::default()
                },
            },
        );
        grid.metadata = persisted(name);
        grid
    }

    fn deployment_spec(replicas: i32) -> DeploymentSpec {
        serde_json::from_value(json!({
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "echo"}},
            "template": {"metadata": {"labels": {"app": "echo"}},
                         "spec": {"nodeSelector": {"disk": "ssd"}, "containers": [{"name": "c", "image": "i"}]}}
        }))
        .unwrap()
    }

    fn deployment_grid(pool: &[(&str, i32)], templates: &[(&str, &str)], default: Option<&str>) -> DeploymentGrid {
        let mut grid = DeploymentGrid::new(
            "echo",
            DeploymentGridSpec {
                grid_uniq_key: "zone1".into(),
                template: deployment_spec(1),
                template_pool: pool.iter().map(|(n, r)| (n.to_string(), deployment_spec(*r))).collect(),
                templates: templates.iter().map(|(u, n)| (u.to_string(), n.to_string())).collect(),
                default_template_name: default.map(str::to_string),
                auto_delete_unused_template: false,
            },
        );
        grid.metadata = persisted("echo");
        grid
    }

    fn units(values: &[&str]) -> BTreeSet<String> {
        values.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn service_grid_yields_the_annotated_owned_service() {
        let service = plan_service_grid(&service_grid("echo", "zone1")).unwrap();
        assert_eq!(
            serde_json::to_value(&service).unwrap(),
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {
                    "name": "echo-svc", "namespace": "default",
                    "labels": {"team": "edge", "superedge.io/grid-selector": "echo", "superedge.io/grid-uniq-key": "zone1"},
                    "annotations": {"topologyKeys": "[\"zone1\"]"},
                    "ownerReferences": [{"apiVersion": "superedge.io/v1", "kind": "ServiceGrid", "name": "echo",
                        "uid": "uid-echo", "controller": true}]
                },
                "spec": {"ports": [{"port": 80}]}
            })
        );
    }

    #[test]
    fn service_grid_errors() {
        assert_eq!(plan_service_grid(&service_grid("echo", "bad key")).unwrap_err().reason(), "InvalidGridUniqKey");
        assert_eq!(plan_service_grid(&service_grid("9lives", "zone1")).unwrap_err().reason(), "InvalidServiceName");
        assert_eq!(
            plan_service_grid(&service_grid(&"a".repeat(60), "zone1")).unwrap_err().reason(),
            "InvalidServiceName"
        );
        let mut unsaved = service_grid("echo", "zone1");
        unsaved.metadata.uid = None;
        assert_eq!(plan_service_grid(&unsaved), Err(PlanError::NotPersisted));
        let prefixed = plan_service_grid(&service_grid("echo", "topology.kubernetes.io/zone")).unwrap();
        assert_eq!(prefixed.labels()[keys::GRID_UNIQ_KEY_LABEL], "topology.kubernetes.io_zone");
        assert_eq!(prefixed.annotations()[keys::TOPOLOGY_KEYS_ANNOTATION], r#"["topology.kubernetes.io/zone"]"#);
    }

    #[test]
    fn one_deployment_per_unit_with_templates_and_skips() {
        let grid = deployment_grid(&[("large", 3), ("small", 1)], &[("unit-b", "large"), ("unit-c", "missing")], None);
        let plan = plan_workload_grid(&grid, &units(&["unit-a", "unit-b", "unit-c", "Unit_D"])).unwrap();
        let summary: Vec<(String, String, Option<i32>, String)> = plan
            .desired
            .iter()
            .map(|(unit, d)| {
                let spec = d.spec.as_ref().unwrap();
                let selector = spec.template.spec.as_ref().unwrap().node_selector.clone().unwrap();
                (unit.clone(), d.name_any(), spec.replicas, format!("{selector:?}"))
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                ("unit-a".into(), "echo-unit-a".into(), Some(1), r#"{"disk": "ssd", "zone1": "unit-a"}"#.into()),
                ("unit-b".into(), "echo-unit-b".into(), Some(3), r#"{"disk": "ssd", "zone1": "unit-b"}"#.into()),
            ]
        );
        assert_eq!(
            plan.skipped,
            vec![
                SkippedUnit { unit: "Unit_D".into(), reason: "workload name \"echo-Unit_D\" must consist of lowercase alphanumerics, '-' or '.', and start and end with an alphanumeric".into() },
                SkippedUnit { unit: "unit-c".into(), reason: "templatePool has no entry \"missing\"".into() },
            ]
        );
        let a = &plan.desired["unit-a"];
        assert_eq!(a.metadata.owner_references.as_ref().unwrap()[0].kind, "DeploymentGrid");
        assert_eq!(a.labels()[keys::GRID_SELECTOR_LABEL], "echo");
        // defaultTemplateName picks a pool entry for units without their own
        let defaulted = deployment_grid(&[("small", 2)], &[], Some("small"));
        let plan = plan_workload_grid(&defaulted, &units(&["x"])).unwrap();
        assert_eq!(plan.desired["x"].spec.as_ref().unwrap().replicas, Some(2));
        let explicit_default = deployment_grid(&[("small", 2)], &[], Some("default"));
        assert_eq!(
            plan_workload_grid(&explicit_default, &units(&["x"])).unwrap().desired["x"].spec.as_ref().unwrap().replicas,
            Some(1)
        );
    }

    #[test]
    fn units_are_distinct_label_values_not_nodes() {
        let nodes: Vec<BTreeMap<String, String>> = [Some("a"), Some("a"), Some("b"), None, Some("a")]
            .iter()
            .map(|v| v.map(|v| BTreeMap::from([("zone1".to_string(), v.to_string())])).unwrap_or_default())
            .collect();
        assert_eq!(unit_values("zone1", &nodes), units(&["a", "b"]));
    }

    #[test]
    fn stale_workloads_are_only_our_own() {
        let owned = |name: &str, uid: &str, controller: bool| ObjectMeta {
            name: Some(name.into()),
            uid: Some(format!("{name}-uid")),
            owner_references: Some(vec![OwnerReference {
                uid: uid.into(),
                controller: Some(controller),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let existing = [
            owned("echo-a", "uid-echo", true),
            owned("echo-gone", "uid-echo", true),
            owned("echo-other-owner", "uid-other", true),
            owned("echo-not-controller", "uid-echo", false),
            ObjectMeta { name: Some("echo-unowned".into()), ..Default::default() },
        ];
        assert_eq!(
            stale_workloads("uid-echo", &existing, &units(&["echo-a"])),
            [Stale { name: "echo-gone".into(), uid: "echo-gone-uid".into() }]
        );
    }

    proptest! {
        /// Exactly one workload per valid unit value; every unit is either planned or
        /// skipped with a reason; each workload is pinned to its own unit.
        #[test]
        fn every_unit_is_planned_or_skipped(values in prop::collection::btree_set("[a-zA-Z0-9_.-]{1,12}", 0..12)) {
            let grid = deployment_grid(&[], &[], None);
            let plan = plan_workload_grid(&grid, &values).unwrap();
            let planned: BTreeSet<String> = plan.desired.keys().cloned().collect();
            let skipped: BTreeSet<String> = plan.skipped.iter().map(|s| s.unit.clone()).collect();
            prop_assert!(planned.is_disjoint(&skipped));
            prop_assert_eq!(planned.union(&skipped).cloned().collect::<BTreeSet<_>>(), values.clone());
            let names: BTreeSet<String> = plan.desired.values().map(|d| d.name_any()).collect();
            prop_assert_eq!(names.len(), plan.desired.len(), "names are unique");
            for (unit, d) in &plan.desired {
                prop_assert!(check_dns1123_subdomain(&d.name_any()).is_ok());
                let selector = d.spec.as_ref().unwrap().template.spec.as_ref().unwrap().node_selector.clone().unwrap();
                prop_assert_eq!(selector.get("zone1"), Some(unit));
            }
        }
    }

    #[test]
    fn unused_templates_are_those_nothing_names() {
        let grid = deployment_grid(
            &[("large", 3), ("small", 1), ("spare", 1), ("fallback", 1)],
            &[("unit-b", "large"), ("unit-c", "large"), ("unit-d", "missing")],
            Some("fallback"),
        );
        assert_eq!(grid.templates().unused(), ["small", "spare"]);
        let none_named = deployment_grid(&[("a", 1)], &[], None);
        assert_eq!(none_named.templates().unused(), ["a"]);
    }

    #[test]
    fn pod_spec_is_created_when_the_template_has_none() {
        let mut spec = deployment_spec(1);
        spec.template.spec = None;
        let mut grid = deployment_grid(&[], &[], None);
        grid.spec.template = spec;
        let plan = plan_workload_grid(&grid, &units(&["a"])).unwrap();
        let pod: &PodSpec = plan.desired["a"].spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        assert_eq!(pod.node_selector, Some(BTreeMap::from([("zone1".to_string(), "a".to_string())])));
    }
}
