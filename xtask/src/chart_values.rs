//! The chart's values as a Rust type, from which `values.schema.json` is generated: Helm
//! checks every `helm install`/`upgrade`/`template` against it, so a value that cannot
//! work (`nodeMonitorPeriod=5`, an empty image registry, a misspelt key, a port of 0) fails
//! there with the value's path, not later in a crash-looping pod. Every object refuses
//! unknown keys. `resources` and node selectors stay free-form (Kubernetes checks those).

// The fields are read by Helm, through the generated schema, and by serde in the test.
#![allow(dead_code, reason = "a schema and a parse target, never read field by field")]

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

/// A Go duration as the binaries' flags take it (`300ms`, `1m30s`, `2h`); `0` for none.
const DURATION: &str = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$";

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(title = "edgegrid chart values")]
pub struct Values {
    pub image: Image,
    pub grid_controller: GridController,
    pub node_lifecycle: NodeLifecycle,
    /// Labels of the edge nodes the per-node components run on (empty: every node).
    pub edge_node_selector: BTreeMap<String, String>,
    /// Labels every cloud component's node must carry: keys no kubelet may set on its own
    /// Node (`node-role.kubernetes.io/` or `node-restriction.kubernetes.io/`): the chart
    /// refuses others with a message saying why (a schema pattern would only say "not
    /// allowed").
    pub cloud_node_selector: BTreeMap<String, String>,
    /// Tolerations every cloud component gets (besides its own).
    pub cloud_tolerations: Vec<serde_json::Value>,
    pub unit_label_policy: UnitLabelPolicy,
    pub grid_wrapper: GridWrapper,
    pub unit_signer: UnitSigner,
    pub edge_health: EdgeHealth,
    pub admission: Admission,
    pub metrics: Metrics,
}

/// The ValidatingAdmissionPolicy keeping the labels that make units from kubelets.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UnitLabelPolicy {
    pub enabled: bool,
    /// Label keys that make units besides `edgeHealth.unitLabelKey` (grids' `gridUniqKey`s).
    pub label_keys: Vec<LabelKey>,
}

/// A Kubernetes label key (`[prefix/]name`).
#[derive(Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct LabelKey(
    #[schemars(regex(pattern = r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"))]
    pub String,
);

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Metrics {
    /// A Prometheus Operator ServiceMonitor per component.
    pub service_monitor: bool,
    #[schemars(regex(pattern = DURATION))]
    pub interval: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Image {
    /// Where the images are pushed: `<registry>/<binary>:<tag>`.
    #[schemars(length(min = 1), regex(pattern = r"^[^/\s]+(/[^/\s]+)*$"))]
    pub registry: String,
    /// Empty: the chart's appVersion.
    #[schemars(regex(pattern = r"^[A-Za-z0-9_.-]{0,128}$"))]
    pub tag: String,
    pub pull_policy: PullPolicy,
}

#[derive(Deserialize, JsonSchema)]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GridController {
    pub enabled: bool,
    #[schemars(range(min = 1))]
    pub replicas: u32,
    #[serde(flatten)]
    pub scheduling: Scheduling,
    pub resources: serde_json::Value,
}

// Where a cloud component's pods run (Kubernetes checks the contents). A plain comment:
// flattened into its component, its description would become the component's.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Scheduling {
    pub node_selector: BTreeMap<String, String>,
    pub affinity: serde_json::Value,
    pub tolerations: Vec<serde_json::Value>,
    pub priority_class_name: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeLifecycle {
    pub enabled: bool,
    #[schemars(range(min = 1))]
    pub replicas: u32,
    #[serde(flatten)]
    pub scheduling: Scheduling,
    pub args: NodeLifecycleArgs,
    pub resources: serde_json::Value,
}

/// kube-controller-manager's flags of the same names.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeLifecycleArgs {
    #[schemars(regex(pattern = DURATION))]
    pub node_monitor_period: String,
    #[schemars(regex(pattern = DURATION))]
    pub node_monitor_grace_period: String,
    #[schemars(regex(pattern = DURATION))]
    pub node_startup_grace_period: String,
    #[schemars(range(min = 0.0))]
    pub node_eviction_rate: f64,
    #[schemars(range(min = 0.0))]
    pub secondary_node_eviction_rate: f64,
    #[schemars(range(min = 0.0, max = 1.0))]
    pub unhealthy_zone_threshold: f64,
    pub large_cluster_size_threshold: u32,
    /// `--max-unreachable-protection`: the longest an edge node that its unit sees alive
    /// may stay Unknown and keep its pods (a node's annotation may only shorten it).
    #[schemars(regex(pattern = DURATION))]
    pub max_unreachable_protection: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GridWrapper {
    pub enabled: bool,
    #[schemars(range(min = 1))]
    pub port: u16,
    #[schemars(range(min = 1))]
    pub metrics_port: u16,
    pub service_autonomy: bool,
    /// Labels a node needs besides `edgeNodeSelector` (moving from SuperEdge node by node).
    pub node_selector: BTreeMap<String, String>,
    /// A node directory for `--cache-dir`; empty: none.
    #[schemars(regex(pattern = r"^(/.*)?$"))]
    pub cache_dir: String,
    pub resources: serde_json::Value,
    pub kube_proxy_kubeconfig: bool,
    pub unit_upstream: UnitUpstream,
}

