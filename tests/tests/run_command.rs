//! The README's run command, `cargo xtask run`: without a kubeconfig it serves the
//! embedded local cluster with the CRDs and examples installed and stops cleanly on
//! SIGTERM; with one it installs the CRDs into that cluster. `cargo xtask crds` prints
//! exactly the CRDs the code defines.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use edgegrid_core::crd::{DeploymentGrid, ServiceGrid, StatefulSetGrid, all_crds};
use edgegrid_tests::{StopOnDrop, xtask};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};

fn names<K: kube::Resource>(items: Vec<K>) -> Vec<String> {
    items.into_iter().map(|o| o.meta().name.clone().unwrap_or_default()).collect()
}

#[test]
fn xtask_crds_prints_every_crd() {
    let output = Command::new(xtask()).arg("crds").current_dir(edgegrid_tests::workspace_root()).output().unwrap();
    assert!(output.status.success(), "stderr: {}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8(output.stdout).expect("utf-8 YAML");
    let printed: Vec<CustomResourceDefinition> = serde_saphyr::from_multiple(&stdout).expect("multi-document CRD YAML");
    assert_eq!(printed, all_crds());
}

#[tokio::test]
async fn xtask_run_serves_the_local_cluster_until_sigterm() {
    let dir = std::env::temp_dir().join(format!("edgegrid-run-{}", std::process::id()));
    let kubeconfig = dir.join("kubeconfig");
    let mut child = StopOnDrop(
        Command::new(xtask())
            .args(["run", "--no-build", "--port", "0", "--kubeconfig-out"])
            .arg(&kubeconfig)
            .env_remove("KUBECONFIG")
            .current_dir(edgegrid_tests::workspace_root())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // a liveness bound, generous for two busy cores: nodes, kubelets and a dozen
    // component processes start before the kubeconfig is written
    let deadline = Instant::now() + Duration::from_secs(120);
    while !kubeconfig.exists() {
        assert!(Instant::now() < deadline, "the local cluster did not come up");
        assert!(child.0.try_wait().unwrap().is_none(), "xtask run exited early");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let crds =
        names(Api::<CustomResourceDefinition>::all(client.clone()).list(&ListParams::default()).await.unwrap().items);
    assert_eq!(crds, ["deploymentgrids.superedge.io", "servicegrids.superedge.io", "statefulsetgrids.superedge.io"]);
    let lp = ListParams::default();
    assert_eq!(names(Api::<ServiceGrid>::all(client.clone()).list(&lp).await.unwrap().items), ["echo"]);
    assert_eq!(names(Api::<DeploymentGrid>::all(client.clone()).list(&lp).await.unwrap().items), ["echo"]);
    assert_eq!(names(Api::<StatefulSetGrid>::all(client.clone()).list(&lp).await.unwrap().items), ["cache"]);
    // the grid controller runs in the local cluster: the examples produce their objects
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(client.clone(), "default");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let generated = names(deployments.list(&lp).await.unwrap().items);
        if generated == ["echo-unit-a", "echo-unit-b"] {
            break;
        }
        assert!(Instant::now() < deadline, "grid controller did not generate the per-unit Deployments: {generated:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client, "default");
    assert!(services.get("echo-svc").await.is_ok(), "ServiceGrid echo produced echo-svc");

    assert!(Command::new("kill").args(["-TERM", &child.0.id().to_string()]).status().unwrap().success());
    assert_eq!(child.0.wait().unwrap().code(), Some(0));
    assert!(!kubeconfig.exists(), "the kubeconfig of a stopped cluster is removed");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn xtask_run_with_a_kubeconfig_installs_the_crds_there() {
    let server = fake_apiserver::FakeApiServer::start().await.unwrap();
    let dir = std::env::temp_dir().join(format!("edgegrid-install-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).unwrap();
    let binary = xtask();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(binary).args(["run"]).env("KUBECONFIG", &kubeconfig).output().unwrap()
    })
    .await
    .unwrap();
    assert!(output.status.success(), "stderr: {}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!(
            "installed 3 CRDs into {}/\nNo grid-wrapper pods (app.kubernetes.io/name=grid-wrapper): is the chart installed with gridWrapper.enabled?\n",
            server.url()
        )
    );
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let crds = Api::<CustomResourceDefinition>::all(client).list(&ListParams::default()).await.unwrap().items;
    assert_eq!(crds.len(), 3);
    let _ = std::fs::remove_dir_all(&dir);
}
