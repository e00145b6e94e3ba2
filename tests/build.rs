//! Marks the tests that drive a real kubectl/helm ignored when the tool is missing and CI is
//! unset (see `src/tool_lookup.rs`).

#[allow(dead_code)] // the run-time half is for the tests
#[path = "src/tool_lookup.rs"]
mod tool_lookup;

fn main() {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let workspace_root = std::path::Path::new(&manifest_dir).parent().expect("tests/ lives in the workspace root");
    tool_lookup::emit_build_script_directives(
        workspace_root,
        &[("kubectl", "missing_kubectl"), ("helm", "missing_helm")],
    );
}
