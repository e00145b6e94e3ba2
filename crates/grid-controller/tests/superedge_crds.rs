//! A cluster that kept SuperEdge's own CRDs (no status subresource; Helm never upgrades
//! CRDs): the controllers reconcile the generated objects exactly as usual, write no
//! status, report the missing subresource once per kind (Warning Event, log, gauge) with
//! the command that fixes it, and make no request at all in steady state. A CRD that
//! loses the subresource at run time is caught by its first failed status write; one that
//! gains it has its status written again.

mod common;

use std::time::Duration;

use common::*;
use edgegrid_core::crd::{DeploymentGrid, GridConditionType, ServiceGrid, StatefulSetGrid, WorkloadGridStatus};
use grid_controller::plan;
use grid_controller::reconcile::{Settings, crd_fix_command};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};

const KINDS: [(&str, &str); 3] =
    [("ServiceGrid", "servicegrids"), ("DeploymentGrid", "deploymentgrids"), ("StatefulSetGrid", "statefulsetgrids")];

fn raw(object: &impl serde::Serialize) -> Value {
    serde_json::to_value(object).expect("serialise")
}

/// The note of the one Warning Event per kind.
fn missing_note(kind: &str, plural: &str) -> String {
    format!(
        "the {plural}.superedge.io CRD has no status subresource (SuperEdge's CRD; Helm does not upgrade CRDs), so no \
         {kind} status is written; generated objects are still reconciled. Fix: kubectl apply --server-side \
         --force-conflicts -f charts/edgegrid/crds/{plural}.superedge.io.yaml"
    )
}

/// (type, reason, note) of the Events about the grid of this kind and name, oldest first.
async fn events_of(client: &Client, kind: &str, name: &str) -> Vec<(String, String, String)> {
    let mut listed =
        Api::<Event>::namespaced(client.clone(), "default").list(&ListParams::default()).await.expect("events").items;
    listed.sort_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0));
    listed
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name))
        })
        .map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// The three examples, created as a user would.
async fn create_examples(client: &Client) -> (ServiceGrid, DeploymentGrid, StatefulSetGrid) {
    let sg = Api::<ServiceGrid>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &read_example("servicegrid.yaml"))
        .await
        .expect("SuperEdge's CRD takes the ServiceGrid");
    let dg = Api::<DeploymentGrid>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &read_example("deploymentgrid.yaml"))
        .await
        .expect("SuperEdge's CRD takes the DeploymentGrid");
    let ssg = Api::<StatefulSetGrid>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &read_example("statefulsetgrid.yaml"))
        .await
        .expect("SuperEdge's CRD takes the StatefulSetGrid");
    (sg, dg, ssg)
}

/// What the generated objects must be, from the planner itself: metadata we set and the
/// whole spec, compared with the live objects (server-set metadata aside).
fn assert_generated<W: Resource + serde::Serialize>(live: &W, desired: &W) {
    let (live, desired) = (raw(live), raw(desired));
    let name = desired["metadata"]["name"].clone();
    assert_eq!(live["spec"], desired["spec"], "{name}: spec");
    for field in ["name", "namespace", "ownerReferences", "labels"] {
        assert_eq!(live["metadata"][field], desired["metadata"][field], "{name}: {field}");
    }
    for (key, value) in desired["metadata"]["annotations"].as_object().into_iter().flatten() {
        assert_eq!(&live["metadata"]["annotations"][key], value, "{name}: annotation {key}");
    }
}

