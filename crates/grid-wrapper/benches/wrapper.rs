//! The grid wrapper's serving costs at edge-cluster scale: 10k Services with one
//! EndpointSlice of 10 endpoints each over 2k nodes in 50 units, every other Service
//! topology-aware (`topologyKeys: ["zone1"]`), objects shaped as kube-controller-manager
//! and the kubelet write them.
//!
//! 1. latency from an upstream change to each downstream watcher's event line, at
//!    ~1k changes/s, with 1 and 100 watchers: in-process (`Wrapper::apply` ->
//!    `listwatch::watch_stream`) and, for context, over HTTP through `Wrapper::router`;
//! 2. a full list of the 10k slices over HTTP from a wrapper synced from the fake
//!    apiserver (by its own kube-rs watchers), and the same list from that fake apiserver;
//! 3. RSS of a wrapper holding the synced view, measured in fresh processes (this binary
//!    re-run with `--rss-child`), with a measured breakdown;
//! 4. upstream bytes per remote node status update, metadata-only watch vs full watch.
//!
//! `cargo bench -p grid-wrapper --bench wrapper` prints one table (about a minute on 2
//! cores). `WRAPPER_BENCH_QUICK=1` runs a small cluster and short phases as a smoke test
//! (its numbers are not comparable with the targets). Timings need an otherwise idle
//! machine (the header prints the load average); memory and byte counts do not.

#[path = "../../../tests/src/bench_table.rs"]
mod bench_table;

use bench_table::{Table, duration, met, percentile};
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use edgegrid_core::topology::{InputChange, PrunedView};
use edgegrid_testing::objects;
use fake_apiserver::FakeApiServer;
use futures::StreamExt;
use grid_wrapper::cache::{Input, Kind, Object, Stream, ViewSource};
use grid_wrapper::metrics::Metrics;
use grid_wrapper::{Wrapper, WrapperConfig};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use listwatch::{Log, LogConfig, Shape, WatchConfig, WatchOptions};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------
// Scale
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
struct Scale {
    nodes: usize,
    units: usize,
    /// One EndpointSlice per Service.
    services: usize,
    endpoints_per_slice: usize,
    /// Upstream changes per latency phase (at `RATE_PER_SECOND`).
    events: usize,
    list_runs: usize,
    quick: bool,
}

const QUICK_ENV: &str = "WRAPPER_BENCH_QUICK";
const RATE_PER_SECOND: u64 = 1_000;
const LOCAL_NODE: usize = 0;
/// The unit label (SuperEdge's `gridUniqKey`) and the topology-aware Services' keys.
const UNIT_LABEL: &str = "zone1";
const TOPOLOGY_KEYS: &str = r#"["zone1"]"#;
/// `edgegrid_testing::objects` builds every namespaced object in `ns`.
const NAMESPACE: &str = "ns";
/// What a real kube-apiserver takes to list 10k such slices (the target is 10x better).
const REAL_APISERVER_LIST: Duration = Duration::from_millis(220);
const METADATA_ACCEPT: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

