//! The grid controllers against the fake apiserver with unmodified kube-rs clients: the
//! exact generated objects, per-unit workloads following node labels, skipped units
//! reported, garbage collection with the grid.

use std::collections::BTreeMap;
use std::time::Duration;

use edgegrid_core::crd::{ConditionStatus, DeploymentGrid, GridConditionType, ServiceGrid, all_crds};
use fake_apiserver::FakeApiServer;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::time::Instant;

async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn node(client: &Client, name: &str, unit: &str) {
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name, "labels": {"zone1": unit}}})).unwrap();
    Api::<Node>::all(client.clone()).create(&PostParams::default(), &node).await.unwrap();
}

fn read_example<T: serde::de::DeserializeOwned>(file: &str) -> T {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(file);
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn deployment_names(items: &[Deployment]) -> Vec<String> {
    let mut names: Vec<String> = items.iter().map(|d| d.name_any()).collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grids_generate_services_and_per_unit_deployments() {
    let server = FakeApiServer::start().await.unwrap();
    let client = Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in all_crds() {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    // three nodes in two units, plus one whose unit value cannot name a Deployment
    node(&client, "n1", "unit-a").await;
    node(&client, "n2", "unit-a").await;
    node(&client, "n3", "unit-b").await;
    node(&client, "n4", "Bad_Unit").await;

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let metrics = std::sync::Arc::new(grid_controller::metrics::Metrics::default());
    let controller = tokio::spawn(grid_controller::reconcile::run(client.clone(), metrics.clone(), async move {
        let _ = stopped.await;
    }));

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
    assert_eq!(sg_status.conditions[0].status, ConditionStatus::True);

    // DeploymentGrid -> one Deployment per valid unit (not per node)
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let listed = eventually("per-unit deployments", || async {
        let items = deployments.list(&ListParams::default()).await.ok()?.items;
        (items.len() == 2).then_some(items)
    })
    .await;
    assert_eq!(deployment_names(&listed), ["echo-unit-a", "echo-unit-b"]);
    for d in &listed {
        let unit = d.name_any().trim_start_matches("echo-").to_string();
        let selector = d.spec.as_ref().unwrap().template.spec.as_ref().unwrap().node_selector.clone().unwrap();
        assert_eq!(selector, BTreeMap::from([("zone1".to_string(), unit)]));
        assert_eq!(d.owner_references()[0].uid, dg.uid().unwrap());
        assert_eq!(d.spec.as_ref().unwrap().replicas, Some(2));
    }
    let status = eventually("DeploymentGrid status", || async {
        deployment_grids.get("echo").await.ok().and_then(|g| g.status).filter(|s| s.units == 2)
    })
    .await;
    assert_eq!(status.workloads, ["echo-unit-a", "echo-unit-b"]);
    let names = status.conditions.iter().find(|c| c.type_ == GridConditionType::UnitNamesValid).unwrap();
    assert_eq!((names.status, names.reason.as_str()), (ConditionStatus::False, "UnitsSkipped"));
    assert!(names.message.starts_with("Bad_Unit: workload name \"echo-Bad_Unit\""), "{}", names.message);
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let skipped = eventually("UnitSkipped event", || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("UnitSkipped"))
    })
    .await;
    assert_eq!(skipped.regarding.unwrap().name.as_deref(), Some("echo"));

    // n3 moves to unit-c: echo-unit-c appears, echo-unit-b (no node left) goes
    Api::<Node>::all(client.clone())
        .patch("n3", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"zone1": "unit-c"}}})))
        .await
        .unwrap();
    let relabelled = eventually("deployments follow the node labels", || async {
        let names = deployment_names(&deployments.list(&ListParams::default()).await.ok()?.items);
        (names == ["echo-unit-a", "echo-unit-c"]).then_some(names)
    })
    .await;
    assert_eq!(relabelled, ["echo-unit-a", "echo-unit-c"]);

    // a Deployment nobody owns is never touched
    let foreign: Deployment = serde_json::from_value(json!({"metadata": {"name": "echo-foreign", "labels": {"superedge.io/grid-selector": "echo"}},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}))
    .unwrap();
    deployments.create(&PostParams::default(), &foreign).await.unwrap();

    // deleting the grid takes its Deployments (ownerReferences), not the foreign one
    deployment_grids.delete("echo", &DeleteParams::background()).await.unwrap();
    let left = eventually("garbage collection", || async {
        let names = deployment_names(&deployments.list(&ListParams::default()).await.ok()?.items);
        (names.len() == 1).then_some(names)
    })
    .await;
    assert_eq!(left, ["echo-foreign"]);

    let exposition = metrics.encode();
    assert!(exposition.contains("grid_controller_reconciles_total{kind=\"DeploymentGrid\"}"), "{exposition}");
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), controller).await.expect("controllers stop on shutdown").unwrap();
}
