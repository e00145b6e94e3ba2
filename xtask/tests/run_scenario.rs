//! `cargo xtask run --scenario` end to end: the real xtask binary starts the local cluster
//! with every component binary (built by `cargo test --workspace` next to it), plays the
//! three acts and exits 0; its tables are exactly these, and its output is its own lines
//! in plain text (the components' errors are in their log files). A stale `KUBECONFIG` of
//! an earlier run is left exported, as a user would leave it: the run must say it ignores
//! it. A cluster left running shows through the API what kubectl would show: workload
//! status, grid readiness, node versions and Events consistent with the demo's pods.
//!
//! `cargo test -p xtask` alone does not build the component binaries, so these tests never
//! skip for want of them: outside CI they build what is missing, as `cargo xtask run`
//! does; under CI, which runs the workspace's tests, a missing binary fails them.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use edgegrid_testing::StopOnDrop;

const COMPONENTS: [&str; 5] =
    ["grid-wrapper", "unit-signer", "edge-health", "edge-health-admission", "edge-node-lifecycle"];

const UNIT_VIEWS: &str = "\
What each node's kube-proxy gets from its grid wrapper:
UNIT     NODE       SERVICE            READY ENDPOINTS (pod@node)
unit-a   edge-a-0   default/echo-svc   echo-unit-a-0@edge-a-0 echo-unit-a-1@edge-a-1
unit-a   edge-a-1   default/echo-svc   echo-unit-a-0@edge-a-0 echo-unit-a-1@edge-a-1
unit-a   edge-a-2   default/echo-svc   echo-unit-a-0@edge-a-0 echo-unit-a-1@edge-a-1
unit-b   edge-b-0   default/echo-svc   echo-unit-b-0@edge-b-0 echo-unit-b-1@edge-b-1
unit-b   edge-b-1   default/echo-svc   echo-unit-b-0@edge-b-0 echo-unit-b-1@edge-b-1
unit-b   edge-b-2   default/echo-svc   echo-unit-b-0@edge-b-0 echo-unit-b-1@edge-b-1
";

const ACT_ONE_STATES: &str = "\
What the cloud says of each node:
NODE       UNIT     READY   NODEUNHEALTH   TAINTS   PODS READY
edge-a-0   unit-a   True    -              -        2/2
edge-a-1   unit-a   True    -              -        1/1
edge-a-2   unit-a   True    -              -        0/0
edge-b-0   unit-b   True    -              -        2/2
edge-b-1   unit-b   True    -              -        2/2
edge-b-2   unit-b   True    -              -        1/1
=> as expected
";

const ACT_TWO_STATES: &str = "\
What the cloud says of each node:
NODE       UNIT     READY     NODEUNHEALTH   TAINTS                   PODS READY
edge-a-0   unit-a   True      -              -                        2/2
edge-a-1   unit-a   True      -              -                        1/1
edge-a-2   unit-a   True      -              -                        0/0
edge-b-0   unit-b   Unknown   -              unreachable:NoSchedule   2/2
edge-b-1   unit-b   Unknown   -              unreachable:NoSchedule   2/2
edge-b-2   unit-b   Unknown   -              unreachable:NoSchedule   1/1
=> as expected
";

const ACT_THREE: &str = "\
What each node's kube-proxy gets from its grid wrapper:
UNIT     NODE       SERVICE            READY ENDPOINTS (pod@node)
unit-a   edge-a-0   default/echo-svc   echo-unit-a-0@edge-a-0
unit-a   edge-a-1   -                  (node down: no wrapper)
unit-a   edge-a-2   default/echo-svc   echo-unit-a-0@edge-a-0
unit-b   edge-b-0   default/echo-svc   echo-unit-b-0@edge-b-0 echo-unit-b-1@edge-b-1
unit-b   edge-b-1   default/echo-svc   echo-unit-b-0@edge-b-0 echo-unit-b-1@edge-b-1
unit-b   edge-b-2   default/echo-svc   echo-unit-b-0@edge-b-0 echo-unit-b-1@edge-b-1
What the cloud says of each node:
NODE       UNIT     READY     NODEUNHEALTH   TAINTS                                         PODS READY
edge-a-0   unit-a   True      undecided      -                                              2/2
edge-a-1   unit-a   Unknown   yes            unreachable:NoExecute,unreachable:NoSchedule   0/1
edge-a-2   unit-a   True      undecided      -                                              0/0
edge-b-0   unit-b   True      -              -                                              2/2
edge-b-1   unit-b   True      -              -                                              2/2
edge-b-2   unit-b   True      -              -                                              1/1
=> as expected
";

