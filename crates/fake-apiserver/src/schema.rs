//! Custom resources checked against their CRD's structural schema
//! (`spec.versions[].schema.openAPIV3Schema`), as a real apiserver checks them on every
//! create, update and patch: unknown fields pruned (or, with `fieldValidation=Strict`,
//! refused; with `Warn`, the default, reported in a `Warning` header), `null` dropped where
//! the schema does not say `nullable`, then types, `required`, `enum`, `minimum`/
//! `maximum`, `minLength`/`maxLength`, `minItems`/`maxItems` and
//! `x-kubernetes-int-or-string` checked, each failure a field error in the real server's
//! words (`spec.replicas: Invalid value: "two": spec.replicas in body must be of type
//! integer: "string"`). `x-kubernetes-preserve-unknown-fields` keeps unknown fields below
//! it; `metadata`, `apiVersion` and `kind` are the server's to check. Not checked:
//! `pattern`, `format`, CEL rules (`x-kubernetes-validations`), list types.
//!
//! Built-in kinds are decoded as their k8s-openapi types, as the real server decodes a
//! request body into its Go type before anything else: a wrong type (`replicas: "two"`)
//! or a missing required field is a 400 saying the object cannot be handled, so a test
//! cannot pass on an object a real cluster refuses. (The real server reports missing
//! required fields at validation, as 422; here they are refused at decoding.)

use serde_json::{Map, Value, json};

use crate::builtin_types::{WithType, with_type};
use crate::error::{ApiError, FieldCause};
use crate::resources::ResourceType;

/// `fieldValidation`: what to do with unknown fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

impl FieldValidation {
    /// From the query parameter; the real server's default is `Warn`.
    pub fn from_query(value: Option<&str>) -> Result<Self, ApiError> {
        match value {
            None | Some("Warn") => Ok(Self::Warn),
            Some("Ignore") => Ok(Self::Ignore),
            Some("Strict") => Ok(Self::Strict),
            Some(other) => Err(ApiError::BadRequest(format!(
                "fieldValidation must be one of Ignore, Warn or Strict, got {other:?}"
            ))),
        }
    }
}

/// Checks (and prunes) `object` against `rt`'s schema, when it has one; the warnings to
/// answer with (unknown fields, under `Warn`).
pub fn check(rt: &ResourceType, object: &mut Value, validation: FieldValidation) -> Result<Vec<String>, ApiError> {
    let Some(schema) = rt.schema.as_deref() else {
        decode_builtin(rt, object)?;
        return Ok(Vec::new());
    };
    let mut walk = Walk::default();
    if let Some(fields) = object.as_object_mut() {
        for (key, value) in fields.iter_mut() {
            if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            match schema["properties"].get(key) {
                Some(property) => walk.value(key, property, value),
                None if preserves(schema) => {}
                None => walk.unknown.push(key.clone()),
            }
        }
        let unknown_top: Vec<String> = walk.unknown.iter().filter(|p| !p.contains('.')).cloned().collect();
        for key in unknown_top {
            fields.remove(&key);
        }
        walk.required(fields, schema, "");
    }
    let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
    if !walk.unknown.is_empty() && validation == FieldValidation::Strict {
        let fields: Vec<String> = walk.unknown.iter().map(|path| format!("unknown field \"{path}\"")).collect();
        return Err(ApiError::BadRequest(format!(
            "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
            rt.kind,
            rt.version,
            rt.kind,
            fields.join(", ")
        )));
    }
    if !walk.errors.is_empty() {
        return Err(ApiError::Invalid { kind: rt.kind.clone(), name, group: rt.group.clone(), causes: walk.errors });
    }
    Ok(match validation {
        FieldValidation::Warn => walk.unknown.iter().map(|path| format!("unknown field \"{path}\"")).collect(),
        _ => Vec::new(),
    })
}

/// Decodes a built-in kind's object as its k8s-openapi type (kinds without one: unchecked).
fn decode_builtin(rt: &ResourceType, object: &Value) -> Result<(), ApiError> {
    struct Decode<'a>(&'a Value);
    impl WithType for Decode<'_> {
        type Out = Result<(), String>;
        fn with<T: serde::de::DeserializeOwned + schemars::JsonSchema>(self) -> Self::Out {
            T::deserialize(self.0).map(|_| ()).map_err(|e| e.to_string())
        }
    }
    with_type(rt, Decode(object)).unwrap_or(Ok(())).map_err(|error| {
        ApiError::BadRequest(format!(
            "{} in version \"{}\" cannot be handled as a {}: {error}",
            rt.kind, rt.version, rt.kind
        ))
    })
}

