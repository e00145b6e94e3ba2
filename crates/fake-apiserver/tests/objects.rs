//! Object verbs through unmodified kube-rs clients: exact objects, errors as a real
//! apiserver answers them.

mod common;

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy};
use serde_json::json;

#[tokio::test]
async fn create_get_replace_patch_delete() {
    let (_server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let created = api.create(&PostParams::default(), &config_map("cfg", &[("a", "1")])).await.unwrap();
    let meta = &created.metadata;
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    assert!(meta.uid.is_some() && meta.creation_timestamp.is_some());
    assert_eq!(meta.generation, Some(1));
    let first_rv = rv(meta);

    let got = api.get("cfg").await.unwrap();
    assert_eq!(got, created);

    let mut changed = got.clone();
    changed.data = Some([("a".to_string(), "2".to_string())].into());
    let replaced = api.replace("cfg", &PostParams::default(), &changed).await.unwrap();
    assert!(rv(&replaced.metadata) > first_rv);
    assert_eq!(replaced.metadata.uid, created.metadata.uid);
    assert_eq!(replaced.data, changed.data);

    // stale resourceVersion: 409 Conflict
    assert_eq!(status_of(api.replace("cfg", &PostParams::default(), &changed).await), (409, "Conflict".into()));

    let merged = api.patch("cfg", &PatchParams::default(), &Patch::Merge(json!({"data": {"b": "3"}}))).await.unwrap();
    assert_eq!(merged.data, Some([("a".into(), "2".into()), ("b".into(), "3".into())].into()));
    let ops: json_patch::Patch = serde_json::from_value(json!([{"op": "remove", "path": "/data/a"}])).unwrap();
    let patched = api.patch("cfg", &PatchParams::default(), &Patch::<()>::Json(ops)).await.unwrap();
    assert_eq!(patched.data, Some([("b".into(), "3".into())].into()));

    // a write that changes nothing bumps nothing
    let same = api.replace("cfg", &PostParams::default(), &patched).await.unwrap();
    assert_eq!(same.metadata.resource_version, patched.metadata.resource_version);

    let deleted = api.delete("cfg", &DeleteParams::default()).await.unwrap();
    assert_eq!(deleted.left().map(|c| c.metadata.name), Some(Some("cfg".to_string())));
    assert_eq!(status_of(api.get("cfg").await), (404, "NotFound".into()));
    assert_eq!(status_of(api.delete("cfg", &DeleteParams::default()).await), (404, "NotFound".into()));
}

#[tokio::test]
async fn errors_have_the_real_reasons_and_codes() {
    let (_server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &config_map("dup", &[])).await.unwrap();
    assert_eq!(
        status_of(api.create(&PostParams::default(), &config_map("dup", &[])).await),
        (409, "AlreadyExists".into())
    );
    for bad in ["Bad_Name", "-leading", "trailing-", "a..b", &"x".repeat(254)] {
        assert_eq!(
            status_of(api.create(&PostParams::default(), &config_map(bad, &[])).await),
            (422, "Invalid".into()),
            "{bad}"
        );
    }
    let missing_ns: Api<ConfigMap> = Api::namespaced(client.clone(), "nowhere");
    assert_eq!(
        status_of(missing_ns.create(&PostParams::default(), &config_map("x", &[])).await),
        (404, "NotFound".into())
    );
    // RBAC names follow the path-segment rule (colons are common), not DNS-1123
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    let role = serde_json::from_value(json!({"metadata": {"name": "system:edge:reader"}})).unwrap();
    assert!(roles.create(&PostParams::default(), &role).await.is_ok());
    let bad_role = serde_json::from_value(json!({"metadata": {"name": "a/b"}})).unwrap();
    assert_eq!(status_of(roles.create(&PostParams::default(), &bad_role).await), (422, "Invalid".into()));
    // generateName
    let mut generated = config_map("", &[]);
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("gen-".into());
    let made = api.create(&PostParams::default(), &generated).await.unwrap();
    let name = made.metadata.name.unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
    // delete preconditions
    let stale = Preconditions { resource_version: Some("1".into()), uid: None };
    let params = DeleteParams { preconditions: Some(stale), ..Default::default() };
    assert_eq!(status_of(api.delete("dup", &params).await), (409, "Conflict".into()));
}

#[tokio::test]
async fn malformed_bodies_get_status_objects() {
    let (server, client) = server().await;
    let url = format!("{}/api/v1/namespaces/default/configmaps", server.url());
    let send = |body: Vec<u8>| {
        let client = client.clone();
        let url = url.clone();
        async move {
            let request = http::Request::post(url).header("content-type", "application/json").body(body).unwrap();
            let response = client.send(request.map(kube::client::Body::from)).await.unwrap();
            let code = response.status().as_u16();
            let body = axum::body::to_bytes(axum::body::Body::new(response.into_body()), usize::MAX).await.unwrap();
            let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
            (code, status["reason"].as_str().unwrap_or_default().to_string(), status["code"].as_u64())
        }
    };
    assert_eq!(send(b"{not json".to_vec()).await, (400, "BadRequest".into(), Some(400)));
    let wrong_kind = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}});
    assert_eq!(send(wrong_kind.to_string().into_bytes()).await, (400, "BadRequest".into(), Some(400)));
    let wrong_version = json!({"apiVersion": "v2", "kind": "ConfigMap", "metadata": {"name": "x"}});
    assert_eq!(send(wrong_version.to_string().into_bytes()).await, (400, "BadRequest".into(), Some(400)));
    let protobuf = {
        let client = client.clone();
        let request = http::Request::post(url.clone())
            .header("content-type", "application/vnd.kubernetes.protobuf")
            .body(b"k8s\x00".to_vec())
            .unwrap();
        client.send(request.map(kube::client::Body::from)).await.unwrap().status().as_u16()
    };
    assert_eq!(protobuf, 415, "protobuf bodies are refused clearly, not parsed as bad JSON");
    let huge = json!({"metadata": {"name": "x"}, "data": {"a": "y".repeat(4 * 1024 * 1024)}});
    assert_eq!(send(huge.to_string().into_bytes()).await, (413, "RequestEntityTooLarge".into(), Some(413)));
}

