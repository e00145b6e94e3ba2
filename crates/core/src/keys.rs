//! Every well-known label, annotation, taint and condition key the project reads or writes.
//!
//! Nothing else in the workspace may spell these strings: a typo in a key is a silent
//! behaviour change on a live cluster, so there is exactly one place to get them from.

/// API group of the grid CRDs (SuperEdge-compatible).
pub const GRID_GROUP: &str = "superedge.io";
/// API version of the grid CRDs.
pub const GRID_VERSION: &str = "v1";

/// Service annotation holding a JSON list of node label keys, e.g. `["zone1"]`
/// (SuperEdge's name, kept so existing manifests keep working).
pub const TOPOLOGY_KEYS_ANNOTATION: &str = "topologyKeys";
/// Service annotation choosing how `topologyKeys` is read. Absent or `any` is
/// SuperEdge's meaning; `ordered` is the retired Kubernetes `topologyKeys` meaning
/// (first key that leaves a ready endpoint wins, optional trailing `"*"`).
pub const TOPOLOGY_MODE_ANNOTATION: &str = "superedge.io/topology-mode";
/// The wildcard entry of an ordered `topologyKeys` list: any endpoint at all.
pub const TOPOLOGY_WILDCARD: &str = "*";

/// On `default/kubernetes` Endpoints/EndpointSlices: the IP of an edge-local apiserver cache.
pub const LOCAL_ENDPOINT_ANNOTATION: &str = "superedge.io/local-endpoint";
/// On `default/kubernetes` Endpoints/EndpointSlices: the port of that local cache.
pub const LOCAL_PORT_ANNOTATION: &str = "superedge.io/local-port";
/// Namespace and name of the apiserver's own Service.
pub const KUBERNETES_SERVICE_NAMESPACE: &str = "default";
pub const KUBERNETES_SERVICE_NAME: &str = "kubernetes";
/// Port name the apiserver's Endpoints use.
pub const KUBERNETES_SERVICE_PORT_NAME: &str = "https";

/// Label tying an EndpointSlice to its Service (the only correct way to map them).
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Label marking a Service / slice handled by a proxy other than kube-proxy.
pub const SERVICE_PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";
/// Label marking a headless Service's slices.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
/// The standard node hostname label.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// Node labels the node lifecycle controller groups zones by.
pub const TOPOLOGY_REGION_LABEL: &str = "topology.kubernetes.io/region";
pub const TOPOLOGY_ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// Label on objects a grid generated: the grid's name.
pub const GRID_SELECTOR_LABEL: &str = "superedge.io/grid-selector";
/// Label on objects a grid generated: the grid's `gridUniqKey`.
pub const GRID_UNIQ_KEY_LABEL: &str = "superedge.io/grid-uniq-key";
/// Annotation on objects a grid generated: a hash of the configuration last applied, so
/// the controller sees that a field it dropped must be removed without re-applying
/// unchanged objects on every resync.
pub const APPLIED_HASH_ANNOTATION: &str = "superedge.io/applied-hash";

