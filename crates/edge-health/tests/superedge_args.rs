//! The shipped `edge-health` started with SuperEdge's DaemonSet arguments, as an operator
//! who swapped SuperEdge's image for ours runs it (plus the HMAC key Secret the migration
//! adds; SuperEdge read its key from a ConfigMap): it makes its signing key in its state
//! directory (0600), starts, becomes ready, publishes its address and that key's public
//! half on its Node, answers its node's `/verdicts`, and logs each SuperEdge flag exactly
//! once as deprecated. SuperEdge's kubelet check (5 s timeout, 3 attempts) does not fit its 10 s
//! check period here: the translated period holds it (25 s), so the daemon does not refuse
//! SuperEdge's own manifest. A bad value of a SuperEdge flag is a usage error (exit 2).

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use controller_support::legacy_flags::DEPRECATED;
use edgegrid_core::keys::{EDGE_HEALTH_ADDRESS_ANNOTATION, EDGE_HEALTH_PUBLIC_KEY_ANNOTATION, NODE_UNIT_LABEL_VALUE};
use edgegrid_testing::{KubeconfigFile, RunningBinary, TempDir, http_get, logged_values};
use fake_apiserver::FakeApiServer;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio::time::Instant;

/// SuperEdge's arguments, `deployment/edge-health.yaml` lines 76-77 (v0.9.0), as shipped.
const SUPEREDGE_ARGS: [&str; 2] = ["--kubeletauthplugin=timeout=5,retrytime=3,weight=1,port=10250", "--v=2"];
/// klog's flag SuperEdge's image took too (the manifest gave `--v` only).
const KLOG_ARGS: [&str; 1] = ["--alsologtostderr"];
const DEPRECATED_FLAGS: [&str; 3] = ["--alsologtostderr", "--kubeletauthplugin", "--v"];
const PROMPT_EXIT: Duration = Duration::from_secs(5);
/// The period SuperEdge's flags translate to: its 10 s check period plus the 15 s its
/// kubelet check can take.
const PERIOD: Duration = Duration::from_secs(25);
const NODE: &str = "edge-1";
const KEY: &[u8] = b"a unit key of at least thirty-two bytes, for tests only";

struct Daemon {
    binary: RunningBinary,
    address: SocketAddr,
}

