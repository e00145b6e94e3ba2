//! `cargo xtask soak --sabotage`: the checker checked end to end, through the same
//! observer, request log and watch clients as a real run. With no fault scheduled, once
//! protection is owed it breaks each invariant on purpose, as the component that broke it
//! would have:
//! 1. the node lifecycle controller's identity evicts a pod of `edge-a-0`, alive and owed
//!    protection;
//! 2. the observer is told `edge-b-1` died, while it lives: the cloud never gives it the
//!    stock handling of a dead node;
//! 3. `edge-c-0`'s grid wrapper hangs (SIGSTOP): it serves nothing while it should;
//! 4. `edge-a-1`'s watching client loses an ADDED event (a Service appears for it);
//! 5. the grid controller's identity edits `foreign-svc`, which no grid owns;
//! 6. `edge-health-edge-c-1` is SIGKILLed with no fault asking for it.
//!
//! The run must fail with a violation of each invariant (`tests/tests/soak_sabotage.rs`).

use anyhow::{Context, Result};
use fake_apiserver::FakeApiServer;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::faults::Truth;
use super::mirror::Mirror;
use crate::local_cluster::cluster::{Cluster, GRID_CONTROLLER_TOKEN};
use crate::local_cluster::kubeconfig::kubeconfig_with_token;
use crate::local_cluster::kubelet::DAEMON_NAMESPACE;
use crate::local_cluster::processes;

/// When the sabotage comes: protection (30 s to earn) is owed by then.
pub const AT: f64 = 40.0;

/// A client that makes its requests as `token` names (what the request log records).
async fn client_as(server: &FakeApiServer, token: &str) -> Result<Client> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&kubeconfig_with_token(&server.url(), Some(token)))?;
    Ok(Client::try_from(kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?)?)
}

/// Breaks every invariant once; returns what it did.
pub async fn commit(
    cluster: &mut Cluster,
    server: &FakeApiServer,
    truth: &mut Truth,
    mirror_of_a1: &std::sync::Mutex<Mirror>,
) -> Result<String> {
    // 1
    let lifecycle = client_as(server, &processes::token("edge-node-lifecycle", "edge-node-lifecycle")).await?;
    let on_a0 = ListParams::default().fields("spec.nodeName=edge-a-0");
    let pods = Api::<Pod>::all(cluster.client.clone()).list(&on_a0).await?.items;
    let pod = pods.iter().find(|p| p.namespace().as_deref() != Some(DAEMON_NAMESPACE)).context("a pod on edge-a-0")?;
    Api::<Pod>::namespaced(lifecycle, &pod.namespace().unwrap_or_default())
        .delete(&pod.name_any(), &DeleteParams::default())
        .await?;
    // 2
    truth.believe_dead("edge-b-1");
    // 3 and 6: signals the components' bookkeeping does not know of
    for (component, signal) in [("grid-wrapper-edge-c-0", "-STOP"), ("edge-health-edge-c-1", "-KILL")] {
        let process = cluster.components.iter_mut().find(|c| c.name == component).context("a component")?;
        let pid = process.pid().context("a running process")?;
        tokio::process::Command::new("kill").args([signal, &pid.to_string()]).status().await?;
    }
    // 4
    mirror_of_a1.lock().unwrap_or_else(|e| e.into_inner()).lose_next_added();
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "sabotage-svc", "namespace": "default"},
        "spec": {"selector": {"appGrid": "echo"}, "ports": [{"protocol": "TCP", "port": 81, "targetPort": 8080}]},
    }))?;
    Api::<Service>::namespaced(cluster.client.clone(), "default").create(&PostParams::default(), &service).await?;
    // 5
    let controller = client_as(server, GRID_CONTROLLER_TOKEN).await?;
    let label = json!({"metadata": {"labels": {"sabotage": "yes"}}});
    Api::<Service>::namespaced(controller, "default")
        .patch("foreign-svc", &PatchParams::default(), &Patch::Merge(&label))
        .await?;
    Ok(format!(
        "sabotage: evicted {} from edge-a-0, edge-b-1 believed dead, grid-wrapper-edge-c-0 SIGSTOPped, \
         edge-a-1's watch loses an ADDED, foreign-svc edited as the grid controller, edge-health-edge-c-1 SIGKILLed",
        pod.name_any()
    ))
}
