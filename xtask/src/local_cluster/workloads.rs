//! What the local cluster has no real controllers for: pods for the grid controller's
//! Deployments and StatefulSets (the scheduler's and workload controllers' part: one pod
//! per replica, placed by the template's `nodeSelector`) and an EndpointSlice per
//! selector Service (the endpointslice controller's part, readiness from the pods' Ready
//! condition). The kubelets' part (pod status) is in `kubelet`. Decisions are pure
//! functions of the objects; [`run`] only lists and writes.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Node, Pod, PodSpec, PodTemplateSpec, Service, Toleration};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use tokio::sync::watch;

/// The label the endpointslice controller puts on its slices, and its value.
pub const MANAGED_BY: (&str, &str) = ("endpointslice.kubernetes.io/managed-by", "endpointslice-controller.k8s.io");
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// A workload's pods as its controller would want them.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub namespace: String,
    pub name: String,
    pub replicas: i32,
    pub template: PodTemplateSpec,
}

impl Workload {
    pub fn of_deployment(d: &Deployment) -> Option<Self> {
        let spec = d.spec.as_ref()?;
        Some(Self {
            namespace: d.namespace()?,
            name: d.name_any(),
            replicas: spec.replicas.unwrap_or(1),
            template: spec.template.clone(),
        })
    }

    pub fn of_stateful_set(s: &StatefulSet) -> Option<Self> {
        let spec = s.spec.as_ref()?;
        Some(Self {
            namespace: s.namespace()?,
            name: s.name_any(),
            replicas: spec.replicas.unwrap_or(1),
            template: spec.template.clone(),
        })
    }
}

/// The pods `workloads` want that `existing` lacks: `<workload>-<ordinal>`, bound to the
/// matching nodes in turn (sorted by name), with the tolerations the DefaultTolerationSeconds
/// admission plugin adds (so a NoExecute taint evicts only after 300 s, as in a real
/// cluster). A workload no node matches gets no pods (they would stay Pending).
pub fn missing_pods(workloads: &[Workload], nodes: &[Node], existing: &[Pod]) -> Vec<Pod> {
    let have: std::collections::BTreeSet<(String, String)> =
        existing.iter().map(|p| (p.namespace().unwrap_or_default(), p.name_any())).collect();
    let mut out = Vec::new();
    for workload in workloads {
        let spec = workload.template.spec.clone().unwrap_or_default();
        let selector = spec.node_selector.clone().unwrap_or_default();
        let mut matching: Vec<&Node> =
            nodes.iter().filter(|n| selector.iter().all(|(k, v)| n.labels().get(k) == Some(v))).collect();
        matching.sort_by_key(|n| n.name_any());
        if matching.is_empty() {
            continue;
        }
        for ordinal in 0..workload.replicas.max(0) as usize {
            let name = format!("{}-{ordinal}", workload.name);
            if have.contains(&(workload.namespace.clone(), name.clone())) {
                continue;
            }
            let node = matching[ordinal % matching.len()].name_any();
            let labels = workload.template.metadata.as_ref().and_then(|m| m.labels.clone());
            let mut tolerations = spec.tolerations.clone().unwrap_or_default();
            for key in ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"] {
                tolerations.push(Toleration {
                    key: Some(key.into()),
                    operator: Some("Exists".into()),
                    effect: Some("NoExecute".into()),
                    toleration_seconds: Some(300),
                    value: None,
                });
            }
            out.push(Pod {
                metadata: ObjectMeta {
                    name: Some(name),
                    namespace: Some(workload.namespace.clone()),
                    labels,
                    ..Default::default()
                },
                spec: Some(PodSpec { node_name: Some(node), tolerations: Some(tolerations), ..spec.clone() }),
                status: None,
            });
        }
    }
    out
}

