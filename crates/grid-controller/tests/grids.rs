//! The grid controllers against the fake apiserver with unmodified kube-rs clients: the
//! exact generated objects, per-unit workloads following node labels, and each way a
//! grid must NOT act: on objects it does not control, stalled by a bad object, writing
//! when nothing changed, or reporting success it did not have.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use edgegrid_core::crd::{DeploymentGrid, GridConditionType, ServiceGrid, StatefulSetGrid};
use fake_apiserver::Fault;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

fn deployment_grid(name: &str, key: &str) -> DeploymentGrid {
    let mut grid: DeploymentGrid = read_example("deploymentgrid.yaml");
    grid.metadata.name = Some(name.into());
    grid.spec.grid_uniq_key = key.into();
    grid
}

async fn deployments(client: &Client) -> Vec<Deployment> {
    Api::<Deployment>::namespaced(client.clone(), "default").list(&ListParams::default()).await.expect("list").items
}

async fn dg_status(client: &Client, name: &str) -> Option<edgegrid_core::crd::WorkloadGridStatus> {
    Api::<DeploymentGrid>::namespaced(client.clone(), "default").get(name).await.ok()?.status
}

/// Whether the grid's `Applied` condition has this reason (`AllApplied` when True).
fn applied_is(status: &edgegrid_core::crd::WorkloadGridStatus, reason: &str) -> bool {
    condition(&status.conditions, GridConditionType::Applied).is_some_and(|(_, r, _)| r == reason)
}

