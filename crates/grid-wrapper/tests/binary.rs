//! The shipped `grid-wrapper` binary over HTTP: it serves the pruned view once synced,
//! exposes its metrics, saves the view and exits 0 on SIGTERM with a watch open; started
//! again while its API server is down it serves the saved view (not ready, and saying
//! so); a view saved for another cluster is not served, and is replaced once the new
//! cluster's view is synced; with nothing saved it refuses list and watch with 503 rather
//! than answering empty.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use edgegrid_testing::{KubeconfigFile, RunningBinary, http_get, sample};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

/// Every state this binary can be in stops within this after SIGTERM.
const PROMPT_EXIT: Duration = Duration::from_secs(5);

struct Instance {
    binary: RunningBinary,
    /// `--bind-address`: the served API, /healthz, /readyz.
    api: SocketAddr,
    /// `--metrics-bind-address`.
    metrics: SocketAddr,
}

fn start(kubeconfig: &KubeconfigFile, cache_dir: Option<&Path>) -> Instance {
    let (api, metrics) = (edgegrid_testing::free_port(), edgegrid_testing::free_port());
    let mut args: Vec<String> = vec!["--kubeconfig".into(), kubeconfig.arg()];
    args.extend(["--bind-address".into(), format!("127.0.0.1:{api}")]);
    args.extend(["--metrics-bind-address".into(), format!("127.0.0.1:{metrics}")]);
    args.extend(["--node-name".into(), "n1".into(), "--cache-sync-period".into(), "200ms".into()]);
    if let Some(dir) = cache_dir {
        args.extend(["--cache-dir".into(), dir.display().to_string()]);
    }
    let binary = RunningBinary::start(env!("CARGO_BIN_EXE_grid-wrapper"), &args).expect("the binary starts");
    Instance { binary, api: ([127, 0, 0, 1], api).into(), metrics: ([127, 0, 0, 1], metrics).into() }
}

impl Instance {
    fn client(&self) -> kube::Client {
        client_for(&format!("http://{}", self.api))
    }

    /// Polls `/readyz` until `accept` takes its answer.
    async fn until_readyz(&mut self, what: &str, accept: impl Fn(u16, &str) -> bool) -> (u16, String) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some((code, body)) = http_get(self.api, "/readyz").await
                && accept(code, &body)
            {
                return (code, body);
            }
            self.binary.assert_running();
            assert!(Instant::now() < deadline, "/readyz never showed {what}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn metrics(&self) -> String {
        http_get(self.metrics, "/metrics").await.expect("/metrics answers").1
    }
}