#[tokio::test]
async fn status_subresource_and_generation() {
    let (_server, client) = server().await;
    let api: Api<Deployment> = Api::namespaced(client, "default");
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}},
        "status": {"replicas": 99}
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &deployment).await.unwrap();
    assert_eq!(created.status, None, "status is not settable on create");

    let with_status = api
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 1, "readyReplicas": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(with_status.status.as_ref().and_then(|s| s.ready_replicas), Some(1));
    assert_eq!(with_status.metadata.generation, Some(1), "status writes do not bump generation");

    let scaled = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}, "status": {"replicas": 7}})),
        )
        .await
        .unwrap();
    assert_eq!(scaled.metadata.generation, Some(2));
    assert_eq!(scaled.status.as_ref().and_then(|s| s.replicas), Some(1), "main resource writes ignore status");

    let applied = api
        .patch(
            "web",
            &PatchParams::apply("test").force(),
            &Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(applied.metadata.labels, Some([("x".to_string(), "y".to_string())].into()));
    assert_eq!(applied.spec.as_ref().and_then(|s| s.replicas), Some(3));
    // server-side apply creates what does not exist
    let fresh = api
        .patch("api", &PatchParams::apply("test"), &Patch::Apply(serde_json::to_value(&deployment).unwrap()))
        .await
        .unwrap();
    assert_eq!(fresh.metadata.name.as_deref(), Some("api"));
    let containers = json!({"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "image": "s"}]}}}});
    let merged = api.patch("web", &PatchParams::default(), &Patch::Strategic(containers)).await.unwrap();
    let names: Vec<String> =
        merged.spec.unwrap().template.spec.unwrap().containers.into_iter().map(|c| c.name).collect();
    assert_eq!(names, ["c", "sidecar"], "strategic merge keeps containers by name");
}

#[tokio::test]
async fn finalizers_and_garbage_collection() {
    let (_server, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    let mut guarded = config_map("guarded", &[]);
    guarded.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    maps.create(&PostParams::default(), &guarded).await.unwrap();
    let pending = maps.delete("guarded", &DeleteParams::default()).await.unwrap().left().unwrap();
    assert!(pending.metadata.deletion_timestamp.is_some());
    assert!(maps.get("guarded").await.unwrap().metadata.deletion_timestamp.is_some(), "kept until finalized");
    maps.patch("guarded", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .unwrap();
    assert_eq!(status_of(maps.get("guarded").await), (404, "NotFound".into()));

    let owner = maps.create(&PostParams::default(), &config_map("owner", &[])).await.unwrap();
    let owner_ref = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
        "uid": owner.metadata.uid.clone().unwrap(), "controller": true}]);
    for name in ["dep-1", "dep-2"] {
        let mut dependent = pod(name, &[]);
        dependent.metadata.owner_references = Some(serde_json::from_value(owner_ref.clone()).unwrap());
        pods.create(&PostParams::default(), &dependent).await.unwrap();
    }
    maps.delete("owner", &DeleteParams::background()).await.unwrap();
    assert!(pods.list(&ListParams::default()).await.unwrap().items.is_empty(), "dependents collected");

    let owner = maps.create(&PostParams::default(), &config_map("owner", &[])).await.unwrap();
    let mut orphan = pod("orphan", &[]);
    orphan.metadata.owner_references = Some(
        serde_json::from_value(json!([{"apiVersion": "v1", "kind": "ConfigMap",
        "name": "owner", "uid": owner.metadata.uid.clone().unwrap()}]))
        .unwrap(),
    );
    pods.create(&PostParams::default(), &orphan).await.unwrap();
    let params = DeleteParams { propagation_policy: Some(PropagationPolicy::Orphan), ..Default::default() };
    maps.delete("owner", &params).await.unwrap();
    let kept = pods.get("orphan").await.unwrap();
    assert_eq!(kept.metadata.owner_references, Some(vec![]), "orphaned: reference removed, pod kept");

    // deleting a namespace deletes what is in it
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap())
        .await
        .unwrap();
    let team: Api<ConfigMap> = Api::namespaced(client, "team");
    team.create(&PostParams::default(), &config_map("c", &[])).await.unwrap();
    namespaces.delete("team", &DeleteParams::default()).await.unwrap();
    assert_eq!(status_of(team.get("c").await), (404, "NotFound".into()));
}