fn raw(object: &impl serde::Serialize) -> Value {
    serde_json::to_value(object).expect("serialise")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grids_generate_services_and_per_unit_deployments() {
    let c = cluster(&[
        ("n1", &[("zone1", "unit-a")]),
        ("n2", &[("zone1", "unit-a")]),
        ("n3", &[("zone1", "unit-b")]),
        // a unit value that cannot name a Deployment
        ("n4", &[("zone1", "Bad_Unit")]),
    ])
    .await;
    let client = c.client.clone();
    let service_grids: Api<ServiceGrid> = Api::namespaced(client.clone(), "default");
    let deployment_grids: Api<DeploymentGrid> = Api::namespaced(client.clone(), "default");
    let sg = service_grids.create(&PostParams::default(), &read_example("servicegrid.yaml")).await.unwrap();
    let dg = deployment_grids.create(&PostParams::default(), &read_example("deploymentgrid.yaml")).await.unwrap();

    // ServiceGrid -> echo-svc, annotated, owned
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let service = eventually("echo-svc", || async { services.get("echo-svc").await.ok() }).await;
    assert_eq!(service.annotations()["topologyKeys"], r#"["zone1"]"#);
    assert_eq!(service.labels()["superedge.io/grid-selector"], "echo");
    assert_eq!(service.owner_references()[0].uid, sg.uid().unwrap());
    assert_eq!(service.spec.as_ref().unwrap().ports.as_ref().unwrap()[0].port, 80);
    let sg_status = eventually("ServiceGrid status", || async {
        service_grids.get("echo").await.ok().and_then(|g| g.status).filter(|s| s.service.is_some())
    })
    .await;
    assert_eq!(sg_status.service.as_deref(), Some("echo-svc"));
    assert_eq!(
        condition(&sg_status.conditions, GridConditionType::Ready),
        Some(("True".into(), "ServiceApplied".into(), String::new()))
    );

    // DeploymentGrid -> one Deployment per valid unit (not per node)
    let listed = eventually("per-unit deployments", || async {
        let items = deployments(&client).await;
        (items.len() == 2).then_some(items)
    })
    .await;
    assert_eq!(names(&listed), ["echo-unit-a", "echo-unit-b"]);
    for d in &listed {
        let unit = d.name_any().trim_start_matches("echo-").to_string();
        let selector = d.spec.as_ref().unwrap().template.spec.as_ref().unwrap().node_selector.clone().unwrap();
        assert_eq!(selector, BTreeMap::from([("zone1".to_string(), unit)]));
        assert_eq!(d.owner_references()[0].uid, dg.uid().unwrap());
        assert_eq!(d.spec.as_ref().unwrap().replicas, Some(2));
    }
    let status =
        eventually("DeploymentGrid status", || async { dg_status(&client, "echo").await.filter(|s| s.units == 2) })
            .await;
    assert_eq!(status.workloads, ["echo-unit-a", "echo-unit-b"]);
    let (names_status, names_reason, names_message) =
        condition(&status.conditions, GridConditionType::UnitNamesValid).unwrap();
    assert_eq!((names_status.as_str(), names_reason.as_str()), ("False", "UnitsSkipped"));
    assert!(names_message.starts_with("Bad_Unit: workload name \"echo-Bad_Unit\""), "{names_message}");
    // applied, but not Ready: no replica is available yet (readyUnits 0 means not ready)
    assert_eq!(status.ready_units, 0);
    assert_eq!(
        condition(&status.conditions, GridConditionType::Applied),
        Some(("True".into(), "AllApplied".into(), String::new()))
    );
    assert_eq!(
        condition(&status.conditions, GridConditionType::Ready),
        Some(("False".into(), "UnitsUnavailable".into(), "unit-a: 0/2 available; unit-b: 0/2 available".into()))
    );
    let skipped = eventually("UnitSkipped event", || async {
        let events = events_about(&client, "echo").await;
        events.into_iter().find(|(_, reason, _)| reason == "UnitSkipped")
    })
    .await;
    assert_eq!(skipped.0, "Warning");

    // the workloads become available: Ready follows, with readyUnits
    let deployments_api: Api<Deployment> = Api::namespaced(client.clone(), "default");
    for name in ["echo-unit-a", "echo-unit-b"] {
        let available =
            json!({"status": {"replicas": 2, "readyReplicas": 2, "availableReplicas": 2, "updatedReplicas": 2}});
        deployments_api.patch_status(name, &PatchParams::default(), &Patch::Merge(&available)).await.unwrap();
    }
    let ready = eventually("Ready once every unit is available", || async {
        dg_status(&client, "echo").await.filter(|s| s.ready_units == 2)
    })
    .await;
    assert_eq!(
        condition(&ready.conditions, GridConditionType::Ready),
        Some(("True".into(), "AllUnitsAvailable".into(), String::new()))
    );
    assert_eq!(ready.observed_generation, dg.metadata.generation);

    // n3 moves to unit-c: echo-unit-c appears, echo-unit-b (no node left) goes
    Api::<Node>::all(client.clone())
        .patch("n3", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"zone1": "unit-c"}}})))
        .await
        .unwrap();
    let relabelled = eventually("deployments follow the node labels", || async {
        let names = names(&deployments(&client).await);
        (names == ["echo-unit-a", "echo-unit-c"]).then_some(names)
    })
    .await;
    assert_eq!(relabelled, ["echo-unit-a", "echo-unit-c"]);

    // deleting the grid takes its Deployments (ownerReferences)
    deployment_grids.delete("echo", &DeleteParams::background()).await.unwrap();
    eventually("garbage collection", || async { deployments(&client).await.is_empty().then_some(()) }).await;

    assert!(c.sample("grid_controller_reconciles_total{kind=\"DeploymentGrid\"}") > 0.0);
    c.stop().await;
}

