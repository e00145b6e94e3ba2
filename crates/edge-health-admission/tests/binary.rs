//! The shipped binary over HTTPS, called by the fake apiserver through the
//! MutatingWebhookConfiguration this crate defines: the node lifecycle controller's writes
//! to an unreachable-but-alive node, its Endpoints and its EndpointSlices are stored
//! mutated; those of a node its unit voted unhealthy are stored as sent; rotating the
//! certificate files during a stream of writes fails none and new connections get the new
//! certificate.

use std::net::SocketAddr;
use std::time::Duration;

use edge_health_admission::configuration::{Endpoint, mutating_webhook_configuration};
use edgegrid_testing::tls::{TestCa, TestCert, https_get};
use edgegrid_testing::{KubeconfigFile, RunningBinary, TempDir, free_port, metric};
use fake_apiserver::FakeApiServer;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Endpoints, Namespace, Node};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::time::Instant;

struct Webhook {
    binary: RunningBinary,
    addr: SocketAddr,
    metrics: SocketAddr,
    dir: TempDir,
}

fn write_cert(dir: &TempDir, cert: &TestCert) {
    // as a kubelet updates a Secret volume: the new files appear whole
    for (name, contents) in [("tls.crt", &cert.cert_pem), ("tls.key", &cert.key_pem)] {
        let temporary = dir.join(&format!(".{name}.new"));
        std::fs::write(&temporary, contents).expect("write");
        std::fs::rename(&temporary, dir.join(name)).expect("rename");
    }
}

async fn start(server: &FakeApiServer, ca: &TestCa, kubeconfig: &KubeconfigFile) -> Webhook {
    let dir = TempDir::new("edge-health-admission").expect("temp dir");
    write_cert(&dir, &ca.server_cert(1));
    let port = free_port();
    let metrics: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let args: Vec<String> = vec![
        "--kubeconfig".into(),
        kubeconfig.arg(),
        "--bind-address".into(),
        format!("127.0.0.1:{port}"),
        "--metrics-bind-address".into(),
        metrics.to_string(),
        "--tls-cert-file".into(),
        dir.join("tls.crt").display().to_string(),
        "--tls-private-key-file".into(),
        dir.join("tls.key").display().to_string(),
    ];
    let binary = RunningBinary::start(env!("CARGO_BIN_EXE_edge-health-admission"), &args).expect("starts");
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut webhook = Webhook { binary, addr, metrics, dir };
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(response) = https_get(addr, "/readyz", ca.client_config(None)).await
            && response.status == 200
        {
            break;
        }
        webhook.binary.assert_running();
        assert!(Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client(server));
    let config = mutating_webhook_configuration(
        "edge-health-admission",
        &Endpoint::Url(format!("https://{addr}")),
        Some(ca.cert_pem().as_bytes()),
    );
    configs.create(&PostParams::default(), &config).await.expect("register the webhook");
    webhook
}

fn client(server: &FakeApiServer) -> Client {
    Client::try_from(kube::Config::new(server.url().parse().expect("url"))).expect("client")
}

fn node(name: &str, voted_unhealthy: bool) -> Node {
    let mut annotations = if voted_unhealthy { json!({"nodeunhealth": "yes"}) } else { json!({}) };
    if name != "cloud" {
        // its edge-health daemon runs: with a peer doing so too, edge-health watches it
        annotations["edgegrid.io/edge-health-address"] = json!("10.0.0.1:51005");
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"unit": "a"}, "annotations": annotations},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
            "lastHeartbeatTime": "2026-11-22T09:00:00Z", "lastTransitionTime": "2026-11-22T08:00:00Z"}]},
    }))
    .expect("node")
}

const NO_SCHEDULE: &str = "NoSchedule";
const NO_EXECUTE: &str = "NoExecute";

fn unreachable_taints() -> Value {
    json!([
        {"key": "node.kubernetes.io/unreachable", "effect": NO_SCHEDULE, "timeAdded": "2026-11-22T10:00:00Z"},
        {"key": "node.kubernetes.io/unreachable", "effect": NO_EXECUTE, "timeAdded": "2026-11-22T10:00:05Z"},
    ])
}

