//! What the end-to-end tests of the `edge-health` binary share: a unit of daemons (one per
//! node) started against one fake apiserver, each on an address of its own (a loopback
//! address, or one in a network namespace of its own), and the ways a test reads them: the
//! Node annotations and PATCHes the fake apiserver saw, each daemon's `/verdicts` and
//! `/metrics`, polling until a condition holds.

#![allow(dead_code, reason = "each test binary uses a different subset")]

pub mod adversary;
pub mod network;
pub mod network_check;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use edgegrid_core::keys::NODE_UNHEALTH_ANNOTATION;
use edgegrid_core::unit::local_verdicts::{LocalVerdicts, Verdict};
use edgegrid_testing::{Exit, KubeconfigFile, RunningBinary, TempDir, http_get, sample};
use fake_apiserver::FakeApiServer;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub const KEY: &[u8] = b"a unit key of at least thirty-two bytes, for tests only";
/// SIGTERM to exit.
pub const PROMPT_EXIT: Duration = Duration::from_secs(3);
/// The daemon under test.
pub const BINARY: &str = env!("CARGO_BIN_EXE_edge-health");

pub fn client(server: &FakeApiServer) -> kube::Client {
    kube::Client::try_from(kube::Config::new(server.url().parse().expect("url"))).expect("client")
}

/// `127.0.0.<last>`: each test's members have addresses of their own.
pub fn loopback(last: u8) -> IpAddr {
    IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, last))
}

/// `POST path` with `body` over HTTP/1.0: the status and body, `None` when the exchange
/// fails (nothing listens, the connection is cut).
pub async fn http_post(address: SocketAddr, path: &str, body: &[u8]) -> Option<(u16, String)> {
    http_send(address, "POST", path, body).await
}

/// `method path` with `body` over HTTP/1.0, as [`http_post`].
pub async fn http_send(address: SocketAddr, method: &str, path: &str, body: &[u8]) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
    let head = format!(
        "{method} {path} HTTP/1.0\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.ok()?;
    stream.write_all(body).await.ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.ok()?;
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n")?;
    Some((head.split_whitespace().nth(1)?.parse().ok()?, body.to_string()))
}

/// A port free on every address given (tried on each, as nothing else binds 127.0.0.1x).
pub fn common_port(ips: &[IpAddr]) -> u16 {
    for _ in 0..20 {
        let port = std::net::TcpListener::bind((ips[0], 0)).and_then(|l| l.local_addr()).expect("bind").port();
        if ips.iter().all(|ip| std::net::TcpListener::bind((*ip, port)).is_ok()) {
            return port;
        }
    }
    panic!("no port free on all of {ips:?}");
}

/// The `/healthz` a node's checks probe (its kubelet, in production).
pub struct Target(JoinHandle<()>);

