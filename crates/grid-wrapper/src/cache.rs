//! The wrapper's served state: upstream objects in, pruned objects out, committed to a
//! list/watch log under the wrapper's own resourceVersions (a node relabel changes pruned
//! slices with no upstream change, so upstream versions cannot be reused).
//!
//! Fed [`Input`]s directly (the upstream watchers translate their events; tests feed
//! objects), no I/O, no clock. It never serves something the upstream did not say: every
//! served object is an upstream object, possibly with endpoints removed, with
//! `managedFields` dropped (no client of the wrapper reads them, and they are often the
//! larger part of an EndpointSlice).
//!
//! Until every upstream stream has listed once, changes are staged rather than served, so
//! neither an empty cache nor a half-built view is ever served: the first full sync
//! replaces whatever was served before (nothing, or a view restored from disk) by exactly
//! the differences.
//!
//! A (re)list reaches the cache as its differences: the upstream's watch helper
//! (`controller_support::watch`) sends a delete for every object the cache held that the
//! list lacks, so [`Input::Begin`] and [`Input::Done`] only mark where a list starts and
//! ends (`Done` counts the stream as listed). What the cache holds before a watch has
//! reported it (restored from disk, or left by the watches of an earlier upstream plan) is
//! what [`Cache::held`] tells the watch, so that its first list deletes what is gone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use edgegrid_core::topology::{
    InputChange, Labels, NamespacedName, ObjectKind, PrunedObject, PrunedView, VOLATILE_ANNOTATIONS, ViewChangeKind,
};
use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use listwatch::{ChangeKind, Log, LogConfig, ObjectId, ServedType, StoredObject};
use serde_json::Value;
use unit_link::stream::Stream;

/// A served resource type: the key of the wrapper's list/watch log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Services,
    EndpointSlices,
    Endpoints,
    /// Only the local node.
    Nodes,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Services, Kind::EndpointSlices, Kind::Endpoints, Kind::Nodes];

    pub fn served(self) -> ServedType {
        match self {
            Self::Services => ServedType::new("v1", "Service"),
            Self::EndpointSlices => ServedType::new("discovery.k8s.io/v1", "EndpointSlice"),
            Self::Endpoints => ServedType::new("v1", "Endpoints"),
            Self::Nodes => ServedType::new("v1", "Node"),
        }
    }

    /// The metric label and URL plural.
    pub fn plural(self) -> &'static str {
        match self {
            Self::Services => "services",
            Self::EndpointSlices => "endpointslices",
            Self::Endpoints => "endpoints",
            Self::Nodes => "nodes",
        }
    }
}

/// An upstream object.
#[allow(clippy::large_enum_variant, reason = "built per upstream event and consumed at once")]
#[derive(Clone, Debug)]
pub enum Object {
    Service(Service),
    Slice(EndpointSlice),
    Endpoints(Endpoints),
    /// A node seen through the metadata-only watch.
    RemoteNode {
        name: String,
        labels: Labels,
    },
    LocalNode(Node),
}

