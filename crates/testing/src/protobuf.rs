//! Protobuf answers (`application/vnd.kubernetes.protobuf`) read back as Kubernetes JSON,
//! so a test compares them with the JSON answers object by object.
//!
//! Decoding is k8s-pb's: the messages prost generates from Kubernetes' own
//! `generated.proto`, the same field numbers client-go's generated code reads. The way
//! back to JSON is written out per message below, with Kubernetes' JSON names; it must not
//! share anything with the encoder's tables, since it is the check on them.
//!
//! The JSON follows what k8s-openapi serializes: absent fields are left out, empty
//! repeated fields and maps are left out (protobuf cannot tell them from absent) except
//! the arrays k8s-openapi always writes (`EndpointSlice.endpoints`, `Endpoint.addresses`),
//! and `metadata` is always present. Everything panics with a message on bad input: this
//! is test support.

use std::collections::BTreeMap;

use k8s_pb::api::core::v1 as core;
use k8s_pb::api::discovery::v1 as discovery;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use prost::Message;
use serde_json::{Map, Value};

/// The four bytes before every protobuf object or list.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// An envelope's `apiVersion`, `kind` and `raw` message; panics unless `body` is `k8s\0`
/// followed by a `runtime.Unknown`.
pub fn unwrap_envelope(body: &[u8]) -> (String, String, Vec<u8>) {
    let Some(rest) = body.strip_prefix(MAGIC) else {
        panic!("protobuf envelope does not start with k8s\\0: {:02x?}", &body[..body.len().min(16)]);
    };
    let unknown = decode::<Unknown>("runtime.Unknown", rest);
    let Some(type_meta) = unknown.type_meta else {
        panic!("runtime.Unknown without typeMeta: raw {:02x?}", unknown.raw);
    };
    (type_meta.api_version.unwrap_or_default(), type_meta.kind.unwrap_or_default(), unknown.raw.unwrap_or_default())
}

/// The Kubernetes JSON of `raw`, a `kind` message (Service, Endpoints, Node,
/// EndpointSlice, Status), with `apiVersion` and `kind` set.
pub fn object_json(api_version: &str, kind: &str, raw: &[u8]) -> Value {
    let object = match kind {
        "Service" => decode::<core::Service>(kind, raw).json(),
        "Endpoints" => decode::<core::Endpoints>(kind, raw).json(),
        "Node" => decode::<core::Node>(kind, raw).json(),
        "EndpointSlice" => decode::<discovery::EndpointSlice>(kind, raw).json(),
        "Status" => decode::<meta::Status>(kind, raw).json(),
        _ => panic!("no protobuf message known for kind {kind}"),
    };
    with_type_meta(object, api_version, kind)
}

/// The Kubernetes JSON of `raw`, a `list_kind` message (ServiceList, EndpointsList,
/// NodeList, EndpointSliceList): `apiVersion`, `kind`, `metadata`, and `items` each with
/// the item kind's `apiVersion` and `kind` (the protobuf items carry none), as this
/// project's JSON lists have them.
pub fn list_json(api_version: &str, list_kind: &str, raw: &[u8]) -> Value {
    let (metadata, items) = match list_kind {
        "ServiceList" => list_parts(decode::<core::ServiceList>(list_kind, raw), |l| (l.metadata, l.items)),
        "EndpointsList" => list_parts(decode::<core::EndpointsList>(list_kind, raw), |l| (l.metadata, l.items)),
        "NodeList" => list_parts(decode::<core::NodeList>(list_kind, raw), |l| (l.metadata, l.items)),
        "EndpointSliceList" => {
            list_parts(decode::<discovery::EndpointSliceList>(list_kind, raw), |l| (l.metadata, l.items))
        }
        _ => panic!("no protobuf message known for list kind {list_kind}"),
    };
    let Some(item_kind) = list_kind.strip_suffix("List") else { unreachable!("matched above") };
    let items = items.into_iter().map(|item| with_type_meta(item, api_version, item_kind)).collect();
    let list = Obj::new().always("metadata", metadata).always("items", Value::Array(items)).done();
    with_type_meta(list, api_version, list_kind)
}

