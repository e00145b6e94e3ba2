//! The unit leader's log of the upstream objects it serves to the unit's other wrappers:
//! every Service, EndpointSlice and Endpoints of the cluster, the metadata of every Node,
//! and the whole Nodes of the unit's members, unpruned (each follower prunes for itself),
//! under the leader's own resourceVersions (a follower's watchers resume, relist on 410
//! and take bookmarks as they would from the cloud).
//!
//! Fed [`UpstreamInput`]s in the shape of kube-rs watcher events, no I/O. A relist reaches
//! followers as its differences only: an object upserted again unchanged is no event, and
//! the objects a relist no longer has come as deletes from the leader's watch helper
//! (`controller_support::watch`), which computes them: [`UpstreamInput::Begin`] and
//! [`UpstreamInput::Done`] only mark a list (`Done` counts the kind as listed). A log
//! holds objects its leader's watches never reported when it was inherited (a promoted
//! replica, see [`UpstreamLog::promote`]): [`UpstreamLog::held`] tells a new watch of a
//! kind what the log holds, so that its first list deletes what is gone. `managedFields`
//! are never stored (followers drop them, and they are often the larger half of a slice).
//!
//! It must never let an empty or partial state be served as the upstream's: until every
//! kind has listed once it is not [`synced`](UpstreamLog::synced), and the server answers
//! 503 rather than a list a follower would take for "everything was deleted".

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use listwatch::{ChangeKind, Log, LogConfig, ObjectId, ServedType};
use serde_json::{Value, json};
use tokio::sync::watch;

/// One kind of upstream object the leader serves: the key of its log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UpstreamKind {
    Services,
    EndpointSlices,
    Endpoints,
    /// The metadata of every node of the cluster (labels decide topology), stored as
    /// `{"apiVersion":"v1","kind":"Node","metadata":{...}}`.
    NodeMetadata,
    /// The whole Node objects of the unit's members (a follower reads its own).
    UnitNodes,
    /// The unit signer's ConfigMap of signed batches (vouched sharing): one object, or
    /// none where the cloud runs no signer.
    Digests,
}

impl UpstreamKind {
    pub const ALL: [UpstreamKind; 6] = [
        UpstreamKind::Services,
        UpstreamKind::EndpointSlices,
        UpstreamKind::Endpoints,
        UpstreamKind::NodeMetadata,
        UpstreamKind::UnitNodes,
        UpstreamKind::Digests,
    ];

    pub fn served(self) -> ServedType {
        match self {
            Self::Services => ServedType::new("v1", "Service"),
            Self::EndpointSlices => ServedType::new("discovery.k8s.io/v1", "EndpointSlice"),
            Self::Endpoints => ServedType::new("v1", "Endpoints"),
            Self::NodeMetadata | Self::UnitNodes => ServedType::new("v1", "Node"),
            Self::Digests => ServedType::new("v1", "ConfigMap"),
        }
    }

    /// The URL plural (both node kinds are `nodes`: the `Accept` header tells them apart).
    pub fn plural(self) -> &'static str {
        match self {
            Self::Services => "services",
            Self::EndpointSlices => "endpointslices",
            Self::Endpoints => "endpoints",
            Self::NodeMetadata | Self::UnitNodes => "nodes",
            Self::Digests => "configmaps",
        }
    }

    /// The kind [`UpstreamKind::name`] names.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// The metric label, distinct per kind.
    pub fn name(self) -> &'static str {
        match self {
            Self::Services => "services",
            Self::EndpointSlices => "endpointslices",
            Self::Endpoints => "endpoints",
            Self::NodeMetadata => "nodemetadata",
            Self::UnitNodes => "unitnodes",
            Self::Digests => "digests",
        }
    }
}

/// What one of the leader's cloud watchers reports, in the shape of a kube-rs
/// `watcher::Event`.
#[derive(Clone, Debug)]
pub enum UpstreamInput {
    /// A (re)list begins (a marker: what it no longer has comes as
    /// [`UpstreamInput::Delete`]s).
    Begin(UpstreamKind),
    /// An object as the cloud has it (JSON of the typed object, or of the metadata for
    /// [`UpstreamKind::NodeMetadata`]).
    Upsert(UpstreamKind, Value),
    /// The object `(namespace, name)` is gone (namespace empty for nodes).
    Delete(UpstreamKind, ObjectId),
    /// The (re)list is complete: the kind counts as listed. Deletes nothing.
    Done(UpstreamKind),
}