/// Node annotation written by edge-health: absent means the node's unit vouches for it
/// (a majority of at least two peers see it alive); present (any value) means it does not,
/// and the node gets stock handling, as SuperEdge v0.9's readers read it (see
/// `crate::protection::voted_unhealthy`). The writers say why in the value:
/// [`NODE_UNHEALTH_YES`] (voted unhealthy) or [`NODE_UNHEALTH_UNDECIDED`] (no verdict).
pub const NODE_UNHEALTH_ANNOTATION: &str = "nodeunhealth";
/// The value the writers set [`NODE_UNHEALTH_ANNOTATION`] to (SuperEdge's edge-health
/// writes the same); readers do not look at the value.
pub const NODE_UNHEALTH_YES: &str = "yes";
/// The value of [`NODE_UNHEALTH_ANNOTATION`] on a node its unit has no verdict on (a tie,
/// a single voice, too few ballots): its protection is not earned, so it is withheld.
pub const NODE_UNHEALTH_UNDECIDED: &str = "undecided";
/// Node annotation: the longest this node may stay Ready=Unknown and still be protected
/// by the edge rule (see `crate::protection`), counted from the Ready condition's
/// `lastTransitionTime`; past it the node is handled as stock Kubernetes would. A Go
/// duration (`30m`, `2h`, `1h30m`); `0` is unlimited. Overrides the controllers'
/// `--max-unreachable-protection` default either way; an invalid value is ignored (the
/// default applies) and reported.
pub const MAX_UNREACHABLE_PROTECTION_ANNOTATION: &str = "superedge.io/max-unreachable-protection";
/// Node label value marking membership of a SuperEdge node unit: `<unit>=nodeunits.superedge.io`.
pub const NODE_UNIT_LABEL_VALUE: &str = "nodeunits.superedge.io";
/// ConfigMap edge-health reads its checks from.
pub const EDGE_HEALTH_CONFIGMAP: &str = "edge-health-config";
/// `edge-health-config` key: `"false"` turns unit-internal checking off (SuperEdge v0.9.0).
pub const EDGE_HEALTH_UNIT_INTERNAL_CHECK_KEY: &str = "unit-internal-check";
/// `edge-health-config` key: comma-separated names of the units to check (SuperEdge v0.9.0).
pub const EDGE_HEALTH_CHECK_UNITS_KEY: &str = "check-units";
/// Node annotation each edge-health daemon keeps on its own Node: the `ip:port` its peers
/// send messages to and run their checks against (the port is the exchange's; checks use
/// their own ports on that IP). Peers learn addresses from Node metadata only.
pub const EDGE_HEALTH_ADDRESS_ANNOTATION: &str = "edgegrid.io/edge-health-address";
/// Node annotation each edge-health daemon keeps on its own Node: its Ed25519 public key
/// (base64 of the 32 raw bytes). Peers verify the ballots that node signs against it, so
/// only that node's own identity may write it (the chart's ValidatingAdmissionPolicy).
pub const EDGE_HEALTH_PUBLIC_KEY_ANNOTATION: &str = "edgegrid.io/edge-health-public-key";
/// Node annotation each edge-health daemon keeps on its own Node when the cloud writes the
/// verdicts (`--verdict-writer=cloud`): the members it holds Unhealthy, sorted,
/// comma-separated (see [`crate::unit::verdict`]).
pub const EDGE_HEALTH_UNHEALTHY_VIEW_ANNOTATION: &str = "edgegrid.io/edge-health-unhealthy";
/// Node role label of control-plane nodes (Kubernetes 1.20 and later).
pub const CONTROL_PLANE_ROLE_LABEL: &str = "node-role.kubernetes.io/control-plane";
/// Node role label of control-plane nodes before Kubernetes 1.24 (SuperEdge's `MasterLabel`).
pub const MASTER_ROLE_LABEL: &str = "node-role.kubernetes.io/master";

/// Taints the node lifecycle controller manages.
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const TAINT_MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";
pub const TAINT_DISK_PRESSURE: &str = "node.kubernetes.io/disk-pressure";
pub const TAINT_PID_PRESSURE: &str = "node.kubernetes.io/pid-pressure";
pub const TAINT_NETWORK_UNAVAILABLE: &str = "node.kubernetes.io/network-unavailable";
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
/// Node label excluding a node from the zone disruption counts (kube-controller-manager's).
pub const EXCLUDE_DISRUPTION_LABEL: &str = "node.kubernetes.io/exclude-disruption";
pub const TAINT_EFFECT_NO_EXECUTE: &str = "NoExecute";
pub const TAINT_EFFECT_NO_SCHEDULE: &str = "NoSchedule";

