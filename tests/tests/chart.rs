//! The Helm chart: `helm lint`, the rendered objects and RBAC the controllers need, and
//! the rendered chart (CRDs included) applied by a real kubectl to the fake apiserver.
//! helm/kubectl come from `.ci/install-tools` (or `$HELM`/`$KUBECTL`). Without them the tests
//! say why and return, except under CI (`CI` non-empty), where they fail
//! (`edgegrid_testing::tools`).

use std::io::Write;
use std::process::{Command, Stdio};

use edgegrid_testing::tools::tools;
use edgegrid_tests::workspace_root;
use serde_json::{Value, json};

/// `helm <command> edgegrid charts/edgegrid --namespace edgegrid <flags> <extra>`: its stdout.
fn helm_run(helm: &std::path::Path, command: &str, flags: &[&str], extra: &[&str]) -> String {
    let output = Command::new(helm)
        .args([command, "edgegrid", "charts/edgegrid", "--namespace", "edgegrid"])
        .args(flags)
        .args(extra)
        .current_dir(workspace_root())
        .output()
        .unwrap();
    assert!(output.status.success(), "helm {command}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

fn render(helm: &std::path::Path, extra: &[&str]) -> Vec<Value> {
    let text = helm_run(helm, "template", &["--include-crds"], extra);
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

/// The `resourceNames` of the one rule of `role` granting `verb` on `group`/`resource`
/// (`null`: every name).
fn rule_names(objects: &[Value], role: &str, group: &str, resource: &str, verb: &str) -> Value {
    let rules: Vec<Value> = objects
        .iter()
        .filter(|o| o["metadata"]["name"] == role)
        .flat_map(|o| o["rules"].as_array().cloned().unwrap_or_default())
        .filter(|r| {
            let has = |field: &str, want: &str| r[field].as_array().is_some_and(|l| l.iter().any(|v| v == want));
            has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
        })
        .collect();
    assert_eq!(rules.len(), 1, "{role}: {verb} on {group}/{resource} in {rules:?}");
    rules[0]["resourceNames"].clone()
}

/// `--set-json` naming the edge nodes by a label.
const EDGE_NODES: &str = r#"edgeNodeSelector={"node-role.kubernetes.io/edge":""}"#;

#[tokio::test]
async fn chart_lints_renders_and_applies() {
    let Some([helm, kubectl]) = tools("chart_lints_renders_and_applies", ["helm", "kubectl"]) else { return };
    let lint = Command::new(&helm)
        .args(["lint", "--strict", "charts/edgegrid"])
        .current_dir(workspace_root())
        .output()
        .unwrap();
    assert!(lint.status.success(), "helm lint: {}", String::from_utf8_lossy(&lint.stdout));

    let defaults = render(&helm, &[]);
    let all = render(
        &helm,
        &[
            "--set",
            "nodeLifecycle.enabled=true",
            "--set",
            "image.tag=test",
            "--set",
            "gridWrapper.kubeProxyKubeconfig=true",
            "--set-json",
            EDGE_NODES,
        ],
    );
    assert!(
        !kind_names(&defaults).iter().any(|k| k.contains("edge-node-lifecycle")),
        "the node lifecycle controller replaces a stock one: off unless asked for"
    );
    let lifecycle = args(find(&all, "Deployment", "edge-node-lifecycle"));
    for arg in ["--max-unreachable-protection=24h", "--unit-label-key="] {
        assert!(lifecycle.contains(&arg.to_string()), "{arg}: {lifecycle:?}");
    }
    let subjects = &find(&all, "RoleBinding", "edgegrid:edge-health-config")["subjects"];
    assert!(subjects.as_array().unwrap().iter().any(|s| s["name"] == "edge-node-lifecycle"), "{subjects}");
    // the defaults: everything but the node lifecycle controller and the kube-proxy wiring
    let optional = ["edge-node-lifecycle", "kube-proxy-grid-wrapper", "grid-wrapper-node-proxier"];
    let expected_defaults: Vec<String> =
        kind_names(&all).into_iter().filter(|k| !optional.iter().any(|o| k.contains(o))).collect();
    assert_eq!(kind_names(&defaults), expected_defaults);
    // (the filter hides no more than the 10 objects of the node lifecycle controller and the 2 of the wiring)
    assert_eq!(expected_defaults.len(), kind_names(&all).len() - 12, "{expected_defaults:#?}");
    assert_eq!(
        kind_names(&all),
        [
            "ClusterRole/edgegrid:edge-health",
            "ClusterRole/edgegrid:edge-health-admission",
            "ClusterRole/edgegrid:edge-health-kubelet-check",
            "ClusterRole/edgegrid:edge-node-lifecycle",
            "ClusterRole/edgegrid:grid-controller",
            "ClusterRole/edgegrid:grid-wrapper",
            "ClusterRoleBinding/edgegrid:edge-health",
            "ClusterRoleBinding/edgegrid:edge-health-admission",
            "ClusterRoleBinding/edgegrid:edge-health-kubelet-check",
            "ClusterRoleBinding/edgegrid:edge-node-lifecycle",
            "ClusterRoleBinding/edgegrid:grid-controller",
            "ClusterRoleBinding/edgegrid:grid-wrapper",
            "ClusterRoleBinding/edgegrid:grid-wrapper-node-proxier",
            "ConfigMap/kube-proxy-grid-wrapper",
            "CustomResourceDefinition/deploymentgrids.superedge.io",
            "CustomResourceDefinition/servicegrids.superedge.io",
            "CustomResourceDefinition/statefulsetgrids.superedge.io",
            "DaemonSet/edge-health",
            "DaemonSet/grid-wrapper",
            "Deployment/edge-health-admission",
            "Deployment/edge-node-lifecycle",
            "Deployment/grid-controller",
            "MutatingWebhookConfiguration/edge-health-admission",
            "PodDisruptionBudget/edge-health-admission",
            "PodDisruptionBudget/edge-node-lifecycle",
            "PodDisruptionBudget/grid-controller",
            "Role/edgegrid:edge-health-admission-certificates",
            "Role/edgegrid:edge-health-config",
            "Role/edgegrid:edge-health-kubelet-check-token",
            "Role/edgegrid:edge-node-lifecycle-leader",
            "Role/edgegrid:edge-node-lifecycle-node-leases",
            "Role/edgegrid:grid-controller-leader",
            "RoleBinding/edgegrid:edge-health-admission-certificates",
            "RoleBinding/edgegrid:edge-health-config",
            "RoleBinding/edgegrid:edge-health-kubelet-check-token",
            "RoleBinding/edgegrid:edge-node-lifecycle-leader",
            "RoleBinding/edgegrid:edge-node-lifecycle-node-leases",
            "RoleBinding/edgegrid:grid-controller-leader",
            "Secret/edge-health-hmac",
            "Service/edge-health-admission",
            "Service/edge-health-admission-metrics",
            "Service/edge-health-metrics",
            "Service/edge-node-lifecycle-metrics",
            "Service/grid-controller-metrics",
            "Service/grid-wrapper-metrics",
            "ServiceAccount/edge-health",
            "ServiceAccount/edge-health-admission",
            "ServiceAccount/edge-health-kubelet-check",
            "ServiceAccount/edge-node-lifecycle",
            "ServiceAccount/grid-controller",
            "ServiceAccount/grid-wrapper",
            "ValidatingAdmissionPolicy/edge-health-kubelet-check-token.edgegrid.io",
            "ValidatingAdmissionPolicy/edge-health-node-restriction.edgegrid.io",
            "ValidatingAdmissionPolicy/edgegrid-unit-labels.edgegrid.io",
            "ValidatingAdmissionPolicyBinding/edge-health-kubelet-check-token.edgegrid.io",
            "ValidatingAdmissionPolicyBinding/edge-health-node-restriction.edgegrid.io",
            "ValidatingAdmissionPolicyBinding/edgegrid-unit-labels.edgegrid.io",
        ]
    );
    for object in &all {
        typed(object);
    }
    per_node_components(&helm, &all);
    cloud_components_run_only_where_no_kubelet_can_label_itself(&helm);
    superedge_migration_values(&helm);
    images_are_built_here(&all);
    admission_webhook(&helm, &all);
    hmac_key(&helm, &all);
    node_restriction_policy(&helm, &all);
    unit_label_policy(&helm, &all);
    kubelet_check_token_policy(&helm, &all);
    bad_values_are_refused(&helm);
    unit_upstream(&helm, &all);
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
        // new objects are created with POST (a conflict instead of a takeover), then applied
        ("edgegrid:grid-controller", "", "services", "create"),
        ("edgegrid:grid-controller", "apps", "deployments", "create"),
        ("edgegrid:grid-controller", "apps", "statefulsets", "create"),
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
        ("edgegrid:edge-node-lifecycle-node-leases", "coordination.k8s.io", "leases", "watch"),
        ("edgegrid:edge-node-lifecycle-leader", "coordination.k8s.io", "leases", "create"),
        ("edgegrid:grid-wrapper", "", "services", "watch"),
        ("edgegrid:grid-wrapper", "", "endpoints", "list"),
        ("edgegrid:grid-wrapper", "", "nodes", "watch"),
        ("edgegrid:grid-wrapper", "discovery.k8s.io", "endpointslices", "watch"),
        ("edgegrid:grid-wrapper", "", "endpoints", "watch"),
        ("edgegrid:grid-wrapper", "", "nodes", "list"),
        ("edgegrid:edge-health", "", "nodes", "patch"),
        ("edgegrid:edge-health", "", "nodes", "list"),
        ("edgegrid:edge-health", "", "nodes", "watch"),
        // the kubelet check: the peer kubelet's SubjectAccessReview for GET /healthz, for
        // the kubelet-check account's token, which edge-health asks for
        ("edgegrid:edge-health-kubelet-check", "", "nodes/healthz", "get"),
        ("edgegrid:edge-health-kubelet-check-token", "", "serviceaccounts/token", "create"),
        ("edgegrid:edge-health-config", "", "configmaps", "list"),
        ("edgegrid:edge-health-config", "", "configmaps", "watch"),
        ("edgegrid:edge-health-admission", "", "nodes", "list"),
        ("edgegrid:edge-health-admission", "", "nodes", "watch"),
        // the remover: an unreachable NoExecute taint that got past the webhook, with an Event
        ("edgegrid:edge-health-admission", "", "nodes", "patch"),
        ("edgegrid:edge-health-admission", "events.k8s.io", "events", "create"),
        ("edgegrid:edge-health-admission", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get"),
        ("edgegrid:edge-health-admission", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "patch"),
        ("edgegrid:edge-health-admission-certificates", "", "secrets", "get"),
        ("edgegrid:edge-health-admission-certificates", "", "secrets", "list"),
        ("edgegrid:edge-health-admission-certificates", "", "secrets", "watch"),
        ("edgegrid:edge-health-admission-certificates", "", "secrets", "create"),
        ("edgegrid:edge-health-admission-certificates", "", "secrets", "update"),
    ] {
        assert!(has_rule(&all, role, group, resource, verb), "{role} lacks {verb} on {group}/{resource}");
    }
    // by name where the code names the object (list/watch with a metadata.name field
    // selector are authorized by resourceNames); create cannot be
    for (role, group, resource, verb, names) in [
        ("edgegrid:edge-health-config", "", "configmaps", "watch", json!(["edge-health-config"])),
        ("edgegrid:edge-health-config", "", "configmaps", "list", json!(["edge-health-config"])),
        (
            "edgegrid:edge-health-kubelet-check-token",
            "",
            "serviceaccounts/token",
            "create",
            json!(["edge-health-kubelet-check"]),
        ),
        ("edgegrid:edge-health-admission-certificates", "", "secrets", "get", json!(["edge-health-admission-tls"])),
        ("edgegrid:edge-health-admission-certificates", "", "secrets", "list", json!(["edge-health-admission-tls"])),
        ("edgegrid:edge-health-admission-certificates", "", "secrets", "watch", json!(["edge-health-admission-tls"])),
        ("edgegrid:edge-health-admission-certificates", "", "secrets", "update", json!(["edge-health-admission-tls"])),
        ("edgegrid:edge-health-admission-certificates", "", "secrets", "create", Value::Null),
        (
            "edgegrid:edge-health-admission",
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
            "patch",
            json!(["edge-health-admission"]),
        ),
    ] {
        assert_eq!(rule_names(&all, role, group, resource, verb), names, "{role}: {verb} on {group}/{resource}");
    }

    // nothing more than the code does: patched objects are never updated, Leases are the
    // binaries' own (by name) in the release namespace, node leases read in kube-node-lease
    for (role, group, resource, verb) in [
        ("edgegrid:grid-controller", "", "services", "update"),
        ("edgegrid:grid-controller", "apps", "deployments", "update"),
        ("edgegrid:grid-controller", "superedge.io", "servicegrids/status", "update"),
        ("edgegrid:edge-node-lifecycle", "", "nodes", "update"),
        ("edgegrid:edge-node-lifecycle", "", "nodes/status", "update"),
        ("edgegrid:edge-node-lifecycle", "", "pods/status", "update"),
        ("edgegrid:edge-node-lifecycle", "coordination.k8s.io", "leases", "watch"),
        ("edgegrid:grid-wrapper", "", "services", "get"),
        ("edgegrid:grid-wrapper", "", "nodes", "patch"),
        ("edgegrid:grid-wrapper", "discovery.k8s.io", "endpointslices", "get"),
        ("edgegrid:edge-health", "", "nodes", "update"),
        ("edgegrid:edge-health", "", "nodes", "get"),
        ("edgegrid:edge-health", "", "nodes/proxy", "get"),
        // what the kubelet check sends is not edge-health's own token: that one may not
        // pass a kubelet's check, nor the check's do more than that
        ("edgegrid:edge-health", "", "nodes/healthz", "get"),
        ("edgegrid:edge-health-kubelet-check", "", "nodes/proxy", "get"),
        ("edgegrid:edge-health-kubelet-check", "", "nodes", "get"),
        ("edgegrid:edge-health-config", "", "configmaps", "get"),
        ("edgegrid:edge-health-admission", "", "nodes", "update"),
        ("edgegrid:edge-health-admission", "", "nodes/status", "patch"),
        ("edgegrid:edge-health-admission", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "update"),
        ("edgegrid:edge-health-admission-certificates", "", "secrets", "patch"),
        ("edgegrid:edge-health-admission-certificates", "", "secrets", "delete"),
    ] {
        assert!(!has_rule(&all, role, group, resource, verb), "{role} has {verb} on {group}/{resource}");
    }
    for (name, lease) in [("grid-controller", "grid-controller"), ("edge-node-lifecycle", "edge-node-lifecycle")] {
        let role = find(&all, "Role", &format!("edgegrid:{name}-leader"));
        assert_eq!(role["metadata"]["namespace"], "edgegrid", "{name}");
        assert_eq!(role["rules"][0]["resourceNames"], json!([lease]), "{name}");
        assert!(
            self::args(find(&all, "Deployment", name)).contains(&"--leader-elect-resource-namespace=edgegrid".into())
        );
        let pod = &find(&all, "Deployment", name)["spec"]["template"]["spec"];
        assert_eq!(pod["securityContext"]["seccompProfile"], json!({"type": "RuntimeDefault"}), "{name}");
    }
    assert_eq!(
        find(&all, "Role", "edgegrid:edge-node-lifecycle-node-leases")["metadata"]["namespace"],
        "kube-node-lease"
    );
    // every object carries the release as app.kubernetes.io/instance
    for object in all.iter().filter(|o| o["kind"] != "CustomResourceDefinition") {
        assert_eq!(
            object["metadata"]["labels"]["app.kubernetes.io/instance"], "edgegrid",
            "{}",
            object["metadata"]["name"]
        );
    }
    // cloud components placed further by their own values; one replica survives a drain
    let placed = render(
        &helm,
        &[
            "--set",
            "gridController.nodeSelector.tier=cloud",
            "--set",
            "admission.priorityClassName=system-cluster-critical",
            "--set",
            "admission.tolerations[0].operator=Exists",
            "--set",
            "gridController.replicas=1",
        ],
    );
    let pod = |name: &str| find(&placed, "Deployment", name)["spec"]["template"]["spec"].clone();
    assert_eq!(
        pod("grid-controller")["nodeSelector"],
        json!({"node-role.kubernetes.io/control-plane": "", "tier": "cloud"})
    );
    assert_eq!(pod("edge-health-admission")["priorityClassName"], "system-cluster-critical");
    assert_eq!(
        pod("edge-health-admission")["tolerations"],
        json!([{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
            {"operator": "Exists"}])
    );
    assert!(
        !kind_names(&placed).contains(&"PodDisruptionBudget/grid-controller".to_string()),
        "no PDB for one replica"
    );
    assert_eq!(find(&all, "PodDisruptionBudget", "grid-controller")["spec"]["minAvailable"], 1);
    // each component's metrics port behind a Service, and a ServiceMonitor when asked for
    for name in ["grid-controller", "edge-node-lifecycle", "edge-health-admission", "grid-wrapper", "edge-health"] {
        let service = find(&all, "Service", &format!("{name}-metrics"));
        assert_eq!(service["spec"]["ports"][0]["targetPort"], "metrics", "{name}");
        assert_eq!(service["spec"]["selector"]["app.kubernetes.io/name"], name);
        let workload = all
            .iter()
            .find(|o| matches!(o["kind"].as_str(), Some("Deployment" | "DaemonSet")) && o["metadata"]["name"] == name)
            .unwrap();
        let ports = &workload["spec"]["template"]["spec"]["containers"][0]["ports"];
        assert!(ports.as_array().unwrap().iter().any(|p| p["name"] == "metrics"), "{name} has no metrics port");
    }
    let monitored = render(&helm, &["--set", "metrics.serviceMonitor=true"]);
    let monitor = find(&monitored, "ServiceMonitor", "grid-wrapper");
    assert_eq!(monitor["spec"]["endpoints"], json!([{"port": "metrics", "interval": "30s"}]));
    assert_eq!(monitor["spec"]["selector"]["matchLabels"]["edgegrid.io/metrics"], "true");
    assert!(!kind_names(&all).iter().any(|k| k.starts_with("ServiceMonitor/")), "off by default: needs its CRD");

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
    // Helm never upgrades crds/: docs/development.md's upgrade step applies them over the installed ones
    let (kubectl3, kubeconfig3) = (kubectl.clone(), kubeconfig.clone());
    let upgraded = tokio::task::spawn_blocking(move || {
        Command::new(&kubectl3)
            .env("KUBECONFIG", &kubeconfig3)
            .args(["apply", "--server-side", "--force-conflicts", "-f", "charts/edgegrid/crds/"])
            .current_dir(workspace_root())
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(upgraded.status.success(), "{}", String::from_utf8_lossy(&upgraded.stderr));
    assert_eq!(
        String::from_utf8_lossy(&upgraded.stdout),
        "customresourcedefinition.apiextensions.k8s.io/deploymentgrids.superedge.io serverside-applied\n\
         customresourcedefinition.apiextensions.k8s.io/servicegrids.superedge.io serverside-applied\n\
         customresourcedefinition.apiextensions.k8s.io/statefulsetgrids.superedge.io serverside-applied\n"
    );
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
        "deployment.apps/edge-health-admission\ndeployment.apps/edge-node-lifecycle\ndeployment.apps/grid-controller\n"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every rendered object parses as its k8s-openapi type and comes back the same when
/// serialized again: k8s-openapi skips fields it does not know, so the round trip is what
/// makes a misspelt field fail here, as it would at `kubectl apply --validate=strict`.
fn typed(object: &Value) {
    use k8s_openapi::api::{admissionregistration, apps, core, rbac};
    fn parse<T: serde::de::DeserializeOwned + serde::Serialize>(object: &Value) -> Result<(), String> {
        let parsed = T::deserialize(object).map_err(|e| e.to_string())?;
        let again = serde_json::to_value(parsed).map_err(|e| e.to_string())?;
        match lost_in_round_trip(object, &again, "") {
            Some(path) => Err(format!("{path}: not a field of the type, or not its value after a round trip")),
            None => Ok(()),
        }
    }
    let parsed = match object["kind"].as_str().unwrap_or_default() {
        "ServiceAccount" => parse::<core::v1::ServiceAccount>(object),
        "PodDisruptionBudget" => parse::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(object),
        "Service" => parse::<core::v1::Service>(object),
        "Secret" => parse::<core::v1::Secret>(object),
        "ConfigMap" => parse::<core::v1::ConfigMap>(object),
        "Deployment" => parse::<apps::v1::Deployment>(object),
        "DaemonSet" => parse::<apps::v1::DaemonSet>(object),
        "ClusterRole" => parse::<rbac::v1::ClusterRole>(object),
        "ClusterRoleBinding" => parse::<rbac::v1::ClusterRoleBinding>(object),
        "Role" => parse::<rbac::v1::Role>(object),
        "RoleBinding" => parse::<rbac::v1::RoleBinding>(object),
        "MutatingWebhookConfiguration" => parse::<admissionregistration::v1::MutatingWebhookConfiguration>(object),
        "ValidatingAdmissionPolicy" => parse::<admissionregistration::v1::ValidatingAdmissionPolicy>(object),
        "ValidatingAdmissionPolicyBinding" => {
            parse::<admissionregistration::v1::ValidatingAdmissionPolicyBinding>(object)
        }
        "CustomResourceDefinition" => parse::<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        >(object),
        other => Err(format!("no type for kind {other}")),
    };
    if let Err(error) = parsed {
        panic!("{} {}: {error}", object["kind"], object["metadata"]["name"]);
    }
}

/// The first path of `rendered` that `typed` (its round trip) lacks or holds otherwise; a
/// `null` counts as absent.
fn lost_in_round_trip(rendered: &Value, typed: &Value, path: &str) -> Option<String> {
    match (rendered, typed) {
        (Value::Object(rendered), Value::Object(typed)) => rendered.iter().find_map(|(key, value)| {
            let path = format!("{path}/{key}");
            match typed.get(key) {
                None if value.is_null() => None,
                None => Some(path),
                Some(again) => lost_in_round_trip(value, again, &path),
            }
        }),
        (Value::Array(rendered), Value::Array(typed)) if rendered.len() == typed.len() => rendered
            .iter()
            .zip(typed)
            .enumerate()
            .find_map(|(i, (r, t))| lost_in_round_trip(r, t, &format!("{path}/{i}"))),
        (rendered, typed) => (rendered != typed).then(|| path.to_string()),
    }
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind}/{name}"))
}

fn args(workload: &Value) -> Vec<String> {
    serde_json::from_value(workload["spec"]["template"]["spec"]["containers"][0]["args"].clone()).unwrap()
}

/// The DaemonSets on edge nodes: host network, their node from `spec.nodeName`, the
/// wrapper on 127.0.0.1 reading the local daemon's verdicts, kube-proxy's kubeconfig and
/// what kube-proxy's requests passed through the wrapper need.
fn per_node_components(helm: &std::path::Path, all: &[Value]) {
    for name in ["grid-wrapper", "edge-health"] {
        let pod = &find(all, "DaemonSet", name)["spec"]["template"]["spec"];
        assert_eq!(pod["hostNetwork"], true, "{name}");
        assert_eq!(pod["nodeSelector"], json!({"node-role.kubernetes.io/edge": ""}), "{name}: on edge nodes");
        assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet", "{name}");
        assert_eq!(pod["tolerations"], json!([{"operator": "Exists"}]), "{name}: stays on unreachable nodes");
        assert_eq!(pod["securityContext"]["seccompProfile"], json!({"type": "RuntimeDefault"}), "{name}");
        let env = &pod["containers"][0]["env"];
        assert_eq!(env[0], json!({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}));
    }
    let wrapper = args(find(all, "DaemonSet", "grid-wrapper"));
    assert!(wrapper.contains(&"--bind-address=127.0.0.1:51006".to_string()), "{wrapper:?}");
    assert!(wrapper.contains(&"--edge-health-url=http://127.0.0.1:51005/verdicts".to_string()), "{wrapper:?}");
    let health = args(find(all, "DaemonSet", "edge-health"));
    for wanted in [
        "--bind-address=0.0.0.0:51005",
        "--hmac-key-file=/etc/edge-health/key",
        "--signing-key-file=/var/lib/edge-health/signing-key",
        "--peer-cache-file=/var/lib/edge-health/peers.json",
        "--check=kind=kubelet,port=10250,timeout=2s,retries=1,weight=1",
        "--kubelet-check-service-account=edgegrid/edge-health-kubelet-check",
    ] {
        assert!(health.contains(&wanted.to_string()), "{wanted} not in {health:?}");
    }
    // the kubelet check never sends the daemon's own token (the binary refuses it as
    // --token-file too); its account is bound to nodes/healthz alone, and its tokens are
    // edge-health's to ask for, no one else's
    assert!(!health.iter().any(|a| a.starts_with("--token-file")), "{health:?}");
    let account = find(all, "ServiceAccount", "edge-health-kubelet-check");
    assert_eq!(account["automountServiceAccountToken"], false);
    let check_binding = find(all, "ClusterRoleBinding", "edgegrid:edge-health-kubelet-check");
    assert_eq!(
        check_binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "edge-health-kubelet-check", "namespace": "edgegrid"}])
    );
    assert_eq!(find(all, "ClusterRole", "edgegrid:edge-health-kubelet-check")["rules"].as_array().unwrap().len(), 1);
    let token_binding = find(all, "RoleBinding", "edgegrid:edge-health-kubelet-check-token");
    assert_eq!(token_binding["metadata"]["namespace"], "edgegrid");
    assert_eq!(
        token_binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "edge-health", "namespace": "edgegrid"}])
    );
    let env = &find(all, "DaemonSet", "edge-health")["spec"]["template"]["spec"]["containers"][0]["env"];
    assert_eq!(env[1], json!({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}));
    let kubeconfig = find(all, "ConfigMap", "kube-proxy-grid-wrapper")["data"]["kubeconfig.conf"].as_str().unwrap();
    let kubeconfig: Value = serde_saphyr::from_str(kubeconfig).unwrap();
    assert_eq!(kubeconfig["clusters"][0]["cluster"]["server"], "http://127.0.0.1:51006");
    assert_eq!(kubeconfig["current-context"], "grid-wrapper");
    // kube-proxy's ServiceCIDR watches and Event POSTs go upstream with the wrapper's credentials
    let proxier = find(all, "ClusterRoleBinding", "edgegrid:grid-wrapper-node-proxier");
    assert_eq!(proxier["roleRef"]["name"], "system:node-proxier");
    assert_eq!(
        proxier["subjects"],
        json!([{"kind": "ServiceAccount", "name": "grid-wrapper", "namespace": "edgegrid"}])
    );

    // probes where the wrapper listens (loopback only), the daemon's on its exchange port
    let wrapper = &find(all, "DaemonSet", "grid-wrapper")["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(wrapper["livenessProbe"]["httpGet"], json!({"host": "127.0.0.1", "path": "/healthz", "port": 51006}));
    assert_eq!(wrapper["readinessProbe"]["httpGet"], json!({"host": "127.0.0.1", "path": "/readyz", "port": 51006}));
    // the saved view (--cache-dir) on a root-owned hostPath: root with nothing else
    assert_eq!(
        wrapper["securityContext"],
        json!({"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": false, "allowPrivilegeEscalation": false,
               "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}})
    );
    assert!(args(find(all, "DaemonSet", "grid-wrapper")).contains(&"--cache-dir=/var/lib/grid-wrapper".to_string()));
    assert_eq!(wrapper["volumeMounts"], json!([{"name": "cache", "mountPath": "/var/lib/grid-wrapper"}]));
    assert_eq!(
        find(all, "DaemonSet", "grid-wrapper")["spec"]["template"]["spec"]["volumes"],
        json!([{"name": "cache", "hostPath": {"path": "/var/lib/grid-wrapper", "type": "DirectoryOrCreate"}}])
    );
    let daemon = &find(all, "DaemonSet", "edge-health")["spec"]["template"]["spec"];
    let container = &daemon["containers"][0];
    assert_eq!(container["readinessProbe"]["httpGet"], json!({"path": "/readyz", "port": "exchange"}));
    assert_eq!(container["ports"][0], json!({"name": "exchange", "containerPort": 51005}));
    // the peer cache on the node: a root-owned hostPath, so the daemon runs as root (the
    // image's user is not) with nothing else
    assert_eq!(
        container["securityContext"],
        json!({"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": false, "allowPrivilegeEscalation": false,
               "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}})
    );
    let volume = daemon["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "state").unwrap();
    assert_eq!(volume["hostPath"], json!({"path": "/var/lib/edge-health", "type": "DirectoryOrCreate"}));
    let key = daemon["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "key").unwrap();
    assert_eq!(key["secret"]["secretName"], "edge-health-hmac");

    // the defaults: no kube-proxy wiring; nodes/healthz only for a kubelet check; a unit
    // label key instead of node units drops the ConfigMap Role
    let defaults = render(helm, &[]);
    assert!(!kind_names(&defaults).iter().any(|k| k.contains("node-proxier") || k.contains("kube-proxy")));
    assert!(!args(find(&defaults, "DaemonSet", "edge-health")).iter().any(|a| a.starts_with("--unit-label-key")));
    let other = render(
        helm,
        &[
            "--set-json",
            r#"edgeHealth.checks=["kind=tcp,port=22,timeout=1s"]"#,
            "--set",
            "edgeHealth.unitLabelKey=site",
            "--set",
            "gridWrapper.serviceAutonomy=false",
        ],
    );
    assert!(!kind_names(&other).iter().any(|k| k.contains("kubelet-check")), "no kubelet check: {other:?}");
    let other_args = args(find(&other, "DaemonSet", "edge-health"));
    assert!(!other_args.iter().any(|a| a.starts_with("--kubelet-check-service-account")), "{other_args:?}");
    assert!(has_rule(&other, "edgegrid:edge-health", "", "nodes", "patch"));
    assert!(!kind_names(&other).iter().any(|k| k.contains("edge-health-config")), "label-key mode reads no ConfigMap");
    // the cloud components protect only the nodes edge-health watches: same units as it
    let admission = args(find(&other, "Deployment", "edge-health-admission"));
    assert!(admission.contains(&"--unit-label-key=site".to_string()), "{admission:?}");
    let admission = args(find(&defaults, "Deployment", "edge-health-admission"));
    assert!(admission.contains(&"--unit-label-key=".to_string()), "node units: {admission:?}");
    assert!(admission.contains(&"--max-unreachable-protection=24h".to_string()), "a finite default: {admission:?}");
    let subjects = &find(&defaults, "RoleBinding", "edgegrid:edge-health-config")["subjects"];
    assert_eq!(
        subjects.as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect::<Vec<_>>(),
        ["edge-health", "edge-health-admission"],
        "the webhook reads the ConfigMap too (the node lifecycle controller is off by default)"
    );
    let without_daemons = render(helm, &["--set", "edgeHealth.enabled=false"]);
    let subjects = &find(&without_daemons, "RoleBinding", "edgegrid:edge-health-config")["subjects"];
    assert_eq!(
        subjects,
        &json!([{"kind": "ServiceAccount", "name": "edge-health-admission", "namespace": "edgegrid"}])
    );
    let health = args(find(&other, "DaemonSet", "edge-health"));
    assert!(health.contains(&"--unit-label-key=site".to_string()), "{health:?}");
    assert!(health.contains(&"--check=kind=tcp,port=22,timeout=1s".to_string()), "{health:?}");
    let wrapper = args(find(&other, "DaemonSet", "grid-wrapper"));
    assert!(!wrapper.iter().any(|a| a.starts_with("--edge-health-url")), "{wrapper:?}");
    // no saved view: no hostPath, and not root
    let uncached = render(helm, &["--set", "gridWrapper.cacheDir="]);
    let daemon = &find(&uncached, "DaemonSet", "grid-wrapper")["spec"]["template"]["spec"];
    assert!(!args(find(&uncached, "DaemonSet", "grid-wrapper")).iter().any(|a| a.starts_with("--cache-dir")));
    assert_eq!((&daemon["volumes"], &daemon["containers"][0]["volumeMounts"]), (&Value::Null, &Value::Null));
    assert_eq!(
        daemon["containers"][0]["securityContext"],
        json!({"runAsNonRoot": true, "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
               "capabilities": {"drop": ["ALL"]}})
    );
}

/// The cloud Deployments a compromised edge node must never attract (their tokens, Secrets
/// and the unit signer's key).
const CLOUD_DEPLOYMENTS: [&str; 4] = ["grid-controller", "edge-node-lifecycle", "edge-health-admission", "unit-signer"];

/// Every cloud Deployment runs only on nodes carrying `cloudNodeSelector`'s labels (the
/// control-plane role unless told otherwise), with the control-plane taint tolerated: keys
/// no kubelet may set on its own Node, so an edge node cannot relabel itself into
/// their placement. A component's own nodeSelector, affinity and tolerations add to
/// that; a key a kubelet could set is refused with the reason.
fn cloud_components_run_only_where_no_kubelet_can_label_itself(helm: &std::path::Path) {
    let every = [
        "--set",
        "nodeLifecycle.enabled=true",
        "--set",
        "gridWrapper.unitUpstream.enabled=true",
        "--set",
        "edgeHealth.unitLabelKey=site",
        "--set",
        "gridWrapper.unitUpstream.signerPublicKeys={AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=}",
        "--set",
        "unitSigner.signingKeySecret=unit-signer-key",
        "--set-json",
        EDGE_NODES,
    ];
    let pod = |objects: &[Value], name: &str| find(objects, "Deployment", name)["spec"]["template"]["spec"].clone();
    let control_plane =
        json!([{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]);
    let defaults = render(helm, &every);
    for name in CLOUD_DEPLOYMENTS {
        let pod = pod(&defaults, name);
        assert_eq!(pod["nodeSelector"], json!({"node-role.kubernetes.io/control-plane": ""}), "{name}");
        assert_eq!(pod["tolerations"], control_plane, "{name}");
        assert!(pod.get("affinity").is_none(), "{name}: {pod}");
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{name}");
    }
    // the operator's own label (managed Kubernetes: no control-plane nodes to run on), and
    // each component's own placement on top of it
    let own_affinity = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["cloud"]}]}
    ]}}});
    let own_toleration = json!({"key": "dedicated", "operator": "Equal", "value": "cloud", "effect": "NoSchedule"});
    let placed = render(
        helm,
        &[
            &every[..],
            &[
                "--set-json",
                r#"cloudNodeSelector={"node-restriction.kubernetes.io/edgegrid-cloud":"true"}"#,
                "--set-json",
                "cloudTolerations=[]",
                "--set-json",
                r#"unitSigner.nodeSelector={"disk":"ssd","node-restriction.kubernetes.io/edgegrid-cloud":"no"}"#,
                "--set-json",
                &format!("admission.affinity={own_affinity}"),
                "--set-json",
                &format!("gridController.tolerations=[{own_toleration}]"),
            ],
        ]
        .concat(),
    );
    for name in CLOUD_DEPLOYMENTS {
        let pod = pod(&placed, name);
        let selector = match name {
            // the cloud label wins over a component's own value for it
            "unit-signer" => json!({"node-restriction.kubernetes.io/edgegrid-cloud": "true", "disk": "ssd"}),
            _ => json!({"node-restriction.kubernetes.io/edgegrid-cloud": "true"}),
        };
        assert_eq!(pod["nodeSelector"], selector, "{name}");
        let tolerations = if name == "grid-controller" { json!([own_toleration]) } else { Value::Null };
        assert_eq!(pod["tolerations"], tolerations, "{name}");
        let affinity = if name == "edge-health-admission" { own_affinity.clone() } else { Value::Null };
        assert_eq!(pod["affinity"], affinity, "{name}");
    }
    // keys a kubelet may set on its own Node: refused, whichever Deployment renders first
    for key in ["zone1", "node-role.kubernetes.io.evil.com/cloud", "node.kubernetes.io/cloud", "edgegrid.io/cloud"] {
        let output = Command::new(helm)
            .args(["template", "edgegrid", "charts/edgegrid"])
            .args(every)
            .args(["--set-json", &format!(r#"cloudNodeSelector={{"{key}":"true"}}"#)])
            .current_dir(workspace_root())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        let says = format!("cloudNodeSelector key \"{key}\": a kubelet may set it on its own Node");
        assert!(!output.status.success() && stderr.contains(&says), "{key}: {stderr}");
    }
}

/// The values docs/migrating-from-superedge.md moves components with: each per-node
/// component's own labels on top of `edgeNodeSelector` (its own winning a shared key), and
/// the webhook configuration's name, which the self-managed certificate follows.
fn superedge_migration_values(helm: &std::path::Path) {
    let moved = render(
        helm,
        &[
            "--set-json",
            r#"edgeNodeSelector={"edge":"true","site":"a"}"#,
            "--set-json",
            r#"edgeHealth.nodeSelector={"edgegrid.io/edge-health":"edgegrid","site":"b"}"#,
            "--set",
            "admission.webhookConfigurationName=edgegrid-edge-health-admission",
        ],
    );
    let selector = |name: &str| find(&moved, "DaemonSet", name)["spec"]["template"]["spec"]["nodeSelector"].clone();
    assert_eq!(selector("edge-health"), json!({"edge": "true", "edgegrid.io/edge-health": "edgegrid", "site": "b"}));
    assert_eq!(selector("grid-wrapper"), json!({"edge": "true", "site": "a"}));
    let hooks: Vec<&Value> = moved.iter().filter(|o| o["kind"] == "MutatingWebhookConfiguration").collect();
    assert_eq!(hooks.len(), 1);
    assert_eq!(hooks[0]["metadata"]["name"], "edgegrid-edge-health-admission");
    let admission = args(find(&moved, "Deployment", "edge-health-admission"));
    assert!(
        admission.contains(&"--webhook-configuration-name=edgegrid-edge-health-admission".to_string()),
        "{admission:?}"
    );
    // and its RBAC reaches that configuration, and only that one
    assert_eq!(
        rule_names(
            &moved,
            "edgegrid:edge-health-admission",
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
            "patch"
        ),
        json!(["edgegrid-edge-health-admission"])
    );
    let bad = Command::new(helm)
        .args(["template", "edgegrid", "charts/edgegrid", "--set", "admission.webhookConfigurationName=Not_A_Name"])
        .current_dir(workspace_root())
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("/admission/webhookConfigurationName"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// The chart's MutatingWebhookConfiguration is the one the binary's code defines, in each
/// certificate mode.
fn admission_webhook(helm: &std::path::Path, all: &[Value]) {
    use edge_health_admission::configuration::{Endpoint, mutating_webhook_configuration};
    let endpoint = Endpoint::Service { namespace: "edgegrid".into(), name: "edge-health-admission".into(), port: 443 };
    let expected = |ca: Option<&[u8]>| {
        serde_json::to_value(mutating_webhook_configuration("edge-health-admission", &endpoint, ca)).unwrap()
    };
    let rendered = find(all, "MutatingWebhookConfiguration", "edge-health-admission");
    assert_eq!(rendered["webhooks"], expected(None)["webhooks"], "self-managed: the binary fills caBundle");
    let admission = args(find(all, "Deployment", "edge-health-admission"));
    assert!(admission.contains(&"--self-managed-certificates".to_string()), "{admission:?}");
    assert!(admission.contains(&"--certificate-secret=edgegrid/edge-health-admission-tls".to_string()));

    let ca = "LS0tLS1CRUdJTi1GQUtFLUNBLS0tLS0=";
    let with_secret = render(
        helm,
        &["--set", "admission.certificate.mode=secret", "--set", &format!("admission.certificate.caBundle={ca}")],
    );
    let rendered = find(&with_secret, "MutatingWebhookConfiguration", "edge-health-admission");
    assert_eq!(rendered["webhooks"], expected(Some(b"-----BEGIN-FAKE-CA-----"))["webhooks"]);
    let admission = args(find(&with_secret, "Deployment", "edge-health-admission"));
    assert!(admission.contains(&"--tls-cert-file=/etc/edge-health-admission/tls.crt".to_string()));
    assert!(!admission.iter().any(|a| a.starts_with("--self-managed-certificates")), "{admission:?}");
    // the same objects as self-managed but the Secret's Role and RoleBinding
    let self_managed: Vec<String> = kind_names(&render(helm, &[]))
        .into_iter()
        .filter(|k| !k.ends_with("edgegrid:edge-health-admission-certificates"))
        .collect();
    assert_eq!(kind_names(&with_secret), self_managed, "no Secret RBAC without self-management");
    assert!(!has_rule(
        &with_secret,
        "edgegrid:edge-health-admission",
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "patch"
    ));
    let mounted = |objects: &[Value], secret: &str| {
        let pod = &find(objects, "Deployment", "edge-health-admission")["spec"]["template"]["spec"];
        assert_eq!(pod["volumes"], json!([{"name": "tls", "secret": {"secretName": secret}}]));
        assert_eq!(
            pod["containers"][0]["volumeMounts"],
            json!([{"name": "tls", "mountPath": "/etc/edge-health-admission", "readOnly": true}])
        );
    };
    mounted(&with_secret, "edge-health-admission-tls");

    let with_cert_manager = render(
        helm,
        &[
            "--set",
            "admission.certificate.mode=certManager",
            "--set",
            "admission.certificate.certManagerCertificate=edgegrid/edge-health-admission",
        ],
    );
    let rendered = find(&with_cert_manager, "MutatingWebhookConfiguration", "edge-health-admission");
    assert_eq!(rendered["metadata"]["annotations"]["cert-manager.io/inject-ca-from"], "edgegrid/edge-health-admission");
    assert_eq!(rendered["webhooks"], expected(None)["webhooks"], "cert-manager fills caBundle");
    assert_eq!(kind_names(&with_cert_manager), self_managed);
    mounted(&with_cert_manager, "edge-health-admission-tls");
    for objects in [&with_secret, &with_cert_manager] {
        for object in objects.iter() {
            typed(object);
        }
    }

    let refused = Command::new(helm)
        .args(["template", "edgegrid", "charts/edgegrid", "--set", "admission.certificate.mode=secret"])
        .current_dir(workspace_root())
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("admission.certificate.caBundle"), "a clear message");
}

/// The unit's HMAC key: generated (32+ bytes) when not given, the given one used as is, a
/// short one refused.
fn hmac_key(helm: &std::path::Path, all: &[Value]) {
    let key = |objects: &[Value]| {
        let encoded = find(objects, "Secret", "edge-health-hmac")["data"]["key"].as_str().unwrap().to_string();
        let output = Command::new("base64").arg("-d").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().and_then(
            |mut child| {
                child.stdin.take().unwrap().write_all(encoded.as_bytes())?;
                child.wait_with_output()
            },
        );
        String::from_utf8(output.unwrap().stdout).unwrap()
    };
    assert!(key(all).len() >= 32, "generated: {:?}", key(all));
    let given = "a unit key of at least thirty-two bytes for the chart test";
    assert_eq!(key(&render(helm, &["--set", &format!("edgeHealth.hmacKey={given}")])), given);
    let short = Command::new(helm)
        .args(["template", "edgegrid", "charts/edgegrid", "--set", "edgeHealth.hmacKey=short"])
        .current_dir(workspace_root())
        .output()
        .unwrap();
    assert!(!short.status.success());
    let stderr = String::from_utf8_lossy(&short.stderr);
    assert!(stderr.contains("at '/edgeHealth/hmacKey': 'short' does not match pattern"), "{stderr}");
}

/// The edge-health node restriction is the policy and binding the tests evaluate
/// (`tests/edge_health_node_policy.rs`, from the same file), on unless switched off.
fn node_restriction_policy(helm: &std::path::Path, all: &[Value]) {
    let [policy, binding] = edgegrid_testing::chart::edge_health_node_policy("edgegrid", "cloud");
    for expected in [policy, binding] {
        let mut rendered =
            find(all, expected["kind"].as_str().unwrap(), expected["metadata"]["name"].as_str().unwrap()).clone();
        assert_eq!(rendered["metadata"]["labels"]["app.kubernetes.io/name"], "edge-health");
        rendered["metadata"].as_object_mut().unwrap().remove("labels");
        assert_eq!(rendered, expected);
    }
    for off in ["edgeHealth.nodeRestrictionPolicy=false", "edgeHealth.enabled=false"] {
        let kinds = kind_names(&render(helm, &["--set", off]));
        assert!(
            !kinds.iter().any(|k| k.ends_with(edgegrid_testing::chart::EDGE_HEALTH_NODE_POLICY)),
            "{off}: {kinds:?}"
        );
    }
}

/// The unit label restriction, rendered as the tests evaluate it (`tests/unit_label_policy.rs`,
/// from the same file): on by default, keeping the unit label key and the grids' keys
/// named in `unitLabelPolicy.labelKeys` (none without a unit label key: SuperEdge's node
/// units, which the policy keeps whatever the keys).
fn unit_label_policy(helm: &std::path::Path, all: &[Value]) {
    use edgegrid_testing::chart::{UNIT_LABEL_POLICY, unit_label_policy};
    let cases: [(&[&str], Vec<Value>); 2] = [
        (&[], all.to_vec()),
        (
            &["site", "zone1"],
            render(
                helm,
                &["--set", "edgeHealth.unitLabelKey=zone1", "--set", "unitLabelPolicy.labelKeys={site,zone1}"],
            ),
        ),
    ];
    for (keys, objects) in cases {
        for expected in unit_label_policy(keys) {
            let mut rendered = find(&objects, expected["kind"].as_str().unwrap(), UNIT_LABEL_POLICY).clone();
            assert_eq!(rendered["metadata"]["labels"]["app.kubernetes.io/name"], "unit-label-policy");
            rendered["metadata"].as_object_mut().unwrap().remove("labels");
            assert_eq!(rendered, expected, "{keys:?}");
        }
    }
    let kinds = kind_names(&render(helm, &["--set", "unitLabelPolicy.enabled=false"]));
    assert!(!kinds.iter().any(|k| k.ends_with(UNIT_LABEL_POLICY)), "{kinds:?}");
}

/// The kubelet-check token bound, rendered as the tests evaluate it
/// (`tests/kubelet_check_token_policy.rs`), with the kubelet-check account it bounds: with
/// a kind=kubelet check (the default), not without one.
fn kubelet_check_token_policy(helm: &std::path::Path, all: &[Value]) {
    use edgegrid_testing::chart::{KUBELET_CHECK_TOKEN_POLICY, kubelet_check_token_policy};
    for expected in kubelet_check_token_policy("edgegrid") {
        let mut rendered = find(all, expected["kind"].as_str().unwrap(), KUBELET_CHECK_TOKEN_POLICY).clone();
        assert_eq!(rendered["metadata"]["labels"]["app.kubernetes.io/name"], "edge-health");
        rendered["metadata"].as_object_mut().unwrap().remove("labels");
        assert_eq!(rendered, expected);
    }
    let http = render(helm, &["--set-json", r#"edgeHealth.checks=["kind=http,port=10248,timeout=1s"]"#]);
    let kinds = kind_names(&http);
    assert!(
        !kinds.iter().any(|k| k.ends_with(KUBELET_CHECK_TOKEN_POLICY) || k.ends_with("edge-health-kubelet-check")),
        "{kinds:?}"
    );
}

/// One upstream per unit: off by default; on, the wrapper gets the unit label, its peer
/// port and edge-health's key (read-only), and runs as root to read it; without what it
/// needs the chart refuses to render, saying what is missing.
fn unit_upstream(helm: &std::path::Path, all: &[Value]) {
    let wrapper = args(find(all, "DaemonSet", "grid-wrapper"));
    assert!(!wrapper.iter().any(|a| a.starts_with("--unit-")), "off by default: {wrapper:?}");
    const SIGNER_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    let signer_keys = format!("gridWrapper.unitUpstream.signerPublicKeys={{{SIGNER_KEY}}}");
    let on = [
        "--set",
        "gridWrapper.unitUpstream.enabled=true",
        "--set",
        "edgeHealth.unitLabelKey=site",
        "--set",
        &signer_keys,
        "--set",
        "unitSigner.signingKeySecret=unit-signer-key",
    ];
    // the unit's members come from edge-health, whatever service autonomy says
    let shared = render(
        helm,
        &[&on[..], &["--set", "gridWrapper.cacheDir=", "--set", "gridWrapper.serviceAutonomy=false"]].concat(),
    );
    let daemon = &find(&shared, "DaemonSet", "grid-wrapper")["spec"]["template"]["spec"];
    let wrapper = args(find(&shared, "DaemonSet", "grid-wrapper"));
    for arg in [
        "--unit-label-key=site",
        "--unit-upstream-bind-address=0.0.0.0:51010",
        "--node-key-file=/var/lib/edge-health/signing-key",
        "--edge-health-url=http://127.0.0.1:51005/verdicts",
        &format!("--unit-vouch-keys={SIGNER_KEY}"),
    ] {
        assert!(wrapper.contains(&arg.to_string()), "{arg}: {wrapper:?}");
    }
    // vouched: the signer runs in the cloud with its key, the wrappers read its ConfigMap
    let signer = find(&shared, "Deployment", "unit-signer");
    let signer_args = args(signer);
    for arg in ["--signing-key-file=/etc/unit-signer/signing-key", "--unit-label-key=site", "--leader-elect=true"] {
        assert!(signer_args.contains(&arg.to_string()), "{arg}: {signer_args:?}");
    }
    assert_eq!(
        signer["spec"]["template"]["spec"]["volumes"],
        json!([{"name": "signing-key", "secret": {"secretName": "unit-signer-key", "defaultMode": 0o400,
                "items": [{"key": "signing-key", "path": "signing-key"}]}}])
    );
    assert_eq!(
        find(&shared, "Role", "edgegrid:grid-wrapper-unit-digests")["rules"],
        json!([{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["edgegrid-unit-digests"],
                "verbs": ["list", "watch"]}])
    );
    // not vouched (the operator's choice): no signer, no check
    let trusting = render(helm, &[&on[..], &["--set", "gridWrapper.unitUpstream.vouched=false"]].concat());
    assert!(!trusting.iter().any(|o| o["metadata"]["name"] == "unit-signer"));
    let wrapper_trusting = args(find(&trusting, "DaemonSet", "grid-wrapper"));
    assert!(!wrapper_trusting.iter().any(|a| a.starts_with("--unit-vouch")), "{wrapper_trusting:?}");
    // vouched without the signer's keys: refused, saying how to make them
    let keyless = Command::new(helm)
        .args(["template", "edgegrid", "charts/edgegrid"])
        .args(&on[..4])
        .current_dir(workspace_root())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&keyless.stderr);
    assert!(
        !keyless.status.success()
            && stderr.contains("gridWrapper.unitUpstream.vouched needs gridWrapper.unitUpstream.signerPublicKeys"),
        "{stderr}"
    );
    assert_eq!(
        daemon["containers"][0]["volumeMounts"],
        json!([{"name": "edge-health-state", "mountPath": "/var/lib/edge-health", "readOnly": true}])
    );
    assert_eq!(
        daemon["volumes"],
        json!([{"name": "edge-health-state", "hostPath": {"path": "/var/lib/edge-health", "type": "DirectoryOrCreate"}}])
    );
    assert_eq!(daemon["containers"][0]["securityContext"]["runAsUser"], json!(0));
    assert!(
        daemon["containers"][0]["ports"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "unit-upstream", "containerPort": 51010}))
    );
    for missing in [
        &["--set", "gridWrapper.unitUpstream.enabled=true"][..],
        &[&on[..], &["--set", "edgeHealth.enabled=false"]].concat(),
    ] {
        let output = Command::new(helm)
            .args(["template", "edgegrid", "charts/edgegrid"])
            .args(missing)
            .current_dir(workspace_root())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success()
                && stderr
                    .contains("gridWrapper.unitUpstream.enabled needs edgeHealth.enabled and edgeHealth.unitLabelKey"),
            "{missing:?}: {stderr}"
        );
    }
    // hostNetwork: two components on one port would crash-loop on every node
    let clash = Command::new(helm)
        .args(["template", "edgegrid", "charts/edgegrid"])
        .args([&on[..], &["--set", "gridWrapper.unitUpstream.port=51008"]].concat())
        .current_dir(workspace_root())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&clash.stderr);
    assert!(
        !clash.status.success() && stderr.contains("their ports must differ, got [51006 51007 51005 51008 51008]"),
        "{stderr}"
    );
}

/// `values.schema.json` (generated from xtask's `chart_values`) refuses values that cannot
/// work, naming the value.
fn bad_values_are_refused(helm: &std::path::Path) {
    for (value, says) in [
        (
            "nodeLifecycle.args.nodeMonitorPeriod=5",
            "at '/nodeLifecycle/args/nodeMonitorPeriod': got number, want string",
        ),
        (
            "nodeLifecycle.args.nodeMonitorPeriod=5 seconds",
            "at '/nodeLifecycle/args/nodeMonitorPeriod': '5 seconds' does not match pattern",
        ),
        ("image.registry=", "at '/image/registry': minLength: got 0, want 1"),
        ("gridWrapper.prot=1", "at '/gridWrapper': additional properties 'prot' not allowed"),
        ("gridWrapper.cacheDir=var/lib", "at '/gridWrapper/cacheDir': 'var/lib' does not match pattern"),
        ("edgeHealth.port=0", "at '/edgeHealth/port': minimum: got 0, want 1"),
        ("admission.certificate.mode=manual", "at '/admission/certificate/mode'"),
        ("admission.replicas=0", "at '/admission/replicas': minimum: got 0, want 1"),
    ] {
        let output = Command::new(helm)
            .args(["template", "edgegrid", "charts/edgegrid", "--set", value])
            .current_dir(workspace_root())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success() && stderr.contains(says), "{value}: {stderr}");
    }
}

