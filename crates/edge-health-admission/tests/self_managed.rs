//! `--self-managed-certificates` end to end: two replicas of the shipped binary against
//! the fake apiserver, which calls them over HTTPS (through a round-robin TCP proxy
//! standing in for the Service, so calls go to both) trusting only the `caBundle` of the
//! MutatingWebhookConfiguration the test registers without one.
//!
//! - Started together against an empty cluster, the replicas create the Secret once
//!   (the other gets 409 and uses it), serve the same certificate, patch `caBundle` to
//!   its CA, and node writes are mutated (the apiserver trusts them). A certificate
//!   renewed in the Secret by someone else is served by both at once (watched).
//! - With a 6 s validity the serving certificate is renewed before it expires, once per
//!   renewal whichever replica does it, both replicas serve each new one, and no webhook
//!   call fails meanwhile.
//! - With a 12 s CA the CA is rotated: the next CA is published in caBundle next to the
//!   old one, signs only once caBundle carries both, and the old one leaves caBundle once
//!   expired; every webhook call and every handshake checked against the caBundle
//!   published at that moment succeeds throughout.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use edge_health_admission::configuration::{Endpoint, mutating_webhook_configuration};
use edge_health_admission::self_managed::pki;
use edgegrid_testing::tls::{client_config, https_get};
use edgegrid_testing::{KubeconfigFile, RunningBinary, free_port, http_get};
use fake_apiserver::{FakeApiServer, Fault};
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

const NAMESPACE: &str = "kube-system";
const SECRET: &str = "edge-health-admission-tls";
const SECRETS_PATH: &str = "/api/v1/namespaces/kube-system/secrets";
const CONFIGURATION: &str = "edge-health-admission";

struct Replica {
    binary: RunningBinary,
    /// HTTPS: the webhook, /healthz, /readyz.
    addr: SocketAddr,
    /// Plain HTTP: /readyz, /metrics.
    admin: SocketAddr,
}

fn client(server: &FakeApiServer) -> Client {
    Client::try_from(kube::Config::new(server.url().parse().expect("url"))).expect("client")
}

fn start(kubeconfig: &KubeconfigFile, port: u16, validity: &str, check_period: &str) -> Replica {
    start_with(kubeconfig, port, validity, check_period, &[])
}

fn start_with(kubeconfig: &KubeconfigFile, port: u16, validity: &str, check_period: &str, more: &[&str]) -> Replica {
    let admin = free_port();
    let args: Vec<String> = [
        "--kubeconfig",
        &kubeconfig.arg(),
        "--bind-address",
        &format!("127.0.0.1:{port}"),
        "--metrics-bind-address",
        &format!("127.0.0.1:{admin}"),
        "--self-managed-certificates",
        "--service",
        "kube-system/edge-health-admission",
        "--extra-san",
        "127.0.0.1",
        "--certificate-validity",
        validity,
        "--certificate-check-period",
        check_period,
    ]
    .iter()
    .chain(more)
    .map(|s| s.to_string())
    .collect();
    let binary = RunningBinary::start(env!("CARGO_BIN_EXE_edge-health-admission"), &args).expect("starts");
    Replica { binary, addr: ([127, 0, 0, 1], port).into(), admin: ([127, 0, 0, 1], admin).into() }
}

async fn wait_ready(replicas: &mut [Replica]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    for replica in replicas {
        loop {
            if let Some((200, _)) = http_get(replica.admin, "/readyz").await {
                break;
            }
            replica.binary.assert_running();
            assert!(Instant::now() < deadline, "never ready: {:?}", http_get(replica.admin, "/readyz").await);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A TCP proxy handing connections to `backends` in turn, as a Service would.
async fn round_robin(backends: Vec<SocketAddr>) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let task = tokio::spawn(async move {
        let mut next = 0;
        while let Ok((mut inbound, _)) = listener.accept().await {
            let backend = backends[next % backends.len()];
            next += 1;
            tokio::spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(backend).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (addr, task)
}

/// Registers the configuration (no caBundle) and a node that lost contact with the cloud
/// but not with its unit: its NoExecute taint is what the webhook strips.
async fn cluster(server: &FakeApiServer, proxy: SocketAddr) {
    let api = client(server);
    let configuration = mutating_webhook_configuration(CONFIGURATION, &Endpoint::Url(format!("https://{proxy}")), None);
    Api::<MutatingWebhookConfiguration>::all(api.clone())
        .create(&PostParams::default(), &configuration)
        .await
        .expect("register the webhook");
    let nodes: Api<Node> = Api::all(api);
    // `alive` and a peer both run edge-health (one unit: the whole cluster), so it is watched
    for (name, ready) in [("alive", "Unknown"), ("peer", "True")] {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"unit": "a"},
                "annotations": {"edgegrid.io/edge-health-address": "10.0.0.1:51005"}},
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "NodeStatusUnknown",
                "lastHeartbeatTime": "2026-11-22T09:59:00Z", "lastTransitionTime": "2026-11-22T10:00:00Z"}]},
        }))
        .expect("node");
        nodes.create(&PostParams::default(), &node).await.expect("node");
    }
}