impl Object {
    /// A node as the metadata-only watch reports it: its name and labels.
    pub fn remote_node(name: &str, labels: &[(&str, &str)]) -> Self {
        Self::RemoteNode {
            name: name.into(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    pub fn stream(&self) -> Stream {
        match self {
            Self::Service(_) => Stream::Services,
            Self::Slice(_) => Stream::EndpointSlices,
            Self::Endpoints(_) => Stream::Endpoints,
            Self::RemoteNode { .. } => Stream::RemoteNodes,
            Self::LocalNode(_) => Stream::LocalNode,
        }
    }

    fn id(&self) -> ObjectId {
        let of =
            |meta: &ObjectMeta| (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default());
        match self {
            Self::Service(o) => of(&o.metadata),
            Self::Slice(o) => of(&o.metadata),
            Self::Endpoints(o) => of(&o.metadata),
            Self::RemoteNode { name, .. } => (String::new(), name.clone()),
            Self::LocalNode(o) => of(&o.metadata),
        }
    }
}

impl From<Service> for Object {
    fn from(service: Service) -> Self {
        Self::Service(service)
    }
}

impl From<EndpointSlice> for Object {
    fn from(slice: EndpointSlice) -> Self {
        Self::Slice(slice)
    }
}

impl From<Endpoints> for Object {
    fn from(endpoints: Endpoints) -> Self {
        Self::Endpoints(endpoints)
    }
}

/// What an upstream watcher reports, in the shape of a kube-rs `watcher::Event`.
#[allow(clippy::large_enum_variant, reason = "built per upstream event and consumed at once")]
#[derive(Clone, Debug)]
pub enum Input {
    /// A (re)list begins (a marker: what it no longer has comes as [`Input::Delete`]s).
    Begin(Stream),
    Upsert(Object),
    /// The object `(namespace, name)` of a stream is gone (namespace empty for nodes).
    Delete(Stream, ObjectId),
    /// The (re)list is complete: the stream counts as listed. Deletes nothing.
    Done(Stream),
    /// The nodes the local unit's edge-health votes down now (the whole set).
    NodesDown(BTreeSet<String>),
}

/// What the cache is serving.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewSource {
    /// Nothing yet: list/watch requests must be refused (503), never answered empty.
    Nothing,
    /// A view restored from disk while the upstream has not synced yet.
    Restored,
    /// The upstream view: every stream has listed at least once.
    Upstream,
}

/// Why an input could not be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    #[error("{stream:?} object without a name ignored")]
    Unnamed { stream: Stream },
    #[error(transparent)]
    View(#[from] edgegrid_core::topology::view::ViewError),
    #[error("cannot serve {kind:?} {namespace}/{name}: {message}")]
    Encode { kind: Kind, namespace: String, name: String, message: String },
}

/// What one input did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Served changes, in commit order (empty while staging).
    pub served: Vec<(Kind, ChangeKind)>,
    /// Pruned objects whose form changed (staged or served).
    pub repruned: usize,
    /// Whether this input went through the topology view.
    pub through_view: bool,
}

pub struct Cache {
    local_node: String,
    view: PrunedView,
    log: Log<Kind>,
    /// Until every stream has listed once: the state to serve, not yet served, encoded
    /// (a staged `serde_json::Value` costs about six times its JSON, and a cluster's
    /// worth of them set the wrapper's peak and, as the allocator keeps freed pages, its
    /// lasting memory).
    staging: Option<BTreeMap<(Kind, ObjectId), Vec<u8>>>,
    restored: bool,
    listed: BTreeSet<Stream>,
    remote_nodes: BTreeSet<String>,
    /// The label whose value makes a node unit, for the unit upstream (`None`: not shared).
    unit_label_key: Option<String>,
    /// The local node's unit (that label's value on its Node).
    local_unit: Option<String>,
}

impl Cache {
    /// `first_rv`: versions up to it are expired for clients (see [`Log::continuing`]).
    pub fn new(local_node: impl Into<String>, rewrite_local_apiserver: bool, log: LogConfig, first_rv: u64) -> Self {
        let local_node = local_node.into();
        Self {
            view: PrunedView::new(local_node.clone(), rewrite_local_apiserver),
            local_node,
            log: Log::continuing(log, first_rv),
            staging: Some(BTreeMap::new()),
            restored: false,
            listed: BTreeSet::new(),
            remote_nodes: BTreeSet::new(),
            unit_label_key: None,
            local_unit: None,
        }
    }

    /// Tracks the local node's unit by this label (see [`Cache::local_unit`]).
    pub fn with_unit_label_key(mut self, key: Option<String>) -> Self {
        self.unit_label_key = key;
        self
    }

    /// Forgets the local node's unit until its Node is read again.
    pub fn forget_local_unit(&mut self) {
        self.local_unit = None;
    }

    /// The local node's unit (its unit label's value), once its Node was seen.
    pub fn local_unit(&self) -> Option<&str> {
        self.local_unit.as_deref()
    }

    pub fn local_node(&self) -> &str {
        &self.local_node
    }

    pub fn log(&self) -> &Log<Kind> {
        &self.log
    }

    pub fn view(&self) -> &PrunedView {
        &self.view
    }

    pub fn serving(&self) -> ViewSource {
        match (self.staging.is_some(), self.restored) {
            (false, _) => ViewSource::Upstream,
            (true, true) => ViewSource::Restored,
            (true, false) => ViewSource::Nothing,
        }
    }

    /// Streams that have listed at least once.
    pub fn listed(&self) -> &BTreeSet<Stream> {
        &self.listed
    }

    /// Serves objects saved by an earlier process until the first upstream sync replaces
    /// them. Only before anything was served.
    pub fn restore(&mut self, objects: impl IntoIterator<Item = (Kind, Value)>) -> usize {
        if self.serving() != ViewSource::Nothing {
            return 0;
        }
        let mut restored = 0;
        for (kind, object) in objects {
            let id = (
                object["metadata"]["namespace"].as_str().unwrap_or_default().to_string(),
                object["metadata"]["name"].as_str().unwrap_or_default().to_string(),
            );
            if self.log.upsert(kind, id, object).is_ok() {
                restored += 1;
            }
        }
        self.restored = restored > 0;
        restored
    }

    /// Every served object, for persisting.
    pub fn served_objects(&self) -> impl Iterator<Item = (Kind, &Arc<StoredObject>)> {
        self.log.all().flat_map(|(kind, objects)| objects.values().map(move |o| (*kind, o)))
    }

