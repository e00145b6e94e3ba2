//! The shipped `grid-wrapper` started with SuperEdge's DaemonSet arguments, as an operator
//! who swapped SuperEdge's image for ours runs it: it starts, serves kube-proxy the node's
//! unit (its node named by SuperEdge's `--hostname`), rewrites an annotated
//! `default/kubernetes` by default (SuperEdge's `--wrapper-in-cluster` default) and not with
//! `--wrapper-in-cluster=false`, and logs each SuperEdge flag exactly once as deprecated. A
//! bad value of a SuperEdge flag is a usage error (exit 2) naming it.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use controller_support::legacy_flags::DEPRECATED;
use edgegrid_testing::{KubeconfigFile, RunningBinary, free_port, http_get, logged_values};
use k8s_openapi::api::core::v1::{Endpoints, Service};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use tokio::time::Instant;

/// SuperEdge's arguments, `deployment/application-grid-wrapper.yaml` lines 125-129
/// (v0.9.0), as shipped.
const SUPEREDGE_ARGS: [&str; 5] = [
    "--kubeconfig=/var/lib/application-grid-wrapper/kubeconfig.conf",
    "--bind-address=127.0.0.1:51006",
    "--hostname=$(NODE_NAME)",
    "--notify-channel-size=10000",
    "--support-endpointslice=true",
];
/// klog's flags, which SuperEdge's image took too (`-v` with one dash, as pflag allowed).
const KLOG_ARGS: [&str; 2] = ["-v=4", "--alsologtostderr"];
/// The SuperEdge flags among them, each to be logged once.
const DEPRECATED_FLAGS: [&str; 5] =
    ["--alsologtostderr", "--hostname", "--notify-channel-size", "--support-endpointslice", "--v"];
const PROMPT_EXIT: Duration = Duration::from_secs(5);

/// `arg` (`--name=value`) with its value replaced, the flag's name and syntax kept.
fn substituted(arg: &str, value: &str) -> String {
    let (name, _) = arg.split_once('=').expect("--name=value");
    format!("{name}={value}")
}

struct Wrapper {
    binary: RunningBinary,
    api: SocketAddr,
}

/// SuperEdge's arguments with only what this machine needs substituted: the kubeconfig
/// (the fake apiserver's, not the node's path), the port (a free one: tests run in
/// parallel) and `$(NODE_NAME)` (which the kubelet expands) as node `n1`; plus our
/// `--metrics-bind-address` on a free port (its default, 51007, may be taken), and `extra`.
fn start(kubeconfig: &KubeconfigFile, extra: &[&str]) -> Wrapper {
    let api: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let mut args: Vec<String> = SUPEREDGE_ARGS
        .iter()
        .map(|arg| match arg.split_once('=').map(|(name, _)| name) {
            Some("--kubeconfig") => substituted(arg, &kubeconfig.arg()),
            Some("--bind-address") => substituted(arg, &api.to_string()),
            Some("--hostname") => substituted(arg, "n1"),
            _ => arg.to_string(),
        })
        .collect();
    args.extend(KLOG_ARGS.map(String::from));
    args.push(format!("--metrics-bind-address=127.0.0.1:{}", free_port()));
    args.extend(extra.iter().map(|a| a.to_string()));
    let binary = RunningBinary::start(env!("CARGO_BIN_EXE_grid-wrapper"), &args).expect("the binary starts");
    Wrapper { binary, api }
}

impl Wrapper {
    async fn until_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while http_get(self.api, "/readyz").await != Some((200, "ok".into())) {
            self.binary.assert_running();
            assert!(Instant::now() < deadline, "/readyz never answered 200");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The addresses of `default/kubernetes` as served (kube-proxy lists every namespace).
    async fn apiserver_addresses(&self) -> Vec<String> {
        let endpoints: Api<Endpoints> = Api::all(client_for(&format!("http://{}", self.api)));
        let listed = endpoints.list(&ListParams::default()).await.expect("list endpoints").items;
        let kubernetes = listed
            .iter()
            .find(|e| {
                e.metadata.namespace.as_deref() == Some("default") && e.metadata.name.as_deref() == Some("kubernetes")
            })
            .expect("default/kubernetes served");
        value_ips(kubernetes)
    }
}

/// The apiserver's own Endpoints, announcing an edge-local cache at 169.254.20.11:6443.
async fn annotated_apiserver_endpoints(upstream: &kube::Client) {
    let endpoints: Endpoints = serde_json::from_value(json!({
        "metadata": {"name": "kubernetes", "namespace": "default", "annotations": {
            "superedge.io/local-endpoint": "169.254.20.11", "superedge.io/local-port": "6443"}},
        "subsets": [{"addresses": [{"ip": "10.0.0.100"}], "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}],
    }))
    .expect("endpoints");
    Api::namespaced(upstream.clone(), "default").create(&PostParams::default(), &endpoints).await.expect("create");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn superedge_daemonset_arguments_start_and_serve_the_unit() {
    let (server, upstream) = two_unit_cluster().await;
    annotated_apiserver_endpoints(&upstream).await;
    let kubeconfig = KubeconfigFile::new(&server.url()).expect("kubeconfig");
    let mut wrapper = start(&kubeconfig, &[]);
    wrapper.until_ready().await;

    // kube-proxy's requests: the Services, and the slices of n1's unit (a) only
    let client = client_for(&format!("http://{}", wrapper.api));
    let services: Api<Service> = Api::all(client.clone());
    let mut names: Vec<String> = services
        .list(&ListParams::default())
        .await
        .expect("list services")
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    names.sort();
    assert_eq!(names, ["plain", "web"]);
    assert_eq!(
        listed_slices(&client).await,
        named_ips(&[("plain-1", &["10.0.0.5"]), ("web-1", &["10.0.0.1"]), ("web-2", &["10.0.0.2"])]),
        "--hostname named the node: unit a's endpoints"
    );
    // SuperEdge's --wrapper-in-cluster default (true): the local cache is served
    assert_eq!(wrapper.apiserver_addresses().await, ["169.254.20.11"]);

    let exit = wrapper.binary.terminate(PROMPT_EXIT).await.expect("exits after SIGTERM");
    assert_eq!(exit.status.code(), Some(0), "{}", exit.logs);
    let mut logged = logged_values(&exit.logs, DEPRECATED, "flag");
    logged.sort();
    assert_eq!(logged, DEPRECATED_FLAGS, "one line per SuperEdge flag given:\n{}", exit.logs);
    // -v=4: debug lines are on (RUST_LOG is not set here)
    assert!(exit.logs.contains(" DEBUG "), "{}", exit.logs);

    // turned off: served as the upstream lists it
    let mut off = start(&kubeconfig, &["--wrapper-in-cluster=false"]);
    off.until_ready().await;
    assert_eq!(off.apiserver_addresses().await, ["10.0.0.100"]);
    let exit = off.binary.terminate(PROMPT_EXIT).await.expect("exits after SIGTERM");
    assert_eq!(exit.status.code(), Some(0), "{}", exit.logs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_superedge_value_is_a_usage_error_naming_the_flag() {
    let kubeconfig = KubeconfigFile::new(&edgegrid_testing::unreachable_url()).expect("kubeconfig");
    let wrapper = start(&kubeconfig, &["--notify-channel-size=x"]);
    let exit = wrapper.binary.wait(PROMPT_EXIT).await.expect("exits at once");
    assert_eq!(exit.status.code(), Some(2), "{}", exit.logs);
    assert!(exit.logs.contains(r#"invalid value "x" for --notify-channel-size: not a whole number"#), "{}", exit.logs);
}
