//! Strategic merge patch for the built-in kinds: a JSON merge patch in which the lists
//! Kubernetes declares `patchStrategy: merge` are merged item by item on their merge key
//! instead of being replaced.
//!
//! Approximation: merge keys are looked up by field name (the table below covers the
//! fields controllers patch: containers, env, ports, volumes, conditions, taints,
//! addresses, ownerReferences, finalizers); `$patch: replace|delete` is honoured,
//! `$setElementOrder`/`$retainKeys`/`$deleteFromPrimitiveList` are ignored.

use serde_json::{Map, Value};

/// The merge key of a list field, judged by the field name and the items' shape.
fn merge_key(field: &str, items: &[Value]) -> Option<&'static str> {
    let has = |key: &str| items.iter().any(|i| i.get(key).is_some());
    match field {
        "containers" | "initContainers" | "ephemeralContainers" | "volumes" | "env" | "imagePullSecrets" => {
            Some("name")
        }
        "ports" if has("containerPort") => Some("containerPort"),
        "ports" if has("port") => Some("port"),
        "conditions" => Some("type"),
        "taints" => Some("key"),
        "addresses" if has("type") => Some("type"),
        "ownerReferences" => Some("uid"),
        "volumeMounts" => Some("mountPath"),
        "volumeDevices" => Some("devicePath"),
        _ => None,
    }
}

/// Primitive lists with set-merge semantics.
fn merges_as_set(field: &str) -> bool {
    field == "finalizers"
}

pub fn apply(target: &mut Value, patch: &Value) {
    let (Value::Object(target_map), Value::Object(patch_map)) = (&mut *target, patch) else {
        *target = without_directives(patch);
        return;
    };
    if patch_map.get("$patch").and_then(Value::as_str) == Some("replace") {
        *target = without_directives(patch);
        return;
    }
    merge_maps(target_map, patch_map);
}

fn merge_maps(target: &mut Map<String, Value>, patch: &Map<String, Value>) {
    for (field, value) in patch {
        if field.starts_with('$') {
            continue;
        }
        if value.is_null() {
            target.remove(field);
            continue;
        }
        match (target.get_mut(field), value) {
            (Some(Value::Array(existing)), Value::Array(items)) => {
                let all: Vec<Value> = existing.iter().chain(items).cloned().collect();
                if let Some(key) = merge_key(field, &all) {
                    merge_keyed_list(existing, items, key);
                } else if merges_as_set(field) {
                    for item in items {
                        if !existing.contains(item) {
                            existing.push(item.clone());
                        }
                    }
                } else {
                    *existing = items.clone();
                }
            }
            (Some(existing @ Value::Object(_)), Value::Object(_)) => apply(existing, value),
            _ => {
                target.insert(field.clone(), without_directives(value));
            }
        }
    }
}

fn merge_keyed_list(existing: &mut Vec<Value>, items: &[Value], key: &str) {
    for item in items {
        let id = item.get(key);
        let position = existing.iter().position(|e| id.is_some() && e.get(key) == id);
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (position, delete) {
            (Some(i), true) => {
                existing.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => apply(&mut existing[i], item),
            (None, false) => existing.push(without_directives(item)),
        }
    }
}

fn without_directives(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter().filter(|(k, _)| !k.starts_with('$')).map(|(k, v)| (k.clone(), without_directives(v))).collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_directives).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    fn patched(target: serde_json::Value, patch: serde_json::Value) -> serde_json::Value {
        let mut target = target;
        super::apply(&mut target, &patch);
        target
    }

    #[test]
    fn containers_merge_by_name_and_ports_by_container_port() {
        let pod = json!({"spec": {"containers": [
            {"name": "a", "image": "a:1", "ports": [{"containerPort": 80, "name": "http"}]},
            {"name": "b", "image": "b:1"}
        ]}});
        let out = patched(
            pod,
            json!({"spec": {"containers": [
                {"name": "a", "image": "a:2", "ports": [{"containerPort": 443, "name": "https"}]},
                {"name": "c", "image": "c:1"}
            ]}}),
        );
        assert_eq!(
            out,
            json!({"spec": {"containers": [
                {"name": "a", "image": "a:2", "ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 443, "name": "https"}]},
                {"name": "b", "image": "b:1"},
                {"name": "c", "image": "c:1"}
            ]}})
        );
    }

    #[test]
    fn taints_conditions_and_delete_directive() {
        let node = json!({
            "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "False"}]}
        });
        let out = patched(
            node,
            json!({
                "spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "$patch": "delete"}, {"key": "b", "effect": "NoSchedule"}]},
                "status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]}
            }),
        );
        assert_eq!(
            out,
            json!({
                "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]},
                "status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}, {"type": "DiskPressure", "status": "False"}]}
            })
        );
    }

    #[test]
    fn nulls_delete_unkeyed_lists_replace_sets_union_and_replace_directive() {
        let obj = json!({"metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x"]},
                         "spec": {"tolerations": [{"key": "t1"}], "selector": {"app": "web", "tier": "x"}}});
        let out = patched(
            obj,
            json!({"metadata": {"labels": {"a": null}, "finalizers": ["y", "x"]},
                   "spec": {"tolerations": [{"key": "t2"}], "selector": {"$patch": "replace", "app": "api"}}}),
        );
        assert_eq!(
            out,
            json!({"metadata": {"labels": {"b": "2"}, "finalizers": ["x", "y"]},
                   "spec": {"tolerations": [{"key": "t2"}], "selector": {"app": "api"}}})
        );
    }
}
