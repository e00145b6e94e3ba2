//! The pruned view of one node: every cached EndpointSlice/Endpoints with its pruned
//! form, kept current under input changes.
//!
//! SuperEdge re-pruned every object under one global lock on any node or Service change.
//! Here each change re-decides only what it can affect, through two indexes: objects by
//! the nodes their endpoints run on, and slices by their Service (the
//! `kubernetes.io/service-name` label, never the slice's name). [`PrunedView::apply`]
//! returns exactly the objects whose pruned form changed (a change of the Endpoints
//! `default/kubernetes`'s local-apiserver announcement included: the apiserver's slices
//! follow it); [`PrunedView::full_rebuild`]
//! recomputes everything from the raw inputs and is the oracle the tests hold it to.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::marker::PhantomData;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::local_endpoint::LocalEndpoint;
use super::namespaced_name::NamespacedName;
use super::policy::{PolicyError, TopologyPolicy};
use super::prune::{self, Candidate, EndpointFilter, Labels, NodeLabels, PruneContext, Selection};
use crate::keys;

/// The name the view caches an object under: one without both parts is not cached.
impl NamespacedName {
    fn of(meta: &ObjectMeta, kind: ObjectKind) -> Result<Self, ViewError> {
        match (&meta.namespace, &meta.name) {
            (Some(namespace), Some(name)) if !namespace.is_empty() && !name.is_empty() => {
                Ok(Self::new(namespace.clone(), name.clone()))
            }
            _ => Err(ViewError::MissingNamespacedName { kind }),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    EndpointSlice,
    Endpoints,
}

/// An object the view serves in pruned form.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub kind: ObjectKind,
    pub id: NamespacedName,
}

impl ObjectKey {
    pub fn slice(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self { kind: ObjectKind::EndpointSlice, id: NamespacedName::new(namespace, name) }
    }
    pub fn endpoints(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self { kind: ObjectKind::Endpoints, id: NamespacedName::new(namespace, name) }
    }
}

#[allow(clippy::large_enum_variant, reason = "handed over by value once per change")]
#[derive(Clone, Debug, PartialEq)]
pub enum PrunedObject {
    Slice(EndpointSlice),
    Endpoints(Endpoints),
}

/// Metadata that changes with every upstream write without changing what a client of the
/// pruned view can act on: a new `resourceVersion`, `generation` and `managedFields` entry
/// come with every write, and the endpoints controllers restamp
/// `endpoints.kubernetes.io/last-change-trigger-time` whenever any endpoint changed,
/// including the ones pruning removed.
pub const VOLATILE_ANNOTATIONS: [&str; 1] = ["endpoints.kubernetes.io/last-change-trigger-time"];

fn without_volatile(meta: &ObjectMeta) -> ObjectMeta {
    let mut meta = meta.clone();
    meta.resource_version = None;
    meta.generation = None;
    meta.managed_fields = None;
    if let Some(annotations) = &mut meta.annotations {
        for key in VOLATILE_ANNOTATIONS {
            annotations.remove(key);
        }
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
    meta
}

impl PrunedObject {
    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Self::Slice(slice) => &slice.metadata,
            Self::Endpoints(endpoints) => &endpoints.metadata,
        }
    }

    /// Whether two versions look the same to a client: equal but for the metadata every
    /// upstream write changes (see [`VOLATILE_ANNOTATIONS`]). A pruned object whose form
    /// did not change must not wake any watcher.
    pub fn same_form(&self, other: &Self) -> bool {
        let body_equal = match (self, other) {
            (Self::Slice(a), Self::Slice(b)) => {
                a.address_type == b.address_type && a.endpoints == b.endpoints && a.ports == b.ports
            }
            (Self::Endpoints(a), Self::Endpoints(b)) => a.subsets == b.subsets,
            _ => false,
        };
        body_equal && without_volatile(self.metadata()) == without_volatile(other.metadata())
    }
}

/// One input event, as an informer delivers it.
#[allow(clippy::large_enum_variant, reason = "built per informer event and consumed at once")]
#[derive(Clone, Debug)]
pub enum InputChange {
    SliceUpserted(EndpointSlice),
    SliceDeleted(NamespacedName),
    EndpointsUpserted(Endpoints),
    EndpointsDeleted(NamespacedName),
    ServiceUpserted(Service),
    ServiceDeleted(NamespacedName),
    /// A node appeared or its labels changed (the local node included).
    NodeUpserted {
        name: String,
        labels: Labels,
    },
    NodeDeleted(String),
    /// The nodes the local unit's edge-health currently votes down (the whole set; an
    /// empty set lifts every such verdict).
    NodesDown(BTreeSet<String>),
}

