//! Whether a live object with a generated name is this grid's to write, and whether it
//! needs writing at all. Pure: the reconciler asks, then acts.
//!
//! A grid writes only objects it controls (a controller ownerReference with its uid) or
//! orphans carrying its `superedge.io/grid-selector` label (adoption, as SuperEdge's
//! controller-ref manager did). Anything else under a generated name is a conflict that
//! is reported and never touched.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use edgegrid_core::keys;

/// What a grid may do with a live object that has one of its generated names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// Its controller ownerReference is this grid (by uid).
    Controlled,
    /// No controller, labelled with this grid's name: take it over.
    Adoptable,
    /// Not controlled by this grid and being deleted: wait for it to go.
    Terminating,
    /// Someone else's: never modified or deleted.
    Foreign {
        /// `Kind/name` of its controller, if it has one.
        controller: Option<String>,
    },
}

pub fn ownership(grid_uid: &str, grid_name: &str, live: &ObjectMeta) -> Ownership {
    let controller = live.owner_references.iter().flatten().find(|o| o.controller == Some(true));
    match controller {
        Some(owner) if owner.uid == grid_uid => Ownership::Controlled,
        Some(owner) => Ownership::Foreign { controller: Some(format!("{}/{}", owner.kind, owner.name)) },
        None if live.deletion_timestamp.is_some() => Ownership::Terminating,
        None if live.labels.as_ref().and_then(|l| l.get(keys::GRID_SELECTOR_LABEL)).map(String::as_str)
            == Some(grid_name) =>
        {
            Ownership::Adoptable
        }
        None => Ownership::Foreign { controller: None },
    }
}

/// Stamps the desired object (as JSON) with a hash of itself in
/// [`keys::APPLIED_HASH_ANNOTATION`]. A field the grid stops setting then changes the
/// hash, which [`needs_apply`] sees even though the live object still has the field.
pub fn stamp_hash(desired: &mut Value) {
    let hash = format!("{:016x}", fnv1a(desired.to_string().as_bytes()));
    if let Some(metadata) = desired.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = metadata.entry("annotations").or_insert_with(|| Value::Object(Default::default()));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(keys::APPLIED_HASH_ANNOTATION.into(), Value::String(hash));
        }
    }
}

/// FNV-1a, 64 bit: stable across Rust releases and platforms, unlike `DefaultHasher`,
/// so a controller upgrade does not re-apply every object.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3))
}

/// Whether applying `desired` (stamped) would change `live`: some label, annotation or
/// spec field it sets differs or is missing. Fields only the live object has (defaults
/// the apiserver filled in, status, other managers' fields) do not count, and the
/// ownerReferences are judged by [`ownership`] instead.
pub fn needs_apply(desired: &Value, live: &Value) -> bool {
    let covered = |path: &[&str]| {
        let want = path.iter().try_fold(desired, |v, k| v.get(*k));
        let have = path.iter().try_fold(live, |v, k| v.get(*k));
        match (want, have) {
            (None, _) => true,
            (Some(want), Some(have)) => is_subset(want, have),
            (Some(_), None) => false,
        }
    };
    !(covered(&["metadata", "labels"]) && covered(&["metadata", "annotations"]) && covered(&["spec"]))
}

