//! The change log: the objects of every resource type by key, one resourceVersion
//! counter, a bounded history of changes that watches resume from and list snapshots
//! are rebuilt from, and the live feed watchers subscribe to.
//!
//! `Log` holds no lock of its own: its owner keeps it behind one, so that committing and
//! publishing a change, or snapshotting and subscribing for a watch, happen at one
//! instant and a watcher sees every later change exactly once and in order. It never
//! decides what a change means (admission, defaults, garbage collection belong to its
//! owner) and never blocks on a watcher.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Debug;
use std::ops::Bound;
use std::sync::{Arc, OnceLock};

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::error::Error;
use crate::object::StoredObject;
use crate::options::{ListOptions, WatchOptions};

/// What identifies a resource type's storage (e.g. group and plural).
pub trait ResourceKey: Clone + Ord + Debug + Send + Sync + 'static {}
impl<T: Clone + Ord + Debug + Send + Sync + 'static> ResourceKey for T {}

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
pub type ObjectId = (String, String);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

impl ChangeKind {
    /// The watch event type (`ADDED`, `MODIFIED`, `DELETED`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }

    /// The change a watch event type names.
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::Added, Self::Modified, Self::Deleted].into_iter().find(|kind| kind.name() == name)
    }
}

/// One committed change.
#[derive(Debug)]
pub struct Change<K> {
    pub rv: u64,
    pub key: K,
    pub id: ObjectId,
    pub kind: ChangeKind,
    /// The new state; for `Deleted`, the last state stamped with the deletion's version.
    pub object: Arc<StoredObject>,
    /// The previous state (`Modified`, `Deleted`).
    pub old: Option<Arc<StoredObject>>,
    /// The previous state stamped with this change's version: what a watcher whose
    /// selector the object leaves gets as DELETED (encoded at most once).
    departed: OnceLock<Arc<StoredObject>>,
}

impl<K> Change<K> {
    pub(crate) fn departed(&self) -> Option<&Arc<StoredObject>> {
        let old = self.old.as_ref()?;
        Some(
            self.departed
                .get_or_init(|| Arc::new(StoredObject::new(stamped(old.value(), self.rv), self.rv, Some(old)))),
        )
    }
}

fn stamped(mut object: Value, rv: u64) -> Value {
    object["metadata"]["resourceVersion"] = json!(rv.to_string());
    object
}

/// Bounds of a log.
#[derive(Clone, Copy, Debug)]
pub struct LogConfig {
    /// Changes kept for watch resumption and list snapshots.
    pub history_limit: usize,
    /// Changes buffered per watcher before a watcher that cannot keep up is cut off with 410.
    pub watch_buffer: usize,
}

/// One page of a consistent list snapshot.
#[derive(Clone, Debug)]
pub struct ListPage {
    pub items: Vec<Arc<StoredObject>>,
    /// The snapshot's version.
    pub rv: u64,
    pub continue_token: Option<String>,
    pub remaining: usize,
}

/// What a watch starts from: a snapshot or a backlog of changes, plus the live feed
/// subscribed at the same instant.
pub struct WatchStart<K> {
    pub key: K,
    pub initial: Vec<Arc<StoredObject>>,
    pub backlog: Vec<Arc<Change<K>>>,
    pub start_rv: u64,
    pub live: broadcast::Receiver<Arc<Change<K>>>,
}

pub struct Log<K> {
    objects: BTreeMap<K, BTreeMap<ObjectId, Arc<StoredObject>>>,
    /// What a resource type without objects lists.
    empty: BTreeMap<ObjectId, Arc<StoredObject>>,
    rv: u64,
    history: VecDeque<Arc<Change<K>>>,
    history_limit: usize,
    /// Versions at or below this are no longer in the history.
    compacted: u64,
    live: broadcast::Sender<Arc<Change<K>>>,
}

impl<K: ResourceKey> Log<K> {
    pub fn new(config: LogConfig) -> Self {
        let (live, _) = broadcast::channel(config.watch_buffer.max(1));
        Self {
            objects: BTreeMap::new(),
            empty: BTreeMap::new(),
            rv: 0,
            history: VecDeque::new(),
            history_limit: config.history_limit.max(1),
            compacted: 0,
            live,
        }
    }

    /// A log whose history begins after `after_rv`: its first change is `after_rv + 1`
    /// and every version up to `after_rv` is expired (410). A server that restarts with an
    /// empty history starts above anything it issued before (e.g. from the clock), so a
    /// client resuming a version from the previous process relists instead of being told
    /// the version is from the future.
    pub fn continuing(config: LogConfig, after_rv: u64) -> Self {
        let mut log = Self::new(config);
        log.rv = after_rv;
        log.compacted = after_rv;
        log
    }

