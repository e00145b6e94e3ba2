//! The tables against two independent sources:
//!
//! - coverage: every property of the project's k8s-openapi types (their JSON schemas) has
//!   a field of a matching kind at the same place, so no field an object can hold is
//!   dropped from protobuf answers;
//! - field numbers: a fully populated object of each kind, encoded by the tables, decodes
//!   through k8s-pb's generated messages (Kubernetes' own field numbers) back to the same
//!   JSON.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, Status};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::*;
use crate::protobuf::encode::{encode, list_meta, message_for};
use crate::protobuf::wire::put_bytes_field;

#[test]
fn fields_are_in_number_order_with_unique_numbers_and_names() {
    let mut seen = BTreeSet::new();
    let mut problems = Vec::new();
    let mut queue = vec![&SERVICE, &ENDPOINTS, &NODE, &ENDPOINT_SLICE, &LIST_META, &STATUS];
    while let Some(message) = queue.pop() {
        if !seen.insert(message.name) {
            continue;
        }
        for pair in message.fields.windows(2) {
            if pair[0].number >= pair[1].number {
                problems.push(format!("{}: {} after {}", message.name, pair[1].json, pair[0].json));
            }
        }
        let names: BTreeSet<_> = message.fields.iter().map(|field| field.json).collect();
        if names.len() != message.fields.len() {
            problems.push(format!("{}: a JSON name twice", message.name));
        }
        for field in message.fields {
            if field.number == 0 || field.number > 0x1fff_ffff {
                problems.push(format!("{}.{}: number {}", message.name, field.json, field.number));
            }
            match field.kind {
                FieldKind::Msg(nested) => queue.push(nested),
                FieldKind::Map(FieldKind::Msg(nested)) => queue.push(nested),
                _ => {}
            }
        }
    }
    assert_eq!(problems, Vec::<String>::new());
}

// ---- the JSON schemas of k8s-openapi's types ----

/// A schema of `schemars::schema_for!`, its `$defs` resolved.
struct Schemas {
    root: Value,
}

/// What a JSON schema describes, in the terms of [`FieldKind`].
#[derive(Debug)]
enum Shape<'a> {
    Object(&'a serde_json::Map<String, Value>),
    Map(&'a Value),
    Array(&'a Value),
    Str,
    Bool,
    Int32,
    Int64,
    Time,
    IntOrString,
    Quantity,
    FieldsV1,
    Other(String),
}

impl Schemas {
    fn of<T: JsonSchema>() -> Self {
        Self { root: serde_json::to_value(schemars::schema_for!(T)).unwrap() }
    }

    fn shape<'a>(&'a self, node: &'a Value) -> Shape<'a> {
        let node = match node.get("$ref").and_then(Value::as_str) {
            Some(reference) => {
                let name = reference.strip_prefix("#/$defs/").unwrap_or_else(|| panic!("reference {reference}"));
                match name {
                    "io.k8s.apimachinery.pkg.apis.meta.v1.Time" => return Shape::Time,
                    "io.k8s.apimachinery.pkg.util.intstr.IntOrString" => return Shape::IntOrString,
                    "io.k8s.apimachinery.pkg.api.resource.Quantity" => return Shape::Quantity,
                    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1" => return Shape::FieldsV1,
                    _ => &self.root["$defs"][name],
                }
            }
            None => node,
        };
        match (node["type"].as_str(), node["format"].as_str()) {
            (Some("object"), _) if node["properties"].is_object() => {
                Shape::Object(node["properties"].as_object().unwrap())
            }
            (Some("object"), _) if node["additionalProperties"].is_object() => {
                Shape::Map(&node["additionalProperties"])
            }
            (Some("array"), _) => Shape::Array(&node["items"]),
            (Some("string"), None) => Shape::Str,
            (Some("boolean"), None) => Shape::Bool,
            (Some("integer"), Some("int32")) => Shape::Int32,
            (Some("integer"), Some("int64")) => Shape::Int64,
            _ => Shape::Other(node.to_string()),
        }
    }
}

fn describe(kind: &FieldKind) -> String {
    match kind {
        FieldKind::Msg(message) => message.name.to_owned(),
        FieldKind::Map(value) => format!("map of {}", describe(value)),
        other => format!("{other:?}"),
    }
}

/// Checks that `kind` (repeated or not) can hold everything `node` describes, at `path`.
struct Coverage<'s> {
    schemas: &'s Schemas,
    problems: Vec<String>,
    /// table fields the k8s-openapi types lack (newer Kubernetes versions)
    newer: BTreeSet<String>,
}

impl Coverage<'_> {
    fn check(&mut self, kind: &FieldKind, repeated: bool, node: &Value, path: &str) {
        let shape = self.schemas.shape(node);
        if repeated {
            match shape {
                Shape::Array(items) => self.check(kind, false, items, &format!("{path}[]")),
                other => self.problems.push(format!("{path}: repeated in the table, {other:?} in k8s-openapi")),
            }
            return;
        }
        match (kind, shape) {
            (FieldKind::Msg(message), Shape::Object(properties)) => {
                for (name, property) in properties {
                    if path.is_empty() && (name == "apiVersion" || name == "kind") {
                        continue;
                    }
                    let member = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
                    match message.field(name) {
                        Some(field) => self.check(&field.kind, field.repeated, property, &member),
                        None => self.problems.push(format!("{member}: missing from {}", message.name)),
                    }
                }
                for field in message.fields {
                    if !properties.contains_key(field.json) {
                        self.newer.insert(format!("{}.{}", message.name, field.json));
                    }
                }
            }
            (FieldKind::Map(value), Shape::Map(values)) => self.check(value, false, values, &format!("{path}[*]")),
            (FieldKind::Str, Shape::Str)
            | (FieldKind::Bool, Shape::Bool)
            | (FieldKind::Int32, Shape::Int32)
            | (FieldKind::Int64, Shape::Int64)
            | (FieldKind::Time, Shape::Time)
            | (FieldKind::IntOrString, Shape::IntOrString)
            | (FieldKind::Quantity, Shape::Quantity)
            | (FieldKind::FieldsV1, Shape::FieldsV1) => {}
            (kind, shape) => {
                self.problems.push(format!("{path}: {} in the table, {shape:?} in k8s-openapi", describe(kind)))
            }
        }
    }
}

