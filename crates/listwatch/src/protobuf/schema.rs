//! The protobuf messages of the served kinds as data: for each message, its fields' JSON
//! names (Kubernetes' camelCase, as the stored objects spell them), field numbers and
//! kinds, taken from Kubernetes' `generated.proto` (as k8s-pb 0.9.0 carries them,
//! Kubernetes 1.35). [`super::encode`] walks these tables; nothing here encodes.
//!
//! The tables cover every field of every message reachable from core/v1 `Service`,
//! `Endpoints`, `Node`, discovery.k8s.io/v1 `EndpointSlice`, meta/v1 `ListMeta` and
//! `Status`. Each message lists its fields in field-number order, the order Go's
//! generated marshallers write them in, so the encoder writes them as it reads them.
//! A field number here must never be reused for another JSON name: a client decodes
//! the value into whatever field the number means to it.

use FieldKind::{Bool, FieldsV1, Int32, Int64, IntOrString, Map, Msg, Quantity, Str, Time};

/// One protobuf message.
pub(crate) struct Message {
    /// The proto package's short name and the message name, for logs and test failures.
    pub name: &'static str,
    /// In field-number order.
    pub fields: &'static [Field],
}

/// Its name only: the derived form would print every message reachable from it.
impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl Message {
    /// The field the JSON member `json` is written to.
    pub(crate) fn field(&self, json: &str) -> Option<&'static Field> {
        self.fields.iter().find(|field| field.json == json)
    }
}

/// One field of a message.
#[derive(Debug)]
pub(crate) struct Field {
    /// The member's name in the object's Kubernetes JSON.
    pub json: &'static str,
    pub number: u32,
    pub kind: FieldKind,
    /// A JSON array, written as one field per element (proto2 repeated, not packed).
    pub repeated: bool,
}