/// Why an input was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamLogError {
    #[error("{kind:?} object without a name ignored")]
    Unnamed { kind: UpstreamKind },
    #[error("{kind:?} {namespace}/{name} not stored")]
    NotStored {
        kind: UpstreamKind,
        namespace: String,
        name: String,
        #[source]
        source: listwatch::Error,
    },
}

/// Where a log is kept for others to read: the unit server's current term of leadership
/// (`unit::LeaderSlot`, empty while not leading: 503), the standby's replica
/// (`replication::ReplicaSlot`, empty until its first snapshot completes).
#[derive(Clone, Debug, Default)]
pub struct LogSlot(Arc<std::sync::RwLock<Option<Arc<UpstreamLog>>>>);

impl LogSlot {
    pub fn current(&self) -> Option<Arc<UpstreamLog>> {
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    pub(crate) fn set(&self, log: Option<Arc<UpstreamLog>>) {
        *self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner) = log;
    }
}

/// [`UpstreamLog::snapshot`]: the version, the objects, the feed of later changes.
pub type Snapshot = (
    u64,
    Vec<(UpstreamKind, Arc<listwatch::StoredObject>)>,
    tokio::sync::broadcast::Receiver<Arc<listwatch::Change<UpstreamKind>>>,
);

/// What one input changed in the served state (what followers' watches see).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    pub changes: Vec<(UpstreamKind, ChangeKind)>,
}

/// The leader's served state, shared by its cloud feeds and its server.
pub struct UpstreamLog {
    state: Mutex<State>,
    synced: watch::Sender<bool>,
    /// Set when this wrapper stops leading: nothing is served any more.
    closed: watch::Sender<bool>,
}

impl std::fmt::Debug for UpstreamLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        let objects: BTreeMap<&str, usize> = UpstreamKind::ALL.iter().map(|k| (k.name(), state.log.len(k))).collect();
        f.debug_struct("UpstreamLog")
            .field("synced", &self.synced())
            .field("closed", &*self.closed.borrow())
            .field("resource_version", &state.log.current_rv())
            .field("objects", &objects)
            .finish()
    }
}

struct State {
    /// Which log this is: its versions mean something only to a log of the same term (a
    /// replica keeps its source's term, see [`crate::replication`]).
    term: u64,
    /// Promoted from a replica: the source's term, and the last of its versions this log
    /// holds. Versions of the source up to there are this log's too; later ones are not
    /// (the source may have gone on without this log: a client of it relists).
    inherited: Option<(u64, u64)>,
    log: Log<UpstreamKind>,
    /// Kinds that have completed at least one list.
    listed: BTreeSet<UpstreamKind>,
}

impl UpstreamLog {
    pub fn new(config: LogConfig) -> Arc<Self> {
        Self::with(new_term(), Log::continuing(config, crate::api_status::first_resource_version()), BTreeSet::new())
    }

    /// A replica of the log of `term` as it was at `rv`, to be filled by
    /// [`UpstreamLog::restore`] then [`UpstreamLog::replay`]. It counts every kind as
    /// listed (its source had) and is [`synced`](UpstreamLog::synced) once told
    /// [`UpstreamLog::replica_synced`].
    pub fn replica(config: LogConfig, term: u64, rv: u64) -> Arc<Self> {
        Self::with(term, Log::continuing(config, rv), UpstreamKind::ALL.into_iter().collect())
    }

