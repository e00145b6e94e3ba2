//! Invariant 5 read off the cluster, purely: what keeps each grid's objects from being
//! what the grid asks for (judged with the grid controller's own plan and its own "would
//! applying change anything" test), and which of the grid controller's writes went to an
//! object it does not own (read off the API server's request log).

use std::collections::{BTreeMap, BTreeSet};

use edgegrid_core::crd::{DeploymentGrid, ServiceGrid, StatefulSetGrid};
use edgegrid_core::keys::GRID_SELECTOR_LABEL;
use fake_apiserver::RecordedRequest;
use grid_controller::ownership::{Ownership, needs_apply, ownership};
use grid_controller::plan::{WorkloadGrid, plan_service_grid, plan_workload_grid, stale_workloads, unit_values};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};
use serde::Serialize;

/// Everything the grid check reads, listed at one moment.
#[derive(Default)]
pub struct Listed {
    pub nodes: Vec<Node>,
    pub deployment_grids: Vec<DeploymentGrid>,
    pub stateful_set_grids: Vec<StatefulSetGrid>,
    pub service_grids: Vec<ServiceGrid>,
    pub deployments: Vec<Deployment>,
    pub stateful_sets: Vec<StatefulSet>,
    pub services: Vec<Service>,
}

/// One line per object that is not what its grid asks for.
pub fn problems(listed: &Listed) -> Vec<String> {
    let labels: Vec<&BTreeMap<String, String>> =
        listed.nodes.iter().filter_map(|n| n.metadata.labels.as_ref()).collect();
    let mut out = Vec::new();
    let mut grid_uids = BTreeSet::new();
    for grid in &listed.deployment_grids {
        grid_uids.extend(grid.uid());
        workload_grid(grid, &labels, &listed.deployments, &mut out);
    }
    for grid in &listed.stateful_set_grids {
        grid_uids.extend(grid.uid());
        workload_grid(grid, &labels, &listed.stateful_sets, &mut out);
    }
    for grid in &listed.service_grids {
        grid_uids.extend(grid.uid());
        let subject = format!("ServiceGrid {}/{}", grid.namespace().unwrap_or_default(), grid.name_any());
        if grid.meta().deletion_timestamp.is_some() {
            continue;
        }
        match plan_service_grid(grid) {
            Ok(desired) => {
                compare(&subject, grid.uid().as_deref(), &grid.name_any(), &desired, &listed.services, &mut out)
            }
            Err(error) => out.push(format!("{subject}: cannot be planned: {error}")),
        }
    }
    // what a deleted grid owned goes with it (the garbage collector)
    let metas = listed
        .deployments
        .iter()
        .map(|d| ("Deployment", &d.metadata))
        .chain(listed.stateful_sets.iter().map(|s| ("StatefulSet", &s.metadata)))
        .chain(listed.services.iter().map(|s| ("Service", &s.metadata)));
    for (kind, meta) in metas {
        let grid =
            meta.owner_references.iter().flatten().find(|o| o.controller == Some(true) && o.kind.ends_with("Grid"));
        if let Some(grid) = grid.filter(|g| !grid_uids.contains(&g.uid)) {
            out.push(format!(
                "{kind} {}/{}: left behind by {} {} (deleted)",
                meta.namespace.clone().unwrap_or_default(),
                meta.name.clone().unwrap_or_default(),
                grid.kind,
                grid.name
            ));
        }
    }
    out
}

fn workload_grid<G, W>(grid: &G, labels: &[&BTreeMap<String, String>], live: &[W], out: &mut Vec<String>)
where
    G: WorkloadGrid<Workload = W>,
    W: Resource<DynamicType = ()> + Serialize,
{
    let subject = format!("{} {}/{}", G::kind(&()), grid.namespace().unwrap_or_default(), grid.name_any());
    if grid.meta().deletion_timestamp.is_some() {
        return;
    }
    let units = unit_values(grid.grid_uniq_key(), labels.iter().copied());
    let plan = match plan_workload_grid(grid, &units) {
        Ok(plan) => plan,
        Err(error) => return out.push(format!("{subject}: cannot be planned: {error}")),
    };
    let uid = grid.uid();
    for desired in plan.desired.values() {
        compare(&subject, uid.as_deref(), &grid.name_any(), desired, live, out);
    }
    let namespace = grid.namespace();
    let mut names: BTreeSet<String> = plan.desired.values().map(|w| w.name_any()).collect();
    names.extend(plan.kept.iter().cloned());
    let in_namespace = live.iter().filter(|w| w.namespace() == namespace).map(|w| w.meta());
    for stale in stale_workloads(uid.as_deref().unwrap_or_default(), in_namespace, &names) {
        out.push(format!("{subject}: {} is no longer wanted but still there", stale.name));
    }
}