/// Reproduction: a user's Service `db-svc` was force-applied over, owned, reported
/// Ready=True and then deleted with ServiceGrid `db`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_service_under_the_generated_name_is_left_untouched() {
    let c = cluster(&[("n1", &[("zone1", "a")])]).await;
    let client = c.client.clone();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let users: Service = serde_json::from_value(json!({
        "metadata": {"name": "db-svc"},
        "spec": {"selector": {"app": "database"}, "ports": [{"port": 5432}]}
    }))
    .unwrap();
    let before = services.create(&PostParams::default(), &users).await.unwrap();
    let grid: ServiceGrid = serde_json::from_value(json!({
        "apiVersion": "superedge.io/v1", "kind": "ServiceGrid", "metadata": {"name": "db"},
        "spec": {"gridUniqKey": "zone1", "template": {"selector": {"appGrid": "db"}, "ports": [{"port": 80, "targetPort": 8080}]}}
    }))
    .unwrap();
    let grids: Api<ServiceGrid> = Api::namespaced(client.clone(), "default");
    grids.create(&PostParams::default(), &grid).await.unwrap();

    let status = eventually("NameConflict in the status", || async {
        grids.get("db").await.ok()?.status.filter(|s| !s.conditions.is_empty())
    })
    .await;
    let message = "Service default/db-svc exists and is not controlled by this grid (adopted only when labelled superedge.io/grid-selector=db)";
    assert_eq!(
        condition(&status.conditions, GridConditionType::Applied),
        Some(("False".into(), "NameConflict".into(), message.into()))
    );
    assert_eq!(
        condition(&status.conditions, GridConditionType::Ready),
        Some(("False".into(), "NameConflict".into(), message.into()))
    );
    assert_eq!(status.service, None);
    let events = eventually("a NameConflict event", || async {
        let events = events_about(&client, "db").await;
        (!events.is_empty()).then_some(events)
    })
    .await;
    assert_eq!(events, [("Warning".to_string(), "NameConflict".to_string(), message.to_string())]);
    assert_eq!(raw(&services.get("db-svc").await.unwrap()), raw(&before), "byte-for-byte untouched");

    grids.delete("db", &DeleteParams::background()).await.unwrap();
    eventually("the grid is gone", || async { grids.get_opt("db").await.ok()?.is_none().then_some(()) }).await;
    assert_eq!(raw(&services.get("db-svc").await.unwrap()), raw(&before), "not deleted with the grid");
    c.stop().await;
}

/// Reproduction: a user's Deployment `web-unit-e` had its image and selector replaced when
/// a node joined `unit-e`, then was deleted when the node left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_deployment_under_a_unit_name_survives_the_unit_coming_and_going() {
    let c = cluster(&[("n1", &[("zone1", "unit-a")]), ("n2", &[])]).await;
    let client = c.client.clone();
    let deployments_api: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let users: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web-unit-e", "labels": {"team": "payments"}},
        "spec": {"selector": {"matchLabels": {"app": "pay"}},
                 "template": {"metadata": {"labels": {"app": "pay"}}, "spec": {"containers": [{"name": "pay", "image": "pay:1"}]}}}
    }))
    .unwrap();
    let before = deployments_api.create(&PostParams::default(), &users).await.unwrap();
    Api::<DeploymentGrid>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &deployment_grid("web", "zone1"))
        .await
        .unwrap();
    eventually("web-unit-a", || async { deployments_api.get("web-unit-a").await.ok() }).await;
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch("n2", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"zone1": "unit-e"}}})))
        .await
        .unwrap();
    let status = eventually("the conflict reported, the other unit kept", || async {
        dg_status(&client, "web").await.filter(|s| applied_is(s, "NameConflict"))
    })
    .await;
    assert_eq!(status.workloads, ["web-unit-a"]);
    assert_eq!(
        condition(&status.conditions, GridConditionType::Applied).unwrap().2,
        "Deployment default/web-unit-e exists and is not controlled by this grid (adopted only when labelled superedge.io/grid-selector=web)"
    );
    nodes
        .patch("n2", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"zone1": null}}})))
        .await
        .unwrap();
    eventually("the conflict clears when the unit goes", || async {
        dg_status(&client, "web").await.filter(|s| applied_is(s, "AllApplied"))
    })
    .await;
    assert_eq!(raw(&deployments_api.get("web-unit-e").await.unwrap()), raw(&before), "byte-for-byte untouched");
    let reasons: Vec<String> = events_about(&client, "web").await.into_iter().map(|(_, r, _)| r).collect();
    assert_eq!(reasons, ["NameConflict", "Applied"]);
    c.stop().await;
}