/// Every image the chart runs is a binary of this workspace that the Containerfile builds
/// (`<registry>/<binary>:<tag>`, one image per binary).
fn images_are_built_here(all: &[Value]) {
    let containerfile = std::fs::read_to_string(workspace_root().join("Containerfile")).unwrap();
    let built = containerfile.lines().find(|l| l.starts_with("#   for b in")).expect("the build loop").to_string();
    for workload in all.iter().filter(|o| matches!(o["kind"].as_str(), Some("Deployment" | "DaemonSet"))) {
        let image = workload["spec"]["template"]["spec"]["containers"][0]["image"].as_str().unwrap();
        let binary = image.rsplit('/').next().and_then(|n| n.split(':').next()).unwrap();
        assert!(image.starts_with("ghcr.io/edgegrid/") && image.ends_with(":test"), "{image}");
        let main = workspace_root().join("crates").join(binary).join("src/main.rs");
        assert!(main.exists(), "{image}: no binary crate {binary}");
        let built_here = built.split_whitespace().any(|b| b.trim_end_matches(';') == binary);
        assert!(built_here, "the Containerfile does not build {binary}");
    }
}

/// `helm install`'s notes, rendered offline (`--dry-run=client`).
fn install_notes(helm: &std::path::Path, extra: &[&str]) -> String {
    let text = helm_run(helm, "install", &["--dry-run=client"], extra);
    text.split_once("\nNOTES:\n").map(|(_, notes)| notes.to_string()).expect("notes")
}

