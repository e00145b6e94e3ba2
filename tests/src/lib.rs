//! Workspace-level end-to-end tests live in `tests/tests/`; this library holds what they share.

use std::path::{Path, PathBuf};

/// Finding kubectl/helm; also compiled into this package's and fake-apiserver's build scripts.
pub mod tool_lookup;

mod stop_on_drop;
pub use stop_on_drop::StopOnDrop;

/// The workspace root, for tests that run the project's commands.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ lives in the workspace root").to_path_buf()
}

/// A tool installed by `.ci/install-tools` (or named by `$<NAME in capitals>`), if present.
pub fn tool(name: &str) -> Option<PathBuf> {
    tool_lookup::find(&workspace_root(), name)
}

/// [`tool`], or a panic saying where it looked. Tests needing a tool are also marked
/// `#[cfg_attr(missing_<name>, ignore = "...")]`: `build.rs` sets that cfg when the tool is
/// missing outside CI; under CI (`CI` non-empty) they run and fail here.
pub fn require_tool(name: &str) -> PathBuf {
    tool_lookup::require(&workspace_root(), name)
}