/// Reproduction: DeploymentGrid `web` (unit `unit-d`) and `web-unit` (unit `d`) both
/// generate `web-unit-d`; ownership and spec flipped on every node event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_grids_generating_one_name_do_not_fight() {
    let c = cluster(&[("n1", &[("zone1", "unit-d")]), ("n2", &[("zone1", "d")])]).await;
    let client = c.client.clone();
    let grids: Api<DeploymentGrid> = Api::namespaced(client.clone(), "default");
    let web = grids.create(&PostParams::default(), &deployment_grid("web", "zone1")).await.unwrap();
    let deployments_api: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let contested = eventually("web-unit-d from web", || async { deployments_api.get("web-unit-d").await.ok() }).await;
    assert_eq!(contested.owner_references()[0].uid, web.uid().unwrap());
    grids.create(&PostParams::default(), &deployment_grid("web-unit", "zone1")).await.unwrap();
    let loser = eventually("web-unit reports the conflict", || async {
        dg_status(&client, "web-unit").await.filter(|s| applied_is(s, "NameConflict"))
    })
    .await;
    assert_eq!(
        condition(&loser.conditions, GridConditionType::Applied).unwrap().2,
        "Deployment default/web-unit-d exists and is controlled by DeploymentGrid/web"
    );
    assert_eq!(loser.workloads, ["web-unit-unit-d"]);
    let settled = deployments_api.get("web-unit-d").await.unwrap();
    // node events of every kind: heartbeats, new nodes in existing units, unrelated labels
    let nodes: Api<Node> = Api::all(client.clone());
    for round in 0..5 {
        let heartbeat =
            json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": format!("beat{round}")}]}});
        nodes.patch_status("n1", &PatchParams::default(), &Patch::Merge(&heartbeat)).await.unwrap();
        node(&client, &format!("extra{round}"), &[("zone1", "d"), ("rack", &round.to_string())]).await;
    }
    nodes
        .patch("n2", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"disk": "ssd"}}})))
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let after = deployments_api.get("web-unit-d").await.unwrap();
    assert_eq!(raw(&after), raw(&settled), "no flip-flop: same owner, spec, generation");
    assert_eq!(after.metadata.generation, contested.metadata.generation);
    let winner = dg_status(&client, "web").await.unwrap();
    assert_eq!(condition(&winner.conditions, GridConditionType::Applied).unwrap().0, "True");
    c.stop().await;
}

/// An orphan labelled with the grid's name is adopted (as SuperEdge did); the adopted
/// Deployment gets the controller reference and the grid's spec.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_labelled_orphan_is_adopted() {
    let c = cluster(&[("n1", &[("zone1", "unit-a")])]).await;
    let client = c.client.clone();
    let deployments_api: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let orphan: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "echo-unit-a", "labels": {"superedge.io/grid-selector": "echo"}},
        "spec": {"replicas": 7, "selector": {"matchLabels": {"appGrid": "echo"}},
                 "template": {"metadata": {"labels": {"appGrid": "echo"}}, "spec": {"containers": [{"name": "old", "image": "old:1"}]}}}
    }))
    .unwrap();
    let orphan = deployments_api.create(&PostParams::default(), &orphan).await.unwrap();
    let grid = Api::<DeploymentGrid>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &deployment_grid("echo", "zone1"))
        .await
        .unwrap();
    let adopted = eventually("adoption", || async {
        deployments_api.get("echo-unit-a").await.ok().filter(|d| !d.owner_references().is_empty())
    })
    .await;
    assert_eq!(adopted.uid(), orphan.uid(), "the same object, not a re-created one");
    assert_eq!(adopted.owner_references()[0].uid, grid.uid().unwrap());
    assert_eq!(adopted.owner_references()[0].controller, Some(true));
    assert_eq!(adopted.spec.as_ref().unwrap().replicas, Some(2));
    c.stop().await;
}