/// What the garbage collector does to an object created after its owner was deleted (a
/// controller acting on a stale cache): with every owner gone it is deleted; with one of
/// several gone, that reference is dropped. The create itself succeeds, as on a real API
/// server (the collector runs afterwards).
#[tokio::test]
async fn an_object_created_for_a_deleted_owner_is_collected() {
    let (_server, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let reference = |owner: &ConfigMap| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "name": owner.metadata.name.clone().unwrap(),
            "uid": owner.metadata.uid.clone().unwrap()})
    };
    let gone = maps.create(&PostParams::default(), &config_map("gone", &[])).await.unwrap();
    maps.delete("gone", &DeleteParams::background()).await.unwrap();
    let kept = maps.create(&PostParams::default(), &config_map("kept", &[])).await.unwrap();

    let mut late = pod("late", &[]);
    late.metadata.owner_references = Some(serde_json::from_value(json!([reference(&gone)])).unwrap());
    pods.create(&PostParams::default(), &late).await.expect("the create succeeds");
    assert_eq!(status_of(pods.get("late").await), (404, "NotFound".into()), "collected: its only owner is gone");

    let mut shared = pod("shared", &[]);
    shared.metadata.owner_references =
        Some(serde_json::from_value(json!([reference(&gone), reference(&kept)])).unwrap());
    pods.create(&PostParams::default(), &shared).await.unwrap();
    let owners: Vec<String> =
        pods.get("shared").await.unwrap().metadata.owner_references.unwrap().into_iter().map(|o| o.name).collect();
    assert_eq!(owners, ["kept"], "the reference to the gone owner is dropped");
}

