//! What a grid should produce, decided without I/O.
//!
//! - ServiceGrid `x` -> Service `x-svc` with annotation `topologyKeys: '["<key>"]'`.
//! - DeploymentGrid / StatefulSetGrid `x` -> one workload `x-<unit>` per distinct value of
//!   the node label `<key>` (one per unit, never one per node, unlike SuperEdge), with
//!   `nodeSelector[<key>] = <unit>`, the spec chosen by SuperEdge's rules
//!   ([`Templates::choose`]).
//!
//! Generated objects carry the grid's labels plus `superedge.io/grid-selector` and
//! `superedge.io/grid-uniq-key`, and a controller ownerReference to the grid. A unit whose
//! name would be invalid, or whose template is not known, is skipped with a reason, never
//! silently; a unit without a template keeps the workload it may already have (neither
//! updated nor deleted: a typo in a pool name must not take a running unit down), and
//! the other units are reconciled as usual.

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

/// Why a unit value got no workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkipCause {
    /// `{grid}-{unit}` is not a valid object name (condition `UnitNamesValid`).
    InvalidName,
    /// Neither `template` nor `templatePool` gives the unit its spec (condition
    /// `TemplatesResolved`).
    NoTemplate,
}

/// A unit value that got no workload, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedUnit {
    pub unit: String,
    pub cause: SkipCause,
    pub reason: String,
}

/// The workloads a workload grid should own, by unit value.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadPlan<W> {
    pub desired: BTreeMap<String, W>,
    pub skipped: Vec<SkippedUnit>,
    /// Names of the workloads of units skipped for [`SkipCause::NoTemplate`]: an existing
    /// one is left as it is (not pruned), as SuperEdge, which stopped at such a unit,
    /// never deleted it either.
    pub kept: BTreeSet<String>,
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
    /// `spec.template`, optional as in SuperEdge.
    pub template: Option<&'a S>,
    pub pool: &'a BTreeMap<String, S>,
    pub by_unit: &'a BTreeMap<String, String>,
    pub default_name: Option<&'a str>,
}

/// Where a unit's template name came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameSource {
    /// The unit's own `templates` entry.
    UnitEntry,
    /// `defaultTemplateName`.
    DefaultName,
    /// `defaultTemplateName` unset, which means `default`.
    DefaultNameUnset,
}

/// The spec a unit's workload is made from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TemplateChoice {
    /// `spec.template`.
    Template,
    /// The `templatePool` entry of this name.
    Pool(String),
}

/// Why a unit has no template. The unit gets no workload; nothing falls back to another
/// template, as in SuperEdge.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// The name means `spec.template` (`default` or empty), and the grid has none.
    #[error("{} means spec.template, which the grid does not have", named(*.from, name))]
    TemplateAbsent { name: String, from: NameSource },
    /// The name is not a `templatePool` entry.
    #[error("{} is not in templatePool", named(*.from, name))]
    MissingPoolEntry { name: String, from: NameSource },
}

/// `its templates entry "x"`, `defaultTemplateName "x"`, ...: where the name was read.
fn named(source: NameSource, name: &str) -> String {
    match source {
        NameSource::UnitEntry => format!("its templates entry {name:?}"),
        NameSource::DefaultName => format!("defaultTemplateName {name:?}"),
        NameSource::DefaultNameUnset => format!("defaultTemplateName (unset: {name:?})"),
    }
}

impl<'a, S> Templates<'a, S> {
    /// Whether a template name means `spec.template`: SuperEdge's `default`, and the empty
    /// name (an unset `defaultTemplateName` is defaulted to `default`,
    /// controller/deployment/controller.go:233 and controller/statefulset/controller.go:211;
    /// `getDeployTemplate` takes `""` as `default`,
    /// controller/deployment/util/deployment_template_hash.go:103).
    fn means_template(name: &str) -> bool {
        name.is_empty() || name == DEFAULT_TEMPLATE_NAME
    }

    /// `templatePool` entries that neither `templates` nor `defaultTemplateName` names:
    /// what SuperEdge's `autoDeleteUnusedTemplate` removes from the grid's spec
    /// (`RemoveUnusedTemplate`, deployment_template_hash.go:36-54: a `defaultTemplateName`
    /// that means `spec.template` keeps no pool entry, not even one named `default`).
    pub fn unused(&self) -> Vec<String> {
        let default = self.default_name.filter(|name| !Self::means_template(name));
        self.pool
            .keys()
            .filter(|name| default != Some(name.as_str()) && !self.by_unit.values().any(|n| n == *name))
            .cloned()
            .collect()
    }

