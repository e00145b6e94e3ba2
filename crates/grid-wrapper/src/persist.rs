//! The served view on disk, so an edge node that reboots while its cloud link is down
//! still gives kube-proxy the rules it had (an empty answer would drop every Service).
//!
//! One JSON file, `served-view.json`, written from the objects' stored bytes (no
//! re-encoding), readable by the owner only and replaced atomically
//! (`controller_support::state_file`), and never larger than a bound: a view over the
//! bound is not written (the previous file stays) nor read back. Only a view synced from
//! the upstream is saved; a restored one never overwrites its own source. Read back only
//! for the same node and the same cluster.
//!
//! The file records the cluster it was saved for (`controller_support::state_file::ClusterIdentity`:
//! the API server URL and CA bundle of the client configuration, the only identity known
//! while the upstream is away; the module comment there says why both). A view saved for
//! another cluster (a node re-joined elsewhere, a disk image copied from another cluster's
//! node) is not served: it would route this node's Services to another cluster's
//! endpoints. It is reported once with both identities, counted in
//! `grid_wrapper_saved_view_refused_total{reason="other_cluster"}`, left in place, and
//! replaced by the first save of a synced view. A file without an identity was written by
//! this node's previous version: served once, with a warning.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use controller_support::state_file::{self, ClusterIdentity, OtherCluster};
use serde::Deserialize;
use serde_json::Value;

use crate::Wrapper;
use crate::cache::{Cache, Kind, ViewSource};
use crate::metrics::ReasonLabel;

pub const FILE_NAME: &str = "served-view.json";

#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("the served view is {size} bytes, over the {limit}-byte bound of --cache-max-bytes; not saved")]
    TooLarge { size: usize, limit: usize },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a saved view: {source}")]
    Malformed { path: PathBuf, source: serde_json::Error },
    #[error("{path} was saved by node {saved_by:?}, not {node:?}")]
    OtherNode { path: PathBuf, saved_by: String, node: String },
    #[error(transparent)]
    OtherCluster(#[from] OtherCluster),
}

impl PersistError {
    /// The `reason` a saved view not restored is counted under.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::TooLarge { .. } => "too_large",
            Self::Io { .. } => "unreadable",
            Self::Malformed { .. } => "malformed",
            Self::OtherNode { .. } => "other_node",
            Self::OtherCluster(_) => "other_cluster",
        }
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PersistError + '_ {
    move |source| PersistError::Io { path: path.to_path_buf(), source }
}

/// The file's contents for the cache's current view, saved for `cluster`, or `None` when
/// there is nothing worth saving (the view is not an upstream one).
pub fn encode(cache: &Cache, cluster: &ClusterIdentity, saved_at: &str) -> Option<Vec<u8>> {
    if cache.serving() != ViewSource::Upstream {
        return None;
    }
    let head = serde_json::json!({"node": cache.local_node(), "cluster": cluster, "savedAt": saved_at,
        "resourceVersion": cache.log().current_rv()});
    let head = head.to_string();
    let mut out = Vec::with_capacity(head.len() + 64);
    out.extend_from_slice(&head.as_bytes()[..head.len() - 1]);
    out.extend_from_slice(b",\"objects\":{");
    for (i, kind) in Kind::ALL.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(format!("\"{}\":[", kind.plural()).as_bytes());
        for (j, (_, object)) in cache.log().objects(kind).enumerate() {
            if j > 0 {
                out.push(b',');
            }
            out.extend_from_slice(object.json());
        }
        out.push(b']');
    }
    out.extend_from_slice(b"}}");
    Some(out)
}

/// Writes `contents` as the saved view in `dir`, atomically.
pub fn write(dir: &Path, contents: &[u8], limit: usize) -> Result<(), PersistError> {
    if contents.len() > limit {
        return Err(PersistError::TooLarge { size: contents.len(), limit });
    }
    fs::create_dir_all(dir).map_err(io(dir))?;
    let target = dir.join(FILE_NAME);
    state_file::write_private(&target, contents).map_err(io(&target))
}

#[derive(Deserialize)]
struct Saved {
    node: String,
    /// None: saved by an earlier version.
    #[serde(default)]
    cluster: Option<ClusterIdentity>,
    #[serde(rename = "savedAt")]
    saved_at: String,
    objects: std::collections::BTreeMap<String, Vec<Value>>,
}

/// A view read back from disk.
#[derive(Debug)]
pub struct Restored {
    pub saved_at: String,
    pub objects: Vec<(Kind, Value)>,
}

