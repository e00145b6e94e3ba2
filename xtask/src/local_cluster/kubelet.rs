//! A kubelet stand-in per simulated node: registers its Node (labels, addresses, the
//! kubelet's conditions, `nodeInfo` and capacity), renews its Lease in `kube-node-lease`,
//! posts `Ready=True` whenever the API server says otherwise (as a kubelet's status sync
//! overwrites the node lifecycle controller's Unknown), runs its pods (phase Running, an IP,
//! every container running and ready), records the Events a kubelet records for all this,
//! and answers `/healthz` on the node's address (what edge-health's peer checks probe). It
//! talks to the API server only while its site's cloud link is up, and does nothing at all
//! once the node is killed. What it posts is computed by pure functions
//! ([`posted_node_status`], [`running_pod_status`]).
//!
//! No container runtime runs anything: the runtime is reported as `edgegrid-sim`, the
//! pods' containers are what the stand-in says they are.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStatus, DaemonEndpoint, HostIP, Node, NodeAddress, NodeCondition,
    NodeDaemonEndpoints, NodeStatus, NodeSystemInfo, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::events::{self, Source};
use super::layout::{KUBELET_PORT, SimNode, UNIT_LABEL_KEY};
use super::site_link::SiteLink;
use super::workload_status::pod_ready;
use super::workloads::{bound_status, qos_class};

const LEASE_NAMESPACE: &str = "kube-node-lease";
const LEASE_DURATION_SECONDS: i32 = 40;
/// Where the chart's components run (the release namespace of a real install).
pub const DAEMON_NAMESPACE: &str = "kube-system";
/// What `nodeInfo.containerRuntimeVersion` and container IDs say: no real runtime.
const RUNTIME: &str = "edgegrid-sim";
/// The kubelet's default `maxPods`, and the memory its default hard eviction threshold
/// (`memory.available<100Mi`) keeps out of the allocatable.
const MAX_PODS: u32 = 110;
const EVICTION_RESERVED_KIB: u64 = 100 * 1024;

/// What a kubelet reads off its machine for `nodeInfo` and the capacity: here the host
/// the local cluster runs on, the same for every simulated node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    pub kubelet_version: String,
    pub kernel_version: String,
    pub os_image: String,
    /// Go's spelling (`amd64`, `arm64`), as `GOARCH` and the `kubernetes.io/arch` label.
    pub architecture: String,
    pub cpus: usize,
    pub memory_kib: u64,
}

impl Machine {
    /// This host's, running `kubelet_version` (a cluster's kubelets run the control plane's
    /// version: the API server's here).
    pub fn of_host(kubelet_version: &str) -> Self {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        let os_release = read("/etc/os-release");
        let os_image = os_release
            .lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .map_or_else(|| "Linux".to_string(), |v| v.trim_matches('"').to_string());
        let memory_kib = read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0);
        let architecture = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "x86" => "386",
            "powerpc64" => "ppc64le",
            other => other,
        };
        Self {
            kubelet_version: kubelet_version.to_string(),
            kernel_version: read("/proc/sys/kernel/osrelease").trim().to_string(),
            os_image,
            architecture: architecture.to_string(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_kib,
        }
    }
}

/// FNV-1a (64 bits) of `text`, for identifiers that stay the same for a node or container.
fn fnv64(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
}

/// `words * 16` hex digits from `seed` (4 words: a container ID's length).
fn hex_id(seed: &str, words: usize) -> String {
    (0..words).map(|i| format!("{:016x}", fnv64(&format!("{i}/{seed}")))).collect()
}

/// A node's identifiers: a machine ID (32 hex digits) and a system UUID, stable per node.
fn machine_ids(node: &str) -> (String, String) {
    let id = hex_id(&format!("machine/{node}"), 2);
    let uuid = format!("{}-{}-{}-{}-{}", &id[..8], &id[8..12], &id[12..16], &id[16..20], &id[20..]);
    (id, uuid)
}

/// A random UUID from the kernel: the boot ID of a kubelet that just started.
fn random_uuid() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/uuid").map(|u| u.trim().to_string()).unwrap_or_default()
}

/// The kubelet's node conditions: type, the False reason and message of a pressure
/// condition, and the Event it records when the condition turns False.
const PRESSURES: [(&str, &str, &str, &str); 3] = [
    (
        "MemoryPressure",
        "KubeletHasSufficientMemory",
        "kubelet has sufficient memory available",
        "NodeHasSufficientMemory",
    ),
    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure", "NodeHasNoDiskPressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available", "NodeHasSufficientPID"),
];

