//! The link between a unit's leader and its followers, end to end over TCP and TLS: the
//! leader's `UpstreamLog` served by `unit_server::listen` with the leader's node identity,
//! read by a follower through `unit_client::leader_client` with unmodified kube-rs `Api`s
//! and watchers, as the follower's upstream watchers read it.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use controller_support::server::{ServerLimits, ServerMetrics};
use controller_support::tls::TlsMetrics;
use edgegrid_testing::objects::{endpoints_object, node_object, service_object, slice_object};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Resource;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use listwatch::{LogConfig, WatchConfig};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use ring::rand::SystemRandom;
use ring::signature::Ed25519KeyPair;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use unit_link::metrics::StreamLabel;
use unit_link::node_identity::{
    ExpectedServer, MemberKeys, NodeIdentity, PublicKeyBytes, client_config, server_config,
};
use unit_link::unit_client::{LinkSettings, leader_client, leader_client_counted};
use unit_link::unit_server::{ResourceLabel, ServeConfig, UnitServerMetrics, listen, router};
use unit_link::upstream_log::{UpstreamInput, UpstreamKind, UpstreamLog};

/// Long enough for any step on a loaded 2-core machine, short for a test that hangs.
const PATIENCE: Duration = Duration::from_secs(10);

fn identity(node: &str) -> NodeIdentity {
    let document = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).expect("generating a key");
    NodeIdentity::from_pkcs8(node, document.as_ref()).expect("a node identity")
}

fn expecting(leader: &NodeIdentity) -> ExpectedServer {
    ExpectedServer { node: leader.node().to_owned(), key: leader.public_key() }
}

fn json_of<T: Serialize>(object: &T) -> Value {
    serde_json::to_value(object).expect("an object")
}

/// A served object as JSON, without the leader's resourceVersion: what the cloud had.
fn as_upstream<T: Serialize>(object: &T) -> Value {
    let mut value = json_of(object);
    value["metadata"].as_object_mut().map(|m| m.remove("resourceVersion"));
    value
}

/// The cluster the leader's cloud feeds report: a unit of `n1` (the leader) and `n2`
/// (the follower), and a node of another unit.
struct Cluster {
    services: Vec<Value>,
    slices: Vec<Value>,
    endpoints: Vec<Value>,
    nodes: Vec<Value>,
    unit_nodes: Vec<Value>,
}

impl Cluster {
    fn new() -> Self {
        let node = |name: &str, unit: &str| {
            let mut node = json_of(&node_object(name, &[("site", unit)]));
            node["status"] =
                json!({"addresses": [{"type": "InternalIP", "address": format!("10.0.0.{}", &name[1..])}]});
            node
        };
        let nodes = vec![node("n1", "a"), node("n2", "a"), node("n3", "b")];
        Self {
            services: vec![json_of(&service_object("api", None)), json_of(&service_object("web", Some("site")))],
            slices: vec![
                json_of(&slice_object("api-1", "api", &[("10.1.0.3", "n3")])),
                json_of(&slice_object("web-1", "web", &[("10.1.0.1", "n1"), ("10.1.0.2", "n2")])),
            ],
            endpoints: vec![json_of(&endpoints_object("web", &[("10.1.0.1", "n1"), ("10.1.0.2", "n2")]))],
            unit_nodes: nodes[..2].to_vec(),
            nodes,
        }
    }

    fn objects(&self, kind: UpstreamKind) -> &[Value] {
        match kind {
            UpstreamKind::Services => &self.services,
            UpstreamKind::EndpointSlices => &self.slices,
            UpstreamKind::Endpoints => &self.endpoints,
            UpstreamKind::NodeMetadata => &self.nodes,
            UpstreamKind::UnitNodes => &self.unit_nodes,
            UpstreamKind::Digests => &[],
        }
    }

    /// Lists `kinds` into `log`, as the leader's feeds do once their watches start.
    fn list_into(&self, log: &UpstreamLog, kinds: &[UpstreamKind]) {
        for kind in kinds {
            log.apply(UpstreamInput::Begin(*kind)).expect("begin");
            for object in self.objects(*kind) {
                // the cloud's metadata-only watch reports PartialObjectMetadata
                let object = match kind {
                    UpstreamKind::NodeMetadata => json!({"apiVersion": "meta.k8s.io/v1",
                        "kind": "PartialObjectMetadata", "metadata": object["metadata"]}),
                    _ => object.clone(),
                };
                log.apply(UpstreamInput::Upsert(*kind, object)).expect("upsert");
            }
            log.apply(UpstreamInput::Done(*kind)).expect("done");
        }
    }
}