    /// The feed of every change committed from now on, of every resource type.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Change<K>>> {
        self.live.subscribe()
    }

    pub fn current_rv(&self) -> u64 {
        self.rv
    }

    pub fn get(&self, key: &K, id: &ObjectId) -> Option<&Arc<StoredObject>> {
        self.objects.get(key)?.get(id)
    }

    /// The current objects of one resource type, in key order.
    pub fn objects(&self, key: &K) -> impl Iterator<Item = (&ObjectId, &Arc<StoredObject>)> {
        self.objects.get(key).into_iter().flatten()
    }

    /// How many objects of one resource type are stored.
    pub fn len(&self, key: &K) -> usize {
        self.objects.get(key).map_or(0, BTreeMap::len)
    }

    /// Every resource type with stored objects, and its objects.
    pub fn all(&self) -> impl Iterator<Item = (&K, &BTreeMap<ObjectId, Arc<StoredObject>>)> {
        self.objects.iter()
    }

    /// Stores a new version of an object (ADDED or MODIFIED): stamps the next
    /// resourceVersion into its metadata, encodes it once, records and publishes it.
    pub fn upsert(&mut self, key: K, id: ObjectId, object: Value) -> Result<Arc<StoredObject>, Error> {
        let rv = self.rv + 1;
        self.put(key, id, object, rv)
    }

    /// Removes an object (DELETED); returns its last state, stamped with the deletion's
    /// version, or `None` if it was not there.
    pub fn remove(&mut self, key: &K, id: &ObjectId) -> Option<Arc<StoredObject>> {
        let rv = self.rv + 1;
        self.take(key, id, rv)
    }

    /// A replica's object as its source log holds it now (the snapshot a replica starts
    /// from, made with [`Log::continuing`] at the snapshot's version): stored under its own
    /// resourceVersion, no change recorded.
    pub fn restore(&mut self, key: K, id: ObjectId, object: Value) -> Result<(), Error> {
        let rv = object["metadata"]["resourceVersion"].as_str().and_then(|rv| rv.parse().ok());
        let Some(rv) = rv.filter(|rv| *rv <= self.rv) else {
            let message = format!("a restored object's resourceVersion must be at most the snapshot's {}", self.rv);
            return Err(Error::Internal(message));
        };
        self.store(key, id, object, rv);
        Ok(())
    }

    /// Commits a change another log committed at `rv` (a replica following its source):
    /// the new state for ADDED and MODIFIED, the removal for DELETED. Versions must
    /// increase, as the source's did; the replica's watchers see the change under the same
    /// version, so a client of the source can resume on the replica.
    pub fn replay(&mut self, key: K, id: ObjectId, kind: ChangeKind, object: Value, rv: u64) -> Result<(), Error> {
        if rv <= self.rv {
            return Err(Error::Internal(format!("change {rv} replayed after {}", self.rv)));
        }
        match kind {
            ChangeKind::Added | ChangeKind::Modified => {
                self.put(key, id, object, rv)?;
            }
            ChangeKind::Deleted => {
                // a deletion of what the replica never held still moves its clock
                if self.take(&key, &id, rv).is_none() {
                    self.rv = rv;
                }
            }
        }
        Ok(())
    }

    /// Stores `object` as the version `rv` (above every version so far).
    fn put(&mut self, key: K, id: ObjectId, object: Value, rv: u64) -> Result<Arc<StoredObject>, Error> {
        if !object.get("metadata").is_some_and(Value::is_object) {
            return Err(Error::Internal("an object without metadata cannot be stored".into()));
        }
        self.rv = rv;
        let (stored, old) = self.store(key.clone(), id.clone(), stamped(object, rv), rv);
        let kind = if old.is_some() { ChangeKind::Modified } else { ChangeKind::Added };
        self.publish(key, id, kind, stored.clone(), old);
        Ok(stored)
    }

    /// Keeps `object` as the version `rv` of `id`, encoded once; returns it and the version
    /// it replaces.
    fn store(
        &mut self,
        key: K,
        id: ObjectId,
        object: Value,
        rv: u64,
    ) -> (Arc<StoredObject>, Option<Arc<StoredObject>>) {
        let objects = self.objects.entry(key).or_default();
        // what the new version shares: its previous version's, else a neighbour's
        let like = objects.get(&id).or_else(|| objects.values().next());
        let stored = Arc::new(StoredObject::new(object, rv, like.map(|o| &**o)));
        let old = objects.insert(id, stored.clone());
        (stored, old)
    }

    /// Removes `id` as the version `rv` (above every version so far), if it is there.
    fn take(&mut self, key: &K, id: &ObjectId, rv: u64) -> Option<Arc<StoredObject>> {
        let old = self.objects.get_mut(key)?.remove(id)?;
        self.rv = rv;
        let last = Arc::new(StoredObject::new(stamped(old.value(), rv), rv, Some(&old)));
        self.publish(key.clone(), id.clone(), ChangeKind::Deleted, last.clone(), Some(old));
        Some(last)
    }

    /// Forgets the history (as etcd compaction does): resuming any older version gets 410.
    pub fn compact(&mut self) {
        self.history.clear();
        self.compacted = self.rv;
    }

    fn publish(
        &mut self,
        key: K,
        id: ObjectId,
        kind: ChangeKind,
        object: Arc<StoredObject>,
        old: Option<Arc<StoredObject>>,
    ) {
        let change = Arc::new(Change { rv: self.rv, key, id, kind, object, old, departed: OnceLock::new() });
        self.history.push_back(change.clone());
        while self.history.len() > self.history_limit {
            if let Some(dropped) = self.history.pop_front() {
                self.compacted = dropped.rv;
            }
        }
        // No receiver is fine: nobody is watching.
        let _ = self.live.send(change);
    }

    /// A page of the objects of `key` matching `opts`, from one snapshot across pages.
    pub fn list(&self, key: &K, opts: &ListOptions) -> Result<ListPage, Error> {
        let (snapshot_rv, start_after) = match &opts.continue_token {
            Some(token) => {
                let (rv, after) = decode_continue(token)?;
                (rv, Some(after))
            }
            None if opts.exact => (opts.resource_version.unwrap_or(self.rv), None),
            None => (self.rv, None),
        };
        if snapshot_rv > self.rv {
            return Err(Error::TooLargeResourceVersion { requested: snapshot_rv, current: self.rv });
        }
        // the current state is read in place: cloning a large map (its keys included) was
        // most of a big list's cost
        let rebuilt;
        let objects = if snapshot_rv == self.rv {
            self.objects.get(key).unwrap_or(&self.empty)
        } else {
            rebuilt = self.snapshot_at(key, snapshot_rv)?;
            &rebuilt
        };
        let after = match &start_after {
            Some(after) => Bound::Excluded(after),
            None => Bound::Unbounded,
        };
        let matching: Vec<(&ObjectId, &Arc<StoredObject>)> = objects
            .range::<ObjectId, _>((after, Bound::Unbounded))
            .filter(|((ns, _), _)| opts.namespace.as_ref().is_none_or(|want| want == ns))
            .filter(|(_, o)| opts.labels.matches(&***o) && opts.fields.matches(&***o))
            .collect();
        // resourceVersion=0 is served from the watch cache, which ignores limit.
        let limit = if opts.resource_version == Some(0) { None } else { opts.limit.filter(|l| *l > 0) };
        let take = limit.unwrap_or(usize::MAX).min(matching.len());
        let remaining = matching.len() - take;
        let continue_token = match take.checked_sub(1).and_then(|last| matching.get(last)) {
            Some((last, _)) if remaining > 0 => Some(encode_continue(snapshot_rv, last)),
            _ => None,
        };
        let items = matching.into_iter().take(take).map(|(_, o)| o.clone()).collect();
        Ok(ListPage { items, rv: snapshot_rv, continue_token, remaining })
    }

    /// Snapshots or replays history after the requested version, and subscribes, at once.
    pub fn watch(&self, key: &K, opts: &WatchOptions) -> Result<WatchStart<K>, Error> {
        let live = self.live.subscribe();
        match opts.resume_after() {
            None => {
                let initial = self
                    .objects(key)
                    .filter(|((ns, _), _)| opts.namespace.as_ref().is_none_or(|want| want == ns))
                    .map(|(_, o)| o.clone())
                    .collect();
                Ok(WatchStart { key: key.clone(), initial, backlog: Vec::new(), start_rv: self.rv, live })
            }
            Some(rv) if rv < self.compacted => Err(Error::Expired { requested: rv, oldest: self.compacted }),
            Some(rv) if rv > self.rv => Err(Error::TooLargeResourceVersion { requested: rv, current: self.rv }),
            Some(rv) => {
                let backlog = self.history.iter().filter(|c| c.rv > rv && c.key == *key).cloned().collect();
                Ok(WatchStart {
                    key: key.clone(),
                    initial: Vec::new(),
                    backlog,
                    start_rv: rv.max(self.compacted),
                    live,
                })
            }
        }
    }

    /// The objects of one resource as they were at `rv`, rebuilt by undoing newer changes.
    fn snapshot_at(&self, key: &K, rv: u64) -> Result<BTreeMap<ObjectId, Arc<StoredObject>>, Error> {
        let mut objects = self.objects.get(key).cloned().unwrap_or_default();
        if rv == self.rv {
            return Ok(objects);
        }
        if rv < self.compacted {
            return Err(Error::Expired { requested: rv, oldest: self.compacted });
        }
        for change in self.history.iter().rev().take_while(|c| c.rv > rv).filter(|c| c.key == *key) {
            match &change.old {
                None => {
                    objects.remove(&change.id);
                }
                Some(old) => {
                    objects.insert(change.id.clone(), old.clone());
                }
            }
        }
        Ok(objects)
    }
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> =
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect();
    String::from_utf8(bytes?).ok()
}

/// Opaque to clients: the snapshot version and the last key served.
fn encode_continue(rv: u64, last: &ObjectId) -> String {
    format!("{rv}-{}-{}", hex(&last.0), hex(&last.1))
}

fn decode_continue(token: &str) -> Result<(u64, ObjectId), Error> {
    let bad = || Error::BadRequest(format!("invalid continue token {token:?}"));
    let mut parts = token.splitn(3, '-');
    let rv = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
    let ns = parts.next().and_then(unhex).ok_or_else(bad)?;
    let name = parts.next().and_then(unhex).ok_or_else(bad)?;
    Ok((rv, (ns, name)))
}