/// The status a kubelet posts for `node` given what the API server holds (`previous`),
/// and the reasons of the node status Events it records with it (`Node <name> status is
/// now: <reason>`), as the kubelet's status setters decide: a pressure condition that is
/// new or turns False records `NodeHas...`; Ready turning True from another status
/// records `NodeReady`, a Ready condition seen for the first time records nothing. A
/// condition that keeps its status keeps its transition time.
pub fn posted_node_status(
    node: &SimNode,
    machine: &Machine,
    boot_id: &str,
    previous: Option<&NodeStatus>,
    now: Timestamp,
) -> (NodeStatus, Vec<&'static str>) {
    let before = |type_: &str| {
        previous.and_then(|s| s.conditions.as_ref()).and_then(|c| c.iter().find(|c| c.type_ == type_)).cloned()
    };
    let mut events = Vec::new();
    let mut conditions = Vec::new();
    let mut condition = |type_: &str, status: &str, reason: &str, message: &str| {
        let was = before(type_);
        let since = match &was {
            Some(was) if was.status == status => was.last_transition_time.clone(),
            _ => Some(Time(now)),
        };
        conditions.push(NodeCondition {
            type_: type_.into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            last_heartbeat_time: Some(Time(now)),
            last_transition_time: since,
        });
        was
    };
    for (type_, reason, message, event) in PRESSURES {
        if condition(type_, "False", reason, message).is_none_or(|was| was.status != "False") {
            events.push(event);
        }
    }
    if condition("Ready", "True", "KubeletReady", "kubelet is posting ready status")
        .is_some_and(|was| was.status != "True")
    {
        events.push("NodeReady");
    }
    let (machine_id, system_uuid) = machine_ids(&node.name);
    let capacity = BTreeMap::from([
        ("cpu".to_string(), Quantity(machine.cpus.to_string())),
        ("memory".to_string(), Quantity(format!("{}Ki", machine.memory_kib))),
        ("pods".to_string(), Quantity(MAX_PODS.to_string())),
        ("hugepages-1Gi".to_string(), Quantity("0".into())),
        ("hugepages-2Mi".to_string(), Quantity("0".into())),
    ]);
    let mut allocatable = capacity.clone();
    allocatable
        .insert("memory".into(), Quantity(format!("{}Ki", machine.memory_kib.saturating_sub(EVICTION_RESERVED_KIB))));
    let status = NodeStatus {
        addresses: Some(vec![
            NodeAddress { type_: "InternalIP".into(), address: node.ip.to_string() },
            NodeAddress { type_: "Hostname".into(), address: node.name.clone() },
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint { port: i32::from(KUBELET_PORT) }),
        }),
        conditions: Some(conditions),
        node_info: Some(NodeSystemInfo {
            machine_id,
            system_uuid,
            boot_id: boot_id.to_string(),
            kernel_version: machine.kernel_version.clone(),
            os_image: machine.os_image.clone(),
            container_runtime_version: format!("{RUNTIME}://{}", env!("CARGO_PKG_VERSION")),
            kubelet_version: machine.kubelet_version.clone(),
            kube_proxy_version: String::new(),
            operating_system: "linux".into(),
            architecture: machine.architecture.clone(),
            swap: None,
        }),
        capacity: Some(capacity),
        allocatable: Some(allocatable),
        ..Default::default()
    };
    (status, events)
}

