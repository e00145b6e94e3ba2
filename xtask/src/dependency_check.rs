//! `cargo xtask check`'s rules on how the packages depend on each other:
//! - what the shipped binaries link: a binary's normal dependency tree (what `cargo build
//!   --release -p <binary>` compiles into it; the host's target, as the images are Linux
//!   builds too and `--target all` would need every other platform's crates downloaded)
//!   holds no test support: no fake API server, no test crate, no property-test or
//!   benchmark framework, and no certificate generator unless the binary issues
//!   certificates; and an edge binary links no cloud-only package;
//! - the direction between layers: the domain core and the list/watch library depend on no
//!   runtime package, and the runtime on no other workspace package; a library split out of
//!   an edge binary (the unit link) depends on no binary's package, no cloud-only package
//!   and no test support;
//! - no package has a build script (a test that needs what a machine may lack decides
//!   when it runs: `edgegrid_testing::tools`).
//!
//! Reading the trees is `cargo tree`'s job; what is judged here is pure, so the rule itself
//! is unit-tested.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The packages whose binaries the Containerfile builds into images (one binary each, of
/// the package's name).
pub const SHIPPED_BINARIES: [&str; 6] =
    ["grid-controller", "grid-wrapper", "unit-signer", "edge-health", "edge-health-admission", "edge-node-lifecycle"];

/// The shipped binaries that run on every edge node, and the packages only the cloud
/// runs, which an edge binary must not link (what an edge box's root could read or run).
pub const EDGE_BINARIES: [&str; 2] = ["grid-wrapper", "edge-health"];
pub const CLOUD_ONLY: [&str; 5] =
    ["grid-controller", "edge-health-admission", "edge-node-lifecycle", "node-lifecycle", "unit-signer"];

/// Shipped libraries of the edge binaries (a job split out of a binary's crate, linked into
/// it): the binary depends on them, never the other way round, and what an edge binary may
/// not link they may not depend on either.
pub const EDGE_LIBRARIES: [&str; 1] = ["unit-link"];

/// The lowest layers (pure domain, list/watch serving), and the runtime every binary runs
/// in: a lower layer depends on no runtime package, the runtime on no workspace package.
const FOUNDATION: [&str; 2] = ["edgegrid-core", "listwatch"];
const RUNTIME: [&str; 1] = ["controller-support"];

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

/// The [`CLOUD_ONLY`] packages in `tree` (as for [`forbidden_packages`]) when `binary` is
/// an edge binary, each once.
pub fn cloud_packages<'a>(binary: &str, tree: &'a str) -> Vec<&'a str> {
    if !EDGE_BINARIES.contains(&binary) {
        return Vec::new();
    }
    tree_packages(tree).filter(|name| CLOUD_ONLY.contains(name)).collect()
}

/// The packages of `cargo tree --prefix none --format {p}` output (`name v1.2.3`,
/// `name v1.2.3 (/path)`, `name v1.2.3 (*)` for a repeat), each once, in the order first seen.
fn tree_packages(tree: &str) -> impl Iterator<Item = &str> {
    let mut seen = BTreeSet::new();
    tree.lines().filter_map(|line| line.split_whitespace().next()).filter(move |name| seen.insert(*name))
}

/// The names of the packages of `metadata` with a target of `kind` (`bin`, `custom-build`).
fn packages_with_target<'a>(metadata: &'a serde_json::Value, kind: &'a str) -> impl Iterator<Item = &'a str> {
    let packages = metadata["packages"].as_array().map(Vec::as_slice).unwrap_or_default();
    packages
        .iter()
        .filter(move |package| {
            let targets = package["targets"].as_array().map(Vec::as_slice).unwrap_or_default();
            targets.iter().any(|t| t["kind"].as_array().is_some_and(|kinds| kinds.iter().any(|k| k == kind)))
        })
        .filter_map(|package| package["name"].as_str())
}

/// Each workspace package's workspace dependencies (normal ones, direct and indirect),
/// from `cargo metadata --no-deps`.
fn workspace_dependencies(metadata: &serde_json::Value) -> BTreeMap<String, BTreeSet<String>> {
    let packages = metadata["packages"].as_array().map(Vec::as_slice).unwrap_or_default();
    let names: BTreeSet<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    let direct: BTreeMap<String, BTreeSet<String>> = packages
        .iter()
        .filter_map(|package| {
            let dependencies = package["dependencies"].as_array().map(Vec::as_slice).unwrap_or_default();
            let normal = dependencies
                .iter()
                .filter(|d| d["kind"].is_null())
                .filter_map(|d| d["name"].as_str())
                .filter(|name| names.contains(name))
                .map(str::to_string)
                .collect();
            Some((package["name"].as_str()?.to_string(), normal))
        })
        .collect();
    direct
        .keys()
        .map(|package| {
            let mut reached = BTreeSet::new();
            let mut next: Vec<&String> = direct[package].iter().collect();
            while let Some(dependency) = next.pop() {
                if reached.insert(dependency.clone()) {
                    next.extend(direct.get(dependency).into_iter().flatten());
                }
            }
            (package.clone(), reached)
        })
        .collect()
}