/// Whether `pod`'s Ready condition is True.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The EndpointSlice the endpointslice controller would keep for `service` (one per
/// Service here: the demo's Services have far fewer than 100 endpoints): every pod its
/// selector matches that has an IP, sorted by name, ready as the pod is. `None` for a
/// Service without a selector.
pub fn desired_slice(service: &Service, pods: &[Pod]) -> Option<EndpointSlice> {
    let spec = service.spec.as_ref()?;
    let selector = spec.selector.as_ref().filter(|s| !s.is_empty())?;
    let namespace = service.namespace().unwrap_or_default();
    let mut matching: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|p| selector.iter().all(|(k, v)| p.labels().get(k) == Some(v)))
        .filter(|p| p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some())
        .collect();
    matching.sort_by_key(|p| p.name_any());
    let endpoints = matching
        .into_iter()
        .map(|pod| {
            let ready = pod_ready(pod) && pod.metadata.deletion_timestamp.is_none();
            Endpoint {
                addresses: vec![pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap_or_default()],
                conditions: Some(EndpointConditions {
                    ready: Some(ready),
                    serving: Some(ready),
                    terminating: Some(pod.metadata.deletion_timestamp.is_some()),
                }),
                node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
                target_ref: Some(k8s_openapi::api::core::v1::ObjectReference {
                    kind: Some("Pod".into()),
                    namespace: Some(namespace.clone()),
                    name: Some(pod.name_any()),
                    uid: pod.uid(),
                    ..Default::default()
                }),
                ..Default::default()
            }
        })
        .collect();
    let ports = spec
        .ports
        .iter()
        .flatten()
        .map(|p| EndpointPort {
            name: p.name.clone(),
            port: Some(match &p.target_port {
                Some(IntOrString::Int(port)) => *port,
                _ => p.port,
            }),
            protocol: p.protocol.clone().or(Some("TCP".into())),
            app_protocol: None,
        })
        .collect();
    let name = service.name_any();
    Some(EndpointSlice {
        metadata: ObjectMeta {
            name: Some(format!("{name}-sim")),
            namespace: Some(namespace),
            labels: Some(BTreeMap::from([
                (SERVICE_NAME_LABEL.to_string(), name),
                (MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string()),
            ])),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        endpoints,
        ports: Some(ports),
    })
}

/// Whether `existing` already says what `desired` says (labels, endpoints, ports).
fn slice_matches(existing: &EndpointSlice, desired: &EndpointSlice) -> bool {
    existing.metadata.labels == desired.metadata.labels
        && existing.endpoints == desired.endpoints
        && existing.ports == desired.ports
        && existing.address_type == desired.address_type
}

/// The cloud-side controllers, every 300 ms until `stop` turns true.
pub async fn run(client: Client, mut stop: watch::Receiver<bool>) {
    loop {
        if let Err(error) = pass(&client).await {
            tracing::warn!(error = format!("{error:#}"), "simulated workload controllers");
        }
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            () = tokio::time::sleep(Duration::from_millis(300)) => {}
        }
    }
}

