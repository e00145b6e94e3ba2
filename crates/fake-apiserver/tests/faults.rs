//! Fault injection: errors, hangs, latency, dropped watches, restarts with and without
//! history, through the Rust API and the reserved HTTP endpoints.

mod common;

use std::time::{Duration, Instant};

use common::*;
use fake_apiserver::Fault;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::watcher;

#[tokio::test]
async fn injected_errors_hangs_and_latency() {
    let (server, client) = server().await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    server.set_fault("configmaps", Fault::Error(500));
    assert_eq!(status_of(maps.list(&ListParams::default()).await), (500, "InternalError".into()));
    assert!(pods.list(&ListParams::default()).await.is_ok(), "other resources unaffected");
    server.set_fault("*", Fault::Error(409));
    assert_eq!(status_of(pods.list(&ListParams::default()).await), (409, "Conflict".into()));
    server.clear_faults();
    assert!(maps.list(&ListParams::default()).await.is_ok());

    // 503 is transient to kube-rs: its default retry policy keeps asking until it passes
    server.set_fault("configmaps", Fault::Error(503));
    let retried = tokio::spawn({
        let maps = maps.clone();
        async move { maps.list(&ListParams::default()).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!retried.is_finished(), "still retrying the 503s");
    server.clear_faults();
    assert!(within("retried request", retried).await.unwrap().is_ok());

    server.set_fault("configmaps", Fault::Hang);
    let pending = tokio::spawn({
        let maps = maps.clone();
        async move { maps.create(&PostParams::default(), &config_map("late", &[])).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!pending.is_finished(), "a hung request is not answered");
    server.clear_faults();
    let created = within("released request", pending).await.unwrap().unwrap();
    assert_eq!(created.name_any(), "late");

    server.set_fault("configmaps", Fault::LatencyMs(150));
    let started = Instant::now();
    maps.get("late").await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(150), "answered only after the injected latency");
}

#[tokio::test]
async fn control_endpoints_over_http() {
    let (server, client) = server().await;
    let base = format!("{}/fake-apiserver", server.url());
    let request = |method: &str, path: &str, body: &str| {
        http::Request::builder().method(method).uri(format!("{base}{path}")).body(body.as_bytes().to_vec()).unwrap()
    };
    let listed = client.request_text(request("PUT", "/faults/pods", r#"{"error":500}"#)).await.unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&listed).unwrap(),
        serde_json::json!({"pods": {"error": 500}})
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    assert_eq!(status_of(pods.list(&ListParams::default()).await), (500, "InternalError".into()));
    let bad = client.request_text(request("PUT", "/faults/pods", r#"{"explode":1}"#)).await;
    assert_eq!(status_of(bad), (400, "BadRequest".into()));
    client.request_text(request("DELETE", "/faults", "")).await.unwrap();
    assert!(pods.list(&ListParams::default()).await.is_ok());
    let compacted = client.request_text(request("POST", "/compact", "")).await.unwrap();
    assert!(compacted.contains("compactedTo"));
    client.request_text(request("POST", "/drop-watches", "")).await.unwrap();
}

/// The non-error events of a watcher until `n` of them arrived, and how many errors.
async fn next_events<S>(stream: &mut S, n: usize) -> (Vec<String>, usize)
where
    S: futures::Stream<Item = Result<watcher::Event<ConfigMap>, watcher::Error>> + Unpin,
{
    let (mut events, mut errors) = (Vec::new(), 0);
    while events.len() < n {
        let event = watcher_events(stream, 1).await.remove(0);
        if event.starts_with("Error") { errors += 1 } else { events.push(event) }
    }
    (events, errors)
}

#[tokio::test]
async fn restart_keeps_objects_and_resumable_watches() {
    let (server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &config_map("a", &[])).await.unwrap();
    let mut stream = watcher(api.clone(), watcher::Config::default()).boxed();
    assert_eq!(next_events(&mut stream, 3).await.0, ["Init", "InitApply a", "InitDone"]);

    let server = within("restart", server.restart(false)).await.unwrap();
    api.create(&PostParams::default(), &config_map("b", &[])).await.unwrap();
    let (events, _) = next_events(&mut stream, 1).await;
    assert_eq!(events, ["Apply b {}"], "resumed from its version: no relist, nothing missed or repeated");

    // A change the watcher has not seen (its watch is cut, it is not polled), then a
    // restart that loses history past its version: resuming is impossible, it relists.
    // (History lost exactly at the watcher's version would not force a relist.)
    server.drop_watches();
    api.create(&PostParams::default(), &config_map("c", &[])).await.unwrap();
    let server = within("restart", server.restart(true)).await.unwrap();
    let (events, errors) = next_events(&mut stream, 5).await;
    assert_eq!(events, ["Init", "InitApply a", "InitApply b", "InitApply c", "InitDone"]);
    assert!(errors >= 1, "the lost history surfaced as an error before the relist");
    assert_eq!(api.list(&ListParams::default()).await.unwrap().items.len(), 3);
    server.stop().await;
}

/// A restart in two halves, for a fault that lasts: while down, a request finds no server
/// at all (no HTTP answer, unlike a 503); the objects written before are there after, and
/// a second `go_down` or `come_back` changes nothing.
#[tokio::test]
async fn a_server_gone_down_refuses_connections_and_comes_back_with_its_objects() {
    let (mut server, client) = server().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &config_map("kept", &[])).await.unwrap();
    within("go down", server.go_down()).await;
    within("go down again", server.go_down()).await;
    match api.list(&ListParams::default()).await {
        Err(kube::Error::HyperError(_) | kube::Error::Service(_)) => {}
        other => panic!("expected no connection while down, got {other:?}"),
    }
    within("come back", server.come_back(false)).await.unwrap();
    within("come back again", server.come_back(false)).await.unwrap();
    let names: Vec<String> =
        api.list(&ListParams::default()).await.unwrap().items.into_iter().map(|c| c.name_any()).collect();
    assert_eq!(names, ["kept"]);
    server.stop().await;
}