fn new_log() -> Arc<UpstreamLog> {
    UpstreamLog::new(LogConfig { history_limit: 1000, watch_buffer: 1000 })
}

/// The leader `n1` serving `log` on 127.0.0.1 to the members `members`.
struct Leader {
    identity: NodeIdentity,
    address: SocketAddr,
    metrics: UnitServerMetrics,
    tls_metrics: TlsMetrics,
    stop: watch::Sender<bool>,
    server: JoinHandle<()>,
}

impl Leader {
    async fn start(log: Arc<UpstreamLog>, members: &[&NodeIdentity]) -> Self {
        Self::start_as(identity("n1"), log, members).await
    }

    /// The member `identity` leading from `log`.
    async fn start_as(identity: NodeIdentity, log: Arc<UpstreamLog>, members: &[&NodeIdentity]) -> Self {
        let members: BTreeMap<String, PublicKeyBytes> =
            members.iter().map(|m| (m.node().to_owned(), m.public_key())).collect();
        let tls = server_config(&identity, MemberKeys::new(members)).expect("the leader's TLS settings");
        let metrics = UnitServerMetrics::default();
        let tls_metrics = TlsMetrics::default();
        let (stop, stopped) = watch::channel(false);
        let watch =
            WatchConfig { bookmark_interval: Duration::from_millis(200), default_timeout: Duration::from_secs(60) };
        let config = ServeConfig { watch, sync_wait: Duration::ZERO };
        let routes = router(log, config, metrics.clone(), stopped.clone());
        let any_port = SocketAddr::from(([127, 0, 0, 1], 0));
        let (address, server) = listen(
            any_port,
            tls,
            routes,
            ServerLimits::default(),
            ServerMetrics::default(),
            tls_metrics.clone(),
            stopped,
        )
        .await
        .expect("listening");
        Self { identity, address, metrics, tls_metrics, stop, server }
    }

    fn url(&self) -> http::Uri {
        format!("https://{}", self.address).parse().expect("a URL")
    }

    /// The body bytes served, over every resource.
    fn served_bytes(&self) -> u64 {
        ["services", "endpointslices", "endpoints", "nodemetadata", "unitnodes"]
            .into_iter()
            .map(|resource| self.metrics.served_bytes.get_or_create(&ResourceLabel { resource }).get())
            .sum()
    }
}

/// `who`'s client to a server it expects to be `expected`.
fn follower_client(url: &http::Uri, who: &NodeIdentity, expected: ExpectedServer) -> kube::Client {
    let tls = client_config(who, expected).expect("a follower's TLS settings");
    leader_client(url, tls, Duration::from_secs(5), Duration::from_secs(5)).expect("a client")
}

fn names<K: Resource>(objects: &[K]) -> Vec<String> {
    objects.iter().map(|o| o.meta().name.clone().unwrap_or_default()).collect()
}

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, future).await.unwrap_or_else(|_| panic!("{what}: not within {PATIENCE:?}"))
}

