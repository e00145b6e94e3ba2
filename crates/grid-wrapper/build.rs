//! Marks `tests/kubectl.rs` ignored when kubectl is missing and CI is unset (see
//! `tests/src/tool_lookup.rs` at the workspace root, shared with the workspace tests).

#[allow(dead_code)] // the run-time half is for the tests
#[path = "../../tests/src/tool_lookup.rs"]
mod tool_lookup;

fn main() {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let workspace_root =
        std::path::Path::new(&manifest_dir).ancestors().nth(2).expect("crates/<name> in the workspace");
    tool_lookup::emit_build_script_directives(workspace_root, &[("kubectl", "missing_kubectl")]);
}
