//! The object store: what writes mean (create/update/patch/delete, server-owned
//! metadata, finalizers, the namespace controller and garbage collector, CRD
//! registration), committed to a `listwatch::Log` that owns the resourceVersions, the
//! history and the watch feed.
//!
//! Every mutation happens under one lock, which also guards the log, so a watcher that
//! snapshots and subscribes under it sees every later change exactly once and in order.
//! This module never implements list/watch semantics itself: that is `listwatch`'s.

use std::sync::{Arc, Mutex, MutexGuard};

use listwatch::{ListOptions, Log, LogConfig, ObjectId, StoredObject, WatchOptions, WatchStart};
use serde_json::{Map, Value, json};

use crate::error::{ApiError, FieldCause};
use crate::field_manager::{self, Schema, Writer};
use crate::resources::{self, ResourceType};

/// Storage is per (group, plural): every version of a resource shares it.
pub type ResourceKey = (String, String);

/// A page of a list, as objects of the requested type.
pub struct ListPage {
    pub items: Vec<Value>,
    pub rv: u64,
    pub continue_token: Option<String>,
    pub remaining: usize,
}

#[derive(Clone, Copy)]
pub enum PatchKind {
    Json,
    Merge,
    Strategic,
    Apply,
}

/// How a write's field ownership (`metadata.managedFields`) is recorded.
#[derive(Clone, Copy, Debug)]
pub enum Ownership<'a> {
    /// Not recorded: in-process writers (tests, the local cluster's simulations); an
    /// update keeps the `managedFields` it sends, a create starts with none.
    Untracked,
    /// Recorded as an `Update` by this writer.
    Update(&'a Writer<'a>),
    /// Already recorded in the object, by server-side apply.
    Applied,
}

/// What a patch produces: a new version of an object, or (server-side apply of an
/// absent object) a new object.
pub enum Patched {
    Update { old: Value, new: Value },
    Create(Value),
}

#[derive(Default)]
pub struct DeleteOptions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub orphan: bool,
}

struct Inner {
    types: Vec<ResourceType>,
    log: Log<ResourceKey>,
    uids: u64,
}

pub struct Store {
    inner: Mutex<Inner>,
}

/// Namespaces a real cluster starts with.
const INITIAL_NAMESPACES: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

impl Store {
    pub fn new(history_limit: usize, watch_buffer: usize) -> Self {
        let store = Self {
            inner: Mutex::new(Inner {
                types: resources::builtin(),
                log: Log::new(LogConfig { history_limit, watch_buffer }),
                uids: 0,
            }),
        };
        let namespaces = store.resolve("", "v1", "namespaces").expect("namespaces are built in");
        for ns in INITIAL_NAMESPACES {
            store.create(&namespaces, "", json!({"metadata": {"name": ns}})).expect("fresh store accepts namespaces");
        }
        store
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock would be a bug in this module; the data is still
        // consistent at every await-free step, so keep serving rather than poisoning tests.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn resolve(&self, group: &str, version: &str, plural: &str) -> Option<ResourceType> {
        self.lock().types.iter().find(|t| t.group == group && t.version == version && t.plural == plural).cloned()
    }

    pub fn types(&self) -> Vec<ResourceType> {
        self.lock().types.clone()
    }

    pub fn current_rv(&self) -> u64 {
        self.lock().log.current_rv()
    }

    /// Forgets the history (as etcd compaction does): resuming any older version gets 410.
    pub fn compact_history(&self) {
        self.lock().log.compact();
    }

    pub fn get(&self, rt: &ResourceType, namespace: &str, name: &str) -> Result<Value, ApiError> {
        let inner = self.lock();
        inner.find(rt, namespace, name).map(|o| with_type(o, rt)).ok_or_else(|| not_found(rt, name))
    }

    /// A page of a list with the stored encodings, for serving.
    pub fn list_encoded(&self, rt: &ResourceType, opts: &ListOptions) -> Result<listwatch::ListPage, ApiError> {
        Ok(self.lock().log.list(&key_of(rt), opts)?)
    }

    pub fn list(&self, rt: &ResourceType, opts: &ListOptions) -> Result<ListPage, ApiError> {
        let page = self.list_encoded(rt, opts)?;
        let items = page.items.iter().map(|o| with_type(o.value(), rt)).collect();
        Ok(ListPage { items, rv: page.rv, continue_token: page.continue_token, remaining: page.remaining })
    }

