//! The shipped binary against an API server over HTTP: with `--leader-elect` it leads
//! (by default, as SuperEdge's controller, it just runs), reconciles a ServiceGrid, serves /healthz /readyz
//! /metrics, elects exactly one leader among instances on one node, logs without colours
//! (or as JSON), and exits 0 on SIGTERM promptly in every state.

use std::time::Duration;

use edgegrid_core::crd::{ServiceGrid, all_crds};
use edgegrid_testing::{HangingServer, KubeconfigFile, RunningBinary, http_get};
use fake_apiserver::{FakeApiServer, Fault};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio::time::Instant;

/// Every state this binary can be in stops within this after SIGTERM (nothing here needs
/// the 10 s drain deadline).
const PROMPT_EXIT: Duration = Duration::from_secs(5);

struct Instance {
    binary: RunningBinary,
    admin: std::net::SocketAddr,
}

/// The binary on an admin port of its own, with fast leader-election retries.
fn start(kubeconfig: &KubeconfigFile, extra: &[&str]) -> Instance {
    let port = edgegrid_testing::free_port();
    let mut args: Vec<String> = vec!["--kubeconfig".into(), kubeconfig.arg()];
    // the Go form: every interface
    args.extend(["--bind-address".into(), format!(":{port}"), "--metrics-bind-address".into(), format!(":{port}")]);
    args.extend(["--leader-elect-retry-period".into(), "200ms".into()]);
    args.extend(extra.iter().map(|a| a.to_string()));
    let binary = RunningBinary::start(env!("CARGO_BIN_EXE_grid-controller"), &args).unwrap();
    Instance { binary, admin: ([127, 0, 0, 1], port).into() }
}

impl Instance {
    async fn leader_gauge(&self) -> Option<String> {
        edgegrid_testing::metric(self.admin, "grid_controller_leader").await
    }

    async fn ready(&self) -> bool {
        http_get(self.admin, "/readyz").await == Some((200, "ok".into()))
    }

