//! Which template each unit's workload is made from, against the fake apiserver with our
//! CRDs (whose schemas it validates): SuperEdge's `templatePool`-only grids are accepted and
//! give each unit exactly its pool entry; a unit with no template gets no workload, keeps
//! the one it had, and is reported, while the other units reconcile.

mod common;

use std::collections::BTreeMap;

use common::*;
use edgegrid_core::crd::{DeploymentGrid, GridConditionType, WorkloadGridStatus};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const DOCS_GRID: &str = include_str!("../../../tests/superedge/docs/deploymentgrid-templatepool.yaml");

async fn deployments(client: &Client) -> Vec<Deployment> {
    Api::<Deployment>::namespaced(client.clone(), "default").list(&ListParams::default()).await.expect("list").items
}

async fn status_of(client: &Client, name: &str) -> Option<WorkloadGridStatus> {
    Api::<DeploymentGrid>::namespaced(client.clone(), "default").get(name).await.ok()?.status
}

fn raw(object: &impl serde::Serialize) -> Value {
    serde_json::to_value(object).expect("serialise")
}

/// SuperEdge's docs' canary DeploymentGrid (no `template`; `defaultTemplateName: test1`)
/// passes our CRD's schema unchanged and yields one Deployment per unit whose spec is
/// exactly its pool entry plus the unit's nodeSelector: zone1 and zone3 (not in
/// `templates`) take test1, zone2 takes test2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn superedge_docs_template_pool_only_grid_is_accepted_and_yields_the_pool_specs() {
    let c = cluster(&[("n1", &[("zone", "zone1")]), ("n2", &[("zone", "zone2")]), ("n3", &[("zone", "zone3")])]).await;
    let client = c.client.clone();
    let submitted: Value = serde_saphyr::from_str(DOCS_GRID).expect("docs YAML");
    let typed: DeploymentGrid = serde_saphyr::from_str(DOCS_GRID).expect("docs grid decodes");
    assert_eq!(typed.spec.template, None);
    let resource = ApiResource::erase::<DeploymentGrid>(&());
    let untyped: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
    let object: DynamicObject = serde_json::from_value(submitted).expect("object");
    untyped.create(&PostParams::default(), &object).await.expect("our CRD's schema accepts SuperEdge's docs grid");
    let stored = Api::<DeploymentGrid>::namespaced(client.clone(), "default").get("deploymentgrid-demo").await.unwrap();
    assert_eq!(stored.spec, typed.spec, "nothing pruned or defaulted away");

    let listed = eventually("a Deployment per unit", || async {
        let items = deployments(&client).await;
        (items.len() == 3).then_some(items)
    })
    .await;
    assert_eq!(names(&listed), ["deploymentgrid-demo-zone1", "deploymentgrid-demo-zone2", "deploymentgrid-demo-zone3"]);
    for deployment in &listed {
        let unit = deployment.name_any().trim_start_matches("deploymentgrid-demo-").to_string();
        let entry = if unit == "zone2" { "test2" } else { "test1" };
        let mut want = raw(&typed.spec.template_pool[entry]);
        want["template"]["spec"]["nodeSelector"] = json!({"zone": unit});
        assert_eq!(raw(deployment.spec.as_ref().unwrap()), want, "{unit}: exactly pool entry {entry} + nodeSelector");
        assert_eq!(deployment.owner_references()[0].uid, stored.uid().unwrap());
        assert_eq!(deployment.labels()["superedge.io/grid-selector"], "deploymentgrid-demo");
    }
    let status =
        eventually("status", || async { status_of(&client, "deploymentgrid-demo").await.filter(|s| s.units == 3) })
            .await;
    assert_eq!(
        condition(&status.conditions, GridConditionType::TemplatesResolved),
        Some(("True".into(), "AllTemplatesResolved".into(), String::new()))
    );
    assert_eq!(condition(&status.conditions, GridConditionType::Applied).unwrap().0, "True");
    c.stop().await;
}

