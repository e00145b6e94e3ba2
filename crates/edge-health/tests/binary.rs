//! The shipped `edge-health` binary, end to end over HTTP: five daemons, one per node of a
//! unit, each on its own loopback address (127.0.0.11..15) with a check target of its own
//! on that address, sharing one fake apiserver. All healthy: nobody is annotated and a
//! removed address annotation is put back. One daemon and its target stopped: that node
//! alone gets `nodeunhealth: "yes"` within the detection time, in exactly one write.
//! Brought back: the annotation is removed. With the API server refusing Node requests
//! the unit still votes a dead node down locally and the verdict is written once the API
//! is back. Frames a test forges (bad MAC, replay, unknown sender, skew, misdirected,
//! garbage) are refused with their status and metric, a rotated key file is used without
//! a restart, peers without an address are not probed and stay undecided; SuperEdge node
//! units follow the `edge-health-config` ConfigMap; a configuration that cannot work is a
//! start-up error saying why.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use controller_support::testing::{KubeconfigFile, RunningBinary, TempDir, http_get, sample};
use edge_health::message::{HmacKey, Message, Payload, seal_message};
use edge_health::time::Timestamp;
use edgegrid_core::health::{LocalVerdicts, Verdict};
use edgegrid_core::keys::{
    EDGE_HEALTH_ADDRESS_ANNOTATION, EDGE_HEALTH_CONFIGMAP, NODE_UNHEALTH_ANNOTATION, NODE_UNIT_LABEL_VALUE,
};
use fake_apiserver::{FakeApiServer, Fault};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;
use tokio::time::Instant;

const KEY: &[u8] = b"a unit key of at least thirty-two bytes, for tests only";
const PERIOD: Duration = Duration::from_millis(400);
const VOTE_WINDOW: u64 = 3;
/// From a node's death to its annotation: the vote window's ballots about it turn over
/// (all assigned checkers then say unhealthy), the next evaluation decides, the writer
/// writes at once; plus one period for the death to fall on a period start, and slack
/// for a loaded machine.
const DETECTION: Duration = Duration::from_millis(400 * (VOTE_WINDOW + 2) + 1_500);
/// SIGTERM to exit.
const PROMPT_EXIT: Duration = Duration::from_secs(3);

fn client(server: &FakeApiServer) -> kube::Client {
    kube::Client::try_from(kube::Config::new(server.url().parse().expect("url"))).expect("client")
}

/// A port free on every address given (tried on each, as nothing else binds 127.0.0.1x).
fn common_port(ips: &[IpAddr]) -> u16 {
    for _ in 0..20 {
        let port = std::net::TcpListener::bind((ips[0], 0)).and_then(|l| l.local_addr()).expect("bind").port();
        if ips.iter().all(|ip| std::net::TcpListener::bind((*ip, port)).is_ok()) {
            return port;
        }
    }
    panic!("no port free on all of {ips:?}");
}

/// The `/healthz` a node's checks probe (its kubelet, in production).
struct Target(JoinHandle<()>);

impl Target {
    async fn start(address: SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind(address).await.expect("bind the check target");
        let app = axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok" }));
        Self(tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") }))
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.0.abort();
    }
}

struct Member {
    name: String,
    ip: IpAddr,
    daemon: Option<RunningBinary>,
    target: Option<Target>,
}

/// Daemons sharing a key, a fake apiserver, an exchange port and a check port.
struct Cluster {
    server: FakeApiServer,
    kubeconfig: KubeconfigFile,
    dir: TempDir,
    exchange_port: u16,
    check_port: u16,
    unit: String,
}

impl Cluster {
    async fn new(unit: &str, ips: &[IpAddr]) -> Self {
        let server = FakeApiServer::start().await.expect("fake apiserver");
        let kubeconfig = KubeconfigFile::new(&server.url()).expect("kubeconfig");
        let dir = TempDir::new("edge-health-test").expect("temp dir");
        std::fs::write(dir.join("key"), KEY).expect("key");
        let exchange_port = common_port(ips);
        let check_port = common_port(ips);
        Self { server, kubeconfig, dir, exchange_port, check_port, unit: unit.into() }
    }

    /// A Node in the unit (label `site`; with node units, labels `unit` alone).
    async fn create_node(&self, name: &str) {
        self.create_node_labelled(name, json!({"site": self.unit})).await;
    }

