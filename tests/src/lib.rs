//! Workspace-level end-to-end tests live in `tests/tests/`; this library holds what they share.

use std::path::{Path, PathBuf};

/// The workspace root, for tests that run the project's commands.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ lives in the workspace root").to_path_buf()
}
