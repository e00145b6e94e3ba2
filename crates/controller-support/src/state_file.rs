//! Files a component keeps on its node's disk between runs (the grid wrapper's saved view,
//! edge-health's peer cache). They hold what the component's identity read from the API
//! server, so only the owner may read them (0600, from the moment they exist: the
//! temporary file is created so, not chmod-ed after); they replace the previous file
//! atomically, surviving a power cut; and they are read back with a size bound, so a file
//! grown by whoever else writes to the disk cannot exhaust the component's memory.
//!
//! Each file records the [`ClusterIdentity`] it was saved under, and one from another
//! cluster is not used ([`ClusterIdentity::admit`]): a node re-joined to another cluster,
//! or a disk image copied from another cluster's node, would otherwise serve that
//! cluster's endpoints or probe its peers while the API server is away, which is exactly
//! when these files are read. The identity must be known offline, so it is what the
//! client configuration holds: the API server URL, and the SHA-256 of each certificate of
//! the CA bundle it trusts. The URL alone would not do: every in-cluster client names its
//! cluster's `kubernetes` Service (`https://10.96.0.1:443` in most clusters), and every
//! cluster has a CA of its own. A file matches when the URL is the same and the bundles
//! share a certificate (or neither has one: plain HTTP, the system roots), so a CA
//! rotation, whose bundles overlap (old, old+new, new), keeps the file; a changed URL
//! (an operator's new kubeconfig) costs the file once, until the next save. A file
//! written before identities were recorded has none: it was written by this node's
//! previous version, which had no other cluster to take it from, so it is used once, with
//! a warning, and the next save records the identity.
//!
//! Nothing here is a defence against whoever can write the file (root on the node can
//! write any identity): it keeps a cluster's state from being taken for another's.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Owner read and write, nobody else.
pub const PRIVATE_MODE: u32 = 0o600;

/// Replaces `path` with `contents`: written to a sibling temporary file created 0600,
/// synced, renamed over `path`, and the directory synced.
pub fn write_private(path: &Path, contents: &[u8]) -> io::Result<()> {
    let temporary = sibling(path, ".tmp");
    // a temporary file left by a crash may carry other permissions: start afresh
    match fs::remove_file(&temporary) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    let mut file = OpenOptions::new().write(true).create_new(true).mode(PRIVATE_MODE).open(&temporary)?;
    file.write_all(contents)?;
    file.sync_all()?;
    fs::rename(&temporary, path)?;
    // the rename itself must survive a power cut
    let directory = path.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(Path::new("."));
    File::open(directory)?.sync_all()
}

/// The contents of `path`, `None` when there is no such file; an `InvalidData` error when
/// it holds more than `limit` bytes (nothing beyond the bound is read).
pub fn read_bounded(path: &Path, limit: u64) -> io::Result<Option<Vec<u8>>> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    let mut contents = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut contents)?;
    if contents.len() as u64 > limit {
        let message = format!("{} is larger than the {limit}-byte bound", path.display());
        return Err(io::Error::new(io::ErrorKind::InvalidData, message));
    }
    Ok(Some(contents))
}

/// The cluster a saved file came from, as the client configuration knows it offline (see
/// the module comment).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterIdentity {
    /// The API server URL (`kube::Config::cluster_url`).
    pub server: String,
    /// The SHA-256 of each certificate (DER) of the trusted CA bundle
    /// (`kube::Config::root_cert`), lowercase hex, sorted; empty without a bundle.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub certificate_authorities: Vec<String>,
}

/// A saved file from another cluster: not used.
#[derive(Debug, thiserror::Error)]
#[error(
    "{path} was saved for another cluster ({saved}), not this one ({current}): ignored until the next save replaces it"
)]
pub struct OtherCluster {
    pub path: PathBuf,
    pub saved: ClusterIdentity,
    pub current: ClusterIdentity,
}

impl ClusterIdentity {
    /// The identity of the cluster `config` talks to.
    pub fn of(config: &kube::Config) -> Self {
        let mut certificate_authorities: Vec<String> = (config.root_cert.iter().flatten())
            .map(|der| hex(ring::digest::digest(&ring::digest::SHA256, der).as_ref()))
            .collect();
        certificate_authorities.sort();
        certificate_authorities.dedup();
        Self { server: config.cluster_url.to_string(), certificate_authorities }
    }

    /// Whether a file saved under `saved` is this cluster's: the same URL, and a CA
    /// certificate in common (or no bundle on either side).
    pub fn is_same_cluster(&self, saved: &ClusterIdentity) -> bool {
        let (ours, theirs) = (&self.certificate_authorities, &saved.certificate_authorities);
        let same_bundle = match (ours.is_empty(), theirs.is_empty()) {
            (true, true) => true,
            (false, false) => ours.iter().any(|ca| theirs.contains(ca)),
            _ => false,
        };
        self.server == saved.server && same_bundle
    }

    /// Whether the file at `path`, saved under `saved`, may be used by this cluster: an
    /// error for another cluster's; a file without an identity (an earlier version's) is
    /// used, with a warning.
    pub fn admit(&self, path: &Path, saved: Option<&ClusterIdentity>) -> Result<(), OtherCluster> {
        match saved {
            Some(saved) if self.is_same_cluster(saved) => Ok(()),
            Some(saved) => Err(OtherCluster { path: path.to_path_buf(), saved: saved.clone(), current: self.clone() }),
            None => {
                tracing::warn!(path = %path.display(), cluster = %self,
                    "the file records no cluster (an earlier version wrote it): used, as this cluster's; the next save records it");
                Ok(())
            }
        }
    }
}