/// The nodes a view knows: their labels, and which the local unit votes down.
#[derive(Default)]
struct Nodes {
    labels: HashMap<String, Labels>,
    down: BTreeSet<String>,
}

impl NodeLabels for Nodes {
    fn labels(&self, node: &str) -> Option<&Labels> {
        self.labels.get(node)
    }

    fn is_down(&self, node: &str) -> bool {
        self.down.contains(node)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewChangeKind {
    Added,
    Modified,
    Deleted,
}

/// An object whose pruned form changed: what a watcher must be told, with the new
/// pruned form (`None` for `Deleted`) so the caller never rebuilds it.
#[derive(Clone, Debug, PartialEq)]
pub struct ViewChange {
    pub key: ObjectKey,
    pub kind: ViewChangeKind,
    pub object: Option<PrunedObject>,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ViewError {
    #[error("{kind:?} without metadata.namespace and metadata.name cannot be cached")]
    MissingNamespacedName { kind: ObjectKind },
    #[error("Service without metadata.namespace and metadata.name cannot be cached")]
    ServiceWithoutName,
}

struct ServiceEntry {
    policy: TopologyPolicy,
    /// Boxed: rare, and several times the size of the rest of the entry.
    error: Option<Box<PolicyError>>,
    slice_filter: EndpointFilter,
    endpoints_filter: EndpointFilter,
}

/// One cached upstream object, kept encoded: a typed k8s-openapi object costs about three
/// times its JSON, and a wrapper caches a whole cluster's slices on every edge node. The
/// JSON is LZ4-compressed too: a slice repeats its field names, conditions and pod-name
/// prefixes per endpoint, and compressed takes about a third of the space for a few
/// microseconds per decoding. What selection reads on every change (where each endpoint
/// runs, whether it is ready, the announced local endpoint) is kept apart; the object is
/// decoded only to materialise a pruned form, once per change of that object.
struct Cached<T> {
    /// LZ4 block of the JSON, prefixed with its length.
    compressed_json: Box<[u8]>,
    /// In endpoint order. The node names are shared with [`PrunedView::objects_on_node`]'s
    /// keys: a cluster has few nodes and many endpoints.
    candidates: Box<[OwnedCandidate]>,
    /// What the `default/kubernetes` rewrite would serve, if this object itself announces
    /// it (boxed: one object in a cluster does). A slice without one follows its
    /// Service's Endpoints, looked up when its selection is decided.
    local: Option<Box<LocalEndpoint>>,
    /// The Service this object's endpoints belong to, if it names one; a slice's is
    /// shared with [`PrunedView::slices_of_service`]'s key.
    service: Option<Arc<NamespacedName>>,
    selection: Selection,
    object_type: PhantomData<T>,
}

struct OwnedCandidate {
    node: Option<Arc<str>>,
    ready: bool,
}

impl<T: Serialize + DeserializeOwned + Default> Cached<T> {
    fn new(
        object: &T,
        candidates: Box<[OwnedCandidate]>,
        local: Option<LocalEndpoint>,
        service: Option<Arc<NamespacedName>>,
    ) -> Self {
        Self {
            // encoding a k8s-openapi object cannot fail
            compressed_json: lz4_flex::block::compress_prepend_size(&serde_json::to_vec(object).unwrap_or_default())
                .into_boxed_slice(),
            candidates,
            local: local.map(Box::new),
            service,
            selection: Selection::All,
            object_type: PhantomData,
        }
    }

    /// The cached object, decoded.
    fn object(&self) -> T {
        // the bytes are this module's own encoding of a T, so decoding cannot fail
        lz4_flex::block::decompress_size_prepended(&self.compressed_json)
            .ok()
            .and_then(|json| serde_json::from_slice(&json).ok())
            .unwrap_or_default()
    }

    fn candidates(&self) -> impl Iterator<Item = Candidate<'_>> {
        self.candidates.iter().map(|c| Candidate { node: c.node.as_deref(), ready: c.ready })
    }

    fn nodes(&self) -> impl Iterator<Item = Option<&str>> {
        self.candidates.iter().map(|c| c.node.as_deref())
    }
}

/// What one change requires: objects whose source changed (with their old pruned form),
/// objects whose selection may have changed, Services whose filter may have changed.
#[derive(Default)]
struct Work {
    replaced: BTreeMap<ObjectKey, Option<PrunedObject>>,
    reselect: BTreeSet<ObjectKey>,
    refilter: BTreeSet<NamespacedName>,
}

pub struct PrunedView {
    local_node: String,
    rewrite_local_apiserver: bool,
    nodes: Nodes,
    services: HashMap<NamespacedName, ServiceEntry>,
    slices: HashMap<NamespacedName, Cached<EndpointSlice>>,
    endpoints: HashMap<NamespacedName, Cached<Endpoints>>,
    /// Slice names, sorted (a Service has one slice or a few: a set's tree node would
    /// cost more than the names).
    slices_of_service: HashMap<Arc<NamespacedName>, Vec<String>>,
    /// One shared key per object, however many of its endpoints run on a node.
    objects_on_node: HashMap<Arc<str>, HashSet<Arc<ObjectKey>>>,
}

const PASS_THROUGH: TopologyPolicy = TopologyPolicy::PassThrough;
const KEEP_ALL: EndpointFilter = EndpointFilter::All;

impl PrunedView {
    /// A view for `local_node`. `rewrite_local_apiserver` enables the `default/kubernetes`
    /// rewrite (only meaningful when the wrapper runs in-cluster).
    pub fn new(local_node: impl Into<String>, rewrite_local_apiserver: bool) -> Self {
        Self {
            local_node: local_node.into(),
            rewrite_local_apiserver,
            nodes: Nodes::default(),
            services: HashMap::new(),
            slices: HashMap::new(),
            endpoints: HashMap::new(),
            slices_of_service: HashMap::new(),
            objects_on_node: HashMap::new(),
        }
    }

    pub fn local_node(&self) -> &str {
        &self.local_node
    }

    /// Whether the local node's labels are known (until then every topology-aware
    /// Service prunes to nothing, so a wrapper should not report ready before).
    pub fn knows_local_node(&self) -> bool {
        self.nodes.labels.contains_key(&self.local_node)
    }

    /// Services whose topology annotations could not be read (they pass through).
    pub fn policy_errors(&self) -> impl Iterator<Item = (&NamespacedName, &PolicyError)> {
        self.services.iter().filter_map(|(id, entry)| entry.error.as_deref().map(|e| (id, e)))
    }

    /// Cached slices and Endpoints with at least one endpoint on `node`, sorted.
    pub fn objects_on_node(&self, node: &str) -> Vec<ObjectKey> {
        let mut keys: Vec<ObjectKey> =
            self.objects_on_node.get(node).into_iter().flatten().map(|key| (**key).clone()).collect();
        keys.sort();
        keys
    }

    /// Names of the cached slices labelled as belonging to `service`, sorted.
    pub fn slices_of_service(&self, service: &NamespacedName) -> Vec<String> {
        self.slices_of_service.get(service).into_iter().flatten().cloned().collect()
    }

    /// The pruned form of one cached object.
    pub fn pruned(&self, key: &ObjectKey) -> Option<PrunedObject> {
        match key.kind {
            ObjectKind::EndpointSlice => self
                .slices
                .get(&key.id)
                .map(|c| PrunedObject::Slice(prune::materialize_slice(&c.object(), &c.selection))),
            ObjectKind::Endpoints => self
                .endpoints
                .get(&key.id)
                .map(|c| PrunedObject::Endpoints(prune::materialize_endpoints(&c.object(), &c.selection))),
        }
    }

    pub fn pruned_slices(&self) -> impl Iterator<Item = EndpointSlice> + '_ {
        self.slices.values().map(|c| prune::materialize_slice(&c.object(), &c.selection))
    }

    pub fn pruned_endpoints(&self) -> impl Iterator<Item = Endpoints> + '_ {
        self.endpoints.values().map(|c| prune::materialize_endpoints(&c.object(), &c.selection))
    }