/// Waits until `value` is `want` (what another task counts), or fails with what it was.
async fn eventually<T: PartialEq + Debug>(what: &str, want: T, value: impl Fn() -> T) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let now = value();
        if now == want {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {now:?}, not {want:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

type Watcher<K> = std::pin::Pin<Box<dyn Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send>>;

fn watch_all<K>(api: Api<K>) -> Watcher<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    watcher(api, watcher::Config::default()).boxed()
}

/// The objects of a watcher's initial list (everything up to `InitDone`).
async fn initial<K: Debug>(watch: &mut Watcher<K>) -> Vec<K> {
    let mut objects = Vec::new();
    loop {
        match within("the initial list", watch.next()).await {
            Some(Ok(watcher::Event::Init)) => {}
            Some(Ok(watcher::Event::InitApply(object))) => objects.push(object),
            Some(Ok(watcher::Event::InitDone)) => return objects,
            other => panic!("not an initial list event: {other:?}"),
        }
    }
}

async fn next_event<K: Debug>(watch: &mut Watcher<K>) -> watcher::Event<K> {
    match within("a watch event", watch.next()).await {
        Some(Ok(event)) => event,
        other => panic!("no event: {other:?}"),
    }
}

/// A follower serving its unit on one address dials its leader from it: the site network
/// (and a firewall between members) sees the member where it is known, not the kernel's
/// pick (127.0.0.1 on loopback).
#[tokio::test]
async fn a_follower_dials_its_leader_from_the_source_address_given() {
    let mut recorder = edgegrid_testing::SourceRecorder::start().await;
    let follower = identity("n2");
    let tls = client_config(&follower, expecting(&identity("n1"))).expect("a follower's TLS settings");
    let url: http::Uri = format!("https://{}", recorder.addr).parse().expect("a url");
    for source in [Some("127.0.0.13".parse().expect("an address")), None] {
        let link =
            LinkSettings { read_timeout: Duration::from_secs(2), connect_timeout: Duration::from_secs(2), source };
        let client = leader_client_counted(&url, tls.clone(), link, Family::default()).expect("a client");
        let _ = Api::<Service>::all(client).list(&ListParams::default()).await;
        let expected = source.unwrap_or_else(|| "127.0.0.1".parse().expect("loopback"));
        assert_eq!(recorder.next().await, Some(expected));
    }
}

/// Every kind listed and watched by a follower through kube-rs, with exactly the leader's
/// objects (metadata only for the cluster's nodes, its own Node whole by field selector),
/// changes arriving as events, bytes counted alike on both sides, and watches ended when
/// the leader stops.
#[tokio::test]
async fn a_follower_lists_and_watches_every_kind_from_its_leader() {
    let cluster = Cluster::new();
    let log = new_log();
    cluster.list_into(&log, &UpstreamKind::ALL);
    let follower = identity("n2");
    let leader = Leader::start(log.clone(), &[&follower]).await;
    let tls = client_config(&follower, expecting(&leader.identity)).expect("a follower's TLS settings");
    let received: Family<StreamLabel, Counter> = Family::default();
    let link =
        LinkSettings { read_timeout: Duration::from_secs(5), connect_timeout: Duration::from_secs(5), source: None };
    let client = leader_client_counted(&leader.url(), tls, link, received.clone()).expect("a client");

    // lists: exactly the cloud's objects, in the leader's versions
    let services =
        within("services", Api::<Service>::all(client.clone()).list(&ListParams::default())).await.expect("listed");
    assert_eq!(names(&services.items), ["api", "web"]);
    assert_eq!(services.items.iter().map(as_upstream).collect::<Vec<_>>(), cluster.services);
    let version = |v: Option<&String>| v.and_then(|v| v.parse::<u64>().ok()).expect("a version of the leader's");
    let list_version = version(services.metadata.resource_version.as_ref());
    assert!(services.items.iter().all(|s| version(s.metadata.resource_version.as_ref()) <= list_version));
    let sent = |resource| leader.metrics.served_bytes.get_or_create(&ResourceLabel { resource }).get();
    let got = |stream| received.get_or_create(&StreamLabel { stream }).get();
    assert!(sent("services") > 0);
    assert_eq!(got("services"), sent("services"), "what the leader sent is what the follower counted");

    let slices =
        within("slices", Api::<EndpointSlice>::all(client.clone()).list(&ListParams::default())).await.expect("listed");
    assert_eq!(slices.items.iter().map(as_upstream).collect::<Vec<_>>(), cluster.slices);
    let endpoints =
        within("endpoints", Api::<Endpoints>::all(client.clone()).list(&ListParams::default())).await.expect("listed");
    assert_eq!(endpoints.items.iter().map(as_upstream).collect::<Vec<_>>(), cluster.endpoints);
    let metadata =
        within("node metadata", Api::<PartialObjectMeta<Node>>::all(client.clone()).list(&ListParams::default()))
            .await
            .expect("listed");
    assert_eq!(names(&metadata.items), ["n1", "n2", "n3"]);
    let want_metadata: Vec<Value> = cluster.nodes.iter().map(|n| n["metadata"].clone()).collect();
    let served_metadata: Vec<Value> =
        metadata.items.iter().map(|m| as_upstream(&json!({"metadata": m.metadata}))["metadata"].clone()).collect();
    assert_eq!(served_metadata, want_metadata);
    assert_eq!(got("nodes"), sent("nodemetadata"));
    let own = ListParams::default().fields("metadata.name=n2");
    let own_node = within("own node", Api::<Node>::all(client.clone()).list(&own)).await.expect("listed");
    assert_eq!(own_node.items.iter().map(as_upstream).collect::<Vec<_>>(), [cluster.nodes[1].clone()]);
    assert_eq!(got("localnode"), sent("unitnodes"));
    let other_unit = ListParams::default().fields("metadata.name=n3");
    let not_served =
        within("another unit's node", Api::<Node>::all(client.clone()).list(&other_unit)).await.expect("listed");
    assert!(not_served.items.is_empty(), "{:?}", names(&not_served.items));

    // watches: the initial state, then each later change as one event
    let mut services = watch_all(Api::<Service>::all(client.clone()));
    let mut slices = watch_all(Api::<EndpointSlice>::all(client.clone()));
    let mut endpoints = watch_all(Api::<Endpoints>::all(client.clone()));
    let mut metadata = watch_all(Api::<PartialObjectMeta<Node>>::all(client.clone()));
    let mut own_node =
        watcher(Api::<Node>::all(client.clone()), watcher::Config::default().fields("metadata.name=n2")).boxed();
    assert_eq!(names(&initial(&mut services).await), ["api", "web"]);
    assert_eq!(names(&initial(&mut slices).await), ["api-1", "web-1"]);
    assert_eq!(names(&initial(&mut endpoints).await), ["web"]);
    assert_eq!(names(&initial(&mut metadata).await), ["n1", "n2", "n3"]);
    assert_eq!(names(&initial(&mut own_node).await), ["n2"]);

    let mut changed = cluster.services[1].clone();
    changed["spec"]["clusterIP"] = json!("10.96.0.99");
    log.apply(UpstreamInput::Upsert(UpstreamKind::Services, changed.clone())).expect("upsert");
    match next_event(&mut services).await {
        watcher::Event::Apply(service) => assert_eq!(as_upstream(&service), changed),
        other => panic!("not the change: {other:?}"),
    }
    let mut slice = cluster.slices[1].clone();
    slice["endpoints"][1]["conditions"]["ready"] = json!(false);
    log.apply(UpstreamInput::Upsert(UpstreamKind::EndpointSlices, slice.clone())).expect("upsert");
    match next_event(&mut slices).await {
        watcher::Event::Apply(applied) => assert_eq!(as_upstream(&applied), slice),
        other => panic!("not the change: {other:?}"),
    }
    log.apply(UpstreamInput::Delete(UpstreamKind::Endpoints, ("ns".into(), "web".into()))).expect("delete");
    match next_event(&mut endpoints).await {
        watcher::Event::Delete(deleted) => assert_eq!(names(&[deleted]), ["web"]),
        other => panic!("not the deletion: {other:?}"),
    }
    let mut relabelled = cluster.nodes[2].clone();
    relabelled["metadata"]["labels"]["site"] = json!("a");
    log.apply(UpstreamInput::Upsert(UpstreamKind::NodeMetadata, relabelled.clone())).expect("upsert");
    match next_event(&mut metadata).await {
        watcher::Event::Apply(node) => assert_eq!(node.metadata.labels, Some([("site".into(), "a".into())].into())),
        other => panic!("not the change: {other:?}"),
    }
    // a change to another member's Node is not the follower's
    let mut other_member = cluster.unit_nodes[0].clone();
    other_member["metadata"]["labels"]["zone"] = json!("z1");
    log.apply(UpstreamInput::Upsert(UpstreamKind::UnitNodes, other_member)).expect("upsert");
    let mut own = cluster.unit_nodes[1].clone();
    own["metadata"]["labels"]["zone"] = json!("z2");
    log.apply(UpstreamInput::Upsert(UpstreamKind::UnitNodes, own.clone())).expect("upsert");
    match next_event(&mut own_node).await {
        watcher::Event::Apply(node) => assert_eq!(as_upstream(&node), own),
        other => panic!("not the change: {other:?}"),
    }

    // every watch has delivered a change, so all five are open: one address
    assert_eq!(leader.metrics.followers.get(), 1, "one follower, however many watches");

    // the leader stops: a watch ends, and so does the server once it has
    drop((services, slices, endpoints, metadata, own_node));
    let mut raw = within("a watch", Api::<Service>::all(client.clone()).watch(&WatchParams::default(), "0"))
        .await
        .expect("watching")
        .boxed();
    assert!(matches!(within("the first event", raw.next()).await, Some(Ok(WatchEvent::Added(_)))));
    leader.stop.send_replace(true);
    let ended = within("the end of the watch", async {
        loop {
            match raw.next().await {
                Some(Ok(WatchEvent::Added(_) | WatchEvent::Bookmark(_))) => {}
                other => return other,
            }
        }
    })
    .await;
    assert!(ended.is_none(), "the watch ended cleanly: {ended:?}");
    within("the server's end", leader.server).await.expect("the server task");
    assert_eq!(leader.tls_metrics.handshake_errors.get(), 0);
    assert_eq!(leader.metrics.followers.get(), 0);
}

/// Until the leader's every kind has listed, a follower is answered 503, never an empty
/// list; then it is served.
#[tokio::test]
async fn a_follower_gets_503_until_the_leader_has_synced() {
    let cluster = Cluster::new();
    let log = new_log();
    let (last, first) = UpstreamKind::ALL.split_last().expect("five kinds");
    cluster.list_into(&log, first);
    let follower = identity("n2");
    let leader = Leader::start(log.clone(), &[&follower]).await;
    let client = follower_client(&leader.url(), &follower, expecting(&leader.identity));
    let attempts = [
        Api::<Service>::all(client.clone()).list(&ListParams::default()).await.map(|l| names(&l.items)),
        Api::<Node>::all(client.clone()).list(&ListParams::default()).await.map(|l| names(&l.items)),
    ];
    for attempt in attempts {
        match attempt {
            Err(kube::Error::Api(status)) => {
                assert_eq!((status.code, status.reason.as_str()), (503, "ServiceUnavailable"))
            }
            other => panic!("not refused: {other:?}"),
        }
    }
    assert_eq!(leader.served_bytes(), 0);
    cluster.list_into(&log, &[*last]);
    let services = Api::<Service>::all(client.clone()).list(&ListParams::default()).await.expect("served");
    assert_eq!(names(&services.items), ["api", "web"]);
}

/// The leader serves members only: a host whose key is no member's gets no answer at all
/// (the handshake fails), though it expects the right leader.
#[tokio::test]
async fn a_client_that_is_not_a_member_gets_nothing() {
    let cluster = Cluster::new();
    let log = new_log();
    cluster.list_into(&log, &UpstreamKind::ALL);
    let (member, outsider) = (identity("n2"), identity("n3"));
    let leader = Leader::start(log, &[&member]).await;
    let client = follower_client(&leader.url(), &outsider, expecting(&leader.identity));
    let refused = within("a refusal", Api::<Service>::all(client).list(&ListParams::default())).await;
    assert!(matches!(refused, Err(kube::Error::HyperError(_) | kube::Error::Service(_))), "{refused:?}");
    assert_eq!(leader.served_bytes(), 0);
    eventually("failed handshakes", 1, || leader.tls_metrics.handshake_errors.get()).await;
    // the member is served by the same server
    let client = follower_client(&leader.url(), &member, expecting(&leader.identity));
    let services = Api::<Service>::all(client).list(&ListParams::default()).await.expect("served");
    assert_eq!(names(&services.items), ["api", "web"]);
}

/// A follower talks only to the leader it chose: a server with another key (an impostor
/// at the leader's address) is refused before anything is asked.
#[tokio::test]
async fn a_follower_refuses_a_server_that_is_not_its_leader() {
    let cluster = Cluster::new();
    let log = new_log();
    cluster.list_into(&log, &UpstreamKind::ALL);
    let follower = identity("n2");
    let impostor = Leader::start(log, &[&follower]).await;
    let chosen = identity("n1");
    let client = follower_client(&impostor.url(), &follower, expecting(&chosen));
    let refused = within("a refusal", Api::<Service>::all(client).list(&ListParams::default())).await;
    assert!(matches!(refused, Err(kube::Error::HyperError(_) | kube::Error::Service(_))), "{refused:?}");
    assert_eq!(impostor.served_bytes(), 0);
    eventually("failed handshakes", 1, || impostor.tls_metrics.handshake_errors.get()).await;
}

/// A leader that goes silent with the connection open (a host gone from the LAN) ends the
/// follower's watch after the read timeout, not never.
#[tokio::test]
async fn the_read_timeout_ends_a_watch_on_a_silent_leader() {
    let (leader, follower) = (identity("n1"), identity("n2"));
    let members = MemberKeys::new([(follower.node().to_owned(), follower.public_key())].into());
    let acceptor = tokio_rustls::TlsAcceptor::from(server_config(&leader, members).expect("TLS settings"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("an address");
    // answers the watch's headers and one event, then sends nothing and keeps the connection
    let silent = tokio::spawn(async move {
        let (connection, _) = listener.accept().await.expect("a connection");
        let mut stream = acceptor.accept(connection).await.expect("a handshake");
        let mut request = Vec::new();
        while !request.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            if stream.read(&mut byte).await.expect("the request") == 0 {
                return;
            }
            request.push(byte[0]);
        }
        let event = json!({"type": "ADDED", "object": json_of(&service_object("web", None))}).to_string() + "\n";
        let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
        let chunk = format!("{head}{:x}\r\n{event}\r\n", event.len());
        stream.write_all(chunk.as_bytes()).await.expect("the first event");
        stream.flush().await.expect("sent");
        std::future::pending::<()>().await;
    });
    let url: http::Uri = format!("https://{address}").parse().expect("a URL");
    let read_timeout = Duration::from_millis(1500);
    let tls = client_config(&follower, expecting(&leader)).expect("TLS settings");
    let client = leader_client(&url, tls, read_timeout, Duration::from_secs(5)).expect("a client");
    let mut events = within("a watch", Api::<Service>::all(client).watch(&WatchParams::default(), "0"))
        .await
        .expect("watching")
        .boxed();
    assert!(matches!(within("the first event", events.next()).await, Some(Ok(WatchEvent::Added(_)))));
    let silent_since = Instant::now();
    let ended = within("the read timeout", events.next()).await;
    let waited = silent_since.elapsed();
    assert!(matches!(ended, Some(Err(_)) | None), "{ended:?}");
    assert!(waited >= read_timeout - Duration::from_millis(100), "ended after {waited:?}, before the timeout");
    silent.abort();
}

/// A host that accepts connections and never answers (not even the TLS handshake) is
/// given up after the connect timeout.
#[tokio::test]
async fn the_connect_timeout_gives_up_a_leader_that_never_answers() {
    let hanging = edgegrid_testing::HangingServer::start().await.expect("a hanging server");
    let url: http::Uri = hanging.url().replace("http://", "https://").parse().expect("a URL");
    let (leader, follower) = (identity("n1"), identity("n2"));
    let tls = client_config(&follower, expecting(&leader)).expect("TLS settings");
    let connect_timeout = Duration::from_millis(1500);
    let client = leader_client(&url, tls, Duration::from_secs(60), connect_timeout).expect("a client");
    let started = Instant::now();
    let failed = within("the connect timeout", Api::<Service>::all(client).list(&ListParams::default())).await;
    let waited = started.elapsed();
    assert!(failed.is_err(), "{failed:?}");
    assert!(waited >= connect_timeout - Duration::from_millis(100), "failed after {waited:?}");
}

/// Only https URLs with an address are taken.
#[tokio::test]
async fn a_leader_url_must_be_https() {
    let (leader, follower) = (identity("n1"), identity("n2"));
    let tls = client_config(&follower, expecting(&leader)).expect("TLS settings");
    for url in ["http://127.0.0.1:1", "/api"] {
        let url: http::Uri = url.parse().expect("a URI");
        let refused = leader_client(&url, tls.clone(), Duration::from_secs(1), Duration::from_secs(1));
        assert!(matches!(refused, Err(unit_link::unit_client::UnitClientError::Url { .. })), "{url}");
    }
}

/// The objects of every kind, as stored bytes, and the log's version.
fn log_contents(log: &UpstreamLog) -> (u64, Vec<(UpstreamKind, bytes::Bytes)>) {
    let (rv, objects, _) = log.snapshot();
    (rv, objects.into_iter().map(|(kind, object)| (kind, object.json().clone())).collect())
}

/// The unit's standby replicates its leader's log over the members' TLS link: the replica
/// holds the leader's objects under the leader's versions and term, follows its changes,
/// and outlives the leader (it is what the standby will lead from).
#[tokio::test]
async fn the_standby_replicates_the_leaders_log_over_the_unit_link() {
    let cluster = Cluster::new();
    let log = new_log();
    cluster.list_into(&log, &UpstreamKind::ALL);
    let standby = identity("n2");
    let leader = Leader::start(log.clone(), &[&standby]).await;
    let client = follower_client(&leader.url(), &standby, expecting(&leader.identity));
    let slot = unit_link::replication::ReplicaSlot::default();
    let config = LogConfig { history_limit: 1000, watch_buffer: 1000 };
    let replicating = tokio::spawn(unit_link::replication::replicate(client, config, slot.clone()));
    eventually("the replica", true, || slot.current().is_some()).await;
    let replica = slot.current().expect("a replica");
    assert_eq!(replica.term(), log.term());
    eventually("the replica equal to the log", log_contents(&log), || log_contents(&replica)).await;

    let mut changed = cluster.slices[0].clone();
    changed["endpoints"][0]["addresses"] = json!(["10.1.0.99"]);
    log.apply(UpstreamInput::Upsert(UpstreamKind::EndpointSlices, changed)).expect("upsert");
    log.apply(UpstreamInput::Delete(UpstreamKind::Services, ("ns".into(), "api".into()))).expect("delete");
    eventually("the replica following the log", log_contents(&log), || log_contents(&replica)).await;
    let sent = leader.metrics.served_bytes.get_or_create(&ResourceLabel { resource: "log" }).get();
    assert!(sent > 0, "the log's bytes are counted");

    // the leader gone, the replica stays as it was
    let last = log_contents(&log);
    leader.stop.send_replace(true);
    within("the leader's server stopping", leader.server).await.expect("stopped");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(slot.current().map(|r| log_contents(&r)), Some(last));
    replicating.abort();
}

/// The watcher events of `watch` until `name` is applied (as a list item or a change), by
/// kind: `init`, `apply <name>`, `delete <name>`, `done`; failed attempts are skipped.
async fn events_until_applied(watch: &mut Watcher<EndpointSlice>, name: &str) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let event = within(&format!("{name} applied, after {seen:?}"), watch.next()).await;
        let Some(Ok(event)) = event else { continue };
        let (what, done) = match event {
            watcher::Event::Init => ("init".to_string(), false),
            watcher::Event::InitApply(slice) | watcher::Event::Apply(slice) => {
                let applied = slice.metadata.name.clone().unwrap_or_default();
                (format!("apply {applied}"), applied == name)
            }
            watcher::Event::Delete(slice) => (format!("delete {}", slice.metadata.name.unwrap_or_default()), false),
            watcher::Event::InitDone => ("done".to_string(), false),
        };
        seen.push(what);
        if done {
            return seen;
        }
    }
}

