//! Where tests that drive a real tool (kubectl, helm) find it, and the build-script half
//! that turns a missing tool into ignored tests outside CI and failing tests under CI.
//!
//! One file, used as a `#[path]` module by the tests that run the tools and by the build
//! scripts of their packages (`tests/build.rs`, `crates/fake-apiserver/build.rs`), so the
//! build-time decision and the run-time lookup are the same code. std only.

use std::path::{Path, PathBuf};

/// Where `.ci/install-tools` puts the binaries (git-ignored).
pub fn tools_bin(workspace_root: &Path) -> PathBuf {
    workspace_root.join(".tools/bin")
}

/// The environment variable naming a tool explicitly: `KUBECTL`, `HELM`.
pub fn env_var(tool: &str) -> String {
    tool.to_uppercase()
}

/// `$<TOOL>` if it names a file, else `.tools/bin/<tool>` if that is a file.
pub fn find(workspace_root: &Path, tool: &str) -> Option<PathBuf> {
    let from_env = std::env::var_os(env_var(tool)).filter(|v| !v.is_empty()).map(PathBuf::from);
    [from_env, Some(tools_bin(workspace_root).join(tool))].into_iter().flatten().find(|p| p.is_file())
}

/// [`find`], or a panic saying where it looked and how to install it. Tests call this: under
/// CI they are never ignored, so a missing tool fails them here.
pub fn require(workspace_root: &Path, tool: &str) -> PathBuf {
    find(workspace_root, tool).unwrap_or_else(|| {
        panic!(
            "{tool} not found at ${} or {}: run .ci/install-tools (needs npm and unzip)",
            env_var(tool),
            tools_bin(workspace_root).display()
        )
    })
}

/// Whether the `CI` environment variable is set to a non-empty value.
pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// For a build script: for each `(tool, cfg)`, sets `--cfg <cfg>` when the tool is missing
/// and CI is unset, so tests marked `#[cfg_attr(<cfg>, ignore = "<reason>")]` show up as
/// ignored with the reason in `cargo test`'s output, and says so with a cargo warning.
/// Under CI the cfg is never set: the tests run and fail on the missing tool.
pub fn emit_build_script_directives(workspace_root: &Path, tools: &[(&str, &str)]) {
    println!("cargo::rerun-if-env-changed=CI");
    // Watch .tools/bin (cargo scans a directory recursively, so installing or removing a tool
    // reruns this). It is created if absent: a rerun-if-changed path that does not exist makes
    // cargo rerun the script, and rebuild the package, on every build.
    let bin = tools_bin(workspace_root);
    if std::fs::create_dir_all(&bin).is_ok() {
        println!("cargo::rerun-if-changed={}", bin.display());
    }
    let ci = in_ci();
    for &(tool, cfg) in tools {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
        let var = env_var(tool);
        println!("cargo::rerun-if-env-changed={var}");
        if let Some(path) = std::env::var_os(&var).filter(|v| !v.is_empty()).map(PathBuf::from) {
            // Only when it exists, for the same reason as above; a fix to the variable reruns anyway.
            if path.exists() {
                println!("cargo::rerun-if-changed={}", path.display());
            }
        }
        if find(workspace_root, tool).is_none() {
            if ci {
                println!(
                    "cargo::warning={tool} not found at ${var} or {}: CI is set, so the tests that need it will fail",
                    bin.display()
                );
            } else {
                println!("cargo::rustc-cfg={cfg}");
                println!(
                    "cargo::warning={tool} not found at ${var} or {}: the tests that need it are ignored (run .ci/install-tools; under CI they fail)",
                    bin.display()
                );
            }
        }
    }
}
