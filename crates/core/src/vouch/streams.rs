//! What the unit signer (the `unit-signer` crate) and a follower (grid-wrapper's
//! `vouched`) hash alike: the streams' names in the signed batches and each object's
//! element. One definition for both sides: a follower whose element differed from the
//! signer's would hold everything its leader sends.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use super::{ElementDigest, element};

/// Services, cluster-wide.
pub const SERVICES: &str = "services";
/// EndpointSlices, cluster-wide.
pub const ENDPOINT_SLICES: &str = "endpointslices";
/// Endpoints, cluster-wide.
pub const ENDPOINTS: &str = "endpoints";
/// Every Node's metadata (what topology reads of the other nodes).
pub const NODE_METADATA: &str = "nodes-metadata";

/// The whole Nodes of the unit whose label has `value` (what a leader serves its
/// followers their own Node from).
pub fn unit_nodes(value: &str) -> String {
    format!("unit-nodes/{value}")
}

/// An object's element in `stream`: its JSON as the typed object serialises it (the same
/// on both sides, which read it into the same types).
pub fn object_element<K: Serialize>(stream: &str, object: &K) -> ElementDigest {
    element(stream, &serde_json::to_value(object).unwrap_or_default())
}

/// A metadata-only object's element: its metadata alone (the envelope's kind differs
/// between the cloud's answer and a leader's).
pub fn metadata_element(stream: &str, metadata: &ObjectMeta) -> ElementDigest {
    element(stream, &serde_json::json!({ "metadata": metadata }))
}
