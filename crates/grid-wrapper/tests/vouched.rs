//! Vouched sharing end to end, in process over HTTP and TLS on loopback addresses: the
//! fake API server as the cloud, the unit signer, and a unit of two wrappers (`n1` leads,
//! `n2` follows) whose follower checks every stream against the signer's batches. A
//! compromised leader (it holds `n1`'s key and serves what it likes) puts a forged
//! EndpointSlice into what it serves: the follower never serves it, passes the leader
//! over and serves the cloud's view.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use common::*;
use controller_support::node_identity::{NodeIdentity, server_config};
use controller_support::server::{ServerLimits, ServerMetrics};
use controller_support::tls::TlsMetrics;
use edgegrid_core::unit_upstream::UnitMember;
use edgegrid_core::vouch::VoucherConfig;
use edgegrid_testing::link::Link;
use edgegrid_testing::objects::slice_object;
use grid_wrapper::cache::Kind;
use grid_wrapper::metrics::{Metrics, ResultLabel, SourceLabel};
use grid_wrapper::signer::{SignerConfig, SignerMetrics};
use grid_wrapper::unit::{Unit, UnitConfig};
use grid_wrapper::upstream_log::{UpstreamInput, UpstreamKind};
use grid_wrapper::vouched::{VouchConfig, Vouching};
use grid_wrapper::{Wrapper, WrapperConfig};
use ring::rand::SystemRandom;
use ring::signature::{Ed25519KeyPair, KeyPair};

const NAMESPACE: &str = "edgegrid";

fn key_document() -> Vec<u8> {
    Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).expect("a key").as_ref().to_vec()
}

/// A member of unit `a` on its own loopback address.
struct Member {
    node: &'static str,
    host: Ipv4Addr,
    key: Vec<u8>,
}

impl Member {
    fn new(node: &'static str, host: u8) -> Self {
        Self { node, host: Ipv4Addr::new(127, 0, 0, host), key: key_document() }
    }

    fn as_unit_member(&self) -> UnitMember {
        let identity = NodeIdentity::from_pkcs8(self.node, &self.key).expect("identity");
        let public = base64::engine::general_purpose::STANDARD.encode(identity.public_key());
        UnitMember::from_annotations(self.node, Some(&public), Some(&format!("{}:51005", self.host))).expect("member")
    }
}