    /// Applies one input change; returns the objects whose pruned form changed, sorted by key.
    pub fn apply(&mut self, change: InputChange) -> Result<Vec<ViewChange>, ViewError> {
        let mut work = Work::default();
        match change {
            InputChange::SliceUpserted(slice) => {
                let id = NamespacedName::of(&slice.metadata, ObjectKind::EndpointSlice)?;
                self.replace_slice(id, Some(slice), &mut work);
            }
            InputChange::SliceDeleted(id) => self.replace_slice(id, None, &mut work),
            InputChange::EndpointsUpserted(endpoints) => {
                let id = NamespacedName::of(&endpoints.metadata, ObjectKind::Endpoints)?;
                self.replace_endpoints(id, Some(endpoints), &mut work);
            }
            InputChange::EndpointsDeleted(id) => self.replace_endpoints(id, None, &mut work),
            InputChange::ServiceUpserted(service) => {
                let (Some(namespace), Some(name)) = (&service.metadata.namespace, &service.metadata.name) else {
                    return Err(ViewError::ServiceWithoutName);
                };
                let id = NamespacedName::new(namespace.clone(), name.clone());
                let (policy, error) = match TopologyPolicy::from_annotations(service.metadata.annotations.as_ref()) {
                    Ok(policy) => (policy, None),
                    Err(e) => (TopologyPolicy::PassThrough, Some(e)),
                };
                self.set_policy(id, Some((policy, error)), &mut work);
            }
            InputChange::ServiceDeleted(id) => self.set_policy(id, None, &mut work),
            InputChange::NodeUpserted { name, labels } => {
                if self.nodes.labels.get(&name) == Some(&labels) {
                    return Ok(Vec::new());
                }
                self.nodes.labels.insert(name.clone(), labels);
                self.node_changed(&name, &mut work);
            }
            InputChange::NodeDeleted(name) => {
                if self.nodes.labels.remove(&name).is_none() {
                    return Ok(Vec::new());
                }
                self.node_changed(&name, &mut work);
            }
            InputChange::NodesDown(down) => {
                let changed: Vec<String> = self.nodes.down.symmetric_difference(&down).cloned().collect();
                self.nodes.down = down;
                for name in changed {
                    self.node_changed(&name, &mut work);
                }
            }
        }
        Ok(self.settle(work))
    }

