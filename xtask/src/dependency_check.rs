//! `cargo xtask check`'s rule on what the shipped binaries link: a binary's normal
//! dependency tree (what `cargo build --release -p <binary>` compiles into it; the host's
//! target, as the images are Linux builds too and `--target all` would need every other
//! platform's crates downloaded) holds no test support: no fake API server, no test crate,
//! no property-test or benchmark framework, and no certificate generator unless the binary
//! issues certificates.
//!
//! Reading the trees is `cargo tree`'s job; what is judged here is pure, so the rule itself
//! is unit-tested.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The packages whose binaries the Containerfile builds into images (one binary each, same
/// name, but grid-wrapper's `unit-signer` too: it shares the package's dependencies).
pub const SHIPPED_BINARIES: [&str; 5] =
    ["grid-controller", "grid-wrapper", "edge-health", "edge-health-admission", "edge-node-lifecycle"];

/// Workspace packages with a binary that is never shipped.
const UNSHIPPED_BINARIES: [&str; 2] = ["xtask", "fake-apiserver"];

/// Packages that belong in tests, benchmarks and tools only.
pub const TEST_ONLY: [&str; 5] = ["fake-apiserver", "edgegrid-testing", "proptest", "criterion", "rcgen"];

/// `(binary, package, why)`: a [`TEST_ONLY`] package a binary needs anyway.
const ALLOWED: [(&str, &str, &str); 1] = [(
    "edge-health-admission",
    "rcgen",
    "its self-managed certificate mode issues the webhook's CA and serving certificates",
)];

/// The [`TEST_ONLY`] packages in `tree` (the output of `cargo tree --prefix none --format {p}`
/// for `binary`) that `binary` may not have, each once, in the order first seen.
pub fn forbidden_packages<'a>(binary: &str, tree: &'a str) -> Vec<&'a str> {
    let mut found: Vec<&str> = Vec::new();
    for line in tree.lines() {
        // `name v1.2.3`, `name v1.2.3 (/path)`, `name v1.2.3 (*)` for a repeat
        let Some(name) = line.split_whitespace().next() else { continue };
        let allowed = ALLOWED.iter().any(|&(b, package, _)| b == binary && package == name);
        if TEST_ONLY.contains(&name) && !allowed && !found.contains(&name) {
            found.push(name);
        }
    }
    found
}

/// The packages of `metadata` (`cargo metadata --no-deps --format-version 1`) with a binary
/// target that are neither shipped nor known to be unshipped: binaries this check would
/// otherwise miss.
pub fn unlisted_binaries(metadata: &serde_json::Value) -> Vec<String> {
    let packages = metadata["packages"].as_array().map(Vec::as_slice).unwrap_or_default();
    packages
        .iter()
        .filter(|package| {
            let targets = package["targets"].as_array().map(Vec::as_slice).unwrap_or_default();
            targets.iter().any(|t| t["kind"].as_array().is_some_and(|kinds| kinds.iter().any(|k| k == "bin")))
        })
        .filter_map(|package| package["name"].as_str())
        .filter(|name| !SHIPPED_BINARIES.contains(name) && !UNSHIPPED_BINARIES.contains(name))
        .map(str::to_string)
        .collect()
}

/// Runs `cargo tree` for every shipped binary and fails naming each binary and each
/// package it may not have; on success, says what was checked.
pub fn check(workspace_root: &Path) -> Result<String> {
    let metadata = cargo(workspace_root, &["metadata", "--no-deps", "--format-version", "1", "--locked"])?;
    let metadata: serde_json::Value = serde_json::from_str(&metadata).context("parsing `cargo metadata`")?;
    let mut problems: Vec<String> = unlisted_binaries(&metadata)
        .into_iter()
        .map(|name| {
            format!(
                "package {name} has a binary that is in neither SHIPPED_BINARIES nor UNSHIPPED_BINARIES \
                 (xtask/src/dependency_check.rs)"
            )
        })
        .collect();
    for binary in SHIPPED_BINARIES {
        let args = ["tree", "--locked", "-e", "normal", "-p", binary, "--prefix", "none", "--format", "{p}"];
        let tree = cargo(workspace_root, &args)?;
        for package in forbidden_packages(binary, &tree) {
            problems.push(format!(
                "{binary} links {package} (test support only); see `cargo tree -e normal -p {binary} -i {package}`"
            ));
        }
    }
    if !problems.is_empty() {
        bail!("shipped binaries depend on test-only packages:\n  {}", problems.join("\n  "));
    }
    let allowed: Vec<String> =
        ALLOWED.iter().map(|(binary, package, why)| format!("{package} in {binary}: {why}")).collect();
    Ok(format!(
        "the {} shipped binaries link none of {} (allowed: {})",
        SHIPPED_BINARIES.len(),
        TEST_ONLY.join(", "),
        allowed.join("; ")
    ))
}