/// The events of a `;stream=watch` body: each frame a 4-byte big-endian length and a
/// `WatchEvent { type = 1, object = 2 { raw = 1 } }`, `raw` being a whole envelope.
pub fn watch_frames(body: &[u8]) -> Vec<(String, Value)> {
    let mut events = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let Some((length, after)) = rest.split_first_chunk::<4>() else {
            panic!("watch stream ends inside a frame length: {rest:02x?}");
        };
        let length = u32::from_be_bytes(*length) as usize;
        let Some((frame, after)) = after.split_at_checked(length) else {
            panic!("watch frame of {length} bytes, only {} left", after.len());
        };
        let event = decode::<meta::WatchEvent>("WatchEvent", frame);
        let raw = event.object.and_then(|object| object.raw).unwrap_or_default();
        let (api_version, kind, message) = unwrap_envelope(&raw);
        events.push((event.r#type.unwrap_or_default(), object_json(&api_version, &kind, &message)));
        rest = after;
    }
    events
}

fn decode<M: Message + Default>(what: &str, raw: &[u8]) -> M {
    M::decode(raw).unwrap_or_else(|error| panic!("not a protobuf {what}: {error}; bytes {raw:02x?}"))
}

fn list_parts<L, T: Json>(list: L, parts: impl FnOnce(L) -> (Option<meta::ListMeta>, Vec<T>)) -> (Value, Vec<Value>) {
    let (metadata, items) = parts(list);
    (metadata.unwrap_or_default().json(), items.iter().map(Json::json).collect())
}

fn with_type_meta(mut object: Value, api_version: &str, kind: &str) -> Value {
    if let Value::Object(members) = &mut object {
        members.insert("apiVersion".to_owned(), api_version.into());
        members.insert("kind".to_owned(), kind.into());
    }
    object
}

/// A decoded message as Kubernetes JSON.
trait Json {
    fn json(&self) -> Value;
}

/// A JSON object built member by member, leaving out what the message does not have.
struct Obj(Map<String, Value>);

impl Obj {
    fn new() -> Self {
        Self(Map::new())
    }

    fn always(mut self, key: &str, value: Value) -> Self {
        self.0.insert(key.to_owned(), value);
        self
    }

    fn some(self, key: &str, value: Option<Value>) -> Self {
        match value {
            Some(value) => self.always(key, value),
            None => self,
        }
    }

    fn string(self, key: &str, value: &Option<String>) -> Self {
        self.some(key, value.clone().map(Value::String))
    }

    fn bool(self, key: &str, value: &Option<bool>) -> Self {
        self.some(key, value.map(Value::Bool))
    }

    fn int<I: Into<i64> + Copy>(self, key: &str, value: &Option<I>) -> Self {
        self.some(key, value.map(|int| Value::from(int.into())))
    }

    fn time(self, key: &str, value: &Option<meta::Time>) -> Self {
        self.some(key, value.as_ref().map(|time| time_json(time.seconds, time.nanos)))
    }

    fn object<T: Json>(self, key: &str, value: &Option<T>) -> Self {
        self.some(key, value.as_ref().map(Json::json))
    }

    fn strings(self, key: &str, values: &[String]) -> Self {
        let present = !values.is_empty();
        self.some(key, present.then(|| values.iter().cloned().map(Value::String).collect()))
    }

    fn objects<T: Json>(self, key: &str, values: &[T]) -> Self {
        let present = !values.is_empty();
        self.some(key, present.then(|| values.iter().map(Json::json).collect()))
    }

    fn labels(self, key: &str, map: &BTreeMap<String, String>) -> Self {
        let present = !map.is_empty();
        self.some(key, present.then(|| map.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect()))
    }

    fn quantities(self, key: &str, map: &BTreeMap<String, Quantity>) -> Self {
        let present = !map.is_empty();
        self.some(key, present.then(|| map.iter().map(|(k, v)| (k.clone(), v.json())).collect()))
    }

    fn done(self) -> Value {
        Value::Object(self.0)
    }
}

/// metav1.Time's JSON: RFC 3339 in UTC, whole seconds. Go drops `nanos` here; they are
/// kept as a fraction instead, so an encoder writing any shows up in a comparison.
fn time_json(seconds: Option<i64>, nanos: Option<i32>) -> Value {
    let seconds = seconds.unwrap_or_default();
    let nanos = nanos.unwrap_or_default();
    let time = jiff::Timestamp::new(seconds, nanos)
        .unwrap_or_else(|error| panic!("metav1.Time {seconds}s {nanos}ns out of range: {error}"));
    let format = if nanos == 0 { "%Y-%m-%dT%H:%M:%SZ" } else { "%Y-%m-%dT%H:%M:%S%.fZ" };
    Value::String(time.strftime(format).to_string())
}

impl Json for IntOrString {
    fn json(&self) -> Value {
        match self.r#type.unwrap_or_default() {
            0 => Value::from(self.int_val.unwrap_or_default()),
            1 => Value::String(self.str_val.clone().unwrap_or_default()),
            other => panic!("IntOrString of type {other}: {self:?}"),
        }
    }
}

