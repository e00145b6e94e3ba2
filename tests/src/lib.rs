//! Workspace-level end-to-end tests live in `tests/tests/`; this library holds what they share.

use std::path::{Path, PathBuf};

/// The workspace root, for tests that run the project's commands.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ lives in the workspace root").to_path_buf()
}

/// A tool installed by `.ci/install-tools` (or named by `$<NAME in capitals>`), if present.
pub fn tool(name: &str) -> Option<PathBuf> {
    let from_env = std::env::var_os(name.to_uppercase()).map(PathBuf::from);
    [from_env, Some(workspace_root().join(".tools/bin").join(name))].into_iter().flatten().find(|p| p.is_file())
}
