//! The `default/kubernetes` rewrite: an edge node reaches the apiserver through a local
//! cache, announced by two annotations on the apiserver's own Endpoints/EndpointSlice.
//! A wrapper running in-cluster serves that object as the single local address instead,
//! so pods on the node keep talking to "the apiserver" while the cloud link is down.
//! Malformed annotations mean no rewrite: the object is served as the upstream sent it.
//!
//! Where a slice's announcement comes from ([`LocalEndpoint::for_slice`]): the slice's own
//! annotations when they announce a valid endpoint, otherwise those of the Endpoints
//! `default/kubernetes`. SuperEdge read only the slice's own annotations
//! (`genLocalEndpointSliceV1`), so wherever SuperEdge rewrote a slice we serve the same;
//! but its users annotate the Endpoints, since the apiserver's reconciler replaces the
//! slice `kubernetes` whole on each change and keeps no annotation there, so a slice
//! without one follows the Endpoints. Never anything but `default/kubernetes`.
//!
//! Only a node-local address is taken (loopback, or link-local such as SuperEdge's
//! lite-apiserver at 169.254.20.11): a local cache is on the node by definition, and an
//! annotation is easier to write than the apiserver's own endpoints (whoever may update
//! Endpoints in `default` can set it), so a routable address there would hand every pod's
//! apiserver traffic, service-account tokens included, to whatever host it names.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{EndpointAddress, EndpointPort, EndpointSubset, Endpoints};
use k8s_openapi::api::discovery::v1::{self as discovery, EndpointConditions, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::keys;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalEndpoint {
    pub ip: IpAddr,
    pub port: i32,
}

impl LocalEndpoint {
    /// The local endpoint announced on `default/kubernetes` Endpoints, if any.
    pub fn for_endpoints(endpoints: &Endpoints) -> Option<Self> {
        let meta = &endpoints.metadata;
        let is_apiserver = meta.namespace.as_deref() == Some(keys::KUBERNETES_SERVICE_NAMESPACE)
            && meta.name.as_deref() == Some(keys::KUBERNETES_SERVICE_NAME);
        if is_apiserver { Self::announced(meta) } else { None }
    }

    /// What a slice of `default/kubernetes` is served as: its own announcement when valid,
    /// else the one on `endpoints` when that is the Endpoints `default/kubernetes` (see
    /// the module comment). `None` for any other slice.
    pub fn for_slice(slice: &EndpointSlice, endpoints: Option<&Endpoints>) -> Option<Self> {
        if !is_apiserver_slice(slice) {
            return None;
        }
        let own = Self::announced(&slice.metadata);
        let of_endpoints = endpoints.and_then(Self::for_endpoints);
        Self::slice_precedence(own.as_ref(), of_endpoints.as_ref()).cloned()
    }

    /// The local endpoint announced on a slice of `default/kubernetes` itself, if any.
    pub fn on_slice(slice: &EndpointSlice) -> Option<Self> {
        if is_apiserver_slice(slice) { Self::announced(&slice.metadata) } else { None }
    }

    /// The precedence rule alone, for callers that keep both announcements already
    /// parsed: the slice's own, else the Endpoints'.
    pub fn slice_precedence<'a>(own: Option<&'a Self>, of_endpoints: Option<&'a Self>) -> Option<&'a Self> {
        own.or(of_endpoints)
    }

    fn announced(meta: &ObjectMeta) -> Option<Self> {
        let annotations = meta.annotations.as_ref()?;
        let ip: IpAddr = annotations.get(keys::LOCAL_ENDPOINT_ANNOTATION)?.parse().ok()?;
        let port: i32 = annotations.get(keys::LOCAL_PORT_ANNOTATION)?.parse().ok()?;
        ((1..=65535).contains(&port) && is_node_local(ip)).then_some(Self { ip, port })
    }

    pub fn rewrite_endpoints(&self, endpoints: &Endpoints) -> Endpoints {
        Endpoints {
            metadata: endpoints.metadata.clone(),
            subsets: Some(vec![EndpointSubset {
                addresses: Some(vec![EndpointAddress { ip: self.ip.to_string(), ..Default::default() }]),
                not_ready_addresses: None,
                ports: Some(vec![EndpointPort {
                    name: Some(keys::KUBERNETES_SERVICE_PORT_NAME.to_string()),
                    port: self.port,
                    protocol: Some("TCP".to_string()),
                    app_protocol: None,
                }]),
            }]),
        }
    }

    pub fn rewrite_slice(&self, slice: &EndpointSlice) -> EndpointSlice {
        EndpointSlice {
            metadata: slice.metadata.clone(),
            address_type: if self.ip.is_ipv4() { "IPv4" } else { "IPv6" }.to_string(),
            endpoints: vec![discovery::Endpoint {
                addresses: vec![self.ip.to_string()],
                conditions: Some(EndpointConditions {
                    ready: Some(true),
                    serving: Some(true),
                    terminating: Some(false),
                }),
                ..Default::default()
            }],
            ports: Some(vec![discovery::EndpointPort {
                name: Some(keys::KUBERNETES_SERVICE_PORT_NAME.to_string()),
                port: Some(self.port),
                protocol: Some("TCP".to_string()),
                app_protocol: None,
            }]),
        }
    }
}

/// A slice of the Service `default/kubernetes`, by its `kubernetes.io/service-name` label
/// (never by the slice's name).
pub fn is_apiserver_slice(slice: &EndpointSlice) -> bool {
    let meta = &slice.metadata;
    meta.namespace.as_deref() == Some(keys::KUBERNETES_SERVICE_NAMESPACE)
        && meta.labels.as_ref().and_then(|l| l.get(keys::SERVICE_NAME_LABEL)).map(String::as_str)
            == Some(keys::KUBERNETES_SERVICE_NAME)
}

/// Loopback or link-local: an address that never leaves the node.
pub fn is_node_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(ip) => ip.is_loopback() || ip.is_link_local(),
        IpAddr::V6(ip) => ip.is_loopback() || ip.is_unicast_link_local(),
    }
}