    /// Recomputes every pruned object from the raw inputs alone, ignoring every cached
    /// decision and index: the strategy SuperEdge used on each change, kept as the
    /// reference the incremental path is tested (and benchmarked) against.
    pub fn full_rebuild(&self) -> BTreeMap<ObjectKey, PrunedObject> {
        let ctx = self.ctx();
        let mut by_service: BTreeMap<Option<NamespacedName>, Vec<(&NamespacedName, EndpointSlice)>> = BTreeMap::new();
        for (id, cached) in &self.slices {
            let slice = cached.object();
            by_service.entry(service_of_slice(&slice)).or_default().push((id, slice));
        }
        let mut out = BTreeMap::new();
        for (service, members) in by_service {
            let policy = service.as_ref().map_or(&PASS_THROUGH, |s| self.policy_of(s));
            let slices: Vec<&EndpointSlice> = members.iter().map(|(_, s)| s).collect();
            let endpoints = service.as_ref().and_then(|s| self.endpoints.get(s)).map(Cached::object);
            let pruned = prune::prune_service_slices(policy, &slices, endpoints.as_ref(), ctx);
            for ((id, _), pruned) in members.iter().zip(pruned) {
                out.insert(
                    ObjectKey { kind: ObjectKind::EndpointSlice, id: (*id).clone() },
                    PrunedObject::Slice(pruned),
                );
            }
        }
        for (id, cached) in &self.endpoints {
            let pruned = prune::prune_endpoints(self.policy_of(id), &cached.object(), ctx);
            out.insert(ObjectKey { kind: ObjectKind::Endpoints, id: id.clone() }, PrunedObject::Endpoints(pruned));
        }
        out
    }