    async fn create_node_labelled(&self, name: &str, labels: serde_json::Value) {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).expect("node");
        Api::<Node>::all(client(&self.server)).create(&PostParams::default(), &node).await.expect("create node");
    }

    fn args(&self, member: &Member) -> Vec<String> {
        let address = SocketAddr::new(member.ip, self.exchange_port).to_string();
        [
            "--kubeconfig",
            &self.kubeconfig.arg(),
            "--node-name",
            &member.name,
            "--bind-address",
            &address,
            "--metrics-bind-address",
            &address,
            "--advertise-address",
            &member.ip.to_string(),
            "--hmac-key-file",
            &self.dir.join("key").display().to_string(),
            "--check",
            &format!("kind=http,port={},path=/healthz,timeout=100ms", self.check_port),
            "--period",
            &format!("{}ms", PERIOD.as_millis()),
            "--probes-per-period",
            "2",
            "--indirect-helpers",
            "2",
            "--indirect-timeout",
            "100ms",
            "--vote-window",
            &VOTE_WINDOW.to_string(),
            "--max-clock-skew",
            "5s",
            "--message-timeout",
            "150ms",
            "--shutdown-grace-period",
            "2s",
            "--key-reload-interval",
            "100ms",
            "--key-rotation-overlap",
            "1500ms",
            "--peer-cache-file",
            &self.peer_cache(member).display().to_string(),
        ]
        .map(String::from)
        .into_iter()
        // node-units mode: units from `<unit>=nodeunits.superedge.io` and the ConfigMap
        .chain(
            (!self.unit.is_empty()).then(|| ["--unit-label-key".to_string(), "site".to_string()]).into_iter().flatten(),
        )
        .collect()
    }

    /// Where `member`'s daemon keeps its peers.
    fn peer_cache(&self, member: &Member) -> std::path::PathBuf {
        self.dir.join(&format!("{}.peers.json", member.name))
    }

    async fn start(&self, member: &mut Member) {
        member.target = Some(Target::start(SocketAddr::new(member.ip, self.check_port)).await);
        let daemon = RunningBinary::start(env!("CARGO_BIN_EXE_edge-health"), &self.args(member)).expect("starts");
        member.daemon = Some(daemon);
    }

    fn address(&self, member: &Member) -> SocketAddr {
        SocketAddr::new(member.ip, self.exchange_port)
    }

    async fn node(&self, name: &str) -> Node {
        Api::<Node>::all(client(&self.server)).get(name).await.expect("get node")
    }

    async fn annotations(&self, name: &str) -> BTreeMap<String, String> {
        self.node(name).await.metadata.annotations.unwrap_or_default()
    }

    async fn unhealth(&self, name: &str) -> Option<String> {
        self.annotations(name).await.get(NODE_UNHEALTH_ANNOTATION).cloned()
    }

    /// Successful and refused PATCHes of `name` since `mark`.
    fn patches(&self, name: &str, mark: u64) -> (usize, usize) {
        let path = format!("/api/v1/nodes/{name}");
        let patches: Vec<u16> = self
            .server
            .requests()
            .since(mark)
            .into_iter()
            .filter(|r| r.method == "PATCH" && r.path == path)
            .map(|r| r.status)
            .collect();
        let ok = patches.iter().filter(|s| (200..300).contains(*s)).count();
        (ok, patches.len() - ok)
    }
}

async fn verdicts(address: SocketAddr) -> Option<LocalVerdicts> {
    let (status, body) = http_get(address, "/verdicts").await?;
    if status != 200 {
        return None;
    }
    Some(serde_json::from_str(&body).unwrap_or_else(|e| panic!("/verdicts is not LocalVerdicts: {e}: {body}")))
}

/// The sample `name{labels}` of `/metrics` as a number (0 when absent).
async fn metric(address: SocketAddr, series: &str) -> f64 {
    let (_, exposition) = http_get(address, "/metrics").await.expect("/metrics answers");
    sample(&exposition, series).map(|v| v.parse().expect("a number")).unwrap_or(0.0)
}

/// `POST path` with `body` over HTTP/1.0: the status and body.
async fn http_post(address: SocketAddr, path: &str, body: &[u8]) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(address).await.expect("connect");
    let head = format!(
        "POST {path} HTTP/1.0\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    stream.write_all(body).await.expect("write");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.expect("read");
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").expect("a response");
    (head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("a status"), body.to_string())
}

