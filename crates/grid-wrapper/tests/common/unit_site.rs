//! A unit's wrappers in process, each on its own loopback address with its own unit
//! listener, for the tests of how a wrapper chooses and leaves its leader (`vouched.rs`,
//! `unit_ports.rs`). Included by path, so that only those test binaries compile it.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use controller_support::server::{ServerLimits, ServerMetrics};
use controller_support::tls::TlsMetrics;
use edgegrid_core::unit::upstream::UnitMember;
use grid_wrapper::cache::Kind;
use grid_wrapper::metrics::Metrics;
use grid_wrapper::{Wrapper, WrapperConfig};
use ring::rand::SystemRandom;
use ring::signature::Ed25519KeyPair;
use unit_link::metrics::SourceLabel;
use unit_link::node_identity::{NodeIdentity, server_config};
use unit_link::unit::{Unit, UnitConfig};
use unit_link::vouched::Vouching;

pub fn key_document() -> Vec<u8> {
    Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).expect("a key").as_ref().to_vec()
}

/// A member of unit `a` on its own loopback address.
pub struct Member {
    pub node: &'static str,
    pub host: Ipv4Addr,
    pub key: Vec<u8>,
}

impl Member {
    pub fn new(node: &'static str, host: u8) -> Self {
        Self { node, host: Ipv4Addr::new(127, 0, 0, host), key: key_document() }
    }

    pub fn as_unit_member(&self) -> UnitMember {
        let identity = NodeIdentity::from_pkcs8(self.node, &self.key).expect("identity");
        let public = base64::engine::general_purpose::STANDARD.encode(identity.public_key());
        UnitMember::from_annotations(self.node, Some(&public), Some(&format!("{}:51005", self.host))).expect("member")
    }
}

pub struct Running {
    pub wrapper: Arc<Wrapper>,
    pub unit: Unit,
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
    pub fn source(&self, source: &'static str) -> i64 {
        self.wrapper.metrics().link.upstream_source.get_or_create(&SourceLabel { source }).get()
    }

    pub fn served_slices(&self) -> Vec<String> {
        let cache = self.wrapper.lock();
        let mut names: Vec<String> = cache.log().objects(&Kind::EndpointSlices).map(|(id, _)| id.1.clone()).collect();
        names.sort();
        names
    }
}

pub async fn start(
    member: &Member,
    peers: &[UnitMember],
    cloud: &str,
    unit_port: u16,
    vouch: Option<Arc<Vouching>>,
) -> Running {
    start_with(member, peers, cloud, unit_port, vouch, Duration::from_secs(30)).await
}

/// [`start`], passing failing members over for `unreachable_for` (doubled each time).
pub async fn start_with(
    member: &Member,
    peers: &[UnitMember],
    cloud: &str,
    unit_port: u16,
    vouch: Option<Arc<Vouching>>,
    unreachable_for: Duration,
) -> Running {
    let config = WrapperConfig { unit_label_key: Some("unit".into()), ..crate::common::config(member.node) };
    let upstream = kube::Config::new(cloud.parse().expect("url"));
    let wrapper = Wrapper::new(&config, &upstream, Arc::new(Metrics::default())).expect("wrapper");
    wrapper.set_unit_peers(peers.to_vec());
    let client = kube::Client::try_from(controller_support::runtime::without_retries(upstream)).expect("client");
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let unit = Unit::new(UnitConfig {
        identity: NodeIdentity::from_pkcs8(member.node, &member.key).expect("identity"),
        label_key: "unit".into(),
        port: unit_port,
        unreachable_for,
        not_ready_for: Duration::from_secs(10),
        read_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(2),
        source: Some(IpAddr::V4(member.host)),
        log: config.log,
        vouch,
    });
    let router = unit_link::unit_server::router(
        unit.slot.clone(),
        unit_link::unit_server::UNIT_SERVE,
        unit_link::unit_server::UnitServerMetrics::default(),
        stopped.clone(),
    );
    let tls = server_config(&unit.config.identity, unit.members.clone()).expect("tls");
    let (_, server) = unit_link::unit_server::listen(
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
    let run = tokio::spawn(unit_link::unit::run(wrapper.clone(), client, Some(unit.clone()), async move {
        let _ = until_stopped.wait_for(|stop| *stop).await;
    }));
    Running { wrapper, unit, _stop: stop, tasks: vec![server, run] }
}

/// A free port on both members' addresses.
pub fn free_unit_port(members: &[&Member]) -> u16 {
    loop {
        let port = edgegrid_testing::free_port();
        if members.iter().all(|m| std::net::TcpListener::bind(SocketAddr::new(IpAddr::V4(m.host), port)).is_ok()) {
            return port;
        }
    }
}
