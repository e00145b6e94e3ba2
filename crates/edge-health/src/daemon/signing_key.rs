//! This node's own signing key on disk: made on first start, kept across restarts, the
//! owner's only.

use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::Path;

use controller_support::state_file;

use crate::node_key::{SigningKey, SigningKeyError};

/// A PKCS#8 Ed25519 document is 83..85 bytes; anything much larger is not one.
const MAX_KEY_FILE_BYTES: u64 = 4096;

#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("--signing-key-file {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error(
        "--signing-key-file {path} is readable by others (mode {mode:o}): it must be the owner's only (0600); \
         chmod it, or delete it to make a new key"
    )]
    Exposed { path: String, mode: u32 },
    #[error(
        "--signing-key-file {path}: {source}; delete it to make a new key (peers take the new one once it is \
         published on the Node)"
    )]
    Invalid { path: String, source: SigningKeyError },
    #[error(transparent)]
    Generate(SigningKeyError),
}

/// Where the signing key came from, said once logging is set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyOrigin {
    Loaded,
    Generated,
}

impl KeyOrigin {
    /// Says where the key of `path` came from (the key files are read before logging
    /// starts, so that a bad one stops the start before anything listens).
    pub fn log(self, path: &Path, public_key: &str) {
        match self {
            Self::Loaded => tracing::info!(path = %path.display(), %public_key, "signing key loaded"),
            Self::Generated => tracing::info!(path = %path.display(), %public_key,
                "no signing key: generated one (keep this file on the node's disk: a new key after a restart \
                 is a new identity to the peers until it is published)"),
        }
    }
}

/// The key in `path`, or a new one written there (mode 0600, its directory made 0700 if
/// absent) when there is no file. A file that exists but is not the owner's only or not a
/// key stops the start: making a new key silently would hide the problem (and change the
/// node's identity to its peers).
pub fn load_or_generate(path: &Path) -> Result<(SigningKey, KeyOrigin), KeyFileError> {
    let shown = || path.display().to_string();
    let io = |source| KeyFileError::Io { path: shown(), source };
    match state_file::read_bounded(path, MAX_KEY_FILE_BYTES).map_err(io)? {
        Some(document) => {
            let mode = std::fs::metadata(path).map_err(io)?.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(KeyFileError::Exposed { path: shown(), mode });
            }
            let key =
                SigningKey::from_pkcs8(&document).map_err(|source| KeyFileError::Invalid { path: shown(), source })?;
            Ok((key, KeyOrigin::Loaded))
        }
        None => {
            let (key, document) = SigningKey::generate().map_err(KeyFileError::Generate)?;
            // the state directory of a first start (SuperEdge's DaemonSet mounts none)
            if let Some(directory) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
                std::fs::DirBuilder::new().recursive(true).mode(0o700).create(directory).map_err(io)?;
            }
            state_file::write_private(path, &document).map_err(io)?;
            Ok((key, KeyOrigin::Generated))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_generated_once_kept_private_and_reloaded() {
        let dir = tempfile_dir();
        let path = dir.join("signing-key");
        let (first, origin) = load_or_generate(&path).unwrap();
        assert_eq!(origin, KeyOrigin::Generated);
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let (again, origin) = load_or_generate(&path).unwrap();
        assert_eq!(origin, KeyOrigin::Loaded);
        assert_eq!(first.public_key(), again.public_key(), "the same key after a restart");
        std::fs::remove_file(&path).unwrap();
        let (reimaged, _) = load_or_generate(&path).unwrap();
        // a first start without its state directory makes it, the owner's only
        let fresh = dir.join("state").join("signing-key");
        load_or_generate(&fresh).unwrap();
        assert_eq!(std::fs::metadata(dir.join("state")).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777, 0o600);
        assert_ne!(first.public_key(), reimaged.public_key(), "a re-imaged node has a new key");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn an_exposed_or_broken_key_file_stops_the_start() {
        let dir = tempfile_dir();
        let path = dir.join("signing-key");
        load_or_generate(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let exposed = load_or_generate(&path).unwrap_err();
        assert!(matches!(exposed, KeyFileError::Exposed { mode: 0o644, .. }), "{exposed}");
        std::fs::write(&path, b"not a key").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let invalid = load_or_generate(&path).unwrap_err();
        assert!(invalid.to_string().contains("delete it to make a new key"), "{invalid}");
        assert_eq!(std::fs::read(&path).unwrap(), b"not a key", "left for the operator to look at");
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "edge-health-key-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