    fn ctx(&self) -> PruneContext<'_, Nodes> {
        PruneContext {
            local: self.nodes.labels.get(&self.local_node),
            nodes: &self.nodes,
            rewrite_local_apiserver: self.rewrite_local_apiserver,
        }
    }

    /// A Service not (yet) cached passes its slices and Endpoints through unpruned, as
    /// SuperEdge's wrapper serves a "dangling" slice unchanged (`pruneEndpointSliceV1`):
    /// kube-proxy makes no rule for endpoints without their Service, and once the Service
    /// arrives its slices are pruned by its policy.
    fn policy_of(&self, service: &NamespacedName) -> &TopologyPolicy {
        self.services.get(service).map_or(&PASS_THROUGH, |e| &e.policy)
    }

    fn replace_slice(&mut self, id: NamespacedName, new: Option<EndpointSlice>, work: &mut Work) {
        let key = ObjectKey { kind: ObjectKind::EndpointSlice, id: id.clone() };
        let old_pruned = self.pruned(&key);
        if let Some(old) = self.slices.remove(&id) {
            unindex_nodes(&mut self.objects_on_node, &key, old.nodes());
            if let Some(service) = &old.service {
                if let Some(members) = self.slices_of_service.get_mut(&**service) {
                    if let Ok(at) = members.binary_search(&id.name) {
                        members.remove(at);
                    }
                    if members.is_empty() {
                        self.slices_of_service.remove(&**service);
                    }
                }
                work.refilter.insert((**service).clone());
            }
        } else if new.is_none() {
            return;
        }
        let Some(slice) = new else {
            work.replaced.insert(key, old_pruned);
            return;
        };
        let key = Arc::new(key);
        let candidates = index_nodes(&mut self.objects_on_node, &key, prune::slice_candidates(&slice));
        work.replaced.insert(Arc::unwrap_or_clone(key), old_pruned);
        let service = service_of_slice(&slice).map(|service| {
            work.refilter.insert(service.clone());
            let shared = match self.slices_of_service.get_key_value(&service) {
                Some((shared, _)) => shared.clone(),
                None => Arc::new(service),
            };
            let members = self.slices_of_service.entry(shared.clone()).or_insert_with(|| Vec::with_capacity(1));
            if let Err(at) = members.binary_search(&id.name) {
                members.insert(at, id.name.clone());
            }
            shared
        });
        let local = LocalEndpoint::on_slice(&slice);
        self.slices.insert(id, Cached::new(&slice, candidates, local, service));
    }

    fn replace_endpoints(&mut self, id: NamespacedName, new: Option<Endpoints>, work: &mut Work) {
        let key = ObjectKey { kind: ObjectKind::Endpoints, id: id.clone() };
        let old_pruned = self.pruned(&key);
        let old_local = match self.endpoints.remove(&id) {
            Some(old) => {
                unindex_nodes(&mut self.objects_on_node, &key, old.nodes());
                old.local
            }
            None if new.is_none() => return,
            None => None,
        };
        work.refilter.insert(id.clone());
        let new_local = new.as_ref().and_then(LocalEndpoint::for_endpoints);
        if old_local.as_deref() != new_local.as_ref() {
            // the slices of `default/kubernetes` without their own announcement follow
            // this one: they change although no slice did upstream
            self.reselect_slices(&id, work);
        }
        let Some(endpoints) = new else {
            work.replaced.insert(key, old_pruned);
            return;
        };
        let key = Arc::new(key);
        let candidates = index_nodes(&mut self.objects_on_node, &key, prune::endpoints_candidates(&endpoints));
        work.replaced.insert(Arc::unwrap_or_clone(key), old_pruned);
        let cached = Cached::new(&endpoints, candidates, new_local, Some(Arc::new(id.clone())));
        self.endpoints.insert(id, cached);
    }

    fn set_policy(&mut self, id: NamespacedName, new: Option<(TopologyPolicy, Option<PolicyError>)>, work: &mut Work) {
        let old = self.services.get(&id).map(|e| (&e.policy, e.error.as_deref()));
        if old == new.as_ref().map(|(p, e)| (p, e.as_ref())) {
            return;
        }
        match new {
            Some((policy, error)) => {
                self.services.insert(
                    id.clone(),
                    ServiceEntry {
                        policy,
                        error: error.map(Box::new),
                        slice_filter: KEEP_ALL,
                        endpoints_filter: KEEP_ALL,
                    },
                );
                work.refilter.insert(id.clone());
            }
            None => {
                self.services.remove(&id);
            }
        }
        self.reselect_service(&id, work);
    }

    fn reselect_service(&self, service: &NamespacedName, work: &mut Work) {
        self.reselect_slices(service, work);
        if self.endpoints.contains_key(service) {
            work.reselect.insert(ObjectKey { kind: ObjectKind::Endpoints, id: service.clone() });
        }
    }

    fn reselect_slices(&self, service: &NamespacedName, work: &mut Work) {
        for name in self.slices_of_service.get(service).into_iter().flatten() {
            work.reselect.insert(ObjectKey {
                kind: ObjectKind::EndpointSlice,
                id: NamespacedName::new(&service.namespace, name),
            });
        }
    }

    fn node_changed(&mut self, name: &str, work: &mut Work) {
        for key in self.objects_on_node.get(name).into_iter().flatten() {
            work.reselect.insert((**key).clone());
            let service = match key.kind {
                ObjectKind::EndpointSlice => self.slices.get(&key.id).and_then(|c| c.service.as_deref().cloned()),
                ObjectKind::Endpoints => Some(key.id.clone()),
            };
            // Only an ordered policy reads remote nodes when deciding its filter.
            if let Some(service) = service.filter(|s| self.policy_of(s).spans_slices()) {
                work.refilter.insert(service);
            }
        }
        if name == self.local_node {
            work.refilter
                .extend(self.services.iter().filter(|(_, e)| !e.policy.is_pass_through()).map(|(id, _)| id.clone()));
        }
    }

    fn settle(&mut self, mut work: Work) -> Vec<ViewChange> {
        for service in std::mem::take(&mut work.refilter) {
            let Some(policy) = self.services.get(&service).map(|e| e.policy.clone()) else {
                continue;
            };
            let (slice_filter, endpoints_filter) = self.decide_filters(&service, &policy);
            let Some(entry) = self.services.get_mut(&service) else {
                continue;
            };
            let slices_changed = entry.slice_filter != slice_filter;
            let endpoints_changed = entry.endpoints_filter != endpoints_filter;
            entry.slice_filter = slice_filter;
            entry.endpoints_filter = endpoints_filter;
            if slices_changed {
                for name in self.slices_of_service.get(&service).into_iter().flatten() {
                    work.reselect.insert(ObjectKey {
                        kind: ObjectKind::EndpointSlice,
                        id: NamespacedName::new(&service.namespace, name),
                    });
                }
            }
            if endpoints_changed && self.endpoints.contains_key(&service) {
                work.reselect.insert(ObjectKey { kind: ObjectKind::Endpoints, id: service });
            }
        }

        let mut changes = BTreeMap::new();
        for (key, old) in work.replaced {
            self.store_selection(&key);
            let change = match (old, self.pruned(&key)) {
                (None, Some(new)) => (ViewChangeKind::Added, Some(new)),
                (Some(_), None) => (ViewChangeKind::Deleted, None),
                (Some(old), Some(new)) if !old.same_form(&new) => (ViewChangeKind::Modified, Some(new)),
                _ => continue,
            };
            changes.insert(key, change);
        }
        for key in work.reselect {
            if changes.contains_key(&key) {
                continue;
            }
            let Some((old, new)) = self.store_selection(&key) else {
                continue;
            };
            if !old.same_form(&new) {
                changes.insert(key, (ViewChangeKind::Modified, Some(new)));
            }
        }
        changes.into_iter().map(|(key, (kind, object))| ViewChange { key, kind, object }).collect()
    }

    fn decide_filters(&self, service: &NamespacedName, policy: &TopologyPolicy) -> (EndpointFilter, EndpointFilter) {
        let ctx = self.ctx();
        let slices = self
            .slices_of_service
            .get(service)
            .into_iter()
            .flatten()
            .filter_map(|name| self.slices.get(&NamespacedName::new(&service.namespace, name)));
        let slice_filter = prune::service_filter(policy, ctx.local, ctx.nodes, slices.flat_map(Cached::candidates));
        let endpoints = self.endpoints.get(service).into_iter();
        let endpoints_filter =
            prune::service_filter(policy, ctx.local, ctx.nodes, endpoints.flat_map(Cached::candidates));
        (slice_filter, endpoints_filter)
    }

    /// Recomputes and stores one object's selection. When it changed, returns the pruned
    /// forms before and after (identical forms are possible when duplicate endpoints swap).
    fn store_selection(&mut self, key: &ObjectKey) -> Option<(PrunedObject, PrunedObject)> {
        let ctx = self.ctx();
        let filter_of = |service: &Option<Arc<NamespacedName>>, pick: fn(&ServiceEntry) -> &EndpointFilter| {
            service.as_deref().and_then(|s| self.services.get(s)).map_or(&KEEP_ALL, pick)
        };
        let selection = match key.kind {
            ObjectKind::EndpointSlice => {
                let c = self.slices.get(&key.id)?;
                // only `default/kubernetes`'s Endpoints ever announce one
                let of_endpoints = c.service.as_deref().and_then(|s| self.endpoints.get(s)?.local.as_deref());
                let local = LocalEndpoint::slice_precedence(c.local.as_deref(), of_endpoints);
                prune::selection(local, c.candidates(), filter_of(&c.service, |e| &e.slice_filter), ctx)
            }
            ObjectKind::Endpoints => {
                let c = self.endpoints.get(&key.id)?;
                prune::selection(
                    c.local.as_deref(),
                    c.candidates(),
                    filter_of(&c.service, |e| &e.endpoints_filter),
                    ctx,
                )
            }
        };
        match key.kind {
            ObjectKind::EndpointSlice => {
                let cached = self.slices.get_mut(&key.id)?;
                if cached.selection == selection {
                    return None;
                }
                let object = cached.object();
                let old = prune::materialize_slice(&object, &cached.selection);
                cached.selection = selection;
                let new = prune::materialize_slice(&object, &cached.selection);
                Some((PrunedObject::Slice(old), PrunedObject::Slice(new)))
            }
            ObjectKind::Endpoints => {
                let cached = self.endpoints.get_mut(&key.id)?;
                if cached.selection == selection {
                    return None;
                }
                let object = cached.object();
                let old = prune::materialize_endpoints(&object, &cached.selection);
                cached.selection = selection;
                let new = prune::materialize_endpoints(&object, &cached.selection);
                Some((PrunedObject::Endpoints(old), PrunedObject::Endpoints(new)))
            }
        }
    }
}