fn preserves(schema: &Value) -> bool {
    schema["x-kubernetes-preserve-unknown-fields"].as_bool() == Some(true)
}

#[derive(Default)]
struct Walk {
    errors: Vec<FieldCause>,
    /// Paths of pruned fields.
    unknown: Vec<String>,
}

impl Walk {
    fn invalid(&mut self, path: &str, value: &Value, detail: &str) {
        self.errors.push(FieldCause::invalid(path, format!("Invalid value: {}: {detail}", shown(value))));
    }

    /// Checks `value` at `path` against `schema`, pruning below it.
    fn value(&mut self, path: &str, schema: &Value, value: &mut Value) {
        if schema["x-kubernetes-int-or-string"].as_bool() == Some(true) {
            if !(value.is_i64() || value.is_u64() || value.is_string() || value.is_null()) {
                let detail = format!("{path} in body must be of type integer,string: {}", type_name(value));
                self.invalid(path, value, &detail);
            }
            return;
        }
        if value.is_null() {
            return; // pruned by the caller unless nullable
        }
        if let Some(wanted) = schema["type"].as_str() {
            let fits = match wanted {
                "object" => value.is_object(),
                "array" => value.is_array(),
                "string" => value.is_string(),
                "integer" => value.is_i64() || value.is_u64(),
                "number" => value.is_number(),
                "boolean" => value.is_boolean(),
                _ => true,
            };
            if !fits {
                let detail = format!("{path} in body must be of type {wanted}: {}", type_name(value));
                self.invalid(path, value, &detail);
                return;
            }
        }
        if let Some(allowed) = schema["enum"].as_array()
            && !allowed.contains(value)
        {
            let supported: Vec<String> = allowed.iter().map(shown).collect();
            self.errors.push(FieldCause {
                reason: "FieldValueNotSupported",
                field: path.into(),
                message: format!("Unsupported value: {}: supported values: {}", shown(value), supported.join(", ")),
            });
        }
        self.bounds(path, schema, value);
        match value {
            Value::Object(fields) => self.object(path, schema, fields),
            Value::Array(items) => {
                if let Some(item_schema) = schema.get("items") {
                    for (i, item) in items.iter_mut().enumerate() {
                        self.value(&format!("{path}[{i}]"), item_schema, item);
                    }
                    if !nullable(item_schema) {
                        items.retain(|item| !item.is_null());
                    }
                }
            }
            _ => {}
        }
    }

    fn object(&mut self, path: &str, schema: &Value, fields: &mut Map<String, Value>) {
        let properties = schema["properties"].as_object();
        let additional = schema.get("additionalProperties").filter(|a| a.is_object());
        let mut pruned = Vec::new();
        for (key, child) in fields.iter_mut() {
            let child_path = format!("{path}.{key}");
            match (properties.and_then(|p| p.get(key)), additional) {
                (Some(property), _) | (None, Some(property)) => {
                    if child.is_null() && !nullable(property) {
                        pruned.push(key.clone());
                    } else {
                        self.value(&child_path, property, child);
                    }
                }
                (None, None) if preserves(schema) || (properties.is_none() && schema["type"] != "object") => {}
                (None, None) => {
                    self.unknown.push(child_path);
                    pruned.push(key.clone());
                }
            }
        }
        for key in pruned {
            fields.remove(&key);
        }
        self.required(fields, schema, path);
    }