/// Whether `live` holds `desired`, controlled by the grid.
fn compare<K>(subject: &str, grid_uid: Option<&str>, grid_name: &str, desired: &K, live: &[K], out: &mut Vec<String>)
where
    K: Resource<DynamicType = ()> + Serialize,
{
    let name = desired.name_any();
    let Some(found) = live.iter().find(|l| l.name_any() == name && l.namespace() == desired.namespace()) else {
        return out.push(format!("{subject}: {name} is missing"));
    };
    let owner = ownership(grid_uid.unwrap_or_default(), grid_name, found.meta());
    if owner != Ownership::Controlled {
        return out.push(format!("{subject}: {name} is not controlled by it ({owner:?})"));
    }
    let (want, have) = (serde_json::to_value(desired), serde_json::to_value(found));
    if let (Ok(want), Ok(have)) = (want, have)
        && needs_apply(&want, &have)
    {
        out.push(format!("{subject}: {name} differs from what the grid asks for"));
    }
}

/// `Kind namespace/name` of every Deployment, StatefulSet and Service, and whether the
/// grid controller may write it (a grid controls it, or it is an orphan labelled for a
/// grid to adopt).
pub fn writable(listed: &Listed) -> BTreeMap<String, bool> {
    let may = |meta: &ObjectMeta| {
        let controlled =
            meta.owner_references.iter().flatten().any(|o| o.controller == Some(true) && o.kind.ends_with("Grid"));
        let adoptable = meta.labels.as_ref().is_some_and(|l| l.contains_key(GRID_SELECTOR_LABEL));
        controlled || adoptable
    };
    let key = |resource: &str, meta: &ObjectMeta| {
        format!("{resource} {}/{}", meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default())
    };
    let mut out = BTreeMap::new();
    for d in &listed.deployments {
        out.insert(key("deployments", &d.metadata), may(&d.metadata));
    }
    for s in &listed.stateful_sets {
        out.insert(key("statefulsets", &s.metadata), may(&s.metadata));
    }
    for s in &listed.services {
        out.insert(key("services", &s.metadata), may(&s.metadata));
    }
    out
}

/// The writes `user` made to a Deployment, StatefulSet or Service `writable` knows and
/// says it may not write, as `METHOD resource namespace/name`.
pub fn foreign_writes(requests: &[RecordedRequest], user: &str, writable: &BTreeMap<String, bool>) -> Vec<String> {
    requests
        .iter()
        .filter(|r| r.user.as_deref() == Some(user) && r.is_write())
        .filter_map(|r| {
            let key = object_key(&r.path)?;
            (writable.get(&key) == Some(&false)).then(|| format!("{} {key}", r.method))
        })
        .collect()
}

/// `resource namespace/name` of a request path to one Deployment, StatefulSet or Service
/// (or a subresource of one).
fn object_key(path: &str) -> Option<String> {
    let rest = path.strip_prefix("/apis/apps/v1/namespaces/").or_else(|| path.strip_prefix("/api/v1/namespaces/"))?;
    let mut parts = rest.split('/');
    let (namespace, resource, name) = (parts.next()?, parts.next()?, parts.next()?);
    let kept = match resource {
        "deployments" | "statefulsets" => path.starts_with("/apis/apps/"),
        "services" => path.starts_with("/api/v1/"),
        _ => false,
    };
    kept.then(|| format!("{resource} {namespace}/{name}"))
}