/// A fresh directory under the system's temporary one, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("grid-wrapper-binary-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the cache dir");
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The served slices, whole, without the wrapper's own resourceVersions (a restored view
/// is re-versioned by the process serving it).
async fn served_slices(client: &kube::Client) -> Vec<Value> {
    let slices: Api<EndpointSlice> = Api::all(client.clone());
    let mut items: Vec<Value> = slices
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .map(|slice| {
            let mut value = serde_json::to_value(slice).expect("json");
            value["metadata"].as_object_mut().expect("metadata").remove("resourceVersion");
            value
        })
        .collect();
    items.sort_by_key(|v| v["metadata"]["name"].as_str().unwrap_or_default().to_string());
    items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_saves_its_view_on_sigterm_and_serves_it_again_without_its_api_server() {
    let (server, upstream) = two_unit_cluster().await;
    let kubeconfig = KubeconfigFile::new(&server.url()).expect("kubeconfig");
    let cache = TempDir::new("restore");
    let mut first = start(&kubeconfig, Some(&cache.0));
    first.until_readyz("ok", |code, body| (code, body) == (200, "ok")).await;
    let client = first.client();
    assert_eq!(
        listed_slices(&client).await,
        named_ips(&[("plain-1", &["10.0.0.5"]), ("web-1", &["10.0.0.1"]), ("web-2", &["10.0.0.2"])])
    );
    let exposition = first.metrics().await;
    for (name, value) in [
        ("grid_wrapper_cached_objects{kind=\"endpointslices\"}", "3"),
        ("grid_wrapper_cached_objects{kind=\"services\"}", "2"),
        ("grid_wrapper_cached_objects{kind=\"endpoints\"}", "1"),
        ("grid_wrapper_cached_objects{kind=\"nodes\"}", "1"),
        ("grid_wrapper_upstream_synced{stream=\"endpointslices\"}", "1"),
        ("grid_wrapper_serving_restored", "0"),
    ] {
        assert_eq!(sample(&exposition, name), Some(value), "{name} in\n{exposition}");
    }
    // /debug/topology is on the metrics listener too (where a pod proxy reaches a
    // hostNetwork pod whose API port is loopback-only), and says the same as on the API port
    let on_api = http_get(first.api, "/debug/topology?service=ns/web").await.expect("answered");
    let on_metrics = http_get(first.metrics, "/debug/topology?service=ns/web").await.expect("answered");
    assert_eq!(on_api.0, 200, "{}", on_api.1);
    assert_eq!(on_metrics, on_api);
    assert_eq!(
        http_get(first.metrics, "/api/v1/services").await.map(|(code, _)| code),
        Some(404),
        "only the debug view"
    );

    // a change served just before SIGTERM is in the saved view
    relabel(&upstream, "n3", "a").await;
    let served =
        named_ips(&[("plain-1", &["10.0.0.5"]), ("web-1", &["10.0.0.1", "10.0.0.3"]), ("web-2", &["10.0.0.2"])]);
    eventually("the relabel to be served", || async { (listed_slices(&client).await == served).then_some(()) }).await;
    let at_exit = served_slices(&client).await;

    // SIGTERM with a downstream watch open: the wrapper ends the watch itself (a complete
    // chunked body, not a connection cut when the process goes) and exits 0 promptly
    let slices: Api<EndpointSlice> = Api::all(client.clone());
    let rv = slices.list(&ListParams::default()).await.expect("list").metadata.resource_version.expect("rv");
    let mut watch = tokio::net::TcpStream::connect(first.api).await.expect("connect");
    let request = format!(
        "GET /apis/discovery.k8s.io/v1/endpointslices?watch=true&resourceVersion={rv} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        first.api
    );
    watch.write_all(request.as_bytes()).await.expect("send the watch request");
    let watching = "grid_wrapper_watchers{kind=\"endpointslices\"}";
    eventually("the watch to be open", || async {
        (sample(&first.metrics().await, watching) == Some("1")).then_some(())
    })
    .await;
    let watch_end = tokio::spawn(async move {
        let mut raw = Vec::new();
        let _ = watch.read_to_end(&mut raw).await;
        raw
    });
    let exit = first.binary.terminate(PROMPT_EXIT).await.expect("exits after SIGTERM");
    assert_eq!(exit.status.code(), Some(0), "{}", exit.logs);
    let raw = within("the open watch to end", watch_end).await.expect("watch task");
    let response = String::from_utf8_lossy(&raw);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.ends_with("\r\n0\r\n\r\n"), "the watch was cut, not ended: {response:?}");
    let saved = std::fs::read(cache.0.join(grid_wrapper::persist::FILE_NAME)).expect("the view is saved");

    // again, with its API server down (the same cluster, its URL not answering): the
    // saved view, exactly, and not ready
    server.stop().await;
    let mut second = start(&kubeconfig, Some(&cache.0));
    // (waiting for the upstream until the restored view is served, at start)
    let (_, readyz) = second
        .until_readyz("the restored view", |code, body| {
            code == 503 && body.starts_with("not ready: serving the view saved at ")
        })
        .await;
    assert!(readyz.contains(&cache.0.display().to_string()) && readyz.contains("has not synced"), "{readyz}");
    assert_eq!(sample(&second.metrics().await, "grid_wrapper_serving_restored"), Some("1"));
    let client = second.client();
    assert_eq!(listed_slices(&client).await, served);
    assert_eq!(served_slices(&client).await, at_exit, "the restored slices are the saved ones, whole");
    let exit = second.binary.terminate(PROMPT_EXIT).await.expect("exits after SIGTERM");
    assert_eq!(exit.status.code(), Some(0), "{}", exit.logs);
    assert_eq!(
        std::fs::read(cache.0.join(grid_wrapper::persist::FILE_NAME)).expect("still there"),
        saved,
        "a restored view never overwrites the saved one"
    );
}