/// The Service a slice belongs to, by the `kubernetes.io/service-name` label.
fn service_of_slice(slice: &EndpointSlice) -> Option<NamespacedName> {
    let namespace = slice.metadata.namespace.as_ref()?;
    let name = slice.metadata.labels.as_ref()?.get(keys::SERVICE_NAME_LABEL)?;
    Some(NamespacedName::new(namespace.clone(), name.clone()))
}

/// Indexes `key` under the node of each candidate; returns the candidates, naming their
/// nodes by the index's keys.
fn index_nodes<'a>(
    index: &mut HashMap<Arc<str>, HashSet<Arc<ObjectKey>>>,
    key: &Arc<ObjectKey>,
    candidates: impl Iterator<Item = Candidate<'a>>,
) -> Box<[OwnedCandidate]> {
    let mut index_one = |node: &str| match index.get_key_value(node).map(|(name, _)| name.clone()) {
        Some(name) => {
            if let Some(set) = index.get_mut(node) {
                set.insert(key.clone());
            }
            name
        }
        None => {
            let name = Arc::<str>::from(node);
            index.insert(name.clone(), HashSet::from([key.clone()]));
            name
        }
    };
    candidates.map(|c| OwnedCandidate { node: c.node.map(&mut index_one), ready: c.ready }).collect()
}