/// The node lifecycle controller's write: both unreachable taints; the effects stored.
async fn taint(server: &FakeApiServer) -> Vec<String> {
    let nodes: Api<Node> = Api::all(client(server));
    let taints = json!({"spec": {"taints": [
        {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "timeAdded": "2026-11-22T10:00:00Z"},
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-11-22T10:00:05Z"},
    ]}});
    let stored = nodes.patch("alive", &PatchParams::default(), &Patch::Merge(&taints)).await.expect("taint");
    stored.spec.and_then(|s| s.taints).unwrap_or_default().into_iter().map(|t| t.effect).collect()
}

/// `(ca.crt, tls.crt)` of the Secret, PEM.
async fn stored(server: &FakeApiServer) -> (String, String) {
    let secret = Api::<Secret>::namespaced(client(server), NAMESPACE).get(SECRET).await.expect("the Secret");
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let data = secret.data.expect("data");
    let text =
        |key: &str| String::from_utf8(data.get(key).unwrap_or_else(|| panic!("no {key}")).0.clone()).expect("PEM");
    for key in ["tls.key", "ca.key"] {
        text(key);
    }
    (text("ca.crt"), text("tls.crt"))
}

fn der(pem: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(pem.as_bytes()).expect("a PEM certificate")
}

/// The certificate `replica` presents to a client trusting only `ca_pem` (which checks
/// it was issued by that CA, for 127.0.0.1, and is valid now).
async fn served(replica: &Replica, ca_pem: &str) -> std::io::Result<CertificateDer<'static>> {
    let client = client_config(&[der(ca_pem)], None, rustls::DEFAULT_VERSIONS);
    let response = https_get(replica.addr, "/healthz", client).await?;
    assert_eq!(response.status, 200, "{}", response.body);
    response.peer_certificate.ok_or_else(|| std::io::Error::other("no peer certificate"))
}

async fn ca_bundles(server: &FakeApiServer) -> Vec<Option<Vec<u8>>> {
    let configuration =
        Api::<MutatingWebhookConfiguration>::all(client(server)).get(CONFIGURATION).await.expect("the configuration");
    configuration.webhooks.unwrap_or_default().into_iter().map(|w| w.client_config.ca_bundle.map(|b| b.0)).collect()
}