#[test]
fn every_field_of_the_projects_kubernetes_types_has_a_protobuf_field() {
    fn cover<T: JsonSchema>(message: &'static Message, problems: &mut Vec<String>, newer: &mut BTreeSet<String>) {
        let schemas = Schemas::of::<T>();
        let mut coverage = Coverage { schemas: &schemas, problems: Vec::new(), newer: BTreeSet::new() };
        coverage.check(&FieldKind::Msg(message), false, &schemas.root, "");
        problems.extend(coverage.problems.into_iter().map(|problem| format!("{}: {problem}", message.name)));
        newer.extend(coverage.newer);
    }
    let mut problems = Vec::new();
    let mut newer = BTreeSet::new();
    cover::<Service>(&SERVICE, &mut problems, &mut newer);
    cover::<Endpoints>(&ENDPOINTS, &mut problems, &mut newer);
    cover::<Node>(&NODE, &mut problems, &mut newer);
    cover::<EndpointSlice>(&ENDPOINT_SLICE, &mut problems, &mut newer);
    cover::<ListMeta>(&LIST_META, &mut problems, &mut newer);
    cover::<Status>(&STATUS, &mut problems, &mut newer);
    assert_eq!(problems, Vec::<String>::new());
    // fields of Kubernetes 1.35's protos that k8s-openapi's v1_33 types do not have yet;
    // a JSON name misspelt in the table would show up here too
    assert_eq!(newer, BTreeSet::from(["core/v1 NodeStatus.declaredFeatures".to_owned()]));
}

// ---- fully populated objects, encoded and decoded by k8s-pb ----

/// Fills every property a schema describes with a value of its own: strings are their
/// path, numbers and times count up (some negative, some past 32 bits), booleans
/// alternate, arrays and maps get two elements.
struct Filler<'s> {
    schemas: &'s Schemas,
    counter: i64,
}

impl Filler<'_> {
    fn fill(&mut self, node: &Value, path: &str) -> Value {
        self.counter += 1;
        let n = self.counter;
        match self.schemas.shape(node) {
            Shape::Object(properties) => properties
                .iter()
                .filter(|(name, _)| !(path.is_empty() && (*name == "apiVersion" || *name == "kind")))
                .map(|(name, property)| {
                    let member = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
                    (name.clone(), self.fill(property, &member))
                })
                .collect(),
            Shape::Map(values) => (0..2)
                .map(|index| {
                    let key = format!("key-{}-{n}", 1 - index);
                    let value = self.fill(values, &format!("{path}[{key}]"));
                    (key, value)
                })
                .collect(),
            Shape::Array(items) => (0..2).map(|index| self.fill(items, &format!("{path}[{index}]"))).collect(),
            Shape::Str => json!(path),
            Shape::Bool => json!(n % 2 == 0),
            Shape::Int32 => match n % 3 {
                0 => json!(-7919 * n),
                1 => json!(131 * n),
                _ => json!(1_000_000 + n),
            },
            Shape::Int64 => match n % 3 {
                0 => json!(-10_000_000_019 * n),
                1 => json!(4_000_000_007 * n),
                _ => json!(n),
            },
            Shape::Time => {
                let time = jiff::Timestamp::from_second(1_600_000_000 + 86_461 * n).unwrap();
                json!(time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
            }
            Shape::IntOrString if n % 2 == 0 => json!(7 * n),
            Shape::IntOrString => json!(format!("port-{n}")),
            Shape::Quantity => json!(format!("{n}Mi")),
            Shape::FieldsV1 => json!({"f:metadata": {format!("f:{path}"): {}}, ".": {}}),
            Shape::Other(schema) => panic!("{path}: no value for schema {schema}"),
        }
    }
}