/// Reads the saved view in `dir` for `node` of `cluster`, of at most `limit` bytes;
/// `Ok(None)` when there is none.
pub fn read(dir: &Path, node: &str, cluster: &ClusterIdentity, limit: usize) -> Result<Option<Restored>, PersistError> {
    let path = dir.join(FILE_NAME);
    let bytes = match state_file::read_bounded(&path, limit as u64) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(None),
        Err(source) => return Err(PersistError::Io { path, source }),
    };
    let saved: Saved =
        serde_json::from_slice(&bytes).map_err(|source| PersistError::Malformed { path: path.clone(), source })?;
    cluster.admit(&path, saved.cluster.as_ref())?;
    if saved.node != node {
        return Err(PersistError::OtherNode { path, saved_by: saved.node, node: node.into() });
    }
    let mut objects = Vec::new();
    for kind in Kind::ALL {
        for object in saved.objects.get(kind.plural()).into_iter().flatten() {
            objects.push((kind, object.clone()));
        }
    }
    Ok(Some(Restored { saved_at: saved.saved_at, objects }))
}

/// Saves the served view periodically when it changed.
pub struct Saver {
    pub dir: Option<PathBuf>,
    pub limit: usize,
    pub period: Duration,
    /// The cluster the upstream belongs to: recorded in the file, required of a file read.
    pub cluster: ClusterIdentity,
}

impl Saver {
    /// Restores the saved view (of at most the bound), if any; returns the readiness note
    /// that says so.
    pub fn restore(&self, wrapper: &Wrapper) -> Option<String> {
        let dir = self.dir.as_deref()?;
        match read(dir, wrapper.local_node(), &self.cluster, self.limit) {
            Ok(Some(saved)) => {
                let count = wrapper.restore(saved.objects);
                tracing::info!(objects = count, saved_at = %saved.saved_at, dir = %dir.display(),
                    "serving the saved view until the upstream has synced");
                Some(format!(
                    "serving the view saved at {} ({count} objects) from {}; the upstream API server has not synced",
                    saved.saved_at,
                    dir.display()
                ))
            }
            Ok(None) => None,
            Err(error) => {
                wrapper.metrics().saved_view_refused.get_or_create(&ReasonLabel { reason: error.metric_label() }).inc();
                tracing::warn!(%error, "saved view not used");
                None
            }
        }
    }

    pub async fn run(&self, wrapper: &Wrapper) {
        if self.dir.is_none() {
            return std::future::pending().await;
        }
        let mut saved_rv = 0;
        let mut ticker = tokio::time::interval(self.period);
        loop {
            ticker.tick().await;
            let rv = wrapper.lock().log().current_rv();
            if rv != saved_rv && self.save(wrapper) {
                saved_rv = rv;
            }
        }
    }

