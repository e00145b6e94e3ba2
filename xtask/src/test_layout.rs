//! `cargo xtask check`'s rule on where unit tests live (docs/development.md, "Tests"):
//! inline `#[cfg(test)] mod tests { ... }` while small, `<module>/tests.rs` declared
//! `#[cfg(test)] mod tests;` in the module once they grow, never a `<name>_tests.rs` file
//! beside the module.
//!
//! Listing the files is the file system's job; which of them break the rule is pure, so the
//! rule itself is unit-tested.

use std::path::Path;

use anyhow::{Context, Result, bail};

/// The files of `paths` (relative to the workspace root, `/`-separated) that hold unit tests
/// in a `<name>_tests.rs` file under a crate's `src` (`crates/<crate>/src/**`) or
/// `xtask/src`, each with where its tests belong (`<name>/tests.rs`, declared
/// `#[cfg(test)] mod tests;` in `<name>.rs`), in the order given.
pub fn misplaced_test_files<'a>(paths: impl IntoIterator<Item = &'a str>) -> Vec<(&'a str, String)> {
    paths
        .into_iter()
        .filter(|path| match path.strip_prefix("crates/") {
            Some(rest) => rest.split_once('/').is_some_and(|(_, inside)| inside.starts_with("src/")),
            None => path.starts_with("xtask/src/"),
        })
        .filter_map(|path| Some((path, format!("{}/tests.rs", path.strip_suffix("_tests.rs")?))))
        .collect()
}

/// Every file under `crates/*/src` and `xtask/src`, relative to `workspace_root` and
/// `/`-separated, sorted.
fn source_files(workspace_root: &Path) -> Result<Vec<String>> {
    let crates = workspace_root.join("crates");
    let mut next = vec!["xtask/src".to_string()];
    for entry in std::fs::read_dir(&crates).with_context(|| format!("reading {}", crates.display()))? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            next.push(format!("crates/{}/src", entry.file_name().to_string_lossy()));
        }
    }
    let mut files = Vec::new();
    while let Some(dir) = next.pop() {
        let absolute = workspace_root.join(&dir);
        if !absolute.is_dir() {
            continue;
        }
        for entry in std::fs::read_dir(&absolute).with_context(|| format!("reading {}", absolute.display()))? {
            let entry = entry?;
            let path = format!("{dir}/{}", entry.file_name().to_string_lossy());
            if entry.file_type()?.is_dir() { next.push(path) } else { files.push(path) }
        }
    }
    files.sort();
    Ok(files)
}

/// Fails naming each `<name>_tests.rs` file under the crates' sources (and xtask's) and
/// where its tests belong; on success, says what was checked.
pub fn check(workspace_root: &Path) -> Result<String> {
    let files = source_files(workspace_root)?;
    let misplaced: Vec<String> = misplaced_test_files(files.iter().map(String::as_str))
        .into_iter()
        .map(|(path, belongs)| format!("{path}: move to {belongs}, declared `#[cfg(test)] mod tests;` in its module"))
        .collect();
    if !misplaced.is_empty() {
        bail!(
            "unit tests in a `<name>_tests.rs` file (the rule: docs/development.md, \"Tests\"):\n  {}",
            misplaced.join("\n  ")
        );
    }
    Ok(format!("no unit tests in a `<name>_tests.rs` file ({} files under crates/*/src and xtask/src)", files.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tests_file_beside_its_module_is_reported_with_where_it_belongs() {
        let paths = [
            "crates/core/src/topology/view_tests.rs",
            "crates/grid-wrapper/src/cache_tests.rs",
            "xtask/src/soak/grids_tests.rs",
        ];
        assert_eq!(
            misplaced_test_files(paths),
            [
                ("crates/core/src/topology/view_tests.rs", "crates/core/src/topology/view/tests.rs".to_string()),
                ("crates/grid-wrapper/src/cache_tests.rs", "crates/grid-wrapper/src/cache/tests.rs".to_string()),
                ("xtask/src/soak/grids_tests.rs", "xtask/src/soak/grids/tests.rs".to_string()),
            ]
        );
    }

    #[test]
    fn the_layout_the_rule_asks_for_and_files_outside_the_sources_pass() {
        let paths = [
            // a module's tests, inline or in its directory
            "crates/core/src/topology/view.rs",
            "crates/core/src/topology/view/tests.rs",
            "crates/listwatch/src/tests.rs",
            "xtask/src/soak/invariants/tests.rs",
            // a name that only ends like one
            "crates/core/src/contests.rs",
            "crates/core/src/topology/tests_helpers.rs",
            // integration tests, benchmarks, the workspace's end-to-end tests: not unit tests
            "crates/edge-health/tests/network_tests.rs",
            "crates/grid-wrapper/benches/cache_tests.rs",
            "tests/tests/soak_tests.rs",
            "tests/src/lib_tests.rs",
            // a `src` that is not a crate's own
            "crates/core/examples/src/demo_tests.rs",
            "crates/src_tests.rs",
        ];
        assert_eq!(misplaced_test_files(paths), Vec::<(&str, String)>::new());
    }
}
