//! This node's own signing key on disk: made on first start, kept across restarts, the
//! owner's only.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use controller_support::state_file;

use crate::ballot::{SigningKey, SigningKeyError};

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

/// The key in `path`, or a new one written there (mode 0600) when there is no file. A
/// file that exists but is not the owner's only or not a key stops the start: making a
/// new key silently would hide the problem (and change the node's identity to its peers).
pub fn load_or_generate(path: &Path) -> Result<SigningKey, KeyFileError> {
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
            tracing::info!(path = %path.display(), public_key = %key.public_key().to_annotation(), "signing key loaded");
            Ok(key)
        }
        None => {
            let (key, document) = SigningKey::generate().map_err(KeyFileError::Generate)?;
            state_file::write_private(path, &document).map_err(io)?;
            tracing::info!(path = %path.display(), public_key = %key.public_key().to_annotation(),
                "no signing key: generated one");
            Ok(key)
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
        let first = load_or_generate(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let again = load_or_generate(&path).unwrap();
        assert_eq!(first.public_key(), again.public_key(), "the same key after a restart");
        std::fs::remove_file(&path).unwrap();
        let reimaged = load_or_generate(&path).unwrap();
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
