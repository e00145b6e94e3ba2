//! A kubelet stand-in per simulated node: registers its Node, renews its Lease in
//! `kube-node-lease`, posts `Ready=True` whenever the API server says otherwise (as a
//! kubelet's status sync overwrites the node lifecycle controller's Unknown), runs its
//! pods (phase Running, an IP, Ready), and answers `/healthz` on the node's address
//! (what edge-health's peer checks probe). It talks to the API server only while its site's
//! cloud link is up, and does nothing at all once the node is killed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::layout::{KUBELET_PORT, SimNode, UNIT_LABEL_KEY};
use super::site_link::SiteLink;
use super::workloads::pod_ready;

const LEASE_NAMESPACE: &str = "kube-node-lease";
const LEASE_DURATION_SECONDS: i32 = 40;
/// Where the chart's components run (the release namespace of a real install).
pub const DAEMON_NAMESPACE: &str = "kube-system";

/// The simulated node's switches.
#[derive(Clone)]
pub struct Kubelet {
    pub node: SimNode,
    alive: Arc<AtomicBool>,
    link: SiteLink,
}

impl Kubelet {
    pub fn new(node: SimNode, link: SiteLink) -> Self {
        Self { node, alive: Arc::new(AtomicBool::new(true)), link }
    }

    /// The node dies: no more heartbeats, status or `/healthz` answers.
    pub fn kill(&self) {
        self.alive.store(false, Ordering::SeqCst);
    }

    fn acting(&self) -> bool {
        self.alive.load(Ordering::SeqCst) && self.link.is_up()
    }

    /// Creates the Node (labels, address, Ready).
    pub async fn register(&self, client: &Client) -> Result<()> {
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.node.name, "labels": {
                UNIT_LABEL_KEY: self.node.unit,
                "kubernetes.io/hostname": self.node.name,
                "kubernetes.io/os": "linux",
            }},
            "status": self.status(Timestamp::now()),
        }))?;
        Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &node)
            .await
            .with_context(|| format!("registering node {}", self.node.name))?;
        Ok(())
    }

    /// The pod a node agent DaemonSet of the chart would run here (host network: the
    /// node's IP), for a component the local cluster runs as a process on this node, so
    /// the API server's pod proxy reaches it as on a real cluster.
    pub async fn register_daemon_pod(&self, client: &Client, app: &str, metrics_port: u16) -> Result<()> {
        let name = format!("{app}-{}", self.node.name);
        let now = Time(Timestamp::now());
        let ip = self.node.ip.to_string();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": DAEMON_NAMESPACE, "labels": {
                "app.kubernetes.io/name": app, "app.kubernetes.io/instance": "edgegrid-local"}},
            "spec": {"nodeName": self.node.name, "hostNetwork": true, "containers": [{
                "name": app, "image": format!("edgegrid/{app}:local"),
                "ports": [{"name": "metrics", "containerPort": metrics_port}]}]},
            "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": ip,
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}]},
        }))?;
        let api: Api<Pod> = Api::namespaced(client.clone(), DAEMON_NAMESPACE);
        api.create(&PostParams::default(), &pod).await.with_context(|| format!("registering pod {name}"))?;
        // the status as the kubelet reports it (a create may not keep it)
        let status = json!({"status": pod.status});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await?;
        Ok(())
    }

    fn status(&self, since: Timestamp) -> serde_json::Value {
        let now = Time(Timestamp::now());
        json!({
            "addresses": [{"type": "InternalIP", "address": self.node.ip.to_string()},
                {"type": "Hostname", "address": self.node.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": KUBELET_PORT}},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kubelet is posting ready status", "lastHeartbeatTime": now,
                "lastTransitionTime": Time(since)}],
        })
    }

    /// Serves `/healthz` on the node's address, and keeps the node's objects current
    /// every second, until `stop`.
    pub async fn run(self, client: Client, mut stop: watch::Receiver<bool>) -> Result<()> {
        let listener = TcpListener::bind(self.node.addr(KUBELET_PORT))
            .await
            .with_context(|| format!("binding {} (node {})", self.node.addr(KUBELET_PORT), self.node.name))?;
        let healthz = tokio::spawn(serve_healthz(listener, self.alive.clone()));
        loop {
            if self.acting()
                && let Err(error) = self.sync(&client).await
            {
                tracing::debug!(node = %self.node.name, error = format!("{error:#}"), "kubelet stand-in sync");
            }
            tokio::select! {
                _ = stop.wait_for(|stop| *stop) => break,
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
        healthz.abort();
        Ok(())
    }

    async fn sync(&self, client: &Client) -> Result<()> {
        self.renew_lease(client).await?;
        let nodes: Api<Node> = Api::all(client.clone());
        let node = nodes.get(&self.node.name).await?;
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .is_some_and(|c| c.status == "True");
        if !ready {
            let status = json!({"status": self.status(Timestamp::now())});
            nodes.patch_status(&self.node.name, &PatchParams::default(), &Patch::Merge(&status)).await?;
        }
        self.run_pods(client).await
    }

    async fn renew_lease(&self, client: &Client) -> Result<()> {
        let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
        let spec = json!({"spec": {"holderIdentity": self.node.name,
            "leaseDurationSeconds": LEASE_DURATION_SECONDS, "renewTime": MicroTime(Timestamp::now())}});
        if leases.get_opt(&self.node.name).await?.is_some() {
            leases.patch(&self.node.name, &PatchParams::default(), &Patch::Merge(&spec)).await?;
        } else {
            let mut lease = spec;
            lease["metadata"] = json!({"name": self.node.name, "namespace": LEASE_NAMESPACE});
            leases.create(&PostParams::default(), &serde_json::from_value(lease)?).await?;
        }
        Ok(())
    }

    /// Pods bound here run and are Ready; a new one gets the lowest free IP of the node.
    async fn run_pods(&self, client: &Client) -> Result<()> {
        let all: Api<Pod> = Api::all(client.clone());
        let on_node = ListParams::default().fields(&format!("spec.nodeName={}", self.node.name));
        let pods = all.list(&on_node).await?.items;
        let mut taken: Vec<String> =
            pods.iter().filter_map(|p| p.status.as_ref().and_then(|s| s.pod_ip.clone())).collect();
        for pod in pods.iter().filter(|p| !pod_ready(p) && p.metadata.deletion_timestamp.is_none()) {
            let ip = match pod.status.as_ref().and_then(|s| s.pod_ip.clone()) {
                Some(ip) => ip,
                None => {
                    let ip = (0..15)
                        .map(|n| self.node.pod_ip(n).to_string())
                        .find(|ip| !taken.contains(ip))
                        .context("no free pod IP on the node")?;
                    taken.push(ip.clone());
                    ip
                }
            };
            let now = Time(Timestamp::now());
            let status = json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                "hostIP": self.node.ip.to_string(),
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": "True", "lastTransitionTime": now}]}});
            let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
            api.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&status)).await?;
        }
        Ok(())
    }
}

/// A kubelet's `/healthz`, as much of HTTP/1.1 as a health check needs; a dead node
/// closes every connection unanswered.
async fn serve_healthz(listener: TcpListener, alive: Arc<AtomicBool>) {
    while let Ok((mut stream, _)) = listener.accept().await {
        let alive = alive.clone();
        tokio::spawn(async move {
            let mut request = Vec::new();
            let mut buffer = [0u8; 1024];
            let read = tokio::time::timeout(Duration::from_secs(2), async {
                while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16 * 1024 {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => return false,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                true
            })
            .await;
            if read == Ok(true) && alive.load(Ordering::SeqCst) {
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                    .await;
            }
        });
    }
}
