//! The watched state: Nodes, node Leases and Pods as the runtime's watch helper feeds them
//! (and the `edge-health-config` ConfigMap when SuperEdge's node units are read), the
//! membership the node watch feeds, and whether the view is current. The loop and the
//! writes only read it.
//!
//! A view that is not current (a watch failed, or is relisting) must not be judged: a
//! Lease cache frozen by an API server restart shows every node silent past its grace
//! period, every zone fully disrupted (so every NoExecute taint lifted) and live nodes
//! Unknown; the soak saw exactly that. So the Node and Lease watches start over with a
//! list after every failure, and are current again only when that list is complete.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use controller_support::watch::{Index, Key, RetryGroup, Watch};
use edgegrid_core::keys;
use edgegrid_core::unit::membership::{Labels, NodeUnitCheck, UnitSource, WatchedNodes};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::Api;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tokio::sync::watch as signal;

use super::{ControllerConfig, Error};
use crate::snapshot::node_snapshot;

pub(super) struct Caches {
    pub(super) nodes: Cache<Node>,
    pub(super) leases: Cache<Lease>,
    pub(super) pods: Cache<Pod>,
    /// Fed by the node watch (and the ConfigMap's): whom edge-health watches, and which
    /// nodes changed since their NoSchedule taints were last looked at.
    pub(super) membership: Arc<Mutex<Membership>>,
    /// The ConfigMap watch has listed (always true when it is not read).
    pub(super) config_synced: Arc<AtomicBool>,
}

impl Caches {
    /// Whether what the monitor judges from (Nodes and Leases) is the API server's view now.
    pub(super) fn view_current(&self) -> bool {
        self.nodes.is_current() && self.leases.is_current()
    }
}

/// One watched collection: its objects, and whether they are current.
pub(super) struct Cache<K> {
    shared: Arc<RwLock<Held<K>>>,
    listed: signal::Receiver<bool>,
}

struct Held<K> {
    objects: BTreeMap<Key, Arc<K>>,
    /// Complete since the last list ended, and no failure since.
    current: bool,
}

