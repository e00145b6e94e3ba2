//! ValidatingAdmissionPolicy (`admissionregistration.k8s.io/v1`): which policies and
//! bindings select a request, their CEL `matchConditions`, `variables` and `validations`
//! evaluated as the real server evaluates them, and the first denial in its words.
//!
//! Pure: the caller hands in the stored policies and bindings and the request; nothing
//! here reads the store or does I/O. It must never admit what the real server would
//! refuse under a policy both accept: what it cannot evaluate (`paramKind`, a CEL function
//! of Kubernetes' libraries the `cel` crate lacks) is an error, which `failurePolicy`
//! (default Fail) turns into a denial, as on the real server.
//!
//! Approximations: expressions are not type-checked when the policy is stored (an
//! expression the real server would refuse to store fails here when evaluated); no cost
//! budget; `variables` are evaluated in order, once each, before the validations (the real
//! server evaluates them lazily: the same results for expressions without side effects);
//! only the `Deny` validation action acts (`Warn` and `Audit` record nothing);
//! `auditAnnotations`, `authorizer` and `paramKind` are not supported.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use serde_json::{Value, json};

use crate::admission_request::Request;
use crate::matching;

/// A policy's refusal: what the Status of the response is made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    pub policy: String,
    /// `None` when the policy itself could not be used (a configuration error).
    pub binding: Option<String>,
    /// The Status reason: the validation's `reason`, else `Invalid`.
    pub reason: &'static str,
    /// The validation's message (or the evaluation error).
    pub message: String,
}

impl Denial {
    /// As the real server words it: `ValidatingAdmissionPolicy 'p' with binding 'b' denied
    /// request: <message>`.
    pub fn text(&self) -> String {
        match &self.binding {
            Some(binding) => format!(
                "ValidatingAdmissionPolicy '{}' with binding '{binding}' denied request: {}",
                self.policy, self.message
            ),
            None => format!("ValidatingAdmissionPolicy '{}' denied request: {}", self.policy, self.message),
        }
    }

    /// The HTTP status code of `reason`, as the real server maps it.
    pub fn code(&self) -> u16 {
        match self.reason {
            "Forbidden" => 403,
            "Unauthorized" => 401,
            "RequestEntityTooLarge" => 413,
            _ => 422,
        }
    }
}

/// The longest message a `messageExpression` may produce (the real server's limit).
const MAX_MESSAGE_BYTES: usize = 5 * 1024;

/// The first denial of the policies (in name order) and their bindings (in name order)
/// that select `request`; `namespace_labels` are those of the request's namespace (`None`
/// for a cluster-scoped resource).
pub fn check(
    policies: &[Value],
    bindings: &[Value],
    request: &Request<'_>,
    namespace_labels: Option<&Value>,
) -> Result<(), Denial> {
    let mut policies: Vec<&Value> = policies.iter().collect();
    policies.sort_by_key(|p| name_of(p));
    let mut bindings: Vec<&Value> = bindings.iter().collect();
    bindings.sort_by_key(|b| name_of(b));
    let mut inputs = None;
    for policy in policies {
        let spec = &policy["spec"];
        let constraints = &spec["matchConstraints"];
        if !selects(constraints, request, namespace_labels, true) {
            continue;
        }
        let name = name_of(policy);
        let fail_closed = spec["failurePolicy"].as_str() != Some("Ignore");
        let bound = bindings.iter().filter(|b| b["spec"]["policyName"].as_str() == Some(name));
        for binding in bound {
            let binding_spec = &binding["spec"];
            if binding_spec["matchResources"].is_object()
                && !selects(&binding_spec["matchResources"], request, namespace_labels, false)
            {
                continue;
            }
            let deny = |message: String, reason: &'static str| Denial {
                policy: name.to_string(),
                binding: Some(name_of(binding).to_string()),
                reason,
                message,
            };
            if !spec["paramKind"].is_null() {
                if fail_closed {
                    let message = "failed to configure binding: paramKind is not supported by this in-repo API server";
                    return Err(deny(message.into(), "Invalid"));
                }
                continue;
            }
            let denies = binding_spec["validationActions"].as_array().is_some_and(|a| a.iter().any(|v| v == "Deny"));
            if !denies {
                continue;
            }
            let inputs = inputs.get_or_insert_with(|| Inputs::new(request));
            if let Some((message, reason)) = evaluate(spec, inputs, fail_closed) {
                return Err(deny(message, reason));
            }
        }
    }
    Ok(())
}

fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

/// Whether `MatchResources` selects the request. A policy's `resourceRules` must list it;
/// a binding's narrow the policy's only when given.
fn selects(resources: &Value, request: &Request<'_>, namespace_labels: Option<&Value>, rules_required: bool) -> bool {
    let included = match resources["resourceRules"].as_array() {
        Some(rules) if !rules.is_empty() => rules.iter().any(|rule| matching::rule_matches(rule, request)),
        _ => !rules_required,
    };
    let excluded = resources["excludeResourceRules"]
        .as_array()
        .is_some_and(|rules| rules.iter().any(|rule| matching::rule_matches(rule, request)));
    included
        && !excluded
        && matching::selectors_match(
            &resources["objectSelector"],
            &resources["namespaceSelector"],
            request,
            namespace_labels,
        )
}

/// The variables every expression sees, converted once per request.
struct Inputs {
    object: cel::Value,
    old_object: cel::Value,
    request: cel::Value,
}

impl Inputs {
    fn new(request: &Request<'_>) -> Self {
        Self {
            object: to_cel(&request.object),
            old_object: request.old.map_or(cel::Value::Null, to_cel),
            request: to_cel(&admission_request(request)),
        }
    }
}

/// The `request` variable: an AdmissionRequest as the real server converts it for CEL
/// (empty fields absent).
fn admission_request(request: &Request<'_>) -> Value {
    let rt = request.rt;
    let gvk = json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
    let gvr = json!({"group": rt.group, "version": rt.version, "resource": rt.plural});
    let name = if request.name.is_empty() { request.object["metadata"]["name"].as_str() } else { Some(request.name) };
    let mut out = json!({
        "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "operation": request.operation.as_str(),
        "userInfo": request.user.to_json(),
        "dryRun": false,
    });
    if let Some(name) = name.filter(|n| !n.is_empty()) {
        out["name"] = json!(name);
    }
    if rt.namespaced && !request.namespace.is_empty() {
        out["namespace"] = json!(request.namespace);
    }
    if let Some(subresource) = request.subresource {
        out["subResource"] = json!(subresource);
        out["requestSubResource"] = json!(subresource);
    }
    out
}

/// JSON as CEL values: integers as `int` (as the real server's unstructured objects are),
/// other numbers as `double`, and a field holding `null` absent (the real server decodes
/// objects into their types, where null is unset).
fn to_cel(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => cel::Value::Int(i),
            None => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(fields) => {
            let map: HashMap<String, cel::Value> =
                fields.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), to_cel(v))).collect();
            cel::Value::from(map)
        }
    }
}

/// The CEL environment: the standard library and the strings extension (`join`,
/// `split`, `lowerAscii`...), which Kubernetes also has.
static ENV: LazyLock<Arc<cel::Env>> = LazyLock::new(|| {
    let mut env = cel::Env::stdlib();
    // the standard extension registers cleanly on the standard library
    let _ = env.add_extension(cel::extensions::strings);
    Arc::new(env)
});