/// Where a package depends against the layers' direction (see the module documentation).
pub fn direction_problems(metadata: &serde_json::Value) -> Vec<String> {
    let mut problems = Vec::new();
    for (package, dependencies) in workspace_dependencies(metadata) {
        for dependency in &dependencies {
            if FOUNDATION.contains(&package.as_str()) && RUNTIME.contains(&dependency.as_str()) {
                problems.push(format!("{package} depends on the runtime package {dependency}"));
            }
            if RUNTIME.contains(&package.as_str()) {
                problems.push(format!("the runtime package {package} depends on the workspace package {dependency}"));
            }
            if EDGE_LIBRARIES.contains(&package.as_str()) {
                if SHIPPED_BINARIES.contains(&dependency.as_str()) {
                    problems.push(format!("the edge library {package} depends on the binary package {dependency}"));
                }
                if CLOUD_ONLY.contains(&dependency.as_str()) {
                    problems.push(format!("the edge library {package} depends on the cloud-only {dependency}"));
                }
                if TEST_ONLY.contains(&dependency.as_str()) {
                    problems.push(format!("the edge library {package} depends on the test support {dependency}"));
                }
            }
        }
    }
    problems
}

/// The packages of `metadata` with a build script.
pub fn build_scripts(metadata: &serde_json::Value) -> Vec<String> {
    packages_with_target(metadata, "custom-build").map(str::to_string).collect()
}

/// The [`TEST_ONLY`] packages in `tree` (the output of `cargo tree --prefix none --format {p}`
/// for `binary`) that `binary` may not have, each once, in the order first seen.
pub fn forbidden_packages<'a>(binary: &str, tree: &'a str) -> Vec<&'a str> {
    let allowed = |name: &str| ALLOWED.iter().any(|&(b, package, _)| b == binary && package == name);
    tree_packages(tree).filter(|name| TEST_ONLY.contains(name) && !allowed(name)).collect()
}

