//! Reading the cluster for one [`Sample`]: the cloud's objects (through the admin client,
//! which no link cut reaches), each running wrapper's list, each watching client's
//! mirror, the processes' logs and memory. Shaping what is read is pure
//! ([`node_observed`], [`unit_services`], [`panic_line`], [`rss_kib`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use edgegrid_core::keys;
use edgegrid_core::protection::NodeReading;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use node_lifecycle::lifecycle::ZoneKey;

use super::grids::Listed;
use super::invariants::{Endpoints, NodeObserved};
use crate::local_cluster::layout::UNIT_LABEL_KEY;
use crate::local_cluster::views::{KUBE_PROXY_SELECTOR, served_endpoints, taints, workload_pods};
use crate::local_cluster::workload_status::pod_ready;

/// The cloud at one moment.
pub struct Cloud {
    pub listed: Listed,
    pub pods: Vec<Pod>,
    pub endpoints: Endpoints,
}

/// Lists everything the checks read, at once (an API fault slows every list alike).
pub async fn cloud(client: &Client) -> Result<Cloud> {
    let all = ListParams::default();
    let kube_proxy = ListParams::default().labels(KUBE_PROXY_SELECTOR);
    let (nodes, pods, slices, services) = (
        Api::<Node>::all(client.clone()),
        Api::<Pod>::all(client.clone()),
        Api::<EndpointSlice>::all(client.clone()),
        Api::<Service>::all(client.clone()),
    );
    let (deployments, stateful_sets) =
        (Api::<Deployment>::all(client.clone()), Api::<StatefulSet>::all(client.clone()));
    let deployment_grids = Api::<edgegrid_core::crd::DeploymentGrid>::all(client.clone());
    let stateful_set_grids = Api::<edgegrid_core::crd::StatefulSetGrid>::all(client.clone());
    let service_grids = Api::<edgegrid_core::crd::ServiceGrid>::all(client.clone());
    let (
        nodes,
        pods,
        slices,
        services,
        deployments,
        stateful_sets,
        deployment_grids,
        stateful_set_grids,
        service_grids,
    ) = tokio::try_join!(
        nodes.list(&all),
        pods.list(&all),
        slices.list(&kube_proxy),
        services.list(&all),
        deployments.list(&all),
        stateful_sets.list(&all),
        deployment_grids.list(&all),
        stateful_set_grids.list(&all),
        service_grids.list(&all),
    )?;
    Ok(Cloud {
        endpoints: served_endpoints(&slices.items),
        pods: pods.items,
        listed: Listed {
            nodes: nodes.items,
            deployment_grids: deployment_grids.items,
            stateful_set_grids: stateful_set_grids.items,
            service_grids: service_grids.items,
            deployments: deployments.items,
            stateful_sets: stateful_sets.items,
            services: services.items,
        },
    })
}

/// What the cloud says of `node`: its NoExecute and other taints, its workload pods
/// (`namespace/name` -> ready; the node agents' pods are not workloads), whether its Ready
/// condition is `True`, and its zone.
pub fn node_observed(node: &Node, pods: &[Pod]) -> NodeObserved {
    let name = node.name_any();
    let pods = workload_pods(&name, pods)
        .map(|p| (format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()), pod_ready(p)))
        .collect();
    let zone = ZoneKey::of_labels(&node.metadata.labels.clone().unwrap_or_default());
    let ready = NodeReading::of_node(node).ready.and_then(|c| c.status) == Some(keys::CONDITION_TRUE);
    NodeObserved { taints: taints(node), pods, not_ready: !ready, zone }
}

/// `namespace/name` -> the node of every pod bound to one.
pub fn pod_nodes(pods: &[Pod]) -> BTreeMap<String, String> {
    pods.iter()
        .filter_map(|p| {
            let node = p.spec.as_ref()?.node_name.clone()?;
            Some((format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()), node))
        })
        .collect()
}