/// The status a kubelet posts for `pod` running on the node at `host_ip` with `pod_ip`,
/// and whether this starts it (no container of it ran before: the kubelet records
/// `Pulled`, `Created` and `Started` per container) rather than reporting it ready again
/// after the node lifecycle controller marked it not ready. What kept its status keeps
/// its times: the start time, the containers' start, the conditions' transitions.
pub fn running_pod_status(pod: &Pod, host_ip: &str, pod_ip: &str, now: Timestamp) -> (PodStatus, bool) {
    let previous = pod.status.clone().unwrap_or_default();
    let before = |type_: &str| previous.conditions.iter().flatten().find(|c| c.type_ == type_).cloned();
    let condition = |type_: &str| PodCondition {
        type_: type_.into(),
        status: "True".into(),
        last_transition_time: match before(type_) {
            Some(was) if was.status == "True" => was.last_transition_time,
            _ => Some(Time(now)),
        },
        ..Default::default()
    };
    let started_at = |name: &str| {
        previous
            .container_statuses
            .iter()
            .flatten()
            .find(|c| c.name == name)
            .and_then(|c| c.state.as_ref()?.running.as_ref()?.started_at.clone())
    };
    let spec = pod.spec.clone().unwrap_or_default();
    let starts = spec.containers.iter().all(|c| started_at(&c.name).is_none());
    let uid = pod.uid().unwrap_or_else(|| pod.name_any());
    let status = PodStatus {
        phase: Some("Running".into()),
        conditions: Some(
            ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
                .map(condition)
                .to_vec(),
        ),
        host_ip: Some(host_ip.into()),
        host_ips: Some(vec![HostIP { ip: host_ip.into() }]),
        pod_ip: Some(pod_ip.into()),
        pod_ips: Some(vec![PodIP { ip: pod_ip.into() }]),
        start_time: previous.start_time.clone().or(Some(Time(now))),
        qos_class: previous.qos_class.clone().or_else(|| Some(qos_class(&spec).into())),
        container_statuses: Some(
            spec.containers
                .iter()
                .map(|c| ContainerStatus {
                    name: c.name.clone(),
                    image: c.image.clone().unwrap_or_default(),
                    image_id: String::new(),
                    container_id: Some(format!("{RUNTIME}://{}", hex_id(&format!("{uid}/{}", c.name), 4))),
                    ready: true,
                    started: Some(true),
                    restart_count: 0,
                    state: Some(ContainerState {
                        running: Some(ContainerStateRunning { started_at: started_at(&c.name).or(Some(Time(now))) }),
                        ..Default::default()
                    }),
                    last_state: Some(ContainerState::default()),
                    ..Default::default()
                })
                .collect(),
        ),
        ..Default::default()
    };
    (status, starts)
}

/// The Events a kubelet records when it starts `pod`'s containers: per container,
/// `Pulled` (the image is there: the policy's default for a tagged image is IfNotPresent),
/// `Created` and `Started`, as `(container, reason, message)`.
pub fn container_start_events(pod: &Pod) -> Vec<(String, &'static str, String)> {
    let containers = pod.spec.as_ref().map(|s| s.containers.clone()).unwrap_or_default();
    containers
        .iter()
        .flat_map(|c| {
            let image = c.image.clone().unwrap_or_default();
            [
                (c.name.clone(), "Pulled", format!("Container image {image:?} already present on machine")),
                (c.name.clone(), "Created", format!("Created container: {}", c.name)),
                (c.name.clone(), "Started", format!("Started container {}", c.name)),
            ]
        })
        .collect()
}

/// The simulated node's switches.
#[derive(Clone)]
pub struct Kubelet {
    pub node: SimNode,
    machine: Arc<Machine>,
    boot_id: String,
    alive: Arc<AtomicBool>,
    link: SiteLink,
}

impl Kubelet {
    pub fn new(node: SimNode, machine: Arc<Machine>, link: SiteLink) -> Self {
        Self { node, machine, boot_id: random_uuid(), alive: Arc::new(AtomicBool::new(true)), link }
    }

    /// The node dies: no more heartbeats, status or `/healthz` answers.
    pub fn kill(&self) {
        self.alive.store(false, Ordering::SeqCst);
    }

    /// The node boots again (a new boot: pods bound here run again at its next sync).
    pub fn revive(&self) {
        self.alive.store(true, Ordering::SeqCst);
    }

    fn acting(&self) -> bool {
        self.alive.load(Ordering::SeqCst) && self.link.is_up()
    }

    async fn node_event(&self, client: &Client, reason: &str, message: String) {
        let event = events::legacy_event(
            &Source::kubelet(&self.node.name),
            events::kubelet_node_reference(&self.node.name),
            "Normal",
            reason,
            message,
            Timestamp::now(),
        );
        events::record(client, event).await;
    }

    /// Posts `previous` brought up to date, with its Events.
    async fn post_status(&self, client: &Client, previous: Option<&NodeStatus>) -> Result<()> {
        let now = Timestamp::from_second(Timestamp::now().as_second())?;
        let (status, reasons) = posted_node_status(&self.node, &self.machine, &self.boot_id, previous, now);
        Api::<Node>::all(client.clone())
            .patch_status(&self.node.name, &PatchParams::default(), &Patch::Merge(&json!({"status": status})))
            .await
            .with_context(|| format!("posting the status of node {}", self.node.name))?;
        for reason in reasons {
            self.node_event(client, reason, format!("Node {} status is now: {reason}", self.node.name)).await;
        }
        Ok(())
    }

