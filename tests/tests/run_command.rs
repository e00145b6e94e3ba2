//! The README's run command (`cargo xtask run`) prints exactly the CRDs the code defines,
//! as a multi-document stream `kubectl apply -f -` accepts.

use std::process::Command;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

#[test]
fn xtask_run_prints_every_crd() {
    let output = Command::new(env!("CARGO"))
        .args(["xtask", "run"])
        .current_dir(edgegrid_tests::workspace_root())
        .output()
        .expect("cargo runs");
    assert!(output.status.success(), "stderr: {}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8(output.stdout).expect("utf-8 YAML");
    let printed: Vec<CustomResourceDefinition> = serde_saphyr::from_multiple(&stdout).expect("multi-document CRD YAML");
    assert_eq!(printed, edgegrid_core::crd::all_crds());
}