/// The Services kept to a unit: `topologyKeys` names the unit label.
pub fn unit_services(services: &[Service]) -> BTreeSet<String> {
    services
        .iter()
        .filter(|s| {
            s.annotations()
                .get(edgegrid_core::keys::TOPOLOGY_KEYS_ANNOTATION)
                .and_then(|keys| serde_json::from_str::<Vec<String>>(keys).ok())
                .is_some_and(|keys| keys.iter().any(|k| k == UNIT_LABEL_KEY))
        })
        .map(|s| format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any()))
        .collect()
}

/// A wrapper's answer to kube-proxy's list: its endpoints and how many slices it held;
/// `None` when it did not answer within 3 s.
pub async fn wrapper_list(addr: SocketAddr) -> Option<(Endpoints, usize)> {
    let read = async {
        // no retries: a 503 (not synced) is no answer, at once
        let client = super::mirror::wrapper_client(addr)?;
        let slices = Api::<EndpointSlice>::all(client).list(&ListParams::default().labels(KUBE_PROXY_SELECTOR)).await?;
        anyhow::Ok((served_endpoints(&slices.items), slices.items.len()))
    };
    tokio::time::timeout(Duration::from_secs(3), read).await.ok()?.ok()
}

/// Whether the grid wrapper whose admin listener is `admin` leads its unit's upstream now
/// (its `grid_wrapper_unit_leading` gauge is 1).
pub async fn leads_its_unit(admin: SocketAddr) -> bool {
    let metrics = crate::local_cluster::processes::http_get(admin, "/metrics").await;
    metrics.is_some_and(|(status, body)| {
        status == 200 && edgegrid_testing::sample(&body, "grid_wrapper_unit_leading") == Some("1")
    })
}

/// Reads a log as it grows, for panics.
#[derive(Default)]
pub struct LogScanner {
    read: BTreeMap<PathBuf, u64>,
}

impl LogScanner {
    /// The first panic line written to `path` since the last scan.
    pub fn panic_since_last(&mut self, path: &PathBuf) -> Option<String> {
        use std::io::{Read, Seek, SeekFrom};
        let offset = self.read.entry(path.clone()).or_default();
        let mut file = std::fs::File::open(path).ok()?;
        let length = file.metadata().ok()?.len();
        if length < *offset {
            *offset = 0; // truncated: a new file
        }
        file.seek(SeekFrom::Start(*offset)).ok()?;
        let mut text = String::new();
        let read = file.take(length - *offset).read_to_string(&mut text).ok()?;
        *offset += read as u64;
        panic_line(&text)
    }
}

/// The first line of `text` in which a Rust thread panicked.
pub fn panic_line(text: &str) -> Option<String> {
    text.lines().find(|l| l.contains("panicked at")).map(|l| l.chars().take(300).collect())
}

/// `VmRSS` of `/proc/<pid>/status`, in KiB.
pub fn rss_kib(status: &str) -> Option<u64> {
    status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.trim().trim_end_matches("kB").trim().parse().ok()
}

