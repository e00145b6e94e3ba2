//! The shipped `edge-health-admission` started with SuperEdge's Deployment arguments, as an
//! operator who swapped SuperEdge's image for ours runs it: it serves HTTPS with the
//! certificate SuperEdge's flags name, becomes ready, keeps the NoExecute taint off an
//! unreachable node its unit's edge-health watches when the API server calls it, and logs
//! each SuperEdge flag exactly once as deprecated. A bad value of a SuperEdge flag is a
//! usage error (exit 2) naming it.

use std::net::SocketAddr;
use std::time::Duration;

use controller_support::legacy_flags::DEPRECATED;
use edge_health_admission::configuration::{Endpoint, mutating_webhook_configuration};
use edgegrid_core::keys::{EDGE_HEALTH_ADDRESS_ANNOTATION, NODE_UNIT_LABEL_VALUE};
use edgegrid_testing::tls::{TestCa, https_get};
use edgegrid_testing::{KubeconfigFile, RunningBinary, TempDir, free_port, logged_values};
use fake_apiserver::FakeApiServer;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::time::Instant;

/// SuperEdge's arguments, `deployment/edge-health-admission.yaml` lines 69-72 (v0.9.0).
const SUPEREDGE_ARGS: [&str; 4] = [
    "--alsologtostderr",
    "--v=4",
    "--admission-control-server-cert=/etc/edge-health-admission/certs/server.crt",
    "--admission-control-server-key=/etc/edge-health-admission/certs/server.key",
];
/// Sorted (SuperEdge's `adminssion` typo sorts first).
const DEPRECATED_FLAGS: [&str; 5] = [
    "--adminssion-control-listen-addr",
    "--admission-control-server-cert",
    "--admission-control-server-key",
    "--alsologtostderr",
    "--v",
];
const PROMPT_EXIT: Duration = Duration::from_secs(5);

/// `arg` (`--name=value`) with its value replaced, the flag's name and syntax kept.
fn substituted(arg: &str, value: &str) -> String {
    let (name, _) = arg.split_once('=').expect("--name=value");
    format!("{name}={value}")
}

struct Webhook {
    binary: RunningBinary,
    addr: SocketAddr,
}

/// SuperEdge's arguments with the certificate paths pointing at this test's files; then
/// what this machine needs: the fake apiserver's kubeconfig (SuperEdge's pod used its
/// service account), and free ports for SuperEdge's listen address (its flag, with Go's
/// single dash; default `:8443`) and our metrics listener (default `:8080`): tests run in
/// parallel.
fn start(kubeconfig: &KubeconfigFile, dir: &TempDir, extra: &[&str]) -> Webhook {
    let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let mut args: Vec<String> = SUPEREDGE_ARGS
        .iter()
        .map(|arg| match arg.split_once('=').map(|(name, _)| name) {
            Some("--admission-control-server-cert") => substituted(arg, &dir.join("server.crt").display().to_string()),
            Some("--admission-control-server-key") => substituted(arg, &dir.join("server.key").display().to_string()),
            _ => arg.to_string(),
        })
        .collect();
    args.extend([
        format!("-adminssion-control-listen-addr={addr}"),
        format!("--kubeconfig={}", kubeconfig.arg()),
        format!("--metrics-bind-address=127.0.0.1:{}", free_port()),
    ]);
    args.extend(extra.iter().map(|a| a.to_string()));
    let binary = RunningBinary::start(env!("CARGO_BIN_EXE_edge-health-admission"), &args).expect("starts");
    Webhook { binary, addr }
}

fn client(server: &FakeApiServer) -> Client {
    Client::try_from(kube::Config::new(server.url().parse().expect("url"))).expect("client")
}

/// A Ready node of SuperEdge node unit `unit-a` whose edge-health daemon runs.
fn node(name: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"unit-a": NODE_UNIT_LABEL_VALUE},
            "annotations": {EDGE_HEALTH_ADDRESS_ANNOTATION: "10.0.0.1:51005"}},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
            "lastHeartbeatTime": "2026-11-22T09:00:00Z", "lastTransitionTime": "2026-11-22T08:00:00Z"}]},
    }))
    .expect("node")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn superedge_deployment_arguments_serve_the_webhook_over_tls() {
    let server = FakeApiServer::start().await.expect("bind");
    let nodes: Api<Node> = Api::all(client(&server));
    for name in ["alive", "peer"] {
        nodes.create(&PostParams::default(), &node(name)).await.expect("node");
    }
    let ca = TestCa::new("superedge-webhook-ca");
    let dir = TempDir::new("edge-health-admission-superedge").expect("temp dir");
    let cert = ca.server_cert(1);
    std::fs::write(dir.join("server.crt"), &cert.cert_pem).expect("cert");
    std::fs::write(dir.join("server.key"), &cert.key_pem).expect("key");
    let kubeconfig = KubeconfigFile::new(&server.url()).expect("kubeconfig");
    let mut webhook = start(&kubeconfig, &dir, &[]);

    // over TLS, with the certificate SuperEdge's flags name
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(response) = https_get(webhook.addr, "/readyz", ca.client_config(None)).await
            && response.status == 200
        {
            break;
        }
        webhook.binary.assert_running();
        assert!(Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client(&server));
    let config = mutating_webhook_configuration(
        "edge-health-admission",
        &Endpoint::Url(format!("https://{}", webhook.addr)),
        Some(ca.cert_pem().as_bytes()),
    );
    configs.create(&PostParams::default(), &config).await.expect("register the webhook");

    // what the node lifecycle controller writes when `alive` stops reporting
    let unknown = json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
        "lastHeartbeatTime": "2026-11-22T09:59:00Z", "lastTransitionTime": "2026-11-22T10:00:00Z"}]}});
    nodes.patch_status("alive", &PatchParams::default(), &Patch::Merge(&unknown)).await.expect("status");
    let taints = json!({"spec": {"taints": [
        {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "timeAdded": "2026-11-22T10:00:00Z"},
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-11-22T10:00:05Z"},
    ]}});
    let stored = nodes.patch("alive", &PatchParams::default(), &Patch::Merge(&taints)).await.expect("taint");
    let effects: Vec<String> =
        stored.spec.and_then(|s| s.taints).unwrap_or_default().into_iter().map(|t| t.effect).collect();
    assert_eq!(effects, ["NoSchedule"], "the webhook took the NoExecute taint off");

    let exit = webhook.binary.terminate(PROMPT_EXIT).await.expect("exits after SIGTERM");
    assert_eq!(exit.status.code(), Some(0), "{}", exit.logs);
    let mut logged = logged_values(&exit.logs, DEPRECATED, "flag");
    logged.sort();
    assert_eq!(logged, DEPRECATED_FLAGS, "one line per SuperEdge flag given:\n{}", exit.logs);
    // --v=4: debug lines are on (RUST_LOG is not set here)
    assert!(exit.logs.contains(" DEBUG "), "{}", exit.logs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_superedge_value_is_a_usage_error_naming_the_flag() {
    let kubeconfig = KubeconfigFile::new(&edgegrid_testing::unreachable_url()).expect("kubeconfig");
    let dir = TempDir::new("edge-health-admission-superedge-bad").expect("temp dir");
    let webhook = start(&kubeconfig, &dir, &["-v=abc"]);
    let exit = webhook.binary.wait(PROMPT_EXIT).await.expect("exits at once");
    assert_eq!(exit.status.code(), Some(2), "{}", exit.logs);
    assert!(exit.logs.contains(r#"invalid value "abc" for --v: not a whole number"#), "{}", exit.logs);
}
