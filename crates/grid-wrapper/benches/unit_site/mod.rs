//! A unit of in-process wrappers on a site, as the binaries run them: each member with its
//! own loopback address, key and unit listener. Shared by the `unit_upstream` and `vouch`
//! benches.

#![allow(dead_code, reason = "each bench uses a different subset")]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use controller_support::server::{ServerLimits, ServerMetrics};
use controller_support::tls::TlsMetrics;
use fake_apiserver::FakeApiServer;
use grid_wrapper::metrics::Metrics;
use grid_wrapper::{Wrapper, WrapperConfig};
use serde_json::json;
use unit_link::node_identity::{NodeIdentity, server_config};
use unit_link::unit::{Unit, UnitConfig};
use unit_link::vouched::Vouching;

use crate::fleet::{NAMESPACE, Scale, UNIT_LABEL, endpoint_node, slice_name, slice_object, wrapper_config};
use grid_wrapper::cache::Kind;

/// The unit label's value the members share.
pub const SHARED_UNIT: &str = "shared";

/// One member of the measured unit: its node, key and address.
pub struct Member {
    pub node: String,
    pub key: Vec<u8>,
    pub public: String,
    pub host: Ipv4Addr,
}

pub fn members(count: usize) -> Vec<Member> {
    use base64::Engine as _;
    use ring::signature::KeyPair as _;
    (0..count)
        .map(|i| {
            let document =
                ring::signature::Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new()).expect("a key");
            let pair = ring::signature::Ed25519KeyPair::from_pkcs8(document.as_ref()).expect("the key");
            Member {
                node: format!("member-{i:03}"),
                key: document.as_ref().to_vec(),
                public: base64::engine::general_purpose::STANDARD.encode(pair.public_key().as_ref()),
                host: Ipv4Addr::new(127, 1, (i / 250) as u8, (i % 250 + 1) as u8),
            }
        })
        .collect()
}

/// The members' Nodes: in their own unit, publishing their identities.
pub fn publish(server: &FakeApiServer, members: &[Member]) {
    let store = server.store();
    let nodes = store.resolve("", "v1", "nodes").expect("nodes");
    for member in members {
        let node = json!({"metadata": {
            "name": member.node,
            "labels": {UNIT_LABEL: SHARED_UNIT, "kubernetes.io/hostname": member.node},
            "annotations": {"edgegrid.io/edge-health-public-key": member.public,
                            "edgegrid.io/edge-health-address": format!("{}:51005", member.host)},
        }});
        store.create(&nodes, "", node).expect("a member's node");
    }
}

/// A wrapper running in process as the binary runs it: its supervisor and, shared, its
/// unit listener.
pub struct Running {
    pub wrapper: Arc<Wrapper>,
    pub stop: tokio::sync::watch::Sender<bool>,
    pub tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Gone at once, as a node losing power: its listener and its links drop.
    pub fn kill(self) {
        self.stop.send_replace(true);
        for task in self.tasks {
            task.abort();
        }
        self.wrapper.stop_watches();
    }
}

/// The unit's members as each node's edge-health would read them.
pub fn unit_members(members: &[Member]) -> Vec<edgegrid_core::unit::upstream::UnitMember> {
    members
        .iter()
        .filter_map(|m| {
            let address = format!("{}:51005", m.host);
            edgegrid_core::unit::upstream::UnitMember::from_annotations(&m.node, Some(&m.public), Some(&address))
        })
        .collect()
}

pub async fn start(
    member: &Member,
    peers: &[edgegrid_core::unit::upstream::UnitMember],
    cloud: SocketAddr,
    shared: bool,
    unit_port: u16,
    max_connections: u32,
    vouch: Option<Arc<Vouching>>,
) -> Running {
    let config = WrapperConfig {
        node_name: member.node.clone(),
        unit_label_key: shared.then(|| UNIT_LABEL.to_string()),
        ..wrapper_config()
    };
    let upstream = kube::Config::new(format!("http://{cloud}").parse().expect("url"));
    let wrapper = Wrapper::new(&config, &upstream, Arc::new(Metrics::default())).expect("wrapper");
    // what its edge-health would serve it (the bench has no daemons)
    wrapper.set_unit_peers(peers.to_vec());
    let client = kube::Client::try_from(controller_support::runtime::without_retries(upstream)).expect("client");
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    let unit = if shared {
        let identity = NodeIdentity::from_pkcs8(&member.node, &member.key).expect("identity");
        let unit = Unit::new(UnitConfig {
            identity,
            label_key: UNIT_LABEL.into(),
            port: unit_port,
            unreachable_for: Duration::from_secs(30),
            not_ready_for: Duration::from_secs(60),
            read_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(2),
            source: None,
            log: config.log,
            vouch,
        });
        let metrics = unit_link::unit_server::UnitServerMetrics::default();
        let router = unit_link::unit_server::router(
            unit.slot.clone(),
            unit_link::unit_server::ServeConfig {
                sync_wait: Duration::from_secs(6),
                ..unit_link::unit_server::UNIT_SERVE
            },
            metrics,
            stopped.clone(),
        );
        let tls = server_config(&unit.config.identity, unit.members.clone()).expect("tls");
        let mut limits = ServerLimits::default();
        limits.flags.max_connections = max_connections;
        let address = SocketAddr::new(IpAddr::V4(member.host), unit_port);
        let (_, server) = unit_link::unit_server::listen(
            address,
            tls,
            router,
            limits,
            ServerMetrics::default(),
            TlsMetrics::default(),
            stopped.clone(),
        )
        .await
        .expect("the unit listener");
        tasks.push(server);
        Some(unit)
    } else {
        None
    };
    let mut until_stopped = stopped.clone();
    tasks.push(tokio::spawn(unit_link::unit::run(wrapper.clone(), client, unit, async move {
        let _ = until_stopped.wait_for(|stop| *stop).await;
    })));
    Running { wrapper, stop, tasks }
}

/// A slice whose endpoints every node serves (not topology-aware), so a change to it is
/// visible in every member's view: the `k`th of those the changes cycle through.
pub fn visible_slice(k: usize) -> usize {
    2 * k + 1
}

/// `slice` with its first endpoint moved to pod `pod`.
pub fn changed_slice(scale: &Scale, slice: usize, pod: usize) -> serde_json::Value {
    let node = endpoint_node(slice, 0, scale);
    let mut value = serde_json::to_value(slice_object(slice, scale, Some((pod, node)), 0)).expect("serialisable");
    // the stored object's own uid and version stand (an update naming others is refused)
    if let Some(metadata) = value["metadata"].as_object_mut() {
        metadata.remove("uid");
        metadata.remove("resourceVersion");
    }
    value
}

/// Writes `pod` into `slice` upstream.
pub fn write_change(server: &FakeApiServer, scale: &Scale, slice: usize, pod: usize) {
    let store = server.store();
    let slices = store.resolve("discovery.k8s.io", "v1", "endpointslices").expect("slices");
    store.update(&slices, NAMESPACE, &slice_name(slice), changed_slice(scale, slice, pod), false).expect("update");
}

/// The first address of `slice` as `wrapper` serves it.
pub fn served_first(wrapper: &Wrapper, slice: usize) -> Option<String> {
    let id = (NAMESPACE.to_string(), slice_name(slice));
    let object = wrapper.lock().log().get(&Kind::EndpointSlices, &id).map(|o| o.value())?;
    object["endpoints"][0]["addresses"][0].as_str().map(str::to_string)
}
