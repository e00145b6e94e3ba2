//! Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`), as client-go's
//! protobuf serializer and watch decoder read it: objects and lists in the `k8s\0` +
//! `runtime.Unknown` envelope, watches as length-prefixed `WatchEvent` frames.
//!
//! Objects are stored as JSON; [`encode`] writes the protobuf message of a served kind from
//! that JSON by the field tables of [`schema`] (the kinds kube-proxy reads: Services,
//! EndpointSlices, Endpoints, Nodes, and `Status` for errors). A kind without a table is
//! served as JSON only: the real apiserver does the same for custom resources.

pub(crate) mod encode;
pub(crate) mod envelope;
pub(crate) mod schema;
pub(crate) mod wire;

/// The media type of protobuf objects and lists.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// The media type of a protobuf watch stream.
pub const PROTOBUF_WATCH: &str = "application/vnd.kubernetes.protobuf;stream=watch";

use std::collections::BTreeSet;
use std::sync::Mutex;

use bytes::Bytes;
use serde_json::Value;

use crate::served_type::ServedType;

/// The protobuf message of `object` as `served` (no envelope). Members the message has no
/// field for are left out, as client-go leaves out JSON members its types lack; each one
/// is logged once per process, so a newer API server's fields are noticed.
pub(crate) fn message(served: &ServedType, object: &Value) -> Bytes {
    // negotiation offers protobuf only for kinds with a message
    let Some(message) = encode::message_for(&served.api_version, &served.kind) else {
        return Bytes::new();
    };
    let encoded = encode::encode(message, object);
    if !encoded.dropped.is_empty() {
        warn_dropped(served, &encoded.dropped);
    }
    Bytes::from(encoded.bytes.into_boxed_slice())
}

/// The protobuf envelope of a `Status` (watch ERROR events).
pub(crate) fn status(status: &Value) -> Bytes {
    let served = ServedType::new("v1", "Status");
    envelope::object(&served.api_version, &served.kind, &message(&served, status))
}

fn warn_dropped(served: &ServedType, dropped: &[String]) {
    static WARNED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let mut warned = WARNED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    for path in dropped {
        if warned.insert(format!("{}/{} {path}", served.api_version, served.kind)) {
            tracing::warn!(
                api_version = %served.api_version, kind = %served.kind, field = %path,
                "field has no protobuf encoding here: protobuf clients do not get it (JSON clients do)"
            );
        }
    }
}