/// The lines of `text` logged at ERROR level (`<time> ERROR <target>: ...`).
fn error_lines(text: &str) -> Vec<&str> {
    text.lines().filter(|line| line.split_whitespace().nth(1) == Some("ERROR")).collect()
}

/// The part of `output` from `header` to the next act (or the end).
fn act<'a>(output: &'a str, header: &str) -> &'a str {
    let start = output.find(header).unwrap_or_else(|| panic!("no {header:?} in:\n{output}"));
    let rest = &output[start + header.len()..];
    &rest[..rest.find("\n== Act").unwrap_or(rest.len())]
}

/// The xtask binary, with the component binaries next to it (built here, once, if they
/// are missing outside CI).
fn xtask() -> &'static Path {
    static BUILT: OnceLock<()> = OnceLock::new();
    let xtask = Path::new(env!("CARGO_BIN_EXE_xtask"));
    let dir = xtask.parent().expect("the binaries' directory");
    let missing = || -> Vec<&str> { COMPONENTS.iter().copied().filter(|b| !dir.join(b).is_file()).collect() };
    BUILT.get_or_init(|| {
        let absent = missing();
        if absent.is_empty() {
            return;
        }
        let why = format!("{absent:?} not built in {}", dir.display());
        assert!(std::env::var_os("CI").is_none_or(|v| v.is_empty()), "{why}: `cargo test --workspace` builds them");
        eprintln!("{why}: building them (`cargo test -p xtask` alone does not)");
        // what `cargo xtask run` does without --no-build, in this test's profile
        let mut build = Command::new(env!("CARGO"));
        build.current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).args(["build", "--quiet", "--locked"]);
        for component in COMPONENTS {
            build.args(["-p", component]);
        }
        if !cfg!(debug_assertions) {
            build.arg("--release");
        }
        assert!(build.status().expect("runs cargo build").success(), "building {absent:?} failed");
    });
    let absent = missing();
    assert!(absent.is_empty(), "{absent:?} still missing in {}", dir.display());
    xtask
}