/// One upstream per unit (`--unit-label-key` and the wrappers' peer listener).
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UnitUpstream {
    pub enabled: bool,
    /// The port every wrapper serves its unit on (the node's addresses, hostNetwork).
    #[schemars(range(min = 1))]
    pub port: u16,
    /// Followers serve only states the unit signer vouched for (`--unit-vouch-keys`).
    pub vouched: bool,
    /// The unit signer's Ed25519 public keys, base64.
    pub signer_public_keys: Vec<PublicKey>,
}

/// A base64 Ed25519 public key (32 bytes: 43 characters and one `=`).
#[derive(Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct PublicKey(#[schemars(regex(pattern = r"^[A-Za-z0-9+/]{43}=$"))] pub String);

/// The unit signer (vouched sharing's cloud side).
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UnitSigner {
    /// The Secret (release namespace) whose `signing-key` is the Ed25519 key, PKCS#8 PEM.
    pub signing_key_secret: String,
    #[schemars(range(min = 1))]
    pub replicas: u32,
    #[schemars(regex(pattern = DURATION))]
    pub period: String,
    #[serde(flatten)]
    pub scheduling: Scheduling,
    pub resources: serde_json::Value,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EdgeHealth {
    pub enabled: bool,
    /// Empty: SuperEdge's node units.
    pub unit_label_key: String,
    /// `--check` values; at least one (no check is a start-up error).
    #[schemars(length(min = 1))]
    pub checks: Vec<String>,
    #[schemars(regex(pattern = DURATION))]
    pub period: String,
    #[schemars(range(min = 1))]
    pub port: u16,
    #[schemars(range(min = 1))]
    pub metrics_port: u16,
    /// Labels a node needs besides `edgeNodeSelector` (moving from SuperEdge unit by unit).
    pub node_selector: BTreeMap<String, String>,
    /// Empty: generated once and kept; else at least 32 characters.
    #[schemars(regex(pattern = r"^(|.{32,})$"))]
    pub hmac_key: String,
    /// The ValidatingAdmissionPolicy keeping the daemon to its own Node (Kubernetes >= 1.30;
    /// the token's node name needs >= 1.32).
    pub node_restriction_policy: bool,
    /// Who writes the nodeunhealth verdicts (`--verdict-writer`).
    pub verdict_writer: VerdictWriter,
    /// Let the one peer decide in a unit of two (`--allow-units-of-two`, daemons and writer).
    pub allow_units_of_two: bool,
    pub resources: serde_json::Value,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum VerdictWriter {
    /// The admission webhook's deployment, from each daemon's published view.
    Cloud,
    /// The unit's members (SuperEdge's way).
    Edge,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Admission {
    pub enabled: bool,
    #[schemars(range(min = 1))]
    pub replicas: u32,
    #[serde(flatten)]
    pub scheduling: Scheduling,
    pub always_reachable: bool,
    #[schemars(regex(pattern = DURATION))]
    pub max_unreachable_protection: String,
    /// The MutatingWebhookConfiguration's name (SuperEdge's by default), a DNS subdomain.
    #[schemars(
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"),
        length(max = 253)
    )]
    pub webhook_configuration_name: String,
    pub certificate: Certificate,
    pub resources: serde_json::Value,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Certificate {
    pub mode: CertificateMode,
    #[schemars(length(min = 1))]
    pub secret_name: String,
    pub ca_bundle: String,
    pub cert_manager_certificate: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum CertificateMode {
    SelfManaged,
    Secret,
    CertManager,
}

/// `values.schema.json`, as committed.
pub fn schema_json() -> String {
    let schema = schemars::schema_for!(Values);
    let mut text = serde_json::to_string_pretty(&schema).expect("a schema serialises");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed defaults are values the type accepts (the schema and values.yaml
    /// cannot drift apart unnoticed).
    #[test]
    fn the_charts_defaults_are_valid_values() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/edgegrid/values.yaml");
        let text = std::fs::read_to_string(path).unwrap();
        let values: Result<Values, _> = serde_saphyr::from_str(&text);
        assert!(values.is_ok(), "{:?}", values.err());
    }
}
