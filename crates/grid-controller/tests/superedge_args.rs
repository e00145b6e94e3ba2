//! The shipped `grid-controller` started with SuperEdge's Deployment arguments, as an
//! operator who swapped SuperEdge's image for ours runs it: it starts, leads, becomes
//! ready, makes the Service of a ServiceGrid, and logs each SuperEdge flag exactly once as
//! deprecated. A bad value of a SuperEdge flag is a usage error (exit 2) naming it.

use std::net::SocketAddr;
use std::time::Duration;

use controller_support::legacy_flags::DEPRECATED;
use edgegrid_core::crd::{ServiceGrid, all_crds};
use edgegrid_testing::{KubeconfigFile, RunningBinary, free_port, http_get, logged_values};
use fake_apiserver::FakeApiServer;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio::time::Instant;

/// SuperEdge's arguments, `deployment/application-grid-controller.yaml` line 89 (v0.9.0).
const SUPEREDGE_ARGS: [&str; 1] = ["--feature-gates=EndpointSlice=true"];
/// klog's flags, which SuperEdge's image took too.
const KLOG_ARGS: [&str; 2] = ["--v=2", "--alsologtostderr"];
const DEPRECATED_FLAGS: [&str; 3] = ["--alsologtostderr", "--feature-gates", "--v"];
const PROMPT_EXIT: Duration = Duration::from_secs(5);

struct Controller {
    binary: RunningBinary,
    admin: SocketAddr,
}

/// SuperEdge's arguments, then what this machine needs: the fake apiserver's kubeconfig
/// (SuperEdge's pod used its service account) and a free port for our admin listener
/// (default :8081 and :8080; tests run in parallel).
fn start(kubeconfig: &KubeconfigFile, extra: &[&str]) -> Controller {
    let admin: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let mut args: Vec<String> = SUPEREDGE_ARGS.iter().chain(&KLOG_ARGS).map(|a| a.to_string()).collect();
    args.extend([
        format!("--kubeconfig={}", kubeconfig.arg()),
        format!("--bind-address={admin}"),
        format!("--metrics-bind-address={admin}"),
    ]);
    args.extend(extra.iter().map(|a| a.to_string()));
    let binary = RunningBinary::start(env!("CARGO_BIN_EXE_grid-controller"), &args).expect("the binary starts");
    Controller { binary, admin }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn superedge_deployment_arguments_start_and_reconcile() {
    let server = FakeApiServer::start().await.expect("fake apiserver");
    let client = Client::try_from(kube::Config::new(server.url().parse().expect("url"))).expect("client");
    for crd in all_crds() {
        Api::<CustomResourceDefinition>::all(client.clone()).create(&PostParams::default(), &crd).await.expect("crd");
    }
    let kubeconfig = KubeconfigFile::new(&server.url()).expect("kubeconfig");
    let mut controller = start(&kubeconfig, &[]);

    let deadline = Instant::now() + Duration::from_secs(20);
    while http_get(controller.admin, "/readyz").await != Some((200, "ok".into())) {
        controller.binary.assert_running();
        assert!(Instant::now() < deadline, "/readyz never answered 200");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let grid: ServiceGrid = serde_json::from_value(json!({
        "apiVersion": "superedge.io/v1", "kind": "ServiceGrid", "metadata": {"name": "web"},
        "spec": {"gridUniqKey": "zone1", "template": {"ports": [{"port": 8080}]}}
    }))
    .expect("grid");
    Api::<ServiceGrid>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &grid)
        .await
        .expect("grid");
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let service = loop {
        if let Some(service) = services.get_opt("web-svc").await.expect("get") {
            break service;
        }
        controller.binary.assert_running();
        assert!(Instant::now() < deadline, "web-svc not created in time");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(service.metadata.annotations.unwrap_or_default()["topologyKeys"], r#"["zone1"]"#);

    let exit = controller.binary.terminate(PROMPT_EXIT).await.expect("exits after SIGTERM");
    assert_eq!(exit.status.code(), Some(0), "{}", exit.logs);
    let mut logged = logged_values(&exit.logs, DEPRECATED, "flag");
    logged.sort();
    assert_eq!(logged, DEPRECATED_FLAGS, "one line per SuperEdge flag given:\n{}", exit.logs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_superedge_value_is_a_usage_error_naming_the_flag() {
    let kubeconfig = KubeconfigFile::new(&edgegrid_testing::unreachable_url()).expect("kubeconfig");
    let controller = start(&kubeconfig, &["--feature-gates=EndpointSlice=maybe"]);
    let exit = controller.binary.wait(PROMPT_EXIT).await.expect("exits at once");
    assert_eq!(exit.status.code(), Some(2), "{}", exit.logs);
    assert!(
        exit.logs.contains(r#"invalid value "EndpointSlice=maybe" for --feature-gates: not key=true|false pairs"#),
        "{}",
        exit.logs
    );
}
