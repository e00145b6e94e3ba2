//! Workspace-level end-to-end tests live in `tests/tests/`; this library holds what they share.

use std::path::{Path, PathBuf};

pub use edgegrid_testing::StopOnDrop;

/// The workspace root, for tests that run the project's commands.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ lives in the workspace root").to_path_buf()
}

/// The xtask binary, built next to the calling test binary (running it through `cargo`
/// would keep SIGTERM and the exit status from reaching it), together with the component
/// binaries `xtask run` and `xtask soak` start, so runs can pass `--no-build` and the time
/// they are given to come up is not spent compiling (on a fresh clone that takes minutes).
pub fn xtask() -> PathBuf {
    let mut build = std::process::Command::new(env!("CARGO"));
    build.args(["build", "--quiet", "--locked", "--package", "xtask"]);
    for package in ["grid-wrapper", "unit-signer", "edge-health", "edge-health-admission", "edge-node-lifecycle"] {
        build.args(["--package", package]);
    }
    let status = build.current_dir(workspace_root()).status().expect("cargo runs");
    assert!(status.success(), "building xtask and the component binaries");
    let test = std::env::current_exe().expect("the test binary");
    test.parent().and_then(|d| d.parent()).expect("target/<profile>/deps/<test>").join("xtask")
}

/// `xtask <args>` run to its end from the workspace root (without `KUBECONFIG`, so a
/// local cluster is started), its output captured.
pub fn xtask_output(args: &[&str]) -> std::process::Output {
    std::process::Command::new(xtask())
        .args(args)
        .env_remove("KUBECONFIG")
        .current_dir(workspace_root())
        .output()
        .expect("xtask runs")
}
