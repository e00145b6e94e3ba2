//! The cluster the grid wrapper's benchmarks run against: its scale (`WRAPPER_BENCH_QUICK`
//! for a smoke run) and its upstream objects, deterministic and shaped as
//! kube-controller-manager and the kubelet write them. Shared by the `wrapper` and
//! `unit_upstream` benches, with the wrappers and HTTP plumbing they measure through.

#![allow(dead_code, reason = "each bench uses a different subset")]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use edgegrid_testing::objects;
use fake_apiserver::FakeApiServer;
use grid_wrapper::cache::{Input, Object};
use grid_wrapper::metrics::Metrics;
use grid_wrapper::{Wrapper, WrapperConfig};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use listwatch::{LogConfig, Shape, WatchConfig};
use serde_json::{Value, json};
use unit_link::stream::Stream;

// ---------------------------------------------------------------------------------------
// Scale
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
pub struct Scale {
    pub nodes: usize,
    pub units: usize,
    /// One EndpointSlice per Service.
    pub services: usize,
    pub endpoints_per_slice: usize,
    /// Upstream changes per latency phase (at `RATE_PER_SECOND`).
    pub events: usize,
    pub list_runs: usize,
    pub quick: bool,
}

pub const QUICK_ENV: &str = "WRAPPER_BENCH_QUICK";
pub const RATE_PER_SECOND: u64 = 1_000;
pub const LOCAL_NODE: usize = 0;
/// The unit label (SuperEdge's `gridUniqKey`) and the topology-aware Services' keys.
pub const UNIT_LABEL: &str = "zone1";
pub const TOPOLOGY_KEYS: &str = r#"["zone1"]"#;
/// `edgegrid_testing::objects` builds every namespaced object in `ns`.
pub const NAMESPACE: &str = "ns";
/// What a real kube-apiserver takes to list 10k such slices (the target is 10x better).
pub const REAL_APISERVER_LIST: Duration = Duration::from_millis(220);
pub const METADATA_ACCEPT: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