    /// SuperEdge's choice of a unit's template, exactly:
    /// 1. the name is the unit's `templates` entry when it has one (even an empty one),
    ///    else `defaultTemplateName` (`GetTemplateName`, util/template_hash.go:51-57);
    /// 2. `default` or empty means `spec.template`, even when a pool entry is named
    ///    `default`; any other name means that `templatePool` entry
    ///    (`getDeployTemplate`, deployment_template_hash.go:101-110, and its StatefulSet twin);
    /// 3. a name the pool lacks is an error for that unit: nothing falls back to
    ///    `defaultTemplateName` or `spec.template`.
    ///
    /// What differs, on purpose: SuperEdge used an absent `spec.template` as an empty spec
    /// (the apiserver refused the workload) and stopped the whole grid at the first unit
    /// with an error (controller/deployment/sync.go:92-103); here such a unit gets no
    /// workload, with a reason, and the others go on.
    pub fn choose(&self, unit: &str) -> Result<TemplateChoice, TemplateError> {
        self.resolve(unit).map(|(choice, _)| choice)
    }

    /// The spec for a unit, by [`Templates::choose`].
    pub fn for_unit(&self, unit: &str) -> Result<&'a S, TemplateError> {
        self.resolve(unit).map(|(_, spec)| spec)
    }

    fn resolve(&self, unit: &str) -> Result<(TemplateChoice, &'a S), TemplateError> {
        let (name, from) = match self.by_unit.get(unit) {
            Some(name) => (name.as_str(), NameSource::UnitEntry),
            None => match self.default_name {
                Some(name) => (name, NameSource::DefaultName),
                None => (DEFAULT_TEMPLATE_NAME, NameSource::DefaultNameUnset),
            },
        };
        if Self::means_template(name) {
            return self
                .template
                .map(|spec| (TemplateChoice::Template, spec))
                .ok_or_else(|| TemplateError::TemplateAbsent { name: name.to_string(), from });
        }
        self.pool
            .get(name)
            .map(|spec| (TemplateChoice::Pool(name.to_string()), spec))
            .ok_or_else(|| TemplateError::MissingPoolEntry { name: name.to_string(), from })
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
    let mut plan = WorkloadPlan { desired: BTreeMap::new(), skipped: Vec::new(), kept: BTreeSet::new() };
    for unit in units {
        let name = format!("{}-{unit}", grid.name_any());
        if let Err(reason) = check_dns1123_subdomain(&name) {
            let reason = format!("workload name {reason}");
            plan.skipped.push(SkippedUnit { unit: unit.clone(), cause: SkipCause::InvalidName, reason });
            continue;
        }
        let spec = match templates.for_unit(unit) {
            Ok(spec) => spec,
            Err(error) => {
                let reason = error.to_string();
                plan.skipped.push(SkippedUnit { unit: unit.clone(), cause: SkipCause::NoTemplate, reason });
                plan.kept.insert(name);
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
                    template: self.spec.template.as_ref(),
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
        kept: plan.kept,
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
                template: Some(deployment_spec(1)),
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
                SkippedUnit { unit: "Unit_D".into(), cause: SkipCause::InvalidName, reason: "workload name \"echo-Unit_D\" must consist of lowercase alphanumerics, '-' or '.', and start and end with an alphanumeric".into() },
                SkippedUnit { unit: "unit-c".into(), cause: SkipCause::NoTemplate, reason: "its templates entry \"missing\" is not in templatePool".into() },
            ]
        );
        // unit-c's workload, if it has one, is left alone; an invalid name cannot exist
        assert_eq!(plan.kept, units(&["echo-unit-c"]));
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
        // `default` names spec.template, so it keeps no pool entry, not even one called `default`
        let default_entry = deployment_grid(&[("default", 1), ("a", 1)], &[("x", "a")], Some("default"));
        assert_eq!(default_entry.templates().unused(), ["default"]);
        let kept_by_a_unit = deployment_grid(&[("default", 1)], &[("x", "default")], None);
        assert_eq!(kept_by_a_unit.templates().unused(), Vec::<String>::new());
    }

    /// SuperEdge's choice of a unit's template, transliterated from its Go (the oracle the
    /// implementation is checked against): an empty `defaultTemplateName` becomes
    /// `default` (controller/deployment/controller.go:233-235), `GetTemplateName`
    /// (util/template_hash.go:51-57), `getDeployTemplate`
    /// (controller/deployment/util/deployment_template_hash.go:101-110).
    /// `Ok(None)`: `spec.template`; `Ok(Some(name))`: that pool entry; `Err`: "template not
    /// found in templatePool".
    fn superedge_template_name(
        templates: &BTreeMap<String, String>,
        grid_values: &str,
        default_template_name: Option<&str>,
        pool: &BTreeMap<String, DeploymentSpec>,
    ) -> Result<Option<String>, ()> {
        let mut default_template_name = default_template_name.unwrap_or_default().to_string();
        if default_template_name.is_empty() {
            default_template_name = "default".into();
        }
        let template_name = match templates.get(grid_values) {
            None => default_template_name,
            Some(name) => name.clone(),
        };
        if template_name == "default" || template_name.is_empty() {
            Ok(None)
        } else if pool.contains_key(&template_name) {
            Ok(Some(template_name))
        } else {
            Err(())
        }
    }

    /// Checks [`Templates::choose`] and [`Templates::for_unit`] for one unit against the
    /// oracle: the same template, the exact spec, and the error naming where the name came from.
    fn check_choice(
        template: Option<&DeploymentSpec>,
        pool: &BTreeMap<String, DeploymentSpec>,
        by_unit: &BTreeMap<String, String>,
        default_name: Option<&str>,
        unit: &str,
    ) -> Result<(), TestCaseError> {
        let templates = Templates { template, pool, by_unit, default_name };
        let from = match (by_unit.contains_key(unit), default_name) {
            (true, _) => NameSource::UnitEntry,
            (false, Some(_)) => NameSource::DefaultName,
            (false, None) => NameSource::DefaultNameUnset,
        };
        let name = by_unit.get(unit).map(String::as_str).or(default_name).unwrap_or("default").to_string();
        let case = format!(
            "template {:?}, pool {:?}, templates {by_unit:?}, default {default_name:?}, unit {unit:?}",
            template.is_some(),
            pool.keys().collect::<Vec<_>>()
        );
        let chosen = templates.choose(unit);
        let spec = templates.for_unit(unit);
        match superedge_template_name(by_unit, unit, default_name, pool) {
            Ok(None) => match template {
                Some(template) => {
                    prop_assert_eq!(chosen, Ok(TemplateChoice::Template), "{}", case);
                    prop_assert!(spec.is_ok_and(|s| std::ptr::eq(s, template)), "{}", case);
                }
                // SuperEdge made a workload of Go's empty spec, which the apiserver refused
                None => {
                    prop_assert_eq!(&chosen, &Err(TemplateError::TemplateAbsent { name, from }), "{}", case);
                    prop_assert_eq!(spec.err(), chosen.err(), "{}", case);
                }
            },
            Ok(Some(entry)) => {
                prop_assert_eq!(chosen, Ok(TemplateChoice::Pool(entry.clone())), "{}", case);
                prop_assert!(spec.is_ok_and(|s| std::ptr::eq(s, &pool[&entry])), "{}", case);
            }
            Err(()) => {
                prop_assert_eq!(&chosen, &Err(TemplateError::MissingPoolEntry { name, from }), "{}", case);
                prop_assert_eq!(spec.err(), chosen.err(), "{}", case);
            }
        }
        Ok(())
    }

    /// The names that matter: a pool entry (`a`), one the pool may lack (`b`), and the two
    /// that mean spec.template (`default`, empty), also as pool entry names.
    const NAMES: [&str; 4] = ["a", "b", "default", ""];

    /// Every combination: template present/absent x every pool over the names x the unit's
    /// `templates` entry (none or each name) x `defaultTemplateName` (unset or each name).
    #[test]
    fn template_choice_is_superedges_for_every_combination() {
        let mut cases = 0;
        for template in [None, Some(deployment_spec(1))] {
            for pool_bits in 0..(1 << NAMES.len()) {
                let pool: BTreeMap<String, DeploymentSpec> = NAMES
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| pool_bits & (1 << i) != 0)
                    .map(|(i, name)| (name.to_string(), deployment_spec(10 + i as i32)))
                    .collect();
                for entry in std::iter::once(None).chain(NAMES.map(Some)) {
                    let by_unit: BTreeMap<String, String> =
                        entry.map(|name| ("u".to_string(), name.to_string())).into_iter().collect();
                    for default_name in std::iter::once(None).chain(NAMES.map(Some)) {
                        check_choice(template.as_ref(), &pool, &by_unit, default_name, "u").unwrap();
                        // another unit without an entry follows defaultTemplateName alone
                        check_choice(template.as_ref(), &pool, &by_unit, default_name, "other").unwrap();
                        cases += 1;
                    }
                }
            }
        }
        assert_eq!(cases, 2 * 16 * 5 * 5);
    }

    #[test]
    fn template_choice_examples() {
        let pool =
            BTreeMap::from([("test1".to_string(), deployment_spec(2)), ("default".to_string(), deployment_spec(9))]);
        let by_unit = BTreeMap::from([
            ("zone1".to_string(), "test1".to_string()),
            ("zone2".to_string(), "test9".to_string()),
            ("zone3".to_string(), String::new()),
        ]);
        let template = deployment_spec(1);
        let with = |default_name| Templates { template: Some(&template), pool: &pool, by_unit: &by_unit, default_name };
        let without = |default_name| Templates { template: None, pool: &pool, by_unit: &by_unit, default_name };
        // a missing pool entry does not fall back to defaultTemplateName or spec.template
        assert_eq!(
            with(Some("test1")).choose("zone2").unwrap_err().to_string(),
            "its templates entry \"test9\" is not in templatePool"
        );
        // an empty entry means spec.template, whatever the default
        assert_eq!(with(Some("test1")).choose("zone3"), Ok(TemplateChoice::Template));
        // `default` means spec.template even though the pool has an entry named `default`
        assert_eq!(with(Some("default")).for_unit("zone4").unwrap().replicas, Some(1));
        assert_eq!(with(Some("test1")).for_unit("zone4").unwrap().replicas, Some(2));
        assert_eq!(
            without(None).choose("zone4").unwrap_err().to_string(),
            "defaultTemplateName (unset: \"default\") means spec.template, which the grid does not have"
        );
        assert_eq!(
            without(Some("")).choose("zone4").unwrap_err().to_string(),
            "defaultTemplateName \"\" means spec.template, which the grid does not have"
        );
        assert_eq!(
            without(Some("test2")).choose("zone4").unwrap_err().to_string(),
            "defaultTemplateName \"test2\" is not in templatePool"
        );
        assert_eq!(
            without(None).choose("zone3").unwrap_err().to_string(),
            "its templates entry \"\" means spec.template, which the grid does not have"
        );
    }

    /// SuperEdge's `RemoveUnusedTemplate` (deployment_template_hash.go:36-54), transliterated,
    /// after controller.go:233 defaulted an empty `defaultTemplateName`.
    fn superedge_unused(
        pool: &BTreeMap<String, DeploymentSpec>,
        templates: &BTreeMap<String, String>,
        default_template_name: Option<&str>,
    ) -> Vec<String> {
        let default_template_name = match default_template_name.unwrap_or_default() {
            "" => "default",
            name => name,
        };
        let mut template_map: BTreeSet<String> = pool.keys().cloned().collect();
        if default_template_name != "default" {
            template_map.remove(default_template_name);
        }
        for used in templates.values() {
            template_map.remove(used);
        }
        template_map.into_iter().collect()
    }

    fn name() -> impl Strategy<Value = String> {
        prop_oneof![Just(String::new()), Just("default".to_string()), "[a-c]"]
    }

    proptest! {
        /// Any pool, any `templates` over several units, any default, with or without
        /// `template`: every unit's choice is SuperEdge's, and so is autoDeleteUnusedTemplate's.
        #[test]
        fn template_choice_matches_superedge(
            has_template in any::<bool>(),
            pool_names in prop::collection::btree_set(name(), 0..4),
            by_unit in prop::collection::btree_map("u[0-3]", name(), 0..4),
            default_name in prop::option::of(name()),
        ) {
            let template = has_template.then(|| deployment_spec(1));
            let pool: BTreeMap<String, DeploymentSpec> =
                pool_names.into_iter().enumerate().map(|(i, n)| (n, deployment_spec(10 + i as i32))).collect();
            for unit in ["u0", "u1", "u2", "u3", "u4"] {
                check_choice(template.as_ref(), &pool, &by_unit, default_name.as_deref(), unit)?;
            }
            let templates = Templates { template: template.as_ref(), pool: &pool, by_unit: &by_unit, default_name: default_name.as_deref() };
            prop_assert_eq!(templates.unused(), superedge_unused(&pool, &by_unit, default_name.as_deref()));
        }

        /// Whole plans: each unit with a valid name gets exactly its chosen spec plus the
        /// nodeSelector, or is skipped for NoTemplate with its workload name kept; nothing else.
        #[test]
        fn plans_give_each_unit_its_chosen_spec_or_a_reason(
            has_template in any::<bool>(),
            pool_names in prop::collection::btree_set(name(), 0..4),
            by_unit in prop::collection::btree_map("u[0-3]", name(), 0..4),
            default_name in prop::option::of(name()),
            values in prop::collection::btree_set("u[0-4]|U_[0-1]", 0..6),
        ) {
            let mut grid = deployment_grid(&[], &[], default_name.as_deref());
            if !has_template {
                grid.spec.template = None;
            }
            grid.spec.template_pool =
                pool_names.into_iter().enumerate().map(|(i, n)| (n, deployment_spec(10 + i as i32))).collect();
            grid.spec.templates = by_unit;
            let plan = plan_workload_grid(&grid, &values).unwrap();
            let templates = grid.templates();
            for unit in &values {
                let name = format!("echo-{unit}");
                let skipped = plan.skipped.iter().find(|s| &s.unit == unit);
                match (check_dns1123_subdomain(&name), templates.for_unit(unit)) {
                    (Err(_), _) => {
                        prop_assert_eq!(skipped.map(|s| s.cause), Some(SkipCause::InvalidName));
                        prop_assert!(!plan.kept.contains(&name));
                    }
                    (Ok(()), Err(error)) => {
                        prop_assert_eq!(skipped.map(|s| (s.cause, s.reason.clone())), Some((SkipCause::NoTemplate, error.to_string())));
                        prop_assert!(plan.kept.contains(&name) && !plan.desired.contains_key(unit));
                    }
                    (Ok(()), Ok(chosen)) => {
                        prop_assert!(skipped.is_none());
                        let mut want = chosen.clone();
                        want.template.spec.as_mut().unwrap().node_selector.as_mut().unwrap().insert("zone1".into(), unit.clone());
                        prop_assert_eq!(plan.desired[unit].spec.as_ref(), Some(&want));
                        prop_assert_eq!(plan.desired[unit].name_any(), name);
                    }
                }
            }
            prop_assert_eq!(plan.desired.len() + plan.skipped.len(), values.len());
            prop_assert_eq!(plan.kept.len(), plan.skipped.iter().filter(|s| s.cause == SkipCause::NoTemplate).count());
        }
    }

    /// SuperEdge's docs' canary DeploymentGrid, with no `template`: each unit gets exactly
    /// its pool entry plus the nodeSelector; units outside `templates` get `test1`.
    #[test]
    fn superedge_docs_template_pool_only_grid() {
        let mut grid: DeploymentGrid =
            serde_saphyr::from_str(include_str!("../../../tests/superedge/docs/deploymentgrid-templatepool.yaml"))
                .unwrap();
        assert_eq!(grid.spec.template, None);
        grid.metadata.uid = Some("uid-demo".into());
        let plan = plan_workload_grid(&grid, &units(&["zone1", "zone2", "zone3"])).unwrap();
        assert_eq!((plan.skipped.clone(), plan.kept.clone()), (vec![], BTreeSet::new()));
        for (unit, entry) in [("zone1", "test1"), ("zone2", "test2"), ("zone3", "test1")] {
            let mut want = serde_json::to_value(&grid.spec.template_pool[entry]).unwrap();
            want["template"]["spec"]["nodeSelector"] = json!({"zone": unit});
            assert_eq!(serde_json::to_value(plan.desired[unit].spec.as_ref().unwrap()).unwrap(), want, "{unit}");
            assert_eq!(plan.desired[unit].name_any(), format!("deploymentgrid-demo-{unit}"));
        }
    }

    #[test]
    fn pod_spec_is_created_when_the_template_has_none() {
        let mut spec = deployment_spec(1);
        spec.template.spec = None;
        let mut grid = deployment_grid(&[], &[], None);
        grid.spec.template = Some(spec);
        let plan = plan_workload_grid(&grid, &units(&["a"])).unwrap();
        let pod: &PodSpec = plan.desired["a"].spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        assert_eq!(pod.node_selector, Some(BTreeMap::from([("zone1".to_string(), "a".to_string())])));
    }
}