#[test]
fn the_scenario_plays_the_three_acts_as_expected() {
    let xtask = xtask();
    let scratch = std::env::temp_dir().join(format!("xtask-scenario-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch directory");
    let stale = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/edgegrid-local/kubeconfig-of-a-stopped-run");
    let output = Command::new(xtask)
        .args(["run", "--scenario", "--no-build", "--kubeconfig-out"])
        .arg(scratch.join("kubeconfig"))
        .env("KUBECONFIG", &stale)
        .output()
        .expect("runs xtask");
    let _ = std::fs::remove_dir_all(&scratch);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", output.status);
    // its own lines only, plain text on a pipe: no colour codes, nobody's log lines...
    for (stream, text) in [("stdout", &stdout), ("stderr", &stderr)] {
        assert!(!text.contains("\x1b["), "an ANSI escape in its {stream}:\n{text}");
        assert_eq!(error_lines(text), Vec::<&str>::new(), "log lines in its {stream}");
    }
    // ...which are in the log files of the directory its first line names
    let first = stdout.lines().next().unwrap_or_default();
    let logs = first.strip_prefix("logs: ").and_then(|l| l.split(" (").next()).map(PathBuf::from);
    let logs = logs.unwrap_or_else(|| panic!("no log directory in its first line: {first:?}"));
    let read = |file: &str| std::fs::read_to_string(logs.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    // act 2 cuts unit-b's link: its daemons' calls to the API server fail
    let daemon = read("edge-health-edge-b-0.log");
    assert!(error_lines(&daemon).iter().any(|l| l.contains("kube_client")), "{daemon}");
    // act 3 reads the dead node's grid wrapper: the in-process client cannot connect
    let in_process = read("local-cluster.log");
    assert!(error_lines(&in_process).iter().any(|l| l.contains("client error (Connect)")), "{in_process}");
    assert!(
        stderr.contains(&format!(
            "note: ignoring KUBECONFIG={} (written by an earlier `cargo xtask run`)",
            stale.display()
        )),
        "{stderr}"
    );
    let one = act(&stdout, "== Act 1: each node's kube-proxy sees only its own unit's endpoints of default/echo-svc\n");
    assert_eq!(one, format!("{UNIT_VIEWS}{ACT_ONE_STATES}"), "act 1");
    let two = act(&stdout, "== Act 2: site unit-b loses its cloud link (its leases stop; its nodes go Unknown)\n");
    let back = "\n   (the link comes back: the site's kubelets report Ready again)";
    assert_eq!(two, format!("{UNIT_VIEWS}{ACT_TWO_STATES}{back}"), "act 2");
    let three =
        act(&stdout, "== Act 3: node edge-a-1 dies (kubelet, grid wrapper and edge-health gone); its unit votes\n");
    let (tables, summary) = three.split_at(three.find("\nThe admission webhook reviewed: ").unwrap_or(three.len()));
    assert_eq!(tables, ACT_THREE, "act 3");
    // how many reviews depends on timing; that the slice update marking edge-a-1's
    // endpoint not ready was reviewed and left alone (its node was voted unhealthy) does not
    let lines: Vec<&str> = summary.lines().collect();
    let counts = lines.get(1).and_then(|l| l.strip_prefix("The admission webhook reviewed: ")).unwrap_or_default();
    assert!(counts.split(", ").any(|c| c.starts_with("endpointslice unchanged: ")), "{summary}");
    // every binary's API calls were allowed by the chart's RBAC table, and every binary made some
    let rbac = lines.get(2).copied().unwrap_or_default();
    let callers =
        "from edge-health, edge-health-admission, edge-node-lifecycle, grid-controller, grid-wrapper; all allowed";
    assert!(rbac.starts_with("API calls checked against the chart's RBAC (xtask/src/rbac.rs): "), "{summary}");
    assert!(rbac.ends_with(callers), "{summary}");
    assert_eq!(&lines[3..], ["Every act went as expected.", "stopping..."], "{summary}");
}

/// The `(type, status, reason)` of each condition in `conditions` (a status's JSON).
fn conditions(status: &serde_json::Value) -> Vec<(String, String, String)> {
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    let list = status["conditions"].as_array().cloned().unwrap_or_default();
    list.iter().map(|c| (text(&c["type"]), text(&c["status"]), text(&c["reason"]))).collect()
}

fn triples(expected: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    expected.iter().map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string())).collect()
}

