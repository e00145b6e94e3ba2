//! The Helm chart: `helm lint`, the rendered objects and RBAC the controllers need, and
//! the rendered chart (CRDs included) applied by a real kubectl to the fake apiserver.
//! helm/kubectl come from `.ci/install-tools` (or `$HELM`/`$KUBECTL`). Without them the test is
//! ignored with the reason (`build.rs` sets `missing_helm`/`missing_kubectl`), except under CI
//! (`CI` non-empty), where it runs and fails.

use std::io::Write;
use std::process::{Command, Stdio};

use edgegrid_tests::{require_tool, workspace_root};
use serde_json::{Value, json};

fn render(helm: &std::path::Path, extra: &[&str]) -> Vec<Value> {
    let output = Command::new(helm)
        .args(["template", "edgegrid", "charts/edgegrid", "--namespace", "edgegrid", "--include-crds"])
        .args(extra)
        .current_dir(workspace_root())
        .output()
        .unwrap();
    assert!(output.status.success(), "helm template: {}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8(output.stdout).unwrap();
    serde_saphyr::from_multiple::<Value>(&text).unwrap().into_iter().filter(|d| !d.is_null()).collect()
}

fn kind_names(objects: &[Value]) -> Vec<String> {
    let mut out: Vec<String> = objects
        .iter()
        .map(|o| {
            format!("{}/{}", o["kind"].as_str().unwrap_or_default(), o["metadata"]["name"].as_str().unwrap_or_default())
        })
        .collect();
    out.sort();
    out
}

fn has_rule(objects: &[Value], role: &str, group: &str, resource: &str, verb: &str) -> bool {
    objects
        .iter()
        .filter(|o| o["metadata"]["name"] == role)
        .flat_map(|o| o["rules"].as_array().cloned().unwrap_or_default())
        .any(|r| {
            let has = |field: &str, want: &str| r[field].as_array().is_some_and(|l| l.iter().any(|v| v == want));
            has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
        })
}

#[tokio::test]
#[cfg_attr(
    any(missing_helm, missing_kubectl),
    ignore = "helm or kubectl not found at $HELM/$KUBECTL or .tools/bin: run .ci/install-tools"
)]
async fn chart_lints_renders_and_applies() {
    let (helm, kubectl) = (require_tool("helm"), require_tool("kubectl"));
    let lint = Command::new(&helm)
        .args(["lint", "--strict", "charts/edgegrid"])
        .current_dir(workspace_root())
        .output()
        .unwrap();
    assert!(lint.status.success(), "helm lint: {}", String::from_utf8_lossy(&lint.stdout));

    let defaults = render(&helm, &[]);
    let all = render(&helm, &["--set", "nodeLifecycle.enabled=true", "--set", "image.tag=test"]);
    assert!(
        !kind_names(&defaults).iter().any(|k| k.contains("edge-node-lifecycle")),
        "the node lifecycle controller replaces a stock one: off unless asked for"
    );
    assert_eq!(
        kind_names(&all),
        [
            "ClusterRole/edgegrid:edge-node-lifecycle",
            "ClusterRole/edgegrid:grid-controller",
            "ClusterRoleBinding/edgegrid:edge-node-lifecycle",
            "ClusterRoleBinding/edgegrid:grid-controller",
            "CustomResourceDefinition/deploymentgrids.superedge.io",
            "CustomResourceDefinition/servicegrids.superedge.io",
            "CustomResourceDefinition/statefulsetgrids.superedge.io",
            "Deployment/edge-node-lifecycle",
            "Deployment/grid-controller",
            "Role/edgegrid:edge-node-lifecycle-leader",
            "Role/edgegrid:grid-controller-leader",
            "RoleBinding/edgegrid:edge-node-lifecycle-leader",
            "RoleBinding/edgegrid:grid-controller-leader",
            "ServiceAccount/edge-node-lifecycle",
            "ServiceAccount/grid-controller",
        ]
    );
    let deployment =
        |name: &str| all.iter().find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == name).unwrap().clone();
    let grid = deployment("grid-controller");
    let container = &grid["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "ghcr.io/edgegrid/grid-controller:test");
    assert_eq!(container["readinessProbe"]["httpGet"], json!({"path": "/readyz", "port": "probes"}));
    let lifecycle = deployment("edge-node-lifecycle");
    let args: Vec<String> =
        serde_json::from_value(lifecycle["spec"]["template"]["spec"]["containers"][0]["args"].clone()).unwrap();
    assert!(args.contains(&"--node-monitor-grace-period=50s".to_string()), "{args:?}");
    assert!(args.contains(&"--node-eviction-rate=0.1".to_string()), "{args:?}");
    // the verbs the controllers' code uses
    for (role, group, resource, verb) in [
        ("edgegrid:grid-controller", "apps", "deployments", "delete"),
        ("edgegrid:grid-controller", "apps", "statefulsets", "patch"),
        ("edgegrid:grid-controller", "", "services", "patch"),
        ("edgegrid:grid-controller", "superedge.io", "servicegrids/status", "patch"),
        ("edgegrid:grid-controller", "superedge.io", "deploymentgrids", "patch"),
        ("edgegrid:grid-controller", "superedge.io", "statefulsetgrids", "patch"),
        ("edgegrid:grid-controller", "", "nodes", "watch"),
        ("edgegrid:grid-controller", "events.k8s.io", "events", "create"),
        ("edgegrid:grid-controller-leader", "coordination.k8s.io", "leases", "update"),
        ("edgegrid:edge-node-lifecycle", "", "nodes", "patch"),
        ("edgegrid:edge-node-lifecycle", "", "nodes/status", "patch"),
        ("edgegrid:edge-node-lifecycle", "", "pods", "delete"),
        ("edgegrid:edge-node-lifecycle", "", "pods/status", "patch"),
        ("edgegrid:edge-node-lifecycle", "coordination.k8s.io", "leases", "watch"),
        ("edgegrid:edge-node-lifecycle-leader", "coordination.k8s.io", "leases", "create"),
    ] {
        assert!(has_rule(&all, role, group, resource, verb), "{role} lacks {verb} on {group}/{resource}");
    }

    // a real kubectl applies the rendered chart to the fake apiserver
    let server = fake_apiserver::FakeApiServer::start().await.unwrap();
    let dir = std::env::temp_dir().join(format!("edgegrid-chart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).unwrap();
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "edgegrid"}});
    let rendered: String = std::iter::once(&namespace)
        .chain(&all)
        .map(|o| format!("---\n{}\n", serde_json::to_string(o).unwrap()))
        .collect();
    let (kubectl2, kubeconfig2) = (kubectl.clone(), kubeconfig.clone());
    let applied = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(&kubectl2)
            .env("KUBECONFIG", &kubeconfig2)
            .args(["apply", "--server-side", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(rendered.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    assert!(applied.status.success(), "kubectl apply: {}", String::from_utf8_lossy(&applied.stderr));
    assert_eq!(String::from_utf8_lossy(&applied.stdout).lines().count(), all.len() + 1, "every object applied");
    let listed = tokio::task::spawn_blocking(move || {
        Command::new(&kubectl)
            .env("KUBECONFIG", &kubeconfig)
            .args(["get", "deployments", "-n", "edgegrid", "-o", "name"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout),
        "deployment.apps/edge-node-lifecycle\ndeployment.apps/grid-controller\n"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
