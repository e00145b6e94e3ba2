//! Sets of fields, as `managedFields[].fieldsV1` writes them: `f:<name>` for an object's
//! field, `k:<key JSON>` for a list-map item, `v:<value JSON>` for a set member, and
//! `".": {}` where a node with members is itself owned (a list-map item).

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Map, Value};

use super::shape::{self, Shape};

/// One step into a value.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Element {
    Field(String),
    /// A list-map item, by its key fields (JSON text of an object, keys sorted).
    Key(String),
    /// A set member (its JSON text).
    Value(String),
}

/// A set of fields: a tree whose nodes are owned where `own` is set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    pub own: bool,
    pub members: BTreeMap<Element, FieldSet>,
}

/// Identity fields no manager owns.
const UNOWNED: [&str; 2] = ["apiVersion", "kind"];
const UNOWNED_METADATA: [&str; 11] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "generateName",
];

/// What a kind's values look like to field ownership.
#[derive(Clone, Copy, Debug)]
pub struct Schema<'a> {
    pub kind: &'a str,
    pub builtin: bool,
}

impl Schema<'_> {
    fn shape(&self, path: &str, value: &Value) -> Shape {
        shape::declared(self.kind, self.builtin, path).unwrap_or(match value {
            Value::Object(_) => Shape::Granular,
            _ => Shape::Atomic,
        })
    }

    /// The fields `object` sets.
    pub fn fields_of(&self, object: &Value) -> FieldSet {
        let mut set = FieldSet::default();
        let Some(fields) = object.as_object() else { return set };
        for (name, value) in fields {
            if UNOWNED.contains(&name.as_str()) {
                continue;
            }
            let mut child = self.fields_at(name, value);
            if name == "metadata" {
                for unowned in UNOWNED_METADATA {
                    child.members.remove(&Element::Field(unowned.into()));
                }
                if child.members.is_empty() {
                    continue;
                }
                child.own = false;
            }
            set.members.insert(Element::Field(name.clone()), child);
        }
        set
    }

    fn fields_at(&self, path: &str, value: &Value) -> FieldSet {
        match (self.shape(path, value), value) {
            (Shape::Granular, Value::Object(fields)) if !fields.is_empty() => {
                FieldSet { own: false, members: self.members_of(path, fields) }
            }
            (Shape::ListMap(keys), Value::Array(items)) if !items.is_empty() => FieldSet {
                own: false,
                members: items
                    .iter()
                    .map(|item| {
                        // an item's fields sit at the list's path: items are transparent
                        let members = item.as_object().map(|fields| self.members_of(path, fields)).unwrap_or_default();
                        (Element::Key(key_of(keys, item)), FieldSet { own: true, members })
                    })
                    .collect(),
            },
            (Shape::ListSet, Value::Array(items)) if !items.is_empty() => FieldSet {
                own: false,
                members: items.iter().map(|item| (Element::Value(item.to_string()), FieldSet::leaf())).collect(),
            },
            _ => FieldSet::leaf(),
        }
    }

    fn members_of(&self, path: &str, fields: &Map<String, Value>) -> BTreeMap<Element, FieldSet> {
        fields
            .iter()
            .map(|(name, value)| (Element::Field(name.clone()), self.fields_at(&child(path, name), value)))
            .collect()
    }

    /// `applied` merged into `live`: granular objects field by field, list-map items by
    /// key, set members added; anything else replaced.
    pub fn merge(&self, path: &str, live: &mut Value, applied: &Value) {
        match (self.shape(path, applied), live, applied) {
            (Shape::Granular, Value::Object(live), Value::Object(applied)) => self.merge_fields(path, live, applied),
            (Shape::ListMap(keys), Value::Array(live), Value::Array(applied)) => {
                for item in applied {
                    let key = key_of(keys, item);
                    match live.iter_mut().find(|have| key_of(keys, have) == key) {
                        Some(Value::Object(have)) if item.is_object() => {
                            self.merge_fields(path, have, item.as_object().expect("an object"))
                        }
                        Some(have) => *have = item.clone(),
                        None => live.push(item.clone()),
                    }
                }
            }
            (Shape::ListSet, Value::Array(live), Value::Array(applied)) => {
                for item in applied {
                    if !live.contains(item) {
                        live.push(item.clone());
                    }
                }
            }
            (_, live, applied) => *live = applied.clone(),
        }
    }

    fn merge_fields(&self, path: &str, live: &mut Map<String, Value>, applied: &Map<String, Value>) {
        for (name, value) in applied {
            match live.get_mut(name) {
                Some(have) => self.merge(&child(path, name), have, value),
                None => {
                    live.insert(name.clone(), value.clone());
                }
            }
        }
    }
}

fn child(path: &str, name: &str) -> String {
    if path.is_empty() { name.to_string() } else { format!("{path}.{name}") }
}