/// Reproduction: a DeploymentGrid with `replicas: "two"`, or without `gridUniqKey`, got no
/// status, Event or log, and after a relist stopped all DeploymentGrid reconciling.
/// (Without `template` it decodes: see tests/templates.rs.)
/// Our CRD's schema makes the apiserver refuse such objects, but a cluster can hold them
/// anyway: SuperEdge's own CRD (which users migrating keep) has no schema, and objects
/// stored under an older CRD are not re-validated. So the CRD here is loosened first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_that_does_not_decode_is_reported_and_the_others_reconcile() {
    let c = cluster(&[("n1", &[("zone1", "unit-a")])]).await;
    let client = c.client.clone();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut crd = crds.get("deploymentgrids.superedge.io").await.unwrap();
    for version in &mut crd.spec.versions {
        version.schema = Some(
            serde_json::from_value(json!({"openAPIV3Schema": {
            "type": "object", "x-kubernetes-preserve-unknown-fields": true}}))
            .unwrap(),
        );
    }
    crds.replace("deploymentgrids.superedge.io", &PostParams::default(), &crd).await.unwrap();
    let resource = ApiResource::erase::<DeploymentGrid>(&());
    let untyped: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
    let mut two = raw(&deployment_grid("two", "zone1"));
    two["spec"]["template"]["replicas"] = json!("two");
    let mut no_key = raw(&deployment_grid("no-key", "zone1"));
    no_key["spec"].as_object_mut().unwrap().remove("gridUniqKey");
    for bad in [two, no_key] {
        let bad: DynamicObject = serde_json::from_value(bad).unwrap();
        untyped.create(&PostParams::default(), &bad).await.unwrap();
    }
    let grids: Api<DeploymentGrid> = Api::namespaced(client.clone(), "default");
    grids.create(&PostParams::default(), &deployment_grid("good", "zone1")).await.unwrap();
    let deployments_api: Api<Deployment> = Api::namespaced(client.clone(), "default");
    eventually("the valid grid reconciles", || async { deployments_api.get("good-unit-a").await.ok() }).await;

    for (name, detail) in
        [("two", "invalid type: string \"two\", expected i32"), ("no-key", "missing field `gridUniqKey`")]
    {
        let status = eventually("InvalidSpec status", || async {
            let grid = untyped.get(name).await.ok()?;
            let status: edgegrid_core::crd::WorkloadGridStatus =
                serde_json::from_value(grid.data.get("status")?.clone()).ok()?;
            Some(status)
        })
        .await;
        let (state, reason, message) = condition(&status.conditions, GridConditionType::Ready).unwrap();
        assert_eq!((state.as_str(), reason.as_str()), ("False", "InvalidSpec"));
        assert!(
            message.starts_with("the object does not decode as a DeploymentGrid: ") && message.contains(detail),
            "{message}"
        );
        let events = eventually("InvalidSpec event", || async {
            let events = events_about(&client, name).await;
            (!events.is_empty()).then_some(events)
        })
        .await;
        assert_eq!(events, [("Warning".to_string(), "InvalidSpec".to_string(), message.clone())]);
    }
    // a relist (watches dropped, history compacted) does not stall the kind either
    c.server.compact_history();
    c.server.drop_watches();
    grids.create(&PostParams::default(), &deployment_grid("later", "zone1")).await.unwrap();
    eventually("a grid created after the relist reconciles", || async {
        deployments_api.get("later-unit-a").await.ok()
    })
    .await;
    assert!(
        c.sample("grid_controller_reconcile_failures_total{kind=\"DeploymentGrid\",error=\"invalid_spec\"}") >= 2.0
    );
    c.stop().await;
}