    /// Snapshots or replays history, and subscribes, atomically.
    pub fn watch(&self, rt: &ResourceType, opts: &WatchOptions) -> Result<WatchStart<ResourceKey>, listwatch::Error> {
        self.lock().log.watch(&key_of(rt), opts)
    }

    pub fn create(&self, rt: &ResourceType, namespace: &str, body: Value) -> Result<Value, ApiError> {
        self.create_owned(rt, namespace, body, Ownership::Untracked)
    }

    pub fn create_owned(
        &self,
        rt: &ResourceType,
        namespace: &str,
        mut body: Value,
        ownership: Ownership<'_>,
    ) -> Result<Value, ApiError> {
        check_type(&body, rt)?;
        let mut inner = self.lock();
        let meta = metadata_mut(&mut body)?;
        let namespace = inner.request_namespace(rt, namespace, meta)?;
        let name = match (meta.get("name").and_then(Value::as_str), meta.get("generateName").and_then(Value::as_str)) {
            (Some(name), _) if !name.is_empty() => name.to_string(),
            (_, Some(prefix)) if !prefix.is_empty() => {
                let name = format!("{prefix}{}", inner.generated_suffix());
                meta.insert("name".into(), json!(name));
                name
            }
            _ => {
                return Err(invalid(rt, "", "metadata.name", "name or generateName is required"));
            }
        };
        validate_name(rt, &name)?;
        if inner.exists(rt, &namespace, &name) {
            return Err(ApiError::AlreadyExists {
                resource: rt.qualified_plural(),
                name,
                group: rt.group.clone(),
                kind: rt.plural.clone(),
            });
        }
        let uid = inner.next_uid();
        let meta = metadata_mut(&mut body)?;
        for transient in ["resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"] {
            meta.remove(transient);
        }
        if !matches!(ownership, Ownership::Applied) {
            meta.remove("managedFields");
        }
        meta.insert("uid".into(), json!(uid));
        meta.insert("creationTimestamp".into(), json!(now()));
        meta.insert("generation".into(), json!(1));
        if rt.namespaced {
            meta.insert("namespace".into(), json!(namespace));
        }
        if rt.status_subresource && !matches!(rt.kind.as_str(), "Node" | "Namespace") {
            body.as_object_mut().map(|o| o.remove("status"));
        }
        match rt.kind.as_str() {
            "Namespace" => body["status"] = json!({"phase": "Active"}),
            "CustomResourceDefinition" => accept_crd(&mut body),
            _ => {}
        }
        if let Ownership::Update(writer) = ownership {
            field_manager::created(inner.field_schema(rt), &mut body, writer, "Update");
        }
        let stored = inner.commit(rt, &namespace, &name, body)?;
        if rt.kind == "CustomResourceDefinition" {
            inner.register_crd(&stored);
        }
        inner.collect_if_owners_gone(rt, &namespace, &name, &stored)?;
        Ok(with_type(stored, rt))
    }

    pub fn update(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        body: Value,
        status_only: bool,
    ) -> Result<Value, ApiError> {
        self.update_owned(rt, namespace, name, body, status_only, Ownership::Untracked)
    }

    pub fn update_owned(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        body: Value,
        status_only: bool,
        ownership: Ownership<'_>,
    ) -> Result<Value, ApiError> {
        check_type(&body, rt)?;
        let mut inner = self.lock();
        let old = inner.find(rt, namespace, name).ok_or_else(|| not_found(rt, name))?;
        inner.write(rt, namespace, name, old, body, status_only, ownership)
    }

