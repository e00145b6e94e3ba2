//! How a value at a path merges and is owned in server-side apply, for the kinds the
//! project applies: what the real schemas say with `x-kubernetes-list-type`,
//! `x-kubernetes-list-map-keys`, `x-kubernetes-map-type` and `x-kubernetes-structType`
//! (k8s-openapi's schemas do not carry these extensions, so they are written out here).
//! Everything else takes the defaults: objects granular (each field owned on its own),
//! lists atomic (owned and replaced whole).

/// A value's merge strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// An object whose fields are owned and merged one by one.
    Granular,
    /// Owned and replaced whole.
    Atomic,
    /// A list of objects identified by these fields (`x-kubernetes-list-type: map`).
    ListMap(&'static [&'static str]),
    /// A list of distinct scalars (`x-kubernetes-list-type: set`).
    ListSet,
}

/// Where a pod spec sits in each kind that has one.
fn pod_spec_prefix(kind: &str) -> Option<&'static str> {
    match kind {
        "Pod" => Some("spec"),
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" => Some("spec.template.spec"),
        _ => None,
    }
}

/// The shape of the value at `path` (field names, list items left out) of a `kind`
/// object, or `None` for the default (granular objects, atomic lists).
pub fn declared(kind: &str, builtin: bool, path: &str) -> Option<Shape> {
    match path {
        "metadata.ownerReferences" => return Some(Shape::ListMap(&["uid"])),
        "metadata.finalizers" => return Some(Shape::ListSet),
        _ => {}
    }
    if !builtin {
        return None;
    }
    if path == "status.conditions" {
        return Some(Shape::ListMap(&["type"]));
    }
    if let Some(pod) = pod_spec_prefix(kind)
        && let Some(rest) = path.strip_prefix(pod).and_then(|rest| rest.strip_prefix('.'))
    {
        return pod_spec(rest);
    }
    match (kind, path) {
        ("Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job", "spec.selector") => Some(Shape::Atomic),
        ("Service", "spec.ports") => Some(Shape::ListMap(&["port", "protocol"])),
        ("Service", "spec.selector") => Some(Shape::Atomic),
        // keyed by name: an apply of some webhooks leaves those another manager set
        ("MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration", "webhooks") => {
            Some(Shape::ListMap(&["name"]))
        }
        _ => None,
    }
}

fn pod_spec(path: &str) -> Option<Shape> {
    let container =
        ["containers.", "initContainers.", "ephemeralContainers."].into_iter().find_map(|list| path.strip_prefix(list));
    if let Some(field) = container {
        return match field {
            "ports" => Some(Shape::ListMap(&["containerPort", "protocol"])),
            "env" => Some(Shape::ListMap(&["name"])),
            "volumeMounts" => Some(Shape::ListMap(&["mountPath"])),
            _ => None,
        };
    }
    match path {
        "containers" | "initContainers" | "ephemeralContainers" | "volumes" | "imagePullSecrets" => {
            Some(Shape::ListMap(&["name"]))
        }
        "hostAliases" => Some(Shape::ListMap(&["ip"])),
        "topologySpreadConstraints" => Some(Shape::ListMap(&["topologyKey", "whenUnsatisfiable"])),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_declared_shapes_of_the_applied_kinds() {
        let cases = [
            ("Service", true, "spec.selector", Some(Shape::Atomic)),
            ("Service", true, "spec.ports", Some(Shape::ListMap(&["port", "protocol"]))),
            ("Deployment", true, "spec.selector", Some(Shape::Atomic)),
            ("Deployment", true, "spec.template.spec.containers", Some(Shape::ListMap(&["name"]))),
            ("Deployment", true, "spec.template.spec.containers.env", Some(Shape::ListMap(&["name"]))),
            ("Pod", true, "spec.containers.ports", Some(Shape::ListMap(&["containerPort", "protocol"]))),
            ("StatefulSet", true, "spec.template.spec.volumes", Some(Shape::ListMap(&["name"]))),
            ("Node", true, "status.conditions", Some(Shape::ListMap(&["type"]))),
            ("Node", true, "spec.taints", None),
            ("EndpointSlice", true, "endpoints", None),
            ("DeploymentGrid", false, "metadata.finalizers", Some(Shape::ListSet)),
            ("DeploymentGrid", false, "status.conditions", None),
            ("Service", true, "spec.template.spec.containers", None),
            ("MutatingWebhookConfiguration", true, "webhooks", Some(Shape::ListMap(&["name"]))),
            ("ValidatingWebhookConfiguration", true, "webhooks", Some(Shape::ListMap(&["name"]))),
            ("MutatingWebhookConfiguration", true, "webhooks.rules", None),
        ];
        for (kind, builtin, path, shape) in cases {
            assert_eq!(declared(kind, builtin, path), shape, "{kind} {path}");
        }
    }
}
