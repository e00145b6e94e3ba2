//! Vouched sharing: a unit's followers serve only states of the shared objects that the
//! cloud vouched for, so a compromised leader can delay what its unit sees (until the
//! followers give up on it and go to the cloud themselves) but not forge it.
//!
//! Why: with one upstream per unit the leader's wrapper serves every other wrapper of its
//! unit the Services, EndpointSlices, Endpoints and Nodes kube-proxy programs from. Mutual
//! TLS proves the leader is a member; it does not make what it serves true, and an edge
//! node may be compromised: its wrapper could then point the unit's Services at addresses
//! of its choosing, much more than "lie about its own checks".
//!
//! How: a cloud component watching the same objects (the **signer**) keeps, for each
//! stream, the hash of the set of objects ([`SetHash`], updated one event at a time) and
//! publishes, once a second, a batch signed with its key: per stream, the digests of the
//! states the stream went through since the previous batch ([`Batch`]). The leader serves
//! that batch like any other object. A follower hashes the states it receives the same way
//! and passes an event on to its cache only once a state at or after it was vouched for by
//! a batch it verified ([`VouchGate`], [`Voucher`]). A state is its objects' content, not their
//! history: the hash does not depend on order, relists or resourceVersions (the leader's
//! log numbers objects its own way), so follower and signer reach the same digest from
//! different event histories.
//!
//! What the compromised leader can still do: withhold (its followers' held events age,
//! and after their patience they pass it over and watch the cloud themselves), or replay
//! batches that are still fresh ([`Voucher`]: a sequence that only goes forward, an issue
//! time within the allowed skew of the follower's clock, and digests that expire a window
//! after they were received), which serves a state the cloud held a few seconds ago.
//!
//! The streams' names and each object's element in them ([`SERVICES`], [`unit_nodes`],
//! [`object_element`], ...) are defined here once, for the signer and the followers alike.
//!
//! Pure: the wrappers and the signer feed objects, batches and the time.

mod batch;
mod gate;
mod set_hash;
mod streams;

pub use batch::{Batch, BatchError, MAX_STATES_PER_STREAM, SignedBatch, Voucher, VoucherConfig};
pub use gate::{Op, StateRecorder, VouchGate};
pub use set_hash::{ElementDigest, LANES, SetHash, StateDigest, hex, parse_hex, sha256};
pub use streams::{ENDPOINT_SLICES, ENDPOINTS, NODE_METADATA, SERVICES, metadata_element, object_element, unit_nodes};

use std::collections::BTreeMap;

/// The ConfigMap the signer writes its latest batch to (in the system namespace).
pub const BATCH_CONFIG_MAP: &str = "edgegrid-unit-digests";
/// Its data key holding the batch's JSON, exactly as signed.
pub const BATCH_DATA_KEY: &str = "batch";
/// Its data key holding the Ed25519 signature over that JSON, base64.
pub const SIGNATURE_DATA_KEY: &str = "signature";

/// An object's element digest in `stream`: SHA-256 over the stream's name, a zero byte
/// and the object's canonical JSON (keys sorted, no whitespace) without
/// `metadata.resourceVersion` (a leader numbers objects its own way) and
/// `metadata.managedFields` (server bookkeeping nothing downstream reads).
pub fn element(stream: &str, object: &serde_json::Value) -> ElementDigest {
    let mut bytes = Vec::with_capacity(1024);
    bytes.extend_from_slice(stream.as_bytes());
    bytes.push(0);
    write_canonical(&mut bytes, object, true);
    sha256(&bytes)
}

/// `value` as canonical JSON; `top` drops the two metadata fields [`element`] leaves out.
fn write_canonical(out: &mut Vec<u8>, value: &serde_json::Value, top: bool) {
    match value {
        serde_json::Value::Object(map) => {
            let sorted: BTreeMap<&String, &serde_json::Value> = map.iter().collect();
            out.push(b'{');
            let mut first = true;
            for (key, value) in sorted {
                if !first {
                    out.push(b',');
                }
                first = false;
                write_string(out, key);
                out.push(b':');
                if top && key == "metadata" {
                    write_metadata(out, value);
                } else {
                    write_canonical(out, value, false);
                }
            }
            out.push(b'}');
        }
        serde_json::Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(out, item, false);
            }
            out.push(b']');
        }
        serde_json::Value::String(text) => write_string(out, text),
        other => out.extend_from_slice(other.to_string().as_bytes()),
    }
}

fn write_metadata(out: &mut Vec<u8>, metadata: &serde_json::Value) {
    match metadata {
        serde_json::Value::Object(map) => {
            let kept: serde_json::Map<String, serde_json::Value> = map
                .iter()
                .filter(|(key, _)| *key != "resourceVersion" && *key != "managedFields")
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect();
            write_canonical(out, &serde_json::Value::Object(kept), false);
        }
        other => write_canonical(out, other, false),
    }
}

fn write_string(out: &mut Vec<u8>, text: &str) {
    // serde_json's string escaping: one rule on both sides
    out.extend_from_slice(serde_json::Value::String(text.to_string()).to_string().as_bytes());
}

/// A set of keyed objects and its [`SetHash`]: what a stream holds, on the signer's side
/// and on a follower's.
#[derive(Clone, Debug)]
pub struct KeyedSet<K: Ord> {
    hash: SetHash,
    elements: BTreeMap<K, ElementDigest>,
}

impl<K: Ord> Default for KeyedSet<K> {
    fn default() -> Self {
        Self { hash: SetHash::default(), elements: BTreeMap::new() }
    }
}

impl<K: Ord> KeyedSet<K> {
    /// `key` now holds the object with `element` (replacing its previous version).
    pub fn put(&mut self, key: K, element: ElementDigest) {
        if let Some(old) = self.elements.insert(key, element) {
            self.hash.remove(&old);
        }
        self.hash.add(&element);
    }

    /// `key` is gone (nothing changes if it was not there).
    pub fn delete(&mut self, key: &K) {
        if let Some(old) = self.elements.remove(key) {
            self.hash.remove(&old);
        }
    }

    /// Whether `key` is in the set.
    pub fn contains(&self, key: &K) -> bool {
        self.elements.contains_key(key)
    }

    /// The digest of the set as it is.
    pub fn digest(&self) -> StateDigest {
        self.hash.digest()
    }

    pub fn len(&self) -> usize {
        self.elements.len()
    }

    pub fn is_empty(&self) -> bool {
        self.elements.is_empty()
    }
}

#[cfg(test)]
mod tests;