    fn required(&mut self, fields: &Map<String, Value>, schema: &Value, path: &str) {
        for key in schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            if !fields.contains_key(key) {
                let field = if path.is_empty() { key.to_string() } else { format!("{path}.{key}") };
                self.errors.push(FieldCause { reason: "FieldValueRequired", field, message: "Required value".into() });
            }
        }
    }

    fn bounds(&mut self, path: &str, schema: &Value, value: &Value) {
        let number = value.as_f64();
        if let (Some(n), Some(min)) = (number, schema["minimum"].as_f64())
            && n < min
        {
            let detail = format!("{path} in body should be greater than or equal to {}", schema["minimum"]);
            self.invalid(path, value, &detail);
        }
        if let (Some(n), Some(max)) = (number, schema["maximum"].as_f64())
            && n > max
        {
            let detail = format!("{path} in body should be less than or equal to {}", schema["maximum"]);
            self.invalid(path, value, &detail);
        }
        let length = |v: &Value| v.as_str().map(|s| s.chars().count()).or(v.as_array().map(Vec::len));
        for (key, longer, noun) in [
            ("minLength", false, "chars long"),
            ("maxLength", true, "chars long"),
            ("minItems", false, "items"),
            ("maxItems", true, "items"),
        ] {
            let (Some(len), Some(limit)) = (length(value), schema[key].as_u64()) else { continue };
            let len = len as u64;
            if (longer && len > limit) || (!longer && len < limit) {
                let detail = if noun == "items" {
                    let (should, word) = if longer { ("at most", "items") } else { ("at least", "items") };
                    format!("{path} in body should have {should} {limit} {word}")
                } else {
                    let should = if longer { "at most" } else { "at least" };
                    format!("{path} in body should be {should} {limit} {noun}")
                };
                self.invalid(path, value, &detail);
            }
        }
    }
}

fn nullable(schema: &Value) -> bool {
    schema["nullable"].as_bool() == Some(true)
}