/// What `kubectl get deploy,rs,sts,dg,ssg,nodes,events` reads from the running local
/// cluster (as JSON, through the API): the workloads' status says their pods run ready,
/// with the conditions the controllers write; the grids count their units ready; every
/// node reports the control plane's kubelet version; and the Events of a quiet start are
/// there, each from the component that would record it, about the object it concerns.
async fn shows_what_a_real_cluster_would(kubeconfig: &Path) {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
    use k8s_openapi::api::core::v1::{Event, Node};
    use kube::api::{Api, DynamicObject, ListParams};

    let client = client_for(kubeconfig).await;
    let all = ListParams::default();

    // the status is written by the stand-ins' next pass, the grids' by the grid controller's
    // reconcile it triggers: give both a few seconds
    let deadline = Instant::now() + Duration::from_secs(30);

    loop {
        let dg = Api::<DynamicObject>::namespaced_with(
            client.clone(),
            "default",
            &grid_resource("deploymentgrids", "DeploymentGrid"),
        )
        .get("echo")
        .await
        .expect("the DeploymentGrid");
        let ssg = Api::<DynamicObject>::namespaced_with(
            client.clone(),
            "default",
            &grid_resource("statefulsetgrids", "StatefulSetGrid"),
        )
        .get("cache")
        .await
        .expect("the StatefulSetGrid");
        let ready = |g: &DynamicObject| g.data["status"]["readyUnits"].as_i64();
        if (ready(&dg), ready(&ssg)) == (Some(2), Some(2)) {
            break;
        }
        assert!(Instant::now() < deadline, "grids not ready: {:?} {:?}", dg.data["status"], ssg.data["status"]);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let deployments = Api::<Deployment>::namespaced(client.clone(), "default").list(&all).await.expect("deployments");
    let replica_sets = Api::<ReplicaSet>::namespaced(client.clone(), "default").list(&all).await.expect("replicasets");
    let mut names = Vec::new();
    for deployment in &deployments {
        let name = deployment.metadata.name.clone().unwrap_or_default();
        let status = serde_json::to_value(&deployment.status).expect("json");
        let counts: Vec<i64> = ["replicas", "updatedReplicas", "readyReplicas", "availableReplicas"]
            .iter()
            .map(|k| status[*k].as_i64().unwrap_or(0))
            .collect();
        assert_eq!(counts, [2, 2, 2, 2], "{name}: {status}");
        assert_eq!(status["observedGeneration"].as_i64(), deployment.metadata.generation, "{name}");
        assert_eq!(
            conditions(&status),
            triples(&[
                ("Available", "True", "MinimumReplicasAvailable"),
                ("Progressing", "True", "NewReplicaSetAvailable")
            ]),
            "{name}"
        );
        let owned: Vec<&ReplicaSet> = replica_sets
            .iter()
            .filter(|rs| {
                rs.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.uid == deployment.metadata.uid.clone().unwrap_or_default())
            })
            .collect();
        assert_eq!(owned.len(), 1, "{name}: one ReplicaSet");
        let rs_status = owned[0].status.clone().expect("a ReplicaSet status");
        assert_eq!(
            (rs_status.replicas, rs_status.ready_replicas, rs_status.available_replicas),
            (2, Some(2), Some(2)),
            "{name}"
        );
        names.push((name, owned[0].metadata.name.clone().unwrap_or_default()));
    }
    names.sort();
    assert_eq!(names.iter().map(|(d, _)| d.as_str()).collect::<Vec<_>>(), ["echo-unit-a", "echo-unit-b"]);

    let sets = Api::<StatefulSet>::namespaced(client.clone(), "default").list(&all).await.expect("statefulsets");
    let mut ready: Vec<(String, i32, Option<i32>, Option<i32>)> = sets
        .iter()
        .map(|s| {
            let status = s.status.clone().unwrap_or_default();
            assert_eq!(status.current_revision, status.update_revision, "{:?}", s.metadata.name);
            (
                s.metadata.name.clone().unwrap_or_default(),
                status.replicas,
                status.ready_replicas,
                status.available_replicas,
            )
        })
        .collect();
    ready.sort();
    assert_eq!(
        ready,
        [("cache-unit-a".to_string(), 1, Some(1), Some(1)), ("cache-unit-b".to_string(), 3, Some(3), Some(3))]
    );

    let version = client.apiserver_version().await.expect("the version").git_version;
    for node in Api::<Node>::all(client.clone()).list(&all).await.expect("nodes") {
        let info = node.status.as_ref().and_then(|s| s.node_info.clone()).expect("nodeInfo");
        assert_eq!((info.kubelet_version.as_str(), info.operating_system.as_str()), (version.as_str(), "linux"));
    }

    // as `kubectl get events -A` reads them: v1, with the source component and the object
    let events = Api::<Event>::all(client.clone()).list(&all).await.expect("events").items;
    let seen = |reason: &str, component: &str, kind: &str| {
        events
            .iter()
            .filter(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.reporting_component.as_deref() == Some(component)
                    && e.involved_object.kind.as_deref() == Some(kind)
            })
            .count()
    };
    let nodes = 6;
    for reason in [
        "Starting",
        "NodeHasSufficientMemory",
        "NodeHasNoDiskPressure",
        "NodeHasSufficientPID",
        "NodeAllocatableEnforced",
    ] {
        assert_eq!(seen(reason, "kubelet", "Node"), nodes, "{reason}");
    }
    // echo: 2 units x 2 pods; cache: 1 + 3; the grid wrappers' 6 host-network pods
    let pods = 4 + 4 + 6;
    assert_eq!(seen("Scheduled", "default-scheduler", "Pod"), pods);
    for reason in ["Pulled", "Created", "Started"] {
        assert_eq!(seen(reason, "kubelet", "Pod"), pods, "{reason}");
    }
    assert_eq!(seen("ScalingReplicaSet", "deployment-controller", "Deployment"), 2);
    assert_eq!(seen("SuccessfulCreate", "replicaset-controller", "ReplicaSet"), 4);
    assert_eq!(seen("SuccessfulCreate", "statefulset-controller", "StatefulSet"), 4);
    let message = |reason: &str, object: &str| {
        events
            .iter()
            .find(|e| e.reason.as_deref() == Some(reason) && e.involved_object.name.as_deref() == Some(object))
            .and_then(|e| e.message.clone())
            .unwrap_or_default()
    };
    let (deployment, replica_set) = &names[0];
    assert_eq!(message("ScalingReplicaSet", deployment), format!("Scaled up replica set {replica_set} from 0 to 2"));
    assert_eq!(message("Scheduled", "echo-unit-a-0"), "Successfully assigned default/echo-unit-a-0 to edge-a-0");
    let started = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("Started") && e.involved_object.name.as_deref() == Some("echo-unit-a-0"))
        .expect("echo-unit-a-0 started");
    assert_eq!(started.involved_object.field_path.as_deref(), Some("spec.containers{echo}"));
    assert_eq!(started.source.as_ref().and_then(|s| s.host.as_deref()), Some("edge-a-0"));
}