/// A list-map item's key: its key fields that it has, as sorted JSON.
pub fn key_of(keys: &[&str], item: &Value) -> String {
    let key: Map<String, Value> =
        keys.iter().filter_map(|k| item.get(*k).map(|v| ((*k).to_string(), v.clone()))).collect();
    Value::Object(key).to_string()
}

impl FieldSet {
    pub fn leaf() -> Self {
        FieldSet { own: true, members: BTreeMap::new() }
    }

    /// The node at `path`.
    pub fn node(&self, path: &[Element]) -> Option<&FieldSet> {
        match path.split_first() {
            None => Some(self),
            Some((first, rest)) => self.members.get(first)?.node(rest),
        }
    }

    /// The set of exactly these owned paths.
    pub fn from_paths<'p>(paths: impl IntoIterator<Item = &'p [Element]>) -> FieldSet {
        let mut set = FieldSet::default();
        for path in paths {
            let mut node = &mut set;
            for element in path {
                node = node.members.entry(element.clone()).or_default();
            }
            node.own = true;
        }
        set
    }

    pub fn is_empty(&self) -> bool {
        !self.own && self.members.is_empty()
    }

    /// Every owned node's path.
    pub fn owned_paths(&self) -> Vec<Vec<Element>> {
        let mut paths = Vec::new();
        self.collect(&mut Vec::new(), &mut paths);
        paths
    }

    fn collect(&self, at: &mut Vec<Element>, paths: &mut Vec<Vec<Element>>) {
        if self.own {
            paths.push(at.clone());
        }
        for (element, member) in &self.members {
            at.push(element.clone());
            member.collect(at, paths);
            at.pop();
        }
    }

    /// Whether the node at `path` is owned.
    pub fn owns(&self, path: &[Element]) -> bool {
        self.node(path).is_some_and(|node| node.own)
    }

    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut members = self.members.clone();
        for (element, theirs) in &other.members {
            let merged = match members.get(element) {
                Some(ours) => ours.union(theirs),
                None => theirs.clone(),
            };
            members.insert(element.clone(), merged);
        }
        FieldSet { own: self.own || other.own, members }
    }

    /// What of `self` is not in `other`.
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let members = self
            .members
            .iter()
            .filter_map(|(element, ours)| {
                let left = match other.members.get(element) {
                    Some(theirs) => ours.difference(theirs),
                    None => ours.clone(),
                };
                (!left.is_empty()).then(|| (element.clone(), left))
            })
            .collect();
        FieldSet { own: self.own && !other.own, members }
    }

    /// What is in both.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let members = self
            .members
            .iter()
            .filter_map(|(element, ours)| {
                let both = ours.intersection(other.members.get(element)?);
                (!both.is_empty()).then(|| (element.clone(), both))
            })
            .collect();
        FieldSet { own: self.own && other.own, members }
    }

    /// `fieldsV1`.
    pub fn to_fields_v1(&self) -> Value {
        let mut object = Map::new();
        if self.own && !self.members.is_empty() {
            object.insert(".".into(), Value::Object(Map::new()));
        }
        for (element, member) in &self.members {
            let name = match element {
                Element::Field(name) => format!("f:{name}"),
                Element::Key(key) => format!("k:{key}"),
                Element::Value(value) => format!("v:{value}"),
            };
            object.insert(name, member.to_fields_v1());
        }
        Value::Object(object)
    }

    /// Reads `fieldsV1` (a node without members is owned; `"."` owns one that has some).
    pub fn from_fields_v1(value: &Value) -> FieldSet {
        let Some(object) = value.as_object() else { return FieldSet::default() };
        let mut set = FieldSet { own: object.is_empty() || object.contains_key("."), members: BTreeMap::new() };
        for (name, member) in object {
            let element = match name.split_at_checked(2) {
                Some(("f:", field)) => Element::Field(field.into()),
                Some(("k:", key)) => Element::Key(key.into()),
                Some(("v:", value)) => Element::Value(value.into()),
                _ => continue,
            };
            set.members.insert(element, FieldSet::from_fields_v1(member));
        }
        set
    }
}

/// The value at `path` in `object`.
pub fn value_at<'v>(object: &'v Value, path: &[Element]) -> Option<&'v Value> {
    let Some((first, rest)) = path.split_first() else { return Some(object) };
    let next = match first {
        Element::Field(name) => object.get(name)?,
        Element::Key(key) => {
            let key: Map<String, Value> = serde_json::from_str(key).ok()?;
            object.as_array()?.iter().find(|item| key.iter().all(|(k, v)| item.get(k) == Some(v)))?
        }
        Element::Value(text) => {
            let member: Value = serde_json::from_str(text).ok()?;
            object.as_array()?.iter().find(|item| **item == member)?
        }
    };
    value_at(next, rest)
}