async fn pass(client: &Client) -> Result<()> {
    let all = ListParams::default();
    let nodes = Api::<Node>::all(client.clone()).list(&all).await.context("listing nodes")?.items;
    let deployments = Api::<Deployment>::all(client.clone()).list(&all).await.context("listing deployments")?;
    let stateful_sets = Api::<StatefulSet>::all(client.clone()).list(&all).await.context("listing statefulsets")?;
    let workloads: Vec<Workload> = deployments
        .iter()
        .filter_map(Workload::of_deployment)
        .chain(stateful_sets.iter().filter_map(Workload::of_stateful_set))
        .collect();
    let pods = Api::<Pod>::all(client.clone()).list(&all).await.context("listing pods")?.items;
    for pod in missing_pods(&workloads, &nodes, &pods) {
        let api: Api<Pod> = Api::namespaced(client.clone(), pod.metadata.namespace.as_deref().unwrap_or("default"));
        api.create(&PostParams::default(), &pod).await.with_context(|| format!("creating pod {}", pod.name_any()))?;
    }
    for service in Api::<Service>::all(client.clone()).list(&all).await.context("listing services")? {
        let Some(desired) = desired_slice(&service, &pods) else { continue };
        let api: Api<EndpointSlice> =
            Api::namespaced(client.clone(), desired.metadata.namespace.as_deref().unwrap_or("default"));
        let name = desired.name_any();
        match api.get_opt(&name).await? {
            None => {
                api.create(&PostParams::default(), &desired).await?;
            }
            Some(existing) if slice_matches(&existing, &desired) => {}
            Some(existing) => {
                // an UPDATE, as the real controller's: the admission webhook reviews it
                let mut replacement = desired;
                replacement.metadata.resource_version = existing.metadata.resource_version;
                api.replace(&name, &PostParams::default(), &replacement).await?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, unit: &str) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"zone1": unit}}})).expect("node")
    }

    fn workload(name: &str, replicas: i32, unit: &str) -> Workload {
        Workload {
            namespace: "default".into(),
            name: name.into(),
            replicas,
            template: serde_json::from_value(json!({
                "metadata": {"labels": {"app": "echo"}},
                "spec": {"nodeSelector": {"zone1": unit}, "containers": [{"name": "c", "image": "i"}]}
            }))
            .expect("template"),
        }
    }

    fn pod(name: &str, node: &str, ip: Option<&str>, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "labels": {"app": "echo"}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
            "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        }))
        .expect("pod")
    }

    #[test]
    fn pods_go_to_the_units_nodes_in_turn_and_existing_ones_are_kept() {
        let nodes = [node("b-1", "b"), node("a-1", "a"), node("a-0", "a")];
        let workloads = [workload("echo-a", 3, "a"), workload("echo-b", 1, "b"), workload("echo-c", 2, "c")];
        let existing = [pod("echo-a-1", "a-1", None, false)];
        let placed: Vec<(String, String)> = missing_pods(&workloads, &nodes, &existing)
            .iter()
            .map(|p| (p.name_any(), p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default()))
            .collect();
        let expected = [("echo-a-0", "a-0"), ("echo-a-2", "a-0"), ("echo-b-0", "b-1")];
        assert_eq!(placed, expected.map(|(p, n)| (p.to_string(), n.to_string())));
        let created = &missing_pods(&workloads, &nodes, &existing)[0];
        let tolerations = created.spec.as_ref().and_then(|s| s.tolerations.clone()).unwrap_or_default();
        let keys: Vec<_> =
            tolerations.iter().map(|t| (t.key.clone().unwrap_or_default(), t.toleration_seconds)).collect();
        assert_eq!(
            keys,
            [
                ("node.kubernetes.io/not-ready".to_string(), Some(300)),
                ("node.kubernetes.io/unreachable".into(), Some(300))
            ]
        );
        assert_eq!(created.labels().get("app").map(String::as_str), Some("echo"));
    }

    #[test]
    fn a_slice_lists_the_selected_pods_with_an_ip_ready_as_they_are() {
        let service: Service = serde_json::from_value(json!({
            "metadata": {"name": "echo-svc", "namespace": "default"},
            "spec": {"selector": {"app": "echo"}, "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]}
        }))
        .expect("service");
        let mut other = pod("other-0", "a-0", Some("10.0.0.9"), true);
        other.metadata.labels = Some(BTreeMap::from([("app".into(), "web".into())]));
        let pods = [
            pod("echo-1", "a-1", Some("10.0.0.2"), false),
            pod("echo-0", "a-0", Some("10.0.0.1"), true),
            pod("echo-2", "a-0", None, true),
            other,
        ];
        let slice = serde_json::to_value(desired_slice(&service, &pods).expect("a slice")).expect("json");
        let endpoint = |name: &str, ip: &str, node: &str, ready: bool| {
            json!({"addresses": [ip], "conditions": {"ready": ready, "serving": ready, "terminating": false},
                "nodeName": node, "targetRef": {"kind": "Pod", "namespace": "default", "name": name, "uid": format!("uid-{name}")}})
        };
        assert_eq!(
            slice,
            json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "echo-svc-sim", "namespace": "default", "labels": {
                    "kubernetes.io/service-name": "echo-svc",
                    "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
                "addressType": "IPv4",
                "endpoints": [endpoint("echo-0", "10.0.0.1", "a-0", true), endpoint("echo-1", "10.0.0.2", "a-1", false)],
                "ports": [{"port": 8080, "protocol": "TCP"}]
            })
        );
        let headless: Service =
            serde_json::from_value(json!({"metadata": {"name": "x", "namespace": "default"}, "spec": {}}))
                .expect("service");
        assert_eq!(desired_slice(&headless, &pods), None);
    }
}