struct Running {
    wrapper: Arc<Wrapper>,
    unit: Unit,
    _stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Running {
    fn source(&self, source: &'static str) -> i64 {
        self.wrapper.metrics().upstream_source.get_or_create(&SourceLabel { source }).get()
    }

    fn served_slices(&self) -> Vec<String> {
        let cache = self.wrapper.lock();
        let mut names: Vec<String> = cache.log().objects(&Kind::EndpointSlices).map(|(id, _)| id.1.clone()).collect();
        names.sort();
        names
    }
}

async fn start(
    member: &Member,
    peers: &[UnitMember],
    cloud: &str,
    unit_port: u16,
    vouch: Option<Arc<Vouching>>,
) -> Running {
    let config = WrapperConfig { unit_label_key: Some("unit".into()), ..common::config(member.node) };
    let upstream = kube::Config::new(cloud.parse().expect("url"));
    let wrapper = Wrapper::new(&config, &upstream, Arc::new(Metrics::default())).expect("wrapper");
    wrapper.set_unit_peers(peers.to_vec());
    let client = kube::Client::try_from(controller_support::runtime::without_retries(upstream)).expect("client");
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let unit = Unit::new(UnitConfig {
        identity: NodeIdentity::from_pkcs8(member.node, &member.key).expect("identity"),
        label_key: "unit".into(),
        port: unit_port,
        unreachable_for: Duration::from_secs(30),
        not_ready_for: Duration::from_secs(10),
        read_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(2),
        log: config.log,
        vouch,
    });
    let router = grid_wrapper::unit_server::router(
        unit.slot.clone(),
        grid_wrapper::unit_server::UNIT_SERVE,
        grid_wrapper::unit_server::UnitServerMetrics::default(),
        stopped.clone(),
    );
    let tls = server_config(&unit.config.identity, unit.members.clone()).expect("tls");
    let (_, server) = grid_wrapper::unit_server::listen(
        SocketAddr::new(IpAddr::V4(member.host), unit_port),
        tls,
        router,
        ServerLimits::default(),
        ServerMetrics::default(),
        TlsMetrics::default(),
        stopped.clone(),
    )
    .await
    .expect("the unit listener");
    let mut until_stopped = stopped.clone();
    let run = tokio::spawn(grid_wrapper::unit::run(wrapper.clone(), client, Some(unit.clone()), async move {
        let _ = until_stopped.wait_for(|stop| *stop).await;
    }));
    Running { wrapper, unit, _stop: stop, tasks: vec![server, run] }
}

/// A free port on both members' addresses.
fn free_unit_port(members: &[&Member]) -> u16 {
    loop {
        let port = edgegrid_testing::free_port();
        if members.iter().all(|m| std::net::TcpListener::bind(SocketAddr::new(IpAddr::V4(m.host), port)).is_ok()) {
            return port;
        }
    }
}

struct Site {
    _server: fake_apiserver::FakeApiServer,
    cloud: kube::Client,
    leader: Running,
    follower: Running,
    /// The leader's link to the cloud (fault injection).
    leader_link: edgegrid_testing::link::Link,
    _follower_link: edgegrid_testing::link::Link,
    _signer: tokio::task::JoinHandle<()>,
}

/// The cloud with its signer, and `n1` leading `n2`, which checks (`gated`) or not.
async fn site(gated: bool) -> Site {
    let (server, cloud) = two_unit_cluster().await;
    create_namespace(&cloud, NAMESPACE).await;
    let signing = Ed25519KeyPair::from_pkcs8(&key_document()).expect("a key");
    let public: [u8; 32] = signing.public_key().as_ref().try_into().expect("32 bytes");
    let config =
        SignerConfig { namespace: NAMESPACE.into(), unit_label_key: "unit".into(), period: Duration::from_millis(200) };
    let signer = tokio::spawn(grid_wrapper::signer::run(
        cloud.clone(),
        Arc::new(signing),
        config,
        SignerMetrics::default(),
        std::future::pending(),
    ));
    let vouching = || {
        Arc::new(Vouching::new(VouchConfig {
            namespace: NAMESPACE.into(),
            voucher: VoucherConfig {
                keys: vec![public],
                max_skew: Duration::from_secs(30),
                window: Duration::from_secs(3),
            },
            patience: Duration::from_secs(2),
        }))
    };
    let (n1, n2) = (Member::new("n1", 71), Member::new("n2", 72));
    let peers = [n1.as_unit_member(), n2.as_unit_member()];
    let port = free_unit_port(&[&n1, &n2]);
    let (leader_link, follower_link) =
        (Link::to(server.addr()).await.expect("a link"), Link::to(server.addr()).await.expect("a link"));
    let url = |link: &Link| format!("http://{}", link.address);
    let leader = start(&n1, &peers, &url(&leader_link), port, Some(vouching())).await;
    let follower = start(&n2, &peers, &url(&follower_link), port, gated.then(vouching)).await;
    // (a decision is made before the wrappers know their unit: they watch the cloud alone
    // until then, whatever the metrics say)
    eventually("n2 follows n1 and serves the cloud's slices", || async {
        let following = follower.source("leader") == 1 && leader.unit.slot.current().is_some();
        let checked = !gated || taken(&follower) > 0;
        (following && checked && follower.served_slices() == ["plain-1", "web-1", "web-2"]).then_some(())
    })
    .await;
    Site { _server: server, cloud, leader, follower, leader_link, _follower_link: follower_link, _signer: signer }
}

/// Batches the follower took from its leader.
fn taken(follower: &Running) -> u64 {
    follower.wrapper.metrics().unit_vouch_batches.get_or_create(&ResultLabel { result: "taken" }).get()
}

#[tokio::test]
async fn a_follower_serves_what_the_signer_vouched_for_through_its_leader() {
    let site = site(true).await;
    // a change in the cloud reaches the follower through the leader, once vouched for
    create_namespaced(&site.cloud, slice_object("web-3", "web", &[("10.0.0.9", "n2")])).await;
    eventually("web-3 served by the follower", || async {
        (site.follower.served_slices() == ["plain-1", "web-1", "web-2", "web-3"]).then_some(())
    })
    .await;
    assert_eq!(site.follower.source("leader"), 1, "still following");
}

/// What the compromised leader serves: a slice the cloud does not hold, pointing the
/// unit's `web` at an address of its choosing.
fn forge(leader: &Running) {
    let log = leader.unit.slot.current().expect("n1 leads");
    let forged = serde_json::to_value(slice_object("evil-1", "web", &[("10.6.6.6", "n2")])).expect("json");
    log.apply(UpstreamInput::Upsert(UpstreamKind::EndpointSlices, forged)).expect("into the log");
}

#[tokio::test]
async fn a_follower_never_serves_what_a_compromised_leader_forged_and_leaves_it() {
    let site = site(true).await;
    forge(&site.leader);
    // the gate holds the forged state (never served meanwhile); after its patience the
    // follower gives n1 up
    eventually("n2 passes n1 over and watches the cloud", || async {
        assert_eq!(site.follower.served_slices(), ["plain-1", "web-1", "web-2"], "the forged slice served");
        (site.follower.source("cloud") == 1).then_some(())
    })
    .await;
    // meanwhile and after, never the forged slice
    for _ in 0..20 {
        assert_eq!(site.follower.served_slices(), ["plain-1", "web-1", "web-2"]);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Without the check, the same forgery reaches the follower's kube-proxy: what the gate
/// guards against.
#[tokio::test]
async fn an_unchecked_follower_serves_what_its_leader_forged() {
    let site = site(false).await;
    forge(&site.leader);
    eventually("the forged slice served", || async {
        site.follower.served_slices().contains(&"evil-1".to_string()).then_some(())
    })
    .await;
}

/// A leader that withholds (here: its cloud link is cut, so it has neither the change
/// nor new batches; a compromised one could do the same on purpose): the state its
/// follower serves is no longer vouched for after the window, and after the patience the
/// follower leaves it and serves the change from the cloud itself.
#[tokio::test]
async fn a_follower_leaves_a_leader_that_withholds_what_the_signer_vouches_for() {
    let site = site(true).await;
    site.leader_link.set_cut(true);
    create_namespaced(&site.cloud, slice_object("web-3", "web", &[("10.0.0.9", "n2")])).await;
    eventually("n2 leaves n1 and serves the change from the cloud", || async {
        let served = site.follower.served_slices() == ["plain-1", "web-1", "web-2", "web-3"];
        (served && site.follower.source("cloud") == 1).then_some(())
    })
    .await;
}