impl Json for Quantity {
    fn json(&self) -> Value {
        Value::String(self.string.clone().unwrap_or_default())
    }
}

impl Json for meta::FieldsV1 {
    fn json(&self) -> Value {
        let raw = self.raw.as_deref().unwrap_or_default();
        serde_json::from_slice(raw).unwrap_or_else(|error| panic!("FieldsV1 raw is not JSON ({error}): {raw:02x?}"))
    }
}

// ---- meta/v1 ----

impl Json for meta::ObjectMeta {
    fn json(&self) -> Value {
        Obj::new()
            .string("name", &self.name)
            .string("generateName", &self.generate_name)
            .string("namespace", &self.namespace)
            .string("selfLink", &self.self_link)
            .string("uid", &self.uid)
            .string("resourceVersion", &self.resource_version)
            .int("generation", &self.generation)
            .time("creationTimestamp", &self.creation_timestamp)
            .time("deletionTimestamp", &self.deletion_timestamp)
            .int("deletionGracePeriodSeconds", &self.deletion_grace_period_seconds)
            .labels("labels", &self.labels)
            .labels("annotations", &self.annotations)
            .objects("ownerReferences", &self.owner_references)
            .strings("finalizers", &self.finalizers)
            .objects("managedFields", &self.managed_fields)
            .done()
    }
}

impl Json for meta::OwnerReference {
    fn json(&self) -> Value {
        Obj::new()
            .string("apiVersion", &self.api_version)
            .string("kind", &self.kind)
            .string("name", &self.name)
            .string("uid", &self.uid)
            .bool("controller", &self.controller)
            .bool("blockOwnerDeletion", &self.block_owner_deletion)
            .done()
    }
}

impl Json for meta::ManagedFieldsEntry {
    fn json(&self) -> Value {
        Obj::new()
            .string("manager", &self.manager)
            .string("operation", &self.operation)
            .string("apiVersion", &self.api_version)
            .time("time", &self.time)
            .string("fieldsType", &self.fields_type)
            .object("fieldsV1", &self.fields_v1)
            .string("subresource", &self.subresource)
            .done()
    }
}

