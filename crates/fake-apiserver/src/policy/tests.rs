use serde_json::{Value, json};

use super::*;
use crate::admission_request::Operation;
use crate::resources::ResourceType;
use crate::users::UserInfo;

fn nodes() -> ResourceType {
    ResourceType::new("", "v1", "nodes", "Node", false, true)
}

fn node(name: &str, annotations: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annotations}, "spec": {}})
}

/// A policy on UPDATE of nodes with these validations (and fields merged into its spec).
fn policy(name: &str, validations: Value, more: Value) -> Value {
    let mut spec = json!({
        "matchConstraints": {"resourceRules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]},
        ]},
        "validations": validations,
    });
    json_patch::merge(&mut spec, &more);
    json!({"metadata": {"name": name}, "spec": spec})
}

fn binding(name: &str, policy: &str, actions: &[&str]) -> Value {
    json!({"metadata": {"name": name}, "spec": {"policyName": policy, "validationActions": actions}})
}

/// The verdict on changing node `name`'s annotations from `old` to `new` as `user`.
fn verdict(policies: &[Value], bindings: &[Value], user: &UserInfo, old: Value, new: Value) -> Result<(), Denial> {
    let rt = nodes();
    let old = node("n1", old);
    let request = Request {
        rt: &rt,
        operation: Operation::Update,
        namespace: "",
        name: "n1",
        subresource: None,
        object: node("n1", new),
        old: Some(&old),
        user,
    };
    check(policies, bindings, &request, None)
}

fn denial(binding: &str, reason: &'static str, message: &str) -> Result<(), Denial> {
    Err(Denial { policy: "p".into(), binding: Some(binding.into()), reason, message: message.into() })
}

#[test]
fn a_policy_acts_only_through_a_binding_with_deny() {
    let never = [policy("p", json!([{"expression": "false"}]), json!({}))];
    let admin = UserInfo::admin();
    assert_eq!(verdict(&never, &[], &admin, json!({}), json!({})), Ok(()), "no binding");
    let audit = [binding("b", "p", &["Audit", "Warn"])];
    assert_eq!(verdict(&never, &audit, &admin, json!({}), json!({})), Ok(()), "no Deny action");
    let other = [binding("b", "q", &["Deny"])];
    assert_eq!(verdict(&never, &other, &admin, json!({}), json!({})), Ok(()), "bound to another policy");
    let bound = [binding("b", "p", &["Deny"])];
    assert_eq!(
        verdict(&never, &bound, &admin, json!({}), json!({})),
        denial("b", "Invalid", "failed expression: false")
    );
}

#[test]
fn match_constraints_select_operation_resource_and_subresource() {
    let rt = nodes();
    let never = [policy("p", json!([{"expression": "false"}]), json!({}))];
    let bound = [binding("b", "p", &["Deny"])];
    let (admin, old) = (UserInfo::admin(), node("n1", json!({})));
    let request = |operation, status_only: bool| Request {
        rt: &rt,
        operation,
        namespace: "",
        name: "n1",
        subresource: status_only.then_some("status"),
        object: node("n1", json!({})),
        old: Some(&old),
        user: &admin,
    };
    assert!(check(&never, &bound, &request(Operation::Update, false), None).is_err());
    assert!(check(&never, &bound, &request(Operation::Create, false), None).is_ok(), "CREATE not listed");
    assert!(check(&never, &bound, &request(Operation::Update, true), None).is_ok(), "nodes/status not listed");
    let with_status = [policy(
        "p",
        json!([{"expression": "false"}]),
        json!({"matchConstraints": {"resourceRules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes/status"]},
        ]}}),
    )];
    assert!(check(&with_status, &bound, &request(Operation::Update, true), None).is_err());
    assert!(check(&with_status, &bound, &request(Operation::Update, false), None).is_ok());
    // a binding's matchResources narrows: excluded by name
    let narrowed = [json!({"metadata": {"name": "b"}, "spec": {"policyName": "p", "validationActions": ["Deny"],
        "matchResources": {"excludeResourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
            "operations": ["*"], "resources": ["nodes"], "resourceNames": ["n1"]}]}}})];
    assert!(check(&never, &narrowed, &request(Operation::Update, false), None).is_ok());
}

