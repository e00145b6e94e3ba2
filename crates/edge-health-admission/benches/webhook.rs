//! The edge-health admission webhook under load, and the write traffic its design causes.
//!
//! 1. HTTPS keep-alive load against the shipped binary (`CARGO_BIN_EXE_edge-health-admission`,
//!    run as the chart runs it: certificate files from a throwaway CA, `--kubeconfig` to
//!    the fake apiserver, logs to a file), its node cache synced from the fake apiserver
//!    holding N nodes: one in ten Unknown and not voted unhealthy (protected), one in fifty
//!    Unknown and voted unhealthy, the rest Ready. A load generator in this process
//!    (tokio, hyper HTTP/1.1 over tokio-rustls, TCP_NODELAY as Go's client sets it, one
//!    request in flight per keep-alive connection) sends AdmissionReviews as the
//!    kube-apiserver does (`admission.k8s.io/v1`, `?timeout=5s`, object and oldObject):
//!    - node reviews: the node lifecycle controller's UPDATE of a protected node adding
//!      the unreachable NoExecute taint (5 conditions, 50 images, managedFields);
//!    - slice reviews: the EndpointSlice controller's UPDATE of a slice of 100 endpoints
//!      over cached nodes, those on Unknown nodes marked not ready.
//!
//!    Each kind runs one connection unloaded, closed-loop (16 connections, as fast as
//!    answers come: saturation), open-loop at the target rate and at half the measured
//!    saturation rate (32 connections, each at rate/32; when a connection is still busy
//!    at a request's scheduled time, its latency counts from the scheduled time, so an
//!    overloaded server is not hidden by coordinated omission). Node reviews run once
//!    more closed-loop against a second instance with `RUST_LOG=warn` (no info line per
//!    patched review). The load generator shares the cores with the server, so the
//!    server's CPU time per review (utime + stime of the binary from `/proc/<pid>/stat`)
//!    is reported as the load-independent number, next to the in-handler time from the
//!    webhook's own histogram and the pure decision measured in-process, stage by stage.
//! 2. Node writes the design causes. SuperEdge's design keeps kube-controller-manager's
//!    node lifecycle controller, which re-queues an Unknown node lacking the unreachable
//!    NoExecute taint on every monitor pass (5 s); the webhook strips the taint again, so
//!    the write never lands and is retried forever. Simulated against the fake apiserver
//!    with this crate's MutatingWebhookConfiguration registered (URL and CA bundle) and the
//!    binary answering, twice: every node re-asserted on every pass (the issue's model),
//!    and drained as kube-controller-manager drains its NoExecute queue (a token bucket
//!    per zone at `--node-eviction-rate`, burst 1, tried every 100 ms). A re-assertion is
//!    `AddOrUpdateTaintOnNode`: GET `resourceVersion=0`, then a PATCH of the taints with
//!    the resourceVersion precondition. Counted from the fake apiserver's request log and
//!    the webhook's metrics. Compared with `edge-node-lifecycle` (its `controller::run`,
//!    in-process, leading), which needs no webhook, on the same nodes plus a healthy cloud
//!    zone holding one voted-unhealthy control node (which it must taint). Controller time
//!    runs `speedup` times faster than real time (every period, grace and rate scaled);
//!    counts are per simulated minute.
//!
//! `cargo bench -p edge-health-admission --bench webhook` prints one table (about a
//! minute and a half on 2 cores). `ADMISSION_BENCH_QUICK=1` runs a small cluster and
//! short phases as a smoke test (its numbers are not comparable with the targets);
//! `ADMISSION_BENCH_STAGES_ONLY=1` prints the in-process stages alone (a few seconds).
//! Timings need an otherwise idle machine (the header prints the load average).

use edgegrid_testing::bench_table::{Table, duration, met, percentile};

// the shipped binary's allocator, so the in-process stages measure what ships
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::collections::{HashSet, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use edge_health_admission::configuration::{Endpoint, mutating_webhook_configuration};
use edge_health_admission::nodes::NodeCache;
use edge_health_admission::review::{self, Hook, Policy};
use edge_node_lifecycle::controller::{self, ControllerConfig};
use edgegrid_core::keys;
use edgegrid_core::protection::{ProtectionPolicy, Timestamp};
use edgegrid_testing::tls::{TestCa, https_get};
use edgegrid_testing::{KubeconfigFile, TempDir, free_port, http_get};
use fake_apiserver::FakeApiServer;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, GetParams, Patch, PatchParams, PostParams};
use node_lifecycle::lifecycle::LifecycleConfig;
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use tokio::time::Instant;

// ---------------------------------------------------------------------------------------
// Scale and constants
// ---------------------------------------------------------------------------------------

const QUICK_ENV: &str = "ADMISSION_BENCH_QUICK";
const STAGES_ONLY_ENV: &str = "ADMISSION_BENCH_STAGES_ONLY";
const TARGET_RATE: f64 = 10_000.0;
const TARGET_P99: Duration = Duration::from_millis(2);
const CLOSED_CONNECTIONS: usize = 16;
const OPEN_CONNECTIONS: usize = 32;
/// Different request bodies per kind, sent round robin.
const DISTINCT_BODIES: usize = 16;
const ENDPOINTS_PER_SLICE: usize = 100;
const IMAGES_PER_NODE: usize = 50;
/// Units (zones) the cached nodes are spread over.
const UNITS: usize = 20;
/// Part 2: cut-off sites (zones) and protected nodes in each.
const SITES: usize = 3;
const NODES_PER_SITE: usize = 4;
/// Part 2: Ready nodes of the healthy cloud zone (their kubelets renew their Leases).
const CLOUD_NODES: usize = 4;
/// kube-controller-manager's defaults: `--node-monitor-period`, the NoExecute tainting
/// pass, `--node-eviction-rate`, `--node-monitor-grace-period`,
/// `--node-startup-grace-period`, the kubelet's Lease renewal.
const MONITOR_PERIOD: Duration = Duration::from_secs(5);
const TAINTING_PASS: Duration = Duration::from_millis(100);
const EVICTION_RATE: f64 = 0.1;
const SECONDARY_EVICTION_RATE: f64 = 0.01;
const GRACE_PERIOD: Duration = Duration::from_secs(50);
const STARTUP_GRACE_PERIOD: Duration = Duration::from_secs(60);
const LEASE_RENEW: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug)]
struct Scale {
    nodes: usize,
    phase: Duration,
    warmup: Duration,
    /// How long an open-loop phase may run past its schedule before the rest is dropped.
    open_grace: Duration,
    pure_iterations: usize,
    /// Part 2: controller time runs this many times faster than real time.
    speedup: f64,
    simulated_minutes: f64,
    quick: bool,
}

impl Scale {
    fn from_env() -> Self {
        let quick = std::env::var(QUICK_ENV).is_ok_and(|v| !v.is_empty() && v != "0");
        if quick {
            Self {
                nodes: 200,
                phase: Duration::from_secs(1),
                warmup: Duration::from_millis(300),
                open_grace: Duration::from_millis(500),
                pure_iterations: 200,
                speedup: 60.0,
                simulated_minutes: 1.0,
                quick,
            }
        } else {
            Self {
                nodes: 1_000,
                phase: Duration::from_secs(6),
                warmup: Duration::from_secs(1),
                open_grace: Duration::from_secs(2),
                pure_iterations: 2_000,
                speedup: 20.0,
                simulated_minutes: 2.0,
                quick,
            }
        }
    }

    /// A controller period or delay in bench time.
    fn scaled(&self, period: Duration) -> Duration {
        period.div_f64(self.speedup)
    }
}

// ---------------------------------------------------------------------------------------
// Objects, shaped as the kubelet, kube-controller-manager and the apiserver write them
// ---------------------------------------------------------------------------------------