/// The pods the node lifecycle controller deleted or evicted (`user` prefix
/// `edge-node-lifecycle/`), as `(pod, node)` with the node `pod_nodes` last saw it on.
pub fn evictions(requests: &[RecordedRequest], pod_nodes: &BTreeMap<String, String>) -> Vec<(String, String)> {
    requests
        .iter()
        .filter(|r| r.user.as_deref().is_some_and(|u| u.starts_with("edge-node-lifecycle/")) && r.status < 300)
        .filter_map(|r| {
            let rest = r.path.strip_prefix("/api/v1/namespaces/")?;
            let parts: Vec<&str> = rest.split('/').collect();
            let pod = match (r.method.as_str(), parts.as_slice()) {
                ("DELETE", [namespace, "pods", name]) | ("POST", [namespace, "pods", name, "eviction"]) => {
                    format!("{namespace}/{name}")
                }
                _ => return None,
            };
            let node = pod_nodes.get(&pod)?.clone();
            Some((pod, node))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(method: &str, path: &str, user: &str, status: u16) -> RecordedRequest {
        RecordedRequest {
            seq: 0,
            method: method.into(),
            path: path.into(),
            query: String::new(),
            status,
            user: Some(user.into()),
            impersonating: None,
        }
    }

    fn node(name: &str, unit: &str) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"zone1": unit}}})).expect("node")
    }

    fn grid() -> DeploymentGrid {
        serde_json::from_value(json!({
            "apiVersion": "superedge.io/v1", "kind": "DeploymentGrid",
            "metadata": {"name": "echo", "namespace": "default", "uid": "grid-uid"},
            "spec": {"gridUniqKey": "zone1", "template": {
                "replicas": 2, "selector": {"matchLabels": {"app": "echo"}},
                "template": {"metadata": {"labels": {"app": "echo"}}, "spec": {"containers": [{"name": "echo", "image": "e"}]}}}},
        }))
        .expect("grid")
    }

    /// The Deployments the grid controller would write for `units`, as it writes them.
    fn converged(units: &[&str]) -> Vec<Deployment> {
        let units: BTreeSet<String> = units.iter().map(|u| u.to_string()).collect();
        let plan = plan_workload_grid(&grid(), &units).expect("plan");
        plan.desired
            .into_values()
            .map(|mut d| {
                d.metadata.uid = Some(format!("uid-{}", d.name_any()));
                d
            })
            .collect()
    }

    #[test]
    fn a_grid_is_converged_when_each_unit_has_its_workload_as_planned_and_nothing_else() {
        let mut listed = Listed {
            nodes: vec![node("n1", "unit-a"), node("n2", "unit-b")],
            deployment_grids: vec![grid()],
            deployments: converged(&["unit-a", "unit-b"]),
            ..Default::default()
        };
        assert_eq!(problems(&listed), Vec::<String>::new());
        // a unit without its Deployment
        listed.deployments.remove(1);
        assert_eq!(problems(&listed), ["DeploymentGrid default/echo: echo-unit-b is missing"]);
        // a changed one
        listed.deployments = converged(&["unit-a", "unit-b"]);
        listed.deployments[0].spec.as_mut().expect("spec").replicas = Some(5);
        assert_eq!(problems(&listed), ["DeploymentGrid default/echo: echo-unit-a differs from what the grid asks for"]);
        // a unit no node is in any more
        listed.deployments = converged(&["unit-a", "unit-b"]);
        listed.nodes.pop();
        assert_eq!(problems(&listed), ["DeploymentGrid default/echo: echo-unit-b is no longer wanted but still there"]);
        // the grid deleted, its Deployments not
        listed.deployment_grids.clear();
        assert_eq!(
            problems(&listed),
            [
                "Deployment default/echo-unit-a: left behind by DeploymentGrid echo (deleted)",
                "Deployment default/echo-unit-b: left behind by DeploymentGrid echo (deleted)"
            ]
        );
    }

    #[test]
    fn a_write_to_an_object_no_grid_controls_is_foreign_and_others_are_not() {
        let mut foreign: Service =
            serde_json::from_value(json!({"metadata": {"name": "foreign-svc", "namespace": "default"}})).expect("svc");
        let listed =
            Listed { deployments: converged(&["unit-a"]), services: vec![foreign.clone()], ..Default::default() };
        let writable = writable(&listed);
        let user = "grid-controller/in-process";
        let requests = [
            request("PATCH", "/apis/apps/v1/namespaces/default/deployments/echo-unit-a", user, 200),
            request("PATCH", "/api/v1/namespaces/default/services/foreign-svc", user, 200),
            request("GET", "/api/v1/namespaces/default/services/foreign-svc", user, 200),
            request("DELETE", "/api/v1/namespaces/default/services/foreign-svc", "someone-else", 200),
            request("POST", "/api/v1/namespaces/default/services", user, 201),
            request("PUT", "/api/v1/namespaces/default/services/foreign-svc/status", user, 200),
        ];
        assert_eq!(
            foreign_writes(&requests, user, &writable),
            ["PATCH services default/foreign-svc", "PUT services default/foreign-svc"]
        );
        // labelled for a grid to adopt: its to take
        foreign.metadata.labels = Some(BTreeMap::from([(GRID_SELECTOR_LABEL.to_string(), "echo".to_string())]));
        let listed = Listed { services: vec![foreign], ..Default::default() };
        assert_eq!(foreign_writes(&requests, user, &super::writable(&listed)), Vec::<String>::new());
    }

    #[test]
    fn the_lifecycle_controllers_pod_deletions_and_evictions_are_evictions() {
        let lifecycle = "edge-node-lifecycle/edge-node-lifecycle";
        let pod_nodes =
            BTreeMap::from([("default/a".to_string(), "n1".to_string()), ("default/b".to_string(), "n2".to_string())]);
        let requests = [
            request("DELETE", "/api/v1/namespaces/default/pods/a", lifecycle, 200),
            request("POST", "/api/v1/namespaces/default/pods/b/eviction", lifecycle, 201),
            request("DELETE", "/api/v1/namespaces/default/pods/b", "workloads", 200),
            request("DELETE", "/api/v1/namespaces/default/pods/a", lifecycle, 404),
            request("PATCH", "/api/v1/namespaces/default/pods/a/status", lifecycle, 200),
        ];
        assert_eq!(
            evictions(&requests, &pod_nodes),
            [("default/a".to_string(), "n1".to_string()), ("default/b".to_string(), "n2".to_string())]
        );
    }
}
