//! docs/migrating-from-superedge.md, run: SuperEdge v0.9's own manifests
//! (`tests/superedge/`, copied from its repository) are applied to the fake apiserver with
//! three edge nodes in two node units, then every `sh` block of that page's sections runs in
//! order under bash with a real kubectl, and what each step leaves is checked.
//!
//! Helm 4's client sends protobuf bodies, which the fake apiserver does not read, so a
//! `helm` stand-in first on PATH turns `helm upgrade --install NAME CHART FLAGS` into the
//! real `helm template NAME CHART FLAGS` applied with `kubectl apply --server-side` (the
//! namespace created for `--create-namespace`); Helm's release bookkeeping and its
//! ownership check of adopted objects are not exercised. helm/kubectl come from
//! `.ci/install-tools`; without them the test says it was skipped (fails under CI).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use edgegrid_testing::tools::tools;
use edgegrid_tests::workspace_root;
use serde_json::{Value, json};

/// The `sh` blocks of the migration page's section `heading` (up to the next `##` or `###`), in order.
fn section_commands(page: &str, heading: &str) -> Vec<String> {
    let start = page.find(heading).unwrap_or_else(|| panic!("docs/migrating-from-superedge.md has no {heading:?}"));
    let section = &page[start + heading.len()..];
    let end = [section.find("\n## "), section.find("\n### ")].into_iter().flatten().min();
    let section = &section[..end.unwrap_or(section.len())];
    let mut blocks = Vec::new();
    let mut rest = section;
    while let Some(open) = rest.find("```sh\n") {
        let body = &rest[open + "```sh\n".len()..];
        let close = body.find("\n```").expect("an unclosed sh block");
        blocks.push(body[..close].to_string());
        rest = &body[close + 4..];
    }
    blocks
}

const HELM_STAND_IN: &str = r#"#!/usr/bin/env bash
# helm upgrade --install NAME CHART FLAGS: the real helm renders, kubectl applies
set -euo pipefail
[ "$1 $2" = "upgrade --install" ] || { echo "stand-in only knows upgrade --install: $*" >&2; exit 2; }
shift 2
release=$1 chart=$2; shift 2
namespace=default args=()
while [ $# -gt 0 ]; do
  case $1 in
    --namespace|-n) namespace=$2; args+=("$1" "$2"); shift 2 ;;
    --create-namespace) create_ns=1; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
if [ -n "${create_ns:-}" ]; then
  printf '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"%s"}}' "$namespace" | kubectl apply -f - >/dev/null
fi
"$REAL_HELM" template "$release" "$chart" "${args[@]}" >"$STAND_IN_DIR/rendered.yaml"
kubectl apply --server-side --force-conflicts --field-manager=helm -f "$STAND_IN_DIR/rendered.yaml"
"#;

struct Cluster {
    kubectl: PathBuf,
    kubeconfig: PathBuf,
    dir: PathBuf,
}

impl Cluster {
    fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> String {
        let mut child = Command::new(&self.kubectl)
            .env("KUBECONFIG", &self.kubeconfig)
            .args(args)
            .current_dir(workspace_root())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        if let Some(input) = stdin {
            use std::io::Write;
            child.stdin.take().expect("piped").write_all(input.as_bytes()).expect("kubectl reads");
        }
        drop(child.stdin.take());
        let output = child.wait_with_output().expect("kubectl ends");
        assert!(output.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    fn get(&self, args: &[&str]) -> Value {
        let out = self.kubectl(&[args, &["-o", "json"]].concat(), None);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("kubectl get {args:?}: {e}: {out}"))
    }

    fn names(&self, args: &[&str]) -> Vec<String> {
        self.kubectl(&[args, &["-o", "name"]].concat(), None).lines().map(str::to_string).collect()
    }

    /// Runs one migration page block under bash (`set -euo pipefail`), from the workspace root.
    fn run_block(&self, block: &str, path: &str, real_helm: &Path) {
        let output = Command::new("bash")
            .args(["-c", &format!("set -euo pipefail\n{block}")])
            .env("KUBECONFIG", &self.kubeconfig)
            .env("PATH", path)
            .env("REAL_HELM", real_helm)
            .env("STAND_IN_DIR", &self.dir)
            .current_dir(&self.dir)
            .output()
            .expect("bash runs");
        assert!(
            output.status.success(),
            "docs/migrating-from-superedge.md block failed:\n{block}\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

fn node(name: &str, unit: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
        "kubernetes.io/os": "linux", unit: "nodeunits.superedge.io"}}})
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or_default()
}