#[test]
fn match_conditions_select_the_user_and_errors_follow_the_failure_policy() {
    let only_alice = json!({"matchConditions": [
        {"name": "alice", "expression": "request.userInfo.username == 'alice'"},
    ]});
    let never = [policy("p", json!([{"expression": "false", "message": "no"}]), only_alice)];
    let bound = [binding("b", "p", &["Deny"])];
    let alice = UserInfo::new("alice");
    assert_eq!(verdict(&never, &bound, &alice, json!({}), json!({})), denial("b", "Invalid", "no"));
    assert_eq!(verdict(&never, &bound, &UserInfo::new("bob"), json!({}), json!({})), Ok(()));
    // extra is absent for a user without it: a condition reading it fails
    let reads_extra = json!({"matchConditions": [{"name": "x", "expression": "size(request.userInfo.extra) > 0"}]});
    let failing = [policy("p", json!([{"expression": "true"}]), reads_extra.clone())];
    let Err(error) = verdict(&failing, &bound, &alice, json!({}), json!({})) else { panic!("Fail denies") };
    assert_eq!(
        error.message, "expression 'size(request.userInfo.extra) > 0' resulted in error: No such key: extra",
        "{error:?}"
    );
    let mut ignore = reads_extra;
    ignore["failurePolicy"] = json!("Ignore");
    let ignored = [policy("p", json!([{"expression": "false"}]), ignore)];
    assert_eq!(verdict(&ignored, &bound, &alice, json!({}), json!({})), Ok(()), "Ignore skips the policy");
}

#[test]
fn the_message_is_the_message_expression_else_the_message_else_the_expression() {
    let bound = [binding("b", "p", &["Deny"])];
    let admin = UserInfo::admin();
    let denied = |validation: Value| {
        let policies = [policy("p", json!([validation]), json!({}))];
        verdict(&policies, &bound, &admin, json!({}), json!({})).unwrap_err()
    };
    let by_expression = denied(json!({"expression": "false", "message": "static",
        "messageExpression": "'node ' + object.metadata.name + ' by ' + request.userInfo.username"}));
    assert_eq!(by_expression.message, "node n1 by system:admin");
    assert_eq!(
        by_expression.text(),
        "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: node n1 by system:admin"
    );
    // not a string, empty or multi-line: the message, else the expression
    for unusable in ["1", "'  '", "'a\\nb'", "object.missing"] {
        let validation = json!({"expression": "false", "message": " static ", "messageExpression": unusable});
        assert_eq!(denied(validation).message, "static", "{unusable}");
    }
    assert_eq!(denied(json!({"expression": " 1 == 2 "})).message, "failed expression: 1 == 2");
    // the reason sets the code
    let forbidden = denied(json!({"expression": "false", "reason": "Forbidden"}));
    assert_eq!((forbidden.reason, forbidden.code()), ("Forbidden", 403));
    let invalid = denied(json!({"expression": "false"}));
    assert_eq!((invalid.reason, invalid.code()), ("Invalid", 422));
}

#[test]
fn validations_run_in_order_and_errors_deny_under_fail() {
    let bound = [binding("b", "p", &["Deny"])];
    let admin = UserInfo::admin();
    let policies = [policy(
        "p",
        json!([
            {"expression": "true"},
            {"expression": "object.metadata.name == 'n2'", "message": "first"},
            {"expression": "false", "message": "second"},
        ]),
        json!({}),
    )];
    assert_eq!(verdict(&policies, &bound, &admin, json!({}), json!({})), denial("b", "Invalid", "first"));
    let not_bool = [policy("p", json!([{"expression": "'yes'"}]), json!({}))];
    let Err(error) = verdict(&not_bool, &bound, &admin, json!({}), json!({})) else { panic!("a string is no verdict") };
    assert!(error.message.starts_with("expression ''yes'' resulted in error: expected a bool"), "{error:?}");
    let bad = [policy("p", json!([{"expression": "object.metadata.name =="}]), json!({}))];
    let Err(error) = verdict(&bad, &bound, &admin, json!({}), json!({})) else { panic!("not CEL") };
    assert!(error.message.starts_with("compilation failed: "), "{error:?}");
    let with_params = [policy("p", json!([{"expression": "true"}]), json!({"paramKind": {"kind": "ConfigMap"}}))];
    assert!(verdict(&with_params, &bound, &admin, json!({}), json!({})).is_err(), "paramKind is unsupported");
}