/// A unit of two protects nobody unless the operator opts in: the install notes say so
/// either way, and the opt-in reaches both places the vote is counted (every daemon and
/// the cloud's verdict writer), never one without the other.
#[test]
fn units_of_two_are_an_explicit_opt_in() {
    let Some([helm]) = tools("units_of_two_are_an_explicit_opt_in", ["helm"]) else { return };
    let flag = "--allow-units-of-two".to_string();
    let defaults = render(&helm, &[]);
    assert!(!args(find(&defaults, "DaemonSet", "edge-health")).contains(&flag));
    assert!(!args(find(&defaults, "Deployment", "edge-health-admission")).contains(&flag));
    let notes = install_notes(&helm, &[]);
    assert!(notes.contains("Units of two members protect nobody"), "{notes}");
    assert!(notes.contains("edgeHealth.allowUnitsOfTwo=true"), "{notes}");
    assert!(!notes.contains("WARNING"), "{notes}");

    let opted = render(&helm, &["--set", "edgeHealth.allowUnitsOfTwo=true"]);
    assert!(args(find(&opted, "DaemonSet", "edge-health")).contains(&flag));
    assert!(args(find(&opted, "Deployment", "edge-health-admission")).contains(&flag));
    let notes = install_notes(&helm, &["--set", "edgeHealth.allowUnitsOfTwo=true"]);
    assert!(notes.contains("WARNING: edgeHealth.allowUnitsOfTwo is true"), "{notes}");
    assert!(notes.contains("a compromised member can keep its dead partner protected"), "{notes}");
}