/// The stdout of `cargo <args>` run in `workspace_root`, or an error with its stderr.
fn cargo(workspace_root: &Path, args: &[&str]) -> Result<String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(&cargo)
        .args(args)
        .current_dir(workspace_root)
        .output()
        .with_context(|| format!("running cargo {}", args.join(" ")))?;
    if !output.status.success() {
        bail!("cargo {} failed ({}):\n{}", args.join(" "), output.status, String::from_utf8_lossy(&output.stderr));
    }
    String::from_utf8(output.stdout).with_context(|| format!("cargo {} printed non-UTF-8", args.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `cargo tree -e normal --prefix none --format {p}` as it prints a binary with rcgen
    /// reached twice (the second a repeat) and a package whose name only starts like one.
    const TREE_WITH_RCGEN: &str = "grid-wrapper v0.1.0 (/w/crates/grid-wrapper)\n\
        controller-support v0.1.0 (/w/crates/controller-support)\n\
        rcgen v0.14.5\n\
        pem v3.0.5\n\
        rcgen v0.14.5 (*)\n\
        proptest-derive v0.6.0\n\
        tokio v1.47.1\n";

    #[test]
    fn a_test_only_package_in_a_binary_is_named_once() {
        assert_eq!(forbidden_packages("grid-wrapper", TREE_WITH_RCGEN), ["rcgen"]);
    }

    #[test]
    fn rcgen_is_allowed_only_in_the_binary_that_issues_certificates() {
        assert_eq!(forbidden_packages("edge-health-admission", TREE_WITH_RCGEN), Vec::<&str>::new());
        for binary in SHIPPED_BINARIES.into_iter().filter(|b| *b != "edge-health-admission") {
            assert_eq!(forbidden_packages(binary, TREE_WITH_RCGEN), ["rcgen"], "{binary}");
        }
    }

    #[test]
    fn every_test_only_package_is_refused_even_where_rcgen_is_allowed() {
        let tree = "edge-health-admission v0.1.0 (/w/crates/edge-health-admission)\n\
            fake-apiserver v0.1.0 (/w/crates/fake-apiserver)\n\
            edgegrid-testing v0.1.0 (/w/crates/testing)\n\
            proptest v1.7.0\n\
            criterion v0.8.0\n\
            rcgen v0.14.5\n";
        assert_eq!(
            forbidden_packages("edge-health-admission", tree),
            ["fake-apiserver", "edgegrid-testing", "proptest", "criterion"]
        );
        assert_eq!(
            forbidden_packages("edge-node-lifecycle", tree),
            ["fake-apiserver", "edgegrid-testing", "proptest", "criterion", "rcgen"]
        );
    }

    #[test]
    fn a_clean_tree_passes() {
        let tree = "edge-health v0.1.0 (/w/crates/edge-health)\nkube v5.0.0\nrustls v0.23.31\n\n";
        assert_eq!(forbidden_packages("edge-health", tree), Vec::<&str>::new());
    }

    #[test]
    fn a_binary_package_nobody_listed_is_reported() {
        let package = |name: &str, kinds: &[&str]| json!({"name": name, "targets": kinds.iter().map(|k| json!({"kind": [k]})).collect::<Vec<_>>()});
        let metadata = json!({"packages": [
            package("grid-wrapper", &["lib", "bin", "test"]),
            package("xtask", &["bin"]),
            package("edgegrid-testing", &["lib"]),
            package("new-agent", &["lib", "bin"]),
        ]});
        assert_eq!(unlisted_binaries(&metadata), ["new-agent"]);
    }
}