impl Scale {
    fn from_env() -> Self {
        let quick = std::env::var(QUICK_ENV).is_ok_and(|v| !v.is_empty() && v != "0");
        if quick {
            Self { nodes: 200, units: 10, services: 1_000, endpoints_per_slice: 10, events: 300, list_runs: 3, quick }
        } else {
            Self {
                nodes: 2_000,
                units: 50,
                services: 10_000,
                endpoints_per_slice: 10,
                events: 5_000,
                list_runs: 15,
                quick,
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Upstream objects: `edgegrid_testing::objects`, completed as a real cluster writes them
// ---------------------------------------------------------------------------------------

/// splitmix64: deterministic names, uids and placements, the same cluster every run.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A seed per (purpose, index), so every generated value can be rebuilt on its own.
fn seed(domain: u64, index: usize) -> u64 {
    (domain << 40) ^ index as u64
}

fn chars(seed: u64, len: usize, alphabet: &[u8]) -> String {
    (0..len)
        .map(|i| {
            alphabet[(mix(seed.wrapping_mul(131).wrapping_add(i as u64)) % alphabet.len() as u64) as usize] as char
        })
        .collect()
}

fn hex(seed: u64, len: usize) -> String {
    chars(seed, len, b"0123456789abcdef")
}

/// A random suffix as the apiserver's `generateName` and ReplicaSet pods use.
fn suffix(seed: u64, len: usize) -> String {
    chars(seed, len, b"bcdfghjklmnpqrstvwxz2456789")
}

fn uid(seed: u64) -> String {
    let h = hex(seed, 32);
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

fn timestamp(seconds: u64) -> String {
    let (h, m, s) = (seconds / 3600 % 24, seconds / 60 % 60, seconds % 60);
    format!("2026-03-{:02}T{h:02}:{m:02}:{s:02}Z", 1 + seconds / 86_400 % 28)
}

/// JSON merge: objects merge key by key, anything else is replaced.
fn merge(base: &mut Value, patch: Value) {
    match (base, patch) {
        (Value::Object(base), Value::Object(patch)) => {
            for (key, value) in patch {
                merge(base.entry(key).or_insert(Value::Null), value);
            }
        }
        (base, patch) => *base = patch,
    }
}

fn typed<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("generated object is valid")
}

fn json_len<T: serde::Serialize>(object: &T) -> usize {
    serde_json::to_vec(object).expect("serialisable").len()
}

fn node_name(n: usize) -> String {
    format!("edge-node-{n:04}")
}

fn zone_of(unit: usize) -> String {
    format!("edge-zone-{}", unit % 3)
}

/// Labels as the kubelet (and the cloud provider, and the grid admin) set them.
fn node_labels(n: usize, scale: &Scale) -> Vec<(String, String)> {
    let unit = n % scale.units;
    [
        ("beta.kubernetes.io/arch", "amd64".to_string()),
        ("beta.kubernetes.io/os", "linux".to_string()),
        ("kubernetes.io/arch", "amd64".to_string()),
        ("kubernetes.io/hostname", node_name(n)),
        ("kubernetes.io/os", "linux".to_string()),
        ("node.kubernetes.io/instance-type", "edge-4c8g".to_string()),
        ("topology.kubernetes.io/region", "edge-region-1".to_string()),
        ("topology.kubernetes.io/zone", zone_of(unit)),
        (UNIT_LABEL, format!("unit-{unit}")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// `metadata` of a node as the apiserver serves it (no managedFields: see
/// [`node_managed_fields`]).
fn node_metadata(n: usize, scale: &Scale) -> Value {
    let labels = node_labels(n, scale);
    let pairs: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut node = serde_json::to_value(objects::node_object(&node_name(n), &pairs)).expect("serialisable");
    let mac: Vec<String> = (0..6).map(|i| hex(seed(1, n * 8 + i), 2)).collect();
    merge(
        &mut node,
        json!({"metadata": {
            "uid": uid(seed(2, n)),
            "resourceVersion": (1_000_000 + n).to_string(),
            "creationTimestamp": timestamp(3_600 + n as u64),
            "annotations": {
                "flannel.alpha.coreos.com/backend-data": format!(r#"{{"VNI":1,"VtepMAC":"{}"}}"#, mac.join(":")),
                "flannel.alpha.coreos.com/backend-type": "vxlan",
                "flannel.alpha.coreos.com/kube-subnet-manager": "true",
                "flannel.alpha.coreos.com/public-ip": node_ip(n),
                "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///var/run/containerd/containerd.sock",
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        }}),
    );
    node["metadata"].take()
}

fn node_ip(n: usize) -> String {
    format!("192.168.{}.{}", 10 + n / 250, 1 + n % 250)
}

fn pod_cidr(n: usize) -> String {
    format!("10.{}.{}.0/24", 128 + n / 256, n % 256)
}

/// The kubelet's five conditions (NetworkUnavailable is the CNI's); `heartbeat` moves the
/// kubelet's `lastHeartbeatTime`s, as each status report does.
fn node_conditions(heartbeat: u64) -> Value {
    let since = timestamp(3_700);
    let beat = timestamp(7_200 + heartbeat);
    let kubelet = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({"type": kind, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": beat, "lastTransitionTime": since})
    };
    json!([
        {"type": "NetworkUnavailable", "status": "False", "reason": "FlannelIsUp",
         "message": "Flannel is running on this node", "lastHeartbeatTime": since, "lastTransitionTime": since},
        kubelet("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        kubelet("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        kubelet("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        kubelet("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ])
}

/// A whole Node as the apiserver serves it: addresses, capacity, the five conditions,
/// nodeInfo, runtime handlers and 50 images (digest and tag names).
fn node_value(n: usize, scale: &Scale, heartbeat: u64) -> Value {
    let images: Vec<Value> = (0..50)
        .map(|k| {
            let repository = format!("registry.example.com/edge/app-{k:02}");
            json!({
                "names": [format!("{repository}@sha256:{}", hex(seed(3, k), 64)), format!("{repository}:v1.{k}.0")],
                "sizeBytes": 10_000_000 + mix(seed(4, k)) % 500_000_000,
            })
        })
        .collect();
    let resources = |cpu: &str, storage: &str, memory: &str| json!({"cpu": cpu, "ephemeral-storage": storage, "hugepages-1Gi": "0", "hugepages-2Mi": "0", "memory": memory, "pods": "110"});
    let handler =
        |name: &str| json!({"name": name, "features": {"recursiveReadOnlyMounts": true, "userNamespaces": true}});
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": node_metadata(n, scale),
        "spec": {"podCIDR": pod_cidr(n), "podCIDRs": [pod_cidr(n)]},
        "status": {
            "addresses": [{"type": "InternalIP", "address": node_ip(n)}, {"type": "Hostname", "address": node_name(n)}],
            "allocatable": resources("3800m", "47233297124", "7652512Ki"),
            "capacity": resources("4", "51250664Ki", "8049824Ki"),
            "conditions": node_conditions(heartbeat),
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "features": {"supplementalGroupsPolicy": true},
            "images": images,
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": uid(seed(5, n)),
                "containerRuntimeVersion": "containerd://1.7.24",
                "kernelVersion": "5.15.0-131-generic",
                "kubeProxyVersion": "",
                "kubeletVersion": "v1.33.1",
                "machineID": hex(seed(6, n), 32),
                "operatingSystem": "linux",
                "osImage": "Ubuntu 22.04.5 LTS",
                "systemUUID": uid(seed(7, n)),
            },
            "runtimeHandlers": [handler(""), handler("runc")],
        },
    })
}

/// `managedFields` as a real apiserver keeps them on a kubelet-managed node (kubelet,
/// kube-controller-manager and flannel entries, derived from the node's own fields). The
/// fake apiserver drops them on create; they are added by a later update to measure what
/// a real apiserver sends.
fn node_managed_fields(node: &Value) -> Value {
    let keys = |value: &Value| -> Value {
        let mut fields: serde_json::Map<String, Value> =
            value.as_object().into_iter().flatten().map(|(k, _)| (format!("f:{k}"), json!({}))).collect();
        fields.insert(".".into(), json!({}));
        Value::Object(fields)
    };
    let condition_fields = |kind: &str| {
        (
            format!(r#"k:{{"type":"{kind}"}}"#),
            json!({".": {}, "f:lastHeartbeatTime": {}, "f:lastTransitionTime": {}, "f:message": {},
                   "f:reason": {}, "f:status": {}, "f:type": {}}),
        )
    };
    let kubelet_conditions: serde_json::Map<String, Value> =
        ["DiskPressure", "MemoryPressure", "PIDPressure", "Ready"].into_iter().map(condition_fields).collect();
    let flannel_condition: serde_json::Map<String, Value> =
        [condition_fields("NetworkUnavailable")].into_iter().collect();
    let status = &node["status"];
    let entry = |manager: &str, subresource: Option<&str>, fields: Value| {
        let mut entry = json!({"manager": manager, "operation": "Update", "apiVersion": "v1",
                               "time": timestamp(7_200), "fieldsType": "FieldsV1", "fieldsV1": fields});
        if let Some(subresource) = subresource {
            entry["subresource"] = json!(subresource);
        }
        entry
    };
    json!([
        entry(
            "kubeadm",
            None,
            json!({"f:metadata": {"f:annotations": {"f:kubeadm.alpha.kubernetes.io/cri-socket": {}}}})
        ),
        entry(
            "kubelet",
            None,
            json!({"f:metadata": {
                "f:annotations": {".": {}, "f:volumes.kubernetes.io/controller-managed-attach-detach": {}},
                "f:labels": keys(&node["metadata"]["labels"]),
            }})
        ),
        entry(
            "kube-controller-manager",
            None,
            json!({
                "f:metadata": {"f:annotations": {"f:node.alpha.kubernetes.io/ttl": {}}},
                "f:spec": {"f:podCIDR": {}, "f:podCIDRs": {".": {}, format!("v:\"{}\"", node["spec"]["podCIDR"].as_str().unwrap_or_default()): {}}},
            })
        ),
        entry(
            "flanneld",
            Some("status"),
            json!({
                "f:metadata": {"f:annotations": {
                    "f:flannel.alpha.coreos.com/backend-data": {}, "f:flannel.alpha.coreos.com/backend-type": {},
                    "f:flannel.alpha.coreos.com/kube-subnet-manager": {}, "f:flannel.alpha.coreos.com/public-ip": {},
                }},
                "f:status": {"f:conditions": Value::Object(flannel_condition)},
            })
        ),
        entry(
            "kubelet",
            Some("status"),
            json!({"f:status": {
                "f:allocatable": keys(&status["allocatable"]),
                "f:capacity": keys(&status["capacity"]),
                "f:conditions": Value::Object(kubelet_conditions),
                "f:daemonEndpoints": {"f:kubeletEndpoint": {"f:Port": {}}},
                "f:features": {".": {}, "f:supplementalGroupsPolicy": {}},
                "f:images": {},
                "f:nodeInfo": keys(&status["nodeInfo"]),
                "f:runtimeHandlers": {},
            }})
        ),
    ])
}

fn service_name(i: usize) -> String {
    format!("svc-{i:05}")
}

fn topology_aware(i: usize) -> bool {
    i.is_multiple_of(2)
}

/// The fixture Service, completed as the apiserver serves a ClusterIP Service.
fn service_object(i: usize) -> Service {
    let name = service_name(i);
    let mut service = serde_json::to_value(objects::service_object(&name, topology_aware(i).then_some(TOPOLOGY_KEYS)))
        .expect("serialisable");
    let ip = format!("10.96.{}.{}", i / 250, 1 + i % 250);
    merge(
        &mut service,
        json!({
            "metadata": {
                "uid": uid(seed(10, i)),
                "resourceVersion": (2_000_000 + i).to_string(),
                "creationTimestamp": timestamp(4_000 + i as u64),
                "labels": {"app": name, "app.kubernetes.io/managed-by": "servicegrid-controller"},
            },
            "spec": {
                "clusterIP": ip, "clusterIPs": [ip], "internalTrafficPolicy": "Cluster",
                "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
                "sessionAffinity": "None", "type": "ClusterIP",
            },
            "status": {"loadBalancer": {}},
        }),
    );
    typed(service)
}

fn slice_name(i: usize) -> String {
    format!("{}-{}", service_name(i), suffix(seed(11, i), 5))
}

fn pod_ip(pod: usize) -> String {
    format!("10.{}.{}.{}", 64 + pod / 65_536, pod / 256 % 256, pod % 256)
}

fn endpoint_node(i: usize, e: usize, scale: &Scale) -> usize {
    (mix(seed(12, i * scale.endpoints_per_slice + e)) % scale.nodes as u64) as usize
}

/// The fixture slice of Service `i`, completed as kube-controller-manager writes it
/// (targetRef, zone, serving/terminating, owner, labels copied from the Service,
/// trigger time). `first`, if given, replaces the first endpoint by `(pod, node)`: a pod
/// replaced. Pod `p` has address [`pod_ip`]`(p)`.
fn slice_object(i: usize, scale: &Scale, first: Option<(usize, usize)>, trigger: u64) -> EndpointSlice {
    let service = service_name(i);
    let mut placed: Vec<(usize, usize)> = (0..scale.endpoints_per_slice)
        .map(|e| (i * scale.endpoints_per_slice + e, endpoint_node(i, e, scale)))
        .collect();
    if let Some(first) = first {
        placed[0] = first;
    }
    let names: Vec<(String, String)> = placed.iter().map(|(pod, n)| (pod_ip(*pod), node_name(*n))).collect();
    let pairs: Vec<(&str, &str)> = names.iter().map(|(ip, n)| (ip.as_str(), n.as_str())).collect();
    let mut slice =
        serde_json::to_value(objects::slice_object(&slice_name(i), &service, &pairs)).expect("serialisable");
    let template = suffix(seed(13, i), 10);
    for (endpoint, (pod, n)) in slice["endpoints"].as_array_mut().into_iter().flatten().zip(&placed) {
        merge(
            endpoint,
            json!({
                "conditions": {"serving": true, "terminating": false},
                "targetRef": {"kind": "Pod", "namespace": NAMESPACE,
                              "name": format!("{service}-{template}-{}", suffix(seed(14, *pod), 5)),
                              "uid": uid(seed(15, *pod))},
                "zone": zone_of(n % scale.units),
            }),
        );
    }
    merge(
        &mut slice,
        json!({"metadata": {
            "generateName": format!("{service}-"),
            "uid": uid(seed(16, i)),
            "resourceVersion": (3_000_000 + i).to_string(),
            "generation": 1 + trigger,
            "creationTimestamp": timestamp(4_100 + i as u64),
            "labels": {"endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                       "app": service, "app.kubernetes.io/managed-by": "servicegrid-controller"},
            "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": timestamp(5_000 + trigger)},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": service, "uid": uid(seed(10, i)),
                                 "controller": true, "blockOwnerDeletion": true}],
        }}),
    );
    typed(slice)
}

/// The wrapper's upstream streams as its kube-rs watchers report them on first sync:
/// each with its JSON size as the upstream sends it (metadata-only for remote nodes).
fn each_upstream_input(scale: &Scale, mut take: impl FnMut(Input, usize)) {
    for stream in Stream::ALL {
        take(Input::Begin(stream), 0);
    }
    let local: Node = typed(node_value(LOCAL_NODE, scale, 0));
    let size = json_len(&local);
    take(Input::Upsert(Object::LocalNode(local)), size);
    for n in 0..scale.nodes {
        let metadata = node_metadata(n, scale);
        let size = json_len(&Shape::Metadata.present(json!({"metadata": metadata})));
        let labels = node_labels(n, scale).into_iter().collect();
        take(Input::Upsert(Object::RemoteNode { name: node_name(n), labels }), size);
    }
    for i in 0..scale.services {
        let service = service_object(i);
        let size = json_len(&service);
        take(Input::Upsert(Object::Service(service)), size);
    }
    for i in 0..scale.services {
        let slice = slice_object(i, scale, None, 0);
        let size = json_len(&slice);
        take(Input::Upsert(Object::Slice(slice)), size);
    }
    for stream in Stream::ALL {
        take(Input::Done(stream), 0);
    }
}

// ---------------------------------------------------------------------------------------
// Wrappers and HTTP
// ---------------------------------------------------------------------------------------

fn wrapper_config() -> WrapperConfig {
    WrapperConfig {
        node_name: node_name(LOCAL_NODE),
        rewrite_local_apiserver: false,
        log: LogConfig {
            history_limit: grid_wrapper::DEFAULT_HISTORY,
            watch_buffer: grid_wrapper::DEFAULT_WATCH_BUFFER,
        },
        watch: watch_config(),
        cache_dir: None,
    }
}

fn watch_config() -> WatchConfig {
    WatchConfig {
        bookmark_interval: grid_wrapper::DEFAULT_BOOKMARK_INTERVAL,
        default_timeout: grid_wrapper::DEFAULT_WATCH_TIMEOUT,
    }
}

/// A wrapper fed directly (its pass-through upstream is never reached).
fn offline_wrapper() -> Arc<Wrapper> {
    let nowhere = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
    Wrapper::new(&wrapper_config(), &nowhere, Arc::new(Metrics::default())).expect("wrapper")
}

/// Serves a router on 127.0.0.1: as the wrapper's binary does (plain `axum::serve`, so
/// Nagle's algorithm stays on), or with `TCP_NODELAY` on each accepted connection (what
/// Go's net/http, and so kube-apiserver, does by default).
async fn serve(router: axum::Router, nodelay: bool) -> SocketAddr {
    use axum::serve::ListenerExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1");
    let addr = listener.local_addr().expect("bound");
    let listener = listener.tap_io(move |stream| {
        if nodelay {
            let _ = stream.set_nodelay(true);
        }
    });
    tokio::spawn(async move { axum::serve(listener, router).await.expect("serve") });
    addr
}

type Connection = SendRequest<Empty<Bytes>>;

async fn connect(addr: SocketAddr) -> Connection {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.expect("handshake");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    sender
}

async fn get(sender: &mut Connection, path: &str, accept: &str) -> http::Response<hyper::body::Incoming> {
    sender.ready().await.expect("connection ready");
    let request = http::Request::get(path)
        .header(http::header::HOST, "127.0.0.1")
        .header(http::header::ACCEPT, accept)
        .body(Empty::new())
        .expect("request");
    let response = sender.send_request(request).await.expect("response");
    assert_eq!(response.status(), http::StatusCode::OK, "GET {path}");
    response
}

/// The first line of a streamed body (a watch's first event), with its newline.
async fn first_line(mut body: hyper::body::Incoming) -> Vec<u8> {
    let mut line = Vec::new();
    while !line.ends_with(b"\n") {
        let frame = body.frame().await.expect("stream open").expect("frame");
        line.extend_from_slice(frame.data_ref().map(Bytes::as_ref).unwrap_or_default());
    }
    line
}

// ---------------------------------------------------------------------------------------
// Statistics and the table
// ---------------------------------------------------------------------------------------

fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / (1024.0 * 1024.0))
}

// ---------------------------------------------------------------------------------------
// 1. Upstream change -> downstream watch event
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Via {
    /// `Log::watch` + `listwatch::watch_stream`, as `server.rs` starts a watch, without HTTP.
    InProcess,
    /// A raw HTTP/1.1 watch against the wrapper's router served on 127.0.0.1.
    Http(SocketAddr),
}

struct Latency {
    /// Every (event, watcher) delivery.
    deliveries: Vec<Duration>,
    /// Per event, until the last watcher had it.
    last_watcher: Vec<Duration>,
    /// `Wrapper::apply` alone, per change.
    applying: Vec<Duration>,
    rate: f64,
}

/// Starts `watchers` watches of EndpointSlices after the current version; each returns
/// the instants at which its first `events` event lines arrived.
async fn start_watchers(
    wrapper: &Arc<Wrapper>,
    via: Via,
    watchers: usize,
    events: usize,
) -> Vec<tokio::task::JoinHandle<Vec<Instant>>> {
    let rv = wrapper.lock().log().current_rv();
    let mut handles = Vec::with_capacity(watchers);
    for _ in 0..watchers {
        match via {
            Via::InProcess => {
                let opts = WatchOptions { resource_version: Some(rv), ..Default::default() };
                let start = wrapper.lock().log().watch(&Kind::EndpointSlices, &opts);
                let lines = listwatch::watch_stream(
                    start,
                    opts,
                    Kind::EndpointSlices.served(),
                    Shape::Full,
                    watch_config(),
                    std::future::pending(),
                );
                handles.push(tokio::spawn(async move {
                    let mut lines = std::pin::pin!(lines);
                    let mut arrived = Vec::with_capacity(events);
                    while arrived.len() < events {
                        let line = lines.next().await.expect("watch open");
                        arrived.push(Instant::now());
                        assert!(line.starts_with(br#"{"type":"MODIFIED""#), "one MODIFIED line per change");
                    }
                    arrived
                }));
            }
            Via::Http(addr) => {
                let mut connection = connect(addr).await;
                let path = format!("/apis/discovery.k8s.io/v1/endpointslices?watch=true&resourceVersion={rv}");
                // the watch is subscribed once the response head is here
                let response = get(&mut connection, &path, "application/json").await;
                handles.push(tokio::spawn(async move {
                    let _connection = connection;
                    let mut body = response.into_body();
                    let mut arrived = Vec::with_capacity(events);
                    while arrived.len() < events {
                        let frame = body.frame().await.expect("watch open").expect("frame");
                        let now = Instant::now();
                        let data = frame.data_ref().map(Bytes::as_ref).unwrap_or_default();
                        arrived.extend(data.iter().filter(|b| **b == b'\n').map(|_| now));
                    }
                    arrived
                }));
            }
        }
    }
    handles
}

/// Feeds `scale.events` slice changes at ~1k/s from a runtime task (as the upstream
/// watchers do) and times each watcher's event line. Every change moves the first
/// endpoint of one slice to a new pod on the local node, so each is exactly one MODIFIED.
async fn latency(wrapper: &Arc<Wrapper>, scale: &Scale, via: Via, watchers: usize, next_change: &mut usize) -> Latency {
    let first = *next_change;
    *next_change += scale.events;
    let changes: Vec<Input> = (first..first + scale.events)
        .map(|c| {
            let slice = c.wrapping_mul(7_919) % scale.services;
            let pod = (1_000_000 + c, LOCAL_NODE);
            Input::Upsert(Object::Slice(slice_object(slice, scale, Some(pod), c as u64 + 1)))
        })
        .collect();
    let handles = start_watchers(wrapper, via, watchers, scale.events).await;
    let producer = tokio::spawn({
        let wrapper = wrapper.clone();
        async move {
            let mut ticker = tokio::time::interval(Duration::from_nanos(1_000_000_000 / RATE_PER_SECOND));
            let mut sent = Vec::with_capacity(changes.len());
            let began = Instant::now();
            let mut applying = Vec::with_capacity(changes.len());
            for change in changes {
                ticker.tick().await;
                let at = Instant::now();
                sent.push(at);
                wrapper.apply(change);
                applying.push(at.elapsed());
            }
            (sent, applying, began.elapsed())
        }
    });
    let (sent, mut applying, elapsed) = producer.await.expect("producer");
    applying.sort();
    let mut arrivals = Vec::with_capacity(watchers);
    for handle in handles {
        let arrived = tokio::time::timeout(Duration::from_secs(60), handle)
            .await
            .expect("every watcher gets every event within a minute")
            .expect("watcher task");
        arrivals.push(arrived);
    }
    let mut deliveries = Vec::with_capacity(watchers * sent.len());
    let mut last_watcher = Vec::with_capacity(sent.len());
    for (event, sent_at) in sent.iter().enumerate() {
        let mut last = Duration::ZERO;
        for arrived in &arrivals {
            let latency = arrived[event].saturating_duration_since(*sent_at);
            last = last.max(latency);
            deliveries.push(latency);
        }
        last_watcher.push(last);
    }
    deliveries.sort();
    last_watcher.sort();
    Latency { deliveries, last_watcher, applying, rate: sent.len() as f64 / elapsed.as_secs_f64() }
}

// ---------------------------------------------------------------------------------------
// 2. Lists: the wrapper synced from the fake apiserver vs that fake apiserver
// ---------------------------------------------------------------------------------------

fn populate(server: &FakeApiServer, scale: &Scale) {
    let store = server.store();
    let resource = |group: &str, plural: &str| store.resolve(group, "v1", plural).expect("built-in resource");
    let (namespaces, nodes) = (resource("", "namespaces"), resource("", "nodes"));
    let (services, slices) = (resource("", "services"), resource("discovery.k8s.io", "endpointslices"));
    store.create(&namespaces, "", json!({"metadata": {"name": NAMESPACE}})).expect("namespace");
    for n in 0..scale.nodes {
        store.create(&nodes, "", node_value(n, scale, 0)).expect("node");
    }
    for i in 0..scale.services {
        let service = serde_json::to_value(service_object(i)).expect("serialisable");
        store.create(&services, NAMESPACE, service).expect("service");
    }
    for i in 0..scale.services {
        let slice = serde_json::to_value(slice_object(i, scale, None, 0)).expect("serialisable");
        store.create(&slices, NAMESPACE, slice).expect("slice");
    }
}

struct Lists {
    wrapper: Vec<Duration>,
    upstream: Vec<Duration>,
    wrapper_bytes: usize,
    upstream_bytes: usize,
    /// Endpoints in the wrapper's and the upstream's list.
    endpoints: (usize, usize),
    /// In-process: `Log::list` (snapshot) and `ListBody` (the streamed chunks: envelope + copy).
    snapshot: Vec<Duration>,
    body: Vec<Duration>,
    sync: Duration,
}

async fn timed_list(connection: &mut Connection, path: &str) -> (Duration, Bytes) {
    let started = Instant::now();
    let body = get(connection, path, "application/json").await.into_body().collect().await.expect("body").to_bytes();
    (started.elapsed(), body)
}

fn count_list(body: &[u8]) -> (usize, usize) {
    let list: Value = serde_json::from_slice(body).expect("list is JSON");
    let items = list["items"].as_array().expect("items");
    (items.len(), items.iter().map(|s| s["endpoints"].as_array().map_or(0, Vec::len)).sum())
}

async fn lists(scale: &Scale) -> Lists {
    let server = FakeApiServer::start().await.expect("bind 127.0.0.1");
    populate(&server, scale);
    let upstream = kube::Config::new(server.url().parse().expect("url"));
    let wrapper = Wrapper::new(&wrapper_config(), &upstream, Arc::new(Metrics::default())).expect("wrapper");
    let addr = serve(wrapper.router(&grid_wrapper::server::debug_readers(Vec::new())), false).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let client = kube::Client::try_from(upstream).expect("upstream client");
    let started = Instant::now();
    let upstream_task = tokio::spawn(grid_wrapper::upstream::run(wrapper.clone(), client, async move {
        let _ = stopped.await;
    }));
    let mut serving = wrapper.serving_changes();
    tokio::time::timeout(Duration::from_secs(120), serving.wait_for(|s| *s == ViewSource::Upstream))
        .await
        .expect("the wrapper syncs within 2 minutes")
        .expect("wrapper alive");
    let sync = started.elapsed();

    let path = "/apis/discovery.k8s.io/v1/endpointslices";
    let mut to_wrapper = connect(addr).await;
    let mut to_upstream = connect(server.addr()).await;
    let (_, wrapper_body) = timed_list(&mut to_wrapper, path).await;
    let (_, upstream_body) = timed_list(&mut to_upstream, path).await;
    let (wrapper_items, wrapper_endpoints) = count_list(&wrapper_body);
    let (upstream_items, upstream_endpoints) = count_list(&upstream_body);
    assert_eq!((wrapper_items, upstream_items), (scale.services, scale.services), "every slice listed by both");
    let (mut wrapper_times, mut upstream_times) = (Vec::new(), Vec::new());
    let (mut snapshot, mut body) = (Vec::new(), Vec::new());
    for _ in 0..scale.list_runs {
        wrapper_times.push(timed_list(&mut to_wrapper, path).await.0);
        upstream_times.push(timed_list(&mut to_upstream, path).await.0);
        let cache = wrapper.lock();
        let started = Instant::now();
        let page = cache.log().list(&Kind::EndpointSlices, &Default::default()).expect("list");
        let listed = Instant::now();
        drop(cache);
        let built: usize =
            listwatch::ListBody::new(page, Kind::EndpointSlices.served(), Shape::Full).map(|chunk| chunk.len()).sum();
        body.push(listed.elapsed());
        snapshot.push(listed - started);
        assert_eq!(built, wrapper_body.len());
    }
    let _ = stop.send(());
    let _ = upstream_task.await;
    wrapper.stop_watches();
    for times in [&mut wrapper_times, &mut upstream_times, &mut snapshot, &mut body] {
        times.sort();
    }
    Lists {
        wrapper: wrapper_times,
        upstream: upstream_times,
        wrapper_bytes: wrapper_body.len(),
        upstream_bytes: upstream_body.len(),
        endpoints: (wrapper_endpoints, upstream_endpoints),
        snapshot,
        body,
        sync,
    }
}

// ---------------------------------------------------------------------------------------
// 3. RSS, each part in a fresh process
// ---------------------------------------------------------------------------------------

const RSS_CHILD: &str = "--rss-child";

/// `VmRSS` of this process, in bytes.
fn rss_now() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The served objects, one `kind-index<TAB>json` line each, for the log-only children.
fn dump(wrapper: &Wrapper, path: &Path) -> (usize, usize) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).expect("create dump"));
    let (mut objects, mut encoded) = (0, 0);
    for (kind, object) in wrapper.lock().served_objects() {
        let index = Kind::ALL.iter().position(|k| *k == kind).expect("a served kind");
        write!(out, "{index}\t").expect("write dump");
        out.write_all(object.json()).expect("write dump");
        out.write_all(b"\n").expect("write dump");
        objects += 1;
        encoded += object.json().len();
    }
    out.flush().expect("flush dump");
    (objects, encoded)
}

fn each_dumped(path: &Path, mut take: impl FnMut(Kind, Value)) {
    let file = std::io::BufReader::new(std::fs::File::open(path).expect("open dump"));
    for line in file.lines() {
        let line = line.expect("read dump");
        let (index, object) = line.split_once('\t').expect("kind<TAB>json");
        let kind = Kind::ALL[index.parse::<usize>().expect("kind index")];
        take(kind, serde_json::from_str(object).expect("dumped JSON"));
    }
}

/// One measurement in this (fresh) process; prints one JSON line.
fn rss_child(mode: &str, dump_path: &Path) {
    let scale = Scale::from_env();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let _entered = runtime.enter();
    let report = match mode {
        // the wrapper fed the whole cluster as one synced view
        "wrapper" => {
            let wrapper = offline_wrapper();
            let before = rss_now();
            let mut upstream_json = 0;
            each_upstream_input(&scale, |input, size| {
                upstream_json += size;
                wrapper.apply(input);
            });
            let after = rss_now();
            assert_eq!(wrapper.serving(), ViewSource::Upstream);
            let (objects, encoded) = dump(&wrapper, dump_path);
            // then every slice changes once: the history fills with replaced versions
            for i in 0..scale.services {
                let pod = (2_000_000 + i, endpoint_node(i, 0, &scale));
                wrapper.apply(Input::Upsert(Object::Slice(slice_object(i, &scale, Some(pod), 1))));
            }
            let updated = rss_now();
            json!({"before": before, "after": after, "updated": updated, "upstream_json": upstream_json,
                   "objects": objects, "encoded": encoded})
        }
        // the topology view alone, fed what the cache feeds it
        "view" => {
            let local = node_name(LOCAL_NODE);
            let mut view = PrunedView::new(local.clone(), false);
            let before = rss_now();
            each_upstream_input(&scale, |input, _| {
                let change = match input {
                    Input::Upsert(Object::LocalNode(node)) => {
                        let labels = node.metadata.labels.clone().unwrap_or_default();
                        InputChange::NodeUpserted { name: local.clone(), labels }
                    }
                    Input::Upsert(Object::RemoteNode { name, labels }) if name != local => {
                        InputChange::NodeUpserted { name, labels }
                    }
                    Input::Upsert(Object::Service(service)) => InputChange::ServiceUpserted(service),
                    Input::Upsert(Object::Slice(slice)) => InputChange::SliceUpserted(slice),
                    _ => return,
                };
                view.apply(change).expect("valid input");
            });
            let after = rss_now();
            assert_eq!(view.pruned_slices().count(), scale.services);
            json!({"before": before, "after": after})
        }
        // a list/watch log holding the served objects (encoded bytes + identity)
        "log" => {
            let config = LogConfig {
                history_limit: grid_wrapper::DEFAULT_HISTORY,
                watch_buffer: grid_wrapper::DEFAULT_WATCH_BUFFER,
            };
            let mut log: Log<Kind> = Log::continuing(config, 1 << 40);
            let before = rss_now();
            each_dumped(dump_path, |kind, object| {
                let id = (
                    object["metadata"]["namespace"].as_str().unwrap_or_default().to_string(),
                    object["metadata"]["name"].as_str().unwrap_or_default().to_string(),
                );
                log.upsert(kind, id, object).expect("stored");
            });
            json!({"before": before, "after": rss_now()})
        }
        // the served objects as serde_json::Values only
        "values" => {
            let mut values = Vec::new();
            let before = rss_now();
            each_dumped(dump_path, |_, object| values.push(object));
            json!({"before": before, "after": rss_now(), "values": values.len()})
        }
        other => panic!("unknown {RSS_CHILD} mode {other}"),
    };
    println!("{report}");
}

fn run_child(mode: &str, dump_path: &Path) -> Value {
    let exe = std::env::current_exe().expect("this bench binary");
    let output = std::process::Command::new(exe).arg(RSS_CHILD).arg(mode).arg(dump_path).output().expect("spawn");
    assert!(output.status.success(), "{mode} child failed: {}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8(output.stdout).expect("utf-8");
    serde_json::from_str(stdout.lines().last().expect("one report line")).expect("report is JSON")
}

struct Rss {
    delta: f64,
    updated_delta: f64,
    upstream_json: f64,
    encoded: f64,
    objects: u64,
    view: f64,
    log: f64,
    values: f64,
}

fn rss() -> Rss {
    let dump_path = std::env::temp_dir().join(format!("grid-wrapper-bench-{}.jsonl", std::process::id()));
    let delta = |report: &Value| report["after"].as_f64().unwrap_or(0.0) - report["before"].as_f64().unwrap_or(0.0);
    let wrapper = run_child("wrapper", &dump_path);
    let view = run_child("view", &dump_path);
    let log = run_child("log", &dump_path);
    let values = run_child("values", &dump_path);
    let _ = std::fs::remove_file(PathBuf::from(&dump_path));
    Rss {
        delta: delta(&wrapper),
        updated_delta: wrapper["updated"].as_f64().unwrap_or(0.0) - wrapper["before"].as_f64().unwrap_or(0.0),
        upstream_json: wrapper["upstream_json"].as_f64().unwrap_or(0.0),
        encoded: wrapper["encoded"].as_f64().unwrap_or(0.0),
        objects: wrapper["objects"].as_u64().unwrap_or(0),
        view: delta(&view),
        log: delta(&log),
        values: delta(&values),
    }
}

// ---------------------------------------------------------------------------------------
// 4. Upstream bytes per remote node status update
// ---------------------------------------------------------------------------------------

struct NodeBytes {
    full: usize,
    metadata: usize,
    full_managed: usize,
    metadata_managed: usize,
}

/// Bytes of the event line each watch (full, metadata-only) gets for one kubelet status
/// report (new `lastHeartbeatTime`s), before and after the node carries managedFields.
async fn node_bytes(scale: &Scale) -> NodeBytes {
    let server = FakeApiServer::start().await.expect("bind 127.0.0.1");
    let store = server.store();
    let nodes = store.resolve("", "v1", "nodes").expect("nodes");
    let n = 1;
    let name = node_name(n);
    store.create(&nodes, "", node_value(n, scale, 0)).expect("node");
    let mut heartbeat = 0;
    let mut measure = async || {
        let path = format!("/api/v1/nodes?watch=true&resourceVersion={}", store.current_rv());
        let mut full_connection = connect(server.addr()).await;
        let mut metadata_connection = connect(server.addr()).await;
        let full = get(&mut full_connection, &path, "application/json").await.into_body();
        let metadata = get(&mut metadata_connection, &path, METADATA_ACCEPT).await.into_body();
        heartbeat += 10;
        let mut reported = store.get(&nodes, "", &name).expect("node");
        reported["status"]["conditions"] = node_conditions(heartbeat);
        store.update(&nodes, "", &name, reported, true).expect("status update");
        let full_line = first_line(full).await;
        let metadata_line = first_line(metadata).await;
        let event: Value = serde_json::from_slice(&metadata_line).expect("event");
        assert_eq!(event["object"]["kind"], "PartialObjectMetadata");
        (full_line.len(), metadata_line.len())
    };
    let (full, metadata) = measure().await;
    let mut managed = store.get(&nodes, "", &name).expect("node");
    managed["metadata"]["managedFields"] = node_managed_fields(&managed);
    store.update(&nodes, "", &name, managed, false).expect("managedFields");
    let (full_managed, metadata_managed) = measure().await;
    NodeBytes { full, metadata, full_managed, metadata_managed }
}

// ---------------------------------------------------------------------------------------

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == RSS_CHILD) {
        let mode = args.get(at + 1).expect("mode");
        let path = args.get(at + 2).expect("dump path");
        rss_child(mode, Path::new(path));
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(bench());
}

async fn bench() {
    let scale = Scale::from_env();
    let mut table = Table::new(["median / p50", "p99", "ratio", "target", "result"]);
    let started = Instant::now();
    // timings are only comparable on an otherwise idle machine: say how busy it was
    let load = bench_table::load_average;
    let load_at_start = load().unwrap_or_default();

    // 1. latency
    let wrapper = offline_wrapper();
    each_upstream_input(&scale, |input, _| wrapper.apply(input));
    assert_eq!(wrapper.serving(), ViewSource::Upstream);
    // steady state: the change history is full of replaced versions, memory stops growing
    for c in 0..grid_wrapper::DEFAULT_HISTORY.min(scale.services) {
        let pod = (3_000_000 + c, endpoint_node(c, 0, &scale));
        wrapper.apply(Input::Upsert(Object::Slice(slice_object(c, &scale, Some(pod), 1))));
    }
    let as_served = serve(wrapper.router(&grid_wrapper::server::debug_readers(Vec::new())), false).await;
    let nodelay = serve(wrapper.router(&grid_wrapper::server::debug_readers(Vec::new())), true).await;
    let mut next_change = 0;
    let phases = [
        ("in-process", Via::InProcess, 1, Some(Duration::from_millis(1))),
        ("in-process", Via::InProcess, 100, Some(Duration::from_millis(5))),
        ("HTTP as the binary serves (Nagle on)", Via::Http(as_served), 1, None),
        ("HTTP as the binary serves (Nagle on)", Via::Http(as_served), 100, None),
        ("HTTP with TCP_NODELAY", Via::Http(nodelay), 1, None),
        ("HTTP with TCP_NODELAY", Via::Http(nodelay), 100, None),
    ];
    for (path, via, watchers, target) in phases {
        let measured = latency(&wrapper, &scale, via, watchers, &mut next_change).await;
        let p99 = percentile(&measured.deliveries, 0.99);
        let what = format!(
            "change -> event line, {path}, {watchers} watcher{} ({} changes at {:.0}/s, {} deliveries)",
            if watchers == 1 { "" } else { "s" },
            scale.events,
            measured.rate,
            measured.deliveries.len()
        );
        let (target_text, result) = match target {
            Some(t) => (format!("p99 < {}", duration(t)), met(p99 < t)),
            None => ("(context)".to_string(), "-"),
        };
        table.row(
            "1",
            what,
            [&duration(percentile(&measured.deliveries, 0.5)), &duration(p99), "-", &target_text, result],
        );
        if matches!(via, Via::InProcess) {
            table.row(
                "1",
                "  of which Wrapper::apply (view, encode, same-form check, commit, publish)",
                [
                    &duration(percentile(&measured.applying, 0.5)),
                    &duration(percentile(&measured.applying, 0.99)),
                    "-",
                    "",
                    "-",
                ],
            );
        }
        if watchers > 1 {
            table.row(
                "1",
                format!("  same, until the last of the {watchers} watchers has it"),
                [
                    &duration(percentile(&measured.last_watcher, 0.5)),
                    &duration(percentile(&measured.last_watcher, 0.99)),
                    "-",
                    "",
                    "-",
                ],
            );
        }
    }
    wrapper.stop_watches();
    drop(wrapper);

    // 2. lists
    let lists = lists(&scale).await;
    let median = |times: &[Duration]| percentile(times, 0.5);
    let (wrapper_list, upstream_list) = (median(&lists.wrapper), median(&lists.upstream));
    let n = scale.services;
    table.row(
        "2",
        format!(
            "list {n} slices from the wrapper, HTTP ({}, {} endpoints), median of {}",
            mib(lists.wrapper_bytes as f64),
            lists.endpoints.0,
            lists.wrapper.len()
        ),
        [&duration(wrapper_list), "-", "-", "", "-"],
    );
    table.row(
        "2",
        format!(
            "list {n} slices from the fake apiserver, HTTP ({}, {} endpoints), median of {}",
            mib(lists.upstream_bytes as f64),
            lists.endpoints.1,
            lists.upstream.len()
        ),
        [&duration(upstream_list), "-", "-", "", "-"],
    );
    let vs_fake = upstream_list.as_secs_f64() / wrapper_list.as_secs_f64();
    table.row("2", "  fake apiserver / wrapper", ["-", "-", &format!("{vs_fake:.2}x"), ">= 10x", met(vs_fake >= 10.0)]);
    let vs_real = REAL_APISERVER_LIST.as_secs_f64() / wrapper_list.as_secs_f64();
    table.row(
        "2",
        "  real kube-apiserver (220 ms, quoted) / wrapper",
        ["-", "-", &format!("{vs_real:.1}x"), ">= 10x", met(vs_real >= 10.0)],
    );
    table.row(
        "2",
        "  of which (in-process) Log::list: snapshot of the slices",
        [&duration(median(&lists.snapshot)), "-", "-", "", "-"],
    );
    table.row(
        "2",
        "  of which (in-process) listwatch::ListBody: the streamed chunks",
        [&duration(median(&lists.body)), "-", "-", "", "-"],
    );
    table.row(
        "2",
        "  wrapper's first sync from the fake apiserver (kube-rs watchers, HTTP)",
        [&duration(lists.sync), "-", "-", "", "-"],
    );

    // 3. memory
    let rss = rss();
    let json = rss.upstream_json;
    let share = |bytes: f64| format!("{:.2}x", bytes / json);
    table.row(
        "3",
        format!("RSS of the synced wrapper ({} served objects) vs their upstream JSON ({})", rss.objects, mib(json)),
        [&mib(rss.delta), "-", &share(rss.delta), "<= 2x", met(rss.delta <= 2.0 * json)],
    );
    table.row(
        "3",
        format!("  same after {} slice updates (the history holds replaced versions)", scale.services),
        [&mib(rss.updated_delta), "-", &share(rss.updated_delta), "", "-"],
    );
    table.row(
        "3",
        "  topology view alone (LZ4-compressed upstream slices, policies, indexes)",
        [&mib(rss.view), "-", &share(rss.view), "", "-"],
    );
    table.row("3", "  list/watch log alone (served objects)", [&mib(rss.log), "-", &share(rss.log), "", "-"]);
    table.row("3", "    of which encoded JSON bytes (exact)", [&mib(rss.encoded), "-", &share(rss.encoded), "", "-"]);
    let log_rest = rss.log - rss.encoded;
    table.row(
        "3",
        "    of which identity (names, labels), maps, Arcs, history (remainder)",
        [&mib(log_rest), "-", &share(log_rest), "", "-"],
    );
    table.row(
        "3",
        "  for comparison: the served objects as serde_json::Values (not kept)",
        [&mib(rss.values), "-", &share(rss.values), "", "-"],
    );
    let rest = rss.delta - rss.view - rss.log;
    table.row(
        "3",
        "  wrapper - (view + log), each measured alone: staging, node sets, allocator",
        [&mib(rest), "-", &share(rest), "", "-"],
    );

    // 4. node status update bytes
    let bytes = node_bytes(&scale).await;
    let ratio = |full: usize, metadata: usize| format!("{:.1}x", full as f64 / metadata as f64);
    table.row(
        "4",
        "node status update event, full watch (as the fake apiserver stores nodes)",
        [&format!("{} B", bytes.full), "-", "-", "", "-"],
    );
    table.row(
        "4",
        "  metadata-only watch (PartialObjectMetadata)",
        [&format!("{} B", bytes.metadata), "-", &ratio(bytes.full, bytes.metadata), "", "-"],
    );
    table.row(
        "4",
        "same, node with kubelet-like managedFields (as a real apiserver sends): full",
        [&format!("{} B", bytes.full_managed), "-", "-", "", "-"],
    );
    table.row(
        "4",
        "  metadata-only",
        [&format!("{} B", bytes.metadata_managed), "-", &ratio(bytes.full_managed, bytes.metadata_managed), "", "-"],
    );
    let per_second = scale.nodes as f64 / 300.0;
    table.row(
        "4",
        format!(
            "  per wrapper, {} nodes each reporting status every 5 min (with managedFields): full -> metadata-only",
            scale.nodes
        ),
        [
            &format!(
                "{:.1} -> {:.1} KB/s",
                per_second * bytes.full_managed as f64 / 1e3,
                per_second * bytes.metadata_managed as f64 / 1e3
            ),
            "-",
            "-",
            "",
            "-",
        ],
    );

    println!();
    println!(
        "grid-wrapper bench{}: {} Services ({} topology-aware) with one EndpointSlice of {} endpoints each, {} nodes in {} units; local node {}; {:.0} s; load average {} at start, {} at end",
        if scale.quick { " (QUICK: smoke only, not comparable with the targets)" } else { "" },
        scale.services,
        scale.services.div_ceil(2),
        scale.endpoints_per_slice,
        scale.nodes,
        scale.units,
        node_name(LOCAL_NODE),
        started.elapsed().as_secs_f64(),
        load_at_start,
        load().unwrap_or_default()
    );
    table.print();
}