/// A unit in failover tests: the leader `n1` serving the cluster to the follower `n2` and
/// the standby `n3`, and the follower's watch of slices through its route, listed.
struct Failover {
    cluster: Cluster,
    log: Arc<UpstreamLog>,
    leader: Leader,
    follower: NodeIdentity,
    standby: NodeIdentity,
    route: unit_link::unit_client::LeaderRoute,
    slices: Watcher<EndpointSlice>,
}

const REPLICA_CONFIG: LogConfig = LogConfig { history_limit: 1000, watch_buffer: 1000 };

impl Failover {
    async fn start() -> Self {
        let cluster = Cluster::new();
        let log = new_log();
        cluster.list_into(&log, &UpstreamKind::ALL);
        let (follower, standby) = (identity("n2"), identity("n3"));
        let leader = Leader::start(log.clone(), &[&follower, &standby]).await;
        let route = unit_link::unit_client::LeaderRoute::default();
        route.set_leader(follower_client(&leader.url(), &follower, expecting(&leader.identity)));
        let mut slices = watch_all(Api::<EndpointSlice>::all(route.client()));
        assert_eq!(names(&initial(&mut slices).await), ["api-1", "web-1"]);
        Self { cluster, log, leader, follower, standby, route, slices }
    }

    /// The standby replicating the leader's log, until the handle is aborted.
    fn replicate(&self) -> (unit_link::replication::ReplicaSlot, JoinHandle<()>) {
        let slot = unit_link::replication::ReplicaSlot::default();
        let to_leader = follower_client(&self.leader.url(), &self.standby, expecting(&self.leader.identity));
        let task = tokio::spawn(unit_link::replication::replicate(to_leader, REPLICA_CONFIG, slot.clone()));
        (slot, task)
    }