impl Scale {
    pub fn from_env() -> Self {
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
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A seed per (purpose, index), so every generated value can be rebuilt on its own.
pub fn seed(domain: u64, index: usize) -> u64 {
    (domain << 40) ^ index as u64
}

pub fn chars(seed: u64, len: usize, alphabet: &[u8]) -> String {
    (0..len)
        .map(|i| {
            alphabet[(mix(seed.wrapping_mul(131).wrapping_add(i as u64)) % alphabet.len() as u64) as usize] as char
        })
        .collect()
}

pub fn hex(seed: u64, len: usize) -> String {
    chars(seed, len, b"0123456789abcdef")
}

/// A random suffix as the apiserver's `generateName` and ReplicaSet pods use.
pub fn suffix(seed: u64, len: usize) -> String {
    chars(seed, len, b"bcdfghjklmnpqrstvwxz2456789")
}

pub fn uid(seed: u64) -> String {
    let h = hex(seed, 32);
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

pub fn timestamp(seconds: u64) -> String {
    let (h, m, s) = (seconds / 3600 % 24, seconds / 60 % 60, seconds % 60);
    format!("2026-03-{:02}T{h:02}:{m:02}:{s:02}Z", 1 + seconds / 86_400 % 28)
}

/// JSON merge: objects merge key by key, anything else is replaced.
pub fn merge(base: &mut Value, patch: Value) {
    match (base, patch) {
        (Value::Object(base), Value::Object(patch)) => {
            for (key, value) in patch {
                merge(base.entry(key).or_insert(Value::Null), value);
            }
        }
        (base, patch) => *base = patch,
    }
}

pub fn typed<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("generated object is valid")
}

pub fn json_len<T: serde::Serialize>(object: &T) -> usize {
    serde_json::to_vec(object).expect("serialisable").len()
}

pub fn node_name(n: usize) -> String {
    format!("edge-node-{n:04}")
}

pub fn zone_of(unit: usize) -> String {
    format!("edge-zone-{}", unit % 3)
}

/// Labels as the kubelet (and the cloud provider, and the grid admin) set them.
pub fn node_labels(n: usize, scale: &Scale) -> Vec<(String, String)> {
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
pub fn node_metadata(n: usize, scale: &Scale) -> Value {
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

pub fn node_ip(n: usize) -> String {
    format!("192.168.{}.{}", 10 + n / 250, 1 + n % 250)
}

pub fn pod_cidr(n: usize) -> String {
    format!("10.{}.{}.0/24", 128 + n / 256, n % 256)
}

/// The kubelet's five conditions (NetworkUnavailable is the CNI's); `heartbeat` moves the
/// kubelet's `lastHeartbeatTime`s, as each status report does.
pub fn node_conditions(heartbeat: u64) -> Value {
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
pub fn node_value(n: usize, scale: &Scale, heartbeat: u64) -> Value {
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
pub fn node_managed_fields(node: &Value) -> Value {
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

pub fn service_name(i: usize) -> String {
    format!("svc-{i:05}")
}

pub fn topology_aware(i: usize) -> bool {
    i.is_multiple_of(2)
}

/// The fixture Service, completed as the apiserver serves a ClusterIP Service.
pub fn service_object(i: usize) -> Service {
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

pub fn slice_name(i: usize) -> String {
    format!("{}-{}", service_name(i), suffix(seed(11, i), 5))
}

pub fn pod_ip(pod: usize) -> String {
    format!("10.{}.{}.{}", 64 + pod / 65_536, pod / 256 % 256, pod % 256)
}

pub fn endpoint_node(i: usize, e: usize, scale: &Scale) -> usize {
    (mix(seed(12, i * scale.endpoints_per_slice + e)) % scale.nodes as u64) as usize
}

/// The fixture slice of Service `i`, completed as kube-controller-manager writes it
/// (targetRef, zone, serving/terminating, owner, labels copied from the Service,
/// trigger time). `first`, if given, replaces the first endpoint by `(pod, node)`: a pod
/// replaced. Pod `p` has address [`pod_ip`]`(p)`.
pub fn slice_object(i: usize, scale: &Scale, first: Option<(usize, usize)>, trigger: u64) -> EndpointSlice {
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

/// The wrapper's upstream streams as its watches deliver them on a first sync into an
/// empty cache (`Begin` and `Done` only mark each stream's list, and a first list has
/// nothing to delete): each with its JSON size as the upstream sends it (metadata-only for
/// remote nodes).
pub fn each_upstream_input(scale: &Scale, mut take: impl FnMut(Input, usize)) {
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

pub fn wrapper_config() -> WrapperConfig {
    WrapperConfig {
        node_name: node_name(LOCAL_NODE),
        rewrite_local_apiserver: false,
        log: LogConfig {
            history_limit: grid_wrapper::DEFAULT_HISTORY,
            watch_buffer: grid_wrapper::DEFAULT_WATCH_BUFFER,
        },
        watch: watch_config(),
        cache_dir: None,
        unit_label_key: None,
    }
}

pub fn watch_config() -> WatchConfig {
    WatchConfig {
        bookmark_interval: grid_wrapper::DEFAULT_BOOKMARK_INTERVAL,
        default_timeout: grid_wrapper::DEFAULT_WATCH_TIMEOUT,
    }
}

/// A wrapper fed directly (its pass-through upstream is never reached).
pub fn offline_wrapper() -> Arc<Wrapper> {
    let nowhere = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
    Wrapper::new(&wrapper_config(), &nowhere, Arc::new(Metrics::default())).expect("wrapper")
}

/// Serves a router on 127.0.0.1: as the wrapper's binary does (plain `axum::serve`, so
/// Nagle's algorithm stays on), or with `TCP_NODELAY` on each accepted connection (what
/// Go's net/http, and so kube-apiserver, does by default).
pub async fn serve(router: axum::Router, nodelay: bool) -> SocketAddr {
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

pub type Connection = SendRequest<Empty<Bytes>>;

pub async fn connect(addr: SocketAddr) -> Connection {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.expect("handshake");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    sender
}

pub async fn get(sender: &mut Connection, path: &str, accept: &str) -> http::Response<hyper::body::Incoming> {
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
pub async fn first_line(mut body: hyper::body::Incoming) -> Vec<u8> {
    let mut line = Vec::new();
    while !line.ends_with(b"\n") {
        let frame = body.frame().await.expect("stream open").expect("frame");
        line.extend_from_slice(frame.data_ref().map(Bytes::as_ref).unwrap_or_default());
    }
    line
}

/// The cluster, written straight into a fake apiserver's store.
pub fn populate(server: &FakeApiServer, scale: &Scale) {
    let store = server.store();
    let resource = |group: &str, plural: &str| store.resolve(group, "v1", plural).expect("built-in resource");
    let (namespaces, nodes) = (resource("", "namespaces"), resource("", "nodes"));
    let (services, slices) = (resource("", "services"), resource("discovery.k8s.io", "endpointslices"));
    store.create(&namespaces, "", json!({"metadata": {"name": NAMESPACE}})).expect("namespace");
    for n in 0..scale.nodes {
        store.create(&nodes, "", node_value(n, scale, 0)).expect("node");
    }
    // the API server gives each Service its own uid; a slice must name that one as its
    // owner, or the (fake) garbage collector deletes it as an orphan when it is created
    let mut uids = Vec::with_capacity(scale.services);
    for i in 0..scale.services {
        let service = serde_json::to_value(service_object(i)).expect("serialisable");
        let created = store.create(&services, NAMESPACE, service).expect("service");
        uids.push(created["metadata"]["uid"].clone());
    }
    for (i, uid) in uids.into_iter().enumerate() {
        let mut slice = serde_json::to_value(slice_object(i, scale, None, 0)).expect("serialisable");
        slice["metadata"]["ownerReferences"][0]["uid"] = uid;
        store.create(&slices, NAMESPACE, slice).expect("slice");
    }
}
