//! Object builders shared by the topology tests (one place, not copied per test module).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Service};
use k8s_openapi::api::discovery::v1::{self as discovery, EndpointConditions, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::prune::Labels;
use crate::keys;

pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn meta(namespace: &str, name: &str) -> ObjectMeta {
    ObjectMeta { namespace: Some(namespace.into()), name: Some(name.into()), ..Default::default() }
}

/// An endpoint: its address, node, and `conditions.ready` (`None` = unset, meaning ready).
#[derive(Clone, Copy, Debug)]
pub struct Ep<'a> {
    pub ip: &'a str,
    pub node: Option<&'a str>,
    pub ready: Option<bool>,
}

pub fn ep<'a>(ip: &'a str, node: &'a str) -> Ep<'a> {
    Ep { ip, node: Some(node), ready: Some(true) }
}

pub fn not_ready<'a>(ip: &'a str, node: &'a str) -> Ep<'a> {
    Ep { ip, node: Some(node), ready: Some(false) }
}

pub fn endpoint(e: Ep<'_>) -> discovery::Endpoint {
    discovery::Endpoint {
        addresses: vec![e.ip.to_string()],
        node_name: e.node.map(str::to_string),
        conditions: Some(EndpointConditions { ready: e.ready, serving: e.ready, terminating: None }),
        ..Default::default()
    }
}

/// A slice of `service` (by label; `None` = no label) named `name`.
pub fn slice(namespace: &str, name: &str, service: Option<&str>, eps: &[Ep<'_>]) -> EndpointSlice {
    let mut metadata = meta(namespace, name);
    if let Some(service) = service {
        metadata.labels = Some(BTreeMap::from([(keys::SERVICE_NAME_LABEL.to_string(), service.to_string())]));
    }
    EndpointSlice {
        metadata,
        address_type: "IPv4".into(),
        endpoints: eps.iter().map(|e| endpoint(*e)).collect(),
        ports: Some(vec![discovery::EndpointPort {
            name: Some("http".into()),
            port: Some(8080),
            protocol: Some("TCP".into()),
            app_protocol: None,
        }]),
    }
}

pub fn address(ip: &str, node: Option<&str>) -> EndpointAddress {
    EndpointAddress { ip: ip.into(), node_name: node.map(str::to_string), ..Default::default() }
}

/// Core Endpoints; each subset is (ready addresses, not-ready addresses).
pub fn endpoints(namespace: &str, name: &str, subsets: &[(&[Ep<'_>], &[Ep<'_>])]) -> Endpoints {
    let list = |eps: &[Ep<'_>]| (!eps.is_empty()).then(|| eps.iter().map(|e| address(e.ip, e.node)).collect());
    Endpoints {
        metadata: meta(namespace, name),
        subsets: Some(
            subsets
                .iter()
                .map(|(ready, not_ready)| EndpointSubset {
                    addresses: list(ready),
                    not_ready_addresses: list(not_ready),
                    ports: Some(vec![EndpointPort { name: Some("http".into()), port: 8080, ..Default::default() }]),
                })
                .collect(),
        ),
    }
}

pub fn service<K: ToString, V: ToString>(
    namespace: &str,
    name: &str,
    annotations: impl IntoIterator<Item = (K, V)>,
) -> Service {
    let mut metadata = meta(namespace, name);
    let annotations: BTreeMap<String, String> =
        annotations.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    if !annotations.is_empty() {
        metadata.annotations = Some(annotations);
    }
    Service { metadata, ..Default::default() }
}

/// `topologyKeys` in SuperEdge (any-key) mode.
pub fn any_keys(keys_json: &str) -> Vec<(&'static str, String)> {
    vec![(keys::TOPOLOGY_KEYS_ANNOTATION, keys_json.to_string())]
}

/// `topologyKeys` in ordered mode.
pub fn ordered_keys(keys_json: &str) -> Vec<(&'static str, String)> {
    vec![(keys::TOPOLOGY_KEYS_ANNOTATION, keys_json.to_string()), (keys::TOPOLOGY_MODE_ANNOTATION, "ordered".into())]
}

/// IPs of a slice's endpoints, in order.
pub fn slice_ips(slice: &EndpointSlice) -> Vec<String> {
    slice.endpoints.iter().flat_map(|e| e.addresses.clone()).collect()
}

/// Per subset: (ready IPs, not-ready IPs).
pub fn endpoints_ips(endpoints: &Endpoints) -> Vec<(Vec<String>, Vec<String>)> {
    let ips = |list: &Option<Vec<EndpointAddress>>| list.iter().flatten().map(|a| a.ip.clone()).collect();
    endpoints.subsets.iter().flatten().map(|s| (ips(&s.addresses), ips(&s.not_ready_addresses))).collect()
}