    pub fn apply(&mut self, input: Input) -> Result<Applied, CacheError> {
        let mut outcome = Applied::default();
        match input {
            Input::Begin(_) => {}
            Input::Upsert(object) => {
                if object.id().1.is_empty() {
                    return Err(CacheError::Unnamed { stream: object.stream() });
                }
                self.upsert(object, &mut outcome)?;
            }
            Input::Delete(stream, id) => self.delete(stream, id, &mut outcome)?,
            Input::Done(stream) => {
                self.listed.insert(stream);
                if self.staging.is_some() && Stream::ALL.iter().all(|s| self.listed.contains(s)) {
                    self.serve_staged(&mut outcome);
                }
            }
            Input::NodesDown(down) => self.through_view(InputChange::NodesDown(down), &mut outcome)?,
        }
        Ok(outcome)
    }

    /// The objects of `stream` the cache holds, sorted: those it serves (until the first
    /// sync, the view restored from disk, if any) and those it stages; for the remote
    /// nodes, those topology knows (never the local node: its labels come from its own
    /// stream). A new watch of the stream starts from these
    /// (`controller_support::watch::Watch::holding`), so that its first list deletes those
    /// the upstream no longer has.
    pub fn held(&self, stream: Stream) -> Vec<ObjectId> {
        let kind = match stream {
            Stream::RemoteNodes => return self.remote_nodes.iter().map(|n| (String::new(), n.clone())).collect(),
            Stream::Services => Kind::Services,
            Stream::EndpointSlices => Kind::EndpointSlices,
            Stream::Endpoints => Kind::Endpoints,
            Stream::LocalNode => Kind::Nodes,
        };
        let mut held: BTreeSet<ObjectId> = self.log.objects(&kind).map(|(id, _)| id.clone()).collect();
        if let Some(staged) = &self.staging {
            held.extend(staged.keys().filter(|(k, _)| *k == kind).map(|(_, id)| id.clone()));
        }
        held.into_iter().collect()
    }

    fn upsert(&mut self, object: Object, outcome: &mut Applied) -> Result<(), CacheError> {
        match object {
            Object::Service(mut service) => {
                service.metadata.managed_fields = None;
                self.through_view(InputChange::ServiceUpserted(service.clone()), outcome)?;
                let id = Object::Service(service.clone()).id();
                let value = encode(Kind::Services, &id, &service)?;
                self.commit(Kind::Services, id, Some(value), outcome);
            }
            Object::Slice(mut slice) => {
                slice.metadata.managed_fields = None;
                self.through_view(InputChange::SliceUpserted(slice), outcome)?;
            }
            Object::Endpoints(mut endpoints) => {
                endpoints.metadata.managed_fields = None;
                self.through_view(InputChange::EndpointsUpserted(endpoints), outcome)?;
            }
            Object::RemoteNode { name, labels } => {
                // the local node's labels come from its own, whole-object watch: taking
                // them from both streams would flap between their versions
                if name == self.local_node {
                    return Ok(());
                }
                self.remote_nodes.insert(name.clone());
                self.through_view(InputChange::NodeUpserted { name, labels }, outcome)?;
            }
            Object::LocalNode(mut node) => {
                node.metadata.managed_fields = None;
                let labels = node.metadata.labels.clone().unwrap_or_default();
                let id = Object::LocalNode(node.clone()).id();
                if id.1 != self.local_node {
                    return Ok(());
                }
                if let Some(key) = &self.unit_label_key {
                    self.local_unit = labels.get(key).cloned();
                }
                self.through_view(InputChange::NodeUpserted { name: id.1.clone(), labels }, outcome)?;
                let value = encode(Kind::Nodes, &id, &node)?;
                self.commit(Kind::Nodes, id, Some(value), outcome);
            }
        }
        Ok(())
    }

    fn delete(&mut self, stream: Stream, (namespace, name): ObjectId, outcome: &mut Applied) -> Result<(), CacheError> {
        let id = NamespacedName::new(&namespace, &name);
        match stream {
            Stream::Services => {
                self.through_view(InputChange::ServiceDeleted(id), outcome)?;
                self.commit(Kind::Services, (namespace, name), None, outcome);
            }
            Stream::EndpointSlices => {
                self.through_view(InputChange::SliceDeleted(id), outcome)?;
                // a restored object the view never knew
                self.commit(Kind::EndpointSlices, (namespace, name), None, outcome);
            }
            Stream::Endpoints => {
                self.through_view(InputChange::EndpointsDeleted(id), outcome)?;
                self.commit(Kind::Endpoints, (namespace, name), None, outcome);
            }
            Stream::RemoteNodes => {
                if name == self.local_node || !self.remote_nodes.remove(&name) {
                    return Ok(());
                }
                self.through_view(InputChange::NodeDeleted(name), outcome)?;
            }
            Stream::LocalNode => {
                if name != self.local_node {
                    return Ok(());
                }
                self.local_unit = None;
                self.through_view(InputChange::NodeDeleted(name.clone()), outcome)?;
                self.commit(Kind::Nodes, (namespace, name), None, outcome);
            }
        }
        Ok(())
    }