/// `want` is contained in `have`: every map key of `want` is in `have` with a contained
/// value, lists have the same length with contained elements, scalars are equal.
fn is_subset(want: &Value, have: &Value) -> bool {
    match (want, have) {
        (Value::Object(want), Value::Object(have)) => {
            want.iter().all(|(k, w)| have.get(k).is_some_and(|h| is_subset(w, h)))
        }
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len() && want.iter().zip(have).all(|(w, h)| is_subset(w, h))
        }
        (want, have) => want == have,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use serde_json::json;
    use std::collections::BTreeMap;

    fn meta(controller: Option<(&str, &str)>, label: Option<&str>, deleting: bool) -> ObjectMeta {
        ObjectMeta {
            owner_references: controller.map(|(uid, name)| {
                vec![
                    OwnerReference { uid: "not-a-controller".into(), controller: None, ..Default::default() },
                    OwnerReference {
                        uid: uid.into(),
                        kind: "DeploymentGrid".into(),
                        name: name.into(),
                        controller: Some(true),
                        ..Default::default()
                    },
                ]
            }),
            labels: label.map(|l| BTreeMap::from([(keys::GRID_SELECTOR_LABEL.to_string(), l.to_string())])),
            deletion_timestamp: deleting.then_some(Time(jiff::Timestamp::UNIX_EPOCH)),
            ..Default::default()
        }
    }

    #[test]
    fn only_our_controller_reference_or_a_labelled_orphan_is_ours() {
        let cases = [
            (meta(Some(("uid-web", "web")), None, false), Ownership::Controlled),
            (meta(Some(("uid-web", "web")), Some("other"), true), Ownership::Controlled),
            (meta(None, Some("web"), false), Ownership::Adoptable),
            (meta(None, Some("web"), true), Ownership::Terminating),
            (meta(None, Some("web-unit"), false), Ownership::Foreign { controller: None }),
            (meta(None, None, false), Ownership::Foreign { controller: None }),
            // the same name from another grid (web/unit-d vs web-unit/d) is a conflict
            (
                meta(Some(("uid-web-unit", "web-unit")), Some("web"), false),
                Ownership::Foreign { controller: Some("DeploymentGrid/web-unit".into()) },
            ),
        ];
        for (live, expected) in cases {
            assert_eq!(ownership("uid-web", "web", &live), expected, "{live:?}");
        }
    }

    fn stamped(value: Value) -> Value {
        let mut value = value;
        stamp_hash(&mut value);
        value
    }

    #[test]
    fn the_hash_follows_every_field_and_lands_in_an_annotation() {
        let a = stamped(json!({"metadata": {"name": "x"}, "spec": {"replicas": 1}}));
        let b = stamped(json!({"metadata": {"name": "x"}, "spec": {"replicas": 2}}));
        let again = stamped(json!({"metadata": {"name": "x"}, "spec": {"replicas": 1}}));
        let hash =
            |v: &Value| v["metadata"]["annotations"][keys::APPLIED_HASH_ANNOTATION].as_str().unwrap().to_string();
        assert_eq!(hash(&a), hash(&again));
        assert_ne!(hash(&a), hash(&b));
        assert_eq!(hash(&a).len(), 16);
        assert_eq!(format!("{:016x}", fnv1a(b"")), "cbf29ce484222325", "FNV-1a offset basis");
        assert_eq!(format!("{:016x}", fnv1a(b"a")), "af63dc4c8601ec8c", "FNV-1a 64 test vector");
    }

    #[test]
    fn defaults_and_foreign_fields_are_not_drift() {
        let desired = stamped(json!({
            "metadata": {"name": "web-svc", "labels": {"app": "web"}, "ownerReferences": [{"uid": "u"}]},
            "spec": {"ports": [{"port": 80}], "selector": {"app": "web"}}
        }));
        let mut live = desired.clone();
        // the apiserver defaulted fields, another controller annotated, status exists
        live["spec"]["ports"][0]["protocol"] = json!("TCP");
        live["spec"]["ports"][0]["targetPort"] = json!(80);
        live["spec"]["clusterIP"] = json!("10.96.0.10");
        live["metadata"]["annotations"]["other.io/note"] = json!("kept");
        live["metadata"]["ownerReferences"] = json!([{"uid": "u"}, {"uid": "someone-else"}]);
        live["status"] = json!({"loadBalancer": {}});
        assert!(!needs_apply(&desired, &live));

        let mut changed = live.clone();
        changed["spec"]["selector"]["app"] = json!("database");
        assert!(needs_apply(&desired, &changed), "a field we set was changed");
        let mut missing = live.clone();
        missing["metadata"]["labels"] = json!({});
        assert!(needs_apply(&desired, &missing), "a label we set was removed");
        let mut extra_port = live.clone();
        extra_port["spec"]["ports"] = json!([{"port": 80}, {"port": 81}]);
        assert!(needs_apply(&desired, &extra_port), "a list we set has another length");
        // the grid dropped a label: the live object still has it, but the hash moved
        let fewer = stamped(json!({
            "metadata": {"name": "web-svc", "labels": {}, "ownerReferences": [{"uid": "u"}]},
            "spec": {"ports": [{"port": 80}], "selector": {"app": "web"}}
        }));
        assert!(needs_apply(&fewer, &live));
    }
}
