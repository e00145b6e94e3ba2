//! Objects of the Helm chart that the tests and the local cluster install without helm,
//! built from the files the chart's templates include, so they evaluate what the chart
//! ships. `tests/tests/chart.rs` checks that `helm template` renders the same objects.

use serde_json::{Value, json};

/// The name of the edge-health node restriction's ValidatingAdmissionPolicy and of its
/// binding.
pub const EDGE_HEALTH_NODE_POLICY: &str = "edge-health-node-restriction.edgegrid.io";

/// The policy's spec, which `templates/edge-health-node-policy.yaml` renders with `tpl`.
const POLICY_SPEC: &str = include_str!("../../../charts/edgegrid/files/edge-health-node-policy.yaml");

/// The template expressions of [`POLICY_SPEC`].
const RELEASE_NAMESPACE: &str = "{{ .Release.Namespace }}";
const VERDICT_WRITER: &str = "{{ .Values.edgeHealth.verdictWriter }}";

/// The edge-health node restriction of a release in `namespace` whose daemons run with
/// `--verdict-writer=<verdict_writer>` (`cloud`, the chart's default, or `edge`): its
/// ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding as the chart renders
/// them, without the chart's labels.
pub fn edge_health_node_policy(namespace: &str, verdict_writer: &str) -> [Value; 2] {
    let text = POLICY_SPEC.replace(RELEASE_NAMESPACE, namespace).replace(VERDICT_WRITER, verdict_writer);
    let spec: Value = serde_saphyr::from_str(&text).expect("the chart's policy file is YAML");
    let metadata = json!({"name": EDGE_HEALTH_NODE_POLICY});
    [
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": metadata, "spec": spec}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": metadata,
            "spec": {"policyName": EDGE_HEALTH_NODE_POLICY, "validationActions": ["Deny"]}}),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_namespace_and_the_writer_are_the_only_template_expressions() {
        let expressions = POLICY_SPEC.matches("{{").count();
        let known = POLICY_SPEC.matches(RELEASE_NAMESPACE).count() + POLICY_SPEC.matches(VERDICT_WRITER).count();
        assert_eq!(expressions, known, "tpl would render more than this module does");
        let [policy, _] = edge_health_node_policy("ns", "cloud");
        assert_eq!(
            policy["spec"]["matchConditions"][0]["expression"],
            "request.userInfo.username == 'system:serviceaccount:ns:edge-health'"
        );
    }
}
