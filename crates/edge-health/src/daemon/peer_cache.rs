//! The Nodes a daemon last knew, kept on the node's own disk (`--peer-cache-file`, a
//! hostPath), so that a daemon restarted while its site is cut off from the API server
//! (a node rebooted during a cloud-link outage, an upgrade rolled out just before one)
//! still knows its unit: it probes and votes from the cached members and addresses until
//! the node watch lists again, which replaces the cache's contents. Without it a restarted
//! daemon knew no peers for the whole outage, which is when it is needed most.
//!
//! Only what membership, probing and writing read is kept: each Node's name,
//! resourceVersion, labels and the two edge-health annotations, plus the
//! `edge-health-config` ConfigMap's data in node-units mode. The file is the owner's only
//! (0600) and replaced atomically (`controller_support::state_file`), so a crash mid-write
//! leaves the previous one; it is read back with a size bound. A file that cannot be read
//! or parsed is reported and ignored: the daemon then starts as it would without one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use controller_support::state_file;
use edgegrid_core::keys::{
    EDGE_HEALTH_ADDRESS_ANNOTATION, EDGE_HEALTH_PUBLIC_KEY_ANNOTATION, NODE_UNHEALTH_ANNOTATION,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// What the file holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PeerCache {
    /// Trimmed Node metadata ([`trimmed`]), by name.
    pub nodes: Vec<ObjectMeta>,
    /// The `edge-health-config` ConfigMap's data (node-units mode; `None`: none exists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_unit_config: Option<BTreeMap<String, String>>,
}

#[derive(Debug, thiserror::Error)]
pub enum PeerCacheError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a peer cache: {source}")]
    Parse { path: PathBuf, source: serde_json::Error },
    #[error("writing {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

/// The part of a Node's metadata the cache keeps.
pub fn trimmed(meta: &ObjectMeta) -> ObjectMeta {
    let annotations: BTreeMap<String, String> = meta
        .annotations
        .iter()
        .flatten()
        .filter(|(key, _)| {
            [EDGE_HEALTH_ADDRESS_ANNOTATION, EDGE_HEALTH_PUBLIC_KEY_ANNOTATION, NODE_UNHEALTH_ANNOTATION]
                .contains(&key.as_str())
        })
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    ObjectMeta {
        name: meta.name.clone(),
        resource_version: meta.resource_version.clone(),
        labels: meta.labels.clone(),
        // "no annotations at all" and "none of ours" patch differently (see the vote)
        annotations: meta.annotations.as_ref().map(|_| annotations),
        ..ObjectMeta::default()
    }
}

/// The largest peer cache read back: trimmed metadata of 5,000 nodes is a few MiB.
pub const MAX_PEER_CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// The cache at `path`; `Ok(None)` when there is none yet.
pub fn load(path: &Path) -> Result<Option<PeerCache>, PeerCacheError> {
    let bytes = match state_file::read_bounded(path, MAX_PEER_CACHE_BYTES) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(None),
        Err(source) => return Err(PeerCacheError::Read { path: path.to_path_buf(), source }),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| PeerCacheError::Parse { path: path.to_path_buf(), source })
}

/// Replaces the cache at `path` (atomically, 0600).
pub fn store(path: &Path, cache: &PeerCache) -> Result<(), PeerCacheError> {
    let write = |source| PeerCacheError::Write { path: path.to_path_buf(), source };
    let bytes = serde_json::to_vec(cache).map_err(|e| write(std::io::Error::other(e)))?;
    state_file::write_private(path, &bytes).map_err(write)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(value: serde_json::Value) -> ObjectMeta {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn only_what_membership_probing_and_writing_read_is_kept() {
        let full = meta(json!({
            "name": "edge-1", "resourceVersion": "42", "uid": "u-1",
            "labels": {"zone1": "a", "kubernetes.io/hostname": "edge-1"},
            "annotations": {EDGE_HEALTH_ADDRESS_ANNOTATION: "10.0.0.1:51005", NODE_UNHEALTH_ANNOTATION: "yes",
                "node.alpha.kubernetes.io/ttl": "0"},
            "managedFields": [{"manager": "kubelet", "operation": "Update"}],
        }));
        assert_eq!(
            trimmed(&full),
            meta(json!({
                "name": "edge-1", "resourceVersion": "42",
                "labels": {"zone1": "a", "kubernetes.io/hostname": "edge-1"},
                "annotations": {EDGE_HEALTH_ADDRESS_ANNOTATION: "10.0.0.1:51005", NODE_UNHEALTH_ANNOTATION: "yes"},
            }))
        );
        // annotations present but none of ours: an empty map, not none
        let other = meta(json!({"name": "edge-2", "annotations": {"a": "b"}}));
        assert_eq!(trimmed(&other).annotations, Some(BTreeMap::new()));
        assert_eq!(trimmed(&meta(json!({"name": "edge-3"}))).annotations, None);
    }

    #[test]
    fn the_cache_round_trips_through_its_file_and_a_bad_file_is_an_error() {
        let dir = std::env::temp_dir().join(format!("edge-health-peer-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("peers.json");
        let _ = std::fs::remove_file(&path);
        assert!(matches!(load(&path), Ok(None)), "no file yet");
        let cache = PeerCache {
            nodes: vec![meta(json!({"name": "edge-1", "labels": {"zone1": "a"}}))],
            node_unit_config: Some(BTreeMap::from([("check-units".to_string(), "u1".to_string())])),
        };
        store(&path, &cache).unwrap();
        assert_eq!(load(&path).unwrap(), Some(cache.clone()));
        let replaced = PeerCache { nodes: Vec::new(), node_unit_config: None };
        store(&path, &replaced).unwrap();
        assert_eq!(load(&path).unwrap(), Some(replaced));
        assert!(!dir.join("peers.json.tmp").exists(), "the temporary file was renamed");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the peers' addresses and labels are the daemon's only");
        std::fs::write(&path, b"{\"nodes\": 3}").unwrap();
        let error = load(&path).unwrap_err();
        assert!(matches!(error, PeerCacheError::Parse { .. }), "{error}");
        assert!(error.to_string().contains("peers.json is not a peer cache"), "{error}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