/// splitmix64: the same cluster every run.
fn hash(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn hex(seed: u64, len: usize) -> String {
    (0..len).map(|i| char::from(b"0123456789abcdef"[(hash(seed ^ ((i as u64) << 32)) % 16) as usize])).collect()
}

fn uid(seed: u64) -> String {
    let h = hex(seed, 32);
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Health {
    Ready,
    /// Ready=Unknown and not voted unhealthy: the webhook protects it.
    Protected,
    /// Ready=Unknown and annotated `nodeunhealth: "yes"` by its unit's peers.
    Voted,
}

/// One in ten cached nodes protected, one in fifty voted unhealthy.
fn health(n: usize) -> Health {
    match n % 50 {
        0..=4 => Health::Protected,
        5 => Health::Voted,
        _ => Health::Ready,
    }
}

fn node_name(n: usize) -> String {
    format!("edge-node-{n:04}")
}

const CREATED: &str = "2026-03-01T08:00:00Z";
const HEARTBEAT: &str = "2026-03-02T09:59:20Z";
const UNKNOWN_SINCE: &str = "2026-03-02T10:00:00Z";
const NO_SCHEDULE_ADDED: &str = "2026-03-02T10:00:00Z";
const NO_EXECUTE_ADDED: &str = "2026-03-02T10:00:05Z";

fn taint(key: &str, effect: &str, added: Option<&str>) -> Value {
    let mut taint = json!({"key": key, "effect": effect});
    if let Some(added) = added {
        taint["timeAdded"] = json!(added);
    }
    taint
}

fn unreachable_no_schedule() -> Value {
    taint(keys::TAINT_UNREACHABLE, keys::TAINT_EFFECT_NO_SCHEDULE, Some(NO_SCHEDULE_ADDED))
}

fn unreachable_no_execute() -> Value {
    taint(keys::TAINT_UNREACHABLE, keys::TAINT_EFFECT_NO_EXECUTE, Some(NO_EXECUTE_ADDED))
}

fn conditions(health: Health) -> Value {
    let kinds = [
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ];
    let mut list: Vec<Value> = kinds
        .iter()
        .map(|(kind, status, reason, message)| match health {
            Health::Ready => json!({"type": kind, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": HEARTBEAT, "lastTransitionTime": CREATED}),
            // as the node lifecycle controller writes them when the kubelet goes silent
            Health::Protected | Health::Voted => json!({"type": kind, "status": "Unknown",
                "reason": "NodeStatusUnknown", "message": "Kubelet stopped posting node status.",
                "lastHeartbeatTime": HEARTBEAT, "lastTransitionTime": UNKNOWN_SINCE}),
        })
        .collect();
    list.insert(
        0,
        json!({"type": "NetworkUnavailable", "status": "False", "reason": "FlannelIsUp",
            "message": "Flannel is running on this node", "lastHeartbeatTime": CREATED, "lastTransitionTime": CREATED}),
    );
    Value::Array(list)
}

fn images(seed: u64) -> Value {
    let repositories = [
        "registry.k8s.io/kube-proxy",
        "docker.io/flannel/flannel",
        "docker.io/superedge/edge-health",
        "docker.io/superedge/application-grid-wrapper",
        "docker.io/library/nginx",
        "quay.io/prometheus/node-exporter",
        "docker.io/library/redis",
        "registry.example.com/factory/line-controller",
    ];
    let list: Vec<Value> = (0..IMAGES_PER_NODE)
        .map(|i| {
            let repository = repositories[i % repositories.len()];
            let digest = hex(hash(seed * 64 + i as u64), 64);
            json!({
                "names": [format!("{repository}@sha256:{digest}"), format!("{repository}:v1.{}.{}", i % 30, i % 7)],
                "sizeBytes": 5_000_000 + hash(seed ^ i as u64) % 300_000_000,
            })
        })
        .collect();
    Value::Array(list)
}

/// What a real apiserver keeps of who wrote which field (it sends it to webhooks too).
fn node_managed_fields() -> Value {
    json!([
        {"manager": "kubeadm", "operation": "Update", "apiVersion": "v1", "time": CREATED, "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:annotations": {"f:kubeadm.alpha.kubernetes.io/cri-socket": {}}}}},
        {"manager": "flanneld", "operation": "Update", "apiVersion": "v1", "time": CREATED, "fieldsType": "FieldsV1",
         "subresource": "status",
         "fieldsV1": {"f:metadata": {"f:annotations": {"f:flannel.alpha.coreos.com/backend-data": {},
            "f:flannel.alpha.coreos.com/backend-type": {}, "f:flannel.alpha.coreos.com/kube-subnet-manager": {},
            "f:flannel.alpha.coreos.com/public-ip": {}}},
            "f:status": {"f:conditions": {"k:{\"type\":\"NetworkUnavailable\"}": {".": {}, "f:lastHeartbeatTime": {},
            "f:lastTransitionTime": {}, "f:message": {}, "f:reason": {}, "f:status": {}, "f:type": {}}}}}},
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": UNKNOWN_SINCE,
         "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:annotations": {"f:node.alpha.kubernetes.io/ttl": {}}},
            "f:spec": {"f:podCIDR": {}, "f:podCIDRs": {".": {}, "v:\"10.244.3.0/24\"": {}}, "f:taints": {}}}},
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": HEARTBEAT, "fieldsType": "FieldsV1",
         "subresource": "status",
         "fieldsV1": {"f:status": {"f:allocatable": {"f:cpu": {}, "f:ephemeral-storage": {}, "f:memory": {}},
            "f:capacity": {"f:cpu": {}, "f:ephemeral-storage": {}, "f:memory": {}},
            "f:conditions": {
                "k:{\"type\":\"DiskPressure\"}": {"f:lastHeartbeatTime": {}},
                "k:{\"type\":\"MemoryPressure\"}": {"f:lastHeartbeatTime": {}},
                "k:{\"type\":\"PIDPressure\"}": {"f:lastHeartbeatTime": {}},
                "k:{\"type\":\"Ready\"}": {"f:lastHeartbeatTime": {}, "f:lastTransitionTime": {}, "f:message": {},
                    "f:reason": {}, "f:status": {}}},
            "f:images": {}, "f:nodeInfo": {"f:bootID": {}, "f:containerRuntimeVersion": {}, "f:kernelVersion": {},
                "f:kubeProxyVersion": {}, "f:kubeletVersion": {}, "f:osImage": {}}}}},
    ])
}

/// A Node as the apiserver serves it (without resourceVersion: the store sets it).
fn node_json(name: &str, seed: u64, zone: &str, health: Health, taints: Value) -> Value {
    let ip = format!("192.168.{}.{}", seed / 250 % 250, seed % 250 + 2);
    let mut annotations = json!({
        "flannel.alpha.coreos.com/backend-data": format!(r#"{{"VNI":1,"VtepMAC":"{}"}}"#, hex(seed, 12)),
        "flannel.alpha.coreos.com/backend-type": "vxlan",
        "flannel.alpha.coreos.com/kube-subnet-manager": "true",
        "flannel.alpha.coreos.com/public-ip": ip,
        "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///var/run/containerd/containerd.sock",
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        keys::EDGE_HEALTH_ADDRESS_ANNOTATION: format!("{ip}:51005"),
    });
    if health == Health::Voted {
        annotations[keys::NODE_UNHEALTH_ANNOTATION] = json!(keys::NODE_UNHEALTH_YES);
    }
    let cidr = format!("10.244.{}.0/24", seed % 250);
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name, "uid": uid(seed), "creationTimestamp": CREATED,
            "labels": {
                "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "edge-4c8g",
                (keys::TOPOLOGY_REGION_LABEL): "edge-region-1", (keys::TOPOLOGY_ZONE_LABEL): zone,
                "superedge.io/unit": zone,
            },
            "annotations": annotations,
            "managedFields": node_managed_fields(),
        },
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr], "providerID": format!("edge://{name}"), "taints": taints},
        "status": {
            "capacity": {"cpu": "4", "ephemeral-storage": "61255492Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
                "memory": "8152920Ki", "pods": "110"},
            "allocatable": {"cpu": "4", "ephemeral-storage": "56453061334", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
                "memory": "8050520Ki", "pods": "110"},
            "conditions": conditions(health),
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": hex(seed ^ 1, 32), "systemUUID": uid(seed ^ 2), "bootID": uid(seed ^ 3),
                "kernelVersion": "6.1.0-28-amd64", "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://1.7.24", "kubeletVersion": "v1.33.1",
                "kubeProxyVersion": "v1.33.1", "operatingSystem": "linux", "architecture": "amd64",
            },
            "images": images(seed),
        },
    })
}