    /// The object a patch would produce, without writing it. A server-side apply needs
    /// its writer (`fieldManager`), and records its field ownership in the object.
    #[allow(clippy::too_many_arguments)]
    pub fn prepare_patch(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        kind: PatchKind,
        patch: &[u8],
        status_only: bool,
        applier: Option<(&Writer<'_>, bool)>,
    ) -> Result<Patched, ApiError> {
        let inner = self.lock();
        let current = inner.find(rt, namespace, name);
        let patched = match (kind, current.clone()) {
            (PatchKind::Json, Some(mut target)) => {
                let ops: json_patch::Patch = serde_json::from_slice(patch)
                    .map_err(|e| ApiError::BadRequest(format!("invalid JSON patch: {e}")))?;
                apply_json_patch(&mut target, ops).map_err(|e| {
                    invalid(
                        rt,
                        name,
                        "",
                        &format!("the server rejected our request due to an error in our request: {e}"),
                    )
                })?;
                target
            }
            (PatchKind::Strategic, _) if !inner.is_builtin(rt) => {
                return Err(ApiError::UnsupportedMediaType(format!(
                    "strategic merge patch is not supported for custom resource {}",
                    rt.qualified_plural()
                )));
            }
            (PatchKind::Strategic, Some(mut target)) => {
                let doc: Value = serde_json::from_slice(patch)
                    .map_err(|e| ApiError::BadRequest(format!("invalid strategic merge patch: {e}")))?;
                crate::strategic::apply(&mut target, &doc);
                target
            }
            (PatchKind::Merge, Some(mut target)) => {
                let doc: Value = serde_json::from_slice(patch)
                    .map_err(|e| ApiError::BadRequest(format!("invalid merge patch: {e}")))?;
                json_patch::merge(&mut target, &doc);
                target
            }
            (PatchKind::Apply, current) => {
                let text = std::str::from_utf8(patch)
                    .map_err(|e| ApiError::BadRequest(format!("apply patch is not UTF-8: {e}")))?;
                let mut applied: Value = serde_saphyr::from_str(text)
                    .map_err(|e| ApiError::BadRequest(format!("invalid apply patch: {e}")))?;
                check_type(&applied, rt)?;
                let Some((writer, force)) = applier else {
                    return Err(ApiError::BadRequest("fieldManager is required for apply requests".into()));
                };
                if current.is_none() && status_only {
                    return Err(not_found(rt, name));
                }
                if current.is_none() {
                    metadata_mut(&mut applied)?.insert("name".into(), json!(name));
                }
                let object = field_manager::apply(inner.field_schema(rt), current.as_ref(), &applied, writer, force)
                    .map_err(|conflicts| field_manager::conflict_error(&conflicts))?;
                match current {
                    None => return Ok(Patched::Create(object)),
                    Some(_) => object,
                }
            }
            (_, None) => return Err(not_found(rt, name)),
        };
        let old = current.ok_or_else(|| not_found(rt, name))?;
        Ok(Patched::Update { old, new: patched })
    }

    /// Writes `new` in place of `old`, unless the stored object moved on since `old` was
    /// read (409 Conflict, as an etcd compare-and-swap would fail).
    #[allow(clippy::too_many_arguments)] // an address (3), the versions (2), how it is written (2)
    pub fn replace_if_unchanged(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        old: &Value,
        new: Value,
        status_only: bool,
        ownership: Ownership<'_>,
    ) -> Result<Value, ApiError> {
        let mut inner = self.lock();
        let current = inner.find(rt, namespace, name).ok_or_else(|| not_found(rt, name))?;
        if current["metadata"]["resourceVersion"] != old["metadata"]["resourceVersion"] {
            return Err(ApiError::Conflict {
                resource: rt.qualified_plural(),
                name: name.into(),
                group: rt.group.clone(),
                kind: rt.plural.clone(),
            });
        }
        inner.write(rt, namespace, name, current, new, status_only, ownership)
    }

    /// DELETE on a collection: every object the options select, one by one (each follows
    /// the single-object rules: finalizers, garbage collection). Returns what was deleted.
    pub fn delete_collection(
        &self,
        rt: &ResourceType,
        list: &ListOptions,
        opts: &DeleteOptions,
    ) -> Result<Vec<Value>, ApiError> {
        let page = self.list(rt, &ListOptions { limit: None, continue_token: None, ..list.clone() })?;
        let mut deleted = Vec::new();
        for item in page.items {
            let namespace = item["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
            let name = item["metadata"]["name"].as_str().unwrap_or_default().to_string();
            match self.delete(rt, &namespace, &name, opts) {
                Ok(object) => deleted.push(object),
                // deleted meanwhile (e.g. garbage-collected with an earlier item)
                Err(ApiError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(deleted)
    }

    pub fn delete(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let mut inner = self.lock();
        let old = inner.find(rt, namespace, name).ok_or_else(|| not_found(rt, name))?;
        check_precondition(rt, name, &old, "uid", opts.uid.as_deref())?;
        check_precondition(rt, name, &old, "resourceVersion", opts.resource_version.as_deref())?;
        let has_finalizers = old["metadata"]["finalizers"].as_array().is_some_and(|f| !f.is_empty());
        if has_finalizers {
            if old["metadata"]["deletionTimestamp"].is_string() {
                return Ok(with_type(old, rt));
            }
            let mut marked = old.clone();
            marked["metadata"]["deletionTimestamp"] = json!(now());
            marked["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            let stored = inner.commit(rt, namespace, name, marked)?;
            return Ok(with_type(stored, rt));
        }
        let removed = inner.remove(rt, namespace, name, opts.orphan)?.ok_or_else(|| not_found(rt, name))?;
        Ok(with_type(removed, rt))
    }
}

impl Inner {
    fn find(&self, rt: &ResourceType, namespace: &str, name: &str) -> Option<Value> {
        self.stored(rt, namespace, name).map(|o| o.value())
    }

    fn exists(&self, rt: &ResourceType, namespace: &str, name: &str) -> bool {
        self.stored(rt, namespace, name).is_some()
    }

    fn stored(&self, rt: &ResourceType, namespace: &str, name: &str) -> Option<&Arc<StoredObject>> {
        self.log.get(&key_of(rt), &(scoped(rt, namespace), name.to_string()))
    }

    fn next_uid(&mut self) -> String {
        self.uids += 1;
        format!("0f1e2d3c-0000-4000-8000-{:012x}", self.uids)
    }

    /// Five characters from the alphabet Kubernetes uses for generateName.
    fn generated_suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        self.uids += 1;
        let mut n = self.uids.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20;
        (0..5)
            .map(|_| {
                let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
                n /= ALPHABET.len() as u64;
                c
            })
            .collect()
    }

    fn request_namespace(
        &self,
        rt: &ResourceType,
        url_ns: &str,
        meta: &Map<String, Value>,
    ) -> Result<String, ApiError> {
        if !rt.namespaced {
            return Ok(String::new());
        }
        if let Some(body_ns) = meta.get("namespace").and_then(Value::as_str)
            && !body_ns.is_empty()
            && body_ns != url_ns
        {
            return Err(ApiError::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request".into(),
            ));
        }
        let namespaces = ("".to_string(), "namespaces".to_string());
        let exists = self.log.get(&namespaces, &(String::new(), url_ns.to_string())).is_some();
        if !exists {
            return Err(ApiError::NotFound {
                resource: "namespaces".into(),
                name: url_ns.into(),
                group: String::new(),
                kind: "namespaces".into(),
            });
        }
        Ok(url_ns.to_string())
    }

    /// The shared replace path of PUT and PATCH.
    #[allow(clippy::too_many_arguments)]
    #[allow(clippy::too_many_arguments)] // an address (3), the versions (2), how it is written (2)
    fn write(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        old: Value,
        mut new: Value,
        status_only: bool,
        ownership: Ownership<'_>,
    ) -> Result<Value, ApiError> {
        let meta = metadata_mut(&mut new)?;
        if let Some(body_name) = meta.get("name").and_then(Value::as_str)
            && body_name != name
        {
            return Err(ApiError::BadRequest(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        // A uid in the body is a precondition, as on a real apiserver: a write meant for
        // an object that was deleted and re-created under the same name must fail.
        let sent_uid = meta.get("uid").and_then(Value::as_str).filter(|uid| !uid.is_empty());
        check_precondition(rt, name, &old, "uid", sent_uid)?;
        let sent_rv = meta.get("resourceVersion").and_then(Value::as_str).unwrap_or_default().to_string();
        let have_rv = old["metadata"]["resourceVersion"].as_str().unwrap_or_default();
        if !sent_rv.is_empty() && sent_rv != have_rv {
            return Err(ApiError::Conflict {
                resource: rt.qualified_plural(),
                name: name.into(),
                group: rt.group.clone(),
                kind: rt.plural.clone(),
            });
        }
        let mut next = if status_only {
            let mut next = old.clone();
            next["status"] = new.get("status").cloned().unwrap_or(Value::Null);
            if let (Ownership::Applied, Some(managed)) = (ownership, new["metadata"].get("managedFields")) {
                next["metadata"]["managedFields"] = managed.clone();
            }
            if let Some(o) = next.as_object_mut() {
                o.retain(|_, v| !v.is_null());
            }
            next
        } else {
            if rt.status_subresource {
                match old.get("status") {
                    Some(status) => new["status"] = status.clone(),
                    None => {
                        new.as_object_mut().map(|o| o.remove("status"));
                    }
                }
            }
            new
        };
        // Server-owned metadata is never taken from the client.
        for field in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "namespace",
            "name",
        ] {
            match old["metadata"].get(field) {
                Some(v) => next["metadata"][field] = v.clone(),
                None => {
                    next["metadata"].as_object_mut().map(|m| m.remove(field));
                }
            }
        }
        next["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
        if let Some(o) = next.as_object_mut() {
            o.insert("apiVersion".into(), old["apiVersion"].clone());
            o.insert("kind".into(), old["kind"].clone());
        }
        if let Ownership::Update(writer) = ownership {
            field_manager::updated(self.field_schema(rt), &old, &mut next, writer);
        }
        if next == old {
            return Ok(with_type(old, rt));
        }
        if spec_of(&next, rt) != spec_of(&old, rt) {
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            next["metadata"]["generation"] = json!(generation);
        }
        let deleting = next["metadata"]["deletionTimestamp"].is_string();
        let finalizers_left = next["metadata"]["finalizers"].as_array().is_some_and(|f| !f.is_empty());
        let stored = self.commit(rt, namespace, name, next)?;
        if deleting && !finalizers_left {
            let removed = self.remove(rt, namespace, name, false)?.ok_or_else(|| not_found(rt, name))?;
            return Ok(with_type(removed, rt));
        }
        if rt.kind == "CustomResourceDefinition" {
            self.register_crd(&stored);
        }
        Ok(with_type(stored, rt))
    }

    /// Removes an object and, as the garbage collector would, its dependents (or, with
    /// `orphan`, their owner references to it). `None` if it was not there.
    fn remove(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        orphan: bool,
    ) -> Result<Option<Value>, ApiError> {
        let Some(last) = self.log.remove(&key_of(rt), &(scoped(rt, namespace), name.to_string())) else {
            return Ok(None);
        };
        let last = last.value();
        let uid = last["metadata"]["uid"].as_str().unwrap_or_default().to_string();
        if rt.kind == "Namespace" {
            self.delete_namespace_contents(name)?;
        }
        if rt.kind == "CustomResourceDefinition" {
            self.unregister_crd(&last)?;
        }
        self.collect_dependents(&uid, orphan)?;
        Ok(Some(last))
    }

    fn delete_namespace_contents(&mut self, namespace: &str) -> Result<(), ApiError> {
        let doomed: Vec<(ResourceType, String)> = self
            .log
            .all()
            .flat_map(|(key, objs)| {
                objs.keys().filter(|(ns, _)| ns == namespace).map(move |(_, name)| (key.clone(), name.clone()))
            })
            .filter_map(|(key, name)| Some((self.type_for(&key)?, name)))
            .collect();
        for (rt, name) in doomed {
            // gone already if an earlier removal garbage-collected it
            self.remove(&rt, namespace, &name, false)?;
        }
        Ok(())
    }

    /// The garbage collector's pass over a new object whose owner references name objects
    /// that no longer exist (a controller created it from a stale cache after its owner
    /// was deleted): with no owner left it is deleted, otherwise the references to the
    /// gone owners are dropped. Real clusters do this asynchronously; here at once.
    fn collect_if_owners_gone(
        &mut self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        object: &Value,
    ) -> Result<(), ApiError> {
        if owner_uids(object).next().is_none() {
            return Ok(());
        }
        let live = self.live_uids();
        let (solid, gone): (Vec<&str>, Vec<&str>) = owner_uids(object).partition(|uid| live.contains(*uid));
        if gone.is_empty() {
            Ok(())
        } else if solid.is_empty() {
            self.remove(rt, namespace, name, false).map(drop)
        } else {
            let mut kept = object.clone();
            if let Some(refs) = kept["metadata"]["ownerReferences"].as_array_mut() {
                refs.retain(|r| r["uid"].as_str().is_some_and(|uid| live.contains(uid)));
            }
            self.commit(rt, namespace, name, kept).map(drop)
        }
    }

    /// The uid of every stored object.
    fn live_uids(&self) -> std::collections::HashSet<String> {
        self.log
            .all()
            .flat_map(|(_, m)| m.values())
            .map(|o| o.uid().to_string())
            .filter(|uid| !uid.is_empty())
            .collect()
    }

    fn collect_dependents(&mut self, owner_uid: &str, orphan: bool) -> Result<(), ApiError> {
        if owner_uid.is_empty() {
            return Ok(());
        }
        let live_uids = self.live_uids();
        let dependents: Vec<(ResourceKey, String, String, Value)> = self
            .log
            .all()
            .flat_map(|(key, objs)| objs.iter().map(move |((ns, name), o)| (key.clone(), ns.clone(), name.clone(), o)))
            .filter(|(_, _, _, o)| o.owner_uids().any(|u| u == owner_uid))
            .map(|(k, ns, name, o)| (k, ns, name, o.value()))
            .collect();
        for (key, namespace, name, object) in dependents {
            let Some(rt) = self.type_for(&key) else {
                continue;
            };
            if orphan {
                let mut next = object.clone();
                if let Some(refs) = next["metadata"]["ownerReferences"].as_array_mut() {
                    refs.retain(|r| r["uid"].as_str() != Some(owner_uid));
                }
                self.commit(&rt, &namespace, &name, next)?;
            } else if !owner_uids(&object).any(|u| u != owner_uid && live_uids.contains(u))
                && self.exists(&rt, &namespace, &name)
            {
                if object["metadata"]["finalizers"].as_array().is_some_and(|f| !f.is_empty()) {
                    if !object["metadata"]["deletionTimestamp"].is_string() {
                        let mut marked = object.clone();
                        marked["metadata"]["deletionTimestamp"] = json!(now());
                        self.commit(&rt, &namespace, &name, marked)?;
                    }
                } else {
                    self.remove(&rt, &namespace, &name, false)?;
                }
            }
        }
        Ok(())
    }

    fn is_builtin(&self, rt: &ResourceType) -> bool {
        resources::builtin().iter().any(|b| b.group == rt.group && b.plural == rt.plural)
    }

    fn field_schema<'r>(&self, rt: &'r ResourceType) -> Schema<'r> {
        Schema { kind: &rt.kind, builtin: self.is_builtin(rt) }
    }

    fn type_for(&self, key: &ResourceKey) -> Option<ResourceType> {
        self.types.iter().find(|t| t.group == key.0 && t.plural == key.1).cloned()
    }

    /// Stores a new version (the log stamps its resourceVersion and publishes it).
    fn commit(&mut self, rt: &ResourceType, namespace: &str, name: &str, object: Value) -> Result<Value, ApiError> {
        let id: ObjectId = (scoped(rt, namespace), name.to_string());
        let mut object = with_type(object, rt);
        // what the log stored, without parsing its bytes back
        let stored = self.log.upsert(key_of(rt), id, object.clone())?;
        object["metadata"]["resourceVersion"] = json!(stored.resource_version().to_string());
        Ok(object)
    }

    /// A deleted CRD takes its custom resources with it and stops being served.
    fn unregister_crd(&mut self, crd: &Value) -> Result<(), ApiError> {
        let served = resources::from_crd(crd);
        let Some(first) = served.first().cloned() else { return Ok(()) };
        let ids: Vec<ObjectId> = self.log.objects(&key_of(&first)).map(|(id, _)| id.clone()).collect();
        for (namespace, name) in ids {
            self.remove(&first, &namespace, &name, false)?;
        }
        self.types.retain(|t| !(t.group == first.group && t.plural == first.plural));
        Ok(())
    }

    fn register_crd(&mut self, crd: &Value) {
        for rt in resources::from_crd(crd) {
            self.types.retain(|t| !(t.group == rt.group && t.version == rt.version && t.plural == rt.plural));
            self.types.push(rt);
        }
    }
}

/// RFC 6902 as the apiserver applies it: a `test` for `null` passes when the path is
/// absent (kube-rs' finalizer helper relies on this to add the first finalizer).
fn apply_json_patch(target: &mut Value, ops: json_patch::Patch) -> Result<(), json_patch::PatchError> {
    let mut work = target.clone();
    for op in ops.0 {
        if let json_patch::PatchOperation::Test(test) = &op
            && test.value.is_null()
            && work.pointer(test.path.as_str()).is_none()
        {
            continue;
        }
        json_patch::patch(&mut work, &[op])?;
    }
    *target = work;
    Ok(())
}

/// A delete option or a uid in a write body that must match the stored object: 409 with
/// the real apiserver's message when it does not.
fn check_precondition(
    rt: &ResourceType,
    name: &str,
    stored: &Value,
    field: &str,
    want: Option<&str>,
) -> Result<(), ApiError> {
    let have = stored["metadata"][field].as_str().unwrap_or_default();
    match want {
        Some(want) if want != have => Err(ApiError::PreconditionFailed {
            resource: rt.qualified_plural(),
            name: name.to_string(),
            group: rt.group.clone(),
            kind: rt.plural.clone(),
            message: format!("Precondition failed: {field} in precondition: {want}, {field} in object meta: {have}"),
        }),
        _ => Ok(()),
    }
}

fn owner_uids(object: &Value) -> impl Iterator<Item = &str> {
    object["metadata"]["ownerReferences"].as_array().into_iter().flatten().filter_map(|r| r["uid"].as_str())
}

/// A CRD is established at once (there is no naming controller to wait for).
fn accept_crd(crd: &mut Value) {
    let names = crd["spec"]["names"].clone();
    crd["status"] = json!({
        "acceptedNames": names,
        "storedVersions": crd["spec"]["versions"].as_array().into_iter().flatten()
            .filter(|v| v["storage"].as_bool() == Some(true)).map(|v| v["name"].clone()).collect::<Vec<_>>(),
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now()},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now()},
        ],
    });
}

pub fn key_of(rt: &ResourceType) -> ResourceKey {
    (rt.group.clone(), rt.plural.clone())
}

fn scoped(rt: &ResourceType, namespace: &str) -> String {
    if rt.namespaced { namespace.to_string() } else { String::new() }
}

/// What `generation` tracks: everything but metadata (and status, when it has its own endpoint).
fn spec_of(object: &Value, rt: &ResourceType) -> Value {
    let mut spec = object.clone();
    if let Some(o) = spec.as_object_mut() {
        o.remove("metadata");
        if rt.status_subresource {
            o.remove("status");
        }
    }
    spec
}

/// Sets `apiVersion`/`kind` to the version being served.
pub fn with_type(object: Value, rt: &ResourceType) -> Value {
    rt.served().stamp(object)
}

fn metadata_mut(body: &mut Value) -> Result<&mut Map<String, Value>, ApiError> {
    let object =
        body.as_object_mut().ok_or_else(|| ApiError::BadRequest("the request body must be a JSON object".into()))?;
    let meta = object.entry("metadata").or_insert_with(|| json!({}));
    meta.as_object_mut().ok_or_else(|| ApiError::BadRequest("metadata must be an object".into()))
}

/// The body's apiVersion/kind, when given, must be the resource's.
fn check_type(body: &Value, rt: &ResourceType) -> Result<(), ApiError> {
    if !body.is_object() {
        return Err(ApiError::BadRequest("the request body must be a JSON object".into()));
    }
    if let Some(kind) = body.get("kind").and_then(Value::as_str)
        && kind != rt.kind
    {
        return Err(ApiError::BadRequest(format!(
            "the object provided is unrecognized (must be of type {}): kind {kind:?} does not match",
            rt.kind
        )));
    }
    if let Some(api_version) = body.get("apiVersion").and_then(Value::as_str)
        && api_version != rt.api_version()
    {
        return Err(ApiError::BadRequest(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            rt.api_version()
        )));
    }
    Ok(())
}

fn validate_name(rt: &ResourceType, name: &str) -> Result<(), ApiError> {
    if rt.group == "rbac.authorization.k8s.io" {
        // RBAC names only need to be valid path segments (`system:controller:...` is common)
        let valid = !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '%']);
        return if valid {
            Ok(())
        } else {
            Err(invalid(
                rt,
                name,
                "metadata.name",
                &format!("Invalid value: {name:?}: may not contain '/' or '%', or be '.' or '..'"),
            ))
        };
    }
    let valid = name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if valid {
        return Ok(());
    }
    Err(invalid(
        rt,
        name,
        "metadata.name",
        &format!(
            "Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        ),
    ))
}

fn invalid(rt: &ResourceType, name: &str, field: &str, message: &str) -> ApiError {
    ApiError::Invalid {
        kind: rt.kind.clone(),
        name: name.into(),
        group: rt.group.clone(),
        causes: vec![FieldCause::invalid(field, message)],
    }
}

pub fn not_found(rt: &ResourceType, name: &str) -> ApiError {
    ApiError::NotFound {
        resource: rt.qualified_plural(),
        name: name.into(),
        group: rt.group.clone(),
        kind: rt.plural.clone(),
    }
}

pub fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}
