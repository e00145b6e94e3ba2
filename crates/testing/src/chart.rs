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

/// The name of the unit label restriction's ValidatingAdmissionPolicy and of its binding.
pub const UNIT_LABEL_POLICY: &str = "edgegrid-unit-labels.edgegrid.io";

/// Its spec, which `templates/unit-label-policy.yaml` renders with `tpl`.
const UNIT_LABEL_POLICY_SPEC: &str = include_str!("../../../charts/edgegrid/files/unit-label-policy.yaml");

/// Its one template expression: the unit label keys as a JSON (and CEL) list.
const UNIT_LABEL_KEYS: &str = r#"{{ include "edgegrid.unitLabelKeys" . }}"#;

/// The name of the kubelet-check token bound's ValidatingAdmissionPolicy and of its binding.
pub const KUBELET_CHECK_TOKEN_POLICY: &str = "edge-health-kubelet-check-token.edgegrid.io";

/// Its spec, which `templates/edge-health.yaml` renders with `tpl`.
const KUBELET_CHECK_TOKEN_POLICY_SPEC: &str =
    include_str!("../../../charts/edgegrid/files/kubelet-check-token-policy.yaml");

/// The kubelet-check token bound of a release in `namespace`, as the chart renders it.
pub fn kubelet_check_token_policy(namespace: &str) -> [Value; 2] {
    let text = KUBELET_CHECK_TOKEN_POLICY_SPEC.replace(RELEASE_NAMESPACE, namespace);
    policy_and_binding(KUBELET_CHECK_TOKEN_POLICY, &text)
}

/// The edge-health node restriction of a release in `namespace` whose daemons run with
/// `--verdict-writer=<verdict_writer>` (`cloud`, the chart's default, or `edge`): its
/// ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding as the chart renders
/// them, without the chart's labels.
pub fn edge_health_node_policy(namespace: &str, verdict_writer: &str) -> [Value; 2] {
    let text = POLICY_SPEC.replace(RELEASE_NAMESPACE, namespace).replace(VERDICT_WRITER, verdict_writer);
    policy_and_binding(EDGE_HEALTH_NODE_POLICY, &text)
}

/// The unit label restriction keeping `unit_keys` (and SuperEdge's node units) from
/// kubelets, as the chart renders it for those keys (sorted, as Helm's `uniq` of the
/// chart's list need not be: the order does not matter to the policy).
pub fn unit_label_policy(unit_keys: &[&str]) -> [Value; 2] {
    let keys = serde_json::to_string(unit_keys).expect("a list of strings");
    policy_and_binding(UNIT_LABEL_POLICY, &UNIT_LABEL_POLICY_SPEC.replace(UNIT_LABEL_KEYS, &keys))
}

/// A ValidatingAdmissionPolicy named `name` with the spec in `text` (YAML), and its
/// denying binding of the same name.
fn policy_and_binding(name: &str, text: &str) -> [Value; 2] {
    let spec: Value = serde_saphyr::from_str(text).expect("the chart's policy file is YAML");
    let metadata = json!({"name": name});
    [
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": metadata, "spec": spec}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": metadata,
            "spec": {"policyName": name, "validationActions": ["Deny"]}}),
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

    #[test]
    fn the_namespace_is_the_token_policys_only_template_expression() {
        let spec = KUBELET_CHECK_TOKEN_POLICY_SPEC;
        assert_eq!(spec.matches("{{").count(), spec.matches(RELEASE_NAMESPACE).count());
    }

    #[test]
    fn the_unit_label_keys_are_the_unit_label_policys_only_template_expression() {
        assert_eq!(
            UNIT_LABEL_POLICY_SPEC.matches("{{").count(),
            UNIT_LABEL_POLICY_SPEC.matches(UNIT_LABEL_KEYS).count()
        );
        let [policy, _] = unit_label_policy(&["zone1", "site"]);
        assert_eq!(policy["spec"]["variables"][0]["expression"], r#"["zone1","site"]"#);
    }
}
