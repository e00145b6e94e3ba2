//! kube-runtime machinery against the fake: reflector, Controller with `owns`,
//! the finalizer helper and the event Recorder.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Secret};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::{reflector, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

#[tokio::test]
async fn reflector_mirrors_the_server() {
    let (_server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &config_map("a", &[])).await.unwrap();
    let (reader, writer) = reflector::store::<ConfigMap>();
    let driver =
        tokio::spawn(reflector(writer, watcher(api.clone(), watcher::Config::default())).for_each(|_| async {}));
    within("initial sync", reader.wait_until_ready()).await.unwrap();
    api.create(&PostParams::default(), &config_map("b", &[("k", "v")])).await.unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let expected = api.list(&ListParams::default()).await.unwrap().items;
    within("store converges", async {
        loop {
            let mut state: Vec<ConfigMap> = reader.state().iter().map(|o| (**o).clone()).collect();
            state.sort_by_key(|o| o.name_any());
            if state == expected {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    driver.abort();
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct ReconcileError(#[from] kube::Error);

struct Ctx {
    client: kube::Client,
    calls: mpsc::UnboundedSender<String>,
}

/// Keeps one Secret per parent ConfigMap, owned by it, carrying the parent's data.
async fn reconcile_child(parent: Arc<ConfigMap>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let _ = ctx.calls.send(parent.name_any());
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), "default");
    let owner = parent.controller_owner_ref(&()).expect("parent has a uid");
    let child = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{}-child", parent.name_any())),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        string_data: None,
        data: Some(
            parent
                .data
                .clone()
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, k8s_openapi::ByteString(v.into_bytes())))
                .collect(),
        ),
        ..Default::default()
    };
    secrets.patch(&child.name_any(), &PatchParams::apply("test-controller").force(), &Patch::Apply(&child)).await?;
    Ok(Action::await_change())
}

#[tokio::test]
async fn controller_with_owned_children() {
    let (_server, client) = server().await;
    let parents: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let (calls, mut seen) = mpsc::unbounded_channel();
    let ctx = Arc::new(Ctx { client: client.clone(), calls });
    let controller = tokio::spawn(
        Controller::new(parents.clone(), watcher::Config::default())
            .owns(secrets.clone(), watcher::Config::default())
            .run(reconcile_child, |_, _, _| Action::requeue(Duration::from_secs(1)), ctx)
            .for_each(|_| async {}),
    );
    let parent = parents.create(&PostParams::default(), &config_map("parent", &[("k", "v")])).await.unwrap();
    assert_eq!(within("first reconcile", seen.recv()).await.as_deref(), Some("parent"));
    let child = within("child created", async {
        loop {
            if let Ok(child) = secrets.get("parent-child").await {
                break child;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let owner = &child.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.controller), ("ConfigMap", "parent", Some(true)));
    assert_eq!(owner.uid, parent.metadata.uid.clone().unwrap());
    assert_eq!(child.data.unwrap()["k"].0, b"v");

    // drain, then touch the child: `owns` maps it back to its parent
    tokio::time::sleep(Duration::from_millis(200)).await;
    while seen.try_recv().is_ok() {}
    secrets
        .patch(
            "parent-child",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .await
        .unwrap();
    assert_eq!(within("reconcile after child change", seen.recv()).await.as_deref(), Some("parent"));

    parents.delete("parent", &DeleteParams::background()).await.unwrap();
    assert_eq!(status_of(secrets.get("parent-child").await), (404, "NotFound".into()), "collected with its owner");
    controller.abort();
}

#[tokio::test]
async fn finalizer_helper_runs_cleanup_before_deletion() {
    const FINALIZER: &str = "example.com/cleanup";
    let (_server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let (calls, mut seen) = mpsc::unbounded_channel::<String>();
    let reconcile = move |obj: Arc<ConfigMap>, api: Arc<(Api<ConfigMap>, mpsc::UnboundedSender<String>)>| async move {
        let (api, calls) = (&api.0, api.1.clone());
        finalizer(api, FINALIZER, obj, |event| async move {
            let _ = calls.send(match event {
                FinalizerEvent::Apply(o) => format!("apply {}", o.name_any()),
                FinalizerEvent::Cleanup(o) => format!("cleanup {}", o.name_any()),
            });
            Ok::<_, ReconcileError>(Action::await_change())
        })
        .await
    };
    let controller = tokio::spawn(
        Controller::new(api.clone(), watcher::Config::default())
            .run(reconcile, |_, _, _| Action::requeue(Duration::from_millis(100)), Arc::new((api.clone(), calls)))
            .for_each(|_| async {}),
    );
    api.create(&PostParams::default(), &config_map("guarded", &[])).await.unwrap();
    assert_eq!(within("apply", seen.recv()).await.as_deref(), Some("apply guarded"));
    assert_eq!(api.get("guarded").await.unwrap().finalizers(), [FINALIZER.to_string()]);
    api.delete("guarded", &DeleteParams::default()).await.unwrap();
    let mut after_delete = within("cleanup", seen.recv()).await.unwrap();
    while after_delete.starts_with("apply") {
        after_delete = within("cleanup", seen.recv()).await.unwrap();
    }
    assert_eq!(after_delete, "cleanup guarded");
    within("object gone", async {
        while api.get("guarded").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(status_of(api.get("guarded").await), (404, "NotFound".into()));
    controller.abort();
}

#[tokio::test]
async fn recorder_creates_then_counts_events() {
    let (_server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let target = api.create(&PostParams::default(), &config_map("target", &[])).await.unwrap();
    let reference: ObjectReference = target.object_ref(&());
    let reporter = Reporter { controller: "test-controller".into(), instance: Some("pod-1".into()) };
    let recorder = Recorder::new(client.clone(), reporter);
    let event = Event {
        type_: EventType::Warning,
        reason: "UnitNameInvalid".into(),
        note: Some("unit value Bad_Value skipped".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    recorder.publish(&event, &reference).await.unwrap();
    recorder.publish(&event, &reference).await.unwrap();
    let events: Api<K8sEvent> = Api::namespaced(client, "default");
    let listed = events.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(listed.len(), 1, "the repeat is a series on the same Event");
    let e = &listed[0];
    assert_eq!(
        (e.type_.as_deref(), e.reason.as_deref(), e.note.as_deref(), e.action.as_deref()),
        (Some("Warning"), Some("UnitNameInvalid"), Some("unit value Bad_Value skipped"), Some("Reconcile"))
    );
    assert_eq!(e.reporting_controller.as_deref(), Some("test-controller"));
    assert_eq!(e.regarding.as_ref().and_then(|r| r.name.as_deref()), Some("target"));
    assert_eq!(e.series.as_ref().map(|s| s.count), Some(2));
}
