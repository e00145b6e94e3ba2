//! Files a component keeps on its node's disk between runs (the grid wrapper's saved view,
//! edge-health's peer cache). They hold what the component's identity read from the API
//! server, so only the owner may read them (0600, from the moment they exist: the
//! temporary file is created so, not chmod-ed after); they replace the previous file
//! atomically, surviving a power cut; and they are read back with a size bound, so a file
//! grown by whoever else writes to the disk cannot exhaust the component's memory.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

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