    pub fn save(&self, wrapper: &Wrapper) -> bool {
        let Some(dir) = &self.dir else { return false };
        let saved_at = jiff::Timestamp::now().to_string();
        let Some(contents) = encode(&wrapper.lock(), &self.cluster, &saved_at) else { return false };
        match write(dir, &contents, self.limit) {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(%error, "served view not saved");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{Input, Object};
    use edgegrid_testing::objects::*;
    use listwatch::LogConfig;
    use unit_link::stream::Stream;

    const LOG: LogConfig = LogConfig { history_limit: 100, watch_buffer: 100 };

    fn synced() -> Cache {
        let mut cache = Cache::new("n1", false, LOG, 0);
        let objects = [
            Object::LocalNode(node_object("n1", &[("unit", "a")])),
            Object::remote_node("n2", &[("unit", "b")]),
            service_object("web", Some(r#"["unit"]"#)).into(),
            slice_object("web-1", "web", &[("10.0.0.1", "n1"), ("10.0.0.2", "n2")]).into(),
        ];
        for input in Stream::ALL
            .map(Input::Begin)
            .into_iter()
            .chain(objects.map(Input::Upsert))
            .chain(Stream::ALL.map(Input::Done))
        {
            cache.apply(input).expect("valid");
        }
        cache
    }

    /// Cluster `name`: its own in-cluster URL and CA.
    fn cluster(name: &str) -> ClusterIdentity {
        let mut config = kube::Config::new(format!("https://{name}.example:6443").parse().expect("url"));
        config.root_cert = Some(vec![format!("the CA of {name}").into_bytes()]);
        ClusterIdentity::of(&config)
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("grid-wrapper-persist-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_saved_view_reads_back_as_the_same_served_objects() {
        let dir = temp_dir("roundtrip");
        let cache = synced();
        let contents = encode(&cache, &cluster("a"), "2026-11-22T00:00:00Z").expect("an upstream view");
        write(&dir, &contents, 1 << 20).expect("written");
        let restored = read(&dir, "n1", &cluster("a"), 1 << 20).expect("readable").expect("present");
        assert_eq!(restored.saved_at, "2026-11-22T00:00:00Z");
        let want: Vec<(Kind, Value)> = cache.served_objects().map(|(k, o)| (k, o.value())).collect();
        let mut got = restored.objects;
        got.sort_by(|a, b| (a.0, a.1["metadata"]["name"].to_string()).cmp(&(b.0, b.1["metadata"]["name"].to_string())));
        assert_eq!(got, want);
        let mut fresh = Cache::new("n1", false, LOG, 0);
        assert_eq!(fresh.restore(got), 3);
        assert_eq!(
            ips(&fresh.log().get(&Kind::EndpointSlices, &("ns".into(), "web-1".into())).expect("slice").value()),
            vec!["10.0.0.1"]
        );
        assert!(!dir.join(format!("{FILE_NAME}.tmp")).exists(), "no temporary file left");
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(dir.join(FILE_NAME)).expect("saved").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "what the wrapper's identity read is the owner's only");
        fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn bounds_other_nodes_missing_and_malformed_files_are_errors_not_views() {
        let dir = temp_dir("errors");
        let cache = synced();
        let a = cluster("a");
        let contents = encode(&cache, &a, "t").expect("an upstream view");
        assert!(matches!(write(&dir, &contents, 10), Err(PersistError::TooLarge { limit: 10, .. })));
        assert!(read(&dir, "n1", &a, 1 << 20).expect("no file is not an error").is_none());
        write(&dir, &contents, 1 << 20).expect("written");
        assert!(matches!(read(&dir, "n2", &a, 1 << 20), Err(PersistError::OtherNode { .. })));
        // a file grown past the bound (by whoever else writes there) is not read whole
        let over = read(&dir, "n1", &a, contents.len() - 1);
        assert!(
            matches!(&over, Err(PersistError::Io { source, .. }) if source.kind() == std::io::ErrorKind::InvalidData),
            "{over:?}"
        );
        fs::write(dir.join(FILE_NAME), b"{\"node\":").expect("truncated file");
        assert!(matches!(read(&dir, "n1", &a, 1 << 20), Err(PersistError::Malformed { .. })));
        assert!(encode(&Cache::new("n1", false, LOG, 0), &a, "t").is_none(), "an unsynced view is never saved");
        fs::remove_dir_all(&dir).ok();
    }

    /// A view saved for cluster A is not read back for cluster B: an error naming both
    /// clusters, the file left as it was.
    #[test]
    fn a_view_saved_for_another_cluster_is_an_error_and_stays() {
        let dir = temp_dir("other-cluster");
        let (a, b) = (cluster("a"), cluster("b"));
        let contents = encode(&synced(), &a, "t").expect("an upstream view");
        write(&dir, &contents, 1 << 20).expect("written");
        let saved: Value = serde_json::from_slice(&contents).expect("json");
        assert_eq!(saved["cluster"], serde_json::to_value(&a).expect("json"), "the file records its cluster");
        assert!(read(&dir, "n1", &a, 1 << 20).expect("its own cluster's").is_some());
        let refused = read(&dir, "n1", &b, 1 << 20).expect_err("another cluster's");
        assert!(matches!(&refused, PersistError::OtherCluster(o) if o.saved == a && o.current == b), "{refused}");
        assert_eq!(refused.metric_label(), "other_cluster");
        let message = refused.to_string();
        assert!(
            message.contains("https://a.example:6443/") && message.contains("https://b.example:6443/"),
            "{message}"
        );
        assert_eq!(fs::read(dir.join(FILE_NAME)).expect("still there"), contents, "not deleted");
        fs::remove_dir_all(&dir).ok();
    }

    /// A file saved before identities were recorded (no `cluster`) is this node's
    /// previous version's: read back.
    #[test]
    fn a_view_saved_without_a_cluster_is_read_back() {
        let dir = temp_dir("unrecorded");
        let mut saved: Value =
            serde_json::from_slice(&encode(&synced(), &cluster("a"), "t").expect("a view")).expect("json");
        saved.as_object_mut().expect("an object").remove("cluster");
        write(&dir, &serde_json::to_vec(&saved).expect("json"), 1 << 20).expect("written");
        let restored = read(&dir, "n1", &cluster("b"), 1 << 20).expect("readable").expect("present");
        assert_eq!(restored.objects.len(), synced().served_objects().count());
        fs::remove_dir_all(&dir).ok();
    }
}