/// Steady state is free: heartbeats, nodes joining existing units, and reconciles of
/// up-to-date grids make no write request; a node event only requeues grids keyed on a
/// label whose set of values changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_state_writes_nothing_and_node_events_requeue_only_affected_grids() {
    let c = cluster(&[("n1", &[("zone1", "a"), ("zone2", "x")]), ("n2", &[("zone1", "b"), ("zone2", "y")])]).await;
    let client = c.client.clone();
    Api::<ServiceGrid>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &read_example("servicegrid.yaml"))
        .await
        .unwrap();
    Api::<DeploymentGrid>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &deployment_grid("zone1-grid", "zone1"))
        .await
        .unwrap();
    let mut sts: StatefulSetGrid = read_example("statefulsetgrid.yaml");
    sts.metadata.name = Some("zone2-grid".into());
    sts.spec.grid_uniq_key = "zone2".into();
    Api::<StatefulSetGrid>::namespaced(client.clone(), "default").create(&PostParams::default(), &sts).await.unwrap();
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    eventually("everything applied", || async {
        let deployments = deployments(&client).await.len();
        let statefulsets = statefulsets.list(&ListParams::default()).await.ok()?.items.len();
        let dg = dg_status(&client, "zone1-grid").await?;
        (deployments == 2 && statefulsets == 2 && dg.units == 2).then_some(())
    })
    .await;
    // let the status writes and events of the first reconciles settle
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let mark = c.server.requests().mark();
    let dg_reconciles = c.sample("grid_controller_reconciles_total{kind=\"DeploymentGrid\"}");
    let sts_reconciles = c.sample("grid_controller_reconciles_total{kind=\"StatefulSetGrid\"}");

    let nodes: Api<Node> = Api::all(client.clone());
    for round in 0..10 {
        let heartbeat =
            json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": format!("beat{round}")}]}});
        for n in ["n1", "n2"] {
            nodes.patch_status(n, &PatchParams::default(), &Patch::Merge(&heartbeat)).await.unwrap();
        }
    }
    node(&client, "n3", &[("zone1", "a"), ("zone2", "x")]).await;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(c.sample("grid_controller_reconciles_total{kind=\"DeploymentGrid\"}"), dg_reconciles);
    assert_eq!(c.sample("grid_controller_reconciles_total{kind=\"StatefulSetGrid\"}"), sts_reconciles);

    // resyncs of up-to-date grids: touching every grid makes each reconcile, and write nothing
    let touch = json!({"metadata": {"annotations": {"touched": "yes"}}});
    for (plural, name) in
        [("servicegrids", "echo"), ("deploymentgrids", "zone1-grid"), ("statefulsetgrids", "zone2-grid")]
    {
        let resource = match plural {
            "servicegrids" => ApiResource::erase::<ServiceGrid>(&()),
            "deploymentgrids" => ApiResource::erase::<DeploymentGrid>(&()),
            _ => ApiResource::erase::<StatefulSetGrid>(&()),
        };
        Api::<DynamicObject>::namespaced_with(client.clone(), "default", &resource)
            .patch(name, &PatchParams::default(), &Patch::Merge(&touch))
            .await
            .unwrap();
    }
    eventually("the touched grids reconciled", || async {
        (c.sample("grid_controller_reconciles_total{kind=\"StatefulSetGrid\"}") > sts_reconciles
            && c.sample("grid_controller_reconciles_total{kind=\"DeploymentGrid\"}") > dg_reconciles)
            .then_some(())
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let ours = |path: &str| path.starts_with("/api/v1/nodes") || path.contains("grids/");
    assert_eq!(c.writes_since(mark, ours), Vec::<String>::new(), "the controller wrote in steady state");

    // a zone2 value appears: only the StatefulSetGrid keyed on zone2 is requeued
    let dg_reconciles = c.sample("grid_controller_reconciles_total{kind=\"DeploymentGrid\"}");
    nodes
        .patch("n3", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"zone2": "z"}}})))
        .await
        .unwrap();
    eventually("zone2-grid-z", || async { statefulsets.get("zone2-grid-z").await.ok() }).await;
    assert_eq!(c.sample("grid_controller_reconciles_total{kind=\"DeploymentGrid\"}"), dg_reconciles);
    c.stop().await;
}

/// Errors are not swallowed: a failing write is an error with a metric label, shown in
/// status, and retried with backoff until it succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_writes_are_visible_and_retried() {
    let c = cluster(&[("n1", &[("zone1", "unit-a")]), ("n2", &[("zone1", "unit-b")])]).await;
    let client = c.client.clone();
    Api::<DeploymentGrid>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &deployment_grid("echo", "zone1"))
        .await
        .unwrap();
    eventually("two deployments", || async { (deployments(&client).await.len() == 2).then_some(()) }).await;
    c.server.set_fault("deployments", Fault::Error(500));
    Api::<Node>::all(client.clone())
        .patch("n2", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"zone1": "unit-c"}}})))
        .await
        .unwrap();
    let status = eventually("the failure in the status", || async {
        dg_status(&client, "echo").await.filter(|s| applied_is(s, "ApplyFailed"))
    })
    .await;
    let message = condition(&status.conditions, GridConditionType::Applied).unwrap().2;
    assert!(message.starts_with("reading Deployment default/echo-unit-c: "), "{message}");
    assert!(message.contains("; deleting Deployment default/echo-unit-b: "), "{message}");
    assert_eq!(condition(&status.conditions, GridConditionType::Ready).unwrap().1, "NotApplied");
    eventually("the failure metric", || async {
        (c.sample("grid_controller_reconcile_failures_total{kind=\"DeploymentGrid\",error=\"apply_failed\"}") >= 1.0)
            .then_some(())
    })
    .await;
    assert_eq!(names(&deployments_via_store(&c).await), ["echo-unit-a", "echo-unit-b"]);
    c.server.clear_faults();
    eventually("retried until it succeeds", || async {
        (names(&deployments(&client).await) == ["echo-unit-a", "echo-unit-c"]).then_some(())
    })
    .await;
    let recovered = eventually("Applied again", || async {
        dg_status(&client, "echo").await.filter(|s| applied_is(s, "AllApplied"))
    })
    .await;
    assert_eq!(recovered.workloads, ["echo-unit-a", "echo-unit-c"]);
    c.stop().await;
}

