//! Which requests an admission configuration selects, as the real server decides it for
//! webhooks and ValidatingAdmissionPolicies alike: rules (`apiGroups`, `apiVersions`,
//! `operations`, `resources` with subresources, `scope`, `resourceNames`) and the object
//! and namespace label selectors. Pure.

use listwatch::LabelSelector;
use serde_json::{Value, json};

use crate::admission_request::Request;

/// Whether one rule (`RuleWithOperations` or `NamedRuleWithOperations`) selects the request.
pub fn rule_matches(rule: &Value, request: &Request<'_>) -> bool {
    let rt = request.rt;
    let any =
        |field: &str, want: &str| rule[field].as_array().is_some_and(|list| list.iter().any(|v| v == "*" || v == want));
    // "*" is every resource but no subresource; "*/*" everything; "pods/*" every pods subresource
    let resource_matches = rule["resources"].as_array().is_some_and(|list| {
        list.iter().filter_map(Value::as_str).any(|r| match r.split_once('/') {
            _ if r == "*/*" => true,
            None => request.subresource.is_none() && (r == "*" || r == rt.plural),
            Some((res, sub)) => request
                .subresource
                .is_some_and(|written| (res == "*" || res == rt.plural) && (sub == "*" || sub == written)),
        })
    });
    let scope_matches = match rule["scope"].as_str().unwrap_or("*") {
        "Cluster" => !rt.namespaced,
        "Namespaced" => rt.namespaced,
        _ => true,
    };
    // empty or absent: every name
    let name_matches = rule["resourceNames"]
        .as_array()
        .is_none_or(|names| names.is_empty() || names.iter().any(|n| n == request.name));
    any("apiGroups", &rt.group)
        && any("apiVersions", &rt.version)
        && any("operations", request.operation.as_str())
        && resource_matches
        && scope_matches
        && name_matches
}

/// Whether `selector` (a `metav1.LabelSelector`; absent means everything) selects the
/// request's object or, on an update, its old object, and its namespace (always, for a
/// cluster-scoped resource: `namespace_labels` is `None`).
pub fn selectors_match(
    object_selector: &Value,
    namespace_selector: &Value,
    request: &Request<'_>,
    namespace_labels: Option<&Value>,
) -> bool {
    let object_labels = &request.object["metadata"]["labels"];
    let old_labels = request.old.map(|o| &o["metadata"]["labels"]);
    let object_ok = selects(object_selector, object_labels) || old_labels.is_some_and(|l| selects(object_selector, l));
    let namespace_ok = namespace_labels.is_none_or(|labels| selects(namespace_selector, labels));
    object_ok && namespace_ok
}

fn selects(selector: &Value, labels: &Value) -> bool {
    let subject = json!({"metadata": {"labels": labels}});
    selector_from(selector).is_some_and(|s| s.matches(&subject))
}

/// A `metav1.LabelSelector` object as a selector; absent means "everything".
fn selector_from(selector: &Value) -> Option<LabelSelector> {
    let mut parts = Vec::new();
    for (k, v) in selector["matchLabels"].as_object().into_iter().flatten() {
        parts.push(format!("{k}={}", v.as_str()?));
    }
    for expr in selector["matchExpressions"].as_array().into_iter().flatten() {
        let key = expr["key"].as_str()?;
        let values: Vec<&str> = expr["values"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        parts.push(match expr["operator"].as_str()? {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => return None,
        });
    }
    LabelSelector::parse(&parts.join(",")).ok()
}
