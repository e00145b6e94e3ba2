//! The grid controller at scale on the fake apiserver (over HTTP, as in production):
//! 1k ServiceGrids + 100 DeploymentGrids over 500 nodes in 20 units.
//!
//! - cold start: from controller start until every generated object exists and every
//!   grid reports `Applied=True` (median of `BENCH_RUNS` fresh clusters, default 3);
//! - steady state: write requests the controller makes while every node heartbeats
//!   (status patch) every 10 s for `BENCH_HEARTBEAT_SECS` (default 60).
//!
//! Prints a table. `cargo bench -p grid-controller --bench convergence`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use edgegrid_core::crd::all_crds;
use fake_apiserver::FakeApiServer;
use grid_controller::metrics::Metrics;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const NODES: usize = 500;
const UNITS: usize = 20;
const SERVICE_GRIDS: usize = 1_000;
const DEPLOYMENT_GRIDS: usize = 100;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

struct Cluster {
    server: FakeApiServer,
    client: Client,
}

async fn populated() -> Cluster {
    let server = FakeApiServer::start().await.expect("bind");
    let client = Client::try_from(kube::Config::new(server.url().parse().expect("url"))).expect("client");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in all_crds() {
        crds.create(&PostParams::default(), &crd).await.expect("crd");
    }
    let nodes: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::erase::<k8s_openapi::api::core::v1::Node>(&()));
    for i in 0..NODES {
        let node: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": format!("node-{i:03}"), "labels": {"zone1": format!("unit-{}", i % UNITS), "kubernetes.io/hostname": format!("node-{i:03}")}}
        }))
        .expect("node");
        nodes.create(&PostParams::default(), &node).await.expect("create node");
    }
    let sg = ApiResource::erase::<edgegrid_core::crd::ServiceGrid>(&());
    let service_grids: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &sg);
    for i in 0..SERVICE_GRIDS {
        let grid: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "superedge.io/v1", "kind": "ServiceGrid", "metadata": {"name": format!("svc-{i:04}")},
            "spec": {"gridUniqKey": "zone1", "template": {"selector": {"app": format!("svc-{i:04}")}, "ports": [{"port": 80, "targetPort": 8080}]}}
        }))
        .expect("grid");
        service_grids.create(&PostParams::default(), &grid).await.expect("create sg");
    }
    let dg = ApiResource::erase::<edgegrid_core::crd::DeploymentGrid>(&());
    let deployment_grids: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &dg);
    for i in 0..DEPLOYMENT_GRIDS {
        let app = format!("app-{i:03}");
        let grid: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "superedge.io/v1", "kind": "DeploymentGrid", "metadata": {"name": app},
            "spec": {"gridUniqKey": "zone1", "template": {
                "replicas": 2, "selector": {"matchLabels": {"app": app}},
                "template": {"metadata": {"labels": {"app": app}}, "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}}}}
        }))
        .expect("grid");
        deployment_grids.create(&PostParams::default(), &grid).await.expect("create dg");
    }
    Cluster { server, client }
}

/// Whether every generated object exists and every grid says `Applied=True`.
fn converged(server: &FakeApiServer) -> bool {
    let store = server.store();
    let count = |group: &str, version: &str, plural: &str, applied: bool| -> usize {
        let Some(rt) = store.resolve(group, version, plural) else { return 0 };
        let Ok(page) = store.list(&rt, &Default::default()) else { return 0 };
        page.items
            .iter()
            .filter(|o| {
                !applied
                    || o["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c: &Value| c["type"] == "Applied" && c["status"] == "True")
            })
            .count()
    };
    count("", "v1", "services", false) == SERVICE_GRIDS
        && count("apps", "v1", "deployments", false) == DEPLOYMENT_GRIDS * UNITS
        && count("superedge.io", "v1", "servicegrids", true) == SERVICE_GRIDS
        && count("superedge.io", "v1", "deploymentgrids", true) == DEPLOYMENT_GRIDS
}

fn start_controller(client: Client) -> (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(grid_controller::reconcile::run(client, Arc::new(Metrics::default()), async move {
        let _ = stopped.await;
    }));
    (stop, task)
}

async fn heartbeats(client: &Client, seconds: u64) {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let period = Duration::from_secs(10);
    let rounds = seconds.div_ceil(10);
    let started = tokio::time::Instant::now();
    for round in 0..rounds {
        let round_start = tokio::time::Instant::now();
        for i in 0..NODES {
            let beat = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "lastHeartbeatTime": format!("2026-01-01T00:{:02}:{:02}Z", round / 6, (round % 6) * 10)}]}});
            nodes
                .patch_status(&format!("node-{i:03}"), &PatchParams::default(), &Patch::Merge(&beat))
                .await
                .expect("heartbeat");
        }
        let next = round_start + period;
        if started.elapsed() < Duration::from_secs(seconds) {
            tokio::time::sleep_until(next).await;
        }
    }
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

async fn stop(controller: (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>)) {
    let _ = controller.0.send(());
    let _ = controller.1.await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let runs = env_or("BENCH_RUNS", 3).max(1) as usize;
    let heartbeat_secs = env_or("BENCH_HEARTBEAT_SECS", 60);
    let mut cold_starts = Vec::new();
    let mut cold_writes = Vec::new();
    for run in 1..=runs {
        let cluster = populated().await;
        let mark = cluster.server.requests().mark();
        let started = Instant::now();
        let controller = start_controller(cluster.client.clone());
        while !converged(&cluster.server) {
            assert!(started.elapsed() < Duration::from_secs(300), "no convergence within 5 minutes");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        cold_starts.push(started.elapsed());
        cold_writes.push(cluster.server.requests().since(mark).iter().filter(|r| r.is_write()).count());
        if run < runs {
            stop(controller).await;
            continue;
        }
        // steady state on the last cluster: let the last status writes land, then heartbeat
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mark = cluster.server.requests().mark();
        heartbeats(&cluster.client, heartbeat_secs).await;
        let requests = cluster.server.requests().since(mark);
        stop(controller).await;
        let is_heartbeat = |path: &str| path.starts_with("/api/v1/nodes");
        let controller_writes: Vec<String> = requests
            .iter()
            .filter(|r| r.is_write() && !is_heartbeat(&r.path))
            .map(|r| format!("{} {}", r.method, r.path))
            .collect();
        let heartbeat_writes = requests.iter().filter(|r| r.is_write() && is_heartbeat(&r.path)).count();
        let controller_reads =
            requests.iter().filter(|r| !r.is_write() && !is_heartbeat(&r.path) && !r.query.contains("watch=")).count();
        let each = |values: Vec<String>| values.join(", ");
        println!(
            "grid-controller convergence: {SERVICE_GRIDS} ServiceGrids + {DEPLOYMENT_GRIDS} DeploymentGrids, {NODES} nodes in {UNITS} units"
        );
        println!("| measurement | value |");
        println!("|---|---|");
        println!("| cold start to converged, median of {runs} | {:.2} s |", median(cold_starts.clone()).as_secs_f64());
        println!(
            "| cold start, each run | {} |",
            each(cold_starts.iter().map(|d| format!("{:.2} s", d.as_secs_f64())).collect())
        );
        println!(
            "| write requests during cold start, each run | {} |",
            each(cold_writes.iter().map(usize::to_string).collect())
        );
        println!("| node heartbeats sent in {heartbeat_secs} s | {heartbeat_writes} |");
        println!("| controller write requests during heartbeats | {} |", controller_writes.len());
        println!("| controller non-watch reads during heartbeats | {controller_reads} |");
        for write in controller_writes.iter().take(10) {
            println!("  unexpected write: {write}");
        }
    }
}
