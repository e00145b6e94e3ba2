//! Events through both APIs: a real apiserver stores one Event and serves it as `v1` and as
//! `events.k8s.io/v1`, with fields renamed between them. Controllers here record through
//! `events.k8s.io/v1` (kube-rs' Recorder) while `kubectl describe` and `kubectl get
//! events` read `v1`, so without this the Events exist and nobody sees them.
//!
//! This server keeps the two stores it has (one per API, each with its own list/watch,
//! field selectors and resourceVersions) in step instead: every create, update, patch and
//! delete of an Event through one API is repeated, converted, on the other. What differs
//! from a real server: the two copies have their own `uid` and `resourceVersion`.
//!
//! The field mapping (`events.k8s.io/v1` <-> `v1`): `regarding` <-> `involvedObject`,
//! `note` <-> `message`, `reportingController` <-> `reportingComponent`,
//! `deprecatedSource` <-> `source`, `deprecatedFirstTimestamp` <-> `firstTimestamp`,
//! `deprecatedLastTimestamp` <-> `lastTimestamp`, `deprecatedCount` <-> `count`; `reason`,
//! `type`, `action`, `related`, `series`, `eventTime` and `reportingInstance` keep their
//! names.

use serde_json::{Map, Value, json};

use crate::resources::ResourceType;
use crate::store::{DeleteOptions, Store};

/// `(events.k8s.io/v1 name, v1 name)`.
const RENAMED: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

const KEPT: [&str; 7] = ["reason", "type", "action", "related", "series", "eventTime", "reportingInstance"];

fn is_event(rt: &ResourceType) -> bool {
    rt.plural == "events" && rt.kind == "Event" && (rt.group.is_empty() || rt.group == "events.k8s.io")
}

/// `event` (as `rt` serves it) in the other API's form, metadata reduced to what
/// identifies and describes it (name, namespace, labels, annotations).
pub fn convert(rt: &ResourceType, event: &Value) -> Value {
    let to_core = rt.group == "events.k8s.io";
    let mut out = Map::new();
    let (api_version, kind) = if to_core { ("v1", "Event") } else { ("events.k8s.io/v1", "Event") };
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!(kind));
    let metadata = &event["metadata"];
    let mut meta = Map::new();
    for field in ["name", "namespace", "labels", "annotations"] {
        if !metadata[field].is_null() {
            meta.insert(field.into(), metadata[field].clone());
        }
    }
    out.insert("metadata".into(), Value::Object(meta));
    for (events_name, core_name) in RENAMED {
        let (from, to) = if to_core { (events_name, core_name) } else { (core_name, events_name) };
        if !event[from].is_null() {
            out.insert(to.into(), event[from].clone());
        }
    }
    for field in KEPT {
        if !event[field].is_null() {
            out.insert(field.into(), event[field].clone());
        }
    }
    Value::Object(out)
}

/// The other API's resource type, when `rt` is one of the two Event types.
fn other(store: &Store, rt: &ResourceType) -> Option<ResourceType> {
    if !is_event(rt) {
        return None;
    }
    if rt.group.is_empty() { store.resolve("events.k8s.io", "v1", "events") } else { store.resolve("", "v1", "events") }
}

/// Repeats a write of `written` (as stored through `rt`) on the other Event API.
pub fn mirror(store: &Store, rt: &ResourceType, written: &Value) {
    let Some(other) = other(store, rt) else { return };
    let copy = convert(rt, written);
    let (namespace, name) = (
        copy["metadata"]["namespace"].as_str().unwrap_or_default(),
        copy["metadata"]["name"].as_str().unwrap_or_default(),
    );
    let result = match store.get(&other, namespace, name) {
        Ok(_) => store.update(&other, namespace, name, copy.clone(), false),
        Err(_) => store.create(&other, namespace, copy.clone()),
    };
    if let Err(error) = result {
        tracing::warn!(%error, namespace, name, "event not mirrored to the other events API");
    }
}

/// Repeats the deletion of an Event on the other API.
pub fn mirror_delete(store: &Store, rt: &ResourceType, deleted: &Value) {
    let Some(other) = other(store, rt) else { return };
    let metadata = &deleted["metadata"];
    let (namespace, name) =
        (metadata["namespace"].as_str().unwrap_or_default(), metadata["name"].as_str().unwrap_or_default());
    let _ = store.delete(&other, namespace, name, &DeleteOptions::default());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt(group: &str) -> ResourceType {
        ResourceType::new(group, "v1", "events", "Event", true, false)
    }

    #[test]
    fn fields_are_renamed_both_ways_as_a_real_server_converts_them() {
        let recorded = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "echo.1", "namespace": "default", "uid": "u", "resourceVersion": "5",
                "labels": {"a": "b"}},
            "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "grid-controller",
            "reportingInstance": "grid-controller-0", "action": "Reconcile", "reason": "TemplateMissing",
            "type": "Warning", "note": "no template", "regarding": {"kind": "DeploymentGrid", "name": "echo",
                "namespace": "default", "uid": "g"},
            "series": {"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000000Z"},
        });
        let core = convert(&rt("events.k8s.io"), &recorded);
        assert_eq!(
            core,
            json!({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": "echo.1", "namespace": "default", "labels": {"a": "b"}},
                "eventTime": "2026-01-01T00:00:00.000000Z", "reportingComponent": "grid-controller",
                "reportingInstance": "grid-controller-0", "action": "Reconcile", "reason": "TemplateMissing",
                "type": "Warning", "message": "no template", "involvedObject": {"kind": "DeploymentGrid",
                    "name": "echo", "namespace": "default", "uid": "g"},
                "series": {"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000000Z"},
            })
        );
        // and back: what the other API stores is the same event
        let mut back = convert(&rt(""), &core);
        let mut expected = recorded.clone();
        expected["metadata"] = json!({"name": "echo.1", "namespace": "default", "labels": {"a": "b"}});
        back["metadata"] = expected["metadata"].clone();
        assert_eq!(back, expected);
        // the core API's deprecated fields
        let old_style = json!({"metadata": {"name": "x"}, "source": {"component": "kubelet"}, "count": 3,
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:05:00Z", "message": "m"});
        assert_eq!(
            convert(&rt(""), &old_style),
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "x"},
                "deprecatedSource": {"component": "kubelet"}, "deprecatedCount": 3,
                "deprecatedFirstTimestamp": "2026-01-01T00:00:00Z", "deprecatedLastTimestamp": "2026-01-01T00:05:00Z",
                "note": "m"})
        );
    }
}
