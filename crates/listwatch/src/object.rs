//! Stored object versions, and their bytes in each representation a client can ask for.
//!
//! An object version is encoded to JSON once, when it is committed; lists and every
//! watcher reuse those bytes. This module must never re-serialise an object on the hot
//! path: only a representation other than the stored one (metadata-only, encoded at most
//! once per version, or another served version of the same storage) costs an encoding.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use serde_json::Value;

use crate::protobuf;
use crate::representation::{Encoding, Representation, Shape};
use crate::selectors::Selectable;
use crate::served_type::ServedType;

#[cfg(test)]
thread_local! {
    /// Encodings done on this thread, for the encoded-once tests.
    pub(crate) static ENCODINGS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Serialises a value; the one place objects are encoded.
pub(crate) fn encode(value: &Value) -> Bytes {
    #[cfg(test)]
    ENCODINGS.with(|n| n.set(n.get() + 1));
    // The encoder grows its buffer by doubling: kept as it comes, a 2.1 KiB object would
    // hold 4 KiB (and `Bytes` a second allocation to count the slack) for as long as the
    // version is stored. Stored versions are never appended to, so the bytes are trimmed.
    Bytes::from(value.to_string().into_bytes().into_boxed_slice())
}

/// One version of an object: its bytes for the wire, and what selectors, garbage
/// collection and the metadata-only representation read without parsing them.
///
/// The parsed JSON is not kept: a `serde_json::Value` costs several times the size of the
/// JSON it came from, and a server caching a cluster's Services and EndpointSlices (the
/// grid wrapper, on every edge node) would spend most of its memory on it. The rare paths
/// that need the whole object (a field selector beyond name and namespace, another served
/// type, a deletion's last state) parse the bytes.
#[derive(Debug)]
pub struct StoredObject {
    json: Bytes,
    identity: Identity,
    metadata_json: OnceLock<Bytes>,
    /// This version in protobuf, made for the first protobuf client: its envelope (what a
    /// GET and each watch event carry) and where the bare message (a list's item) is in it.
    protobuf: OnceLock<(Bytes, std::ops::Range<usize>)>,
    resource_version: u64,
}

/// `apiVersion` and `kind` as stored: the same for nearly every object of a resource, so
/// one copy is shared by the versions that agree (see [`StoredObject::new`]).
#[derive(Debug, Default, PartialEq, Eq)]
struct ObjectType {
    api_version: Box<str>,
    kind: Box<str>,
}

/// The metadata read on hot paths (selectors, type checks, garbage collection).
///
/// The strings are kept end to end in one allocation rather than one each: an
/// EndpointSlice's identity is a dozen short strings, and their allocations cost more
/// than their text.
#[derive(Debug, Default)]
struct Identity {
    object_type: Arc<ObjectType>,
    /// namespace, name, uid, then each label's key and value (sorted by key, for lookups
    /// by binary search), then the uids in `metadata.ownerReferences`.
    text: Box<str>,
    /// Where each of those strings ends in `text`.
    ends: Box<[u32]>,
    labels: u32,
}

/// Strings before the labels in [`Identity::text`].
const NAMESPACE: usize = 0;
const NAME: usize = 1;
const UID: usize = 2;
const FIRST_LABEL: usize = 3;

impl Identity {
    fn of(object: &Value, like: Option<&Identity>) -> Self {
        fn text(v: &Value) -> &str {
            v.as_str().unwrap_or_default()
        }
        let metadata = &object["metadata"];
        let object_type =
            ObjectType { api_version: text(&object["apiVersion"]).into(), kind: text(&object["kind"]).into() };
        let object_type = match like {
            Some(like) if *like.object_type == object_type => like.object_type.clone(),
            _ => Arc::new(object_type),
        };
        let mut labels: Vec<(&str, &str)> = metadata["labels"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
            .collect();
        labels.sort_unstable();
        let owner_uids = metadata["ownerReferences"].as_array().into_iter().flatten().filter_map(|r| r["uid"].as_str());
        let strings = [text(&metadata["namespace"]), text(&metadata["name"]), text(&metadata["uid"])]
            .into_iter()
            .chain(labels.iter().flat_map(|(k, v)| [*k, *v]))
            .chain(owner_uids);
        let mut packed = String::new();
        let mut ends = Vec::new();
        for string in strings {
            packed.push_str(string);
            ends.push(u32::try_from(packed.len()).expect("an object's metadata is under 4 GiB"));
        }
        Self {
            object_type,
            text: packed.into_boxed_str(),
            ends: ends.into_boxed_slice(),
            labels: u32::try_from(labels.len()).expect("an object has fewer than 2^32 labels"),
        }
    }

    /// The `at`th string of [`Identity::text`].
    fn string(&self, at: usize) -> &str {
        let start = at.checked_sub(1).map_or(0, |before| self.ends[before] as usize);
        &self.text[start..self.ends[at] as usize]
    }

    fn label_count(&self) -> usize {
        self.labels as usize
    }

    fn label_key(&self, label: usize) -> &str {
        self.string(FIRST_LABEL + 2 * label)
    }

    fn label_value(&self, label: usize) -> &str {
        self.string(FIRST_LABEL + 2 * label + 1)
    }

    fn owner_uids(&self) -> impl Iterator<Item = &str> {
        (FIRST_LABEL + 2 * self.label_count()..self.ends.len()).map(|at| self.string(at))
    }
}

impl StoredObject {
    /// Encodes `value` (which carries `resource_version` in its metadata), sharing what it
    /// has in common with `like` (another version of the object, or another object of its
    /// resource).
    pub(crate) fn new(value: Value, resource_version: u64, like: Option<&StoredObject>) -> Self {
        let json = encode(&value);
        Self {
            identity: Identity::of(&value, like.map(|l| &l.identity)),
            json,
            metadata_json: OnceLock::new(),
            protobuf: OnceLock::new(),
            resource_version,
        }
    }

    /// The object, parsed from its stored bytes (a copy: changing it changes nothing stored).
    pub fn value(&self) -> Value {
        // The bytes are this module's own encoding of a JSON value, so parsing cannot fail;
        // `Null` would only mean memory corruption, and no caller can do better with a panic.
        serde_json::from_slice(&self.json).unwrap_or(Value::Null)
    }

    /// The JSON encoding made when this version was committed.
    pub fn json(&self) -> &Bytes {
        &self.json
    }

    pub fn resource_version(&self) -> u64 {
        self.resource_version
    }

    pub fn namespace(&self) -> &str {
        self.identity.string(NAMESPACE)
    }

    pub fn name(&self) -> &str {
        self.identity.string(NAME)
    }

    /// `metadata.uid`, or "" when the object has none.
    pub fn uid(&self) -> &str {
        self.identity.string(UID)
    }

    /// The uids in `metadata.ownerReferences`.
    pub fn owner_uids(&self) -> impl Iterator<Item = &str> {
        self.identity.owner_uids()
    }

    /// The bytes of this version as `served` in `shape`: the stored bytes when they
    /// already are that, else one encoding (kept for metadata-only, which every
    /// metadata watcher shares).
    pub fn encoded(&self, served: &ServedType, shape: Shape) -> Bytes {
        match shape {
            Shape::Metadata => {
                self.metadata_json.get_or_init(|| encode(&Shape::Metadata.present(self.value()))).clone()
            }
            Shape::Full if self.is_stored_as(served) => self.json.clone(),
            Shape::Full => encode(&served.stamp(self.value())),
        }
    }

    /// The bytes of this version in `representation`; in protobuf, the message without its
    /// envelope (a list holds its items bare; see [`StoredObject::enveloped_as`]). Each
    /// encoding is made at most once per version, for the type it is stored as.
    pub fn encoded_as(&self, representation: &Representation) -> Bytes {
        let served = &representation.served;
        match representation.encoding {
            Encoding::Json => self.encoded(served, representation.shape),
            Encoding::Protobuf if self.is_stored_as(served) => {
                let (envelope, raw) = self.protobuf_envelope(served);
                envelope.slice(raw.clone())
            }
            Encoding::Protobuf => protobuf::message(served, &self.value()),
        }
    }

    /// The bytes of this version as a GET or a watch event carries it: in protobuf with its
    /// envelope (made once per version, shared with [`StoredObject::encoded_as`]), else as
    /// [`StoredObject::encoded_as`].
    pub fn enveloped_as(&self, representation: &Representation) -> Bytes {
        let served = &representation.served;
        match representation.encoding {
            Encoding::Json => self.encoded(served, representation.shape),
            Encoding::Protobuf if self.is_stored_as(served) => self.protobuf_envelope(served).0.clone(),
            Encoding::Protobuf => {
                protobuf::envelope::object(&served.api_version, &served.kind, &protobuf::message(served, &self.value()))
            }
        }
    }

    fn protobuf_envelope(&self, served: &ServedType) -> &(Bytes, std::ops::Range<usize>) {
        self.protobuf.get_or_init(|| {
            let message = protobuf::message(served, &self.value());
            protobuf::envelope::object_and_raw(&served.api_version, &served.kind, &message)
        })
    }

    fn is_stored_as(&self, served: &ServedType) -> bool {
        served.api_version == *self.identity.object_type.api_version && served.kind == *self.identity.object_type.kind
    }
}

impl Selectable for StoredObject {
    fn label(&self, key: &str) -> Option<&str> {
        let identity = &self.identity;
        let (mut low, mut high) = (0, identity.label_count());
        while low < high {
            let middle = low + (high - low) / 2;
            match identity.label_key(middle).cmp(key) {
                std::cmp::Ordering::Less => low = middle + 1,
                std::cmp::Ordering::Greater => high = middle,
                std::cmp::Ordering::Equal => return Some(identity.label_value(middle)),
            }
        }
        None
    }

    fn field(&self, path: &str) -> String {
        match path {
            "metadata.name" => self.name().to_string(),
            "metadata.namespace" => self.namespace().to_string(),
            _ => self.value().field(path),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::representation::{Encoding, Representation};
    use proptest::prelude::Strategy;
    use serde_json::json;

    #[test]
    fn stored_bytes_are_reused_unless_another_type_is_served() {
        let object = StoredObject::new(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}}), 1, None);
        let same = object.encoded(&ServedType::new("v1", "Pod"), Shape::Full);
        assert_eq!(same.as_ptr(), object.json().as_ptr());
        let other = object.encoded(&ServedType::new("v2", "Pod"), Shape::Full);
        assert_eq!(serde_json::from_slice::<Value>(&other).ok().map(|v| v["apiVersion"].clone()), Some(json!("v2")));
        let meta1 = object.encoded(&ServedType::new("v1", "Pod"), Shape::Metadata);
        let meta2 = object.encoded(&ServedType::new("v1", "Pod"), Shape::Metadata);
        assert_eq!(meta1.as_ptr(), meta2.as_ptr(), "metadata-only is encoded once per version");
    }

    /// Protobuf is encoded once per version, for the first protobuf client, and shared by
    /// every later list and watcher; JSON clients never cause it.
    #[test]
    fn a_versions_protobuf_is_encoded_once_and_shared() {
        let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a"}, "spec": {"clusterIP": "10.96.0.1"}});
        let object = StoredObject::new(service, 1, None);
        let json_only = Representation::json(ServedType::new("v1", "Service"), Shape::Full);
        let _ = object.encoded_as(&json_only);
        assert!(object.protobuf.get().is_none(), "no protobuf for JSON clients");
        let protobuf = Representation { encoding: Encoding::Protobuf, ..json_only };
        let first = object.encoded_as(&protobuf);
        let second = object.encoded_as(&protobuf);
        assert_eq!(first.as_ptr(), second.as_ptr(), "encoded once, shared");
        let enveloped = object.enveloped_as(&protobuf);
        assert_eq!(&enveloped[..4], b"k8s\0");
        assert!(enveloped.as_ptr_range().contains(&first.as_ptr()), "the list item is a slice of the envelope");
        // metadata.name = "a" (ObjectMeta is field 1, name its field 1), then spec.clusterIP
        assert_eq!(&first[..5], &[0x0a, 0x03, 0x0a, 0x01, b'a']);
    }

    #[test]
    fn versions_of_one_type_share_it_and_another_type_is_its_own() {
        let pod = |name: &str| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}});
        let a = StoredObject::new(pod("a"), 1, None);
        let b = StoredObject::new(pod("b"), 2, Some(&a));
        assert!(Arc::ptr_eq(&a.identity.object_type, &b.identity.object_type));
        let other =
            StoredObject::new(json!({"apiVersion": "v2", "kind": "Pod", "metadata": {"name": "c"}}), 3, Some(&a));
        assert!(!Arc::ptr_eq(&a.identity.object_type, &other.identity.object_type));
        let served = other.encoded(&ServedType::new("v2", "Pod"), Shape::Full);
        assert_eq!(served.as_ptr(), other.json().as_ptr(), "served as stored");
        assert_eq!((b.name(), other.name(), other.namespace(), other.uid()), ("b", "c", "", ""));
        assert_eq!(other.owner_uids().count(), 0);
    }

    #[test]
    fn identity_is_read_without_parsing_and_agrees_with_the_json() {
        let value = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u-1",
                         "labels": {"b": "2", "a": "1"},
                         "ownerReferences": [{"uid": "o-1"}, {"uid": "o-2"}]},
            "spec": {"nodeName": "n1", "replicas": 3, "paused": null}
        });
        let object = StoredObject::new(value.clone(), 7, None);
        assert_eq!((object.namespace(), object.name(), object.uid()), ("ns", "a", "u-1"));
        assert_eq!(object.owner_uids().collect::<Vec<_>>(), ["o-1", "o-2"]);
        assert_eq!(object.value(), value);
        for key in ["a", "b", "c", ""] {
            assert_eq!(object.label(key), value.label(key), "label {key}");
        }
        for path in ["metadata.name", "metadata.namespace", "spec.nodeName", "spec.replicas", "spec.paused", "spec.x"] {
            assert_eq!(object.field(path), value.field(path), "field {path}");
        }
        assert_eq!(object.field("spec.replicas"), "3");
    }

    proptest::proptest! {
        /// Any label selector matches a stored object exactly when it matches its JSON.
        #[test]
        fn label_selectors_agree_on_stored_objects_and_values(
            labels in proptest::collection::btree_map("[a-d]", "[xy]{0,1}", 0..4),
            requirements in proptest::collection::vec(
                ("[a-e]", 0..6usize, "[xy]{0,1}").prop_map(|(k, op, v)| match op {
                    0 => format!("{k}={v}"),
                    1 => format!("{k}!={v}"),
                    2 => format!("{k} in ({v},x)"),
                    3 => format!("{k} notin ({v})"),
                    4 => k,
                    _ => format!("!{k}"),
                }),
                0..4,
            ),
        ) {
            let value = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "labels": labels}});
            let object = StoredObject::new(value.clone(), 1, None);
            let selector = crate::LabelSelector::parse(&requirements.join(",")).expect("valid selector");
            proptest::prop_assert_eq!(selector.matches(&object), selector.matches(&value));
        }
    }
}