#[tokio::test]
async fn crds_are_served_after_creation() {
    use edgegrid_core::crd::{ServiceGrid, all_crds};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let (_server, client) = server().await;
    let grids: Api<ServiceGrid> = Api::namespaced(client.clone(), "default");
    assert_eq!(status_of(grids.list(&ListParams::default()).await), (404, "NotFound".into()));
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in all_crds() {
        let created = crds.create(&PostParams::default(), &crd).await.unwrap();
        let established =
            created.status.unwrap().conditions.unwrap().iter().any(|c| c.type_ == "Established" && c.status == "True");
        assert!(established);
    }
    let manifest: ServiceGrid = serde_json::from_value(json!({
        "apiVersion": "superedge.io/v1", "kind": "ServiceGrid", "metadata": {"name": "echo"},
        "spec": {"gridUniqKey": "zone1", "template": {"ports": [{"port": 80}]}}
    }))
    .unwrap();
    let created = grids.create(&PostParams::default(), &manifest).await.unwrap();
    assert_eq!(created.spec, manifest.spec);
    assert_eq!(grids.list(&ListParams::default()).await.unwrap().items, vec![created]);
    assert_eq!(
        status_of(grids.patch("echo", &PatchParams::default(), &Patch::Strategic(json!({"spec": {}}))).await),
        (415, "UnsupportedMediaType".into()),
        "no strategic merge for custom resources"
    );

    let discovery = kube::Discovery::new(client).run().await.unwrap();
    let group = discovery.get("superedge.io").expect("group discovered");
    let mut kinds: Vec<String> = group.recommended_resources().into_iter().map(|(r, _)| r.kind).collect();
    kinds.sort();
    assert_eq!(kinds, vec!["DeploymentGrid", "ServiceGrid", "StatefulSetGrid"]);

    // deleting the CRD deletes its objects and stops serving the resource
    crds.delete("servicegrids.superedge.io", &DeleteParams::default()).await.unwrap();
    assert_eq!(status_of(grids.list(&ListParams::default()).await), (404, "NotFound".into()));
}

#[tokio::test]
async fn delete_collection_by_selector() {
    let (_server, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    for (name, app) in [("a1", "a"), ("a2", "a"), ("b1", "b")] {
        pods.create(&PostParams::default(), &pod(name, &[("app", app)])).await.unwrap();
    }
    let deleted =
        pods.delete_collection(&DeleteParams::default(), &ListParams::default().labels("app=a")).await.unwrap();
    let names: Vec<String> = deleted.left().unwrap().items.into_iter().map(|p| p.metadata.name.unwrap()).collect();
    assert_eq!(names, ["a1", "a2"]);
    let left: Vec<String> =
        pods.list(&ListParams::default()).await.unwrap().items.into_iter().map(|p| p.metadata.name.unwrap()).collect();
    assert_eq!(left, ["b1"]);
}

#[tokio::test]
async fn in_process_client_without_a_socket() {
    use futures::StreamExt;
    let (router, store) = fake_apiserver::FakeApiServer::in_process(Default::default());
    let client = kube::Client::new(router, "default");
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let created = api.create(&PostParams::default(), &config_map("inproc", &[])).await.unwrap();
    assert_eq!(created.metadata.resource_version, Some(store.current_rv().to_string()));
    let mut events = kube::runtime::watcher(api.clone(), Default::default()).boxed();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        seen.push(
            format!("{:?}", within("in-process watch", events.next()).await.unwrap().unwrap())
                .chars()
                .take(9)
                .collect::<String>(),
        );
    }
    assert_eq!(seen, ["Init", "InitApply", "InitDone"]);
}

/// A uid in a write's body is a precondition, as on a real apiserver: a patch or update
/// meant for an object that was deleted and re-created under the same name fails with 409.
#[tokio::test]
async fn uid_in_the_body_is_a_precondition() {
    let (_server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let first = api.create(&PostParams::default(), &config_map("cm", &[("a", "1")])).await.unwrap();
    api.delete("cm", &DeleteParams::default()).await.unwrap();
    let second = api.create(&PostParams::default(), &config_map("cm", &[("a", "2")])).await.unwrap();
    assert_ne!(first.uid(), second.uid());
    let stale_uid = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm", "uid": first.uid().unwrap()}, "data": {"a": "3"}});
    let applied = api.patch("cm", &PatchParams::apply("test").force(), &Patch::Apply(&stale_uid)).await;
    assert_eq!(status_of(applied), (409, "Conflict".to_string()));
    let merged = api.patch("cm", &PatchParams::default(), &Patch::Merge(&stale_uid)).await;
    assert_eq!(status_of(merged), (409, "Conflict".to_string()));
    let current_uid = json!({"metadata": {"uid": second.uid().unwrap()}, "data": {"a": "4"}});
    let patched = api.patch("cm", &PatchParams::default(), &Patch::Merge(&current_uid)).await.unwrap();
    assert_eq!(patched.data.unwrap()["a"], "4");
}