/// The packages of `metadata` (`cargo metadata --no-deps --format-version 1`) with a binary
/// target that are neither shipped nor known to be unshipped: binaries this check would
/// otherwise miss.
pub fn unlisted_binaries(metadata: &serde_json::Value) -> Vec<String> {
    packages_with_target(metadata, "bin")
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
    problems.extend(direction_problems(&metadata));
    problems.extend(
        build_scripts(&metadata)
            .into_iter()
            .map(|name| format!("package {name} has a build script (a test decides at run time whether it can run)")),
    );
    for binary in SHIPPED_BINARIES {
        let args = ["tree", "--locked", "-e", "normal", "-p", binary, "--prefix", "none", "--format", "{p}"];
        let tree = cargo(workspace_root, &args)?;
        for package in forbidden_packages(binary, &tree) {
            problems.push(format!(
                "{binary} links {package} (test support only); see `cargo tree -e normal -p {binary} -i {package}`"
            ));
        }
        for package in cloud_packages(binary, &tree) {
            problems.push(format!(
                "the edge binary {binary} links the cloud-only {package}; see `cargo tree -e normal -p {binary} -i {package}`"
            ));
        }
    }
    if !problems.is_empty() {
        bail!(
            "the packages' dependencies break the rules of xtask/src/dependency_check.rs:\n  {}",
            problems.join("\n  ")
        );
    }
    let allowed: Vec<String> =
        ALLOWED.iter().map(|(binary, package, why)| format!("{package} in {binary}: {why}")).collect();
    Ok(format!(
        "the {} shipped binaries link none of {} (allowed: {}); the edge binaries ({}) none of {}; the edge \
         libraries ({}) depend on no binary's package, no cloud-only package and no test support; {} and {} \
         depend on no runtime package, which depends on no workspace package; no package has a build script",
        SHIPPED_BINARIES.len(),
        TEST_ONLY.join(", "),
        allowed.join("; "),
        EDGE_BINARIES.join(", "),
        CLOUD_ONLY.join(", "),
        EDGE_LIBRARIES.join(", "),
        FOUNDATION[0],
        FOUNDATION[1],
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

    /// A package: its name, normal and dev workspace dependencies, target kinds.
    type Package<'a> = (&'a str, &'a [&'a str], &'a [&'a str], &'a [&'a str]);

    /// `cargo metadata --no-deps` of these packages.
    fn metadata(packages: &[Package<'_>]) -> serde_json::Value {
        let packages: Vec<serde_json::Value> = packages
            .iter()
            .map(|(name, normal, dev, kinds)| {
                let dependencies: Vec<serde_json::Value> = normal
                    .iter()
                    .map(|d| json!({"name": d, "kind": null}))
                    .chain(dev.iter().map(|d| json!({"name": d, "kind": "dev"})))
                    .chain([json!({"name": "tokio", "kind": null})])
                    .collect();
                let targets: Vec<serde_json::Value> = kinds.iter().map(|k| json!({"kind": [k]})).collect();
                json!({"name": name, "dependencies": dependencies, "targets": targets})
            })
            .collect();
        json!({ "packages": packages })
    }

    #[test]
    fn layers_depend_downwards_only_directly_or_through_another_package() {
        let good = metadata(&[
            ("edgegrid-core", &[], &["edgegrid-testing"], &["lib"]),
            ("listwatch", &[], &["controller-support"], &["lib"]),
            ("controller-support", &[], &["edgegrid-core"], &["lib"]),
            ("edge-health", &["controller-support", "edgegrid-core"], &[], &["lib", "bin"]),
        ]);
        assert_eq!(direction_problems(&good), Vec::<String>::new(), "dev-dependencies do not count");
        let bad = metadata(&[
            ("edgegrid-core", &["helper"], &[], &["lib"]),
            ("helper", &["controller-support"], &[], &["lib"]),
            ("listwatch", &["controller-support"], &[], &["lib"]),
            ("controller-support", &["node-lifecycle"], &[], &["lib"]),
            ("node-lifecycle", &[], &[], &["lib"]),
        ]);
        assert_eq!(
            direction_problems(&bad),
            [
                "the runtime package controller-support depends on the workspace package node-lifecycle",
                "edgegrid-core depends on the runtime package controller-support",
                "listwatch depends on the runtime package controller-support",
            ]
        );
    }

    #[test]
    fn an_edge_library_depends_on_no_binary_cloud_only_or_test_package() {
        let good = metadata(&[
            ("unit-link", &["controller-support", "edgegrid-core"], &["edgegrid-testing", "grid-wrapper"], &["lib"]),
            ("grid-wrapper", &["unit-link"], &[], &["lib", "bin"]),
            ("controller-support", &[], &[], &["lib"]),
            ("edgegrid-core", &[], &[], &["lib"]),
        ]);
        assert_eq!(direction_problems(&good), Vec::<String>::new(), "dev-dependencies do not count");
        let bad = metadata(&[
            ("unit-link", &["grid-wrapper", "helper"], &[], &["lib"]),
            ("grid-wrapper", &[], &[], &["lib", "bin"]),
            ("helper", &["unit-signer", "fake-apiserver"], &[], &["lib"]),
            ("unit-signer", &[], &[], &["lib", "bin"]),
            ("fake-apiserver", &[], &[], &["lib", "bin"]),
        ]);
        assert_eq!(
            direction_problems(&bad),
            [
                "the edge library unit-link depends on the test support fake-apiserver",
                "the edge library unit-link depends on the binary package grid-wrapper",
                "the edge library unit-link depends on the binary package unit-signer",
                "the edge library unit-link depends on the cloud-only unit-signer",
            ]
        );
    }

    #[test]
    fn a_build_script_in_any_package_is_reported() {
        let packages = metadata(&[
            ("edge-health", &[], &[], &["lib", "bin", "custom-build"]),
            ("edgegrid-tests", &[], &[], &["lib", "custom-build"]),
            ("grid-wrapper", &[], &[], &["lib", "bin", "test"]),
        ]);
        assert_eq!(build_scripts(&packages), ["edge-health", "edgegrid-tests"]);
    }

    #[test]
    fn an_edge_binary_linking_a_cloud_only_package_is_reported_once() {
        let tree = "edge-health v0.1.0 (/w/crates/edge-health)\n\
            node-lifecycle v0.1.0 (/w/crates/node-lifecycle)\n\
            edgegrid-core v0.1.0 (/w/crates/core)\n\
            node-lifecycle v0.1.0 (/w/crates/node-lifecycle) (*)\n";
        assert_eq!(cloud_packages("edge-health", tree), ["node-lifecycle"]);
        assert_eq!(cloud_packages("grid-wrapper", tree), ["node-lifecycle"]);
        assert_eq!(cloud_packages("edge-node-lifecycle", tree), Vec::<&str>::new(), "a cloud binary may");
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