/// SuperEdge's own grid samples (`tests/superedge/samples`) and its docs' canary
/// DeploymentGrid (`templatePool` only, no `template`), applied to the running local
/// cluster, give what SuperEdge's controller generates (its `CreateService`,
/// `CreateDeployment`, `CreateStatefulSet`): `{grid}-svc` with the grid's selector labels
/// and `topologyKeys`, and `{grid}-{unit}` per unit whose spec is the unit's template with
/// the unit's nodeSelector added. Their `gridUniqKey: zone` (and the canary's per-unit
/// `templates` keys) name the local cluster's `zone1` units instead: the one substitution.
async fn superedge_s_grids_generate_what_superedge_generates(kubeconfig: &Path) {
    use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
    use k8s_openapi::api::core::v1::Service;
    use kube::api::{Api, DynamicObject, Patch, PatchParams};
    use serde_json::{Value, json};

    let client = client_for(kubeconfig).await;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace");
    let read = |path: &str| {
        let text = std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        let text = text.replace("gridUniqKey: zone\n", "gridUniqKey: zone1\n");
        let text =
            text.replace("    zone1: test1", "    unit-a: test1").replace("    zone2: test2", "    unit-b: test2");
        serde_saphyr::from_str::<Value>(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "superedge-canary"}});
    let apply = PatchParams::apply("superedge-samples");
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .patch("superedge-canary", &apply, &Patch::Apply(&namespace))
        .await
        .expect("namespace");
    let mut canary = read("tests/superedge/docs/deploymentgrid-templatepool.yaml");
    canary["metadata"]["namespace"] = json!("superedge-canary");
    let grids = [
        ("servicegrids", "ServiceGrid", read("tests/superedge/samples/servicegrid.yaml")),
        ("deploymentgrids", "DeploymentGrid", read("tests/superedge/samples/deploygrid.yaml")),
        ("statefulsetgrids", "StatefulSetGrid", read("tests/superedge/samples/statefulsetgrid.yaml")),
        ("deploymentgrids", "DeploymentGrid", canary),
    ];
    for (plural, kind, grid) in &grids {
        let resource = grid_resource(plural, kind);
        let (namespace, name) = (
            grid["metadata"]["namespace"].as_str().expect("namespaced"),
            grid["metadata"]["name"].as_str().expect("named"),
        );
        Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &resource)
            .patch(name, &apply, &Patch::Apply(grid))
            .await
            .unwrap_or_else(|e| panic!("{kind} {name}: {e}"));
    }

    // what SuperEdge's controller makes of each grid, for a unit
    let labels = |grid: &Value| json!({"superedge.io/grid-selector": grid["metadata"]["name"], "superedge.io/grid-uniq-key": "zone1"});
    let per_unit = |template: &Value, unit: &str| {
        let mut spec = template.clone();
        spec["template"]["spec"]["nodeSelector"]["zone1"] = json!(unit);
        spec
    };
    let mut expected: Vec<(&str, &str, String, Value, Value)> = vec![(
        "Service",
        "default",
        "servicegrid-demo-svc".to_string(),
        labels(&grids[0].2),
        grids[0].2["spec"]["template"].clone(),
    )];
    for unit in ["unit-a", "unit-b"] {
        let (dg, ssg, canary) = (&grids[1].2, &grids[2].2, &grids[3].2);
        expected.push((
            "Deployment",
            "default",
            format!("deploymentgrid-demo-{unit}"),
            labels(dg),
            per_unit(&dg["spec"]["template"], unit),
        ));
        expected.push((
            "StatefulSet",
            "default",
            format!("statefulsetgrid-demo-{unit}"),
            labels(ssg),
            per_unit(&ssg["spec"]["template"], unit),
        ));
        let pool = if unit == "unit-a" { "test1" } else { "test2" };
        expected.push((
            "Deployment",
            "superedge-canary",
            format!("deploymentgrid-demo-{unit}"),
            labels(canary),
            per_unit(&canary["spec"]["templatePool"][pool], unit),
        ));
    }

    let deadline = Instant::now() + Duration::from_secs(30);
    for (kind, namespace, name, labels, spec) in expected {
        let live = loop {
            let found = match kind {
                "Service" => Api::<Service>::namespaced(client.clone(), namespace)
                    .get_opt(&name)
                    .await
                    .map(|o| o.map(|o| serde_json::to_value(o).expect("json"))),
                "Deployment" => Api::<Deployment>::namespaced(client.clone(), namespace)
                    .get_opt(&name)
                    .await
                    .map(|o| o.map(|o| serde_json::to_value(o).expect("json"))),
                _ => Api::<StatefulSet>::namespaced(client.clone(), namespace)
                    .get_opt(&name)
                    .await
                    .map(|o| o.map(|o| serde_json::to_value(o).expect("json"))),
            }
            .expect("a read");
            match found {
                Some(live) => break live,
                None => {
                    assert!(Instant::now() < deadline, "{kind} {namespace}/{name} was not generated");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        assert_eq!(live["metadata"]["labels"], labels, "{kind} {namespace}/{name}");
        if kind == "Service" {
            assert_eq!(live["metadata"]["annotations"]["topologyKeys"], r#"["zone1"]"#, "{name}");
        } else {
            let owner = &live["metadata"]["ownerReferences"][0];
            assert_eq!(
                (owner["controller"].as_bool(), owner["kind"].as_str()),
                (Some(true), Some(if kind == "Deployment" { "DeploymentGrid" } else { "StatefulSetGrid" })),
                "{name}"
            );
        }
        assert!(
            contains(&spec, &live["spec"]),
            "{kind} {namespace}/{name}: SuperEdge's spec {spec}\nnot in {}",
            live["spec"]
        );
    }
}

/// `want` is in `have`: every field of `want` with a value contained in `have`'s (lists
/// item by item, same length); fields only `have` has are the API server's defaults.
fn contains(want: &serde_json::Value, have: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (want, have) {
        (Value::Object(want), Value::Object(have)) => want.iter().all(|(k, w)| {
            // SuperEdge's samples write `creationTimestamp: null` and `resources: {}`, which
            // the API server leaves out
            w.is_null() || w.as_object().is_some_and(|o| o.is_empty()) || have.get(k).is_some_and(|h| contains(w, h))
        }),
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len() && want.iter().zip(have).all(|(w, h)| contains(w, h))
        }
        (want, have) => want == have,
    }
}

/// A client of the run's API server, as kubectl with its kubeconfig.
async fn client_for(kubeconfig: &Path) -> kube::Client {
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(kubeconfig).expect("the run's kubeconfig"),
        &Default::default(),
    )
    .await
    .expect("a client config");
    kube::Client::try_from(config).expect("a client")
}

/// The `superedge.io/v1` grid kind `kind` (plural `plural`).
fn grid_resource(plural: &str, kind: &str) -> kube::discovery::ApiResource {
    kube::discovery::ApiResource {
        group: "superedge.io".into(),
        version: "v1".into(),
        api_version: "superedge.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// A scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The local cluster left running (`--no-acts`), read by a second run in cluster mode
/// (`--kubeconfig`, as against a real cluster with the chart installed): each node's
/// wrapper keeps exactly its own unit's echo endpoints, read through the pod proxy; then
/// SIGTERM stops the first run cleanly.
#[test]
fn a_cluster_mode_run_reads_each_wrapper_through_the_pod_proxy_and_sigterm_stops_the_cluster() {
    let xtask = xtask();
    let scratch = Scratch(std::env::temp_dir().join(format!("xtask-cluster-mode-{}", std::process::id())));
    std::fs::create_dir_all(&scratch.0).expect("scratch directory");
    let kubeconfig = scratch.0.join("kubeconfig");
    let mut cluster = StopOnDrop(
        Command::new(xtask)
            .args(["run", "--no-acts", "--no-build", "--kubeconfig-out"])
            .arg(&kubeconfig)
            .env_remove("KUBECONFIG")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starts xtask"),
    );
    let mut lines = BufReader::new(cluster.0.stdout.take().expect("stdout")).lines();
    let mut shown = String::new();
    while !shown.contains("Ctrl-C stops it.") {
        match lines.next() {
            Some(Ok(line)) => shown.push_str(&(line + "\n")),
            _ => panic!("the local cluster stopped early:\n{shown}"),
        }
    }
    assert!(shown.contains("=> as expected"), "{shown}");

    let output = Command::new(xtask).args(["run", "--kubeconfig"]).arg(&kubeconfig).output().expect("runs xtask");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let table = stdout.split_once("through the pod proxy):\n").map(|(_, t)| t).unwrap_or_else(|| panic!("{stdout}"));
    let rows: Vec<Vec<&str>> = table.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows.len(), 6, "{table}");
    for row in &rows {
        let (node, unit, service) = (row[0], row[1], row[2]);
        let letter = &node[5..6];
        assert_eq!((unit, service), (format!("zone1=unit-{letter}").as_str(), "default/echo-svc"), "{table}");
        let mut nodes: Vec<&str> = row[3..].iter().map(|e| e.rsplit_once('@').map_or("?", |(_, n)| n)).collect();
        nodes.sort();
        assert_eq!(nodes, [format!("edge-{letter}-0"), format!("edge-{letter}-1")], "{table}");
    }

    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(shows_what_a_real_cluster_would(&kubeconfig));
    runtime.block_on(superedge_s_grids_generate_what_superedge_generates(&kubeconfig));

    let pid = cluster.0.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = cluster.0.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "still running 20 s after SIGTERM");
        std::thread::sleep(Duration::from_millis(100));
    };
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(status.success(), "{status}: {rest:?}");
    assert_eq!(rest, ["stopping..."]);
    assert!(!kubeconfig.exists(), "the kubeconfig is removed when the cluster stops");
}
