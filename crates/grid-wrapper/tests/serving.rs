//! fake apiserver -> grid-wrapper -> unmodified kube-rs clients, over HTTP on 127.0.0.1:
//! per-unit views, exact event sequences for each kind of topology change, and the
//! list/watch protocol (list then watch, streaming lists, resume, 410 and relist).

mod common;

use common::*;
use futures::{StreamExt, TryStreamExt};
use grid_wrapper::WrapperConfig;
use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;

async fn reflected_slices(client: kube::Client, config: watcher::Config) -> Vec<(String, Vec<String>)> {
    let (reader, writer) = reflector::store::<EndpointSlice>();
    let stream = reflector(writer, watcher(Api::<EndpointSlice>::all(client), config)).applied_objects();
    let task = tokio::spawn(stream.for_each(|_| futures::future::ready(())));
    within("the reflector to sync", reader.wait_until_ready()).await.expect("reflector alive");
    let state: Vec<EndpointSlice> = reader.state().iter().map(|s| (**s).clone()).collect();
    task.abort();
    slice_ips(&state)
}

fn owned(pairs: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
    pairs.iter().map(|(n, ips)| (n.to_string(), ips.iter().map(|s| s.to_string()).collect())).collect()
}

#[tokio::test]
async fn each_units_wrapper_serves_only_its_units_endpoints_in_both_list_modes() {
    let (server, _upstream) = two_unit_cluster().await;
    let unit_a = RunningWrapper::start(&server.url(), config("n1")).await;
    let unit_b = RunningWrapper::start(&server.url(), config("n3")).await;
    for mode in [watcher::Config::default(), watcher::Config::default().streaming_lists()] {
        assert_eq!(
            reflected_slices(unit_a.client.clone(), mode.clone()).await,
            owned(&[("plain-1", &["10.0.0.5"]), ("web-1", &["10.0.0.1"]), ("web-2", &["10.0.0.2"])])
        );
        assert_eq!(
            reflected_slices(unit_b.client.clone(), mode).await,
            owned(&[("plain-1", &["10.0.0.5"]), ("web-1", &["10.0.0.3"]), ("web-2", &[])]),
            "a slice left with no endpoints is served empty, not deleted"
        );
    }
    let endpoints: Api<Endpoints> = Api::namespaced(unit_b.client.clone(), "ns");
    assert_eq!(value_ips(&endpoints.get("web").await.expect("served")), vec!["10.0.0.3"]);
    // Services and the local Node are served whole
    let services: Api<Service> = Api::all(unit_b.client.clone());
    let mut names: Vec<String> = services
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    names.sort();
    assert_eq!(names, vec!["plain", "web"]);
    let nodes: Api<Node> = Api::all(unit_b.client.clone());
    assert_eq!(nodes.get("n3").await.expect("local node").metadata.labels.expect("labels")["unit"], "b");
    let only_local = nodes.list(&ListParams::default().fields("metadata.name=n3")).await.expect("list");
    assert_eq!(only_local.items.len(), 1);
}