/// Waits until the generated objects are exactly what the planner wants for these grids
/// and units, and returns them.
async fn converged(
    client: &Client,
    grids: &(ServiceGrid, DeploymentGrid, StatefulSetGrid),
    units: &[&str],
) -> (Service, Vec<Deployment>, Vec<StatefulSet>) {
    let units = units.iter().map(|u| u.to_string()).collect();
    let dg_plan = plan::plan_workload_grid(&grids.1, &units).expect("plan");
    let ssg_plan = plan::plan_workload_grid(&grids.2, &units).expect("plan");
    let want_deployments: Vec<String> = dg_plan.desired.values().map(|d| d.name_any()).collect();
    let want_statefulsets: Vec<String> = ssg_plan.desired.values().map(|s| s.name_any()).collect();
    let (service, deployments, statefulsets) = eventually("the generated objects", || async {
        let service = Api::<Service>::namespaced(client.clone(), "default").get("echo-svc").await.ok()?;
        let deployments =
            Api::<Deployment>::namespaced(client.clone(), "default").list(&ListParams::default()).await.ok()?.items;
        let statefulsets =
            Api::<StatefulSet>::namespaced(client.clone(), "default").list(&ListParams::default()).await.ok()?.items;
        (names(&deployments) == want_deployments && names(&statefulsets) == want_statefulsets).then_some((
            service,
            deployments,
            statefulsets,
        ))
    })
    .await;
    assert_generated(&service, &plan::plan_service_grid(&grids.0).expect("plan"));
    for (live, desired) in deployments.iter().zip(dg_plan.desired.values()) {
        assert_generated(live, desired);
    }
    for (live, desired) in statefulsets.iter().zip(ssg_plan.desired.values()) {
        assert_generated(live, desired);
    }
    (service, deployments, statefulsets)
}

fn is_grid_status_write(request: &str) -> bool {
    request.contains("grids/") && request.split('?').next().is_some_and(|path| path.ends_with("/status"))
}

fn is_discovery(request: &str) -> bool {
    request == "GET /apis/superedge.io/v1?"
}

async fn touch_grids(client: &Client, round: usize) {
    let touch = json!({"metadata": {"annotations": {"touched": round.to_string()}}});
    for (resource, name) in [
        (ApiResource::erase::<ServiceGrid>(&()), "echo"),
        (ApiResource::erase::<DeploymentGrid>(&()), "echo"),
        (ApiResource::erase::<StatefulSetGrid>(&()), "cache"),
    ] {
        Api::<DynamicObject>::namespaced_with(client.clone(), "default", &resource)
            .patch(name, &PatchParams::default(), &Patch::Merge(&touch))
            .await
            .expect("touch");
    }
}

fn reconciles(c: &Cluster) -> f64 {
    KINDS.iter().map(|(kind, _)| c.sample(&format!("grid_controller_reconciles_total{{kind=\"{kind}\"}}"))).sum()
}