/// What kube-controller-manager does when a node stops reporting: Ready -> Unknown on
/// the status, then the unreachable taints; returns the taint effects as stored.
async fn lose_contact(nodes: &Api<Node>, name: &str) -> Vec<String> {
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
        "lastHeartbeatTime": "2026-11-22T09:59:00Z", "lastTransitionTime": "2026-11-22T10:00:00Z"}]}});
    nodes.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.expect("status");
    taint(nodes, name).await
}

async fn taint(nodes: &Api<Node>, name: &str) -> Vec<String> {
    let taints = json!({"spec": {"taints": unreachable_taints()}});
    let stored = nodes.patch(name, &PatchParams::default(), &Patch::Merge(&taints)).await.expect("taint");
    stored.spec.and_then(|s| s.taints).unwrap_or_default().into_iter().map(|t| t.effect).collect()
}

#[tokio::test]
async fn writes_about_alive_nodes_are_mutated_and_voted_ones_stored_as_sent() {
    let server = FakeApiServer::start().await.expect("bind");
    let upstream = client(&server);
    let nodes: Api<Node> = Api::all(upstream.clone());
    for (name, voted) in [("alive", false), ("dead", true), ("cloud", false)] {
        nodes.create(&PostParams::default(), &node(name, voted)).await.expect("node");
    }
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": "ns"}})).expect("namespace");
    Api::<Namespace>::all(upstream.clone()).create(&PostParams::default(), &namespace).await.expect("namespace");
    let ca = TestCa::new("webhook-ca");
    let kubeconfig = KubeconfigFile::new(&server.url()).expect("kubeconfig");
    let mut webhook = start(&server, &ca, &kubeconfig).await;

    assert_eq!(lose_contact(&nodes, "alive").await, vec![NO_SCHEDULE], "the NoExecute taint is stripped");
    assert_eq!(lose_contact(&nodes, "dead").await, vec![NO_SCHEDULE, NO_EXECUTE], "voted unhealthy: as sent");
    // a cloud worker no edge-health watches: nobody could vote it down, so stock handling
    assert_eq!(lose_contact(&nodes, "cloud").await, vec![NO_SCHEDULE, NO_EXECUTE], "never watched: as sent");

    // the webhook's node cache must have seen both nodes go Unknown
    tokio::time::sleep(Duration::from_millis(300)).await;
    let endpoints: Api<Endpoints> = Api::namespaced(upstream.clone(), "ns");
    let created: Endpoints = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "ns"},
        "subsets": [{"addresses": [{"ip": "10.0.0.1", "nodeName": "alive"}, {"ip": "10.0.0.2", "nodeName": "dead"},
            {"ip": "10.0.0.3", "nodeName": "cloud"}], "ports": [{"port": 80}]}],
    }))
    .expect("endpoints");
    endpoints.create(&PostParams::default(), &created).await.expect("endpoints");
    let not_ready = json!({"subsets": [{"notReadyAddresses": [{"ip": "10.0.0.1", "nodeName": "alive"},
        {"ip": "10.0.0.2", "nodeName": "dead"}, {"ip": "10.0.0.3", "nodeName": "cloud"}], "ports": [{"port": 80}]}]});
    let stored = endpoints.patch("web", &PatchParams::default(), &Patch::Merge(&not_ready)).await.expect("update");
    let subset = serde_json::to_value(&stored.subsets.expect("subsets")[0]).expect("json");
    assert_eq!(subset["addresses"], json!([{"ip": "10.0.0.1", "nodeName": "alive"}]));
    assert_eq!(
        subset["notReadyAddresses"],
        json!([{"ip": "10.0.0.2", "nodeName": "dead"}, {"ip": "10.0.0.3", "nodeName": "cloud"}]),
        "the voted and the never-watched node's endpoints are not forced ready"
    );

    let slices: Api<EndpointSlice> = Api::namespaced(upstream.clone(), "ns");
    let endpoint = |ip: &str, node: &str, ready: bool| json!({"addresses": [ip], "nodeName": node, "conditions": {"ready": ready, "serving": ready, "terminating": false}});
    let slice = |ready: bool| -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": "web-1", "namespace": "ns", "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4", "ports": [{"port": 80}],
            "endpoints": [endpoint("10.0.0.1", "alive", ready), endpoint("10.0.0.2", "dead", ready),
                endpoint("10.0.0.3", "cloud", ready)],
        }))
        .expect("slice")
    };
    slices.create(&PostParams::default(), &slice(true)).await.expect("slice");
    let stored = slices
        .replace("web-1", &PostParams::default(), &slice(false))
        .await
        .expect("the controller marks both not ready");
    let ready: Vec<Option<bool>> =
        stored.endpoints.iter().map(|e| e.conditions.as_ref().and_then(|c| c.ready)).collect();
    assert_eq!(ready, vec![Some(true), Some(false), Some(false)]);

    // rotation during a stream of writes: every write is still mutated (with
    // failurePolicy Ignore a failed call would store the taint), and new connections
    // present the new certificate
    let rotated = ca.server_cert(2);
    for round in 0..40 {
        if round == 10 {
            write_cert(&webhook.dir, &rotated);
        }
        let unit = if round % 2 == 0 { "b" } else { "a" };
        nodes
            .patch("alive", &PatchParams::default(), &Patch::Merge(&json!({"metadata": {"labels": {"unit": unit}}})))
            .await
            .expect("relabel");
        assert_eq!(taint(&nodes, "alive").await, vec![NO_SCHEDULE], "round {round}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let served = https_get(webhook.addr, "/healthz", ca.client_config(None)).await.expect("https");
    assert_eq!(served.peer_certificate, Some(rotated.cert_der.clone()), "new connections get the new certificate");
    webhook.binary.assert_running();
    let exit = webhook.binary.terminate(Duration::from_secs(5)).await.expect("exits on SIGTERM");
    assert_eq!(exit.status.code(), Some(0), "{}", exit.logs);
}

/// The stock controller tainted the nodes while no webhook could strip the taint (here: not
/// registered yet; in a cluster, every replica down with failurePolicy Ignore). Once the
/// webhook runs, it takes the unreachable NoExecute taint off the node its unit sees alive,
/// with an Event and a metric, and leaves it on the node voted unhealthy and on the node no
/// edge-health watches.
#[tokio::test]
async fn a_taint_that_got_past_the_webhook_is_removed_from_protected_nodes_only() {
    let server = FakeApiServer::start().await.expect("bind");
    let upstream = client(&server);
    let nodes: Api<Node> = Api::all(upstream.clone());
    for (name, voted) in [("alive", false), ("dead", true), ("cloud", false)] {
        nodes.create(&PostParams::default(), &node(name, voted)).await.expect("node");
        assert_eq!(lose_contact(&nodes, name).await, vec![NO_SCHEDULE, NO_EXECUTE], "{name}: no webhook yet");
    }
    let ca = TestCa::new("webhook-ca");
    let kubeconfig = KubeconfigFile::new(&server.url()).expect("kubeconfig");
    let mut webhook = start(&server, &ca, &kubeconfig).await;

    let effects = |name: &'static str| {
        let nodes = nodes.clone();
        async move {
            let node = nodes.get(name).await.expect("node");
            node.spec.and_then(|s| s.taints).unwrap_or_default().into_iter().map(|t| t.effect).collect::<Vec<_>>()
        }
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while effects("alive").await != [NO_SCHEDULE] {
        assert!(Instant::now() < deadline, "the protected node kept its NoExecute taint");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // a few more periods for the remover to (wrongly) act on the others
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(effects("dead").await, [NO_SCHEDULE, NO_EXECUTE], "voted unhealthy: kept");
    assert_eq!(effects("cloud").await, [NO_SCHEDULE, NO_EXECUTE], "never watched: kept");
    let removed = r#"edge_health_admission_unreachable_taint_removals_total{outcome="removed"}"#;
    assert_eq!(metric(webhook.metrics, removed).await.as_deref(), Some("1"));
    let events: Vec<Event> = Api::<Event>::all(upstream.clone()).list(&Default::default()).await.expect("events").items;
    let about: Vec<(Option<String>, Option<String>)> =
        events.iter().map(|e| (e.reason.clone(), e.regarding.as_ref().and_then(|r| r.name.clone()))).collect();
    assert_eq!(about, [(Some("UnreachableTaintRemoved".into()), Some("alive".into()))]);
    webhook.binary.assert_running();
    let exit = webhook.binary.terminate(Duration::from_secs(5)).await.expect("exits on SIGTERM");
    assert_eq!(exit.status.code(), Some(0), "{}", exit.logs);
}