async fn label(client: &kube::Client, node: &str, unit: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    let patch = json!({"metadata": {"labels": {"unit": unit}}});
    nodes.patch(node, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("relabel");
}

async fn topology_keys(client: &kube::Client, service: &str, keys: &str) {
    let services: Api<Service> = Api::namespaced(client.clone(), "ns");
    let patch = json!({"metadata": {"annotations": {"topologyKeys": keys}}});
    services.patch(service, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("annotate");
}

#[tokio::test]
async fn topology_changes_produce_exactly_the_expected_modified_events() {
    let (server, upstream) = two_unit_cluster().await;
    let wrapper = RunningWrapper::start(&server.url(), config("n1")).await;
    let slices: Api<EndpointSlice> = Api::all(wrapper.client.clone());
    let list = slices.list(&ListParams::default()).await.expect("list");
    let rv = list.metadata.resource_version.expect("list version");
    let mut events = slices.watch(&WatchParams::default(), &rv).await.expect("watch").boxed();

    label(&upstream, "n3", "a").await;
    assert_eq!(next_events(&mut events, 1).await, vec![event("MODIFIED", "web-1", &["10.0.0.1", "10.0.0.3"])]);
    no_more_events(&mut events).await;

    label(&upstream, "n1", "b").await;
    let mut got = next_events(&mut events, 2).await;
    got.sort();
    assert_eq!(got, vec![event("MODIFIED", "web-1", &["10.0.0.1"]), event("MODIFIED", "web-2", &[])]);
    no_more_events(&mut events).await;

    topology_keys(&upstream, "web", r#"["zone"]"#).await;
    assert_eq!(next_events(&mut events, 1).await, vec![event("MODIFIED", "web-1", &[])]);
    topology_keys(&upstream, "web", r#"["unit"]"#).await;
    assert_eq!(next_events(&mut events, 1).await, vec![event("MODIFIED", "web-1", &["10.0.0.1"])]);
    no_more_events(&mut events).await;

    let nodes: Api<Node> = Api::all(upstream.clone());
    nodes.delete("n3", &Default::default()).await.expect("delete remote node");
    no_more_events(&mut events).await;
    nodes.delete("n1", &Default::default()).await.expect("delete local node");
    assert_eq!(next_events(&mut events, 1).await, vec![event("MODIFIED", "web-1", &[])]);
    no_more_events(&mut events).await;
}

#[tokio::test]
async fn resume_after_disconnect_and_relist_after_expiry() {
    let (server, upstream) = two_unit_cluster().await;
    let mut small_history: WrapperConfig = config("n1");
    small_history.log.history_limit = 3;
    let wrapper = RunningWrapper::start(&server.url(), small_history).await;
    let slices: Api<EndpointSlice> = Api::all(wrapper.client.clone());
    let rv = slices.list(&ListParams::default()).await.expect("list").metadata.resource_version.expect("rv");

    // one change, seen, then the client goes away
    let mut events = slices.watch(&WatchParams::default(), &rv).await.expect("watch").boxed();
    label(&upstream, "n3", "a").await;
    let first = within("first event", events.try_next()).await.expect("ok").expect("open");
    let WatchEvent::Modified(seen) = first else { panic!("expected MODIFIED, got {first:?}") };
    drop(events);
    let resume_from = seen.metadata.resource_version.expect("rv");

    // a change while disconnected is delivered exactly once on resume
    label(&upstream, "n2", "b").await;
    let mut resumed = slices.watch(&WatchParams::default(), &resume_from).await.expect("watch").boxed();
    assert_eq!(next_events(&mut resumed, 1).await, vec![event("MODIFIED", "web-2", &[])]);
    no_more_events(&mut resumed).await;
    drop(resumed);

    // more changes than the history holds: resuming the list version is 410
    for unit in ["b", "a", "b", "a"] {
        label(&upstream, "n2", unit).await;
    }
    eventually("the changes to be served", || async {
        let list = slices.list(&ListParams::default()).await.ok()?;
        let web2 = list.items.iter().find(|s| s.metadata.name.as_deref() == Some("web-2"))?;
        (value_ips(web2) == vec!["10.0.0.2"]).then_some(())
    })
    .await;
    let mut expired = slices.watch(&WatchParams::default(), &rv).await.expect("watch").boxed();
    match within("410", expired.try_next()).await {
        Ok(Some(WatchEvent::Error(status))) => assert_eq!((status.code, status.reason.as_str()), (410, "Expired")),
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    // and a kube-rs watcher started from that state recovers by relisting
    assert_eq!(
        reflected_slices(wrapper.client.clone(), watcher::Config::default()).await,
        owned(&[("plain-1", &["10.0.0.5"]), ("web-1", &["10.0.0.1", "10.0.0.3"]), ("web-2", &["10.0.0.2"])])
    );
}

#[tokio::test]
async fn debug_topology_says_which_endpoints_are_kept_and_why() {
    let (server, _upstream) = two_unit_cluster().await;
    let wrapper = RunningWrapper::start(&server.url(), config("n1")).await;
    let (status, body) =
        edgegrid_testing::http_get(wrapper.addr, "/debug/topology?service=ns/web").await.expect("answered");
    assert_eq!(status, 200, "{body}");
    let explanation = json(&body);
    assert_eq!(explanation["localNodeValues"], serde_json::json!({"unit": "a"}));
    let web1 = explanation["objects"]
        .as_array()
        .expect("objects")
        .iter()
        .find(|o| o["name"] == "web-1")
        .expect("web-1 explained")
        .clone();
    let decisions: Vec<(String, bool, String)> = web1["endpoints"]
        .as_array()
        .expect("endpoints")
        .iter()
        .map(|e| {
            (
                e["addresses"][0].as_str().unwrap_or_default().to_string(),
                e["kept"] == true,
                e["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        decisions,
        vec![
            ("10.0.0.1".into(), true, "kept: node n1 has unit=a like the local node".into()),
            ("10.0.0.3".into(), false, "dropped: node n3 has unit=b, local node has unit=a".into()),
        ]
    );
    let (status, body) = edgegrid_testing::http_get(wrapper.addr, "/debug/topology").await.expect("answered");
    assert_eq!((status, json(&body)["reason"].clone()), (400, serde_json::json!("BadRequest")));
}