impl Target {
    pub async fn start(address: SocketAddr) -> Self {
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

/// What the peers' checks of a node probe.
#[derive(Clone, Copy, Debug)]
pub enum CheckTarget {
    /// A [`Target`] the test runs beside each daemon, on this port of the node's address.
    Own { port: u16 },
    /// The daemon's own `/healthz` on its exchange port: stopping the daemon stops the
    /// node's target with it.
    DaemonHealthz,
}

/// The protocol flags the daemons of a cluster run with.
#[derive(Clone, Copy, Debug)]
pub struct Protocol {
    pub period: Duration,
    pub vote_window: u64,
    pub probes_per_period: usize,
    pub indirect_helpers: usize,
    pub indirect_timeout: Duration,
    pub message_timeout: Duration,
    /// Per attempt of the HTTP check.
    pub check_timeout: Duration,
    /// Attempts of the HTTP check after the first failed one.
    pub check_retries: u32,
}

pub struct Member {
    pub name: String,
    pub ip: IpAddr,
    /// The network namespace the daemon runs in (the test's own when `None`).
    pub namespace: Option<String>,
    pub daemon: Option<RunningBinary>,
    pub target: Option<Target>,
}

impl Member {
    pub fn new(name: impl Into<String>, ip: IpAddr) -> Self {
        Self { name: name.into(), ip, namespace: None, daemon: None, target: None }
    }

    pub fn in_namespace(name: impl Into<String>, ip: IpAddr, namespace: impl Into<String>) -> Self {
        Self { namespace: Some(namespace.into()), ..Self::new(name, ip) }
    }

    /// Sends SIGTERM to the daemon and stops its target; the daemon must exit 0 within
    /// [`PROMPT_EXIT`].
    pub async fn stop(&mut self) -> Exit {
        self.target = None;
        let daemon = self.daemon.take().unwrap_or_else(|| panic!("{} is not running", self.name));
        let exit = daemon.terminate(PROMPT_EXIT).await.unwrap_or_else(|e| panic!("{}: {e}", self.name));
        assert!(
            exit.status.success() && exit.took < PROMPT_EXIT,
            "{} on SIGTERM: {:?} after {:?}\n{}",
            self.name,
            exit.status,
            exit.took,
            exit.logs
        );
        show_logs(&self.name, &exit.logs);
        exit
    }
}

/// Daemons sharing a key, a fake apiserver, an exchange port and a check target.
pub struct Cluster {
    pub server: FakeApiServer,
    pub kubeconfig: KubeconfigFile,
    pub dir: TempDir,
    pub exchange_port: u16,
    pub check: CheckTarget,
    pub protocol: Protocol,
    pub unit: String,
    /// Flags every daemon gets besides the cluster's own.
    pub extra_args: Vec<String>,
}

impl Cluster {
    /// On loopback addresses `ips`: the fake apiserver on 127.0.0.1, a port free on every
    /// one of `ips` for the exchange and one for the check targets.
    pub async fn on_loopback(unit: &str, ips: &[IpAddr], protocol: Protocol) -> Self {
        let server = FakeApiServer::start().await.expect("fake apiserver");
        let exchange_port = common_port(ips);
        // two asks can return the same free port: the check target would then take the
        // daemon's exchange port and the daemon could not start
        let check_port = std::iter::repeat_with(|| common_port(ips)).find(|p| *p != exchange_port).expect("a port");
        let check = CheckTarget::Own { port: check_port };
        Self::new(unit, server, exchange_port, check, protocol)
    }

    pub fn new(unit: &str, server: FakeApiServer, exchange_port: u16, check: CheckTarget, protocol: Protocol) -> Self {
        let kubeconfig = KubeconfigFile::new(&server.url()).expect("kubeconfig");
        let dir = TempDir::new("edge-health-test").expect("temp dir");
        std::fs::write(dir.join("key"), KEY).expect("key");
        Self { server, kubeconfig, dir, exchange_port, check, protocol, unit: unit.into(), extra_args: Vec::new() }
    }

    /// A Node in the unit (label `site`; with node units, labels `unit` alone).
    pub async fn create_node(&self, name: &str) {
        self.create_node_labelled(name, json!({"site": self.unit})).await;
    }

    pub async fn create_node_labelled(&self, name: &str, labels: serde_json::Value) {
        self.create_node_annotated(name, labels, json!({})).await;
    }

    /// A Node with these labels and annotations (e.g. the address a daemon the test does
    /// not run would publish).
    pub async fn create_node_annotated(&self, name: &str, labels: serde_json::Value, annotations: serde_json::Value) {
        let metadata = json!({"name": name, "labels": labels, "annotations": annotations});
        let node: Node = serde_json::from_value(json!({"metadata": metadata})).expect("node");
        Api::<Node>::all(client(&self.server)).create(&PostParams::default(), &node).await.expect("create node");
    }

    /// Where `member`'s daemon keeps its peers.
    pub fn peer_cache(&self, member: &Member) -> std::path::PathBuf {
        self.dir.join(&format!("{}.peers.json", member.name))
    }

    pub fn args(&self, member: &Member) -> Vec<String> {
        let address = SocketAddr::new(member.ip, self.exchange_port).to_string();
        let p = &self.protocol;
        let check_port = match self.check {
            CheckTarget::Own { port } => port,
            CheckTarget::DaemonHealthz => self.exchange_port,
        };
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
            "--signing-key-file",
            &self.dir.join(&format!("{}.signing-key", member.name)).display().to_string(),
            "--check",
            &format!(
                "kind=http,port={check_port},path=/healthz,timeout={}ms,retries={}",
                p.check_timeout.as_millis(),
                p.check_retries
            ),
            "--period",
            &format!("{}ms", p.period.as_millis()),
            "--probes-per-period",
            &p.probes_per_period.to_string(),
            "--indirect-helpers",
            &p.indirect_helpers.to_string(),
            "--indirect-timeout",
            &format!("{}ms", p.indirect_timeout.as_millis()),
            "--vote-window",
            &p.vote_window.to_string(),
            "--max-clock-skew",
            "5s",
            "--message-timeout",
            &format!("{}ms", p.message_timeout.as_millis()),
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
        .chain(self.extra_args.iter().cloned())
        .collect()
    }

    /// Starts the member's target (if the test runs one) and its daemon, in its namespace
    /// when it has one (`ip netns exec` execs the daemon: the process is the daemon, and
    /// SIGTERM reaches it).
    pub async fn start(&self, member: &mut Member) {
        if let CheckTarget::Own { port } = self.check {
            member.target = Some(Target::start(SocketAddr::new(member.ip, port)).await);
        }
        self.start_daemon(member);
    }

    /// Starts `member`'s daemon alone (its check target, if any, is left as it is).
    pub fn start_daemon(&self, member: &mut Member) {
        let daemon = match &member.namespace {
            None => RunningBinary::start(BINARY, &self.args(member)),
            Some(namespace) => {
                let args = ["netns", "exec", namespace, BINARY].map(String::from).into_iter().chain(self.args(member));
                RunningBinary::start("ip", &args.collect::<Vec<_>>())
            }
        };
        member.daemon = Some(daemon.expect("starts"));
    }

    /// Waits until every running member answers `/readyz` with 200.
    pub async fn ready(&self, members: &mut [Member]) {
        for member in members.iter_mut().filter(|m| m.daemon.is_some()) {
            let address = self.address(member);
            until(&format!("{} ready", member.name), Duration::from_secs(15), || async {
                http_get(address, "/readyz").await.filter(|(status, _)| *status == 200)
            })
            .await;
            member.daemon.as_mut().expect("running").assert_running();
        }
    }

    pub fn address(&self, member: &Member) -> SocketAddr {
        SocketAddr::new(member.ip, self.exchange_port)
    }

    pub async fn node(&self, name: &str) -> Node {
        Api::<Node>::all(client(&self.server)).get(name).await.expect("get node")
    }

    pub async fn annotations(&self, name: &str) -> BTreeMap<String, String> {
        self.node(name).await.metadata.annotations.unwrap_or_default()
    }

    pub async fn unhealth(&self, name: &str) -> Option<String> {
        self.annotations(name).await.get(NODE_UNHEALTH_ANNOTATION).cloned()
    }

    /// Successful and refused PATCHes of `name` since `mark`.
    pub fn patches(&self, name: &str, mark: u64) -> (usize, usize) {
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

    /// The sum of `series` over the running members.
    pub async fn total(&self, members: &[Member], series: &str) -> f64 {
        let mut total = 0.0;
        for member in members.iter().filter(|m| m.daemon.is_some()) {
            total += metric(self.address(member), series).await;
        }
        total
    }

    /// [`Self::total`] of every series starting with `prefix` (see [`metric_sum`]).
    pub async fn total_of_prefix(&self, members: &[Member], prefix: &str) -> f64 {
        let mut total = 0.0;
        for member in members.iter().filter(|m| m.daemon.is_some()) {
            total += metric_sum(self.address(member), prefix).await;
        }
        total
    }

    /// Honest unhealthy ballots the running `members` cast so far, by basis: where wrong
    /// ballots come from when a test's live member turns Undecided.
    pub async fn unhealthy_ballots_by_basis(&self, members: &[Member]) -> BTreeMap<&'static str, f64> {
        let mut by_basis = BTreeMap::new();
        for basis in ["direct", "all_helpers_failed", "deadline", "no_helpers"] {
            let series = format!(r#"edge_health_ballots_total{{verdict="unhealthy",basis="{basis}""#);
            by_basis.insert(basis, self.total_of_prefix(members, &series).await);
        }
        by_basis
    }

    /// Creates every member's Node and starts its daemon; returns their names.
    pub async fn start_all(&self, members: &mut [Member]) -> Vec<String> {
        for member in members.iter_mut() {
            self.create_node(&member.name).await;
            self.start(member).await;
        }
        members.iter().map(|m| m.name.clone()).collect()
    }

    /// Waits until every running member's view holds every one of `names` healthy.
    pub async fn until_healthy(&self, members: &[Member], names: &[String]) {
        let healthy = expect(names, &[]);
        until("every view healthy", Duration::from_secs(20), || views_agree(self, members, &healthy)).await;
    }

    /// Stops every running member (each must exit 0 promptly).
    pub async fn stop_all(&self, members: &mut [Member]) {
        for member in members.iter_mut().filter(|m| m.daemon.is_some()) {
            member.stop().await;
        }
    }
}

pub async fn verdicts(address: SocketAddr) -> Option<LocalVerdicts> {
    let (status, body) = http_get(address, "/verdicts").await?;
    if status != 200 {
        return None;
    }
    Some(serde_json::from_str(&body).unwrap_or_else(|e| panic!("/verdicts is not LocalVerdicts: {e}: {body}")))
}

/// The sample `name{labels}` of `/metrics` as a number (0 when absent).
pub async fn metric(address: SocketAddr, series: &str) -> f64 {
    let (_, exposition) = http_get(address, "/metrics").await.expect("/metrics answers");
    sample(&exposition, series).map(|v| v.parse().expect("a number")).unwrap_or(0.0)
}

/// The sum of the samples of `/metrics` whose series starts with `prefix` (e.g. every
/// `basis` of `edge_health_ballots_total{verdict="unhealthy"`).
pub async fn metric_sum(address: SocketAddr, prefix: &str) -> f64 {
    let (_, exposition) = http_get(address, "/metrics").await.expect("/metrics answers");
    exposition
        .lines()
        .filter(|line| line.starts_with(prefix))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// Polls `check` every 50 ms until it returns `Some`, failing after `limit` with `what`.
pub async fn until<T, F: std::future::Future<Output = Option<T>>>(
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

/// Each running member's view (node: verdict), or why one cannot be read.
pub async fn views(
    cluster: &Cluster,
    members: &[Member],
) -> Result<BTreeMap<String, BTreeMap<String, Verdict>>, String> {
    let mut views = BTreeMap::new();
    for member in members.iter().filter(|m| m.daemon.is_some()) {
        let view = verdicts(cluster.address(member)).await.ok_or_else(|| format!("{}: no /verdicts", member.name))?;
        if view.node != member.name {
            return Err(format!("{} serves the view of {}", member.name, view.node));
        }
        views.insert(member.name.clone(), view.nodes.iter().map(|(n, v)| (n.clone(), v.verdict)).collect());
    }
    Ok(views)
}

/// Every running member's entries other than Healthy, each with the tally behind it
/// (eligible checkers, healthy and unhealthy ballots counted): what a failure message
/// needs to tell a wrong ballot (a tally with unhealthy ballots) from a missing one.
pub async fn not_healthy_tallies(cluster: &Cluster, members: &[Member]) -> String {
    let mut lines = Vec::new();
    for member in members.iter().filter(|m| m.daemon.is_some()) {
        let Some(view) = verdicts(cluster.address(member)).await else {
            lines.push(format!("{}: no /verdicts", member.name));
            continue;
        };
        for (node, v) in view.nodes.iter().filter(|(_, v)| v.verdict != Verdict::Healthy) {
            lines.push(format!(
                "{} about {node}: {:?} (eligible {}, healthy {}, unhealthy {})",
                member.name, v.verdict, v.eligible, v.healthy, v.unhealthy
            ));
        }
    }
    lines.join("\n")
}

/// Every running member's logged verdict changes and writes about `node` (each with its
/// tally): what a failure message needs when a verdict was written that should not be.
pub fn verdict_log(members: &[Member], node: &str) -> String {
    let about = format!("node={node} ");
    let mut lines = Vec::new();
    for member in members {
        let Some(daemon) = &member.daemon else { continue };
        for line in daemon.logs_so_far().lines() {
            if line.contains(&about) && (line.contains("verdict changed") || line.contains("verdict written")) {
                lines.push(format!("{}: {line}", member.name));
            }
        }
    }
    lines.join("\n")
}

/// Every running member's view (served as that member) has exactly `expected`.
pub async fn views_agree(cluster: &Cluster, members: &[Member], expected: &BTreeMap<String, Verdict>) -> Option<()> {
    for member in members.iter().filter(|m| m.daemon.is_some()) {
        let view = verdicts(cluster.address(member)).await?;
        let got: BTreeMap<String, Verdict> = view.nodes.iter().map(|(n, v)| (n.clone(), v.verdict)).collect();
        if view.node != member.name || &got != expected {
            return None;
        }
    }
    Some(())
}

/// Each of `names` healthy but those in `unhealthy`.
pub fn expect(names: &[String], unhealthy: &[&str]) -> BTreeMap<String, Verdict> {
    names
        .iter()
        .map(|n| (n.clone(), if unhealthy.contains(&n.as_str()) { Verdict::Unhealthy } else { Verdict::Healthy }))
        .collect()
}

/// With `EDGE_HEALTH_TEST_LOGS` set, prints a daemon's logs.
pub fn show_logs(name: &str, logs: &str) {
    if std::env::var_os("EDGE_HEALTH_TEST_LOGS").is_some() {
        eprintln!("==== {name}\n{logs}");
    }
}

/// What node `name` (node key `key`) answers a peer's challenge frame with, as its daemon
/// would: its signature over the challenger's nonce, in a frame sealed with the unit key
/// and signed with `key`, numbered `sequence`. `None` for any other frame.
pub fn answer_challenge(
    frame: &[u8],
    name: &str,
    key: &edge_health::node_key::SigningKey,
    sequence: u64,
) -> Option<Vec<u8>> {
    use edge_health::message::{HmacKey, Message, Payload, seal_message};
    let value: serde_json::Value = serde_json::from_slice(frame).ok()?;
    let body = &value["body"];
    let challenge = &body["payload"]["challenge"];
    let checker = challenge["checker"].as_str()?;
    let nonce: edge_health::liveness::Nonce = serde_json::from_value(challenge["nonce"].clone()).ok()?;
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970");
    let message = Message {
        sender: name.into(),
        timestamp: edge_health::time::Timestamp::from_unix_millis(since.as_millis() as u64),
        sequence,
        recipient: Some(body["sender"].as_str()?.into()),
        payload: Payload::Proof { proof: edge_health::liveness::prove(key, name, checker, nonce) },
    };
    Some(seal_message(&HmacKey::new(KEY).expect("key"), key, &message))
}