    /// Waits until the leader gauge reads `value` and /readyz answers 200.
    async fn until_ready_with_leader_gauge(&mut self, value: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if self.leader_gauge().await.as_deref() == Some(value) && self.ready().await {
                return;
            }
            self.binary.assert_running();
            assert!(Instant::now() < deadline, "not ready with grid_controller_leader {value} in time");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn cluster() -> (FakeApiServer, Client, KubeconfigFile) {
    let server = FakeApiServer::start().await.unwrap();
    let client = Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    for crd in all_crds() {
        Api::<CustomResourceDefinition>::all(client.clone()).create(&PostParams::default(), &crd).await.unwrap();
    }
    let kubeconfig = KubeconfigFile::new(&server.url()).unwrap();
    (server, client, kubeconfig)
}

/// Creates ServiceGrid `web` and waits for the binary to make `web-svc` from it.
async fn reconciles_a_service_grid(client: &Client, instance: &mut Instance) {
    let grid: ServiceGrid = serde_json::from_value(json!({
        "apiVersion": "superedge.io/v1", "kind": "ServiceGrid", "metadata": {"name": "web"},
        "spec": {"gridUniqKey": "zone1", "template": {"ports": [{"port": 8080}]}}
    }))
    .unwrap();
    Api::<ServiceGrid>::namespaced(client.clone(), "default").create(&PostParams::default(), &grid).await.unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let deadline = Instant::now() + Duration::from_secs(20);
    let service = loop {
        if let Ok(service) = services.get("web-svc").await {
            break service;
        }
        instance.binary.assert_running();
        assert!(Instant::now() < deadline, "web-svc not created in time");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(service.metadata.annotations.unwrap()["topologyKeys"], r#"["zone1"]"#);
}

async fn lease_holder(client: &Client) -> Option<String> {
    let lease = Api::<Lease>::namespaced(client.clone(), "kube-system").get_opt("grid-controller").await.unwrap()?;
    lease.spec?.holder_identity
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_leads_reconciles_and_stops_cleanly() {
    let (_server, client, kubeconfig) = cluster().await;
    let mut instance = start(&kubeconfig, &["--node-name", "instance-a", "--leader-elect=true"]);
    instance.until_ready_with_leader_gauge("1").await;
    reconciles_a_service_grid(&client, &mut instance).await;
    assert_eq!(http_get(instance.admin, "/healthz").await, Some((200, "ok".into())));
    let (_, exposition) = http_get(instance.admin, "/metrics").await.unwrap();
    assert!(exposition.contains("grid_controller_reconciles_total{kind=\"ServiceGrid\"}"), "{exposition}");
    let holder = lease_holder(&client).await.unwrap();
    assert!(holder.starts_with("instance-a_") && holder.len() > "instance-a_".len(), "{holder}");

    let exit = instance.binary.terminate(PROMPT_EXIT).await.unwrap();
    assert_eq!(exit.status.code(), Some(0), "{}", exit.logs);
    assert_eq!(lease_holder(&client).await, None, "the lease is released on the way out");
    // stderr is a pipe here: no colour escapes for a log collector to choke on
    assert!(!exit.logs.contains('\u{1b}'), "{}", exit.logs);
    assert!(exit.logs.contains("leadership changed"), "{}", exit.logs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_it_elects_no_leader_reconciles_and_stops_on_sigterm() {
    let (_server, client, kubeconfig) = cluster().await;
    // SuperEdge's default: its manifest neither asks for an election nor grants Leases
    let mut instance = start(&kubeconfig, &[]);
    instance.until_ready_with_leader_gauge("1").await;
    reconciles_a_service_grid(&client, &mut instance).await;
    // the controllers keep running: a second grid is reconciled too
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second: ServiceGrid = serde_json::from_value(json!({
        "apiVersion": "superedge.io/v1", "kind": "ServiceGrid", "metadata": {"name": "api"},
        "spec": {"gridUniqKey": "zone1", "template": {"ports": [{"port": 9090}]}}
    }))
    .unwrap();
    Api::<ServiceGrid>::namespaced(client.clone(), "default").create(&PostParams::default(), &second).await.unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let deadline = Instant::now() + Duration::from_secs(10);
    while services.get_opt("api-svc").await.unwrap().is_none() {
        instance.binary.assert_running();
        assert!(Instant::now() < deadline, "api-svc not created: the controllers stopped");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(lease_holder(&client).await, None, "no lease without leader election");

    let exit = instance.binary.terminate(PROMPT_EXIT).await.unwrap();
    assert_eq!(exit.status.code(), Some(0), "{}", exit.logs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_with_one_node_name_elect_exactly_one_leader() {
    let (_server, client, kubeconfig) = cluster().await;
    // bare --leader-elect means true
    let mut first = start(&kubeconfig, &["--node-name", "same-node", "--leader-elect"]);
    first.until_ready_with_leader_gauge("1").await;
    let mut second = start(&kubeconfig, &["--node-name", "same-node", "--leader-elect"]);
    // the standby is ready: /readyz does not depend on leadership
    second.until_ready_with_leader_gauge("0").await;
    for _ in 0..10 {
        assert_eq!(first.leader_gauge().await.as_deref(), Some("1"));
        assert_eq!(second.leader_gauge().await.as_deref(), Some("0"));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    reconciles_a_service_grid(&client, &mut first).await;

    // SIGTERM to a standby, then to the leader: both exit 0 promptly
    let standby = second.binary.terminate(PROMPT_EXIT).await.unwrap();
    assert_eq!(standby.status.code(), Some(0), "{}", standby.logs);
    let leader = first.binary.terminate(PROMPT_EXIT).await.unwrap();
    assert_eq!(leader.status.code(), Some(0), "{}", leader.logs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_in_bounded_time_while_the_api_server_hangs() {
    let hanging = HangingServer::start().await.unwrap();
    let kubeconfig = KubeconfigFile::new(&hanging.url()).unwrap();
    // a standby stuck reading the lease stops at once; a non-electing instance's
    // controllers wait for caches that never fill (kube-runtime holds its runner until
    // the store is ready), so the drain deadline is what ends them
    let cases: [(&[&str], Duration); 2] = [
        (&["--leader-elect=true"], PROMPT_EXIT),
        (&["--leader-elect=false", "--shutdown-grace-period", "1s"], Duration::from_secs(4)),
    ];
    for (args, limit) in cases {
        let mut instance = start(&kubeconfig, args);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !instance.ready().await {
            instance.binary.assert_running();
            assert!(Instant::now() < deadline, "{args:?}: not ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let exit = instance.binary.terminate(limit).await.unwrap();
        assert_eq!(exit.status.code(), Some(0), "{args:?}: {}", exit.logs);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_with_structured_errors_when_the_api_server_is_gone() {
    let kubeconfig = KubeconfigFile::new(&edgegrid_testing::unreachable_url()).unwrap();
    let mut instance = start(&kubeconfig, &["--log-format", "json", "--leader-elect"]);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    instance.binary.assert_running();
    assert_eq!(instance.leader_gauge().await.as_deref(), Some("0"));
    let exit = instance.binary.terminate(PROMPT_EXIT).await.unwrap();
    assert_eq!(exit.status.code(), Some(0), "{}", exit.logs);
    let lines: Vec<serde_json::Value> = exit
        .logs
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let failed = lines
        .iter()
        .find(|line| line["fields"]["message"] == "leader election attempt failed")
        .unwrap_or_else(|| panic!("{}", exit.logs));
    assert!(failed["fields"]["error"].as_str().is_some_and(|e| !e.is_empty()), "{failed}");
    assert_eq!(failed["fields"]["lease"], "grid-controller");
    assert_eq!(failed["level"], "WARN");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_lease_stops_the_controllers_and_exits_1_after_the_renew_deadline() {
    let (server, _client, kubeconfig) = cluster().await;
    let timings = ["--leader-elect", "--leader-elect-lease-duration", "3s", "--leader-elect-renew-deadline", "2s"];
    let mut instance = start(&kubeconfig, &timings);
    instance.until_ready_with_leader_gauge("1").await;
    server.set_fault("leases", Fault::Error(500));
    let exit = instance.binary.wait(Duration::from_secs(8)).await.unwrap();
    assert_eq!(exit.status.code(), Some(1), "{}", exit.logs);
    assert!(exit.took >= Duration::from_millis(1500), "renewal errors ended leadership early: {:?}", exit.took);
    assert!(exit.logs.contains("lost the leader lease"), "{}", exit.logs);
}

#[test]
fn bad_flags_are_refused_with_a_message() {
    let refused = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_grid-controller")).args(args).output().unwrap();
        (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
    };
    let (code, stderr) = refused(&["--bind-address", "8081"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("invalid value '8081' for '--bind-address"), "{stderr}");
    let (code, stderr) = refused(&["--leader-elect-lease-duration", "15"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("missing unit in duration"), "{stderr}");
    let (code, stderr) = refused(&["--log-format", "yaml"]);
    assert_eq!(code, Some(2), "{stderr}");
    let kubeconfig = KubeconfigFile::new(&edgegrid_testing::unreachable_url()).unwrap();
    let (code, stderr) =
        refused(&["--kubeconfig", &kubeconfig.arg(), "--leader-elect", "--leader-elect-renew-deadline", "20s"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("--leader-elect-renew-deadline must be shorter"), "{stderr}");
}