/// A node whose saved view came from cluster A, now started against cluster B while B's
/// API server does not answer yet (a node re-joined elsewhere, a disk image copied from
/// another cluster's node): A's view is not served (503 as with nothing saved), the
/// refusal is logged once naming both clusters and counted, the file stays until B's
/// synced view replaces it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_saved_for_another_cluster_is_not_served_and_the_next_save_replaces_it() {
    let cache = TempDir::new("other-cluster");
    let saved_view = cache.0.join(grid_wrapper::persist::FILE_NAME);
    let (a, _) = two_unit_cluster().await;
    let a_url = a.url();
    let a_kubeconfig = KubeconfigFile::new(&a_url).expect("kubeconfig");
    let mut first = start(&a_kubeconfig, Some(&cache.0));
    first.until_readyz("ok", |code, body| (code, body) == (200, "ok")).await;
    let exit = first.binary.terminate(PROMPT_EXIT).await.expect("exits after SIGTERM");
    assert_eq!(exit.status.code(), Some(0), "{}", exit.logs);
    let saved_by_a = std::fs::read(&saved_view).expect("the view is saved");
    a.stop().await;

    let (b, _) = two_unit_cluster().await;
    b.set_fault("*", fake_apiserver::Fault::Error(503));
    let b_kubeconfig = KubeconfigFile::new(&b.url()).expect("kubeconfig");
    let mut second = start(&b_kubeconfig, Some(&cache.0));
    let unsynced = "not ready: the upstream API server has not synced yet";
    second.until_readyz(unsynced, |code, body| (code, body) == (503, unsynced)).await;
    let exposition = second.metrics().await;
    for (name, value) in [
        (r#"grid_wrapper_saved_view_refused_total{reason="other_cluster"}"#, "1"),
        ("grid_wrapper_serving_restored", "0"),
    ] {
        assert_eq!(sample(&exposition, name), Some(value), "{name} in\n{exposition}");
    }
    let slices = raw_get(second.api, "/apis/discovery.k8s.io/v1/endpointslices").await.expect("answers");
    assert_eq!(slices.status, 503, "cluster A's view is not served: {slices:?}");
    assert_eq!(std::fs::read(&saved_view).expect("still there"), saved_by_a, "kept, not deleted");

    // B answers: its view is served, and saved over A's
    b.clear_faults();
    second.until_readyz("ok", |code, body| (code, body) == (200, "ok")).await;
    let b_server = format!("{}/", b.url());
    eventually("cluster B's view saved", || async {
        let saved: Value = serde_json::from_slice(&std::fs::read(&saved_view).ok()?).ok()?;
        (saved["cluster"]["server"] == b_server.as_str()).then_some(())
    })
    .await;
    let exit = second.binary.terminate(PROMPT_EXIT).await.expect("exits after SIGTERM");
    assert_eq!(exit.status.code(), Some(0), "{}", exit.logs);
    let refusals: Vec<&str> = exit.logs.lines().filter(|line| line.contains("was saved for another cluster")).collect();
    assert_eq!(refusals.len(), 1, "logged once:\n{}", exit.logs);
    assert!(refusals[0].contains(&format!("{a_url}/")) && refusals[0].contains(&b_server), "{}", refusals[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_nothing_saved_and_no_api_server_list_and_watch_are_refused_never_empty() {
    let gone = KubeconfigFile::new(&edgegrid_testing::unreachable_url()).expect("kubeconfig");
    let mut instance = start(&gone, None);
    let unsynced = "not ready: the upstream API server has not synced yet";
    instance.until_readyz(unsynced, |code, body| (code, body) == (503, unsynced)).await;
    for path in [
        "/apis/discovery.k8s.io/v1/endpointslices",
        "/apis/discovery.k8s.io/v1/endpointslices?watch=true",
        "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices?watch=true&resourceVersion=0",
        "/api/v1/services",
    ] {
        let response = raw_get(instance.api, path).await.unwrap_or_else(|| panic!("{path} answers"));
        assert_eq!(response.status, 503, "{path}: {response:?}");
        assert_eq!(response.header("retry-after"), Some("1"), "{path}: {response:?}");
        let status = json(&response.body);
        assert_eq!(
            (status["kind"].as_str(), status["code"].as_u64(), status["reason"].as_str()),
            (Some("Status"), Some(503), Some("ServiceUnavailable")),
            "{path}: {status}"
        );
    }
    // what it passes through has nowhere to go
    let version = raw_get(instance.api, "/version").await.expect("/version answers");
    assert_eq!(version.status, 502, "{version:?}");
    assert_eq!(json(&version.body)["code"], 502);
    let exit = instance.binary.terminate(PROMPT_EXIT).await.expect("exits after SIGTERM");
    assert_eq!(exit.status.code(), Some(0), "{}", exit.logs);
}
