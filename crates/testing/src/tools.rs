//! Tests that need what a machine may lack (kubectl, helm, network namespaces): with it
//! they run; without it, outside CI, they say why on the terminal and return at once;
//! under CI (`CI` non-empty) they fail. Decided when the test runs, so no build script
//! marks anything ignored.
//!
//! kubectl and helm are where `.ci/install-tools` puts them (`.tools/bin`, git-ignored)
//! or where `$KUBECTL` / `$HELM` says.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The workspace root (this crate is `crates/testing`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).expect("crates/testing in the workspace").to_path_buf()
}

/// Where `.ci/install-tools` puts the binaries.
pub fn tools_bin() -> PathBuf {
    workspace_root().join(".tools/bin")
}

/// The environment variable naming a tool explicitly: `KUBECTL`, `HELM`.
fn env_var(tool: &str) -> String {
    tool.to_uppercase()
}

/// `$<TOOL>` if it names a file, else `.tools/bin/<tool>` if that is a file.
pub fn find(tool: &str) -> Option<PathBuf> {
    let from_env = std::env::var_os(env_var(tool)).filter(|v| !v.is_empty()).map(PathBuf::from);
    [from_env, Some(tools_bin().join(tool))].into_iter().flatten().find(|p| p.is_file())
}

/// Whether the `CI` environment variable is set to a non-empty value.
pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// Whether a test may go on, given what this machine lacks for it (`None`: nothing). When
/// something is missing: under CI a panic saying what; otherwise a line on the terminal
/// (written past the test harness's capture, so `cargo test` shows it) and `false`.
pub fn runnable(test: &str, missing: Option<String>) -> bool {
    let Some(missing) = missing else { return true };
    assert!(!in_ci(), "{test}: {missing} (CI is set, so the test fails rather than being skipped)");
    let _ = writeln!(std::io::stderr(), "skipped {test}: {missing} (under CI it fails)");
    false
}

/// The tools' paths, when all are found; see [`runnable`] for when one is not.
pub fn tools<const N: usize>(test: &str, names: [&str; N]) -> Option<[PathBuf; N]> {
    let found = names.map(find);
    let missing: Vec<String> = names
        .iter()
        .zip(&found)
        .filter(|(_, path)| path.is_none())
        .map(|(name, _)| format!("{name} not found at ${} or {}", env_var(name), tools_bin().display()))
        .collect();
    let missing = (!missing.is_empty()).then(|| format!("{}: run .ci/install-tools", missing.join(", ")));
    if !runnable(test, missing) {
        return None;
    }
    Some(found.map(|path| path.expect("checked above")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_need_skips_the_test_outside_ci_and_fails_it_under_ci() {
        assert!(runnable("t", None));
        let skipped = std::panic::catch_unwind(|| runnable("t", Some("no such thing".into())));
        match skipped {
            Err(_) => assert!(in_ci(), "panicked outside CI"),
            Ok(runnable) => assert!(!in_ci() && !runnable, "under CI it must fail; outside, not run"),
        }
        let found = std::panic::catch_unwind(|| tools("t", ["edgegrid-no-such-tool"]));
        assert_eq!(found.is_err(), in_ci());
        if let Ok(found) = found {
            assert_eq!(found, None);
        }
    }

    #[test]
    fn tools_are_looked_for_in_the_workspace_s_tools_bin() {
        assert!(workspace_root().join("Cargo.toml").is_file(), "{}", workspace_root().display());
        assert_eq!(tools_bin(), workspace_root().join(".tools/bin"));
        assert_eq!(find("edgegrid-no-such-tool"), None);
    }
}
