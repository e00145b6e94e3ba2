//! What the run shows: per node, the endpoints its kube-proxy would get from its grid
//! wrapper (read with kube-proxy's own list request), and per node what the cloud says of
//! it (Ready, the edge-health verdict, taints, its pods' readiness). Reading is I/O;
//! shaping and printing are pure.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Result;
use edgegrid_core::protection::NodeReading;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::layout::{SimNode, UNIT_LABEL_KEY};
use super::workload_status::pod_ready;
use super::workloads::SERVICE_NAME_LABEL;

/// kube-proxy's EndpointSlice list (`kube-proxy-protocol.md`).
pub const KUBE_PROXY_SELECTOR: &str = "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name";

/// `namespace/service` -> the ready endpoints, as `pod@node`, sorted.
pub type ServedEndpoints = BTreeMap<String, Vec<String>>;

/// A node's view, or why there is none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeView {
    Served(ServedEndpoints),
    /// The node's wrapper does not answer (the node is down).
    Unreachable,
}

/// The ready endpoints in `slices`, by Service.
pub fn served_endpoints(slices: &[EndpointSlice]) -> ServedEndpoints {
    let mut out = ServedEndpoints::new();
    for slice in slices {
        let Some(service) = slice.labels().get(SERVICE_NAME_LABEL) else { continue };
        let key = format!("{}/{service}", slice.namespace().unwrap_or_default());
        let entry = out.entry(key).or_default();
        for endpoint in &slice.endpoints {
            if endpoint.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                continue; // kube-proxy routes only to ready endpoints
            }
            let pod = endpoint
                .target_ref
                .as_ref()
                .and_then(|r| r.name.clone())
                .unwrap_or_else(|| endpoint.addresses.join(","));
            let node = endpoint.node_name.clone().unwrap_or_else(|| "?".into());
            entry.push(format!("{pod}@{node}"));
        }
        entry.sort();
    }
    out
}

/// What `node`'s grid wrapper serves its kube-proxy.
pub async fn node_view(wrapper: SocketAddr) -> NodeView {
    let read = async {
        let client = Client::try_from(kube::Config::new(format!("http://{wrapper}").parse()?))?;
        let slices = Api::<EndpointSlice>::all(client).list(&ListParams::default().labels(KUBE_PROXY_SELECTOR)).await?;
        anyhow::Ok(served_endpoints(&slices.items))
    };
    match tokio::time::timeout(Duration::from_secs(3), read).await {
        Ok(Ok(served)) => NodeView::Served(served),
        _ => NodeView::Unreachable,
    }
}

/// What the cloud says of one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeState {
    pub name: String,
    pub unit: String,
    /// The Ready condition's status.
    pub ready: String,
    /// The edge-health verdict withholds protection (`nodeunhealth` set: `"yes"`, or
    /// `"undecided"` while fewer than two peers vouch for it).
    pub voted_unhealthy: bool,
    /// The `nodeunhealth` value, when set.
    pub unhealth: Option<String>,
    /// `key:Effect`, the `node.kubernetes.io/` prefix dropped.
    pub taints: Vec<String>,
    /// Ready pods bound to it, and all of them.
    pub pods: (usize, usize),
}

/// The node's taints as `key:Effect`, the `node.kubernetes.io/` prefix dropped, sorted.
pub fn taints(node: &Node) -> Vec<String> {
    let mut taints: Vec<String> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .map(|t| format!("{}:{}", t.key.trim_start_matches("node.kubernetes.io/"), t.effect))
        .collect();
    taints.sort();
    taints
}