    /// Starts: creates the Node (the labels and annotation a kubelet sets, the unit label),
    /// posts its first status, and records what a starting kubelet records.
    pub async fn register(&self, client: &Client) -> Result<()> {
        self.node_event(client, "Starting", "Starting kubelet.".into()).await;
        let arch = &self.machine.architecture;
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.node.name, "labels": {
                UNIT_LABEL_KEY: self.node.unit,
                "kubernetes.io/hostname": self.node.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": arch,
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": arch,
            }, "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
        }))?;
        let created = Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &node)
            .await
            .with_context(|| format!("registering node {}", self.node.name))?;
        self.post_status(client, created.status.as_ref().filter(|s| s.conditions.is_some())).await?;
        self.node_event(client, "NodeAllocatableEnforced", "Updated Node Allocatable limit across pods".into()).await;
        Ok(())
    }

    /// The pod a node agent DaemonSet of the chart would run here (host network: the
    /// node's IP), for a component the local cluster runs as a process on this node, so
    /// the API server's pod proxy reaches it as on a real cluster. It is bound here as the
    /// scheduler binds it; this kubelet's next sync runs it.
    pub async fn register_daemon_pod(&self, client: &Client, app: &str, metrics_port: u16) -> Result<()> {
        let name = format!("{app}-{}", self.node.name);
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": DAEMON_NAMESPACE, "labels": {
                "app.kubernetes.io/name": app, "app.kubernetes.io/instance": "edgegrid-local"}},
            "spec": {"nodeName": self.node.name, "hostNetwork": true, "containers": [{
                "name": app, "image": format!("edgegrid/{app}:local"),
                "ports": [{"name": "metrics", "containerPort": metrics_port}]}]},
        }))?;
        let api: Api<Pod> = Api::namespaced(client.clone(), DAEMON_NAMESPACE);
        let mut created =
            api.create(&PostParams::default(), &pod).await.with_context(|| format!("registering pod {name}"))?;
        let instance = events::instance_of(events::SCHEDULER);
        events::record_new(client, events::scheduled(&created, &self.node.name, &instance, Timestamp::now())).await;
        created.status = Some(bound_status(&created, Timestamp::from_second(Timestamp::now().as_second())?));
        match api.replace_status(&name, &PostParams::default(), &created).await {
            // a conflict: this kubelet's sync has run it meanwhile
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            written => written.map(drop).with_context(|| format!("binding pod {name}")),
        }
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
        let node = Api::<Node>::all(client.clone()).get(&self.node.name).await?;
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .is_some_and(|c| c.status == "True");
        if !ready {
            self.post_status(client, node.status.as_ref()).await?;
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

    /// Pods bound here run and are Ready; a new one gets the lowest free IP of the node
    /// (a host-network one the node's).
    async fn run_pods(&self, client: &Client) -> Result<()> {
        let all: Api<Pod> = Api::all(client.clone());
        let on_node = ListParams::default().fields(&format!("spec.nodeName={}", self.node.name));
        let pods = all.list(&on_node).await?.items;
        let mut taken: Vec<String> =
            pods.iter().filter_map(|p| p.status.as_ref().and_then(|s| s.pod_ip.clone())).collect();
        for pod in pods.iter().filter(|p| !pod_ready(p) && p.metadata.deletion_timestamp.is_none()) {
            let host_network = pod.spec.as_ref().and_then(|s| s.host_network) == Some(true);
            let ip = match pod.status.as_ref().and_then(|s| s.pod_ip.clone()) {
                Some(ip) => ip,
                None if host_network => self.node.ip.to_string(),
                None => {
                    let ip = (0..15)
                        .map(|n| self.node.pod_ip(n).to_string())
                        .find(|ip| !taken.contains(ip))
                        .context("no free pod IP on the node")?;
                    taken.push(ip.clone());
                    ip
                }
            };
            self.start_pod(client, pod, &ip).await?;
        }
        Ok(())
    }

    /// Posts `pod`'s running status; when this starts it, records its containers' Events.
    async fn start_pod(&self, client: &Client, pod: &Pod, ip: &str) -> Result<()> {
        let now = Timestamp::from_second(Timestamp::now().as_second())?;
        let (status, starts) = running_pod_status(pod, &self.node.ip.to_string(), ip, now);
        let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
        let running = api
            .patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&json!({"status": status})))
            .await
            .with_context(|| format!("posting the status of pod {}", pod.name_any()))?;
        if starts {
            let source = Source::kubelet(&self.node.name);
            for (container, reason, message) in container_start_events(&running) {
                let involved = events::container_reference(&running, &container);
                let event = events::legacy_event(&source, involved, "Normal", reason, message, Timestamp::now());
                events::record(client, event).await;
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + second).expect("time")
    }

    fn time(second: i64) -> Value {
        serde_json::to_value(Time(at(second))).expect("json")
    }

    fn machine() -> Machine {
        Machine {
            kubelet_version: "v1.33.0-fake".into(),
            kernel_version: "6.1.0".into(),
            os_image: "Debian GNU/Linux 12 (bookworm)".into(),
            architecture: "amd64".into(),
            cpus: 2,
            memory_kib: 4_000_000,
        }
    }

    fn node() -> SimNode {
        super::super::layout::nodes(0, 2, 3).remove(1)
    }

    /// A condition as the kubelet posts it.
    fn condition(type_: &str, status: &str, reason: &str, message: &str, heartbeat: i64, transition: i64) -> Value {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": time(heartbeat), "lastTransitionTime": time(transition)})
    }

    fn conditions(heartbeat: i64, transitions: [i64; 4]) -> Value {
        json!([
            condition(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
                heartbeat,
                transitions[0]
            ),
            condition(
                "DiskPressure",
                "False",
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
                heartbeat,
                transitions[1]
            ),
            condition(
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
                heartbeat,
                transitions[2]
            ),
            condition("Ready", "True", "KubeletReady", "kubelet is posting ready status", heartbeat, transitions[3]),
        ])
    }

    #[test]
    fn a_registering_kubelet_posts_its_conditions_node_info_and_capacity() {
        let (status, events) = posted_node_status(&node(), &machine(), "b00t", None, at(0));
        let (machine_id, system_uuid) = machine_ids("edge-a-1");
        assert_eq!(machine_id.len(), 32);
        assert_eq!(system_uuid.split('-').map(str::len).collect::<Vec<_>>(), [8, 4, 4, 4, 12]);
        assert_ne!(machine_ids("edge-a-2").0, machine_id, "each node a machine of its own");
        assert_eq!(
            serde_json::to_value(status).expect("json"),
            json!({
                "addresses": [{"type": "InternalIP", "address": "127.100.1.2"}, {"type": "Hostname", "address": "edge-a-1"}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 30250}},
                "conditions": conditions(0, [0, 0, 0, 0]),
                "nodeInfo": {"machineID": machine_id, "systemUUID": system_uuid, "bootID": "b00t",
                    "kernelVersion": "6.1.0", "osImage": "Debian GNU/Linux 12 (bookworm)",
                    "containerRuntimeVersion": format!("edgegrid-sim://{}", env!("CARGO_PKG_VERSION")),
                    "kubeletVersion": "v1.33.0-fake", "kubeProxyVersion": "", "operatingSystem": "linux",
                    "architecture": "amd64"},
                "capacity": {"cpu": "2", "memory": "4000000Ki", "pods": "110", "hugepages-1Gi": "0", "hugepages-2Mi": "0"},
                "allocatable": {"cpu": "2", "memory": "3897600Ki", "pods": "110", "hugepages-1Gi": "0", "hugepages-2Mi": "0"},
            })
        );
        // a new Ready condition records nothing; new pressure conditions record theirs
        assert_eq!(events, ["NodeHasSufficientMemory", "NodeHasNoDiskPressure", "NodeHasSufficientPID"]);
    }

    #[test]
    fn a_kubelet_back_after_unknown_records_node_ready_and_keeps_what_did_not_change() {
        let (first, _) = posted_node_status(&node(), &machine(), "b00t", None, at(0));
        // unchanged: nothing recorded, transitions kept, heartbeats moved
        let (again, events) = posted_node_status(&node(), &machine(), "b00t", Some(&first), at(10));
        assert_eq!(events, Vec::<&str>::new());
        assert_eq!(serde_json::to_value(&again.conditions).expect("json"), conditions(10, [0, 0, 0, 0]));
        // the node lifecycle controller's verdict on a silent node: every condition Unknown
        let mut unknown = first.clone();
        for condition in unknown.conditions.iter_mut().flatten() {
            condition.status = "Unknown".into();
            condition.reason = Some("NodeStatusUnknown".into());
        }
        let (back, events) = posted_node_status(&node(), &machine(), "b00t", Some(&unknown), at(20));
        assert_eq!(events, ["NodeHasSufficientMemory", "NodeHasNoDiskPressure", "NodeHasSufficientPID", "NodeReady"]);
        assert_eq!(serde_json::to_value(&back.conditions).expect("json"), conditions(20, [20, 20, 20, 20]));
        // only Ready was Unknown: only NodeReady
        let mut not_ready = first;
        not_ready.conditions.as_mut().expect("conditions")[3].status = "Unknown".into();
        let (_, events) = posted_node_status(&node(), &machine(), "b00t", Some(&not_ready), at(30));
        assert_eq!(events, ["NodeReady"]);
    }

    fn bound_pod() -> Pod {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "echo-unit-a-1", "namespace": "default", "uid": "p-1"},
            "spec": {"nodeName": "edge-a-1", "containers": [
                {"name": "echo", "image": "superedge/echoserver:2.2"},
                {"name": "sidecar", "image": "busybox:1.36", "resources": {"requests": {"cpu": "10m"}}}]},
        }))
        .expect("pod");
        pod.status = Some(bound_status(&pod, at(0)));
        pod
    }

    fn pod_conditions(transitions: [i64; 5]) -> Value {
        let types = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"];
        Value::Array(
            types
                .iter()
                .zip(transitions)
                .map(|(t, second)| json!({"type": t, "status": "True", "lastTransitionTime": time(second)}))
                .collect(),
        )
    }

    #[test]
    fn a_started_pod_runs_every_container_ready_and_the_kubelet_records_their_start() {
        let pod = bound_pod();
        let (status, starts) = running_pod_status(&pod, "127.100.1.2", "10.244.1.17", at(2));
        assert!(starts);
        let container = |name: &str, image: &str| {
            json!({"name": name, "image": image, "imageID": "",
                "containerID": format!("edgegrid-sim://{}", hex_id(&format!("p-1/{name}"), 4)),
                "ready": true, "started": true, "restartCount": 0,
                "state": {"running": {"startedAt": time(2)}}, "lastState": {}})
        };
        assert_eq!(
            serde_json::to_value(status).expect("json"),
            json!({
                "phase": "Running", "conditions": pod_conditions([2, 2, 2, 2, 0]),
                "hostIP": "127.100.1.2", "hostIPs": [{"ip": "127.100.1.2"}],
                "podIP": "10.244.1.17", "podIPs": [{"ip": "10.244.1.17"}],
                "startTime": time(2), "qosClass": "Burstable",
                "containerStatuses": [container("echo", "superedge/echoserver:2.2"), container("sidecar", "busybox:1.36")],
            })
        );
        let events: Vec<(String, &str, String)> = container_start_events(&pod);
        let expected = [
            ("echo", "Pulled", "Container image \"superedge/echoserver:2.2\" already present on machine"),
            ("echo", "Created", "Created container: echo"),
            ("echo", "Started", "Started container echo"),
            ("sidecar", "Pulled", "Container image \"busybox:1.36\" already present on machine"),
            ("sidecar", "Created", "Created container: sidecar"),
            ("sidecar", "Started", "Started container sidecar"),
        ];
        assert_eq!(events, expected.map(|(c, r, m)| (c.to_string(), r, m.to_string())));
    }

    /// The node lifecycle controller marked the pod not ready while its node was silent;
    /// back, the kubelet reports it ready again: no restart, only Ready's transition moves.
    #[test]
    fn a_pod_marked_not_ready_is_reported_ready_again_without_a_restart() {
        let mut pod = bound_pod();
        pod.status = Some(running_pod_status(&pod, "127.100.1.2", "10.244.1.17", at(2)).0);
        let ready = pod.status.as_mut().and_then(|s| s.conditions.as_mut()).expect("conditions");
        ready[2] = PodCondition { type_: "Ready".into(), status: "False".into(), ..ready[2].clone() };
        let (status, starts) = running_pod_status(&pod, "127.100.1.2", "10.244.1.17", at(40));
        assert!(!starts, "its containers kept running");
        let status = serde_json::to_value(status).expect("json");
        assert_eq!(status["conditions"], pod_conditions([2, 2, 40, 2, 0]));
        assert_eq!(
            (&status["startTime"], &status["containerStatuses"][0]["state"]["running"]["startedAt"]),
            (&time(2), &time(2))
        );
    }
}