/// SuperEdge's CRDs from the start. Design bounds checked here: discovery is asked once per
/// kind before its first status write (3 GETs), no status write is ever sent (0), each kind
/// is reported by exactly one Warning Event on the first grid that had a status to write,
/// and a reconcile of a converged grid then costs no request at all (objects from caches,
/// status skipped, unchanged conditions announce nothing, discovery re-asked at most once a
/// minute), so 5 rounds of reconciles of all three grids make 0 controller requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn superedge_crds_converge_without_status_writes_reported_once_per_kind() {
    let c = cluster_with(
        superedge_crds(),
        // Bad_Unit cannot name a workload: a Warning condition whose Event must not repeat
        // on every reconcile although the status that records it is never stored
        &[("n1", &[("zone1", "unit-a")]), ("n2", &[("zone1", "unit-b")]), ("n3", &[("zone1", "Bad_Unit")])],
        Settings::default(),
    )
    .await;
    let client = c.client.clone();
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    for (_, plural) in KINDS {
        let crd = crds.get(&format!("{plural}.superedge.io")).await.unwrap();
        assert!(crd.spec.versions[0].subresources.is_none(), "{plural}: SuperEdge's CRD has no subresources");
    }
    let grids = create_examples(&client).await;
    let (service, deployments, statefulsets) = converged(&client, &grids, &["unit-a", "unit-b", "Bad_Unit"]).await;
    assert_eq!(service.annotations()["topologyKeys"], r#"["zone1"]"#);
    assert_eq!(names(&deployments), ["echo-unit-a", "echo-unit-b"]);
    assert_eq!(names(&statefulsets), ["cache-unit-a", "cache-unit-b"]);

    let mut events_before = Vec::new();
    for ((kind, plural), name) in KINDS.into_iter().zip(["echo", "echo", "cache"]) {
        let events = eventually("the Warning Event", || async {
            let events = events_of(&client, kind, name).await;
            let unit_skipped = events.iter().any(|(_, reason, _)| reason == "UnitSkipped");
            let missing = events.iter().any(|(_, reason, _)| reason == "StatusSubresourceMissing");
            (missing && (kind == "ServiceGrid" || unit_skipped)).then_some(events)
        })
        .await;
        let missing: Vec<_> = events.iter().filter(|(_, reason, _)| reason == "StatusSubresourceMissing").collect();
        let want = ("Warning".to_string(), "StatusSubresourceMissing".to_string(), missing_note(kind, plural));
        assert_eq!(missing, [&want], "{kind}");
        assert_eq!(c.sample(&format!("grid_controller_status_subresource_missing{{kind=\"{kind}\"}}")), 1.0, "{kind}");
        events_before.push(events);
    }
    assert_eq!(
        missing_note("DeploymentGrid", "deploymentgrids").split("Fix: ").nth(1),
        Some(crd_fix_command("deploymentgrids").as_str())
    );

    // let the first reconciles (and the Events' writes) settle
    tokio::time::sleep(Duration::from_secs(1)).await;
    let all = c.controller_requests_since(0);
    assert_eq!(all.iter().filter(|r| is_grid_status_write(r)).count(), 0, "no status write: {all:#?}");
    assert_eq!(all.iter().filter(|r| is_discovery(r)).count(), 3, "discovery once per kind: {all:#?}");
    eprintln!("controller requests up to convergence: {}: {all:#?}", all.len());

    // steady state: every grid reconciles 5 more times and the controllers send nothing
    let mark = c.server.requests().mark();
    for round in 0..5 {
        let before = reconciles(&c);
        touch_grids(&client, round).await;
        eventually("the touched grids reconciled", || async { (reconciles(&c) >= before + 3.0).then_some(()) }).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(c.controller_requests_since(mark), Vec::<String>::new(), "requests in steady state");
    for ((kind, name), before) in [("ServiceGrid", "echo"), ("DeploymentGrid", "echo"), ("StatefulSetGrid", "cache")]
        .into_iter()
        .zip(events_before)
    {
        assert_eq!(events_of(&client, kind, name).await, before, "{kind}: no Event repeated");
    }
    // nothing failed: no error backoff from status
    for (kind, _) in KINDS {
        let failures: f64 = ["api", "conflict", "serialize", "apply_failed", "delete_failed"]
            .iter()
            .map(|e| c.sample(&format!("grid_controller_reconcile_failures_total{{kind=\"{kind}\",error=\"{e}\"}}")))
            .sum();
        assert_eq!(failures, 0.0, "{kind}");
    }
    c.stop().await;
}

/// Our CRDs, then SuperEdge's applied over them at run time (as SuperEdge's own
/// controller re-applies its CRDs every minute), then ours again (the fix command).
/// Losing the subresource is caught by the first status write that fails (one 404, then
/// no status write and one Warning Event); regaining it is found at the next reconcile once
/// the re-probe interval passed, and the status is written again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_writes_stop_when_the_subresource_goes_and_resume_when_it_returns() {
    let settings = Settings { status_reprobe: Duration::from_millis(300) };
    let c = cluster_with(edgegrid_core::crd::all_crds(), &[("n1", &[("zone1", "unit-a")])], settings).await;
    let client = c.client.clone();
    let grids: Api<DeploymentGrid> = Api::namespaced(client.clone(), "default");
    grids.create(&PostParams::default(), &read_example("deploymentgrid.yaml")).await.unwrap();
    let status_of = |client: Client| async move {
        Api::<DeploymentGrid>::namespaced(client, "default").get("echo").await.ok()?.status
    };
    eventually("status written", || async { status_of(client.clone()).await.filter(|s| s.units == 1) }).await;

    // SuperEdge's CRD replaces ours (an update, as its controller does)
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let superedge = superedge_crds().remove(1);
    let mut current = crds.get("deploymentgrids.superedge.io").await.unwrap();
    current.spec = superedge.spec.clone();
    crds.replace("deploymentgrids.superedge.io", &PostParams::default(), &current).await.unwrap();
    let mark = c.server.requests().mark();
    // a new unit changes the grid's status: its write is the first to fail
    node(&client, "n2", &[("zone1", "unit-b")]).await;
    eventually("echo-unit-b", || async {
        Api::<Deployment>::namespaced(client.clone(), "default").get("echo-unit-b").await.ok()
    })
    .await;
    let note = missing_note("DeploymentGrid", "deploymentgrids");
    let events = eventually("the Warning Event", || async {
        let events = events_of(&client, "DeploymentGrid", "echo").await;
        events.iter().any(|(_, reason, _)| reason == "StatusSubresourceMissing").then_some(events)
    })
    .await;
    assert_eq!(events, [("Warning".to_string(), "StatusSubresourceMissing".to_string(), note.clone())]);
    // more reconciles: no further status write
    for round in 0..3 {
        let before = reconciles(&c);
        touch_grids_dg(&client, round).await;
        eventually("reconciled", || async { (reconciles(&c) > before).then_some(()) }).await;
    }
    let requests = c.controller_requests_since(mark);
    let status_writes: Vec<(String, u16)> = c
        .server
        .requests()
        .since(mark)
        .into_iter()
        .filter(|r| r.user.as_deref() == Some(CONTROLLER_TOKEN) && is_grid_status_write(&r.path))
        .map(|r| (format!("{} {}", r.method, r.path), r.status))
        .collect();
    assert_eq!(
        status_writes,
        [("PATCH /apis/superedge.io/v1/namespaces/default/deploymentgrids/echo/status".to_string(), 404)],
        "the one status write that found the subresource gone: {requests:#?}"
    );
    assert_eq!(c.sample("grid_controller_status_subresource_missing{kind=\"DeploymentGrid\"}"), 1.0);
    eprintln!("controller requests while the subresource was gone: {}: {requests:#?}", requests.len());

    // the fix: our CRD, server-side applied with force
    let ours = edgegrid_core::crd::all_crds().remove(1);
    crds.patch("deploymentgrids.superedge.io", &PatchParams::apply("kubectl").force(), &Patch::Apply(&ours))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    touch_grids_dg(&client, 9).await;
    let resumed: WorkloadGridStatus =
        eventually("status written again", || async { status_of(client.clone()).await.filter(|s| s.units == 2) }).await;
    assert_eq!(resumed.workloads, ["echo-unit-a", "echo-unit-b"]);
    assert_eq!(condition(&resumed.conditions, GridConditionType::Applied).unwrap().0, "True");
    assert_eq!(c.sample("grid_controller_status_subresource_missing{kind=\"DeploymentGrid\"}"), 0.0);
    let warnings = events_of(&client, "DeploymentGrid", "echo").await;
    assert_eq!(warnings.len(), 1, "reported once: {warnings:?}");
    let nodes: Api<Node> = Api::all(client.clone());
    assert_eq!(nodes.list(&ListParams::default()).await.unwrap().items.len(), 2);
    c.stop().await;
}