    fn through_view(&mut self, change: InputChange, outcome: &mut Applied) -> Result<(), CacheError> {
        outcome.through_view = true;
        for change in self.view.apply(change)? {
            outcome.repruned += 1;
            let kind = match change.key.kind {
                ObjectKind::EndpointSlice => Kind::EndpointSlices,
                ObjectKind::Endpoints => Kind::Endpoints,
            };
            let id = (change.key.id.namespace, change.key.id.name);
            let value = match (change.kind, change.object) {
                (ViewChangeKind::Deleted, _) | (_, None) => None,
                (_, Some(PrunedObject::Slice(slice))) => Some(encode(kind, &id, &slice)?),
                (_, Some(PrunedObject::Endpoints(endpoints))) => Some(encode(kind, &id, &endpoints)?),
            };
            self.commit(kind, id, value, outcome);
        }
        Ok(())
    }

    /// Stages or serves one object's new state (`None`: gone). A version that looks the
    /// same to clients as the served one is not served again.
    fn commit(&mut self, kind: Kind, id: ObjectId, value: Option<Value>, outcome: &mut Applied) {
        if let Some(staged) = &mut self.staging {
            match value {
                // encoding a JSON value cannot fail
                Some(value) => staged.insert((kind, id), serde_json::to_vec(&value).unwrap_or_default()),
                None => staged.remove(&(kind, id)),
            };
            return;
        }
        match value {
            Some(value) => {
                let existed = match self.log.get(&kind, &id) {
                    Some(served) if same_form(&served.value(), &value) => return,
                    Some(_) => true,
                    None => false,
                };
                if self.log.upsert(kind, id, value).is_ok() {
                    outcome.served.push((kind, if existed { ChangeKind::Modified } else { ChangeKind::Added }));
                }
            }
            None => {
                if self.log.remove(&kind, &id).is_some() {
                    outcome.served.push((kind, ChangeKind::Deleted));
                }
            }
        }
    }

    /// The first full sync: serve the staged state, replacing whatever was served.
    fn serve_staged(&mut self, outcome: &mut Applied) {
        let Some(staged) = self.staging.take() else { return };
        let stale: Vec<(Kind, ObjectId)> = self
            .log
            .all()
            .flat_map(|(kind, objects)| objects.keys().map(move |id| (*kind, id.clone())))
            .filter(|key| !staged.contains_key(key))
            .collect();
        for (kind, id) in stale {
            self.commit(kind, id, None, outcome);
        }
        for ((kind, id), encoded) in staged {
            match serde_json::from_slice(&encoded) {
                Ok(value) => self.commit(kind, id, Some(value), outcome),
                // only reachable if this module's own encoding were not JSON
                Err(error) => tracing::error!(?kind, namespace = id.0, name = id.1, %error, "staged object lost"),
            }
        }
        self.restored = false;
    }
}

fn encode<T: serde::Serialize>(kind: Kind, id: &ObjectId, object: &T) -> Result<Value, CacheError> {
    serde_json::to_value(object).map_err(|e| CacheError::Encode {
        kind,
        namespace: id.0.clone(),
        name: id.1.clone(),
        message: e.to_string(),
    })
}

/// Metadata every upstream write changes (with core's [`VOLATILE_ANNOTATIONS`]); see
/// `PrunedObject::same_form`, the same rule on typed objects.
const VOLATILE_METADATA: [&str; 3] = ["resourceVersion", "generation", "managedFields"];

/// Whether a served version and a new one look the same to a client.
pub fn same_form(served: &Value, new: &Value) -> bool {
    let (Some(a), Some(b)) = (served.as_object(), new.as_object()) else {
        return served == new;
    };
    let body_equal = a.len() == b.len() && a.iter().all(|(k, v)| k == "metadata" || b.get(k) == Some(v));
    body_equal && stable_metadata(&served["metadata"]) == stable_metadata(&new["metadata"])
}

fn stable_metadata(metadata: &Value) -> Value {
    let mut metadata = metadata.clone();
    if let Some(m) = metadata.as_object_mut() {
        for key in VOLATILE_METADATA {
            m.remove(key);
        }
        if let Some(annotations) = m.get_mut("annotations").and_then(Value::as_object_mut) {
            for key in VOLATILE_ANNOTATIONS {
                annotations.remove(key);
            }
            if annotations.is_empty() {
                m.remove("annotations");
            }
        }
    }
    metadata
}

#[cfg(test)]
mod tests;