    fn with(term: u64, log: Log<UpstreamKind>, listed: BTreeSet<UpstreamKind>) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State { term, inherited: None, log, listed }),
            synced: watch::channel(false).0,
            closed: watch::channel(false).0,
        })
    }

    pub fn term(&self) -> u64 {
        self.state().term
    }

    /// This replica becomes the log of a leader: a term of its own from now on, its
    /// source's versions up to now still its own (the followers of its source resume on
    /// it, unless they saw more of the source than it did).
    pub fn promote(&self) {
        let mut state = self.state();
        state.inherited = Some((state.term, state.log.current_rv()));
        state.term = new_term();
    }

    /// Whether a client that last heard from the log of `term` may resume from `rv` (a
    /// watch's resourceVersion; `None` for a continue token) on this one.
    pub fn resumes(&self, term: u64, rv: Option<u64>) -> bool {
        let state = self.state();
        term == state.term
            || state.inherited.is_some_and(|(source, last)| source == term && rv.is_some_and(|rv| rv <= last))
    }

    /// The log's version, every object of every kind, and the feed of every later change,
    /// at one instant (what a replica starts from).
    pub fn snapshot(&self) -> Snapshot {
        let state = self.state();
        let objects = UpstreamKind::ALL
            .iter()
            .flat_map(|kind| state.log.objects(kind).map(|(_, object)| (*kind, object.clone())))
            .collect();
        (state.log.current_rv(), objects, state.log.subscribe())
    }

    /// A replica's object as its source held it at the replica's version.
    pub fn restore(&self, kind: UpstreamKind, object: Value) -> Result<(), UpstreamLogError> {
        let id = object_id(&object);
        let mut state = self.state();
        state.log.restore(kind, id.clone(), object).map_err(|source| not_stored(kind, id, source))
    }

    /// A change its source committed at `rv`, committed under the same version.
    pub fn replay(
        &self,
        kind: UpstreamKind,
        change: ChangeKind,
        object: Value,
        rv: u64,
    ) -> Result<(), UpstreamLogError> {
        let id = object_id(&object);
        let mut state = self.state();
        state.log.replay(kind, id.clone(), change, object, rv).map_err(|source| not_stored(kind, id, source))
    }

    /// The replica holds its source's state as of its snapshot: it may be served.
    pub fn replica_synced(&self) {
        self.mark_synced();
    }

    fn mark_synced(&self) {
        self.synced.send_if_modified(|synced| !std::mem::replace(synced, true));
    }

    /// Reads the log under its lock; keep `read` brief (every request and every upstream
    /// event takes the lock). Snapshotting and subscribing a watch inside one `read` is
    /// what makes a watcher see every later change exactly once.
    pub fn read<T>(&self, read: impl FnOnce(&Log<UpstreamKind>) -> T) -> T {
        read(&self.state().log)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // every mutation is one call on the log: a panic elsewhere leaves it consistent
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The objects of `kind` the log holds, sorted (namespace empty for cluster-scoped
    /// objects). A new watch of the kind starts from these
    /// (`controller_support::watch::Watch::holding`), so that its first list deletes those
    /// the cloud no longer has: what the log inherited, or what an earlier watch left.
    pub fn held(&self, kind: UpstreamKind) -> Vec<ObjectId> {
        self.state().log.objects(&kind).map(|(id, _)| id.clone()).collect()
    }

    /// Whether every kind has listed once: only then is anything served.
    pub fn synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Follows [`UpstreamLog::synced`] (it never turns back to false).
    pub fn synced_changes(&self) -> watch::Receiver<bool> {
        self.synced.subscribe()
    }

    /// Stops serving this log (its wrapper no longer leads): new requests get 503 and open
    /// watches end, so followers turn to their next leader rather than keep a view nobody
    /// updates. For good: a new term of leadership starts a new log.
    pub fn close(&self) {
        self.closed.send_replace(true);
    }

    /// Whether lists and watches are answered: synced and not closed.
    pub fn serving(&self) -> bool {
        self.synced() && !*self.closed.borrow()
    }

    /// Resolves once the log is closed.
    pub fn closed(&self) -> impl std::future::Future<Output = ()> + Send + 'static + use<> {
        let mut closed = self.closed.subscribe();
        async move {
            let _ = closed.wait_for(|closed| *closed).await;
        }
    }

    /// Takes one input; what it changed for watchers.
    pub fn apply(&self, input: UpstreamInput) -> Result<Applied, UpstreamLogError> {
        let mut applied = Applied::default();
        let mut state = self.state();
        match input {
            UpstreamInput::Begin(_) => {}
            UpstreamInput::Upsert(kind, object) => {
                let object = stored_form(kind, object);
                let id = object_id(&object);
                if id.1.is_empty() {
                    return Err(UpstreamLogError::Unnamed { kind });
                }
                state.upsert(kind, id, object, &mut applied)?;
            }
            UpstreamInput::Delete(kind, id) => state.remove(kind, &id, &mut applied),
            UpstreamInput::Done(kind) => {
                state.listed.insert(kind);
                if UpstreamKind::ALL.iter().all(|k| state.listed.contains(k)) {
                    drop(state);
                    self.mark_synced();
                }
            }
        }
        Ok(applied)
    }
}