/// One expression's result; errors worded as the real server's.
fn eval(expression: &str, inputs: &Inputs, variables: &HashMap<String, cel::Value>) -> Result<cel::Value, String> {
    let program = ENV.compile(expression).map_err(|e| format!("compilation failed: {e}"))?;
    let mut context = cel::Context::with_env(ENV.clone());
    context.add_variable_from_value("object", inputs.object.clone());
    context.add_variable_from_value("oldObject", inputs.old_object.clone());
    context.add_variable_from_value("request", inputs.request.clone());
    context.add_variable_from_value("params", cel::Value::Null);
    context.add_variable_from_value("namespaceObject", cel::Value::Null);
    context.add_variable_from_value("variables", variables.clone());
    program.execute(&context).map_err(|e| format!("expression '{expression}' resulted in error: {e}"))
}

fn eval_bool(expression: &str, inputs: &Inputs, variables: &HashMap<String, cel::Value>) -> Result<bool, String> {
    match eval(expression, inputs, variables)? {
        cel::Value::Bool(b) => Ok(b),
        other => Err(format!("expression '{expression}' resulted in error: expected a bool, got {other:?}")),
    }
}

/// A policy's verdict on the request: `None` to admit, else the denial's message and
/// reason.
fn evaluate(spec: &Value, inputs: &Inputs, fail_closed: bool) -> Option<(String, &'static str)> {
    let mut variables = HashMap::new();
    // every condition must hold; a false one wins over errors, which follow failurePolicy
    let mut errors = Vec::new();
    for condition in spec["matchConditions"].as_array().into_iter().flatten() {
        match eval_bool(condition["expression"].as_str().unwrap_or_default(), inputs, &variables) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(error) => errors.push(error),
        }
    }
    if !errors.is_empty() {
        return fail_closed.then(|| (errors.join(", "), "Invalid"));
    }
    // a variable that fails is left out: the expressions using it fail with its error
    let mut failed: Vec<(String, String)> = Vec::new();
    for variable in spec["variables"].as_array().into_iter().flatten() {
        let name = variable["name"].as_str().unwrap_or_default().to_string();
        match eval(variable["expression"].as_str().unwrap_or_default(), inputs, &variables) {
            Ok(value) => {
                variables.insert(name, value);
            }
            Err(error) => failed.push((name, error)),
        }
    }
    for validation in spec["validations"].as_array().into_iter().flatten() {
        let expression = validation["expression"].as_str().unwrap_or_default();
        match eval_bool(expression, inputs, &variables) {
            Ok(true) => {}
            Ok(false) => return Some((message(validation, inputs, &variables), reason(validation))),
            Err(error) if fail_closed => {
                let used = failed.iter().find(|(name, _)| expression.contains(&format!("variables.{name}")));
                return Some((used.map_or(error, |(_, e)| e.clone()), "Invalid"));
            }
            Err(_) => {}
        }
    }
    None
}

/// A failed validation's message: its `messageExpression`'s string when that is usable
/// (non-empty, one line, at most 5 KiB), else its `message`, else the expression.
fn message(validation: &Value, inputs: &Inputs, variables: &HashMap<String, cel::Value>) -> String {
    let from_expression =
        validation["messageExpression"].as_str().and_then(|expression| match eval(expression, inputs, variables) {
            Ok(cel::Value::String(s)) => Some(s.trim().to_string()),
            _ => None,
        });
    if let Some(message) =
        from_expression.filter(|m| !m.is_empty() && !m.contains('\n') && m.len() <= MAX_MESSAGE_BYTES)
    {
        return message;
    }
    match validation["message"].as_str().map(str::trim).filter(|m| !m.is_empty()) {
        Some(message) => message.to_string(),
        None => format!("failed expression: {}", validation["expression"].as_str().unwrap_or_default().trim()),
    }
}

fn reason(validation: &Value) -> &'static str {
    match validation["reason"].as_str() {
        Some("Forbidden") => "Forbidden",
        Some("Unauthorized") => "Unauthorized",
        Some("RequestEntityTooLarge") => "RequestEntityTooLarge",
        _ => "Invalid",
    }
}

#[cfg(test)]
mod tests;