/// SuperEdge's arguments, then what this machine and the migration need: the fake
/// apiserver's kubeconfig (SuperEdge's pod used its service account), the node's name and
/// address (the DaemonSet's downward-API `NODE_NAME`, and the `POD_IP` docs/migrating-from-superedge.md asks to
/// add to SuperEdge's DaemonSet, which has none, given as flags: the test process's
/// environment is shared), a loopback address and free ports instead of
/// SuperEdge's `:51005` (tests run in parallel), a state directory of the test's own
/// instead of `/var/lib/edge-health`, and the unit's HMAC key Secret (SuperEdge read a
/// key from a ConfigMap). No signing key file: SuperEdge's DaemonSet names none.
fn start(kubeconfig: &KubeconfigFile, dir: &TempDir, extra: &[&str]) -> Daemon {
    let ip = [127, 0, 0, 91];
    let address = SocketAddr::from((ip, edgegrid_testing::free_port()));
    let metrics = SocketAddr::from((ip, edgegrid_testing::free_port()));
    let mut args: Vec<String> = SUPEREDGE_ARGS.iter().chain(&KLOG_ARGS).map(|a| a.to_string()).collect();
    args.extend([
        format!("--kubeconfig={}", kubeconfig.arg()),
        format!("--node-name={NODE}"),
        format!("--advertise-address={}", address.ip()),
        format!("--bind-address={address}"),
        format!("--metrics-bind-address={metrics}"),
        format!("--hmac-key-file={}", dir.join("key").display()),
        format!("--state-dir={}", dir.join("state").display()),
    ]);
    args.extend(extra.iter().map(|a| a.to_string()));
    let binary = RunningBinary::start(env!("CARGO_BIN_EXE_edge-health"), &args).expect("the binary starts");
    Daemon { binary, address }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn superedge_daemonset_arguments_start_publish_and_serve() {
    let server = FakeApiServer::start().await.expect("fake apiserver");
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().expect("url"))).expect("client");
    let nodes: Api<Node> = Api::all(client);
    // a SuperEdge node unit: `<unit>=nodeunits.superedge.io`
    let node: Node =
        serde_json::from_value(json!({"metadata": {"name": NODE, "labels": {"unit-a": NODE_UNIT_LABEL_VALUE}}}))
            .expect("node");
    nodes.create(&PostParams::default(), &node).await.expect("create node");
    let kubeconfig = KubeconfigFile::new(&server.url()).expect("kubeconfig");
    let dir = TempDir::new("edge-health-superedge-args").expect("temp dir");
    std::fs::write(dir.join("key"), KEY).expect("key");
    let mut daemon = start(&kubeconfig, &dir, &[]);

    let deadline = Instant::now() + Duration::from_secs(15);
    while http_get(daemon.address, "/readyz").await != Some((200, "ok".into())) {
        daemon.binary.assert_running();
        assert!(Instant::now() < deadline, "/readyz never answered 200");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // re-asserted at each period's start: within one period (25 s) of the Node being known
    let deadline = Instant::now() + PERIOD + Duration::from_secs(10);
    let published = loop {
        let annotations = nodes.get(NODE).await.expect("get node").metadata.annotations.unwrap_or_default();
        if let Some(address) = annotations.get(EDGE_HEALTH_ADDRESS_ANNOTATION) {
            break address.clone();
        }
        daemon.binary.assert_running();
        assert!(Instant::now() < deadline, "the address was never published");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(published, daemon.address.to_string());
    // the key made in the state directory, the owner's only, and published as its Node's
    let key_file = dir.join("state").join("signing-key");
    let mode = std::fs::metadata(&key_file).expect("the signing key was made").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{}", key_file.display());
    let key = edge_health::node_key::SigningKey::from_pkcs8(&std::fs::read(&key_file).expect("read")).expect("a key");
    let annotations = nodes.get(NODE).await.expect("get node").metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get(EDGE_HEALTH_PUBLIC_KEY_ANNOTATION),
        Some(&key.public_key().to_annotation()),
        "the made key is the one published"
    );
    // what the node's grid wrapper reads (SuperEdge's /localinfo)
    let (status, body) = http_get(daemon.address, "/verdicts").await.expect("/verdicts answers");
    assert_eq!(status, 200, "{body}");
    let verdicts: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert!(verdicts.is_object(), "{body}");

    let exit = daemon.binary.terminate(PROMPT_EXIT).await.expect("exits after SIGTERM");
    assert_eq!(exit.status.code(), Some(0), "{}", exit.logs);
    let mut logged = logged_values(&exit.logs, DEPRECATED, "flag");
    logged.sort();
    assert_eq!(logged, DEPRECATED_FLAGS, "one line per SuperEdge flag given:\n{}", exit.logs);
    // the check SuperEdge's flag describes, with the period that holds it
    let replacements = logged_values(&exit.logs, DEPRECATED, "replacement");
    assert!(
        replacements.contains(&"--check=kind=kubelet,port=10250,timeout=5s,retries=2,weight=100".to_string()),
        "{}",
        exit.logs
    );
    assert!(exit.logs.contains(&format!("period={PERIOD:?}")), "{}", exit.logs);
    // where the key is, said once
    let generated: Vec<&str> =
        exit.logs.lines().filter(|line| line.contains("no signing key: generated one")).collect();
    assert_eq!(generated.len(), 1, "{}", exit.logs);
    assert!(generated[0].contains(&key_file.display().to_string()), "{}", generated[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_superedge_value_is_a_usage_error_naming_the_flag() {
    let kubeconfig = KubeconfigFile::new(&edgegrid_testing::unreachable_url()).expect("kubeconfig");
    let dir = TempDir::new("edge-health-superedge-bad").expect("temp dir");
    let daemon = start(&kubeconfig, &dir, &["--healthcheckperiod=x"]);
    let exit = daemon.binary.wait(PROMPT_EXIT).await.expect("exits at once");
    assert_eq!(exit.status.code(), Some(2), "{}", exit.logs);
    assert!(exit.logs.contains(r#"invalid value "x" for --healthcheckperiod: not a whole number"#), "{}", exit.logs);
}