    /// The leader's server stopped (its connections close).
    async fn stop_leader(&mut self) {
        self.leader.stop.send_replace(true);
        within("the leader's server stopping", &mut self.leader.server).await.expect("stopped");
    }

    /// `identity` leading from `log`, and the follower's route set to it.
    async fn lead(&self, identity: NodeIdentity, log: Arc<UpstreamLog>) -> Leader {
        let next = Leader::start_as(identity, log, &[&self.follower]).await;
        self.route.set_leader(follower_client(&next.url(), &self.follower, expecting(&next.identity)));
        next
    }

    /// `web-1` with its first endpoint at `address`.
    fn web_at(&self, address: &str) -> UpstreamInput {
        let mut changed = self.cluster.slices[1].clone();
        changed["endpoints"][0]["addresses"] = json!([address]);
        UpstreamInput::Upsert(UpstreamKind::EndpointSlices, changed)
    }
}

/// A follower's watch through its [`LeaderRoute`], the leader's standby replicating, the
/// leader stopped: the route set to the standby (leading from its replica), the watch
/// resumes there, and the next change arrives as one event, not a relist.
#[tokio::test]
async fn a_followers_watch_resumes_on_the_standby_leading_from_its_replica() {
    let mut unit = Failover::start().await;
    let (slot, replicating) = unit.replicate();
    unit.log.apply(unit.web_at("10.1.0.7")).expect("upsert");
    assert_eq!(events_until_applied(&mut unit.slices, "web-1").await, ["apply web-1"]);
    let log = unit.log.clone();
    eventually("the replica", Some(log_contents(&log)), || slot.current().map(|r| log_contents(&r))).await;

    // the leader dies; the standby leads from its replica, and the route goes there
    let replica = slot.current().expect("a replica");
    replicating.abort();
    unit.stop_leader().await;
    replica.promote();
    let _standby_leader = unit.lead(unit.standby.clone(), replica.clone()).await;
    replica.apply(unit.web_at("10.1.0.8")).expect("upsert");
    assert_eq!(events_until_applied(&mut unit.slices, "web-1").await, ["apply web-1"], "resumed, not relisted");
}