pub fn rss_of(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status")).ok().as_deref().and_then(rss_kib).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local_cluster::kubelet::DAEMON_NAMESPACE;
    use serde_json::json;

    /// A wrapper leads when its gauge reads exactly 1: not another metric sharing the
    /// prefix, not a 0, not a listener that does not answer 200.
    #[tokio::test]
    async fn a_wrapper_leads_when_its_unit_leading_gauge_is_one() {
        async fn serving(status: u16, body: &'static str) -> SocketAddr {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a listener");
            let addr = listener.local_addr().expect("its address");
            tokio::spawn(async move {
                while let Ok((mut stream, _)) = listener.accept().await {
                    let mut request = [0u8; 1024];
                    let _ = stream.read(&mut request).await;
                    let response = format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\n\r\n{body}", body.len());
                    let _ = stream.write_all(response.as_bytes()).await;
                }
            });
            addr
        }
        let leading = "# TYPE grid_wrapper_unit_leading gauge\ngrid_wrapper_unit_leading_changes 3\ngrid_wrapper_unit_leading 1\n";
        assert!(leads_its_unit(serving(200, leading).await).await);
        let following = "grid_wrapper_unit_leading_changes 1\ngrid_wrapper_unit_leading 0\n";
        assert!(!leads_its_unit(serving(200, following).await).await);
        assert!(!leads_its_unit(serving(503, leading).await).await);
    }

    #[test]
    fn a_node_is_read_as_its_taints_and_its_workload_pods_readiness() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "z1"}},
            "spec": {"taints": [
                {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
                {"key": "example.com/other", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}))
        .expect("node");
        let pod = |namespace: &str, name: &str, node: &str, ready: &str| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": namespace},
                "spec": {"nodeName": node, "containers": []},
                "status": {"conditions": [{"type": "Ready", "status": ready}]}}))
            .expect("pod")
        };
        let pods = [
            pod("default", "a", "n1", "True"),
            pod("default", "b", "n1", "False"),
            pod("default", "c", "n2", "True"),
            pod(DAEMON_NAMESPACE, "grid-wrapper-n1", "n1", "True"),
        ];
        assert_eq!(
            node_observed(&node, &pods),
            NodeObserved {
                taints: vec!["example.com/other:NoSchedule".into(), "unreachable:NoExecute".into()],
                pods: BTreeMap::from([("default/a".into(), true), ("default/b".into(), false)]),
                not_ready: true,
                zone: ZoneKey { region: String::new(), zone: "z1".into() },
            }
        );
        let ready: Node = serde_json::from_value(json!({"metadata": {"name": "n2"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
        .expect("node");
        let observed = node_observed(&ready, &pods);
        assert!(!observed.not_ready && observed.zone == ZoneKey::default(), "{observed:?}");
        let without_condition: Node = serde_json::from_value(json!({"metadata": {"name": "n2"}})).expect("node");
        assert!(node_observed(&without_condition, &pods).not_ready);
        assert_eq!(pod_nodes(&pods[2..3]), BTreeMap::from([("default/c".to_string(), "n2".to_string())]));
    }

    #[test]
    fn unit_services_name_the_unit_label_in_their_topology_keys() {
        let service = |name: &str, keys: Option<&str>| -> Service {
            let annotations = keys.map(|k| json!({"topologyKeys": k})).unwrap_or(json!({}));
            serde_json::from_value(
                json!({"metadata": {"name": name, "namespace": "default", "annotations": annotations}}),
            )
            .expect("svc")
        };
        let services =
            [service("kept", Some(r#"["zone1"]"#)), service("other", Some(r#"["zone2"]"#)), service("plain", None)];
        assert_eq!(unit_services(&services), BTreeSet::from(["default/kept".to_string()]));
    }

    #[test]
    fn panics_and_memory_are_read_from_logs_and_proc() {
        let log = "2026-11-28T10:00:00Z  INFO started\nthread 'tokio-runtime-worker' panicked at src/x.rs:3:5:\nboom\n";
        assert_eq!(panic_line(log).as_deref(), Some("thread 'tokio-runtime-worker' panicked at src/x.rs:3:5:"));
        assert_eq!(panic_line("all fine\n"), None);
        assert_eq!(rss_kib("Name:\tx\nVmRSS:\t   20480 kB\nVmSwap:\t0 kB\n"), Some(20480));
        assert!(rss_of(std::process::id()) > 0, "this process has resident memory");
        let path = std::env::temp_dir().join(format!("soak-log-{}", std::process::id()));
        std::fs::write(&path, "quiet\n").expect("write");
        let mut scanner = LogScanner::default();
        assert_eq!(scanner.panic_since_last(&path), None);
        std::fs::write(&path, format!("quiet\n{log}")).expect("write");
        assert!(scanner.panic_since_last(&path).is_some(), "the new lines are read");
        assert_eq!(scanner.panic_since_last(&path), None, "each line once");
        let _ = std::fs::remove_file(&path);
    }
}