/// Polls `check` every 50 ms until it returns `Some`, failing after `limit` with `what`.
async fn until<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    limit: Duration,
    mut check: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every member's view has exactly `expected`.
async fn views_agree(cluster: &Cluster, members: &[Member], expected: &BTreeMap<String, Verdict>) -> Option<()> {
    for member in members.iter().filter(|m| m.daemon.is_some()) {
        let view = verdicts(cluster.address(member)).await?;
        let got: BTreeMap<String, Verdict> = view.nodes.iter().map(|(n, v)| (n.clone(), v.verdict)).collect();
        if view.node != member.name || &got != expected {
            return None;
        }
    }
    Some(())
}

fn expect(names: &[String], unhealthy: &[&str]) -> BTreeMap<String, Verdict> {
    names
        .iter()
        .map(|n| (n.clone(), if unhealthy.contains(&n.as_str()) { Verdict::Unhealthy } else { Verdict::Healthy }))
        .collect()
}

/// With `EDGE_HEALTH_TEST_LOGS` set, prints a daemon's logs.
fn show_logs(name: &str, logs: &str) {
    if std::env::var_os("EDGE_HEALTH_TEST_LOGS").is_some() {
        eprintln!("==== {name}\n{logs}");
    }
}

fn loopback(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_node_alone_is_annotated_once_and_cleared_when_back() {
    let ips: Vec<IpAddr> = (11..=15).map(loopback).collect();
    let cluster = Cluster::new("a", &ips).await;
    let mut members: Vec<Member> = ips
        .iter()
        .enumerate()
        .map(|(i, ip)| Member { name: format!("edge-{}", i + 1), ip: *ip, daemon: None, target: None })
        .collect();
    let names: Vec<String> = members.iter().map(|m| m.name.clone()).collect();
    for member in &mut members {
        cluster.create_node(&member.name).await;
        cluster.start(member).await;
    }
    for member in &mut members {
        let address = cluster.address(member);
        let daemon = member.daemon.as_mut().expect("started");
        until("ready", Duration::from_secs(15), || async {
            http_get(address, "/readyz").await.filter(|(status, _)| *status == 200)
        })
        .await;
        daemon.assert_running();
    }

    // (1) all healthy: every daemon publishes its address, every view says healthy, and
    // nobody is annotated or written to
    let healthy = expect(&names, &[]);
    until("every view healthy", Duration::from_secs(20), || views_agree(&cluster, &members, &healthy)).await;
    for member in &members {
        let annotations = cluster.annotations(&member.name).await;
        let address = cluster.address(member).to_string();
        assert_eq!(annotations.get(EDGE_HEALTH_ADDRESS_ANNOTATION), Some(&address), "{}", member.name);
        assert_eq!(annotations.get(NODE_UNHEALTH_ANNOTATION), None, "{}", member.name);
        let written =
            metric(cluster.address(member), r#"edge_health_writes_total{target="verdict",outcome="written"}"#);
        assert_eq!(written.await, 0.0, "{} wrote a verdict while everyone is healthy", member.name);
    }
    // an address annotation someone removes is put back
    let nodes: Api<Node> = Api::all(client(&cluster.server));
    let removal = json!({"metadata": {"annotations": {EDGE_HEALTH_ADDRESS_ANNOTATION: null}}});
    nodes.patch("edge-5", &PatchParams::default(), &Patch::Merge(&removal)).await.expect("remove the address");
    let edge5 = cluster.address(&members[4]).to_string();
    until("edge-5's address re-published", Duration::from_secs(5), || async {
        (cluster.annotations("edge-5").await.get(EDGE_HEALTH_ADDRESS_ANNOTATION) == Some(&edge5)).then_some(())
    })
    .await;
    let view = verdicts(cluster.address(&members[0])).await.expect("view");
    let tally = &view.nodes["edge-3"];
    assert!(tally.eligible >= 2 && tally.healthy * 2 > tally.eligible, "a majority behind the verdict: {tally:?}");

    // (2) edge-3's daemon and its target stop: it alone is annotated, in one write
    let mark = cluster.server.requests().mark();
    let dead = &mut members[2];
    dead.target = None;
    let exit = dead.daemon.take().expect("running").terminate(PROMPT_EXIT).await.expect("exits on SIGTERM");
    assert!(exit.status.success() && exit.took < PROMPT_EXIT, "SIGTERM: {:?} after {:?}", exit.status, exit.took);
    let stopped = Instant::now();
    until("edge-3 annotated", DETECTION, || async {
        (cluster.unhealth("edge-3").await.as_deref() == Some("yes")).then_some(())
    })
    .await;
    let detected = stopped.elapsed();
    let down = expect(&names, &["edge-3"]);
    until("the survivors' views agree", Duration::from_secs(5), || views_agree(&cluster, &members, &down)).await;
    // a few more periods: nobody writes it again, nobody else is accused
    tokio::time::sleep(PERIOD * 4).await;
    assert_eq!(cluster.patches("edge-3", mark), (1, 0), "exactly one write (successful, refused)");
    for name in names.iter().filter(|n| *n != "edge-3") {
        assert_eq!(cluster.unhealth(name).await, None, "{name} accused");
        assert_eq!(cluster.patches(name, mark), (0, 0), "{name} written");
    }
    let writers: f64 = {
        let mut total = 0.0;
        for member in members.iter().filter(|m| m.daemon.is_some()) {
            total += metric(cluster.address(member), r#"edge_health_writes_total{target="verdict",outcome="written"}"#)
                .await;
        }
        total
    };
    assert_eq!(writers, 1.0, "one writer, one write");
    let survivor = cluster.address(&members[0]);
    assert!(metric(survivor, r#"edge_health_verdict_changes_total{verdict="unhealthy"}"#).await >= 1.0);
    assert!(metric(survivor, "edge_health_vote_latency_seconds_count").await >= 1.0);
    assert!(metric(survivor, r#"edge_health_probes_total{check="http",result="failure"}"#).await >= 1.0);

    // (3) back: the annotation is removed
    let back = Instant::now();
    cluster.start(&mut members[2]).await;
    until("edge-3's annotation removed", DETECTION + Duration::from_secs(2), || async {
        cluster.unhealth("edge-3").await.is_none().then_some(())
    })
    .await;
    until("every view healthy again", Duration::from_secs(10), || views_agree(&cluster, &members, &healthy)).await;
    eprintln!("detected in {detected:?} (limit {DETECTION:?}), cleared in {:?}", back.elapsed());
    for member in &mut members {
        let exit = member.daemon.take().expect("running").terminate(PROMPT_EXIT).await.expect("exits on SIGTERM");
        assert!(exit.status.success(), "{}: {:?}\n{}", member.name, exit.status, exit.logs);
        show_logs(&member.name, &exit.logs);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_cloud_link_down_the_unit_votes_locally_and_writes_when_back() {
    let ips: Vec<IpAddr> = (31..=33).map(loopback).collect();
    let cluster = Cluster::new("c", &ips).await;
    let mut members: Vec<Member> = ips
        .iter()
        .enumerate()
        .map(|(i, ip)| Member { name: format!("site-c-{}", i + 1), ip: *ip, daemon: None, target: None })
        .collect();
    let names: Vec<String> = members.iter().map(|m| m.name.clone()).collect();
    for member in &mut members {
        cluster.create_node(&member.name).await;
        cluster.start(member).await;
    }
    let healthy = expect(&names, &[]);
    until("every view healthy", Duration::from_secs(20), || views_agree(&cluster, &members, &healthy)).await;

    // the API server stops answering for Nodes; then site-c-3 dies
    cluster.server.set_fault("nodes", Fault::Error(503));
    let mark = cluster.server.requests().mark();
    let dead = &mut members[2];
    dead.target = None;
    dead.daemon.take().expect("running").terminate(PROMPT_EXIT).await.expect("exits on SIGTERM");
    let down = expect(&names, &["site-c-3"]);
    until("voted down locally", DETECTION, || views_agree(&cluster, &members, &down)).await;
    let writer = cluster.address(&members[0]);
    let failed = r#"edge_health_writes_total{target="verdict",outcome="failed"}"#;
    until("the writer tries again each period", Duration::from_secs(5), || async {
        (metric(writer, failed).await >= 2.0).then_some(())
    })
    .await;
    assert_eq!(cluster.patches("site-c-3", mark).0, 0, "nothing written while the API server refuses");

    // the link is back: the verdict lands, once
    cluster.server.clear_faults();
    until("site-c-3 annotated", PERIOD * 3 + Duration::from_secs(2), || async {
        (cluster.unhealth("site-c-3").await.as_deref() == Some("yes")).then_some(())
    })
    .await;
    tokio::time::sleep(PERIOD * 2).await;
    assert_eq!(cluster.patches("site-c-3", mark).0, 1, "one successful write");
    assert_eq!(cluster.unhealth("site-c-2").await, None);
    for member in &mut members {
        if let Some(daemon) = member.daemon.take() {
            let exit = daemon.terminate(PROMPT_EXIT).await.expect("exits on SIGTERM");
            show_logs(&member.name, &exit.logs);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_replayed_and_stray_frames_are_refused() {
    let ip = loopback(21);
    let cluster = Cluster::new("b", &[ip]).await;
    // "ghost" is a member without a daemon, so without an address
    cluster.create_node("ghost").await;
    cluster.create_node("solo").await;
    let mut solo = Member { name: "solo".into(), ip, daemon: None, target: None };
    cluster.start(&mut solo).await;
    let address = cluster.address(&solo);
    // once its view lists both, the daemon knows ghost as a peer
    let view = until("solo's view", Duration::from_secs(15), || async {
        verdicts(address).await.filter(|v| v.nodes.len() == 2)
    })
    .await;
    assert_eq!(view.node, "solo");
    // a peer without an address is not probed, for periods on end, and stays undecided
    until("ghost skipped for 3 periods", Duration::from_secs(5), || async {
        (metric(address, "edge_health_probes_skipped_total").await >= 3.0).then_some(())
    })
    .await;
    assert_eq!(metric(address, r#"edge_health_probes_total{check="http",result="failure"}"#).await, 0.0);
    let view = verdicts(address).await.expect("view");
    assert!(view.nodes.values().all(|v| v.verdict == Verdict::Undecided), "nobody probes ghost or hears from it");

    let key = HmacKey::new(KEY).expect("key");
    let now = || {
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970");
        Timestamp::from_unix_millis(since.as_millis() as u64)
    };
    let message = |sender: &str, timestamp: Timestamp, sequence: u64, recipient: Option<&str>| Message {
        sender: sender.into(),
        timestamp,
        sequence,
        recipient: recipient.map(String::from),
        payload: Payload::Results { ballots: BTreeMap::new() },
    };
    let valid = seal_message(&key, &message("ghost", now(), 1, None));
    assert_eq!(http_post(address, "/exchange", &valid).await.0, 204, "a member's sealed results are taken");
    let other_key = HmacKey::new(&[7; 32]).expect("key");
    let hour = Duration::from_secs(3600);
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        ("replay", valid.clone(), 401, "replay"),
        ("bad MAC", seal_message(&other_key, &message("ghost", now(), 2, None)), 401, "bad_mac"),
        ("unknown sender", seal_message(&key, &message("stranger", now(), 3, None)), 401, "unknown_sender"),
        ("old timestamp", seal_message(&key, &message("ghost", now().saturating_sub(hour), 4, None)), 401, "skew"),
        ("for another node", seal_message(&key, &message("ghost", now(), 5, Some("edge-9"))), 401, "misdirected"),
        ("garbage", b"{not a frame".to_vec(), 400, "malformed"),
    ];
    for (what, frame, status, reason) in cases {
        let series = format!(r#"edge_health_messages_rejected_total{{reason="{reason}"}}"#);
        let before = metric(address, &series).await;
        let (got, body) = http_post(address, "/exchange", &frame).await;
        assert_eq!(got, status, "{what}: {body}");
        assert_eq!(metric(address, &series).await, before + 1.0, "{what} counted as {reason}");
    }
    assert_eq!(metric(address, r#"edge_health_messages_accepted_total{kind="results"}"#).await, 1.0);

    // the Secret rotates: the new key is used without a restart, the old one refused
    let new_key = b"the unit's next key, also thirty-two bytes or more";
    let rotate = |contents: &[u8]| {
        let (temporary, path) = (cluster.dir.join(".key.new"), cluster.dir.join("key"));
        std::fs::write(&temporary, contents).expect("write");
        std::fs::rename(temporary, path).expect("rename");
    };
    rotate(new_key);
    let sequence = std::sync::atomic::AtomicU64::new(100);
    let next = || sequence.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let rotated = HmacKey::new(new_key).expect("key");
    until("frames under the new key accepted", Duration::from_secs(5), || async {
        let frame = seal_message(&rotated, &message("ghost", now(), next(), None));
        (http_post(address, "/exchange", &frame).await.0 == 204).then_some(())
    })
    .await;
    assert_eq!(metric(address, r#"edge_health_key_reloads_total{result="loaded"}"#).await, 1.0);
    let rotated_at = Instant::now();
    let old = seal_message(&key, &message("ghost", now(), next(), None));
    assert_eq!(http_post(address, "/exchange", &old).await.0, 204, "the old key within --key-rotation-overlap");
    until("the old key refused after the overlap", Duration::from_secs(5), || async {
        let old = seal_message(&key, &message("ghost", now(), next(), None));
        (http_post(address, "/exchange", &old).await.0 == 401).then_some(())
    })
    .await;
    let overlap = rotated_at.elapsed();
    assert!(overlap >= Duration::from_millis(1000), "refused after only {overlap:?} of a 1.5 s overlap");
    // a key too short to use is reported and the key in use kept
    rotate(b"short");
    until("the short key refused", Duration::from_secs(5), || async {
        (metric(address, r#"edge_health_key_reloads_total{result="invalid"}"#).await == 1.0).then_some(())
    })
    .await;
    let frame = seal_message(&rotated, &message("ghost", now(), next(), None));
    assert_eq!(http_post(address, "/exchange", &frame).await.0, 204, "still the rotated key");

    let exit = solo.daemon.take().expect("running").terminate(PROMPT_EXIT).await.expect("exits on SIGTERM");
    assert!(exit.status.success() && exit.took < PROMPT_EXIT, "{:?} after {:?}", exit.status, exit.took);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_units_follow_the_edge_health_config_config_map() {
    let ip = loopback(41);
    // no unit label key: SuperEdge node units
    let cluster = Cluster::new("", &[ip]).await;
    let unit = |name: &str| json!({name: NODE_UNIT_LABEL_VALUE});
    cluster.create_node_labelled("solo", unit("u1")).await;
    cluster.create_node_labelled("ghost", unit("u1")).await;
    cluster.create_node_labelled("other", unit("u2")).await;
    // kube-system exists from the start, as in a real cluster
    let config_maps: Api<ConfigMap> = Api::namespaced(client(&cluster.server), "kube-system");
    let u1_only: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": EDGE_HEALTH_CONFIGMAP},
        "data": {"unit-internal-check": "true", "check-units": "u1"},
    }))
    .expect("config map");
    config_maps.create(&PostParams::default(), &u1_only).await.expect("config map");
    let mut solo = Member { name: "solo".into(), ip, daemon: None, target: None };
    cluster.start(&mut solo).await;
    let address = cluster.address(&solo);
    let members = |names: &'static [&'static str]| async move {
        let view = verdicts(address).await?;
        view.nodes.keys().map(String::as_str).eq(names.iter().copied()).then_some(())
    };
    until("u1 only, as listed", Duration::from_secs(15), || members(&["ghost", "solo"])).await;
    config_maps.delete(EDGE_HEALTH_CONFIGMAP, &Default::default()).await.expect("delete");
    until("no ConfigMap: the whole cluster", Duration::from_secs(5), || members(&["ghost", "other", "solo"])).await;
    config_maps.create(&PostParams::default(), &u1_only).await.expect("config map");
    until("u1 only, as created", Duration::from_secs(5), || members(&["ghost", "solo"])).await;
    let off = json!({"data": {"unit-internal-check": "false"}});
    config_maps.patch(EDGE_HEALTH_CONFIGMAP, &PatchParams::default(), &Patch::Merge(&off)).await.expect("patch");
    until("unit checking off: the whole cluster", Duration::from_secs(5), || members(&["ghost", "other", "solo"]))
        .await;
    let exit = solo.daemon.take().expect("running").terminate(PROMPT_EXIT).await.expect("exits on SIGTERM");
    assert!(exit.status.success(), "{:?}", exit.status);
}

#[tokio::test]
async fn configurations_that_cannot_work_are_start_up_errors() {
    let dir = TempDir::new("edge-health-config").expect("temp dir");
    std::fs::write(dir.join("short"), b"sixteen byte key").expect("key");
    std::fs::write(dir.join("key"), KEY).expect("key");
    let check = "kind=tcp,port=10250,timeout=1s".to_string();
    let base = |key: &str| -> Vec<String> {
        ["--node-name", "n1", "--advertise-address", "10.244.0.1", "--hmac-key-file", key].map(String::from).to_vec()
    };
    let missing = dir.join("missing").display().to_string();
    let short = dir.join("short").display().to_string();
    let good = dir.join("key").display().to_string();
    let cases: Vec<(&str, Vec<String>, &[&str])> = vec![
        (
            "missing key",
            [base(&missing), vec!["--check".into(), check.clone()]].concat(),
            &["--hmac-key-file", "missing"],
        ),
        ("short key", [base(&short), vec!["--check".into(), check.clone()]].concat(), &["16 bytes", "at least 32"]),
        ("no check", base(&good), &["no check configured"]),
        (
            "checks slower than the period",
            [base(&good), vec!["--check".into(), check.clone(), "--period".into(), "1s".into()]].concat(),
            &["not less than the period"],
        ),
    ];
    for (what, args, says) in cases {
        let exit = RunningBinary::start(env!("CARGO_BIN_EXE_edge-health"), &args)
            .expect("starts")
            .wait(Duration::from_secs(10))
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(!exit.status.success(), "{what}: exited {:?}", exit.status);
        for words in says {
            assert!(exit.logs.contains(words), "{what}: {words:?} not in\n{}", exit.logs);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_restarted_while_the_api_server_is_away_resumes_from_its_peer_cache() {
    let ips: Vec<IpAddr> = (51..=53).map(loopback).collect();
    let cluster = Cluster::new("d", &ips).await;
    let mut members: Vec<Member> = ips
        .iter()
        .enumerate()
        .map(|(i, ip)| Member { name: format!("site-d-{}", i + 1), ip: *ip, daemon: None, target: None })
        .collect();
    let names: Vec<String> = members.iter().map(|m| m.name.clone()).collect();
    for member in &mut members {
        cluster.create_node(&member.name).await;
        cluster.start(member).await;
    }
    let healthy = expect(&names, &[]);
    until("every view healthy", Duration::from_secs(20), || views_agree(&cluster, &members, &healthy)).await;
    // the cache holds the unit with every address once the addresses are published
    let cache = cluster.peer_cache(&members[0]);
    until("site-d-1's peer cache lists the unit with addresses", Duration::from_secs(5), || async {
        let cache: serde_json::Value = serde_json::from_slice(&std::fs::read(&cache).ok()?).ok()?;
        let nodes = cache["nodes"].as_array()?;
        let addressed = nodes.iter().filter(|n| n["annotations"][EDGE_HEALTH_ADDRESS_ANNOTATION].is_string()).count();
        (nodes.len() == 3 && addressed == 3).then_some(())
    })
    .await;

    // the cloud link goes; site-d-1's daemon restarts (a reboot, an upgrade) meanwhile
    cluster.server.set_fault("nodes", Fault::Error(503));
    let restarted = &mut members[0];
    restarted.target = None;
    restarted.daemon.take().expect("running").terminate(PROMPT_EXIT).await.expect("exits on SIGTERM");
    cluster.start(restarted).await;
    let address = cluster.address(&members[0]);
    // it cannot list a single Node, yet it knows, probes and votes on its unit
    until("the restarted daemon's view lists the unit", Duration::from_secs(10), || async {
        verdicts(address).await.filter(|v| v.nodes.len() == 3).map(|_| ())
    })
    .await;
    until("every view healthy again", DETECTION, || views_agree(&cluster, &members, &healthy)).await;
    let dead = &mut members[2];
    dead.target = None;
    dead.daemon.take().expect("running").terminate(PROMPT_EXIT).await.expect("exits on SIGTERM");
    let down = expect(&names, &["site-d-3"]);
    until("voted down, the restarted daemon included", DETECTION, || views_agree(&cluster, &members, &down)).await;
    cluster.server.clear_faults();
    until("site-d-3 annotated once the link is back", PERIOD * 3 + Duration::from_secs(2), || async {
        (cluster.unhealth("site-d-3").await.as_deref() == Some("yes")).then_some(())
    })
    .await;
    for member in &mut members {
        if let Some(daemon) = member.daemon.take() {
            let exit = daemon.terminate(PROMPT_EXIT).await.expect("exits on SIGTERM");
            assert!(exit.status.success(), "{}: {:?}", member.name, exit.status);
            show_logs(&member.name, &exit.logs);
        }
    }
}
