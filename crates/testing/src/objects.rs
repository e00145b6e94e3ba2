//! Upstream objects as the grid wrapper's tests and benchmarks build them (namespace
//! `ns`): one place, so unit tests, end-to-end tests and benchmarks describe clusters
//! alike. The wrapper's `cache::Object` takes them with `.into()`.

use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::{Value, json};

fn typed<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("fixture is a valid object")
}

pub fn labels_json(pairs: &[(&str, &str)]) -> Value {
    Value::Object(pairs.iter().map(|(k, v)| (k.to_string(), json!(v))).collect())
}

pub fn node_object(name: &str, labels: &[(&str, &str)]) -> Node {
    typed(json!({"metadata": {"name": name, "labels": labels_json(labels)}}))
}

pub fn service_object(name: &str, topology_keys: Option<&str>) -> Service {
    let annotations = topology_keys.map_or(json!({}), |keys| json!({"topologyKeys": keys}));
    typed(json!({
        "metadata": {"name": name, "namespace": "ns", "annotations": annotations},
        "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80, "protocol": "TCP"}], "selector": {"app": name}},
    }))
}

/// A slice of Service `service` with one ready endpoint per `(ip, node)`.
pub fn slice_object(name: &str, service: &str, endpoints: &[(&str, &str)]) -> EndpointSlice {
    let endpoints: Vec<Value> = endpoints
        .iter()
        .map(|(ip, node)| json!({"addresses": [ip], "nodeName": node, "conditions": {"ready": true}}))
        .collect();
    typed(json!({
        "metadata": {"name": name, "namespace": "ns", "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }))
}

/// Core Endpoints of Service `name` with one ready address per `(ip, node)`.
pub fn endpoints_object(name: &str, addresses: &[(&str, &str)]) -> Endpoints {
    let addresses: Vec<Value> = addresses.iter().map(|(ip, node)| json!({"ip": ip, "nodeName": node})).collect();
    typed(json!({
        "metadata": {"name": name, "namespace": "ns"},
        "subsets": [{"addresses": addresses, "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}],
    }))
}

/// The addresses of a served EndpointSlice or Endpoints, in order.
pub fn ips(object: &Value) -> Vec<String> {
    let strings = |v: &Value, key: &str| -> Vec<String> {
        v[key].as_array().into_iter().flatten().filter_map(|a| a["ip"].as_str().map(str::to_string)).collect()
    };
    if let Some(endpoints) = object["endpoints"].as_array() {
        return endpoints
            .iter()
            .flat_map(|e| e["addresses"].as_array().into_iter().flatten())
            .filter_map(|a| a.as_str().map(str::to_string))
            .collect();
    }
    object["subsets"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| [strings(s, "addresses"), strings(s, "notReadyAddresses")].concat())
        .collect()
}