/// A grid that loses `template` while unit-b still uses it: unit-b gets no workload (its
/// Deployment is left byte-for-byte as it was, not deleted), `TemplatesResolved=False`
/// and `Ready=False` say why, one Warning Event announces it, and the other units keep
/// reconciling (a new unit with a `templates` entry gets its Deployment). Naming a pool
/// entry as `defaultTemplateName` resolves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_without_a_template_gets_no_workload_keeps_its_own_and_is_reported() {
    let c = cluster(&[("n1", &[("zone1", "unit-a")]), ("n2", &[("zone1", "unit-b")])]).await;
    let client = c.client.clone();
    let mut grid: DeploymentGrid = read_example("deploymentgrid.yaml");
    grid.metadata.name = Some("web".into());
    let mut big = grid.spec.template.clone().expect("the example has a template");
    big.replicas = Some(5);
    grid.spec.template_pool = BTreeMap::from([("big".to_string(), big)]);
    grid.spec.templates = BTreeMap::from([("unit-a".to_string(), "big".to_string())]);
    let grids: Api<DeploymentGrid> = Api::namespaced(client.clone(), "default");
    grids.create(&PostParams::default(), &grid).await.unwrap();
    let deployments_api: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let before = eventually("both units", || async {
        let b = deployments_api.get("web-unit-b").await.ok()?;
        deployments_api.get("web-unit-a").await.ok().map(|_| b)
    })
    .await;
    assert_eq!(before.spec.as_ref().unwrap().replicas, Some(2), "unit-b: spec.template");

    // spec.template goes; unit-c appears with a templates entry
    let patch = json!({"spec": {"template": null, "templates": {"unit-c": "big"}}});
    grids.patch("web", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    node(&client, "n3", &[("zone1", "unit-c")]).await;
    let unit_c = eventually("unit-c reconciles", || async { deployments_api.get("web-unit-c").await.ok() }).await;
    assert_eq!(unit_c.spec.as_ref().unwrap().replicas, Some(5));
    let why = "unit-b: defaultTemplateName (unset: \"default\") means spec.template, which the grid does not have";
    let status = eventually("TemplatesResolved=False", || async {
        status_of(&client, "web").await.filter(|s| {
            condition(&s.conditions, GridConditionType::TemplatesResolved).is_some_and(|(st, ..)| st == "False")
                && s.units == 2
        })
    })
    .await;
    assert_eq!(
        condition(&status.conditions, GridConditionType::TemplatesResolved),
        Some(("False".into(), "TemplateNotFound".into(), why.into()))
    );
    assert_eq!(
        condition(&status.conditions, GridConditionType::Ready),
        Some(("False".into(), "TemplateNotFound".into(), why.into()))
    );
    assert_eq!(condition(&status.conditions, GridConditionType::Applied).unwrap().0, "True");
    assert_eq!(status.workloads, ["web-unit-a", "web-unit-c"]);
    let warning = eventually("TemplateNotFound event", || async {
        events_about(&client, "web").await.into_iter().find(|(_, reason, _)| reason == "TemplateNotFound")
    })
    .await;
    assert_eq!(
        warning,
        ("Warning".into(), "TemplateNotFound".into(), format!("units without a template get no workload: {why}"))
    );
    assert_eq!(raw(&deployments_api.get("web-unit-b").await.unwrap()), raw(&before), "kept byte-for-byte");

    // defaultTemplateName names a pool entry: unit-b takes it
    let patch = json!({"spec": {"defaultTemplateName": "big"}});
    grids.patch("web", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let resolved = eventually("unit-b resolved", || async {
        deployments_api.get("web-unit-b").await.ok().filter(|d| d.spec.as_ref().is_some_and(|s| s.replicas == Some(5)))
    })
    .await;
    assert_eq!(resolved.uid(), before.uid(), "updated in place");
    let status =
        eventually("TemplatesResolved=True", || async { status_of(&client, "web").await.filter(|s| s.units == 3) })
            .await;
    assert_eq!(
        condition(&status.conditions, GridConditionType::TemplatesResolved),
        Some(("True".into(), "AllTemplatesResolved".into(), String::new()))
    );
    let warnings: Vec<String> = events_about(&client, "web")
        .await
        .into_iter()
        .filter(|(kind, ..)| kind == "Warning")
        .map(|(_, reason, _)| reason)
        .collect();
    assert_eq!(warnings, ["TemplateNotFound"], "announced once");
    c.stop().await;
}
