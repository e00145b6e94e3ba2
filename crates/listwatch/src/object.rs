//! Stored object versions and the representations a client can ask for.
//!
//! An object version is encoded to JSON once, when it is committed; lists and every
//! watcher reuse those bytes. This module must never re-serialise an object on the hot
//! path: only a representation other than the stored one (metadata-only, encoded at most
//! once per version, or another served version of the same storage) costs an encoding.

use std::sync::OnceLock;

use bytes::Bytes;
use serde_json::{Value, json};

#[cfg(test)]
thread_local! {
    /// Encodings done on this thread, for the encoded-once tests.
    pub(crate) static ENCODINGS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Serialises a value; the one place objects are encoded.
pub(crate) fn encode(value: &Value) -> Bytes {
    #[cfg(test)]
    ENCODINGS.with(|n| n.set(n.get() + 1));
    Bytes::from(value.to_string())
}

/// One version of an object: its JSON form for selectors, and its bytes for the wire.
#[derive(Debug)]
pub struct StoredObject {
    value: Value,
    json: Bytes,
    metadata_json: OnceLock<Bytes>,
    resource_version: u64,
}

impl StoredObject {
    /// Encodes `value` (which carries `resource_version` in its metadata).
    pub(crate) fn new(value: Value, resource_version: u64) -> Self {
        let json = encode(&value);
        Self { value, json, metadata_json: OnceLock::new(), resource_version }
    }

    pub fn value(&self) -> &Value {
        &self.value
    }

    /// The JSON encoding made when this version was committed.
    pub fn json(&self) -> &Bytes {
        &self.json
    }

    pub fn resource_version(&self) -> u64 {
        self.resource_version
    }

    pub fn namespace(&self) -> &str {
        self.value["metadata"]["namespace"].as_str().unwrap_or_default()
    }

    pub fn name(&self) -> &str {
        self.value["metadata"]["name"].as_str().unwrap_or_default()
    }

    /// The bytes of this version as `served` in `shape`: the stored bytes when they
    /// already are that, else one encoding (kept for metadata-only, which every
    /// metadata watcher shares).
    pub fn encoded(&self, served: &Served, shape: Shape) -> Bytes {
        match shape {
            Shape::Metadata => {
                self.metadata_json.get_or_init(|| encode(&Shape::Metadata.present(self.value.clone()))).clone()
            }
            Shape::Full if served.describes(&self.value) => self.json.clone(),
            Shape::Full => encode(&served.stamp(self.value.clone())),
        }
    }
}

/// The type an object is served as: several API versions may share one storage, so the
/// stored bytes carry the version that wrote them and are re-typed when another is asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served {
    /// `v1`, `apps/v1`
    pub api_version: String,
    pub kind: String,
}

impl Served {
    pub fn new(api_version: impl Into<String>, kind: impl Into<String>) -> Self {
        Self { api_version: api_version.into(), kind: kind.into() }
    }

    fn describes(&self, object: &Value) -> bool {
        object["apiVersion"].as_str() == Some(&self.api_version) && object["kind"].as_str() == Some(&self.kind)
    }

    /// Sets `apiVersion`/`kind` to this type.
    pub fn stamp(&self, mut object: Value) -> Value {
        if let Some(o) = object.as_object_mut() {
            o.insert("apiVersion".into(), json!(self.api_version));
            o.insert("kind".into(), json!(self.kind));
        }
        object
    }
}

/// The representation a client asked for in `Accept`: whole objects, or metadata only
/// (`as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`, what kube-rs' `metadata_watcher`
/// and client-go's metadata informers send).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Shape {
    #[default]
    Full,
    Metadata,
}

impl Shape {
    /// From the value of an `Accept` header.
    pub fn from_accept(accept: &str) -> Self {
        if accept.split(',').any(|part| part.contains("as=PartialObjectMetadata")) {
            Self::Metadata
        } else {
            Self::Full
        }
    }

    /// One object in this representation.
    pub fn present(self, object: Value) -> Value {
        match self {
            Self::Full => object,
            Self::Metadata => json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
            }),
        }
    }

    /// `kind` and `apiVersion` of a list of `served` objects in this representation.
    pub fn list_type(self, served: &Served) -> (String, String) {
        match self {
            Self::Full => (format!("{}List", served.kind), served.api_version.clone()),
            Self::Metadata => ("PartialObjectMetadataList".into(), "meta.k8s.io/v1".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_header_selects_the_metadata_representation() {
        assert_eq!(Shape::from_accept("application/json"), Shape::Full);
        assert_eq!(
            Shape::from_accept("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"),
            Shape::Metadata
        );
    }

    #[test]
    fn stored_bytes_are_reused_unless_another_type_is_served() {
        let object = StoredObject::new(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}}), 1);
        let same = object.encoded(&Served::new("v1", "Pod"), Shape::Full);
        assert_eq!(same.as_ptr(), object.json().as_ptr());
        let other = object.encoded(&Served::new("v2", "Pod"), Shape::Full);
        assert_eq!(serde_json::from_slice::<Value>(&other).ok().map(|v| v["apiVersion"].clone()), Some(json!("v2")));
        let meta1 = object.encoded(&Served::new("v1", "Pod"), Shape::Metadata);
        let meta2 = object.encoded(&Served::new("v1", "Pod"), Shape::Metadata);
        assert_eq!(meta1.as_ptr(), meta2.as_ptr(), "metadata-only is encoded once per version");
    }
}