/// A cached node's taints as the lifecycle controller leaves them (the NoExecute taint of
/// a protected node having been stripped).
fn cached_taints(health: Health) -> Value {
    match health {
        Health::Ready => json!([]),
        Health::Protected => json!([unreachable_no_schedule()]),
        Health::Voted => json!([unreachable_no_schedule(), unreachable_no_execute()]),
    }
}

fn unit_of(n: usize) -> String {
    format!("unit-{}", n % UNITS)
}

fn cached_node(n: usize) -> Value {
    node_json(&node_name(n), n as u64, &unit_of(n), health(n), cached_taints(health(n)))
}

/// The AdmissionReview the apiserver sends for an UPDATE.
fn review_json(uid: &str, resource: (&str, &str, &str), object: &Value, old: &Value, user: &str) -> Value {
    let (group, kind, plural) = resource;
    let gvk = json!({"group": group, "version": "v1", "kind": kind});
    let gvr = json!({"group": group, "version": "v1", "resource": plural});
    let mut request = json!({
        "uid": uid, "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": object["metadata"]["name"], "operation": "UPDATE",
        "userInfo": {"username": format!("system:serviceaccount:kube-system:{user}"),
            "uid": uid_from(user), "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system",
            "system:authenticated"]},
        "object": object, "oldObject": old, "dryRun": false,
        "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"},
    });
    if let Some(namespace) = object["metadata"]["namespace"].as_str() {
        request["namespace"] = json!(namespace);
    }
    json!({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request})
}

fn uid_from(text: &str) -> String {
    uid(text.bytes().fold(7, |h, b| hash(h ^ u64::from(b))))
}

/// One kind of review: the bodies sent round robin and, per body, the object the
/// returned patch must produce.
struct Workload {
    name: &'static str,
    hook: Hook,
    /// As the apiserver calls it.
    path: &'static str,
    bodies: Vec<Bytes>,
    objects: Vec<Value>,
    expected: Vec<Value>,
    /// Patch operations expected per review, on average.
    operations: f64,
}

impl Workload {
    fn mean_bytes(&self) -> usize {
        self.bodies.iter().map(Bytes::len).sum::<usize>() / self.bodies.len().max(1)
    }
}

/// The lifecycle controller adds the unreachable NoExecute taint to a protected node.
fn node_workload(scale: &Scale) -> Workload {
    let protected: Vec<usize> = (0..scale.nodes).filter(|n| health(*n) == Health::Protected).collect();
    let (mut bodies, mut objects, mut expected) = (Vec::new(), Vec::new(), Vec::new());
    for (i, &n) in protected.iter().cycle().take(DISTINCT_BODIES).enumerate() {
        let mut old = cached_node(n);
        old["metadata"]["resourceVersion"] = json!((5_000_000 + n).to_string());
        let mut object = old.clone();
        object["spec"]["taints"] = json!([unreachable_no_schedule(), unreachable_no_execute()]);
        let review = review_json(&uid(hash(i as u64 + 100)), ("", "Node", "nodes"), &object, &old, "node-controller");
        bodies.push(Bytes::from(review.to_string()));
        expected.push(old.clone());
        objects.push(object);
    }
    Workload {
        name: "node",
        hook: Hook::NodeTaint,
        path: "/node-taint?timeout=5s",
        bodies,
        objects,
        expected,
        operations: 1.0,
    }
}

fn endpoint_node(slice: usize, endpoint: usize, scale: &Scale) -> usize {
    (hash(((slice as u64) << 20) | endpoint as u64) % scale.nodes as u64) as usize
}

/// The EndpointSlice controller marks the endpoints on Unknown nodes not ready.
fn slice_workload(scale: &Scale) -> Workload {
    let (mut bodies, mut objects, mut expected) = (Vec::new(), Vec::new(), Vec::new());
    let mut operations = 0usize;
    for s in 0..DISTINCT_BODIES {
        let service = format!("svc-{s:03}");
        let namespace = format!("team-{}", s % 4);
        let endpoint = |e: usize, ready: bool| {
            let n = endpoint_node(s, e, scale);
            json!({
                "addresses": [format!("10.244.{}.{}", n % 250, e + 10)],
                "conditions": {"ready": ready, "serving": ready, "terminating": false},
                "nodeName": node_name(n), "zone": unit_of(n),
                "targetRef": {"kind": "Pod", "namespace": namespace, "name": format!("{service}-7d9f8b6c5-{}", hex(hash((s * 1000 + e) as u64), 5)),
                    "uid": uid(hash((s * 1000 + e) as u64 + 17))},
            })
        };
        let slice = |ready_of: &dyn Fn(usize) -> bool| {
            json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {
                    "name": format!("{service}-{}", hex(s as u64, 5)), "generateName": format!("{service}-"),
                    "namespace": namespace, "uid": uid(s as u64 + 9_000), "resourceVersion": (7_000_000 + s).to_string(),
                    "generation": 42, "creationTimestamp": CREATED,
                    "labels": {(keys::SERVICE_NAME_LABEL): service, "app.kubernetes.io/name": service,
                        "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"},
                    "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": UNKNOWN_SINCE},
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": service, "uid": uid(s as u64 + 8_000),
                        "controller": true, "blockOwnerDeletion": true}],
                    "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                        "apiVersion": "discovery.k8s.io/v1", "time": UNKNOWN_SINCE, "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:addressType": {}, "f:endpoints": {}, "f:metadata": {"f:annotations": {".": {},
                            "f:endpoints.kubernetes.io/last-change-trigger-time": {}}, "f:generateName": {},
                            "f:labels": {".": {}, "f:endpointslice.kubernetes.io/managed-by": {},
                            "f:kubernetes.io/service-name": {}}, "f:ownerReferences": {".": {},
                            "k:{\"uid\":\"x\"}": {}}}, "f:ports": {}}}],
                },
                "addressType": "IPv4",
                "endpoints": (0..ENDPOINTS_PER_SLICE).map(|e| endpoint(e, ready_of(e))).collect::<Vec<_>>(),
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}, {"name": "metrics", "port": 9090, "protocol": "TCP"}],
            })
        };
        let health_of = |e: usize| health(endpoint_node(s, e, scale));
        let old = slice(&|_| true);
        let object = slice(&|e| health_of(e) == Health::Ready);
        let want = slice(&|e| health_of(e) != Health::Voted);
        operations += 2 * (0..ENDPOINTS_PER_SLICE).filter(|e| health_of(*e) == Health::Protected).count();
        let review = review_json(
            &uid(hash(s as u64 + 200)),
            ("discovery.k8s.io", "EndpointSlice", "endpointslices"),
            &object,
            &old,
            "endpointslice-controller",
        );
        bodies.push(Bytes::from(review.to_string()));
        objects.push(object);
        expected.push(want);
    }
    Workload {
        name: "slice",
        hook: Hook::EndpointSlice,
        path: "/endpointslice?timeout=5s",
        bodies,
        objects,
        expected,
        operations: operations as f64 / DISTINCT_BODIES as f64,
    }
}