/// A copy of `log` as a replica of `term` at its version, without the objects `leave_out`
/// names, synced.
fn replica_of(log: &UpstreamLog, term: u64, leave_out: &[&str]) -> Arc<UpstreamLog> {
    let (rv, objects, _) = log.snapshot();
    let replica = UpstreamLog::replica(REPLICA_CONFIG, term, rv);
    for (kind, object) in objects {
        if !leave_out.contains(&object.name()) {
            replica.restore(kind, object.value()).expect("restored");
        }
    }
    replica.replica_synced();
    replica
}

/// A leader whose log is another (its term differs) answers a follower resuming from the
/// previous leader's versions with 410, even where its own versions are the same numbers:
/// the watch relists and serves that leader's state (here without `api-1`, which a resumed
/// watch would have kept for ever).
#[tokio::test]
async fn a_followers_watch_relists_on_a_leader_of_another_log_with_the_same_versions() {
    let mut unit = Failover::start().await;
    let other = replica_of(&unit.log, unit.log.term().wrapping_add(1), &["api-1"]);
    unit.stop_leader().await;
    let _next = unit.lead(unit.standby.clone(), other.clone()).await;
    other.apply(unit.web_at("10.1.0.8")).expect("upsert");
    let events = events_until_applied(&mut unit.slices, "web-1").await;
    assert_eq!(events, ["init", "apply web-1"], "relisted, api-1 gone");
    assert!(matches!(next_event(&mut unit.slices).await, watcher::Event::InitDone));
}