/// Found by the soak (seed 202, after an API server restart): kube's controller pauses
/// all its triggers after any of its watches fails, for longer after each failure in a
/// row (up to 30 s), so a watch of generated Deployments that kept failing held back the
/// events of every DeploymentGrid; a grid created then waited more than 45 s. A watch
/// backs off on its own; a grid's own event is reconciled at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_watch_of_generated_objects_does_not_hold_back_a_new_grid() {
    let c = cluster(&[("n1", &[("zone1", "unit-a")])]).await;
    let client = c.client.clone();
    // the Deployments watch fails from now on (each retry answered 500, never retried
    // within the request)
    c.server.set_fault("deployments", Fault::Error(500));
    c.server.drop_watches();
    // failures at about 0, 0.8, 2.4, 5.6 and 12 s: kube's pause of the triggers would now
    // last until about 25 s
    tokio::time::sleep(Duration::from_secs(13)).await;
    Api::<DeploymentGrid>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &deployment_grid("late", "zone1"))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        if dg_status(&client, "late").await.is_some_and(|s| applied_is(&s, "ApplyFailed")) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the grid was not reconciled within 5 s of its creation");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    c.server.clear_faults();
    eventually("its deployment once the watch works", || async {
        (names(&deployments(&client).await) == ["late-unit-a"]).then_some(())
    })
    .await;
    c.stop().await;
}

/// The deployments as stored, bypassing the faulted HTTP path.
async fn deployments_via_store(c: &Cluster) -> Vec<Deployment> {
    let rt = c.server.store().resolve("apps", "v1", "deployments").expect("deployments are served");
    let page = c.server.store().list(&rt, &Default::default()).expect("list");
    page.items.into_iter().map(|v| serde_json::from_value(v).expect("deployment")).collect()
}

/// SuperEdge's `autoDeleteUnusedTemplate`: pool entries nothing names are removed from
/// the grid's spec, with a Normal Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_delete_unused_template_prunes_the_pool() {
    let c = cluster(&[("n1", &[("zone1", "unit-a")])]).await;
    let client = c.client.clone();
    let mut grid = deployment_grid("echo", "zone1");
    let mut large = grid.spec.template.clone().expect("the example has a template");
    large.replicas = Some(5);
    grid.spec.template_pool = BTreeMap::from([("large".to_string(), large.clone()), ("spare".to_string(), large)]);
    grid.spec.templates = BTreeMap::from([("unit-a".to_string(), "large".to_string())]);
    grid.spec.auto_delete_unused_template = true;
    let grids: Api<DeploymentGrid> = Api::namespaced(client.clone(), "default");
    grids.create(&PostParams::default(), &grid).await.unwrap();
    let pruned = eventually("spare removed", || async {
        grids.get("echo").await.ok().filter(|g| !g.spec.template_pool.contains_key("spare"))
    })
    .await;
    assert_eq!(pruned.spec.template_pool.keys().collect::<Vec<_>>(), ["large"]);
    let deployments_api: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let unit_a = eventually("echo-unit-a", || async { deployments_api.get("echo-unit-a").await.ok() }).await;
    assert_eq!(unit_a.spec.unwrap().replicas, Some(5));
    let events = eventually("TemplatesDeleted", || async {
        let events = events_about(&client, "echo").await;
        events.into_iter().find(|(_, reason, _)| reason == "TemplatesDeleted")
    })
    .await;
    assert_eq!(
        events,
        (
            "Normal".into(),
            "TemplatesDeleted".into(),
            "autoDeleteUnusedTemplate removed templatePool entries spare".into()
        )
    );
    c.stop().await;
}