/// Checks one answer: the envelope, and that the patch turns the sent object into the
/// expected one.
fn check_answer(workload: &Workload, index: usize, status: u16, body: &[u8]) {
    assert_eq!(status, 200, "{}: {}", workload.name, String::from_utf8_lossy(body));
    let answer: Value = serde_json::from_slice(body).expect("a JSON answer");
    let sent: Value = serde_json::from_slice(&workload.bodies[index]).expect("JSON");
    assert_eq!(answer["apiVersion"], json!("admission.k8s.io/v1"));
    assert_eq!(answer["response"]["uid"], sent["request"]["uid"]);
    assert_eq!(answer["response"]["allowed"], json!(true));
    let mut object = workload.objects[index].clone();
    if let Some(encoded) = answer["response"]["patch"].as_str() {
        let patch: json_patch::Patch =
            serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(encoded).expect("base64"))
                .expect("a JSON patch");
        json_patch::patch(&mut object, &patch).expect("the patch applies");
    }
    assert!(
        object == workload.expected[index],
        "{} review {index}: the patched object is not the expected one",
        workload.name
    );
}

// ---------------------------------------------------------------------------------------
// The binary, the fake apiserver, /proc
// ---------------------------------------------------------------------------------------

/// `edge-health-admission` as shipped, logging to a file; killed when dropped.
struct Webhook {
    child: Child,
    addr: SocketAddr,
    metrics: SocketAddr,
    log: PathBuf,
    _dir: TempDir,
}