/// A value as field errors show it: strings quoted, objects and arrays by type.
fn shown(value: &Value) -> String {
    match value {
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

fn type_name(value: &Value) -> String {
    json!(match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn grid_type() -> ResourceType {
        let mut rt = ResourceType::new("superedge.io", "v1", "deploymentgrids", "DeploymentGrid", true, true);
        rt.schema = Some(Arc::new(json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "required": ["gridUniqKey"], "properties": {
                    "gridUniqKey": {"type": "string", "minLength": 1},
                    "replicas": {"type": "integer", "minimum": 0, "format": "int32"},
                    "mode": {"type": "string", "enum": ["a", "b"]},
                    "port": {"x-kubernetes-int-or-string": true},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "items": {"type": "array", "maxItems": 2, "items": {"type": "object", "properties": {
                        "name": {"type": "string"}}}},
                    "note": {"type": "string", "nullable": true},
                }},
                "status": {"type": "object", "properties": {"units": {"type": "integer"}}},
            },
        })));
        rt
    }

    fn grid(spec: Value) -> Value {
        json!({"apiVersion": "superedge.io/v1", "kind": "DeploymentGrid", "metadata": {"name": "echo"}, "spec": spec})
    }

    fn message(error: ApiError) -> String {
        error.to_string()
    }

    #[test]
    fn a_valid_object_passes_unchanged_and_unknown_fields_are_pruned_with_a_warning() {
        let rt = grid_type();
        let valid = grid(json!({"gridUniqKey": "zone1", "replicas": 2, "mode": "a", "port": "http",
            "labels": {"x": "y"}, "free": {"anything": [1, {"goes": true}]}, "items": [{"name": "n"}], "note": null}));
        let mut object = valid.clone();
        assert_eq!(check(&rt, &mut object, FieldValidation::Warn), Ok(Vec::new()));
        assert_eq!(object, valid, "nullable null kept, preserved fields kept");

        let mut object = grid(json!({"gridUniqKey": "zone1", "replicaz": 2, "items": [{"name": "n", "extra": 1}],
            "replicas": null}));
        object["bogus"] = json!(1);
        let warnings = check(&rt, &mut object, FieldValidation::Warn).unwrap();
        assert_eq!(
            warnings,
            ["unknown field \"bogus\"", "unknown field \"spec.items[0].extra\"", "unknown field \"spec.replicaz\""]
        );
        assert_eq!(object, grid(json!({"gridUniqKey": "zone1", "items": [{"name": "n"}]})), "pruned, null dropped");
    }

    #[test]
    fn strict_validation_refuses_unknown_fields_and_ignore_drops_them_silently() {
        let rt = grid_type();
        let mut object = grid(json!({"gridUniqKey": "zone1", "replicaz": 2}));
        assert_eq!(
            check(&rt, &mut object, FieldValidation::Strict).map_err(message),
            Err("DeploymentGrid in version \"v1\" cannot be handled as a DeploymentGrid: strict decoding error: unknown field \"spec.replicaz\"".into())
        );
        let mut object = grid(json!({"gridUniqKey": "zone1", "replicaz": 2}));
        assert_eq!(check(&rt, &mut object, FieldValidation::Ignore), Ok(Vec::new()));
        assert_eq!(object, grid(json!({"gridUniqKey": "zone1"})));
    }

    #[test]
    fn each_violation_is_a_field_error_in_the_real_servers_words() {
        let rt = grid_type();
        let cases = [
            (
                json!({"gridUniqKey": "zone1", "replicas": "two"}),
                "spec.replicas",
                "DeploymentGrid.superedge.io \"echo\" is invalid: spec.replicas: Invalid value: \"two\": spec.replicas in body must be of type integer: \"string\"",
            ),
            (
                json!({}),
                "spec.gridUniqKey",
                "DeploymentGrid.superedge.io \"echo\" is invalid: spec.gridUniqKey: Required value",
            ),
            (
                json!({"gridUniqKey": "zone1", "mode": "c"}),
                "spec.mode",
                "DeploymentGrid.superedge.io \"echo\" is invalid: spec.mode: Unsupported value: \"c\": supported values: \"a\", \"b\"",
            ),
            (
                json!({"gridUniqKey": "zone1", "replicas": -1}),
                "spec.replicas",
                "DeploymentGrid.superedge.io \"echo\" is invalid: spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
            ),
            (
                json!({"gridUniqKey": ""}),
                "spec.gridUniqKey",
                "DeploymentGrid.superedge.io \"echo\" is invalid: spec.gridUniqKey: Invalid value: \"\": spec.gridUniqKey in body should be at least 1 chars long",
            ),
            (
                json!({"gridUniqKey": "zone1", "port": 1.5}),
                "spec.port",
                "DeploymentGrid.superedge.io \"echo\" is invalid: spec.port: Invalid value: 1.5: spec.port in body must be of type integer,string: \"number\"",
            ),
            (
                json!({"gridUniqKey": "zone1", "labels": {"x": 1}}),
                "spec.labels.x",
                "DeploymentGrid.superedge.io \"echo\" is invalid: spec.labels.x: Invalid value: 1: spec.labels.x in body must be of type string: \"integer\"",
            ),
            (
                json!({"gridUniqKey": "zone1", "items": [{}, {}, {}]}),
                "spec.items",
                "DeploymentGrid.superedge.io \"echo\" is invalid: spec.items: Invalid value: \"array\": spec.items in body should have at most 2 items",
            ),
        ];
        for (spec, field, want) in cases {
            let error = check(&rt, &mut grid(spec.clone()), FieldValidation::Warn).unwrap_err();
            assert_eq!(error.code(), 422, "{spec}");
            let ApiError::Invalid { causes, .. } = &error else { panic!("{error:?}") };
            assert_eq!(causes.iter().map(|c| c.field.as_str()).collect::<Vec<_>>(), [field], "{spec}");
            assert_eq!(error.to_string(), want, "{spec}");
        }
        // several at once: one message listing them
        let error = check(&rt, &mut grid(json!({"replicas": "x"})), FieldValidation::Warn).unwrap_err();
        assert_eq!(
            error.to_string(),
            "DeploymentGrid.superedge.io \"echo\" is invalid: [spec.replicas: Invalid value: \"x\": spec.replicas in body must be of type integer: \"string\", spec.gridUniqKey: Required value]"
        );
    }

    #[test]
    fn built_in_kinds_are_decoded_as_their_types() {
        let rt = ResourceType::new("apps", "v1", "deployments", "Deployment", true, true);
        let good = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
            "spec": {"replicas": 2, "selector": {}, "template": {}}, "unknown": "ignored"});
        assert_eq!(check(&rt, &mut good.clone(), FieldValidation::Strict), Ok(Vec::new()));
        let mut bad = good.clone();
        bad["spec"]["replicas"] = json!("two");
        let error = check(&rt, &mut bad, FieldValidation::Warn).unwrap_err();
        assert_eq!(error.code(), 400);
        assert!(
            error.to_string().starts_with("Deployment in version \"v1\" cannot be handled as a Deployment: invalid type: string \"two\", expected i32"),
            "{error}"
        );
        // a kind without a Rust type here is not checked
        let rt = ResourceType::new("networking.k8s.io", "v1", "servicecidrs", "ServiceCIDR", false, true);
        assert_eq!(check(&rt, &mut json!({"spec": 7}), FieldValidation::Strict), Ok(Vec::new()));
    }
}