/// Each webhook of a configuration: its name and the Service namespace and path it calls.
fn webhook_calls(hook: &Value) -> Vec<(&str, &str, &str)> {
    let webhooks = hook["webhooks"].as_array().expect("webhooks");
    webhooks
        .iter()
        .map(|w| {
            let service = &w["clientConfig"]["service"];
            (text(&w["name"]), text(&service["namespace"]), text(&service["path"]))
        })
        .collect()
}

fn affinity_excludes(daemonset: &Value, label: &str) -> bool {
    daemonset["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"]
        == json!([{"matchExpressions": [{"key": label, "operator": "DoesNotExist"}]}])
}

/// A documented migration run against a cluster, given how to run one of the page's blocks.
type Migration = fn(&Cluster, &dyn Fn(&str));

/// Runs `migration` on its own fake apiserver, a throwaway directory and SuperEdge installed.
async fn on_a_superedge_cluster(name: &'static str, migration: Migration) {
    let Some([helm, kubectl]) = tools(name, ["helm", "kubectl"]) else { return };
    let server = fake_apiserver::FakeApiServer::start().await.expect("fake apiserver starts");
    let kubeconfig = server.kubeconfig();
    tokio::task::spawn_blocking(move || {
        let (c, path) = superedge_cluster(name, &kubeconfig, &kubectl);
        migration(&c, &|block: &str| c.run_block(block, &path, &helm));
        let _ = std::fs::remove_dir_all(&c.dir);
    })
    .await
    .expect("the migration went as docs/migrating-from-superedge.md says");
}