/// Removes the value at `path` from `object` (a list item or set member leaves its list).
pub fn remove_at(object: &mut Value, path: &[Element]) {
    let Some((last, parent)) = path.split_last() else { return };
    let Some(parent) = value_at_mut(object, parent) else { return };
    match last {
        Element::Field(name) => {
            parent.as_object_mut().map(|fields| fields.remove(name));
        }
        Element::Key(_) | Element::Value(_) => {
            let Some(index) = position(parent, last) else { return };
            parent.as_array_mut().map(|items| items.remove(index));
        }
    }
}

fn position(list: &Value, element: &Element) -> Option<usize> {
    let items = list.as_array()?;
    match element {
        Element::Field(_) => None,
        Element::Key(key) => {
            let key: Map<String, Value> = serde_json::from_str(key).ok()?;
            items.iter().position(|item| key.iter().all(|(k, v)| item.get(k) == Some(v)))
        }
        Element::Value(text) => {
            let member: Value = serde_json::from_str(text).ok()?;
            items.iter().position(|item| *item == member)
        }
    }
}

fn value_at_mut<'v>(object: &'v mut Value, path: &[Element]) -> Option<&'v mut Value> {
    let Some((first, rest)) = path.split_first() else { return Some(object) };
    let next = match first {
        Element::Field(name) => object.get_mut(name)?,
        element => {
            let index = position(object, element)?;
            object.as_array_mut()?.get_mut(index)?
        }
    };
    value_at_mut(next, rest)
}

/// A path as the real server prints it in a conflict: `.spec.ports[port=80,protocol="TCP"]`.
pub struct Shown<'a>(pub &'a [Element]);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for element in self.0 {
            match element {
                Element::Field(name) => write!(f, ".{name}")?,
                Element::Key(key) => {
                    let key: Map<String, Value> = serde_json::from_str(key).unwrap_or_default();
                    let parts: Vec<String> = key.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    write!(f, "[{}]", parts.join(","))?;
                }
                Element::Value(value) => write!(f, "[={value}]")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service() -> Schema<'static> {
        Schema { kind: "Service", builtin: true }
    }

    #[test]
    fn fields_v1_as_the_real_server_writes_them() {
        let object = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}, "finalizers": ["a"]},
            "spec": {"selector": {"app": "web", "tier": "x"}, "ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080}],
                "clusterIPs": ["10.0.0.1"]}});
        assert_eq!(
            service().fields_of(&object).to_fields_v1(),
            json!({
                "f:metadata": {"f:labels": {"f:app": {}}, "f:finalizers": {"v:\"a\"": {}}},
                "f:spec": {"f:selector": {}, "f:clusterIPs": {},
                    "f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {}}}}
            })
        );
    }

    #[test]
    fn fields_v1_reads_back_as_written() {
        let object = json!({"metadata": {"labels": {"a": "1"}, "finalizers": ["x", "y"]},
            "spec": {"ports": [{"port": 1}, {"port": 2, "name": "b"}], "selector": {"a": "1"}, "type": "ClusterIP"}});
        let set = service().fields_of(&object);
        assert_eq!(FieldSet::from_fields_v1(&set.to_fields_v1()), set);
    }

    #[test]
    fn set_algebra_and_paths() {
        let a = service().fields_of(&json!({"spec": {"type": "A", "selector": {"x": "1"}, "ports": [{"port": 1}]}}));
        let b = service().fields_of(&json!({"spec": {"type": "B", "ports": [{"port": 1}, {"port": 2}]}}));
        let shown = |set: &FieldSet| set.owned_paths().iter().map(|p| Shown(p).to_string()).collect::<Vec<_>>();
        assert_eq!(shown(&a.difference(&b)), [".spec.selector"]);
        assert_eq!(shown(&a.intersection(&b)), [".spec.ports[port=1]", ".spec.ports[port=1].port", ".spec.type"]);
        assert_eq!(shown(&b.difference(&a)), [".spec.ports[port=2]", ".spec.ports[port=2].port"]);
        assert_eq!(a.union(&b).difference(&a), b.difference(&a));
    }

    #[test]
    fn values_found_and_removed_by_path() {
        let mut object =
            json!({"spec": {"ports": [{"port": 1, "name": "a"}, {"port": 2}]}, "metadata": {"finalizers": ["x", "y"]}});
        let port =
            [Element::Field("spec".into()), Element::Field("ports".into()), Element::Key(r#"{"port":2}"#.into())];
        assert_eq!(value_at(&object, &port), Some(&json!({"port": 2})));
        remove_at(&mut object, &port);
        let finalizer =
            [Element::Field("metadata".into()), Element::Field("finalizers".into()), Element::Value("\"x\"".into())];
        remove_at(&mut object, &finalizer);
        let name = [
            Element::Field("spec".into()),
            Element::Field("ports".into()),
            Element::Key(r#"{"port":1}"#.into()),
            Element::Field("name".into()),
        ];
        remove_at(&mut object, &name);
        assert_eq!(object, json!({"spec": {"ports": [{"port": 1}]}, "metadata": {"finalizers": ["y"]}}));
    }
}
