//! The `default/kubernetes` rewrite: an edge node reaches the apiserver through a local
//! cache, announced by two annotations on the apiserver's own Endpoints/EndpointSlice.
//! A wrapper running in-cluster serves that object as the single local address instead,
//! so pods on the node keep talking to "the apiserver" while the cloud link is down.
//! Malformed annotations mean no rewrite: the object is served as the upstream sent it.

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

    /// The local endpoint announced on a slice of `default/kubernetes`, if any.
    pub fn for_slice(slice: &EndpointSlice) -> Option<Self> {
        let meta = &slice.metadata;
        let is_apiserver = meta.namespace.as_deref() == Some(keys::KUBERNETES_SERVICE_NAMESPACE)
            && meta.labels.as_ref().and_then(|l| l.get(keys::SERVICE_NAME_LABEL)).map(String::as_str)
                == Some(keys::KUBERNETES_SERVICE_NAME);
        if is_apiserver { Self::announced(meta) } else { None }
    }

    fn announced(meta: &ObjectMeta) -> Option<Self> {
        let annotations = meta.annotations.as_ref()?;
        let ip = annotations.get(keys::LOCAL_ENDPOINT_ANNOTATION)?.parse().ok()?;
        let port: i32 = annotations.get(keys::LOCAL_PORT_ANNOTATION)?.parse().ok()?;
        (1..=65535).contains(&port).then_some(Self { ip, port })
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