/// How a JSON value becomes a field's payload.
#[derive(Debug)]
pub(crate) enum FieldKind {
    /// JSON string, length-delimited.
    Str,
    /// JSON boolean, varint 0 or 1.
    Bool,
    /// JSON integer in i32's range, varint (negative values sign-extended to ten bytes).
    Int32,
    /// JSON integer in i64's range, varint (negative values as ten bytes).
    Int64,
    /// JSON object, a nested message.
    Msg(&'static Message),
    /// JSON object of string keys: one `{key = 1, value = 2}` entry message per key, in
    /// key order (Go sorts map keys before writing them).
    Map(&'static FieldKind),
    /// meta/v1 `Time`: an RFC 3339 string in JSON, `{seconds = 1, nanos = 2}` in protobuf
    /// with `nanos` always 0 (`metav1.Time` keeps seconds only on the wire).
    Time,
    /// `intstr.IntOrString`: a JSON number is `{type = 1: 0, intVal = 2, strVal = 3: ""}`,
    /// a JSON string `{type = 1: 1, intVal = 2: 0, strVal = 3}`; Go writes all three.
    IntOrString,
    /// `resource.Quantity`: a JSON string, `{string = 1}` in protobuf.
    Quantity,
    /// meta/v1 `FieldsV1`: a JSON object, `{Raw = 1}` holding its compact JSON text.
    FieldsV1,
}

const fn one(json: &'static str, number: u32, kind: FieldKind) -> Field {
    Field { json, number, kind, repeated: false }
}

const fn many(json: &'static str, number: u32, kind: FieldKind) -> Field {
    Field { json, number, kind, repeated: true }
}

// ---- meta/v1 ----

pub(crate) static OBJECT_META: Message = Message {
    name: "meta/v1 ObjectMeta",
    fields: &[
        one("name", 1, Str),
        one("generateName", 2, Str),
        one("namespace", 3, Str),
        one("selfLink", 4, Str),
        one("uid", 5, Str),
        one("resourceVersion", 6, Str),
        one("generation", 7, Int64),
        one("creationTimestamp", 8, Time),
        one("deletionTimestamp", 9, Time),
        one("deletionGracePeriodSeconds", 10, Int64),
        one("labels", 11, Map(&Str)),
        one("annotations", 12, Map(&Str)),
        many("ownerReferences", 13, Msg(&OWNER_REFERENCE)),
        many("finalizers", 14, Str),
        many("managedFields", 17, Msg(&MANAGED_FIELDS_ENTRY)),
    ],
};

pub(crate) static OWNER_REFERENCE: Message = Message {
    name: "meta/v1 OwnerReference",
    fields: &[
        one("kind", 1, Str),
        one("name", 3, Str),
        one("uid", 4, Str),
        one("apiVersion", 5, Str),
        one("controller", 6, Bool),
        one("blockOwnerDeletion", 7, Bool),
    ],
};

pub(crate) static MANAGED_FIELDS_ENTRY: Message = Message {
    name: "meta/v1 ManagedFieldsEntry",
    fields: &[
        one("manager", 1, Str),
        one("operation", 2, Str),
        one("apiVersion", 3, Str),
        one("time", 4, Time),
        one("fieldsType", 6, Str),
        one("fieldsV1", 7, FieldsV1),
        one("subresource", 8, Str),
    ],
};

pub(crate) static LIST_META: Message = Message {
    name: "meta/v1 ListMeta",
    fields: &[
        one("selfLink", 1, Str),
        one("resourceVersion", 2, Str),
        one("continue", 3, Str),
        one("remainingItemCount", 4, Int64),
    ],
};

pub(crate) static CONDITION: Message = Message {
    name: "meta/v1 Condition",
    fields: &[
        one("type", 1, Str),
        one("status", 2, Str),
        one("observedGeneration", 3, Int64),
        one("lastTransitionTime", 4, Time),
        one("reason", 5, Str),
        one("message", 6, Str),
    ],
};

pub(crate) static STATUS: Message = Message {
    name: "meta/v1 Status",
    fields: &[
        one("metadata", 1, Msg(&LIST_META)),
        one("status", 2, Str),
        one("message", 3, Str),
        one("reason", 4, Str),
        one("details", 5, Msg(&STATUS_DETAILS)),
        one("code", 6, Int32),
    ],
};

pub(crate) static STATUS_DETAILS: Message = Message {
    name: "meta/v1 StatusDetails",
    fields: &[
        one("name", 1, Str),
        one("group", 2, Str),
        one("kind", 3, Str),
        many("causes", 4, Msg(&STATUS_CAUSE)),
        one("retryAfterSeconds", 5, Int32),
        one("uid", 6, Str),
    ],
};

pub(crate) static STATUS_CAUSE: Message = Message {
    name: "meta/v1 StatusCause",
    fields: &[one("reason", 1, Str), one("message", 2, Str), one("field", 3, Str)],
};

// ---- core/v1 shared ----

pub(crate) static OBJECT_REFERENCE: Message = Message {
    name: "core/v1 ObjectReference",
    fields: &[
        one("kind", 1, Str),
        one("namespace", 2, Str),
        one("name", 3, Str),
        one("uid", 4, Str),
        one("apiVersion", 5, Str),
        one("resourceVersion", 6, Str),
        one("fieldPath", 7, Str),
    ],
};

// ---- core/v1 Service ----

pub(crate) static SERVICE: Message = Message {
    name: "core/v1 Service",
    fields: &[
        one("metadata", 1, Msg(&OBJECT_META)),
        one("spec", 2, Msg(&SERVICE_SPEC)),
        one("status", 3, Msg(&SERVICE_STATUS)),
    ],
};

pub(crate) static SERVICE_SPEC: Message = Message {
    name: "core/v1 ServiceSpec",
    fields: &[
        many("ports", 1, Msg(&SERVICE_PORT)),
        one("selector", 2, Map(&Str)),
        one("clusterIP", 3, Str),
        one("type", 4, Str),
        many("externalIPs", 5, Str),
        one("sessionAffinity", 7, Str),
        one("loadBalancerIP", 8, Str),
        many("loadBalancerSourceRanges", 9, Str),
        one("externalName", 10, Str),
        one("externalTrafficPolicy", 11, Str),
        one("healthCheckNodePort", 12, Int32),
        one("publishNotReadyAddresses", 13, Bool),
        one("sessionAffinityConfig", 14, Msg(&SESSION_AFFINITY_CONFIG)),
        one("ipFamilyPolicy", 17, Str),
        many("clusterIPs", 18, Str),
        many("ipFamilies", 19, Str),
        one("allocateLoadBalancerNodePorts", 20, Bool),
        one("loadBalancerClass", 21, Str),
        one("internalTrafficPolicy", 22, Str),
        one("trafficDistribution", 23, Str),
    ],
};

pub(crate) static SERVICE_PORT: Message = Message {
    name: "core/v1 ServicePort",
    fields: &[
        one("name", 1, Str),
        one("protocol", 2, Str),
        one("port", 3, Int32),
        one("targetPort", 4, IntOrString),
        one("nodePort", 5, Int32),
        one("appProtocol", 6, Str),
    ],
};

pub(crate) static SESSION_AFFINITY_CONFIG: Message =
    Message { name: "core/v1 SessionAffinityConfig", fields: &[one("clientIP", 1, Msg(&CLIENT_IP_CONFIG))] };

pub(crate) static CLIENT_IP_CONFIG: Message =
    Message { name: "core/v1 ClientIPConfig", fields: &[one("timeoutSeconds", 1, Int32)] };

pub(crate) static SERVICE_STATUS: Message = Message {
    name: "core/v1 ServiceStatus",
    fields: &[one("loadBalancer", 1, Msg(&LOAD_BALANCER_STATUS)), many("conditions", 2, Msg(&CONDITION))],
};

pub(crate) static LOAD_BALANCER_STATUS: Message =
    Message { name: "core/v1 LoadBalancerStatus", fields: &[many("ingress", 1, Msg(&LOAD_BALANCER_INGRESS))] };

pub(crate) static LOAD_BALANCER_INGRESS: Message = Message {
    name: "core/v1 LoadBalancerIngress",
    fields: &[one("ip", 1, Str), one("hostname", 2, Str), one("ipMode", 3, Str), many("ports", 4, Msg(&PORT_STATUS))],
};

pub(crate) static PORT_STATUS: Message = Message {
    name: "core/v1 PortStatus",
    fields: &[one("port", 1, Int32), one("protocol", 2, Str), one("error", 3, Str)],
};

// ---- core/v1 Endpoints ----

pub(crate) static ENDPOINTS: Message = Message {
    name: "core/v1 Endpoints",
    fields: &[one("metadata", 1, Msg(&OBJECT_META)), many("subsets", 2, Msg(&ENDPOINT_SUBSET))],
};

pub(crate) static ENDPOINT_SUBSET: Message = Message {
    name: "core/v1 EndpointSubset",
    fields: &[
        many("addresses", 1, Msg(&ENDPOINT_ADDRESS)),
        many("notReadyAddresses", 2, Msg(&ENDPOINT_ADDRESS)),
        many("ports", 3, Msg(&CORE_ENDPOINT_PORT)),
    ],
};

pub(crate) static ENDPOINT_ADDRESS: Message = Message {
    name: "core/v1 EndpointAddress",
    fields: &[
        one("ip", 1, Str),
        one("targetRef", 2, Msg(&OBJECT_REFERENCE)),
        one("hostname", 3, Str),
        one("nodeName", 4, Str),
    ],
};

pub(crate) static CORE_ENDPOINT_PORT: Message = Message {
    name: "core/v1 EndpointPort",
    fields: &[one("name", 1, Str), one("port", 2, Int32), one("protocol", 3, Str), one("appProtocol", 4, Str)],
};

// ---- core/v1 Node ----

pub(crate) static NODE: Message = Message {
    name: "core/v1 Node",
    fields: &[
        one("metadata", 1, Msg(&OBJECT_META)),
        one("spec", 2, Msg(&NODE_SPEC)),
        one("status", 3, Msg(&NODE_STATUS)),
    ],
};

pub(crate) static NODE_SPEC: Message = Message {
    name: "core/v1 NodeSpec",
    fields: &[
        one("podCIDR", 1, Str),
        one("externalID", 2, Str),
        one("providerID", 3, Str),
        one("unschedulable", 4, Bool),
        many("taints", 5, Msg(&TAINT)),
        one("configSource", 6, Msg(&NODE_CONFIG_SOURCE)),
        many("podCIDRs", 7, Str),
    ],
};

pub(crate) static TAINT: Message = Message {
    name: "core/v1 Taint",
    fields: &[one("key", 1, Str), one("value", 2, Str), one("effect", 3, Str), one("timeAdded", 4, Time)],
};

pub(crate) static NODE_CONFIG_SOURCE: Message = Message {
    name: "core/v1 NodeConfigSource",
    // field 1 was the removed `configMapRef`
    fields: &[one("configMap", 2, Msg(&CONFIG_MAP_NODE_CONFIG_SOURCE))],
};

pub(crate) static CONFIG_MAP_NODE_CONFIG_SOURCE: Message = Message {
    name: "core/v1 ConfigMapNodeConfigSource",
    fields: &[
        one("namespace", 1, Str),
        one("name", 2, Str),
        one("uid", 3, Str),
        one("resourceVersion", 4, Str),
        one("kubeletConfigKey", 5, Str),
    ],
};

pub(crate) static NODE_STATUS: Message = Message {
    name: "core/v1 NodeStatus",
    fields: &[
        one("capacity", 1, Map(&Quantity)),
        one("allocatable", 2, Map(&Quantity)),
        one("phase", 3, Str),
        many("conditions", 4, Msg(&NODE_CONDITION)),
        many("addresses", 5, Msg(&NODE_ADDRESS)),
        one("daemonEndpoints", 6, Msg(&NODE_DAEMON_ENDPOINTS)),
        one("nodeInfo", 7, Msg(&NODE_SYSTEM_INFO)),
        many("images", 8, Msg(&CONTAINER_IMAGE)),
        many("volumesInUse", 9, Str),
        many("volumesAttached", 10, Msg(&ATTACHED_VOLUME)),
        one("config", 11, Msg(&NODE_CONFIG_STATUS)),
        many("runtimeHandlers", 12, Msg(&NODE_RUNTIME_HANDLER)),
        one("features", 13, Msg(&NODE_FEATURES)),
        // Kubernetes 1.35, newer than the k8s-openapi version the project builds with
        many("declaredFeatures", 14, Str),
    ],
};

pub(crate) static NODE_CONDITION: Message = Message {
    name: "core/v1 NodeCondition",
    fields: &[
        one("type", 1, Str),
        one("status", 2, Str),
        one("lastHeartbeatTime", 3, Time),
        one("lastTransitionTime", 4, Time),
        one("reason", 5, Str),
        one("message", 6, Str),
    ],
};

pub(crate) static NODE_ADDRESS: Message =
    Message { name: "core/v1 NodeAddress", fields: &[one("type", 1, Str), one("address", 2, Str)] };

pub(crate) static NODE_DAEMON_ENDPOINTS: Message =
    Message { name: "core/v1 NodeDaemonEndpoints", fields: &[one("kubeletEndpoint", 1, Msg(&DAEMON_ENDPOINT))] };

pub(crate) static DAEMON_ENDPOINT: Message = Message {
    name: "core/v1 DaemonEndpoint",
    // Go's field is `Port` with JSON tag `Port`: the capital is the JSON name
    fields: &[one("Port", 1, Int32)],
};

pub(crate) static NODE_SYSTEM_INFO: Message = Message {
    name: "core/v1 NodeSystemInfo",
    fields: &[
        one("machineID", 1, Str),
        one("systemUUID", 2, Str),
        one("bootID", 3, Str),
        one("kernelVersion", 4, Str),
        one("osImage", 5, Str),
        one("containerRuntimeVersion", 6, Str),
        one("kubeletVersion", 7, Str),
        one("kubeProxyVersion", 8, Str),
        one("operatingSystem", 9, Str),
        one("architecture", 10, Str),
        one("swap", 11, Msg(&NODE_SWAP_STATUS)),
    ],
};

pub(crate) static NODE_SWAP_STATUS: Message =
    Message { name: "core/v1 NodeSwapStatus", fields: &[one("capacity", 1, Int64)] };

pub(crate) static CONTAINER_IMAGE: Message =
    Message { name: "core/v1 ContainerImage", fields: &[many("names", 1, Str), one("sizeBytes", 2, Int64)] };

pub(crate) static ATTACHED_VOLUME: Message =
    Message { name: "core/v1 AttachedVolume", fields: &[one("name", 1, Str), one("devicePath", 2, Str)] };

pub(crate) static NODE_CONFIG_STATUS: Message = Message {
    name: "core/v1 NodeConfigStatus",
    fields: &[
        one("assigned", 1, Msg(&NODE_CONFIG_SOURCE)),
        one("active", 2, Msg(&NODE_CONFIG_SOURCE)),
        one("lastKnownGood", 3, Msg(&NODE_CONFIG_SOURCE)),
        one("error", 4, Str),
    ],
};

pub(crate) static NODE_RUNTIME_HANDLER: Message = Message {
    name: "core/v1 NodeRuntimeHandler",
    fields: &[one("name", 1, Str), one("features", 2, Msg(&NODE_RUNTIME_HANDLER_FEATURES))],
};

pub(crate) static NODE_RUNTIME_HANDLER_FEATURES: Message = Message {
    name: "core/v1 NodeRuntimeHandlerFeatures",
    fields: &[one("recursiveReadOnlyMounts", 1, Bool), one("userNamespaces", 2, Bool)],
};

pub(crate) static NODE_FEATURES: Message =
    Message { name: "core/v1 NodeFeatures", fields: &[one("supplementalGroupsPolicy", 1, Bool)] };

// ---- discovery.k8s.io/v1 EndpointSlice ----

pub(crate) static ENDPOINT_SLICE: Message = Message {
    name: "discovery/v1 EndpointSlice",
    fields: &[
        one("metadata", 1, Msg(&OBJECT_META)),
        many("endpoints", 2, Msg(&ENDPOINT)),
        many("ports", 3, Msg(&DISCOVERY_ENDPOINT_PORT)),
        // numbered after the fields above, so Go writes it last
        one("addressType", 4, Str),
    ],
};

pub(crate) static ENDPOINT: Message = Message {
    name: "discovery/v1 Endpoint",
    fields: &[
        many("addresses", 1, Str),
        one("conditions", 2, Msg(&ENDPOINT_CONDITIONS)),
        one("hostname", 3, Str),
        one("targetRef", 4, Msg(&OBJECT_REFERENCE)),
        one("deprecatedTopology", 5, Map(&Str)),
        one("nodeName", 6, Str),
        one("zone", 7, Str),
        one("hints", 8, Msg(&ENDPOINT_HINTS)),
    ],
};

pub(crate) static ENDPOINT_CONDITIONS: Message = Message {
    name: "discovery/v1 EndpointConditions",
    // pointers in Go: a present `false` is written and means something else than absent
    fields: &[one("ready", 1, Bool), one("serving", 2, Bool), one("terminating", 3, Bool)],
};

pub(crate) static ENDPOINT_HINTS: Message = Message {
    name: "discovery/v1 EndpointHints",
    fields: &[many("forZones", 1, Msg(&FOR_ZONE)), many("forNodes", 2, Msg(&FOR_NODE))],
};

pub(crate) static FOR_ZONE: Message = Message { name: "discovery/v1 ForZone", fields: &[one("name", 1, Str)] };

pub(crate) static FOR_NODE: Message = Message { name: "discovery/v1 ForNode", fields: &[one("name", 1, Str)] };

pub(crate) static DISCOVERY_ENDPOINT_PORT: Message = Message {
    name: "discovery/v1 EndpointPort",
    fields: &[one("name", 1, Str), one("protocol", 2, Str), one("port", 3, Int32), one("appProtocol", 4, Str)],
};

#[cfg(test)]
mod tests;