fn unindex_nodes<'a>(
    index: &mut HashMap<Arc<str>, HashSet<Arc<ObjectKey>>>,
    key: &ObjectKey,
    nodes: impl Iterator<Item = Option<&'a str>>,
) {
    for node in nodes.flatten() {
        if let Some(set) = index.get_mut(node) {
            set.remove(key);
            if set.is_empty() {
                index.remove(node);
            }
        }
    }
}

impl PrunedView {
    /// Why this node keeps or drops each endpoint of `service`: the policy, what it decided
    /// for the local node, and per endpoint of every cached slice labelled with the Service
    /// and of its Endpoints object, the rule and key that decided. Agrees with
    /// [`PrunedView::pruned`]. An uncached Service is explained as a pass-through.
    pub fn explain(&self, service: &NamespacedName) -> super::explain::TopologyExplanation {
        let slices: Vec<EndpointSlice> = self
            .slices_of_service
            .get(service)
            .into_iter()
            .flatten()
            .filter_map(|name| self.slices.get(&NamespacedName::new(&service.namespace, name)))
            .map(Cached::object)
            .collect();
        let endpoints = self.endpoints.get(service).map(Cached::object);
        super::explain::explain_service(super::explain::ExplainInput {
            service,
            local_node: &self.local_node,
            nodes: &self.nodes,
            rewrite_local_apiserver: self.rewrite_local_apiserver,
            policy: self.services.get(service).map(|entry| (&entry.policy, entry.error.as_deref())),
            slices: slices.iter().collect(),
            endpoints: endpoints.as_ref(),
        })
    }
}

#[cfg(test)]
pub(super) mod tests;
