//! The type an object is served as, on its own below the stored objects, the protobuf
//! encoding and the negotiated representation: all three name it, so none imports another for it.

use serde_json::{Value, json};

/// The type an object is served as: several API versions may share one storage, so the
/// stored bytes carry the version that wrote them and are re-typed when another is asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServedType {
    /// `v1`, `apps/v1`
    pub api_version: String,
    pub kind: String,
}

impl ServedType {
    pub fn new(api_version: impl Into<String>, kind: impl Into<String>) -> Self {
        Self { api_version: api_version.into(), kind: kind.into() }
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
