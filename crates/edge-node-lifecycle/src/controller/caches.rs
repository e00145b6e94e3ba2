//! The watched state: the reflectors this controller drives over Nodes, node Leases and Pods
//! (and the `edge-health-config` ConfigMap when SuperEdge's node units are read), and the
//! membership the node watch feeds, relists included. The loop and the writes only read it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use controller_support::watch::follow_object;
use edgegrid_core::keys;
use edgegrid_core::membership::{Labels, NodeUnitCheck, UnitSource, WatchedNodes};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use super::{ControllerConfig, Error};
use crate::snapshot::node_snapshot;

pub(super) struct Caches {
    pub(super) nodes: Store<Node>,
    pub(super) leases: Store<Lease>,
    pub(super) pods: Store<Pod>,
    /// Fed by the node watch (and the ConfigMap's): whom edge-health watches, and which
    /// nodes changed since their NoSchedule taints were last looked at.
    pub(super) membership: Arc<Mutex<Membership>>,
    /// The ConfigMap watch has listed (always true when it is not read).
    pub(super) config_synced: Arc<AtomicBool>,
}

pub(super) struct Membership {
    pub(super) watched: WatchedNodes,
    /// Nodes added or changed since the last NoSchedule pass (kube-controller-manager runs
    /// that pass on every node event).
    pub(super) changed: BTreeSet<String>,
    /// The names listed so far while a relist is under way.
    relisting: Option<Vec<ListedNode>>,
}

/// A node's name, labels and annotations, as a relist delivers them.
type ListedNode = (String, Labels, Option<Labels>);

impl Membership {
    fn on_node(&mut self, event: &watcher::Event<Node>) {
        let entry = |node: &Node| {
            (node.name_any(), node.metadata.labels.clone().unwrap_or_default(), node.metadata.annotations.clone())
        };
        match event {
            watcher::Event::Apply(node) => {
                let empty = Labels::new();
                let name = node.name_any();
                self.watched.apply(
                    &name,
                    node.metadata.labels.as_ref().unwrap_or(&empty),
                    node.metadata.annotations.as_ref(),
                );
                self.changed.insert(name);
            }
            watcher::Event::Delete(node) => {
                self.watched.delete(&node.name_any());
            }
            watcher::Event::Init => self.relisting = Some(Vec::new()),
            watcher::Event::InitApply(node) => {
                let listed = entry(node);
                self.changed.insert(listed.0.clone());
                self.relisting.get_or_insert_default().push(listed);
            }
            watcher::Event::InitDone => {
                let listed = self.relisting.take().unwrap_or_default();
                self.watched.replace_all(listed.iter().map(|(n, l, a)| (n.clone(), l.clone(), a.as_ref())));
            }
        }
    }
}

pub(super) fn start_caches(client: &Client, config: &ControllerConfig) -> (Caches, Vec<tokio::task::JoinHandle<()>>) {
    fn cache<K>(
        api: Api<K>,
        mut on_event: impl FnMut(&watcher::Event<K>) + Send + 'static,
    ) -> (Store<K>, tokio::task::JoinHandle<()>)
    where
        K: kube::Resource<DynamicType = ()>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + Sync
            + 'static,
    {
        let (reader, writer) = reflector::store();
        let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()).default_backoff());
        let driver = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(event) => on_event(&event),
                    Err(e) => tracing::warn!(error = %e, "watch error"),
                }
            }
        });
        (reader, driver)
    }
    let membership = Arc::new(Mutex::new(Membership {
        watched: WatchedNodes::new(config.unit_source.clone()),
        changed: BTreeSet::new(),
        relisting: None,
    }));
    let fed = membership.clone();
    let (nodes, n) =
        cache(Api::<Node>::all(client.clone()), move |event| fed.lock().expect("membership lock").on_node(event));
    let (leases, l) = cache(Api::<Lease>::namespaced(client.clone(), keys::NODE_LEASE_NAMESPACE), |_| {});
    let (pods, p) = cache(Api::<Pod>::all(client.clone()), |_| {});
    let mut drivers = vec![n, l, p];
    let config_synced = Arc::new(AtomicBool::new(config.unit_source != UnitSource::NodeUnits));
    if config.unit_source == UnitSource::NodeUnits {
        let (fed, synced, client) = (membership.clone(), config_synced.clone(), client.clone());
        let namespace = config.edge_health_config_namespace.clone();
        drivers.push(tokio::spawn(async move {
            let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
            let on_change = |map: Option<&ConfigMap>| {
                fed.lock().expect("membership lock").watched.set_node_unit_check(NodeUnitCheck::of_config_map(map));
            };
            follow_object(api, keys::EDGE_HEALTH_CONFIGMAP, on_change, || synced.store(true, Ordering::SeqCst)).await
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
    caches.nodes.get(&reflector::ObjectRef::new(name)).ok_or_else(|| Error::NodeNotCached(name.into()))
}

pub(super) fn pods_on(caches: &Caches, node: &str) -> Vec<Arc<Pod>> {
    caches
        .pods
        .state()
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .collect()
}
