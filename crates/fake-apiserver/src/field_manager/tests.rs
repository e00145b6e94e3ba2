//! Ownership and merging as the real server does them, operation by operation.

use serde_json::{Value, json};

use super::*;

const DEPLOYMENT: Schema<'static> = Schema { kind: "Deployment", builtin: true };
const SERVICE: Schema<'static> = Schema { kind: "Service", builtin: true };

fn writer(manager: &str) -> Writer<'_> {
    Writer { manager, api_version: "apps/v1", subresource: None, now: "2026-11-25T10:00:00Z" }
}

/// A Deployment with these labels (none when empty).
fn deployment(replicas: i64, labels: Value) -> Value {
    let mut object = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": replicas}});
    if labels != json!({}) {
        object["metadata"]["labels"] = labels;
    }
    object
}

fn applied(schema: Schema<'_>, live: Option<&Value>, config: &Value, manager: &str, force: bool) -> Value {
    apply(schema, live, config, &writer(manager), force).unwrap_or_else(|c| panic!("conflicts: {c:?}"))
}

/// Each entry's manager, operation and fieldsV1.
fn owners(object: &Value) -> Vec<(String, String, Value)> {
    entries(object).into_iter().map(|e| (e.manager, e.operation, e.fields.to_fields_v1())).collect()
}

fn owner(manager: &str, operation: &str, fields: Value) -> (String, String, Value) {
    (manager.into(), operation.into(), fields)
}

#[test]
fn an_apply_that_creates_owns_every_field_it_sets() {
    let object = applied(DEPLOYMENT, None, &deployment(2, json!({"app": "web"})), "a", false);
    assert_eq!(
        owners(&object),
        [owner("a", "Apply", json!({"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:replicas": {}}}))]
    );
    assert_eq!(
        object["metadata"]["managedFields"][0],
        json!({"manager": "a", "operation": "Apply", "apiVersion": "apps/v1", "time": "2026-11-25T10:00:00Z",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:replicas": {}}}})
    );
}

#[test]
fn another_manager_applying_a_different_value_conflicts_unless_forced() {
    let live = applied(DEPLOYMENT, None, &deployment(2, json!({})), "a", false);
    let refused = apply(DEPLOYMENT, Some(&live), &deployment(3, json!({})), &writer("b"), false);
    assert_eq!(refused, Err(vec![Conflict { manager: "\"a\"".into(), field: ".spec.replicas".into() }]));
    assert_eq!(
        conflict_error(&refused.unwrap_err()).to_string(),
        "Apply failed with 1 conflict: conflict with \"a\": .spec.replicas"
    );

    // the same value: no conflict, both own it
    let shared = applied(DEPLOYMENT, Some(&live), &deployment(2, json!({})), "b", false);
    let spec = json!({"f:spec": {"f:replicas": {}}});
    assert_eq!(owners(&shared), [owner("a", "Apply", spec.clone()), owner("b", "Apply", spec.clone())]);

    // forced: b takes it over, a no longer owns it
    let forced = applied(DEPLOYMENT, Some(&live), &deployment(3, json!({})), "b", true);
    assert_eq!(forced["spec"]["replicas"], 3);
    assert_eq!(owners(&forced), [owner("b", "Apply", spec)]);
}

#[test]
fn a_field_an_update_changed_conflicts_with_a_later_apply() {
    let live = applied(DEPLOYMENT, None, &deployment(2, json!({})), "a", false);
    let mut scaled = live.clone();
    scaled["spec"]["replicas"] = json!(5);
    updated(DEPLOYMENT, &live, &mut scaled, &writer("kubectl"));
    assert_eq!(owners(&scaled), [owner("kubectl", "Update", json!({"f:spec": {"f:replicas": {}}}))]);
    let refused = apply(DEPLOYMENT, Some(&scaled), &deployment(2, json!({})), &writer("a"), false).unwrap_err();
    assert_eq!(
        conflict_error(&refused).to_string(),
        "Apply failed with 1 conflict: conflict with \"kubectl\" using apps/v1 at 2026-11-25T10:00:00Z: .spec.replicas"
    );
    let ApiError::ApplyConflict { causes, .. } = conflict_error(&refused) else { panic!("an apply conflict") };
    assert_eq!(
        causes,
        [("conflict with \"kubectl\" using apps/v1 at 2026-11-25T10:00:00Z".to_string(), ".spec.replicas".to_string())]
    );
}

#[test]
fn several_conflicts_are_listed_by_manager() {
    let live = applied(DEPLOYMENT, None, &deployment(2, json!({"x": "1"})), "b", false);
    let live = applied(DEPLOYMENT, Some(&live), &json!({"metadata": {"labels": {"y": "1"}}}), "a", false);
    let refused = apply(DEPLOYMENT, Some(&live), &deployment(3, json!({"x": "2", "y": "2"})), &writer("c"), false);
    assert_eq!(
        conflict_error(&refused.unwrap_err()).to_string(),
        "Apply failed with 3 conflicts: conflicts with \"a\":\n- .metadata.labels.y\nconflicts with \"b\":\n\
         - .metadata.labels.x\n- .spec.replicas"
    );
}

#[test]
fn fields_dropped_from_the_applied_configuration_are_removed_unless_another_manager_owns_them() {
    let live = applied(DEPLOYMENT, None, &deployment(2, json!({"x": "1", "y": "1", "z": "1"})), "a", false);
    let live = applied(DEPLOYMENT, Some(&live), &json!({"metadata": {"labels": {"z": "1"}}}), "b", false);
    let next = applied(DEPLOYMENT, Some(&live), &deployment(2, json!({"x": "1"})), "a", false);
    assert_eq!(next["metadata"]["labels"], json!({"x": "1", "z": "1"}), "y removed, z kept for b");
    assert_eq!(
        owners(&next),
        [
            owner("b", "Apply", json!({"f:metadata": {"f:labels": {"f:z": {}}}})),
            owner("a", "Apply", json!({"f:metadata": {"f:labels": {"f:x": {}}}, "f:spec": {"f:replicas": {}}})),
        ]
    );
}

#[test]
fn an_atomic_selector_is_replaced_and_owned_whole() {
    let service = |selector: Value| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": selector}})
    };
    let live = applied(SERVICE, None, &service(json!({"app": "web", "tier": "front"})), "a", false);
    let next = applied(SERVICE, Some(&live), &service(json!({"app": "web2"})), "a", false);
    assert_eq!(next["spec"]["selector"], json!({"app": "web2"}), "replaced, not merged");
    let refused = apply(SERVICE, Some(&next), &service(json!({"app": "web2", "x": "y"})), &writer("b"), false);
    assert_eq!(refused, Err(vec![Conflict { manager: "\"a\"".into(), field: ".spec.selector".into() }]));
}

