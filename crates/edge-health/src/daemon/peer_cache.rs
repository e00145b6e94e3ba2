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
//!
//! The file records the cluster it was saved for (`controller_support::state_file::ClusterIdentity`:
//! the API server URL and CA bundle of the client configuration, the only identity known
//! while the API server is away). A cache saved for another cluster is not restored: its
//! members are another cluster's nodes, whose addresses this daemon would probe and whose
//! Nodes it would vote on. It is reported once with both identities, counted in
//! `edge_health_peer_cache_refused_total{reason="other_cluster"}`, left in place, and
//! replaced by the first save once the node watch lists. A cache without an identity was
//! written by this node's previous version: restored once, with a warning.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use controller_support::metrics::Register;
use controller_support::state_file::{self, ClusterIdentity, OtherCluster};
use edgegrid_core::keys::{
    EDGE_HEALTH_ADDRESS_ANNOTATION, EDGE_HEALTH_PUBLIC_KEY_ANNOTATION, NODE_UNHEALTH_ANNOTATION,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};

use super::metrics::ReasonLabel;

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

/// The file: the cache and the cluster it was saved for (none: an earlier version's).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Saved {
    #[serde(default)]
    cluster: Option<ClusterIdentity>,
    nodes: Vec<ObjectMeta>,
    #[serde(default)]
    node_unit_config: Option<BTreeMap<String, String>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Saving<'a> {
    cluster: &'a ClusterIdentity,
    nodes: &'a [ObjectMeta],
    #[serde(skip_serializing_if = "Option::is_none")]
    node_unit_config: &'a Option<BTreeMap<String, String>>,
}

#[derive(Debug, thiserror::Error)]
pub enum PeerCacheError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a peer cache: {source}")]
    Parse { path: PathBuf, source: serde_json::Error },
    #[error(transparent)]
    OtherCluster(#[from] OtherCluster),
    #[error("writing {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

impl PeerCacheError {
    /// The `reason` a cache not restored is counted under.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Read { .. } => "unreadable",
            Self::Parse { .. } => "malformed",
            Self::OtherCluster(_) => "other_cluster",
            Self::Write { .. } => "unwritable",
        }
    }
}

/// `edge_health_peer_cache_refused_total{reason}`: peer caches not restored at start.
#[derive(Clone, Debug, Default)]
pub struct PeerCacheMetrics {
    pub refused: Family<ReasonLabel, Counter>,
}

impl Register for PeerCacheMetrics {
    fn register(&self, registry: &mut Registry) {
        for reason in ["other_cluster", "unreadable", "malformed"] {
            let _ = self.refused.get_or_create(&ReasonLabel { reason });
        }
        registry.register(
            "peer_cache_refused",
            "Peer caches not restored at start, by reason: other_cluster (saved for another cluster: its \
             --kubeconfig or in-cluster API server URL and CA bundle differ), unreadable, malformed",
            self.refused.clone(),
        );
    }
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

/// The cache at `path` if it was saved for `cluster` (or records no cluster); `Ok(None)`
/// when there is none yet.
pub fn load(path: &Path, cluster: &ClusterIdentity) -> Result<Option<PeerCache>, PeerCacheError> {
    let bytes = match state_file::read_bounded(path, MAX_PEER_CACHE_BYTES) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(None),
        Err(source) => return Err(PeerCacheError::Read { path: path.to_path_buf(), source }),
    };
    let saved: Saved =
        serde_json::from_slice(&bytes).map_err(|source| PeerCacheError::Parse { path: path.to_path_buf(), source })?;
    cluster.admit(path, saved.cluster.as_ref())?;
    Ok(Some(PeerCache { nodes: saved.nodes, node_unit_config: saved.node_unit_config }))
}

/// Replaces the cache at `path` (atomically, 0600), recording `cluster`.
pub fn store(path: &Path, cluster: &ClusterIdentity, cache: &PeerCache) -> Result<(), PeerCacheError> {
    let write = |source| PeerCacheError::Write { path: path.to_path_buf(), source };
    let saving = Saving { cluster, nodes: &cache.nodes, node_unit_config: &cache.node_unit_config };
    let bytes = serde_json::to_vec(&saving).map_err(|e| write(std::io::Error::other(e)))?;
    state_file::write_private(path, &bytes).map_err(write)
}