impl<K> Cache<K> {
    fn new() -> (Self, CacheFeed<K>) {
        let shared = Arc::new(RwLock::new(Held { objects: BTreeMap::new(), current: false }));
        let (listed_tx, listed) = signal::channel(false);
        (Self { shared: shared.clone(), listed }, CacheFeed { shared, listed: listed_tx })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Held<K>> {
        self.shared.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn state(&self) -> Vec<Arc<K>> {
        self.read().objects.values().cloned().collect()
    }

    /// A cluster-scoped object by name.
    pub(super) fn get(&self, name: &str) -> Option<Arc<K>> {
        self.read().objects.get(&Key { namespace: None, name: name.to_string() }).cloned()
    }

    pub(super) fn is_current(&self) -> bool {
        self.read().current
    }

    /// Waits until the first list is complete.
    pub(super) async fn wait_until_listed(&self) {
        let mut listed = self.listed.clone();
        // the feed lives as long as the watch task; if it ends, so does the wait
        let _ = listed.wait_for(|listed| *listed).await;
    }
}

/// What the watch helper feeds a [`Cache`] through.
struct CacheFeed<K> {
    shared: Arc<RwLock<Held<K>>>,
    listed: signal::Sender<bool>,
}

impl<K> CacheFeed<K> {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Held<K>> {
        self.shared.write().unwrap_or_else(|e| e.into_inner())
    }
}

impl<K: kube::Resource> Index<K> for CacheFeed<K> {
    fn begin(&mut self) {
        self.write().current = false;
    }
    fn apply(&mut self, object: K) {
        self.write().objects.insert(Key::of(&object), Arc::new(object));
    }
    fn delete(&mut self, key: Key) {
        self.write().objects.remove(&key);
    }
    fn done(&mut self) {
        self.write().current = true;
        self.listed.send_replace(true);
    }
    fn failed(&mut self, _: &watcher::Error) {
        self.write().current = false;
    }
}

pub(super) struct Membership {
    pub(super) watched: WatchedNodes,
    /// Nodes added or changed since the last NoSchedule pass (kube-controller-manager runs
    /// that pass on every node event).
    pub(super) changed: BTreeSet<String>,
}

/// A node's name, labels and annotations, as a list delivers them.
type ListedNode = (String, Labels, Option<Labels>);

/// The node watch's index: the cache, and the membership (a list applied at its end, as
/// one replacement, so a relist costs one recount rather than one per node).
struct NodeFeed {
    cache: CacheFeed<Node>,
    membership: Arc<Mutex<Membership>>,
    /// The nodes listed so far while a list is under way.
    listing: Option<Vec<ListedNode>>,
}

impl NodeFeed {
    fn membership(&self) -> std::sync::MutexGuard<'_, Membership> {
        self.membership.lock().expect("membership lock")
    }
}

impl Index<Node> for NodeFeed {
    fn begin(&mut self) {
        self.listing = Some(Vec::new());
        self.cache.begin();
    }
    fn apply(&mut self, node: Node) {
        let name = node.name_any();
        let labels = node.metadata.labels.clone().unwrap_or_default();
        match self.listing.as_mut() {
            Some(listing) => listing.push((name.clone(), labels, node.metadata.annotations.clone())),
            None => {
                self.membership().watched.apply(&name, &labels, node.metadata.annotations.as_ref());
            }
        }
        self.membership().changed.insert(name);
        self.cache.apply(node);
    }
    fn delete(&mut self, key: Key) {
        // in a list, absence is what `done` applies
        if self.listing.is_none() {
            self.membership().watched.delete(&key.name);
        }
        self.cache.delete(key);
    }
    fn done(&mut self) {
        let listed = self.listing.take().unwrap_or_default();
        self.membership().watched.replace_all(listed.iter().map(|(n, l, a)| (n.clone(), l.clone(), a.as_ref())));
        self.cache.done();
    }
    fn failed(&mut self, error: &watcher::Error) {
        self.cache.failed(error);
    }
}

pub(super) fn start_caches(client: &Client, config: &ControllerConfig) -> (Caches, Vec<tokio::task::JoinHandle<()>>) {
    let membership = Arc::new(Mutex::new(Membership {
        watched: WatchedNodes::new(config.unit_source.clone()),
        changed: BTreeSet::new(),
    }));
    // one view: after an outage, the first watch to hear from the server wakes the others
    let group = RetryGroup::new();
    let (nodes, node_feed) = Cache::new();
    let node_feed = NodeFeed { cache: node_feed, membership: membership.clone(), listing: None };
    let (leases, lease_feed) = Cache::new();
    let (pods, pod_feed) = Cache::new();
    // every watch ends well inside the client's read timeout, so one that hangs fails
    // (`ControllerConfig::read_timeout`)
    let timeout = config.watch_timeout();
    let mut drivers = vec![
        tokio::spawn(
            Watch::new(Api::<Node>::all(client.clone()))
                .retrying_with(&group)
                .relisting_after_failure()
                .timeout(timeout)
                .run(node_feed),
        ),
        tokio::spawn(
            Watch::new(Api::<Lease>::namespaced(client.clone(), keys::NODE_LEASE_NAMESPACE))
                .retrying_with(&group)
                .relisting_after_failure()
                .timeout(timeout)
                .run(lease_feed),
        ),
        // pods are not judged from, so they may resume where they were
        tokio::spawn(Watch::new(Api::<Pod>::all(client.clone())).retrying_with(&group).timeout(timeout).run(pod_feed)),
    ];
    let config_synced = Arc::new(AtomicBool::new(config.unit_source != UnitSource::NodeUnits));
    if config.unit_source == UnitSource::NodeUnits {
        let (fed, synced, client) = (membership.clone(), config_synced.clone(), client.clone());
        let namespace = config.edge_health_config_namespace.clone();
        drivers.push(tokio::spawn(async move {
            let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
            let on_change = |map: Option<&ConfigMap>| {
                fed.lock().expect("membership lock").watched.set_node_unit_check(NodeUnitCheck::of_config_map(map));
            };
            Watch::new(api)
                .timeout(timeout)
                .follow(keys::EDGE_HEALTH_CONFIGMAP, on_change, || synced.store(true, Ordering::SeqCst))
                .await
        }));
    }
    (Caches { nodes, leases, pods, membership, config_synced }, drivers)
}

pub(super) fn snapshots(caches: &Caches) -> Vec<node_lifecycle::lifecycle::NodeSnapshot> {
    let leases: BTreeMap<String, Arc<Lease>> = caches.leases.state().into_iter().map(|l| (l.name_any(), l)).collect();
    let membership = caches.membership.lock().expect("membership lock");
    caches
        .nodes
        .state()
        .iter()
        .map(|node| {
            let name = node.name_any();
            node_snapshot(node, leases.get(&name).map(|l| l.as_ref()), membership.watched.is_watched(&name))
        })
        .collect()
}

pub(super) fn cached_node(caches: &Caches, name: &str) -> Result<Arc<Node>, Error> {
    caches.nodes.get(name).ok_or_else(|| Error::NodeNotCached(name.into()))
}

pub(super) fn pods_on(caches: &Caches, node: &str) -> Vec<Arc<Pod>> {
    caches
        .pods
        .state()
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .collect()
}
