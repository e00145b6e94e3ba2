//! The shipped binary against an API server over HTTP: flags, /healthz, /readyz,
//! /metrics, exactly one leader among instances on one node (the standby ready once its
//! caches synced), and a clean SIGTERM exit whatever state it is in.

use std::net::SocketAddr;
use std::time::Duration;

use edgegrid_testing::{HangingServer, KubeconfigFile, RunningBinary, http_get};
use fake_apiserver::FakeApiServer;
use tokio::time::Instant;

const LEADER_GAUGE: &str = "edge_node_lifecycle_leader";
/// Every state here stops within this after SIGTERM (none needs the drain deadline).
const PROMPT_EXIT: Duration = Duration::from_secs(5);

struct Instance {
    binary: RunningBinary,
    health: SocketAddr,
    metrics: SocketAddr,
}

/// The binary with separate health and metrics ports and fast leader-election retries.
fn start(kubeconfig: &KubeconfigFile, node_name: &str) -> Instance {
    let (health, metrics) = (edgegrid_testing::free_port(), edgegrid_testing::free_port());
    let args: Vec<String> = [
        "--kubeconfig",
        &kubeconfig.arg(),
        "--bind-address",
        &format!("127.0.0.1:{health}"),
        // the Go form: every interface
        "--metrics-bind-address",
        &format!(":{metrics}"),
        "--node-name",
        node_name,
        "--leader-elect-retry-period",
        "200ms",
        "--node-monitor-period",
        "1s",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let binary = RunningBinary::start(env!("CARGO_BIN_EXE_edge-node-lifecycle"), &args).unwrap();
    Instance { binary, health: ([127, 0, 0, 1], health).into(), metrics: ([127, 0, 0, 1], metrics).into() }
}

impl Instance {
    async fn ready(&self) -> Option<(u16, String)> {
        http_get(self.health, "/readyz").await
    }

    /// Waits until /readyz answers 200 and the leader gauge's sample reads `value`.
    async fn until_ready_with_leader_gauge(&mut self, value: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ready = self.ready().await;
            let leader = edgegrid_testing::metric(self.metrics, LEADER_GAUGE).await;
            if ready.as_ref().is_some_and(|(code, _)| *code == 200) && leader.as_deref() == Some(value) {
                return;
            }
            self.binary.assert_running();
            assert!(Instant::now() < deadline, "not ready with {LEADER_GAUGE} {value} in time: {ready:?} {leader:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn server() -> (FakeApiServer, KubeconfigFile) {
    let server = FakeApiServer::start().await.unwrap();
    let kubeconfig = KubeconfigFile::new(&server.url()).unwrap();
    (server, kubeconfig)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_serves_probes_and_exits_cleanly_on_sigterm() {
    let (_server, kubeconfig) = server().await;
    let mut instance = start(&kubeconfig, "instance-a");
    instance.until_ready_with_leader_gauge("1").await;
    assert_eq!(http_get(instance.health, "/healthz").await, Some((200, "ok".into())));
    let deadline = Instant::now() + Duration::from_secs(10);
    // the leader acts: its monitor passes run
    while edgegrid_testing::metric(instance.metrics, "edge_node_lifecycle_monitor_passes_total").await.as_deref()
        == Some("0")
    {
        assert!(Instant::now() < deadline, "no monitor pass while leading");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let exit = instance.binary.terminate(PROMPT_EXIT).await.unwrap();
    assert_eq!(exit.status.code(), Some(0), "{}", exit.logs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_among_instances_of_one_node_and_a_ready_standby() {
    let (_server, kubeconfig) = server().await;
    let mut first = start(&kubeconfig, "same-node");
    first.until_ready_with_leader_gauge("1").await;
    let mut second = start(&kubeconfig, "same-node");
    second.until_ready_with_leader_gauge("0").await;
    for _ in 0..10 {
        assert_eq!(edgegrid_testing::metric(first.metrics, LEADER_GAUGE).await.as_deref(), Some("1"));
        assert_eq!(edgegrid_testing::metric(second.metrics, LEADER_GAUGE).await.as_deref(), Some("0"));
        assert_eq!(second.ready().await, Some((200, "ok".into())), "a synced standby is ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // the standby does not act
    assert_eq!(
        edgegrid_testing::metric(second.metrics, "edge_node_lifecycle_monitor_passes_total").await.as_deref(),
        Some("0")
    );

    let standby = second.binary.terminate(PROMPT_EXIT).await.unwrap();
    assert_eq!(standby.status.code(), Some(0), "{}", standby.logs);
    let leader = first.binary.terminate(PROMPT_EXIT).await.unwrap();
    assert_eq!(leader.status.code(), Some(0), "{}", leader.logs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_promptly_while_waiting_for_caches() {
    let hanging = HangingServer::start().await.unwrap();
    for server_url in [edgegrid_testing::unreachable_url(), hanging.url()] {
        let kubeconfig = KubeconfigFile::new(&server_url).unwrap();
        let mut instance = start(&kubeconfig, "instance-a");
        let deadline = Instant::now() + Duration::from_secs(10);
        // serving, but not ready: its caches cannot sync
        while instance.ready().await != Some((503, "not ready: the caches have not synced yet".into())) {
            instance.binary.assert_running();
            assert!(Instant::now() < deadline, "{server_url}: admin server not up");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(edgegrid_testing::metric(instance.metrics, LEADER_GAUGE).await.as_deref(), Some("0"));
        let exit = instance.binary.terminate(PROMPT_EXIT).await.unwrap();
        assert_eq!(exit.status.code(), Some(0), "{server_url}: {}", exit.logs);
    }
}

#[test]
fn bad_flags_are_refused_with_a_message() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_edge-node-lifecycle"))
        .args(["--kubeconfig", "/nonexistent", "--node-monitor-grace-period", "fifty"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("invalid value 'fifty' for '--node-monitor-grace-period"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_edge-node-lifecycle"))
        .args(["--kubeconfig", "/nonexistent", "--max-unreachable-protection", "30min"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("invalid value '30min' for '--max-unreachable-protection"), "{stderr}");
    assert!(stderr.contains("unknown unit"), "{stderr}");
}

/// `--max-unreachable-protection` reaches the lifecycle logic: a node Unknown (and not
/// voted unhealthy) since long ago is tainted NoExecute once the limit is 1 s, while a
/// healthy node in another zone keeps the eviction rate above zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_unreachable_protection_flag_bounds_the_edge_rule() {
    use k8s_openapi::api::core::v1::Node;
    use kube::api::{Api, PostParams};

    let (server, kubeconfig) = server().await;
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let nodes: Api<Node> = Api::all(client);
    for (name, zone, ready) in [("cloud-0", "cloud", "True"), ("edge-0", "site", "Unknown")] {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"topology.kubernetes.io/region": "r", "topology.kubernetes.io/zone": zone}},
            "status": {"conditions": [{"type": "Ready", "status": ready,
                "lastHeartbeatTime": "2026-11-21T00:00:00Z", "lastTransitionTime": "2026-11-21T00:00:00Z"}]}
        }))
        .unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    let (health, metrics) = (edgegrid_testing::free_port(), edgegrid_testing::free_port());
    let args: Vec<String> = [
        "--kubeconfig",
        &kubeconfig.arg(),
        "--bind-address",
        &format!("127.0.0.1:{health}"),
        "--metrics-bind-address",
        &format!("127.0.0.1:{metrics}"),
        "--leader-elect-retry-period",
        "200ms",
        "--node-monitor-period",
        "200ms",
        "--node-eviction-rate",
        "2",
        "--max-unreachable-protection",
        "1s",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let mut binary = RunningBinary::start(env!("CARGO_BIN_EXE_edge-node-lifecycle"), &args).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let taints: Vec<String> = nodes
            .get("edge-0")
            .await
            .unwrap()
            .spec
            .and_then(|s| s.taints)
            .unwrap_or_default()
            .iter()
            .map(|t| format!("{}:{}", t.key, t.effect))
            .collect();
        if taints.iter().any(|t| t == "node.kubernetes.io/unreachable:NoExecute") {
            break;
        }
        binary.assert_running();
        assert!(Instant::now() < deadline, "edge-0 not tainted NoExecute: {taints:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let exit = binary.terminate(PROMPT_EXIT).await.unwrap();
    assert_eq!(exit.status.code(), Some(0), "{}", exit.logs);
}