/// A `T` with every field set, as k8s-openapi serializes it.
fn populated<T: JsonSchema + DeserializeOwned + Serialize>() -> Value {
    let schemas = Schemas::of::<T>();
    let generated = Filler { schemas: &schemas, counter: 0 }.fill(&schemas.root, "");
    let typed: T = serde_json::from_value(generated.clone()).unwrap();
    let normalized = serde_json::to_value(&typed).unwrap();
    // k8s-openapi must have kept every generated value, or the test covers less than it says
    let mut without_type_meta = normalized.clone();
    if let Some(members) = without_type_meta.as_object_mut() {
        members.remove("apiVersion");
        members.remove("kind");
    }
    assert_eq!(differences(&generated, &without_type_meta), Vec::<String>::new(), "k8s-openapi kept all");
    normalized
}

/// The paths where two JSON values differ.
fn differences(left: &Value, right: &Value) -> Vec<String> {
    fn walk(path: &str, left: &Value, right: &Value, out: &mut Vec<String>) {
        match (left, right) {
            (Value::Object(l), Value::Object(r)) => {
                let keys: BTreeSet<&String> = l.keys().chain(r.keys()).collect();
                for key in keys {
                    let (l, r) = (l.get(key).unwrap_or(&Value::Null), r.get(key).unwrap_or(&Value::Null));
                    walk(&format!("{path}.{key}"), l, r, out);
                }
            }
            (Value::Array(l), Value::Array(r)) if l.len() == r.len() => {
                for (index, (l, r)) in l.iter().zip(r).enumerate() {
                    walk(&format!("{path}[{index}]"), l, r, out);
                }
            }
            (l, r) if l != r => out.push(format!("{path}: {l} != {r}")),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk("", left, right, &mut out);
    out
}

fn round_trip<T: JsonSchema + DeserializeOwned + Serialize>(api_version: &str, kind: &str) -> (Value, Vec<u8>) {
    let object = populated::<T>();
    let message = message_for(api_version, kind).unwrap();
    let encoded = encode(message, &object);
    assert_eq!(encoded.dropped, Vec::<String>::new(), "{kind}: nothing dropped");
    let decoded = edgegrid_testing::protobuf::object_json(api_version, kind, &encoded.bytes);
    assert_eq!(differences(&object, &decoded), Vec::<String>::new(), "{kind}: decoded by k8s-pb as encoded");
    (object, encoded.bytes)
}

#[test]
fn a_full_service_decodes_as_encoded() {
    round_trip::<Service>("v1", "Service");
}

#[test]
fn full_endpoints_decode_as_encoded() {
    round_trip::<Endpoints>("v1", "Endpoints");
}

#[test]
fn a_full_node_decodes_as_encoded() {
    round_trip::<Node>("v1", "Node");
}

#[test]
fn a_full_endpoint_slice_decodes_as_encoded() {
    round_trip::<EndpointSlice>("discovery.k8s.io/v1", "EndpointSlice");
}

#[test]
fn a_full_status_decodes_as_encoded() {
    round_trip::<Status>("v1", "Status");
}

#[test]
fn a_list_with_full_list_meta_decodes_as_encoded() {
    let metadata = populated::<ListMeta>();
    let (service, service_bytes) = round_trip::<Service>("v1", "Service");
    // a list's raw message: metadata = 1, items = 2 (the envelope module writes the same)
    let mut raw = Vec::new();
    put_bytes_field(&mut raw, 1, &list_meta(&metadata));
    put_bytes_field(&mut raw, 2, &service_bytes);
    put_bytes_field(&mut raw, 2, &service_bytes);
    let expected = json!({
        "apiVersion": "v1", "kind": "ServiceList", "metadata": metadata, "items": [service.clone(), service],
    });
    let decoded = edgegrid_testing::protobuf::list_json("v1", "ServiceList", &raw);
    assert_eq!(differences(&expected, &decoded), Vec::<String>::new());
}
