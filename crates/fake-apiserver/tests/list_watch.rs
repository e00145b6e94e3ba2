//! List and watch through unmodified kube-rs clients: selectors, consistent pagination,
//! `kube_runtime::watcher` in both list modes, resume, 410 and bookmarks.

mod common;

use std::time::Duration;

use common::*;
use fake_apiserver::ServerConfig;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher::{self, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;

fn names<K: Resource>(items: &[K]) -> Vec<String> {
    items.iter().map(|o| o.meta().name.clone().unwrap_or_default()).collect()
}

#[tokio::test]
async fn selectors_and_consistent_pagination() {
    let (server, client) = server().await;
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    for (name, labels) in [
        ("p0", vec![("app", "a"), ("tier", "front")]),
        ("p1", vec![("app", "b")]),
        ("p2", vec![("app", "c"), ("tier", "back")]),
        ("p3", vec![("app", "a")]),
        ("p4", vec![]),
    ] {
        api.create(&PostParams::default(), &pod(name, &labels)).await.unwrap();
    }
    let select = |selector: &str| {
        let api = api.clone();
        let params = ListParams::default().labels(selector);
        async move { names(&api.list(&params).await.unwrap().items) }
    };
    assert_eq!(select("app=a").await, ["p0", "p3"]);
    assert_eq!(select("app in (a,b)").await, ["p0", "p1", "p3"]);
    assert_eq!(select("app notin (a)").await, ["p1", "p2", "p4"]);
    assert_eq!(select("!tier").await, ["p1", "p3", "p4"]);
    assert_eq!(select("tier,app!=c").await, ["p0"]);
    assert_eq!(names(&api.list(&ListParams::default().fields("metadata.name=p2")).await.unwrap().items), ["p2"]);
    assert_eq!(status_of(api.list(&ListParams::default().labels("app in a")).await), (400, "BadRequest".into()));

    // pages come from one snapshot even while objects change between them
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(names(&first.items), ["p0", "p1"]);
    assert_eq!(first.metadata.remaining_item_count, Some(3));
    api.create(&PostParams::default(), &pod("p00", &[])).await.unwrap();
    api.delete("p3", &DeleteParams::default()).await.unwrap();
    let token = first.metadata.continue_.clone().unwrap();
    let second = api.list(&ListParams::default().limit(2).continue_token(&token)).await.unwrap();
    assert_eq!(names(&second.items), ["p2", "p3"]);
    assert_eq!(second.metadata.resource_version, first.metadata.resource_version);
    let third = api
        .list(&ListParams::default().limit(2).continue_token(second.metadata.continue_.as_ref().unwrap()))
        .await
        .unwrap();
    assert_eq!(names(&third.items), ["p4"]);
    assert_eq!(third.metadata.continue_, None);
    // resourceVersion=0 is served whole, limit ignored (kube-proxy's fallback LIST sends
    // `limit=500&resourceVersion=0`; kube-rs itself drops rv=0 when a limit is set)
    let url = format!("{}/api/v1/namespaces/default/pods?limit=2&resourceVersion=0", server.url());
    let list: k8s_openapi::List<Pod> = client.request(http::Request::get(url).body(Vec::new()).unwrap()).await.unwrap();
    assert_eq!(names(&list.items), ["p0", "p00", "p1", "p2", "p4"]);
    assert_eq!(list.metadata.continue_, None);
    // a continue token older than the history: 410 Expired
    server.compact_history();
    api.create(&PostParams::default(), &pod("p5", &[])).await.unwrap();
    assert_eq!(
        status_of(api.list(&ListParams::default().limit(2).continue_token(&token)).await),
        (410, "Expired".into())
    );
}

async fn watcher_sees_exact_sequence(config: watcher::Config) {
    let (_server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &config_map("a", &[])).await.unwrap();
    api.create(&PostParams::default(), &config_map("b", &[])).await.unwrap();
    let mut stream = watcher(api.clone(), config).boxed();
    assert_eq!(watcher_events(&mut stream, 4).await, ["Init", "InitApply a", "InitApply b", "InitDone"]);
    api.create(&PostParams::default(), &config_map("c", &[])).await.unwrap();
    api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "v"}}))).await.unwrap();
    api.delete("b", &DeleteParams::default()).await.unwrap();
    assert_eq!(watcher_events(&mut stream, 3).await, ["Apply c {}", r#"Apply a {"k": "v"}"#, "Delete b"]);
}

#[tokio::test]
async fn watcher_list_then_watch() {
    watcher_sees_exact_sequence(watcher::Config::default()).await;
}

#[tokio::test]
async fn watcher_streaming_list() {
    watcher_sees_exact_sequence(watcher::Config::default().streaming_lists()).await;
}

#[tokio::test]
async fn watcher_relists_after_history_is_lost() {
    let (server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &config_map("a", &[])).await.unwrap();
    let mut stream = watcher(api.clone(), watcher::Config::default()).boxed();
    assert_eq!(watcher_events(&mut stream, 3).await, ["Init", "InitApply a", "InitDone"]);
    // The watch is cut, a change happens, then history is compacted past the watcher's
    // version (the watcher is not polled meanwhile, so it cannot resume early): its
    // resume gets 410 and it relists.
    server.drop_watches();
    api.create(&PostParams::default(), &config_map("b", &[])).await.unwrap();
    server.compact_history();
    api.create(&PostParams::default(), &config_map("c", &[])).await.unwrap();
    let events = watcher_events(&mut stream, 6).await;
    assert!(events[0].starts_with("Error") && events[0].contains("Expired"), "{events:?}");
    assert_eq!(events[1..], ["Init", "InitApply a", "InitApply b", "InitApply c", "InitDone"]);
}

#[tokio::test]
async fn raw_watch_resumes_exactly_once_and_expires() {
    let (server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let start = rv(&api.create(&PostParams::default(), &config_map("a", &[])).await.unwrap().metadata);
    let mut stream = api.watch(&WatchParams::default(), &start.to_string()).await.unwrap().boxed();
    api.create(&PostParams::default(), &config_map("b", &[])).await.unwrap();
    let mut last = match within("first event", stream.try_next()).await.unwrap() {
        Some(WatchEvent::Added(o)) => {
            assert_eq!(o.name_any(), "b");
            o.resource_version().unwrap()
        }
        other => panic!("expected ADDED b, got {other:?}"),
    };
    server.drop_watches();
    assert!(within("stream end", stream.try_next()).await.unwrap().is_none(), "stream closed by the server");
    // changes while disconnected
    api.create(&PostParams::default(), &config_map("c", &[])).await.unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let mut resumed = api.watch(&WatchParams::default(), &last).await.unwrap().boxed();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        match within("resumed event", resumed.try_next()).await.unwrap() {
            Some(WatchEvent::Added(o)) => seen.push(format!("ADDED {}", o.name_any())),
            Some(WatchEvent::Deleted(o)) => {
                last = o.resource_version().unwrap();
                seen.push(format!("DELETED {}", o.name_any()))
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen, ["ADDED c", "DELETED a"]);
    assert_eq!(last.parse::<u64>().unwrap(), server.store().current_rv());
    server.compact_history();
    let mut expired = api.watch(&WatchParams::default(), &start.to_string()).await.unwrap().boxed();
    match within("expired", expired.try_next()).await.unwrap() {
        Some(WatchEvent::Error(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"))
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
}

#[tokio::test]
async fn objects_entering_and_leaving_a_selector() {
    let (_server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut web = config_map("x", &[]);
    web.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
    let created = api.create(&PostParams::default(), &web).await.unwrap();
    let mut stream = api
        .watch(&WatchParams::default().labels("app=web"), &created.resource_version().unwrap())
        .await
        .unwrap()
        .boxed();
    let relabel = |app: &'static str| {
        let api = api.clone();
        async move {
            api.patch("x", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"app": app}}})))
                .await
                .unwrap()
        }
    };
    let out = relabel("api").await;
    api.patch("x", &PatchParams::default(), &Patch::Merge(json!({"data": {"while": "outside"}}))).await.unwrap();
    relabel("web").await;
    let mut events = Vec::new();
    while events.len() < 2 {
        match within("selector event", stream.try_next()).await.unwrap() {
            Some(WatchEvent::Deleted(o)) => {
                // previous content, the change's version
                assert_eq!(o.labels()["app"], "web");
                assert_eq!(o.resource_version(), out.resource_version());
                events.push("DELETED".to_string());
            }
            Some(WatchEvent::Added(o)) => {
                assert_eq!(o.data.unwrap()["while"], "outside");
                events.push("ADDED".to_string());
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(events, ["DELETED", "ADDED"]);
}

#[tokio::test]
async fn bookmarks_and_streaming_list_validation() {
    let config = ServerConfig { bookmark_interval: Duration::from_millis(100), ..Default::default() };
    let (server, client) = server_with(config).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let created = api.create(&PostParams::default(), &config_map("a", &[])).await.unwrap();
    let mut stream = api.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    match within("initial", stream.try_next()).await.unwrap() {
        Some(WatchEvent::Added(o)) => assert_eq!(o, created),
        other => panic!("{other:?}"),
    }
    match within("bookmark", stream.try_next()).await.unwrap() {
        Some(WatchEvent::Bookmark(b)) => {
            assert_eq!(b.metadata.resource_version, server.store().current_rv().to_string())
        }
        other => panic!("expected a bookmark, got {other:?}"),
    }
    // streaming list without resourceVersionMatch=NotOlderThan is refused with 422
    let url = format!(
        "{}/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&allowWatchBookmarks=true",
        server.url()
    );
    let response = client.send(http::Request::get(url).body(kube::client::Body::empty()).unwrap()).await.unwrap();
    assert_eq!(response.status().as_u16(), 422);
}

#[tokio::test]
async fn watch_ends_after_timeout_seconds() {
    let (_server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut stream = api.watch(&WatchParams::default().timeout(1), "0").await.unwrap().boxed();
    // no objects and no bookmark due within a second: the stream simply ends at the timeout
    assert!(within("watch timeout", stream.try_next()).await.unwrap().is_none());
}

/// `metadata_watcher` (Accept `as=PartialObjectMetadata[List]`) gets metadata only, in
/// both the list and the watch, so a metadata informer never carries specs or status.
#[tokio::test]
async fn metadata_only_list_and_watch() {
    let (server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &config_map("before", &[("big", "payload")])).await.unwrap();
    let listed = api.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(names(&listed.items), ["before"]);
    let raw = client
        .request_text(
            http::Request::get("/api/v1/namespaces/default/configmaps")
                .header("Accept", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    let raw: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(
        (raw["kind"].as_str(), raw["apiVersion"].as_str()),
        (Some("PartialObjectMetadataList"), Some("meta.k8s.io/v1"))
    );
    assert_eq!(raw["items"][0]["kind"], "PartialObjectMetadata");
    assert_eq!(raw["items"][0].get("data"), None, "no data in a metadata-only list");

    let metadata: Api<kube::core::PartialObjectMeta<ConfigMap>> = Api::namespaced(client.clone(), "default");
    let mut events = watcher(metadata, watcher::Config::default()).boxed();
    let mut seen = Vec::new();
    while let Some(event) = events.try_next().await.unwrap() {
        if let watcher::Event::InitDone = event {
            break;
        }
        if let watcher::Event::InitApply(o) = event {
            seen.push(o.name_any());
        }
    }
    api.patch("before", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})))
        .await
        .unwrap();
    let changed = loop {
        if let Some(watcher::Event::Apply(o)) = events.try_next().await.unwrap() {
            break o;
        }
    };
    assert_eq!(seen, ["before"]);
    assert_eq!(changed.labels()["x"], "y");
    assert_eq!(changed.types.as_ref().map(|t| t.kind.as_str()), Some("PartialObjectMetadata"));
    drop(server);
}