/// A follower that saw more of the old leader than its standby did (a change the replica
/// never got) must not resume on the promoted standby, whose versions after its last one
/// are its own: it relists, and serves the new leader's state.
#[tokio::test]
async fn a_follower_ahead_of_the_standby_relists_on_it() {
    let mut unit = Failover::start().await;
    let (slot, replicating) = unit.replicate();
    let log = unit.log.clone();
    eventually("the replica", Some(log_contents(&log)), || slot.current().map(|r| log_contents(&r))).await;
    // the standby stops hearing the leader; the follower sees one more change
    replicating.abort();
    log.apply(UpstreamInput::Delete(UpstreamKind::EndpointSlices, ("ns".into(), "api-1".into()))).expect("delete");
    assert!(matches!(next_event(&mut unit.slices).await, watcher::Event::Delete(_)));
    let replica = slot.current().expect("a replica");
    replica.promote();
    unit.stop_leader().await;
    let _standby_leader = unit.lead(unit.standby.clone(), replica.clone()).await;
    replica.apply(unit.web_at("10.1.0.8")).expect("upsert");
    // the promoted log never deleted api-1: relisted, it is the new leader's state
    let events = events_until_applied(&mut unit.slices, "web-1").await;
    assert_eq!(events, ["init", "apply api-1", "apply web-1"], "relisted");
}

