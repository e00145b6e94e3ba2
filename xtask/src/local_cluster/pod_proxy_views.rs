//! The per-node views of a cluster the chart is installed in, read through the API
//! server's pod proxy: for each grid-wrapper pod (a hostNetwork DaemonSet pod, its API
//! port on the node's loopback) and each topology-aware Service, the wrapper's
//! `/debug/topology` on its metrics port says which endpoints it keeps and for which unit.

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde_json::Value;

use super::views::table;

/// The annotation a topology-aware Service carries (SuperEdge's).
const TOPOLOGY_ANNOTATION: &str = "topologyKeys";
const WRAPPER_SELECTOR: &str = "app.kubernetes.io/name=grid-wrapper";
/// The chart's default `gridWrapper.metricsPort`, for a pod that does not name its port.
const DEFAULT_METRICS_PORT: i32 = 51007;

/// From one `/debug/topology` answer: the unit the node keeps endpoints of (`key=value`,
/// or what the filter decided) and the kept ready endpoints of its slices, `address@node`.
pub fn kept_endpoints(explanation: &Value) -> (String, Vec<String>) {
    let filter = &explanation["filter"]["endpointSlices"];
    let unit = match filter["sameValueFor"].as_array() {
        Some(pairs) if !pairs.is_empty() => pairs
            .iter()
            .filter_map(|pair| Some(format!("{}={}", pair[0].as_str()?, pair[1].as_str()?)))
            .collect::<Vec<_>>()
            .join(","),
        _ => filter["decision"].as_str().unwrap_or("?").to_string(),
    };
    let mut kept: Vec<String> = explanation["objects"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|object| object["kind"] == "EndpointSlice")
        .flat_map(|object| object["endpoints"].as_array().cloned().unwrap_or_default())
        .filter(|endpoint| endpoint["kept"] == true && endpoint["ready"] == true)
        .map(|endpoint| {
            let address = endpoint["addresses"][0].as_str().unwrap_or("?");
            format!("{address}@{}", endpoint["nodeName"].as_str().unwrap_or("?"))
        })
        .collect();
    kept.sort();
    (unit, kept)
}

/// Prints the table: a row per wrapper pod and topology-aware Service.
pub async fn print(client: &Client) -> Result<()> {
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default().labels(WRAPPER_SELECTOR))
        .await
        .context("listing the grid-wrapper pods")?;
    let services =
        Api::<Service>::all(client.clone()).list(&ListParams::default()).await.context("listing Services")?;
    let mut services: Vec<String> = services
        .iter()
        .filter(|s| s.annotations().contains_key(TOPOLOGY_ANNOTATION))
        .map(|s| format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any()))
        .collect();
    services.sort();
    let mut pods: Vec<&Pod> = pods.items.iter().collect();
    pods.sort_by_key(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()));
    if pods.is_empty() {
        println!("No grid-wrapper pods ({WRAPPER_SELECTOR}): is the chart installed with gridWrapper.enabled?");
        return Ok(());
    }
    let mut rows = Vec::new();
    for pod in pods {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_else(|| "-".into());
        let port = pod
            .spec
            .iter()
            .flat_map(|s| &s.containers)
            .flat_map(|c| c.ports.iter().flatten())
            .find(|p| p.name.as_deref() == Some("metrics"))
            .map_or(DEFAULT_METRICS_PORT, |p| p.container_port);
        for service in &services {
            let path = format!(
                "/api/v1/namespaces/{}/pods/{}:{port}/proxy/debug/topology?service={service}",
                pod.namespace().unwrap_or_default(),
                pod.name_any()
            );
            let answer = match http::Request::get(&path).body(Vec::new()) {
                Ok(request) => client.request_text(request).await.map_err(anyhow::Error::from),
                Err(error) => Err(error.into()),
            };
            let row = match answer.and_then(|text| Ok(serde_json::from_str::<Value>(&text)?)) {
                Ok(explanation) => {
                    let (unit, kept) = kept_endpoints(&explanation);
                    let kept = if kept.is_empty() { "(none ready)".to_string() } else { kept.join(" ") };
                    vec![node.clone(), unit, service.clone(), kept]
                }
                Err(error) => vec![node.clone(), "-".into(), service.clone(), format!("(not answered: {error})")],
            };
            rows.push(row);
        }
    }
    println!("What each node's grid wrapper keeps (its /debug/topology, through the pod proxy):");
    print!("{}", table(&["NODE", "UNIT", "SERVICE", "KEPT READY ENDPOINTS (address@node)"], &rows));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kept_ready_slice_endpoints_and_the_unit_are_read_from_an_explanation() {
        let endpoint = |ip: &str, node: &str, ready: bool, kept: bool| json!({"addresses": [ip], "nodeName": node, "ready": ready, "kept": kept, "rule": "sameUnit", "reason": "r"});
        let explanation = json!({
            "filter": {"endpointSlices": {"decision": "sameValueFor", "sameValueFor": [["zone1", "unit-a"]], "reason": "r"},
                       "endpoints": {"decision": "all", "reason": "r"}},
            "objects": [
                {"kind": "EndpointSlice", "name": "web-1", "endpoints": [
                    endpoint("10.0.0.2", "a-1", true, true), endpoint("10.0.0.1", "a-0", true, true),
                    endpoint("10.0.0.3", "b-0", true, false), endpoint("10.0.0.4", "a-2", false, true)]},
                {"kind": "Endpoints", "name": "web", "endpoints": [endpoint("10.0.0.9", "a-0", true, true)]}
            ]
        });
        assert_eq!(
            kept_endpoints(&explanation),
            ("zone1=unit-a".to_string(), vec!["10.0.0.1@a-0".to_string(), "10.0.0.2@a-1".to_string()])
        );
        let passing = json!({"filter": {"endpointSlices": {"decision": "all", "reason": "r"}}, "objects": []});
        assert_eq!(kept_endpoints(&passing), ("all".to_string(), vec![]));
    }
}