impl fmt::Display for ClusterIdentity {
    /// `https://10.96.0.1:443/ (CA sha256:1f2e3d4c5b6a7988)`: the first 16 hex digits of
    /// each certificate's fingerprint.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.server)?;
        let fingerprints: Vec<&str> = self.certificate_authorities.iter().map(|ca| &ca[..ca.len().min(16)]).collect();
        match fingerprints.is_empty() {
            true => write!(f, " (no CA bundle)"),
            false => write!(f, " (CA sha256:{})", fingerprints.join(", sha256:")),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("state-file-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn files_are_the_owners_only_and_replace_what_was_there() {
        let dir = dir("private");
        let path = dir.join("view.json");
        // a file left world-readable (an older version, an operator's copy) and a stale
        // temporary file: both end up replaced by a 0600 file
        fs::write(&path, b"old").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        fs::write(sibling(&path, ".tmp"), b"half").unwrap();
        fs::set_permissions(sibling(&path, ".tmp"), fs::Permissions::from_mode(0o666)).unwrap();
        write_private(&path, b"new").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        assert_eq!(mode(&path), 0o600);
        assert!(!sibling(&path, ".tmp").exists());
        let _ = fs::remove_dir_all(&dir);
    }

    fn config(url: &str, cas: &[&[u8]]) -> kube::Config {
        let mut config = kube::Config::new(url.parse().expect("url"));
        config.root_cert = (!cas.is_empty()).then(|| cas.iter().map(|ca| ca.to_vec()).collect());
        config
    }

    #[test]
    fn a_cluster_is_its_url_and_a_ca_in_common() {
        let a = ClusterIdentity::of(&config("https://10.96.0.1:443", &[b"ca of a"]));
        assert_eq!(a.server, "https://10.96.0.1:443/");
        assert_eq!(
            a.certificate_authorities,
            vec![hex(ring::digest::digest(&ring::digest::SHA256, b"ca of a").as_ref())]
        );
        assert!(a.is_same_cluster(&a.clone()));
        // another cluster at the same in-cluster address: told apart by its CA
        let b = ClusterIdentity::of(&config("https://10.96.0.1:443", &[b"ca of b"]));
        assert!(!a.is_same_cluster(&b) && !b.is_same_cluster(&a));
        // a CA rotation: each step shares a certificate with the one before
        let rotating = ClusterIdentity::of(&config("https://10.96.0.1:443", &[b"ca of a 2", b"ca of a"]));
        let rotated = ClusterIdentity::of(&config("https://10.96.0.1:443", &[b"ca of a 2"]));
        assert!(rotating.is_same_cluster(&a) && rotated.is_same_cluster(&rotating));
        assert!(!rotated.is_same_cluster(&a), "nothing in common");
        // the same CA at another address, a bundle on one side only: not the same
        assert!(!a.is_same_cluster(&ClusterIdentity::of(&config("https://10.96.0.2:443", &[b"ca of a"]))));
        let plain = ClusterIdentity::of(&config("http://127.0.0.1:8080", &[]));
        assert!(plain.certificate_authorities.is_empty());
        assert!(plain.is_same_cluster(&ClusterIdentity::of(&config("http://127.0.0.1:8080", &[]))));
        assert!(!plain.is_same_cluster(&ClusterIdentity::of(&config("http://127.0.0.1:8081", &[]))));
        let bare = ClusterIdentity { certificate_authorities: Vec::new(), ..a.clone() };
        assert!(!a.is_same_cluster(&bare) && !bare.is_same_cluster(&a));
    }

    #[test]
    fn another_clusters_file_is_refused_naming_both_an_unrecorded_one_is_used() {
        let a = ClusterIdentity::of(&config("https://10.96.0.1:443", &[b"ca of a"]));
        let b = ClusterIdentity::of(&config("https://10.96.0.1:443", &[b"ca of b"]));
        let path = Path::new("/var/lib/x/view.json");
        assert!(a.admit(path, Some(&a)).is_ok());
        assert!(a.admit(path, None).is_ok(), "written before identities were recorded");
        let refused = a.admit(path, Some(&b)).unwrap_err();
        assert_eq!((refused.saved.clone(), refused.current.clone()), (b.clone(), a.clone()));
        let message = refused.to_string();
        assert!(
            message
                .starts_with("/var/lib/x/view.json was saved for another cluster (https://10.96.0.1:443/ (CA sha256:"),
            "{message}"
        );
        assert!(
            message.contains(&b.certificate_authorities[0][..16])
                && message.contains(&a.certificate_authorities[0][..16]),
            "{message}"
        );
        // written and read back as recorded
        let json = serde_json::to_value(&a).expect("json");
        assert_eq!(
            json,
            serde_json::json!({"server": "https://10.96.0.1:443/", "certificateAuthorities": [a.certificate_authorities[0]]})
        );
        assert_eq!(serde_json::from_value::<ClusterIdentity>(json).expect("parses"), a);
    }

    #[test]
    fn reads_are_bounded() {
        let dir = dir("bounded");
        let path = dir.join("cache.json");
        assert_eq!(read_bounded(&path, 10).unwrap(), None, "no file yet");
        write_private(&path, b"0123456789").unwrap();
        assert_eq!(read_bounded(&path, 10).unwrap().as_deref(), Some(&b"0123456789"[..]));
        let error = read_bounded(&path, 9).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert!(error.to_string().ends_with("cache.json is larger than the 9-byte bound"), "{error}");
        let _ = fs::remove_dir_all(&dir);
    }
}