async fn touch_grids_dg(client: &Client, round: usize) {
    let touch = json!({"metadata": {"annotations": {"touched": round.to_string()}}});
    Api::<DeploymentGrid>::namespaced(client.clone(), "default")
        .patch("echo", &PatchParams::default(), &Patch::Merge(&touch))
        .await
        .expect("touch");
}

/// The re-indentation that lets serde-saphyr read SuperEdge's files moves no text: the
/// same lines, only some of them indented further, and only inside quoted scalars.
#[test]
fn reading_superedge_crds_only_reindents_quoted_continuations() {
    for plural in ["servicegrids", "deploymentgrids", "statefulsetgrids"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("../../tests/superedge/crds/superedge.io_{plural}.yaml"));
        let original = std::fs::read_to_string(&path).unwrap();
        let read = indent_quoted_continuations(&original);
        let (before, after): (Vec<&str>, Vec<&str>) = (original.lines().collect(), read.lines().collect());
        assert_eq!(before.len(), after.len(), "{plural}");
        let moved = before.iter().zip(&after).filter(|(b, a)| b != a).count();
        assert!(before.iter().zip(&after).all(|(b, a)| a.ends_with(b) && a[..a.len() - b.len()].trim().is_empty()));
        assert!(moved > 100, "{plural}: {moved} lines");
    }
    let sample = "a:\n  description: 'it''s\n  long'\n  b: \"x\\\"\n  y\"\n  c: 'done'\n  d: z\n";
    assert_eq!(
        indent_quoted_continuations(sample),
        "a:\n  description: 'it''s\n    long'\n  b: \"x\\\"\n    y\"\n  c: 'done'\n  d: z"
    );
}