#[test]
fn variables_compose_and_macros_compare_old_and_new() {
    let changed = json!({
        "variables": [
            {"name": "old", "expression": "has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}"},
            {"name": "new", "expression": "has(object.metadata.annotations) ? object.metadata.annotations : {}"},
            {"name": "changed", "expression":
                "variables.new.filter(k, !(k in variables.old) || variables.new[k] != variables.old[k]) + variables.old.filter(k, !(k in variables.new))"},
        ],
    });
    let policies = [policy(
        "p",
        json!([{"expression": "variables.changed.all(k, k in ['a', 'b'])",
            "messageExpression": "'changed: ' + variables.changed.filter(k, !(k in ['a', 'b'])).join(', ')"}]),
        changed,
    )];
    let bound = [binding("b", "p", &["Deny"])];
    let admin = UserInfo::admin();
    let cases = [
        (json!({"a": "1"}), json!({"a": "2", "b": "1"}), Ok(())),
        (json!({"a": "1", "x": "1"}), json!({"x": "1"}), Ok(())),
        (json!(null), json!({"a": "1"}), Ok(())),
        (json!({"x": "1"}), json!({"x": "2"}), denial("b", "Invalid", "changed: x")),
        (json!({"x": "1", "y": "1"}), json!(null), denial("b", "Invalid", "changed: x, y")),
        (json!({"z": "1"}), json!({"z": "1", "b": "1"}), Ok(())),
    ];
    for (old, new, expected) in cases {
        let verdict = verdict(&policies, &bound, &admin, old.clone(), new.clone());
        let (mut a, mut b) = (verdict.clone(), expected.clone());
        // the order of a map's keys is not CEL's to keep: compare the key sets
        if let (Err(x), Err(y)) = (&mut a, &mut b) {
            let sorted = |m: &str| {
                let mut keys: Vec<&str> = m.trim_start_matches("changed: ").split(", ").collect();
                keys.sort_unstable();
                keys.join(", ")
            };
            (x.message, y.message) = (sorted(&x.message), sorted(&y.message));
        }
        assert_eq!(a, b, "{old} -> {new}");
    }
}

#[test]
fn the_request_is_the_admission_request_as_cel_sees_it() {
    let rt = nodes();
    let old = node("n1", json!({}));
    let user = UserInfo::service_account("ns", "sa").on_node("n1");
    let request = Request {
        rt: &rt,
        operation: Operation::Update,
        namespace: "",
        name: "n1",
        subresource: Some("status"),
        object: node("n1", json!({})),
        old: Some(&old),
        user: &user,
    };
    assert_eq!(
        admission_request(&request),
        json!({
            "kind": {"group": "", "version": "v1", "kind": "Node"},
            "resource": {"group": "", "version": "v1", "resource": "nodes"},
            "requestKind": {"group": "", "version": "v1", "kind": "Node"},
            "requestResource": {"group": "", "version": "v1", "resource": "nodes"},
            "subResource": "status", "requestSubResource": "status",
            "name": "n1", "operation": "UPDATE", "dryRun": false,
            "userInfo": {
                "username": "system:serviceaccount:ns:sa",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated"],
                "extra": {"authentication.kubernetes.io/node-name": ["n1"]},
            },
        })
    );
    assert_eq!(to_cel(&json!(3)), cel::Value::Int(3), "integers are int, as on the real server");
}