/// The cache at `path` to restore the daemon's peers from, when there is one for
/// `cluster`; reports and counts one that is not used (the file stays, for the next save to
/// replace).
pub fn restorable(path: &Path, cluster: &ClusterIdentity, metrics: &PeerCacheMetrics) -> Option<PeerCache> {
    match load(path, cluster) {
        Ok(cache) => cache,
        Err(error) => {
            metrics.refused.get_or_create(&ReasonLabel { reason: error.metric_label() }).inc();
            tracing::warn!(%error, "peer cache ignored");
            None
        }
    }
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

    fn cluster(url: &str) -> ClusterIdentity {
        let mut config = kube::Config::new(url.parse().unwrap());
        config.root_cert = Some(vec![format!("the CA of {url}").into_bytes()]);
        ClusterIdentity::of(&config)
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("edge-health-peer-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn sample_cache() -> PeerCache {
        PeerCache {
            nodes: vec![meta(json!({"name": "edge-1", "labels": {"zone1": "a"}}))],
            node_unit_config: Some(BTreeMap::from([("check-units".to_string(), "u1".to_string())])),
        }
    }

    /// A cache saved for cluster A is not restored by a daemon of cluster B: an error
    /// naming both, counted; the file stays as it was, and B's next save replaces it.
    #[test]
    fn a_cache_saved_for_another_cluster_is_refused_kept_and_replaced_by_the_next_save() {
        let dir = temp_dir("other-cluster");
        let path = dir.join("peers.json");
        let (a, b) = (cluster("https://10.96.0.1:443"), cluster("https://10.96.0.2:443"));
        store(&path, &a, &sample_cache()).unwrap();
        let saved_by_a = std::fs::read(&path).unwrap();
        assert_eq!(load(&path, &a).unwrap(), Some(sample_cache()), "its own cluster's");
        let error = load(&path, &b).unwrap_err();
        assert!(matches!(&error, PeerCacheError::OtherCluster(refused) if refused.saved == a && refused.current == b));
        assert_eq!(error.metric_label(), "other_cluster");
        let message = error.to_string();
        assert!(message.contains("https://10.96.0.1:443/") && message.contains("https://10.96.0.2:443/"), "{message}");
        // restoring counts the refusal and leaves the file alone
        let metrics = PeerCacheMetrics::default();
        assert_eq!(restorable(&path, &b, &metrics), None, "no peer of cluster A taken");
        assert_eq!(metrics.refused.get_or_create(&ReasonLabel { reason: "other_cluster" }).get(), 1);
        assert_eq!(std::fs::read(&path).unwrap(), saved_by_a, "not deleted, not rewritten");
        assert_eq!(restorable(&path, &a, &metrics), Some(sample_cache()), "restored for its own cluster");
        // B's next save replaces it
        store(&path, &b, &PeerCache::default()).unwrap();
        assert_eq!(load(&path, &b).unwrap(), Some(PeerCache::default()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A cache written before identities were recorded is this node's previous version's:
    /// restored once; the next save records the cluster.
    #[test]
    fn a_cache_without_a_cluster_is_restored_and_the_next_save_records_one() {
        let dir = temp_dir("unrecorded");
        let path = dir.join("peers.json");
        std::fs::write(&path, serde_json::to_vec(&sample_cache()).unwrap()).unwrap();
        let a = cluster("https://10.96.0.1:443");
        assert_eq!(load(&path, &a).unwrap(), Some(sample_cache()));
        store(&path, &a, &sample_cache()).unwrap();
        let written: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(written["cluster"], serde_json::to_value(&a).unwrap());
        assert!(load(&path, &cluster("https://10.96.0.2:443")).is_err(), "now bound to its cluster");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_cache_round_trips_through_its_file_and_a_bad_file_is_an_error() {
        let dir = temp_dir("round-trip");
        let path = dir.join("peers.json");
        let a = cluster("https://10.96.0.1:443");
        assert!(matches!(load(&path, &a), Ok(None)), "no file yet");
        let cache = sample_cache();
        store(&path, &a, &cache).unwrap();
        assert_eq!(load(&path, &a).unwrap(), Some(cache.clone()));
        let replaced = PeerCache { nodes: Vec::new(), node_unit_config: None };
        store(&path, &a, &replaced).unwrap();
        assert_eq!(load(&path, &a).unwrap(), Some(replaced));
        assert!(!dir.join("peers.json.tmp").exists(), "the temporary file was renamed");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the peers' addresses and labels are the daemon's only");
        std::fs::write(&path, b"{\"nodes\": 3}").unwrap();
        let error = load(&path, &a).unwrap_err();
        assert!(matches!(error, PeerCacheError::Parse { .. }), "{error}");
        assert!(error.to_string().contains("peers.json is not a peer cache"), "{error}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