/// Node condition type for readiness and its status values.
pub const NODE_CONDITION_READY: &str = "Ready";
/// The other node condition types the node lifecycle controller reads.
pub const NODE_CONDITION_MEMORY_PRESSURE: &str = "MemoryPressure";
pub const NODE_CONDITION_DISK_PRESSURE: &str = "DiskPressure";
pub const NODE_CONDITION_PID_PRESSURE: &str = "PIDPressure";
pub const NODE_CONDITION_NETWORK_UNAVAILABLE: &str = "NetworkUnavailable";
pub const CONDITION_TRUE: &str = "True";
pub const CONDITION_FALSE: &str = "False";
pub const CONDITION_UNKNOWN: &str = "Unknown";

/// Namespace holding node heartbeat Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

#[cfg(test)]
mod tests {
    /// The wire values users' manifests and other components depend on. Changing one is a
    /// compatibility break with SuperEdge, Kubernetes or existing clusters, not a refactor.
    #[test]
    fn wire_values_are_pinned() {
        let pinned = [
            (super::GRID_GROUP, "superedge.io"),
            (super::TOPOLOGY_KEYS_ANNOTATION, "topologyKeys"),
            (super::LOCAL_ENDPOINT_ANNOTATION, "superedge.io/local-endpoint"),
            (super::LOCAL_PORT_ANNOTATION, "superedge.io/local-port"),
            (super::SERVICE_NAME_LABEL, "kubernetes.io/service-name"),
            (super::GRID_SELECTOR_LABEL, "superedge.io/grid-selector"),
            (super::GRID_UNIQ_KEY_LABEL, "superedge.io/grid-uniq-key"),
            (super::APPLIED_HASH_ANNOTATION, "superedge.io/applied-hash"),
            (super::NODE_UNHEALTH_ANNOTATION, "nodeunhealth"),
            (super::NODE_UNHEALTH_YES, "yes"),
            (super::NODE_UNHEALTH_UNDECIDED, "undecided"),
            (super::MAX_UNREACHABLE_PROTECTION_ANNOTATION, "superedge.io/max-unreachable-protection"),
            (super::TAINT_UNREACHABLE, "node.kubernetes.io/unreachable"),
            (super::TAINT_NOT_READY, "node.kubernetes.io/not-ready"),
            (super::TAINT_MEMORY_PRESSURE, "node.kubernetes.io/memory-pressure"),
            (super::TAINT_DISK_PRESSURE, "node.kubernetes.io/disk-pressure"),
            (super::TAINT_PID_PRESSURE, "node.kubernetes.io/pid-pressure"),
            (super::TAINT_NETWORK_UNAVAILABLE, "node.kubernetes.io/network-unavailable"),
            (super::TAINT_UNSCHEDULABLE, "node.kubernetes.io/unschedulable"),
            (super::EXCLUDE_DISRUPTION_LABEL, "node.kubernetes.io/exclude-disruption"),
            (super::NODE_CONDITION_PID_PRESSURE, "PIDPressure"),
            (super::EDGE_HEALTH_CONFIGMAP, "edge-health-config"),
            (super::EDGE_HEALTH_UNIT_INTERNAL_CHECK_KEY, "unit-internal-check"),
            (super::EDGE_HEALTH_CHECK_UNITS_KEY, "check-units"),
            (super::EDGE_HEALTH_ADDRESS_ANNOTATION, "edgegrid.io/edge-health-address"),
            (super::EDGE_HEALTH_PUBLIC_KEY_ANNOTATION, "edgegrid.io/edge-health-public-key"),
            (super::EDGE_HEALTH_UNHEALTHY_VIEW_ANNOTATION, "edgegrid.io/edge-health-unhealthy"),
            (super::CONTROL_PLANE_ROLE_LABEL, "node-role.kubernetes.io/control-plane"),
            (super::MASTER_ROLE_LABEL, "node-role.kubernetes.io/master"),
        ];
        for (constant, wire) in pinned {
            assert_eq!(constant, wire);
        }
    }
}