impl State {
    fn upsert(
        &mut self,
        kind: UpstreamKind,
        id: ObjectId,
        mut object: Value,
        applied: &mut Applied,
    ) -> Result<(), UpstreamLogError> {
        if let Some(stored) = self.log.get(&kind, &id) {
            // Stamped with the stored version, an unchanged object encodes to the stored
            // bytes (the log encodes exactly so): the log itself would publish a MODIFIED
            // for it, and a relist would send every follower every object again.
            object["metadata"]["resourceVersion"] = json!(stored.resource_version().to_string());
            if object.to_string().as_bytes() == stored.json().as_ref() {
                return Ok(());
            }
        }
        let existed = self.log.get(&kind, &id).is_some();
        let (namespace, name) = id.clone();
        self.log.upsert(kind, id, object).map_err(|source| not_stored(kind, (namespace, name), source))?;
        applied.changes.push((kind, if existed { ChangeKind::Modified } else { ChangeKind::Added }));
        Ok(())
    }

    fn remove(&mut self, kind: UpstreamKind, id: &ObjectId, applied: &mut Applied) {
        if self.log.remove(&kind, id).is_some() {
            applied.changes.push((kind, ChangeKind::Deleted));
        }
    }
}

/// An object as it is stored: typed as its kind is served (a list item the cloud sent
/// without `apiVersion`/`kind` would not decode on the follower), without `managedFields`,
/// and for node metadata nothing but the metadata.
fn stored_form(kind: UpstreamKind, object: Value) -> Value {
    let mut object = match kind {
        UpstreamKind::NodeMetadata => json!({"metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({}))}),
        _ => object,
    };
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    kind.served().stamp(object)
}

fn not_stored(kind: UpstreamKind, (namespace, name): ObjectId, source: listwatch::Error) -> UpstreamLogError {
    UpstreamLogError::NotStored { kind, namespace, name, source }
}

/// A new log's term: random, so that two logs' versions are never taken for each other's.
fn new_term() -> u64 {
    let mut bytes = [0u8; 8];
    // the system's generator does not fail on Linux; a zero term is still a term
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    u64::from_be_bytes(bytes)
}

fn object_id(object: &Value) -> ObjectId {
    let text = |field: &str| object["metadata"][field].as_str().unwrap_or_default().to_string();
    (text("namespace"), text("name"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgegrid_testing::objects::{node_object, service_object, slice_object};
    use listwatch::{ListOptions, WatchOptions};
    use tokio::sync::broadcast::error::TryRecvError;

    fn log() -> Arc<UpstreamLog> {
        UpstreamLog::new(LogConfig { history_limit: 100, watch_buffer: 100 })
    }

    fn json<T: serde::Serialize>(object: &T) -> Value {
        serde_json::to_value(object).expect("an object")
    }

    fn service(name: &str) -> Value {
        json(&service_object(name, None))
    }

    fn apply(log: &UpstreamLog, input: UpstreamInput) -> Vec<(UpstreamKind, ChangeKind)> {
        log.apply(input).expect("taken").changes
    }

    /// One kind listed: Begin, the objects, Done.
    fn list(log: &UpstreamLog, kind: UpstreamKind, objects: &[Value]) -> Vec<(UpstreamKind, ChangeKind)> {
        let mut changes = apply(log, UpstreamInput::Begin(kind));
        for object in objects {
            changes.extend(apply(log, UpstreamInput::Upsert(kind, object.clone())));
        }
        changes.extend(apply(log, UpstreamInput::Done(kind)));
        changes
    }

    fn names(log: &UpstreamLog, kind: UpstreamKind) -> Vec<String> {
        log.read(|log| log.objects(&kind).map(|(id, _)| id.1.clone()).collect())
    }

    fn stored(log: &UpstreamLog, kind: UpstreamKind, namespace: &str, name: &str) -> Value {
        log.read(|log| log.get(&kind, &(namespace.into(), name.into())).map(|o| o.value())).expect("stored")
    }

    /// A relist as the leader's watch helper delivers it (the objects listed, then a delete
    /// for each one gone) reaches watchers as its differences: what is new is ADDED, what
    /// changed MODIFIED, what the relist no longer reports DELETED, and what is unchanged
    /// nothing.
    #[test]
    fn a_relist_is_served_as_its_differences() {
        use ChangeKind::*;
        use UpstreamKind::Services;
        let log = log();
        assert_eq!(list(&log, Services, &[service("a"), service("b"), service("c")]), [(Services, Added); 3]);
        let watch = log.read(|log| log.watch(&Services, &WatchOptions::default())).expect("a watch");
        let mut live = watch.live;
        let mut changed_b = service("b");
        changed_b["spec"]["clusterIP"] = json!("10.96.0.99");
        let mut relist = apply(&log, UpstreamInput::Begin(Services));
        for object in [service("a"), changed_b, service("d")] {
            relist.extend(apply(&log, UpstreamInput::Upsert(Services, object)));
        }
        relist.extend(apply(&log, UpstreamInput::Delete(Services, ("ns".into(), "c".into()))));
        relist.extend(apply(&log, UpstreamInput::Done(Services)));
        assert_eq!(relist, [(Services, Modified), (Services, Added), (Services, Deleted)]);
        let events: Vec<(ChangeKind, String)> =
            std::iter::from_fn(|| live.try_recv().ok()).map(|c| (c.kind, c.id.1.clone())).collect();
        assert_eq!(events, [(Modified, "b".into()), (Added, "d".into()), (Deleted, "c".into())]);
        assert_eq!(names(&log, Services), ["a", "b", "d"]);
        assert_eq!(stored(&log, Services, "ns", "b")["spec"]["clusterIP"], "10.96.0.99");
        // a watch event's delete, and one of an object never seen (nothing)
        let gone = apply(&log, UpstreamInput::Delete(Services, ("ns".into(), "a".into())));
        let never = apply(&log, UpstreamInput::Delete(Services, ("ns".into(), "x".into())));
        assert_eq!((gone, never), (vec![(Services, Deleted)], vec![]));
    }

    /// `Begin` and `Done` only mark a list: its end deletes nothing it did not report (the
    /// watch helper sends those deletes), whether or not it began; `held` tells a new
    /// watch what the log holds.
    #[test]
    fn a_done_alone_deletes_nothing() {
        use UpstreamKind::{NodeMetadata, Services};
        let log = log();
        list(&log, Services, &[service("a"), service("b")]);
        list(&log, NodeMetadata, &[json(&node_object("n1", &[]))]);
        let rv = log.read(|log| log.current_rv());
        assert_eq!(list(&log, Services, &[service("a")]), []);
        assert_eq!(list(&log, Services, &[]), []);
        assert_eq!(apply(&log, UpstreamInput::Done(Services)), []);
        assert_eq!(list(&log, NodeMetadata, &[]), []);
        assert_eq!(log.read(|log| log.current_rv()), rv);
        assert_eq!(names(&log, Services), ["a", "b"]);
        let id = |name: &str| ("ns".to_string(), name.to_string());
        assert_eq!(log.held(Services), [id("a"), id("b")]);
        assert_eq!(log.held(NodeMetadata), [(String::new(), "n1".to_string())]);
        assert_eq!(log.held(UpstreamKind::UnitNodes), []);
    }

    /// The same object upserted again (a relist, a cloud write that changed nothing a
    /// follower stores) is no change: no new version, no watch event.
    #[test]
    fn an_unchanged_upsert_is_no_event() {
        let log = log();
        let kind = UpstreamKind::EndpointSlices;
        let mut slice = json(&slice_object("web-1", "web", &[("10.0.0.1", "n1")]));
        slice["metadata"]["resourceVersion"] = json!("100");
        list(&log, kind, std::slice::from_ref(&slice));
        let rv = log.read(|log| log.current_rv());
        let watch = log.read(|log| log.watch(&kind, &WatchOptions::default())).expect("a watch");
        let mut live = watch.live;
        // the cloud's version and managed fields moved: still nothing for a follower
        slice["metadata"]["resourceVersion"] = json!("101");
        slice["metadata"]["managedFields"] = json!([{"manager": "kube-controller-manager", "operation": "Update"}]);
        assert_eq!(apply(&log, UpstreamInput::Upsert(kind, slice.clone())), []);
        assert_eq!(list(&log, kind, std::slice::from_ref(&slice)), []);
        assert_eq!(log.read(|log| log.current_rv()), rv);
        assert!(matches!(live.try_recv(), Err(TryRecvError::Empty)));
        slice["endpoints"][0]["conditions"]["ready"] = json!(false);
        assert_eq!(apply(&log, UpstreamInput::Upsert(kind, slice)), [(kind, ChangeKind::Modified)]);
        assert_eq!(live.try_recv().map(|c| c.kind).ok(), Some(ChangeKind::Modified));
    }

    /// Stored objects carry no managedFields, the log's own resourceVersion, and their
    /// served type; node metadata is only metadata, typed as a Node.
    #[test]
    fn objects_are_stored_without_managed_fields_and_node_metadata_as_metadata() {
        let log = log();
        let mut service = service("web");
        service["metadata"]["managedFields"] = json!([{"manager": "kubectl", "operation": "Apply"}]);
        service["metadata"]["resourceVersion"] = json!("7");
        service.as_object_mut().map(|o| o.remove("apiVersion"));
        list(&log, UpstreamKind::Services, &[service.clone()]);
        let stored_service = stored(&log, UpstreamKind::Services, "ns", "web");
        let mut want = service.clone();
        want["apiVersion"] = json!("v1");
        want["metadata"].as_object_mut().map(|m| m.remove("managedFields"));
        want["metadata"]["resourceVersion"] = json!(log.read(|log| log.current_rv()).to_string());
        assert_eq!(stored_service, want);

        let mut node = json(&node_object("n1", &[("site", "a")]));
        node["metadata"]["managedFields"] = json!([{"manager": "kubelet"}]);
        node["status"] = json!({"capacity": {"cpu": "4"}});
        // as the metadata-only watch reports it, and a whole Node given for the same
        let metadata =
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": node["metadata"]});
        let mut whole_n2 = node.clone();
        whole_n2["metadata"]["name"] = json!("n2");
        list(&log, UpstreamKind::NodeMetadata, &[metadata, whole_n2]);
        list(&log, UpstreamKind::UnitNodes, &[node]);
        for name in ["n1", "n2"] {
            let served = stored(&log, UpstreamKind::NodeMetadata, "", name);
            let rv = served["metadata"]["resourceVersion"].clone();
            assert_eq!(
                served,
                json!({"apiVersion": "v1", "kind": "Node",
                       "metadata": {"name": name, "labels": {"site": "a"}, "resourceVersion": rv}})
            );
        }
        let whole = stored(&log, UpstreamKind::UnitNodes, "", "n1");
        assert_eq!(
            (whole["status"]["capacity"]["cpu"].clone(), whole["metadata"].get("managedFields")),
            (json!("4"), None)
        );
        let unnamed = log.apply(UpstreamInput::Upsert(UpstreamKind::Services, json!({"metadata": {}})));
        assert_eq!(unnamed, Err(UpstreamLogError::Unnamed { kind: UpstreamKind::Services }));
    }

    /// A promoted replica takes versions of its source's term up to its own last one, its
    /// own term's, and nothing else.
    #[test]
    fn a_promoted_replica_takes_its_sources_versions_up_to_its_last() {
        let replica = UpstreamLog::replica(LogConfig { history_limit: 10, watch_buffer: 10 }, 7, 100);
        assert!(replica.resumes(7, Some(100)) && replica.resumes(7, Some(500)) && replica.resumes(7, None));
        replica.promote();
        let own = replica.term();
        assert_ne!(own, 7);
        assert!(replica.resumes(7, Some(100)) && replica.resumes(7, Some(3)));
        assert!(!replica.resumes(7, Some(101)), "a version of the source this log never had");
        assert!(!replica.resumes(7, None), "a continue token of the source");
        assert!(!replica.resumes(8, Some(50)));
        assert!(replica.resumes(own, Some(101)) && replica.resumes(own, None));
    }

    /// Synced only once every kind has completed a list; a kind still listing, or one that
    /// never began, keeps it unsynced.
    #[test]
    fn synced_once_every_kind_has_listed() {
        let log = log();
        let mut changes = log.synced_changes();
        let mut kinds = UpstreamKind::ALL.to_vec();
        let last = kinds.pop().expect("five kinds");
        for kind in kinds {
            list(&log, kind, &[]);
            assert!(!log.synced(), "{kind:?}");
        }
        apply(&log, UpstreamInput::Begin(last));
        apply(&log, UpstreamInput::Upsert(last, json(&node_object("n1", &[]))));
        assert!(!log.synced() && !log.serving());
        assert!(!changes.has_changed().expect("open"));
        apply(&log, UpstreamInput::Done(last));
        assert!(log.synced() && log.serving());
        assert!(changes.has_changed().expect("open") && *changes.borrow_and_update());
        // a later relist does not unsync
        apply(&log, UpstreamInput::Begin(UpstreamKind::Services));
        assert!(log.synced());
        log.close();
        assert!(log.synced() && !log.serving());
        assert_eq!(log.read(|log| log.list(&last, &ListOptions::default()).map(|p| p.items.len())), Ok(1));
    }
}