impl Json for meta::ListMeta {
    fn json(&self) -> Value {
        Obj::new()
            .string("selfLink", &self.self_link)
            .string("resourceVersion", &self.resource_version)
            .string("continue", &self.r#continue)
            .int("remainingItemCount", &self.remaining_item_count)
            .done()
    }
}

impl Json for meta::Condition {
    fn json(&self) -> Value {
        Obj::new()
            .string("type", &self.r#type)
            .string("status", &self.status)
            .int("observedGeneration", &self.observed_generation)
            .time("lastTransitionTime", &self.last_transition_time)
            .string("reason", &self.reason)
            .string("message", &self.message)
            .done()
    }
}

impl Json for meta::Status {
    fn json(&self) -> Value {
        Obj::new()
            .always("metadata", self.metadata.clone().unwrap_or_default().json())
            .string("status", &self.status)
            .string("message", &self.message)
            .string("reason", &self.reason)
            .object("details", &self.details)
            .int("code", &self.code)
            .done()
    }
}

impl Json for meta::StatusDetails {
    fn json(&self) -> Value {
        Obj::new()
            .string("name", &self.name)
            .string("group", &self.group)
            .string("kind", &self.kind)
            .string("uid", &self.uid)
            .objects("causes", &self.causes)
            .int("retryAfterSeconds", &self.retry_after_seconds)
            .done()
    }
}

impl Json for meta::StatusCause {
    fn json(&self) -> Value {
        Obj::new().string("reason", &self.reason).string("message", &self.message).string("field", &self.field).done()
    }
}

/// The kinds' `metadata`, which Go and k8s-openapi always write.
fn object_meta(metadata: &Option<meta::ObjectMeta>) -> Value {
    metadata.clone().unwrap_or_default().json()
}

// ---- core/v1 ----

impl Json for core::ObjectReference {
    fn json(&self) -> Value {
        Obj::new()
            .string("kind", &self.kind)
            .string("namespace", &self.namespace)
            .string("name", &self.name)
            .string("uid", &self.uid)
            .string("apiVersion", &self.api_version)
            .string("resourceVersion", &self.resource_version)
            .string("fieldPath", &self.field_path)
            .done()
    }
}

impl Json for core::Service {
    fn json(&self) -> Value {
        Obj::new()
            .always("metadata", object_meta(&self.metadata))
            .object("spec", &self.spec)
            .object("status", &self.status)
            .done()
    }
}

impl Json for core::ServiceSpec {
    fn json(&self) -> Value {
        Obj::new()
            .objects("ports", &self.ports)
            .labels("selector", &self.selector)
            .string("clusterIP", &self.cluster_ip)
            .strings("clusterIPs", &self.cluster_ips)
            .string("type", &self.r#type)
            .strings("externalIPs", &self.external_ips)
            .string("sessionAffinity", &self.session_affinity)
            .string("loadBalancerIP", &self.load_balancer_ip)
            .strings("loadBalancerSourceRanges", &self.load_balancer_source_ranges)
            .string("externalName", &self.external_name)
            .string("externalTrafficPolicy", &self.external_traffic_policy)
            .int("healthCheckNodePort", &self.health_check_node_port)
            .bool("publishNotReadyAddresses", &self.publish_not_ready_addresses)
            .object("sessionAffinityConfig", &self.session_affinity_config)
            .strings("ipFamilies", &self.ip_families)
            .string("ipFamilyPolicy", &self.ip_family_policy)
            .bool("allocateLoadBalancerNodePorts", &self.allocate_load_balancer_node_ports)
            .string("loadBalancerClass", &self.load_balancer_class)
            .string("internalTrafficPolicy", &self.internal_traffic_policy)
            .string("trafficDistribution", &self.traffic_distribution)
            .done()
    }
}

impl Json for core::ServicePort {
    fn json(&self) -> Value {
        Obj::new()
            .string("name", &self.name)
            .string("protocol", &self.protocol)
            .string("appProtocol", &self.app_protocol)
            .int("port", &self.port)
            .object("targetPort", &self.target_port)
            .int("nodePort", &self.node_port)
            .done()
    }
}

impl Json for core::SessionAffinityConfig {
    fn json(&self) -> Value {
        Obj::new().object("clientIP", &self.client_ip).done()
    }
}

impl Json for core::ClientIpConfig {
    fn json(&self) -> Value {
        Obj::new().int("timeoutSeconds", &self.timeout_seconds).done()
    }
}

impl Json for core::ServiceStatus {
    fn json(&self) -> Value {
        Obj::new().object("loadBalancer", &self.load_balancer).objects("conditions", &self.conditions).done()
    }
}

impl Json for core::LoadBalancerStatus {
    fn json(&self) -> Value {
        Obj::new().objects("ingress", &self.ingress).done()
    }
}

impl Json for core::LoadBalancerIngress {
    fn json(&self) -> Value {
        Obj::new()
            .string("ip", &self.ip)
            .string("hostname", &self.hostname)
            .string("ipMode", &self.ip_mode)
            .objects("ports", &self.ports)
            .done()
    }
}

impl Json for core::PortStatus {
    fn json(&self) -> Value {
        Obj::new().int("port", &self.port).string("protocol", &self.protocol).string("error", &self.error).done()
    }
}

impl Json for core::Endpoints {
    fn json(&self) -> Value {
        Obj::new().always("metadata", object_meta(&self.metadata)).objects("subsets", &self.subsets).done()
    }
}

impl Json for core::EndpointSubset {
    fn json(&self) -> Value {
        Obj::new()
            .objects("addresses", &self.addresses)
            .objects("notReadyAddresses", &self.not_ready_addresses)
            .objects("ports", &self.ports)
            .done()
    }
}

impl Json for core::EndpointAddress {
    fn json(&self) -> Value {
        Obj::new()
            .string("ip", &self.ip)
            .string("hostname", &self.hostname)
            .string("nodeName", &self.node_name)
            .object("targetRef", &self.target_ref)
            .done()
    }
}

impl Json for core::EndpointPort {
    fn json(&self) -> Value {
        Obj::new()
            .string("name", &self.name)
            .int("port", &self.port)
            .string("protocol", &self.protocol)
            .string("appProtocol", &self.app_protocol)
            .done()
    }
}

impl Json for core::Node {
    fn json(&self) -> Value {
        Obj::new()
            .always("metadata", object_meta(&self.metadata))
            .object("spec", &self.spec)
            .object("status", &self.status)
            .done()
    }
}

impl Json for core::NodeSpec {
    fn json(&self) -> Value {
        Obj::new()
            .string("podCIDR", &self.pod_cidr)
            .strings("podCIDRs", &self.pod_cid_rs)
            .string("providerID", &self.provider_id)
            .bool("unschedulable", &self.unschedulable)
            .objects("taints", &self.taints)
            .object("configSource", &self.config_source)
            .string("externalID", &self.external_id)
            .done()
    }
}

impl Json for core::Taint {
    fn json(&self) -> Value {
        Obj::new()
            .string("key", &self.key)
            .string("value", &self.value)
            .string("effect", &self.effect)
            .time("timeAdded", &self.time_added)
            .done()
    }
}

impl Json for core::NodeConfigSource {
    fn json(&self) -> Value {
        Obj::new().object("configMap", &self.config_map).done()
    }
}

impl Json for core::ConfigMapNodeConfigSource {
    fn json(&self) -> Value {
        Obj::new()
            .string("namespace", &self.namespace)
            .string("name", &self.name)
            .string("uid", &self.uid)
            .string("resourceVersion", &self.resource_version)
            .string("kubeletConfigKey", &self.kubelet_config_key)
            .done()
    }
}

impl Json for core::NodeStatus {
    fn json(&self) -> Value {
        Obj::new()
            .quantities("capacity", &self.capacity)
            .quantities("allocatable", &self.allocatable)
            .string("phase", &self.phase)
            .objects("conditions", &self.conditions)
            .objects("addresses", &self.addresses)
            .object("daemonEndpoints", &self.daemon_endpoints)
            .object("nodeInfo", &self.node_info)
            .objects("images", &self.images)
            .strings("volumesInUse", &self.volumes_in_use)
            .objects("volumesAttached", &self.volumes_attached)
            .object("config", &self.config)
            .objects("runtimeHandlers", &self.runtime_handlers)
            .object("features", &self.features)
            .strings("declaredFeatures", &self.declared_features)
            .done()
    }
}

impl Json for core::NodeCondition {
    fn json(&self) -> Value {
        Obj::new()
            .string("type", &self.r#type)
            .string("status", &self.status)
            .time("lastHeartbeatTime", &self.last_heartbeat_time)
            .time("lastTransitionTime", &self.last_transition_time)
            .string("reason", &self.reason)
            .string("message", &self.message)
            .done()
    }
}

impl Json for core::NodeAddress {
    fn json(&self) -> Value {
        Obj::new().string("type", &self.r#type).string("address", &self.address).done()
    }
}

impl Json for core::NodeDaemonEndpoints {
    fn json(&self) -> Value {
        Obj::new().object("kubeletEndpoint", &self.kubelet_endpoint).done()
    }
}

impl Json for core::DaemonEndpoint {
    fn json(&self) -> Value {
        // Go's JSON tag is `Port`, capitalised
        Obj::new().int("Port", &self.port).done()
    }
}

impl Json for core::NodeSystemInfo {
    fn json(&self) -> Value {
        Obj::new()
            .string("machineID", &self.machine_id)
            .string("systemUUID", &self.system_uuid)
            .string("bootID", &self.boot_id)
            .string("kernelVersion", &self.kernel_version)
            .string("osImage", &self.os_image)
            .string("containerRuntimeVersion", &self.container_runtime_version)
            .string("kubeletVersion", &self.kubelet_version)
            .string("kubeProxyVersion", &self.kube_proxy_version)
            .string("operatingSystem", &self.operating_system)
            .string("architecture", &self.architecture)
            .object("swap", &self.swap)
            .done()
    }
}

impl Json for core::NodeSwapStatus {
    fn json(&self) -> Value {
        Obj::new().int("capacity", &self.capacity).done()
    }
}

impl Json for core::ContainerImage {
    fn json(&self) -> Value {
        Obj::new().strings("names", &self.names).int("sizeBytes", &self.size_bytes).done()
    }
}

impl Json for core::AttachedVolume {
    fn json(&self) -> Value {
        Obj::new().string("name", &self.name).string("devicePath", &self.device_path).done()
    }
}

impl Json for core::NodeConfigStatus {
    fn json(&self) -> Value {
        Obj::new()
            .object("assigned", &self.assigned)
            .object("active", &self.active)
            .object("lastKnownGood", &self.last_known_good)
            .string("error", &self.error)
            .done()
    }
}

impl Json for core::NodeRuntimeHandler {
    fn json(&self) -> Value {
        Obj::new().string("name", &self.name).object("features", &self.features).done()
    }
}

impl Json for core::NodeRuntimeHandlerFeatures {
    fn json(&self) -> Value {
        Obj::new()
            .bool("recursiveReadOnlyMounts", &self.recursive_read_only_mounts)
            .bool("userNamespaces", &self.user_namespaces)
            .done()
    }
}

impl Json for core::NodeFeatures {
    fn json(&self) -> Value {
        Obj::new().bool("supplementalGroupsPolicy", &self.supplemental_groups_policy).done()
    }
}

// ---- discovery.k8s.io/v1 ----

impl Json for discovery::EndpointSlice {
    fn json(&self) -> Value {
        Obj::new()
            .always("metadata", object_meta(&self.metadata))
            .string("addressType", &self.address_type)
            .always("endpoints", self.endpoints.iter().map(Json::json).collect())
            .objects("ports", &self.ports)
            .done()
    }
}

impl Json for discovery::Endpoint {
    fn json(&self) -> Value {
        Obj::new()
            .always("addresses", self.addresses.iter().cloned().map(Value::String).collect())
            .object("conditions", &self.conditions)
            .string("hostname", &self.hostname)
            .object("targetRef", &self.target_ref)
            .labels("deprecatedTopology", &self.deprecated_topology)
            .string("nodeName", &self.node_name)
            .string("zone", &self.zone)
            .object("hints", &self.hints)
            .done()
    }
}

impl Json for discovery::EndpointConditions {
    fn json(&self) -> Value {
        Obj::new()
            .bool("ready", &self.ready)
            .bool("serving", &self.serving)
            .bool("terminating", &self.terminating)
            .done()
    }
}

impl Json for discovery::EndpointHints {
    fn json(&self) -> Value {
        Obj::new().objects("forZones", &self.for_zones).objects("forNodes", &self.for_nodes).done()
    }
}

impl Json for discovery::ForZone {
    fn json(&self) -> Value {
        Obj::new().string("name", &self.name).done()
    }
}

impl Json for discovery::ForNode {
    fn json(&self) -> Value {
        Obj::new().string("name", &self.name).done()
    }
}

impl Json for discovery::EndpointPort {
    fn json(&self) -> Value {
        Obj::new()
            .string("name", &self.name)
            .string("protocol", &self.protocol)
            .int("port", &self.port)
            .string("appProtocol", &self.app_protocol)
            .done()
    }
}

/// `value` without empty maps, empty lists and nulls (recursively, the root kept): what a
/// JSON answer and its protobuf twin are compared as. Protobuf cannot tell an empty map or
/// list from an absent one, and client-go's types decode both alike, so
/// `"annotations": {}` in JSON and nothing in protobuf are the same answer.
pub fn without_empty(value: &Value) -> Value {
    fn empty(v: &Value) -> bool {
        v.is_null() || v.as_object().is_some_and(|o| o.is_empty()) || v.as_array().is_some_and(|a| a.is_empty())
    }
    match value {
        Value::Object(members) => Value::Object(
            members.iter().map(|(k, v)| (k.clone(), without_empty(v))).filter(|(_, v)| !empty(v)).collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_empty).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The watch ERROR frame of kubernetes/kubernetes#108071's report, its head as
    /// quoted there and a `Status` message completing it.
    #[test]
    fn reads_a_watch_error_frame() {
        let status = meta::Status {
            metadata: Some(meta::ListMeta::default()),
            status: Some("Failure".into()),
            message: Some("too old resource version: 1 (2)".into()),
            reason: Some("Expired".into()),
            details: None,
            code: Some(410),
        };
        let raw = status.encode_to_vec();
        let unknown = Unknown {
            type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
                api_version: Some("v1".into()),
                kind: Some("Status".into()),
            }),
            raw: Some(raw),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut envelope = MAGIC.to_vec();
        envelope.extend(unknown.encode_to_vec());
        let event = meta::WatchEvent {
            r#type: Some("ERROR".into()),
            object: Some(k8s_pb::apimachinery::pkg::runtime::RawExtension { raw: Some(envelope) }),
        };
        let frame = event.encode_to_vec();
        let mut body = (frame.len() as u32).to_be_bytes().to_vec();
        body.extend(&frame);
        body.extend((frame.len() as u32).to_be_bytes());
        body.extend(&frame);
        // the layout of the frame: type, then object.raw holding the envelope
        assert_eq!(&body[4..33], b"\x0a\x05ERROR\x12\x52\x0a\x50k8s\0\x0a\x0c\x0a\x02v1\x12\x06Status");

        let expected = serde_json::json!({
            "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
            "message": "too old resource version: 1 (2)", "reason": "Expired", "code": 410,
        });
        assert_eq!(watch_frames(&body), vec![("ERROR".to_owned(), expected.clone()), ("ERROR".to_owned(), expected)]);
    }

    #[test]
    fn reads_a_list() {
        let list = core::ServiceList {
            metadata: Some(meta::ListMeta { resource_version: Some("7".into()), ..Default::default() }),
            items: vec![core::Service {
                metadata: Some(meta::ObjectMeta { name: Some("web".into()), ..Default::default() }),
                spec: Some(core::ServiceSpec {
                    ports: vec![core::ServicePort {
                        port: Some(80),
                        target_port: Some(IntOrString {
                            r#type: Some(1),
                            int_val: Some(0),
                            str_val: Some("http".into()),
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                status: None,
            }],
        };
        assert_eq!(
            list_json("v1", "ServiceList", &list.encode_to_vec()),
            serde_json::json!({
                "apiVersion": "v1", "kind": "ServiceList", "metadata": {"resourceVersion": "7"},
                "items": [{
                    "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                    "spec": {"ports": [{"port": 80, "targetPort": "http"}]},
                }],
            })
        );
    }

    #[test]
    fn times_are_rfc3339_seconds_in_utc() {
        assert_eq!(time_json(Some(1_704_164_645), Some(0)), "2024-01-02T03:04:05Z");
        assert_eq!(time_json(Some(-1), None), "1969-12-31T23:59:59Z");
        // nanos Go would drop stay visible
        assert_eq!(time_json(Some(0), Some(500_000_000)), "1970-01-01T00:00:00.5Z");
    }

    #[test]
    #[should_panic(expected = "does not start with k8s")]
    fn a_body_without_magic_is_refused() {
        unwrap_envelope(b"{\"kind\":\"Status\"}");
    }
}