#[test]
fn list_map_items_merge_by_key_and_each_manager_owns_its_own() {
    let ports = |ports: Value| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"ports": ports}})
    };
    let live = applied(SERVICE, None, &ports(json!([{"port": 80, "protocol": "TCP", "name": "http"}])), "a", false);
    let live = applied(SERVICE, Some(&live), &ports(json!([{"port": 443, "protocol": "TCP"}])), "b", false);
    assert_eq!(
        live["spec"]["ports"],
        json!([{"port": 80, "protocol": "TCP", "name": "http"}, {"port": 443, "protocol": "TCP"}])
    );
    let refused = apply(
        SERVICE,
        Some(&live),
        &ports(json!([{"port": 80, "protocol": "TCP", "name": "web"}])),
        &writer("b"),
        false,
    );
    assert_eq!(
        refused,
        Err(vec![Conflict { manager: "\"a\"".into(), field: ".spec.ports[port=80,protocol=\"TCP\"].name".into() }])
    );
    // a applies no ports any more: its item goes, b's stays
    let next = applied(SERVICE, Some(&live), &json!({"spec": {}}), "a", false);
    assert_eq!(next["spec"]["ports"], json!([{"port": 443, "protocol": "TCP"}]));
}

#[test]
fn containers_merge_by_name() {
    let containers = |containers: Value| json!({"spec": {"template": {"spec": {"containers": containers}}}});
    let live = applied(DEPLOYMENT, None, &containers(json!([{"name": "app", "image": "app:1"}])), "a", false);
    let live = applied(DEPLOYMENT, Some(&live), &containers(json!([{"name": "proxy", "image": "envoy"}])), "b", false);
    let next = applied(DEPLOYMENT, Some(&live), &containers(json!([{"name": "app", "image": "app:2"}])), "a", false);
    assert_eq!(
        next["spec"]["template"]["spec"]["containers"],
        json!([{"name": "app", "image": "app:2"}, {"name": "proxy", "image": "envoy"}])
    );
}

#[test]
fn an_update_takes_what_it_changed_and_keeps_the_rest_with_its_owners() {
    let live = applied(DEPLOYMENT, None, &deployment(2, json!({"x": "1"})), "a", false);
    let mut next = live.clone();
    next["metadata"]["labels"]["y"] = json!("2");
    next["metadata"]["labels"].as_object_mut().unwrap().remove("x");
    updated(DEPLOYMENT, &live, &mut next, &writer("edit"));
    assert_eq!(
        owners(&next),
        [
            owner("a", "Apply", json!({"f:spec": {"f:replicas": {}}})),
            owner("edit", "Update", json!({"f:metadata": {"f:labels": {"f:y": {}}}})),
        ]
    );
    // an update that changes nothing records nothing
    let mut same = next.clone();
    updated(DEPLOYMENT, &next, &mut same, &writer("other"));
    assert_eq!(owners(&same), owners(&next));
}

#[test]
fn a_create_records_its_writer_as_updating_every_field() {
    let mut object = deployment(1, json!({"a": "b"}));
    created(DEPLOYMENT, &mut object, &writer("kube-rs"), "Update");
    assert_eq!(
        owners(&object),
        [owner("kube-rs", "Update", json!({"f:metadata": {"f:labels": {"f:a": {}}}, "f:spec": {"f:replicas": {}}}))]
    );
}