/// SuperEdge as its deployment/*.yaml install it (its CRDs first), on three edge nodes;
/// and the PATH the migration page's commands run with.
fn superedge_cluster(name: &str, kubeconfig: &str, kubectl: &Path) -> (Cluster, String) {
    let dir = std::env::temp_dir().join(format!("edgegrid-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("bin")).expect("temp dir");
    std::fs::write(dir.join("kubeconfig"), kubeconfig).expect("kubeconfig written");
    // the commands run in their own directory, with the checkout's charts/ linked in
    std::os::unix::fs::symlink(workspace_root().join("charts"), dir.join("charts")).expect("charts linked");
    let stand_in = dir.join("bin/helm");
    std::fs::write(&stand_in, HELM_STAND_IN).expect("stand-in written");
    std::fs::set_permissions(&stand_in, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let kubectl_dir = kubectl.parent().expect("kubectl's directory");
    let path = format!(
        "{}:{}:{}",
        dir.join("bin").display(),
        kubectl_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let c = Cluster { kubectl: kubectl.to_path_buf(), kubeconfig: dir.join("kubeconfig"), dir };
    let superedge = workspace_root().join("tests/superedge");
    c.kubectl(
        &["apply", "-f", "-"],
        Some(r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"edge-system"}}"#),
    );
    c.kubectl(&["apply", "--server-side", "-f", superedge.join("crds").to_str().expect("utf-8")], None);
    for file in [
        "application-grid-controller",
        "application-grid-wrapper",
        "edge-health",
        "edge-health-admission",
        "edge-health-webhook",
    ] {
        let text = std::fs::read_to_string(superedge.join(format!("{file}.yaml"))).expect("manifest");
        // edgeadm's template variable: the only substitution
        let text = text.replace("{{.HmacKey}}", "superedge-key");
        c.kubectl(&["apply", "-f", "-"], Some(&text));
    }
    for (name, unit) in [("edge-a-0", "unit-a"), ("edge-a-1", "unit-a"), ("edge-b-0", "unit-b")] {
        c.kubectl(&["apply", "-f", "-"], Some(&node(name, unit).to_string()));
    }
    (c, path)
}

fn page_commands(heading: &str) -> Vec<String> {
    let page = std::fs::read_to_string(workspace_root().join("docs/migrating-from-superedge.md"))
        .expect("docs/migrating-from-superedge.md");
    section_commands(&page, heading)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_readme_migration_takes_over_superedge_s_own_manifests() {
    on_a_superedge_cluster("superedge-migration", step_by_step).await;
}

fn step_by_step(c: &Cluster, run_block: &dyn Fn(&str)) {
    let blocks = page_commands("## Migrating from SuperEdge");
    assert_eq!(blocks.len(), 6, "steps 1-5 and 7: {blocks:#?}");
    let run = |index: usize| run_block(&blocks[index]);

    // 1. CRDs: ours, with the status subresource, SuperEdge's controller (which re-applies
    // its own) stopped first
    run(0);
    {
        let theirs = c.get(&["-n", "edge-system", "get", "deployment", "application-grid-controller"]);
        assert_eq!(theirs["spec"]["replicas"], 0);
        for crd in ["servicegrids", "deploymentgrids", "statefulsetgrids"] {
            let crd = c.get(&["get", "crd", &format!("{crd}.superedge.io")]);
            assert_eq!(crd["spec"]["versions"][0]["subresources"]["status"], json!({}), "{crd}");
        }
    }

    // 2. controller: ours installed with every edge part off
    run(1);
    {
        let theirs = c.get(&["-n", "edge-system", "get", "deployment", "application-grid-controller"]);
        assert_eq!(theirs["spec"]["replicas"], 0);
        assert_eq!(c.names(&["-n", "edgegrid", "get", "deployments"]), ["deployment.apps/grid-controller"]);
        assert!(c.names(&["-n", "edgegrid", "get", "daemonsets"]).is_empty());
        let ns = c.get(&["get", "namespace", "edgegrid"]);
        assert_eq!(ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], "privileged");
        // SuperEdge's webhook configuration is still its own
        let hook = c.get(&["get", "mutatingwebhookconfiguration", "edge-health-admission"]);
        assert_eq!(hook["webhooks"][0]["clientConfig"]["service"]["namespace"], "edge-system");
    }

    // 3. webhook: ours under its own name, SuperEdge's deleted
    run(2);
    {
        let hooks = c.names(&["get", "mutatingwebhookconfigurations"]);
        assert_eq!(hooks, ["mutatingwebhookconfiguration.admissionregistration.k8s.io/edgegrid-edge-health-admission"]);
        let hook = c.get(&["get", "mutatingwebhookconfiguration", "edgegrid-edge-health-admission"]);
        assert_eq!(
            webhook_calls(&hook),
            [
                ("node-taint.edge-health.superedge.io", "edgegrid", "/node-taint"),
                ("endpoint.edge-health.superedge.io", "edgegrid", "/endpoint"),
                ("endpointslice.edge-health.superedge.io", "edgegrid", "/endpointslice"),
            ]
        );
        let admission = c.get(&["-n", "edgegrid", "get", "deployment", "edge-health-admission"]);
        let args = &admission["spec"]["template"]["spec"]["containers"][0]["args"];
        assert!(
            args.as_array()
                .expect("args")
                .contains(&json!("--webhook-configuration-name=edgegrid-edge-health-admission")),
            "the self-managed certificate goes into the configuration of that name: {args}"
        );
        let theirs = c.get(&["-n", "edge-system", "get", "deployment", "edge-health-admission"]);
        assert_eq!(theirs["spec"]["replicas"], 0);
        assert_eq!(
            c.names(&["-n", "edgegrid", "get", "deployments"]),
            ["deployment.apps/edge-health-admission", "deployment.apps/grid-controller"]
        );
    }

    // 4. edge-health: SuperEdge's kept off the labelled nodes, ours only there, unit-a moved
    run(3);
    {
        let theirs = c.get(&["-n", "edge-system", "get", "daemonset", "edge-health"]);
        assert!(affinity_excludes(&theirs, "edgegrid.io/edge-health"), "{theirs}");
        let ours = c.get(&["-n", "edgegrid", "get", "daemonset", "edge-health"]);
        assert_eq!(ours["spec"]["template"]["spec"]["nodeSelector"], json!({"edgegrid.io/edge-health": "edgegrid"}));
        let moved = c.names(&["get", "nodes", "-l", "edgegrid.io/edge-health=edgegrid"]);
        assert_eq!(moved, ["node/edge-a-0", "node/edge-a-1"], "the whole of unit-a, none of unit-b");
        assert_eq!(c.names(&["-n", "edgegrid", "get", "secret", "edge-health-hmac"]), ["secret/edge-health-hmac"]);
    }

    // 5. wrapper: the same, node by node
    run(4);
    {
        let theirs = c.get(&["-n", "edge-system", "get", "daemonset", "application-grid-wrapper"]);
        assert!(affinity_excludes(&theirs, "edgegrid.io/grid-wrapper"), "{theirs}");
        let ours = c.get(&["-n", "edgegrid", "get", "daemonset", "grid-wrapper"]);
        assert_eq!(ours["spec"]["template"]["spec"]["nodeSelector"], json!({"edgegrid.io/grid-wrapper": "edgegrid"}));
        assert_eq!(c.names(&["get", "nodes", "-l", "edgegrid.io/grid-wrapper=edgegrid"]), ["node/edge-a-0"]);
    }

    // 7. clean-up: SuperEdge's workloads and key ConfigMap gone, ours stay
    run(5);
    {
        assert!(c.names(&["-n", "edge-system", "get", "daemonsets,deployments"]).is_empty());
        let left = c.names(&["get", "clusterrolebindings,clusterroles"]);
        assert!(left.iter().all(|name| name.contains("edgegrid:")), "only ours left: {left:?}");
        assert!(
            c.names(&["-n", "edge-system", "get", "configmaps", "--field-selector", "metadata.name=hmac-config"])
                .is_empty()
        );
        assert_eq!(
            c.names(&["-n", "edgegrid", "get", "daemonsets"]),
            ["daemonset.apps/edge-health", "daemonset.apps/grid-wrapper"]
        );
    }

    // SuperEdge's manifests with our images: the key Secret
    // SuperEdge's manifests with our images: the key Secret
    let blocks = page_commands("### SuperEdge's manifests with our images");
    assert_eq!(blocks.len(), 1, "{blocks:#?}");
    run_block(&blocks[0]);
    let secret = c.get(&["-n", "edge-system", "get", "secret", "edge-health-hmac"]);
    let key = secret["data"]["key"].as_str().expect("a key");
    // base64 of the base64 text of 36 random bytes: 48 characters, 64 in data
    assert_eq!(key.len(), 64, "{key}");
}

#[tokio::test(flavor = "multi_thread")]
async fn all_at_once_in_superedge_s_namespace_takes_its_names() {
    on_a_superedge_cluster("superedge-in-place", in_place).await;
}

fn in_place(c: &Cluster, run_block: &dyn Fn(&str)) {
    let blocks = page_commands("### All at once, in SuperEdge's namespace");
    assert_eq!(blocks.len(), 1, "{blocks:#?}");
    run_block(&blocks[0]);
    // ours under SuperEdge's names where the two share them, SuperEdge's other objects gone
    assert_eq!(
        c.names(&["-n", "edge-system", "get", "daemonsets,deployments"]),
        [
            "daemonset.apps/edge-health",
            "daemonset.apps/grid-wrapper",
            "deployment.apps/edge-health-admission",
            "deployment.apps/grid-controller",
        ]
    );
    for name in ["edge-health", "edge-health-admission"] {
        let account = c.get(&["-n", "edge-system", "get", "serviceaccount", name]);
        assert_eq!(account["metadata"]["labels"]["app.kubernetes.io/part-of"], "edgegrid", "{name}: ours");
    }
    let hook = c.get(&["get", "mutatingwebhookconfiguration", "edge-health-admission"]);
    assert_eq!(hook["metadata"]["labels"]["app.kubernetes.io/part-of"], "edgegrid");
    assert_eq!(
        webhook_calls(&hook),
        [
            ("node-taint.edge-health.superedge.io", "edge-system", "/node-taint"),
            ("endpoint.edge-health.superedge.io", "edge-system", "/endpoint"),
            ("endpointslice.edge-health.superedge.io", "edge-system", "/endpointslice"),
        ],
        "only ours: SuperEdge's configuration was deleted first, not merged into"
    );
    let crd = c.get(&["get", "crd", "deploymentgrids.superedge.io"]);
    assert_eq!(
        crd["spec"]["versions"][0]["subresources"]["status"],
        json!({}),
        "ours, after SuperEdge's controller went"
    );
    let service = c.get(&["-n", "edge-system", "get", "service", "edge-health-admission"]);
    assert_eq!(service["spec"]["selector"]["app.kubernetes.io/name"], "edge-health-admission");
    assert_eq!(service["metadata"]["labels"]["app.kubernetes.io/part-of"], "edgegrid");
    assert!(
        c.names(&["-n", "edge-system", "get", "configmaps", "--field-selector", "metadata.name=hmac-config"])
            .is_empty()
    );
    // SuperEdge's bindings are gone, so ours hold only the chart's grants
    let left = c.names(&["get", "clusterrolebindings,clusterroles"]);
    assert!(left.iter().all(|name| name.contains("edgegrid:")), "only ours left: {left:?}");
    let ours = c.names(&["-n", "edge-system", "get", "serviceaccounts"]);
    assert!(!ours.iter().any(|name| name.contains("application-grid")), "{ours:?}");
}