/// The workloads' pods bound to `node` (not the node agents').
pub fn workload_pods<'a>(node: &'a str, pods: &'a [Pod]) -> impl Iterator<Item = &'a Pod> {
    pods.iter()
        .filter(move |p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .filter(|p| p.namespace().as_deref() != Some(super::kubelet::DAEMON_NAMESPACE))
}

pub fn node_state(node: &Node, pods: &[Pod]) -> NodeState {
    let name = node.name_any();
    let reading = NodeReading::of_node(node);
    let ready = reading.ready.and_then(|c| c.status).unwrap_or("-").to_string();
    let bound: Vec<&Pod> = workload_pods(&name, pods).collect();
    NodeState {
        unit: node.labels().get(UNIT_LABEL_KEY).cloned().unwrap_or_default(),
        ready,
        voted_unhealthy: reading.voted_unhealthy(),
        unhealth: reading.unhealth.map(str::to_string),
        taints: taints(node),
        pods: (bound.iter().filter(|p| pod_ready(p)).count(), bound.len()),
        name,
    }
}

/// Every simulated node's state, in `nodes`' order.
pub async fn node_states(client: &Client, nodes: &[SimNode]) -> Result<Vec<NodeState>> {
    let listed = Api::<Node>::all(client.clone()).list(&ListParams::default()).await?.items;
    let pods = Api::<Pod>::all(client.clone()).list(&ListParams::default()).await?.items;
    Ok(nodes
        .iter()
        .filter_map(|n| listed.iter().find(|l| l.name_any() == n.name))
        .map(|node| node_state(node, &pods))
        .collect())
}

/// Columns padded to their widest cell, three spaces apart, as kubectl prints.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<width$}   ", width = widths[i]));
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(headers.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// The per-node table: a row per node and Service.
pub fn views_table(views: &[(SimNode, NodeView)]) -> String {
    let mut rows = Vec::new();
    for (node, view) in views {
        match view {
            NodeView::Unreachable => {
                rows.push(vec![node.unit.clone(), node.name.clone(), "-".into(), "(node down: no wrapper)".into()])
            }
            NodeView::Served(services) if services.is_empty() => {
                rows.push(vec![node.unit.clone(), node.name.clone(), "-".into(), "(no Services)".into()])
            }
            NodeView::Served(services) => {
                for (service, endpoints) in services {
                    let endpoints = if endpoints.is_empty() { "(none ready)".to_string() } else { endpoints.join(" ") };
                    rows.push(vec![node.unit.clone(), node.name.clone(), service.clone(), endpoints]);
                }
            }
        }
    }
    table(&["UNIT", "NODE", "SERVICE", "READY ENDPOINTS (pod@node)"], &rows)
}

pub fn states_table(states: &[NodeState]) -> String {
    let rows: Vec<Vec<String>> = states
        .iter()
        .map(|s| {
            vec![
                s.name.clone(),
                s.unit.clone(),
                s.ready.clone(),
                s.unhealth.clone().unwrap_or_else(|| "-".into()),
                if s.taints.is_empty() { "-".into() } else { s.taints.join(",") },
                format!("{}/{}", s.pods.0, s.pods.1),
            ]
        })
        .collect();
    table(&["NODE", "UNIT", "READY", "NODEUNHEALTH", "TAINTS", "PODS READY"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn served_endpoints_are_the_ready_ones_by_service() {
        let slice = |name: &str, service: &str, endpoints: serde_json::Value| -> EndpointSlice {
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default",
                "labels": {SERVICE_NAME_LABEL: service}}, "addressType": "IPv4", "endpoints": endpoints}))
            .expect("slice")
        };
        let endpoint = |pod: &str, node: &str, ready: Option<bool>| {
            json!({"addresses": ["10.0.0.1"], "nodeName": node, "targetRef": {"kind": "Pod", "name": pod},
                "conditions": {"ready": ready}})
        };
        let slices = [
            slice("web-1", "web", json!([endpoint("web-1", "n1", Some(true)), endpoint("web-0", "n2", None)])),
            slice("web-2", "web", json!([endpoint("web-2", "n3", Some(false))])),
            slice("db", "db", json!([])),
        ];
        let served = served_endpoints(&slices);
        assert_eq!(
            served,
            BTreeMap::from([
                ("default/db".to_string(), vec![]),
                ("default/web".to_string(), vec!["web-0@n2".to_string(), "web-1@n1".to_string()]),
            ])
        );
    }

    #[test]
    fn tables_are_aligned_as_kubectl_prints_them() {
        let node = |name: &str, unit: &'static str| SimNode {
            name: name.into(),
            unit: unit.to_string(),
            unit_index: 0,
            index: 0,
            ip: std::net::Ipv4Addr::LOCALHOST,
        };
        let served = NodeView::Served(BTreeMap::from([("default/echo-svc".to_string(), vec!["e-0@a-0".to_string()])]));
        let text = views_table(&[(node("a-0", "unit-a"), served), (node("a-1", "unit-a"), NodeView::Unreachable)]);
        assert_eq!(
            text,
            "UNIT     NODE   SERVICE            READY ENDPOINTS (pod@node)\n\
             unit-a   a-0    default/echo-svc   e-0@a-0\n\
             unit-a   a-1    -                  (node down: no wrapper)\n"
        );
        let state = NodeState {
            name: "a-1".into(),
            unit: "unit-a".into(),
            ready: "Unknown".into(),
            voted_unhealthy: true,
            unhealth: Some("yes".into()),
            taints: vec!["unreachable:NoExecute".into(), "unreachable:NoSchedule".into()],
            pods: (0, 1),
        };
        assert_eq!(
            states_table(&[state]),
            "NODE   UNIT     READY     NODEUNHEALTH   TAINTS                                         PODS READY\n\
             a-1    unit-a   Unknown   yes            unreachable:NoExecute,unreachable:NoSchedule   0/1\n"
        );
    }
}