async fn wait_for_ca_bundle(server: &FakeApiServer, ca_pem: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let expected = vec![Some(ca_pem.as_bytes().to_vec()); 3];
    while ca_bundles(server).await != expected {
        assert!(Instant::now() < deadline, "caBundle never set to the CA: {:?}", ca_bundles(server).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn stop(replicas: Vec<Replica>) {
    for replica in replicas {
        let exit = replica.binary.terminate(Duration::from_secs(5)).await.expect("exits on SIGTERM");
        assert_eq!(exit.status.code(), Some(0), "{}", exit.logs);
    }
}

#[tokio::test]
async fn two_replicas_create_one_secret_serve_it_and_the_apiserver_trusts_them() {
    let server = FakeApiServer::start().await.expect("bind");
    let kubeconfig = KubeconfigFile::new(&server.url()).expect("kubeconfig");
    let ports = [free_port(), free_port()];
    let (proxy, _proxy) = round_robin(ports.iter().map(|p| SocketAddr::from(([127, 0, 0, 1], *p))).collect()).await;
    cluster(&server, proxy).await;

    // the replicas' first reads of the Secret are held until both have asked, then
    // answered together ("absent"), and each create takes half a second: both create,
    // so one of them must lose
    server.set_fault("secrets", Fault::Hang);
    let mark = server.requests().mark();
    let mut replicas: Vec<Replica> = ports.iter().map(|port| start(&kubeconfig, *port, "8760h", "1m")).collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    // a replica lists the nodes as it asks for the Secret
    while server
        .requests()
        .since(mark)
        .iter()
        .filter(|r| r.path == "/api/v1/nodes" && !r.query.contains("watch"))
        .count()
        < 2
    {
        assert!(Instant::now() < deadline, "the replicas never listed the nodes");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.set_fault("secrets", Fault::LatencyMs(500));
    wait_ready(&mut replicas).await;
    server.clear_faults();

    let creates: Vec<u16> = server
        .requests()
        .since(mark)
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == SECRETS_PATH)
        .map(|r| r.status)
        .collect();
    assert_eq!(creates.iter().filter(|s| **s == 201).count(), 1, "the Secret is created once: {creates:?}");
    assert_eq!(creates.iter().filter(|s| **s == 409).count(), 1, "the other replica lost the race: {creates:?}");

    let (ca, serving) = stored(&server).await;
    for replica in &replicas {
        assert_eq!(served(replica, &ca).await.expect("trusted by the Secret's CA"), der(&serving), "{}", replica.addr);
    }

    wait_for_ca_bundle(&server, &ca).await;
    for round in 0..4 {
        // through the proxy: each replica answers every other call
        assert_eq!(taint(&server).await, vec!["NoSchedule"], "round {round}: the NoExecute taint is stripped");
    }

    // caBundle is only patched while it differs, and nothing is renewed
    let steady = server.requests().mark();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let writes: Vec<String> = server
        .requests()
        .since(mark)
        .into_iter()
        .filter(|r| r.is_write() && r.status < 300 && !r.path.starts_with("/api/v1/nodes"))
        .map(|r| format!("{} {} {} (#{})", r.method, r.path, r.status, r.seq))
        .collect();
    let patches = writes.iter().filter(|w| w.contains("mutatingwebhookconfigurations")).count();
    assert!((1..=2).contains(&patches), "one patch, two if both replicas raced: {writes:?}");
    assert_eq!(writes.len(), 1 + patches, "the create and the caBundle patches only: {writes:?}");
    assert!(server.requests().since(steady).iter().all(|r| !r.is_write() || r.path.starts_with("/api/v1/nodes")));

    // a serving certificate renewed elsewhere (here by the test, with the Secret's CA) is
    // served by both replicas at once: they watch the Secret (the check period is 1 m)
    let secrets: Api<Secret> = Api::namespaced(client(&server), NAMESPACE);
    let mut secret = secrets.get(SECRET).await.expect("the Secret");
    let mut bundle = pki::bundle(&secret).expect("complete");
    let names =
        ["127.0.0.1", "edge-health-admission.kube-system.svc", "edge-health-admission.kube-system.svc.cluster.local"];
    bundle.serving = pki::issue_serving(
        &bundle.ca,
        &names.iter().map(|n| n.to_string()).collect(),
        std::time::SystemTime::now(),
        Duration::from_secs(3_600),
    )
    .expect("issued");
    secret.data = Some(bundle.data());
    secrets.replace(SECRET, &PostParams::default(), &secret).await.expect("replaced");
    let mark = server.requests().mark();
    let deadline = Instant::now() + Duration::from_secs(5);
    for replica in &replicas {
        while served(replica, &ca).await.expect("served") != der(&bundle.serving.cert_pem) {
            assert!(Instant::now() < deadline, "{} never served the renewed certificate", replica.addr);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert_eq!(taint(&server).await, vec!["NoSchedule"]);
    let writes: Vec<_> = server.requests().since(mark).into_iter().filter(|r| r.is_write()).collect();
    assert!(writes.iter().all(|r| r.path.starts_with("/api/v1/nodes")), "a usable Secret is used as it is: {writes:?}");
    stop(replicas).await;
}

#[tokio::test]
async fn the_serving_certificate_is_renewed_before_it_expires_without_a_failed_call() {
    let server = FakeApiServer::start().await.expect("bind");
    let kubeconfig = KubeconfigFile::new(&server.url()).expect("kubeconfig");
    let ports = [free_port(), free_port()];
    let (proxy, _proxy) = round_robin(ports.iter().map(|p| SocketAddr::from(([127, 0, 0, 1], *p))).collect()).await;
    cluster(&server, proxy).await;
    let mut replicas: Vec<Replica> = ports.iter().map(|port| start(&kubeconfig, *port, "6s", "500ms")).collect();
    wait_ready(&mut replicas).await;
    let (ca, first) = stored(&server).await;
    wait_for_ca_bundle(&server, &ca).await;
    let mark = server.requests().mark();

    // every version of the Secret's serving certificate, when it was seen
    let versions: Arc<Mutex<Vec<(Instant, String)>>> = Arc::default();
    let watching = {
        let versions = versions.clone();
        let secrets: Api<Secret> = Api::namespaced(client(&server), NAMESPACE);
        tokio::spawn(async move {
            let config = watcher::Config::default().fields(&format!("metadata.name={SECRET}"));
            let mut events = std::pin::pin!(watcher::watcher(secrets, config));
            while let Some(event) = events.next().await {
                let (watcher::Event::Apply(secret) | watcher::Event::InitApply(secret)) = event.expect("watch") else {
                    continue;
                };
                let data = secret.data.unwrap_or_default();
                let cert =
                    String::from_utf8(data.get("tls.crt").map(|b| b.0.clone()).unwrap_or_default()).expect("PEM");
                let mut versions = versions.lock().expect("lock");
                if versions.last().is_none_or(|(_, last)| *last != cert) {
                    versions.push((Instant::now(), cert));
                }
            }
        })
    };

    // 16 s of node writes through the apiserver (any failed call would store the
    // NoExecute taint: failurePolicy Ignore) and of handshakes with each replica, which
    // check the certificate presented is the CA's and valid now
    let mut presented: Vec<Vec<CertificateDer<'static>>> = vec![Vec::new(); replicas.len()];
    let started = Instant::now();
    let mut round = 0;
    while started.elapsed() < Duration::from_secs(16) {
        assert_eq!(taint(&server).await, vec!["NoSchedule"], "round {round} at {:?}", started.elapsed());
        for (replica, seen) in replicas.iter().zip(presented.iter_mut()) {
            let cert = served(replica, &ca)
                .await
                .unwrap_or_else(|e| panic!("{} at {:?}: {e}", replica.addr, started.elapsed()));
            if seen.last() != Some(&cert) {
                seen.push(cert);
            }
        }
        round += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // both replicas end up serving the Secret's current certificate
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let (_, current) = stored(&server).await;
        let mut agree = true;
        for replica in &replicas {
            agree &= served(replica, &ca).await.expect("served") == der(&current);
        }
        if agree {
            break;
        }
        assert!(Instant::now() < deadline, "the replicas do not serve the Secret's certificate");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop(replicas).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    watching.abort();

    let (ca_after, _) = stored(&server).await;
    assert_eq!(ca_after, ca, "renewals keep the CA");
    let versions = versions.lock().expect("lock").clone();
    assert_eq!(versions.first().map(|(_, cert)| cert), Some(&first));
    let renewals = versions.len() - 1;
    assert!(renewals >= 3, "a 6 s certificate is renewed about every 4 s: {renewals} renewals in 16 s");
    for pair in versions.windows(2) {
        let gap = pair[1].0 - pair[0].0;
        assert!(gap >= Duration::from_secs(2), "renewed again after {gap:?}: once per renewal, not per replica");
    }
    let replaced = server
        .requests()
        .since(mark)
        .into_iter()
        .filter(|r| r.method == "PUT" && r.path == format!("{SECRETS_PATH}/{SECRET}") && r.status == 200)
        .count();
    assert_eq!(replaced, renewals, "one replace of the Secret per renewal");
    for (index, seen) in presented.iter().enumerate() {
        // every version, but maybe one renewed after the writes stopped
        assert!(
            seen.len() + 1 >= versions.len(),
            "replica {index} served {} of {} versions",
            seen.len(),
            versions.len()
        );
        for cert in seen {
            assert!(versions.iter().any(|(_, pem)| der(pem) == *cert), "replica {index} served one not in the Secret");
        }
    }
}

/// The caBundle every webhook of the configuration holds (they must agree), PEM.
async fn published(server: &FakeApiServer) -> Vec<u8> {
    let bundles = ca_bundles(server).await;
    let first = bundles.first().cloned().flatten().unwrap_or_default();
    assert!(bundles.iter().all(|b| b.as_deref() == Some(first.as_slice())), "webhooks disagree: {bundles:?}");
    first
}

fn certificates(pem: &[u8]) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem).map(|cert| cert.expect("a PEM certificate")).collect()
}

/// `(ca.crt, ca-next.crt)` of a Secret, PEM (empty when absent).
fn cas_of(secret: &Secret) -> (String, String) {
    let data = secret.data.clone().unwrap_or_default();
    let text = |key: &str| String::from_utf8(data.get(key).map(|b| b.0.clone()).unwrap_or_default()).expect("PEM");
    (text("ca.crt"), text("ca-next.crt"))
}

#[tokio::test]
async fn the_ca_is_rotated_without_a_call_the_apiserver_distrusts() {
    let server = FakeApiServer::start().await.expect("bind");
    let kubeconfig = KubeconfigFile::new(&server.url()).expect("kubeconfig");
    let ports = [free_port(), free_port()];
    let (proxy, _proxy) = round_robin(ports.iter().map(|p| SocketAddr::from(([127, 0, 0, 1], *p))).collect()).await;
    cluster(&server, proxy).await;
    let mut replicas: Vec<Replica> =
        ports.iter().map(|port| start_with(&kubeconfig, *port, "3s", "500ms", &["--ca-validity", "12s"])).collect();
    wait_ready(&mut replicas).await;
    let (first_ca, _) = stored(&server).await;
    wait_for_ca_bundle(&server, &first_ca).await;
    let mark = server.requests().mark();

    // every (ca.crt, ca-next.crt) the Secret held, in order
    let versions: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let watching = {
        let versions = versions.clone();
        let secrets: Api<Secret> = Api::namespaced(client(&server), NAMESPACE);
        tokio::spawn(async move {
            let config = watcher::Config::default().fields(&format!("metadata.name={SECRET}"));
            let mut events = std::pin::pin!(watcher::watcher(secrets, config));
            while let Some(event) = events.next().await {
                let (watcher::Event::Apply(secret) | watcher::Event::InitApply(secret)) = event.expect("watch") else {
                    continue;
                };
                let mut versions = versions.lock().expect("lock");
                let cas = cas_of(&secret);
                if versions.last() != Some(&cas) {
                    versions.push(cas);
                }
            }
        })
    };

    // node writes through the apiserver (which trusts caBundle as it is at each call)
    // and handshakes with each replica trusting only the caBundle read just before,
    // until the old CA has left caBundle, and a little longer
    let mut bundles: Vec<Vec<CertificateDer<'static>>> = Vec::new();
    let started = Instant::now();
    let mut retired_at = None;
    let mut round = 0;
    while retired_at.is_none_or(|at: Instant| at.elapsed() < Duration::from_secs(1)) {
        assert!(started.elapsed() < Duration::from_secs(30), "the CA was not rotated within 30 s: {bundles:?}");
        assert_eq!(taint(&server).await, vec!["NoSchedule"], "round {round} at {:?}", started.elapsed());
        let bundle = published(&server).await;
        let trusted = certificates(&bundle);
        for replica in &replicas {
            let client = client_config(&trusted, None, rustls::DEFAULT_VERSIONS);
            let response = https_get(replica.addr, "/healthz", client)
                .await
                .unwrap_or_else(|e| panic!("{} at {:?} distrusted: {e}", replica.addr, started.elapsed()));
            assert_eq!(response.status, 200);
        }
        if bundles.last() != Some(&trusted) {
            bundles.push(trusted.clone());
        }
        if retired_at.is_none() && !trusted.contains(&der(&first_ca)) {
            retired_at = Some(Instant::now());
        }
        round += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop(replicas).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    watching.abort();

    // caBundle: the old CA, then old and next, then the next alone
    let versions = versions.lock().expect("lock").clone();
    let (second_ca, _) = versions.last().cloned().expect("versions");
    assert_ne!(second_ca, first_ca, "the CA changed");
    let (old, new) = (der(&first_ca), der(&second_ca));
    let expected = [vec![old.clone()], vec![old.clone(), new.clone()], vec![new.clone()]];
    assert_eq!(bundles.get(..3), Some(&expected[..]), "caBundle went {bundles:?}");
    // the Secret: announced once, switched once (one writer per step, whichever replica)
    let steps: Vec<(bool, bool)> = versions
        .iter()
        .map(|(ca, next)| (ca == &first_ca, next.is_empty()))
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|pair| pair[0] != pair[1])
        .map(|pair| pair[1])
        .collect();
    assert_eq!(steps.get(..2), Some(&[(true, false), (false, true)][..]), "announced, then switched: {versions:?}");
    assert!(versions.iter().all(|(_, next)| next.is_empty() || *next == second_ca), "one next CA only: {versions:?}");
    let patches = server
        .requests()
        .since(mark)
        .into_iter()
        .filter(|r| r.method == "PATCH" && r.path.contains("mutatingwebhookconfigurations") && r.status < 300)
        .count();
    assert!(patches >= 2, "caBundle patched to add and to drop: {patches}");
}