/// The route set to another leader while the previous one is still alive (a split
/// decision, a member coming back): the follower's open watch ends there and resumes on the
/// new leader at once, rather than staying on the previous one until its watch times out.
#[tokio::test]
async fn a_followers_watch_moves_to_the_new_leader_while_the_old_one_lives() {
    let mut unit = Failover::start().await;
    // the standby's replica, promoted: it serves the old leader's versions
    let replica = replica_of(&unit.log, unit.log.term(), &[]);
    replica.promote();
    // the watch opened on the old leader (polled, it asks; bookmarks yield nothing)
    let quiet = tokio::time::timeout(Duration::from_millis(500), unit.slices.next()).await;
    assert!(quiet.is_err(), "no event yet: {quiet:?}");
    assert_eq!(unit.leader.metrics.followers.get(), 1, "watching the old leader");
    let _next = unit.lead(unit.standby.clone(), replica.clone()).await;
    replica.apply(unit.web_at("10.1.0.8")).expect("upsert");
    let moved = tokio::time::timeout(Duration::from_secs(3), events_until_applied(&mut unit.slices, "web-1")).await;
    assert_eq!(moved.expect("the new leader's change within 3 s"), ["apply web-1"], "resumed there");
    // the old leader holds no watch of this follower any more
    eventually("the old leader's followers", 0, || unit.leader.metrics.followers.get()).await;
}