impl Webhook {
    async fn start(kubeconfig: &KubeconfigFile, ca: &TestCa, log_level: &str) -> Self {
        let dir = TempDir::new("admission-bench").expect("temp dir");
        let cert = ca.server_cert(1);
        std::fs::write(dir.join("tls.crt"), &cert.cert_pem).expect("write");
        std::fs::write(dir.join("tls.key"), &cert.key_pem).expect("write");
        let (port, metrics_port) = (free_port(), free_port());
        let log = dir.join("stderr.log");
        let child = Command::new(env!("CARGO_BIN_EXE_edge-health-admission"))
            .args(["--kubeconfig", &kubeconfig.arg()])
            .args(["--bind-address", &format!("127.0.0.1:{port}")])
            .args(["--metrics-bind-address", &format!("127.0.0.1:{metrics_port}")])
            .args(["--tls-cert-file", &dir.join("tls.crt").display().to_string()])
            .args(["--tls-private-key-file", &dir.join("tls.key").display().to_string()])
            .env("RUST_LOG", log_level)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("the binary starts");
        let mut webhook = Self {
            child,
            addr: ([127, 0, 0, 1], port).into(),
            metrics: ([127, 0, 0, 1], metrics_port).into(),
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(response) = https_get(webhook.addr, "/readyz", ca.client_config(None)).await
                && response.status == 200
            {
                break;
            }
            if let Ok(Some(status)) = webhook.child.try_wait() {
                panic!("the webhook exited ({status}): {}", std::fs::read_to_string(&webhook.log).unwrap_or_default());
            }
            assert!(Instant::now() < deadline, "the webhook never became ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        webhook
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log_bytes(&self) -> u64 {
        std::fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0)
    }

    async fn exposition(&self) -> String {
        let (status, body) = http_get(self.metrics, "/metrics").await.expect("/metrics answers");
        assert_eq!(status, 200);
        body
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of the sample `series` (name and labels exactly as exposed), 0 if absent.
fn sample(exposition: &str, series: &str) -> f64 {
    exposition.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok()).unwrap_or(0.0)
}

/// The sum of every sample of `name` whose labels start with `labels_prefix`.
fn sum_samples(exposition: &str, name: &str, labels_prefix: &str) -> f64 {
    let prefix = format!("{name}{{{labels_prefix}");
    exposition
        .lines()
        .filter(|line| line.starts_with(&prefix))
        .filter_map(|line| line.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
        .sum()
}

fn clock_ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// utime + stime of a process, every thread, from `/proc/<pid>/stat`.
fn cpu_time(pid: u32, ticks_per_second: f64) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some((_, after_name)) = stat.rsplit_once(')') else { return Duration::ZERO };
    // fields 3.. of proc(5): utime is field 14, stime field 15
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    Duration::from_secs_f64((ticks(11) + ticks(12)) / ticks_per_second)
}

/// What is read before and after a load phase.
struct Sample {
    server_cpu: Duration,
    own_cpu: Duration,
    handler_seconds: f64,
    handled: f64,
    log_bytes: u64,
}

impl Sample {
    async fn take(webhook: &Webhook, hook: Hook, ticks: f64) -> Self {
        let exposition = webhook.exposition().await;
        let label = format!("{{hook=\"{}\"}}", hook.name());
        Self {
            server_cpu: cpu_time(webhook.pid(), ticks),
            own_cpu: cpu_time(std::process::id(), ticks),
            handler_seconds: sample(&exposition, &format!("edge_health_admission_review_duration_seconds_sum{label}")),
            handled: sample(&exposition, &format!("edge_health_admission_review_duration_seconds_count{label}")),
            log_bytes: webhook.log_bytes(),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The load generator
// ---------------------------------------------------------------------------------------

type Connection = SendRequest<Full<Bytes>>;

async fn connect(addr: SocketAddr, tls: &Arc<rustls::ClientConfig>) -> Connection {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    tcp.set_nodelay(true).expect("TCP_NODELAY");
    let stream = tokio_rustls::TlsConnector::from(tls.clone())
        .connect(ServerName::IpAddress(addr.ip().into()), tcp)
        .await
        .expect("TLS handshake");
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.expect("HTTP/1.1");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    sender
}

async fn post(
    connection: &mut Connection,
    host: &str,
    path: &'static str,
    body: Bytes,
) -> Result<(u16, Bytes), String> {
    connection.ready().await.map_err(|e| e.to_string())?;
    let request = http::Request::post(path)
        .header(http::header::HOST, host)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json, */*")
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
    let response = connection.send_request(request).await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((status, body))
}

/// One load phase's outcome.
struct Run {
    /// Sorted.
    latencies: Vec<Duration>,
    /// Until the last answer (at least the phase's length).
    wall: Duration,
    failures: usize,
    /// Open loop only: scheduled requests dropped because the server fell too far behind.
    unsent: usize,
    server_cpu: Duration,
    own_cpu: Duration,
    /// Mean time inside the handler, from the webhook's own histogram.
    handler: Duration,
    log_bytes: u64,
}

impl Run {
    fn completed(&self) -> usize {
        self.latencies.len()
    }

    fn rate(&self) -> f64 {
        self.completed() as f64 / self.wall.as_secs_f64()
    }

    fn per_review(&self, total: Duration) -> Duration {
        total.div_f64(self.completed().max(1) as f64)
    }
}

#[derive(Clone, Copy)]
enum Pace {
    /// Every connection sends its next request as soon as it has the answer.
    Closed,
    /// Requests per second over all connections, on a fixed schedule.
    Open(f64),
}

struct Load<'a> {
    webhook: &'a Webhook,
    tls: &'a Arc<rustls::ClientConfig>,
    ticks: f64,
}

impl Load<'_> {
    async fn run(
        &self,
        workload: &Arc<Workload>,
        connections: usize,
        pace: Pace,
        duration: Duration,
        grace: Duration,
    ) -> Run {
        let mut pool = Vec::with_capacity(connections);
        for _ in 0..connections {
            pool.push(connect(self.webhook.addr, self.tls).await);
        }
        let before = Sample::take(self.webhook, workload.hook, self.ticks).await;
        let start = Instant::now() + Duration::from_millis(5);
        let end = start + duration;
        let host: Arc<str> = Arc::from(self.webhook.addr.to_string());
        let tasks: Vec<_> = pool
            .into_iter()
            .enumerate()
            .map(|(i, mut connection)| {
                let workload = workload.clone();
                let host = host.clone();
                tokio::spawn(async move {
                    let mut latencies = Vec::new();
                    let (mut failures, mut unsent) = (0, 0);
                    let mut busy_until = start;
                    let mut last_answer = start;
                    tokio::time::sleep_until(start).await;
                    for k in 0usize.. {
                        let body = workload.bodies[(i + k) % workload.bodies.len()].clone();
                        let from = match pace {
                            Pace::Closed => {
                                if Instant::now() >= end {
                                    break;
                                }
                                Instant::now()
                            }
                            Pace::Open(rate) => {
                                let period = connections as f64 / rate;
                                let offset = i as f64 / connections as f64;
                                let scheduled = start + Duration::from_secs_f64(period * (k as f64 + offset));
                                if scheduled >= end {
                                    break;
                                }
                                if Instant::now() >= end + grace {
                                    let total = (duration.as_secs_f64() / period - offset).ceil() as usize;
                                    unsent = total.saturating_sub(k);
                                    break;
                                }
                                tokio::time::sleep_until(scheduled).await;
                                // late because the previous answer was: count from the
                                // schedule; late only by the timer: from the send
                                if busy_until > scheduled { scheduled } else { Instant::now() }
                            }
                        };
                        match post(&mut connection, &host, workload.path, body).await {
                            Ok((200, _)) => {
                                let done = Instant::now();
                                latencies.push(done - from);
                                busy_until = done;
                                last_answer = done;
                            }
                            _ => {
                                failures += 1;
                                busy_until = Instant::now();
                            }
                        }
                    }
                    (latencies, failures, unsent, last_answer)
                })
            })
            .collect();
        let mut run = Run {
            latencies: Vec::new(),
            wall: duration,
            failures: 0,
            unsent: 0,
            server_cpu: Duration::ZERO,
            own_cpu: Duration::ZERO,
            handler: Duration::ZERO,
            log_bytes: 0,
        };
        for task in tasks {
            let (latencies, failures, unsent, last_answer) = task.await.expect("load task");
            run.latencies.extend(latencies);
            run.failures += failures;
            run.unsent += unsent;
            run.wall = run.wall.max(last_answer - start);
        }
        let after = Sample::take(self.webhook, workload.hook, self.ticks).await;
        run.latencies.sort_unstable();
        run.server_cpu = after.server_cpu.saturating_sub(before.server_cpu);
        run.own_cpu = after.own_cpu.saturating_sub(before.own_cpu);
        let handled = (after.handled - before.handled).max(1.0);
        run.handler = Duration::from_secs_f64((after.handler_seconds - before.handler_seconds).max(0.0) / handled);
        run.log_bytes = after.log_bytes.saturating_sub(before.log_bytes);
        run
    }

    /// One request per distinct body, each answer checked; then `warmup` of closed load.
    async fn verify_and_warm(&self, workload: &Arc<Workload>, warmup: Duration) {
        let mut connection = connect(self.webhook.addr, self.tls).await;
        let host = self.webhook.addr.to_string();
        for (i, body) in workload.bodies.iter().enumerate() {
            let (status, answer) = post(&mut connection, &host, workload.path, body.clone()).await.expect("answered");
            check_answer(workload, i, status, &answer);
        }
        let warm = self.run(workload, CLOSED_CONNECTIONS, Pace::Closed, warmup, Duration::ZERO).await;
        assert_eq!(warm.failures, 0, "{} warm-up failures", workload.name);
    }
}

/// The pure decision, in-process on one thread, against a node cache holding the same
/// nodes: the whole of it and each stage (medians).
struct Stages {
    /// Sorted.
    total: Vec<Duration>,
    /// `review::parse`: one pass over the body, the object read as the hook's typed view.
    parse: Duration,
    /// `review::decide`: the rule on the view.
    decide: Duration,
    /// For comparison: k8s-openapi's typed decoding of the object's text (how this webhook
    /// once checked that an object decodes).
    typed: Duration,
    /// `review::response` and `to_string`.
    encode: Duration,
    /// For comparison: `serde_json::from_slice::<Value>` of the body (the tree reading).
    value: Duration,
    /// The body scanned without building anything (`serde::de::IgnoredAny`).
    scan: Duration,
}

fn times_of(iterations: usize, mut stage: impl FnMut(usize)) -> Vec<Duration> {
    let mut times = Vec::with_capacity(iterations);
    for i in 0..iterations {
        let started = Instant::now();
        stage(i);
        times.push(started.elapsed());
    }
    times.sort_unstable();
    times
}

fn stages(cache: &NodeCache, workload: &Workload, iterations: usize) -> Stages {
    use std::hint::black_box;
    let hook = workload.hook;
    let policy = Policy { now: Timestamp::now(), protection: ProtectionPolicy::default() };
    let body = |i: usize| &workload.bodies[i % workload.bodies.len()];
    let parsed: Vec<review::Review> =
        workload.bodies.iter().map(|b| review::parse(hook, b).expect("a review")).collect();
    assert!(parsed.iter().all(review::Review::read_lean), "{}: the bench's reviews are read lean", workload.name);
    let review = |i: usize| &parsed[i % parsed.len()];
    let decisions: Vec<review::Decision> = parsed.iter().map(|r| review::decide(hook, r, cache, &policy)).collect();
    let objects: Vec<String> = workload.objects.iter().map(Value::to_string).collect();
    let object = |i: usize| objects[i % objects.len()].as_str();
    let median = |times: Vec<Duration>| percentile(&times, 0.5);
    Stages {
        total: times_of(iterations, |i| {
            let parsed = review::parse(hook, body(i)).expect("a review");
            let decision = review::decide(hook, &parsed, cache, &policy);
            black_box(review::response(&parsed, &decision).to_string());
        }),
        parse: median(times_of(iterations, |i| {
            black_box(review::parse(hook, body(i)).expect("a review"));
        })),
        decide: median(times_of(iterations, |i| {
            black_box(review::decide(hook, review(i), cache, &policy));
        })),
        typed: median(times_of(iterations, |i| match hook {
            Hook::NodeTaint => drop(black_box(serde_json::from_str::<Node>(object(i)).expect("a Node"))),
            _ => drop(black_box(serde_json::from_str::<EndpointSlice>(object(i)).expect("an EndpointSlice"))),
        })),
        encode: median(times_of(iterations, |i| {
            black_box(review::response(review(i), &decisions[i % decisions.len()]).to_string());
        })),
        value: median(times_of(iterations, |i| {
            black_box(serde_json::from_slice::<Value>(body(i)).expect("JSON"));
        })),
        scan: median(times_of(iterations, |i| {
            black_box(serde_json::from_slice::<serde::de::IgnoredAny>(body(i)).expect("JSON"));
        })),
    }
}

// ---------------------------------------------------------------------------------------
// 2. Node writes per protected node
// ---------------------------------------------------------------------------------------

fn site_node(site: usize, i: usize) -> String {
    format!("site-{site}-node-{i}")
}

fn site_zone(site: usize) -> String {
    format!("cut-off-site-{site}")
}

/// Every protected node of the cut-off sites, with its site.
fn site_nodes() -> Vec<(String, usize)> {
    (0..SITES).flat_map(|site| (0..NODES_PER_SITE).map(move |i| (site_node(site, i), site))).collect()
}

fn store_create(server: &FakeApiServer, group: &str, plural: &str, namespace: &str, object: Value) {
    let store = server.store();
    let rt = store.resolve(group, "v1", plural).expect("a built-in resource");
    store.create(&rt, namespace, object).expect("created");
}

/// The cut-off sites' nodes: Unknown (the controller wrote it), not voted unhealthy,
/// tainted unreachable:NoSchedule, as the lifecycle controller leaves them.
fn create_site_nodes(server: &FakeApiServer) {
    for (i, (name, site)) in site_nodes().into_iter().enumerate() {
        let node = node_json(
            &name,
            50_000 + i as u64,
            &site_zone(site),
            Health::Protected,
            json!([unreachable_no_schedule()]),
        );
        store_create(server, "", "nodes", "", node);
    }
}

fn client(server: &FakeApiServer) -> Client {
    Client::try_from(kube::Config::new(server.url().parse().expect("url"))).expect("client")
}

fn has_no_execute(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .any(|t| t.key == keys::TAINT_UNREACHABLE && t.effect == keys::TAINT_EFFECT_NO_EXECUTE)
}

fn resource_versions(server: &FakeApiServer, names: &[String]) -> Vec<Value> {
    let store = server.store();
    let rt = store.resolve("", "v1", "nodes").expect("nodes");
    names
        .iter()
        .map(|n| store.get(&rt, "", n).map(|o| o["metadata"]["resourceVersion"].clone()).unwrap_or_default())
        .collect()
}

/// How the simulated stock controller drains its NoExecute tainting queue.
#[derive(Clone, Copy, PartialEq)]
enum Drain {
    /// Every node lacking the taint is re-asserted on every monitor pass (the issue's model).
    EveryPass,
    /// kube-controller-manager's `zoneNoExecuteTainter`: one token bucket per zone at
    /// `--node-eviction-rate` (burst 1), tried every tainting pass (100 ms).
    ZoneQueue,
}

#[derive(Debug, Default)]
struct Traffic {
    passes: usize,
    reads: usize,
    writes: usize,
    webhook_calls: f64,
    /// Writes that changed a stored node (a resourceVersion moved).
    stored_changes: usize,
    /// Nodes stored with the NoExecute taint (a webhook call that failed open).
    leaked: usize,
}

/// `AddOrUpdateTaintOnNode`: GET (resourceVersion=0), and if the taint is missing a
/// PATCH of the taints with the resourceVersion precondition. True if the node was (or
/// is now) stored with the NoExecute taint.
async fn reassert(nodes: &Api<Node>, name: &str) -> bool {
    let node = nodes.get_with(name, &GetParams::any()).await.expect("GET node");
    if has_no_execute(&node) {
        return true;
    }
    let mut taints: Vec<Value> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .map(|t| serde_json::to_value(t).expect("JSON"))
        .collect();
    let added = Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    taints.push(taint(keys::TAINT_UNREACHABLE, keys::TAINT_EFFECT_NO_EXECUTE, Some(&added)));
    let patch = json!({"metadata": {"resourceVersion": node.metadata.resource_version}, "spec": {"taints": taints}});
    // `PatchNodeTaints` sends a strategic merge patch; Node `spec.taints` is
    // `listType=atomic`, so it replaces the list, which is what a merge patch does. (The
    // fake apiserver's strategic merge merges taints on `key` alone, which would turn
    // unreachable:NoSchedule into the NoExecute taint: not what a real apiserver does.)
    let stored = nodes.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("PATCH node");
    has_no_execute(&stored)
}

async fn webhook_node_calls(webhook: &Webhook) -> f64 {
    sum_samples(&webhook.exposition().await, "edge_health_admission_reviews_total", "hook=\"node-taint\"")
}

/// The stock controller's loop on the cut-off sites' nodes, for `scale.simulated_minutes`.
async fn stock_loop(server: &FakeApiServer, webhook: &Webhook, drain: Drain, scale: &Scale) -> Traffic {
    let nodes: Api<Node> = Api::all(client(server));
    let sites = site_nodes();
    let names: Vec<String> = sites.iter().map(|(n, _)| n.clone()).collect();
    let versions = resource_versions(server, &names);
    let calls_before = webhook_node_calls(webhook).await;
    let mark = server.requests().mark();
    let mut traffic = Traffic::default();
    let (monitor, tick) = (scale.scaled(MONITOR_PERIOD), scale.scaled(TAINTING_PASS));
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(60.0 * scale.simulated_minutes / scale.speedup);
    let mut next_pass = start;
    let mut queues: Vec<VecDeque<String>> = vec![VecDeque::new(); SITES];
    let mut queued: HashSet<String> = HashSet::new();
    // a bucket drained continuously is empty: count the steady state, not the first burst
    let mut tokens = [0.0f64; SITES];
    let mut refilled = start;
    while Instant::now() < end {
        let now = Instant::now();
        if now >= next_pass {
            next_pass += monitor;
            traffic.passes += 1;
            // the informer shows every node without the NoExecute taint: the webhook
            // stripped it (and the no-op write changed nothing to watch)
            // (concurrently: a pass must not take longer than the scaled period because of
            // the fake apiserver's webhook calls, a fresh connection each)
            match drain {
                Drain::EveryPass => {
                    let calls = sites.iter().map(|(name, _)| reassert(&nodes, name));
                    traffic.leaked += futures::future::join_all(calls).await.into_iter().filter(|l| *l).count();
                }
                Drain::ZoneQueue => {
                    for (name, site) in &sites {
                        if queued.insert(name.clone()) {
                            queues[*site].push_back(name.clone());
                        }
                    }
                }
            }
        }
        if drain == Drain::ZoneQueue {
            let elapsed = now.duration_since(refilled).as_secs_f64();
            refilled = now;
            let mut due = Vec::new();
            for (site, queue) in queues.iter_mut().enumerate() {
                tokens[site] = (tokens[site] + elapsed * EVICTION_RATE * scale.speedup).min(1.0);
                if tokens[site] >= 1.0
                    && let Some(name) = queue.pop_front()
                {
                    tokens[site] -= 1.0;
                    queued.remove(&name);
                    due.push(name);
                }
            }
            let calls = due.iter().map(|name| reassert(&nodes, name));
            traffic.leaked += futures::future::join_all(calls).await.into_iter().filter(|l| *l).count();
        }
        tokio::time::sleep(tick).await;
    }
    let prefix = "/api/v1/nodes/";
    for request in server.requests().since(mark) {
        let Some(name) = request.path.strip_prefix(prefix) else { continue };
        if !names.iter().any(|n| n == name) {
            continue;
        }
        if request.is_write() {
            traffic.writes += 1;
        } else {
            traffic.reads += 1;
        }
    }
    traffic.webhook_calls = webhook_node_calls(webhook).await - calls_before;
    traffic.stored_changes =
        versions.iter().zip(resource_versions(server, &names)).filter(|(before, after)| *before != after).count();
    traffic
}

#[derive(Debug, Default)]
struct Lifecycle {
    passes: u64,
    protected_writes: usize,
    protected_tainted: usize,
    control_writes: usize,
    control_tainted: bool,
    other_writes: usize,
}

/// `edge-node-lifecycle`'s controller (in-process, leading) against a fake apiserver
/// without any webhook: the same cut-off sites, plus a healthy cloud zone whose kubelets
/// renew their Leases and one node there voted unhealthy (the control: it must be
/// tainted NoExecute, proving the controller acts).
async fn edge_node_lifecycle(scale: &Scale) -> Lifecycle {
    let server = FakeApiServer::start().await.expect("fake apiserver");
    create_site_nodes(&server);
    let renew = || Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
    let cloud: Vec<String> = (0..CLOUD_NODES).map(|i| format!("cloud-node-{i}")).collect();
    for (i, name) in cloud.iter().enumerate() {
        store_create(&server, "", "nodes", "", node_json(name, 60_000 + i as u64, "cloud", Health::Ready, json!([])));
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": keys::NODE_LEASE_NAMESPACE},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": renew()}});
        store_create(&server, "coordination.k8s.io", "leases", keys::NODE_LEASE_NAMESPACE, lease);
    }
    let control = "cloud-node-voted".to_string();
    store_create(
        &server,
        "",
        "nodes",
        "",
        node_json(&control, 61_000, "cloud", Health::Voted, json!([unreachable_no_schedule()])),
    );
    let client = client(&server);
    let kubelets = {
        let leases: Api<Lease> = Api::namespaced(client.clone(), keys::NODE_LEASE_NAMESPACE);
        let (cloud, period) = (cloud.clone(), scale.scaled(LEASE_RENEW));
        tokio::spawn(async move {
            loop {
                for name in &cloud {
                    let patch = json!({"spec": {"renewTime": renew()}});
                    let _ = leases.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await;
                }
                tokio::time::sleep(period).await;
            }
        })
    };
    let config = ControllerConfig {
        lifecycle: LifecycleConfig {
            monitor_period: scale.scaled(MONITOR_PERIOD),
            grace_period: scale.scaled(GRACE_PERIOD),
            startup_grace_period: scale.scaled(STARTUP_GRACE_PERIOD),
            eviction_rate: EVICTION_RATE * scale.speedup,
            secondary_eviction_rate: SECONDARY_EVICTION_RATE * scale.speedup,
            ..LifecycleConfig::default()
        },
        drain_period: scale.scaled(TAINTING_PASS),
        taint_manager_period: scale.scaled(Duration::from_secs(1)),
        ..ControllerConfig::default()
    };
    let metrics = Arc::new(edge_node_lifecycle::metrics::Metrics::default());
    let synced = controller_support::Readiness::new().gate("the caches have not synced yet");
    let (_leader, leading) = tokio::sync::watch::channel(true);
    let (shutdown, stopped) = tokio::sync::watch::channel(false);
    let mark = server.requests().mark();
    let task =
        tokio::spawn(controller::run(client.clone(), config, metrics.clone(), leading, synced.clone(), stopped.into()));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !synced.is_open() {
        assert!(Instant::now() < deadline, "edge-node-lifecycle never synced");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_secs_f64(60.0 * scale.simulated_minutes / scale.speedup)).await;
    shutdown.send_replace(true);
    task.await.expect("controller");
    kubelets.abort();

    let mut outcome = Lifecycle { passes: metrics.monitor_passes.get(), ..Lifecycle::default() };
    let protected: Vec<String> = site_nodes().into_iter().map(|(n, _)| n).collect();
    for request in server.requests().since(mark) {
        let Some(name) = request.path.strip_prefix("/api/v1/nodes/") else { continue };
        let name = name.split('/').next().unwrap_or_default();
        if !request.is_write() {
            continue;
        }
        if protected.iter().any(|n| n == name) {
            outcome.protected_writes += 1;
        } else if name == control {
            outcome.control_writes += 1;
        } else {
            outcome.other_writes += 1;
        }
    }
    let nodes: Api<Node> = Api::all(client);
    for name in &protected {
        outcome.protected_tainted += usize::from(has_no_execute(&nodes.get(name).await.expect("node")));
    }
    outcome.control_tainted = has_no_execute(&nodes.get(&control).await.expect("node"));
    outcome
}

// ---------------------------------------------------------------------------------------
// Statistics and the table
// ---------------------------------------------------------------------------------------

fn per_second(rate: f64) -> String {
    format!("{rate:.0}/s")
}

fn kib(bytes: usize) -> String {
    format!("{:.1} KiB", bytes as f64 / 1024.0)
}

// ---------------------------------------------------------------------------------------

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(bench());
}

async fn bench() {
    let scale = Scale::from_env();
    let mut table = Table::new(["value", "p50", "p99", "target", "result"]);
    let started = Instant::now();
    let load = edgegrid_testing::bench_table::load_average;
    let load_at_start = load().unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let ticks = clock_ticks_per_second();

    let node_reviews = Arc::new(node_workload(&scale));
    let slice_reviews = Arc::new(slice_workload(&scale));

    // 1a. the pure decision, in-process
    let cache = NodeCache::default();
    for n in 0..scale.nodes {
        cache.apply(&serde_json::from_value::<Node>(cached_node(n)).expect("a node"));
    }
    cache.done();
    for workload in [&node_reviews, &slice_reviews] {
        let stages = stages(&cache, workload, scale.pure_iterations);
        let median = percentile(&stages.total, 0.5);
        table.row(
            "1",
            format!(
                "{} review ({} request, {:.0} patch ops), in-process parse + decide + encode, 1 thread: reviews/s per core",
                workload.name,
                kib(workload.mean_bytes()),
                workload.operations
            ),
            [&per_second(1.0 / median.as_secs_f64()), &duration(median), &duration(percentile(&stages.total, 0.99)), "", "-"],
        );
        for (what, time) in [
            (
                "  of which review::parse (one pass over the body, the object read as the hook's typed view of what its rule reads)",
                stages.parse,
            ),
            ("  of which review::decide (the rule on that view)", stages.decide),
            ("  of which review::response + to_string", stages.encode),
            ("  for comparison: the body as a serde_json::Value tree (the fallback reading, alone)", stages.value),
            (
                "  for comparison: k8s-openapi's typed decoding of the object alone (the decode check before)",
                stages.typed,
            ),
            ("  floor: the body scanned by serde_json without building anything (IgnoredAny)", stages.scan),
        ] {
            table.row("1", what, ["-", &duration(time), "-", "", "-"]);
        }
    }
    drop(cache);
    if std::env::var(STAGES_ONLY_ENV).is_ok_and(|v| !v.is_empty() && v != "0") {
        println!("edge-health-admission bench, in-process stages only; load average {load_at_start} at start");
        table.print();
        return;
    }

    // 1b. over HTTPS against the binary
    let server = FakeApiServer::start().await.expect("fake apiserver");
    for n in 0..scale.nodes {
        store_create(&server, "", "nodes", "", cached_node(n));
    }
    let kubeconfig = KubeconfigFile::new(&server.url()).expect("kubeconfig");
    let ca = TestCa::new("admission-bench-ca");
    let tls = ca.client_config(None);
    let shipped = Webhook::start(&kubeconfig, &ca, "info").await;
    let cached = sample(&shipped.exposition().await, "edge_health_admission_cached_nodes");
    assert_eq!(cached as usize, scale.nodes, "the webhook's node cache holds every node");
    let quiet = Webhook::start(&kubeconfig, &ca, "warn").await;
    let runs = [
        (&shipped, "as shipped (RUST_LOG=info)", &node_reviews),
        (&shipped, "as shipped (RUST_LOG=info)", &slice_reviews),
        (&quiet, "RUST_LOG=warn (no info line per patched review)", &node_reviews),
    ];
    for (webhook, label, workload) in runs {
        let load = Load { webhook, tls: &tls, ticks };
        load.verify_and_warm(workload, scale.warmup).await;
        let closed = load.run(workload, CLOSED_CONNECTIONS, Pace::Closed, scale.phase, Duration::ZERO).await;
        assert_eq!(closed.failures, 0, "{} closed-loop failures", workload.name);
        let server_cpu = closed.per_review(closed.server_cpu);
        table.row(
            "1",
            format!(
                "{} reviews over HTTPS, {label}, closed loop, {CLOSED_CONNECTIONS} keep-alive connections ({} answered)",
                workload.name,
                closed.completed()
            ),
            [
                &per_second(closed.rate()),
                &duration(percentile(&closed.latencies, 0.5)),
                &duration(percentile(&closed.latencies, 0.99)),
                "(saturation, context)",
                "-",
            ],
        );
        let capacity = cores as f64 / server_cpu.as_secs_f64();
        table.row(
            "1",
            format!("  server CPU per review (utime+stime of the binary); capacity on {cores} dedicated cores"),
            [&duration(server_cpu), &per_second(capacity), "-", ">= 10k/s", met(capacity >= TARGET_RATE)],
        );
        table.row(
            "1",
            "  in the handler (parse, decide, encode, metrics): the webhook's histogram, mean wall time (inflated when the cores are oversubscribed)",
            [&duration(closed.handler), "-", "-", "", "-"],
        );
        table.row(
            "1",
            "  load generator CPU per review (this process, sharing the cores)",
            [&duration(closed.per_review(closed.own_cpu)), "-", "-", "", "-"],
        );
        table.row(
            "1",
            "  log written per review (stderr)",
            [&format!("{:.0} B", closed.log_bytes as f64 / closed.completed().max(1) as f64), "-", "-", "", "-"],
        );
        if label.starts_with("as shipped") {
            let single = load.run(workload, 1, Pace::Closed, scale.warmup, Duration::ZERO).await;
            table.row(
                "1",
                format!(
                    "{} reviews over HTTPS, {label}, one connection, one request at a time (unloaded; {} answered)",
                    workload.name,
                    single.completed()
                ),
                [
                    &per_second(single.rate()),
                    &duration(percentile(&single.latencies, 0.5)),
                    &duration(percentile(&single.latencies, 0.99)),
                    "p99 < 2 ms",
                    met(percentile(&single.latencies, 0.99) < TARGET_P99),
                ],
            );
            let open =
                load.run(workload, OPEN_CONNECTIONS, Pace::Open(TARGET_RATE), scale.phase, scale.open_grace).await;
            let p99 = percentile(&open.latencies, 0.99);
            let ok = open.failures == 0 && open.unsent == 0 && open.rate() >= 0.99 * TARGET_RATE && p99 < TARGET_P99;
            table.row(
                "1",
                format!(
                    "{} reviews over HTTPS, {label}, open loop at 10k/s offered, {OPEN_CONNECTIONS} connections ({} answered, {} dropped, {} failed): rate served",
                    workload.name,
                    open.completed(),
                    open.unsent,
                    open.failures
                ),
                [
                    &per_second(open.rate()),
                    &duration(percentile(&open.latencies, 0.5)),
                    &duration(p99),
                    ">= 10k/s with p99 < 2 ms",
                    met(ok),
                ],
            );
            table.row(
                "1",
                "  server CPU per review at that rate",
                [&duration(open.per_review(open.server_cpu)), "-", "-", "", "-"],
            );
            let sustainable = (closed.rate() / 2.0).floor().max(1.0);
            let half =
                load.run(workload, OPEN_CONNECTIONS, Pace::Open(sustainable), scale.phase, scale.open_grace).await;
            let p99 = percentile(&half.latencies, 0.99);
            table.row(
                "1",
                format!(
                    "{} reviews over HTTPS, {label}, open loop at half the closed-loop rate ({} offered), {OPEN_CONNECTIONS} connections ({} answered, {} dropped, {} failed)",
                    workload.name,
                    per_second(sustainable),
                    half.completed(),
                    half.unsent,
                    half.failures
                ),
                [
                    &per_second(half.rate()),
                    &duration(percentile(&half.latencies, 0.5)),
                    &duration(p99),
                    "p99 < 2 ms",
                    met(half.failures == 0 && half.unsent == 0 && p99 < TARGET_P99),
                ],
            );
        }
    }
    drop(quiet);

    // 2. node writes per protected node per minute
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client(&server));
    let config = mutating_webhook_configuration(
        "edge-health-admission",
        &Endpoint::Url(format!("https://{}", shipped.addr)),
        Some(ca.cert_pem().as_bytes()),
    );
    configs.create(&PostParams::default(), &config).await.expect("register the webhook");
    create_site_nodes(&server);
    let protected = (SITES * NODES_PER_SITE) as f64;
    let minutes = scale.simulated_minutes;
    let per_node_minute = |count: f64| format!("{:.2}", count / protected / minutes);
    let every_pass = stock_loop(&server, &shipped, Drain::EveryPass, &scale).await;
    let zone_queue = stock_loop(&server, &shipped, Drain::ZoneQueue, &scale).await;
    let lifecycle = edge_node_lifecycle(&scale).await;
    for (traffic, what) in [
        (
            &every_pass,
            "stock-style lifecycle loop re-asserting unreachable:NoExecute every monitor pass (5 s), webhook registered",
        ),
        (
            &zone_queue,
            "same, drained as kube-controller-manager drains it: per-zone token bucket at --node-eviction-rate 0.1/s (burst 1), steady state",
        ),
    ] {
        assert_eq!(
            traffic.leaked, 0,
            "a re-assertion was stored with the NoExecute taint: the webhook call failed open"
        );
        table.row(
            "2",
            format!(
                "{what}: node UPDATE (PATCH) requests per protected node per minute ({} nodes in {SITES} cut-off zones, {} writes in {minutes} simulated min, {} monitor passes)",
                SITES * NODES_PER_SITE,
                traffic.writes,
                traffic.passes
            ),
            [&per_node_minute(traffic.writes as f64), "-", "-", "(context)", "-"],
        );
        table.row(
            "2",
            format!(
                "  webhook calls / node GETs per protected node per minute; stored changes (resourceVersion moved): {}",
                traffic.stored_changes
            ),
            [
                &format!("{} / {}", per_node_minute(traffic.webhook_calls), per_node_minute(traffic.reads as f64)),
                "-",
                "-",
                "",
                "-",
            ],
        );
    }
    assert_eq!(lifecycle.protected_tainted, 0, "edge-node-lifecycle tainted a protected node NoExecute");
    assert!(lifecycle.control_tainted, "edge-node-lifecycle did not taint the voted-unhealthy control node");
    table.row(
        "2",
        format!(
            "edge-node-lifecycle (controller::run, no webhook) on the same nodes: node writes per protected node per minute ({} writes, {} monitor passes in {minutes} simulated min)",
            lifecycle.protected_writes, lifecycle.passes
        ),
        [&per_node_minute(lifecycle.protected_writes as f64), "-", "-", "(context)", "-"],
    );
    table.row(
        "2",
        format!(
            "  its control node (Unknown, voted unhealthy, healthy zone): node writes (the NoExecute taint, tainted: {}); other node writes: {}",
            lifecycle.control_tainted, lifecycle.other_writes
        ),
        [&lifecycle.control_writes.to_string(), "-", "-", "", "-"],
    );
    let stock_rate = every_pass.writes as f64 / protected / minutes;
    table.row(
        "2",
        "  stock re-assertion (every pass) vs edge-node-lifecycle, node writes per 1000 protected nodes",
        [
            &format!(
                "{:.0}/s vs {:.0}/s",
                stock_rate * 1000.0 / 60.0,
                lifecycle.protected_writes as f64 / protected / minutes * 1000.0 / 60.0
            ),
            "-",
            "-",
            "",
            "-",
        ],
    );

    println!();
    println!(
        "edge-health-admission bench{}: {} cached nodes ({} protected, {} voted unhealthy) synced from the fake apiserver; the shipped binary over HTTPS (TLS 1.3, HTTP/1.1 keep-alive), load generator in this process on the same {cores} cores; load phases of {} (open loop: what is not sent {} past its schedule is dropped); part 2 at {}x controller speed; {:.0} s; load average {} at start, {} at end",
        if scale.quick { " (QUICK: smoke only, not comparable with the targets)" } else { "" },
        scale.nodes,
        (0..scale.nodes).filter(|n| health(*n) == Health::Protected).count(),
        (0..scale.nodes).filter(|n| health(*n) == Health::Voted).count(),
        duration(scale.phase),
        duration(scale.open_grace),
        scale.speedup,
        started.elapsed().as_secs_f64(),
        load_at_start,
        load().unwrap_or_default()
    );
    table.print();
}
