//! Field ownership, as the real server keeps it in `metadata.managedFields`: which
//! manager set which field, by `Apply` (server-side apply) or `Update` (any other write).
//!
//! - Every write records the fields it changed under its manager (`?fieldManager=`, else
//!   the first word of the User-Agent), and those fields leave every other manager's set.
//! - An apply owns exactly the fields of the applied configuration. Applying a field another
//!   manager owns with a different value is a conflict (409, the real server's words)
//!   unless `force=true`, which takes it over. Fields the applier owned before, no longer
//!   applies and nobody else owns are removed from the object.
//! - Merging follows each value's shape ([`shape`]): granular objects field by field,
//!   list-map items by key, set members by value, anything else (atomic) replaced whole.
//!
//! Pure: no store, no clock (the caller passes the time).

mod field_set;
mod shape;

use serde_json::{Value, json};

use crate::error::ApiError;
pub use field_set::Schema;
use field_set::{Element, FieldSet, Shown, remove_at, value_at};

/// Who writes, and when.
#[derive(Clone, Debug)]
pub struct Writer<'a> {
    pub manager: &'a str,
    /// The resource's `apiVersion` (`apps/v1`).
    pub api_version: &'a str,
    /// `status` for a write to the status subresource.
    pub subresource: Option<&'a str>,
    /// RFC 3339.
    pub now: &'a str,
}

/// One `managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    subresource: Option<String>,
    fields: FieldSet,
}

impl Entry {
    fn is(&self, writer: &Writer<'_>, operation: &str) -> bool {
        self.manager == writer.manager
            && self.operation == operation
            && self.subresource.as_deref() == writer.subresource
    }

    /// How a conflict names this manager (`printManager` in the real server).
    fn shown(&self) -> String {
        let mut shown = format!("{:?}", self.manager);
        if let Some(subresource) = &self.subresource {
            shown.push_str(&format!(" with subresource {subresource:?}"));
        }
        if self.operation == "Update" {
            shown.push_str(&format!(" using {} at {}", self.api_version, self.time));
        }
        shown
    }
}

fn entries(object: &Value) -> Vec<Entry> {
    let Some(list) = object["metadata"]["managedFields"].as_array() else { return Vec::new() };
    list.iter()
        .filter_map(|entry| {
            Some(Entry {
                manager: entry["manager"].as_str()?.to_string(),
                operation: entry["operation"].as_str()?.to_string(),
                api_version: entry["apiVersion"].as_str().unwrap_or_default().to_string(),
                time: entry["time"].as_str().unwrap_or_default().to_string(),
                subresource: entry["subresource"].as_str().map(str::to_string),
                fields: FieldSet::from_fields_v1(&entry["fieldsV1"]),
            })
        })
        .collect()
}

/// Writes `entries` (the empty ones dropped) as `object`'s `managedFields`.
fn set_entries(object: &mut Value, entries: Vec<Entry>) {
    let list: Vec<Value> = entries
        .into_iter()
        .filter(|entry| !entry.fields.is_empty())
        .map(|entry| {
            let mut value = json!({
                "manager": entry.manager, "operation": entry.operation, "apiVersion": entry.api_version,
                "time": entry.time, "fieldsType": "FieldsV1", "fieldsV1": entry.fields.to_fields_v1(),
            });
            if let Some(subresource) = entry.subresource {
                value["subresource"] = json!(subresource);
            }
            value
        })
        .collect();
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            metadata.remove("managedFields");
        } else {
            metadata.insert("managedFields".into(), Value::Array(list));
        }
    }
}

/// Records `writer` as the owner of every field of a new `object` (`operation`: `Update`
/// for a create, `Apply` for an apply that creates).
pub fn created(schema: Schema<'_>, object: &mut Value, writer: &Writer<'_>, operation: &str) {
    let entry = Entry {
        manager: writer.manager.to_string(),
        operation: operation.to_string(),
        api_version: writer.api_version.to_string(),
        time: writer.now.to_string(),
        subresource: writer.subresource.map(str::to_string),
        fields: schema.fields_of(object),
    };
    set_entries(object, vec![entry]);
}

/// Records an update from `old` to `new` (whose sent `managedFields` are ignored): the
/// fields it changed move to `writer`'s `Update` entry.
pub fn updated(schema: Schema<'_>, old: &Value, new: &mut Value, writer: &Writer<'_>) {
    let mut owners = entries(old);
    let after = schema.fields_of(new);
    let changed = changed_fields(&after, old, new).union(&schema.fields_of(old).difference(&after));
    for entry in &mut owners {
        entry.fields = entry.fields.difference(&changed).intersection(&after);
    }
    let gained = changed.intersection(&after);
    if !gained.is_empty() {
        match owners.iter_mut().find(|entry| entry.is(writer, "Update")) {
            Some(entry) => {
                entry.fields = entry.fields.union(&gained);
                entry.time = writer.now.to_string();
            }
            None => owners.push(Entry {
                manager: writer.manager.to_string(),
                operation: "Update".into(),
                api_version: writer.api_version.to_string(),
                time: writer.now.to_string(),
                subresource: writer.subresource.map(str::to_string),
                fields: gained,
            }),
        }
    }
    set_entries(new, owners);
}

/// The owned nodes of `fields` (of `new`) whose value is not the same in `old`: a leaf's
/// value differs, or a node with members (a list-map item) is new.
fn changed_fields(fields: &FieldSet, old: &Value, new: &Value) -> FieldSet {
    let paths = fields.owned_paths();
    let changed = paths.iter().filter(|path| {
        let has_members = fields.node(path).is_some_and(|node| !node.members.is_empty());
        match value_at(old, path) {
            None => true,
            Some(_) if has_members => false,
            Some(before) => Some(before) != value_at(new, path),
        }
    });
    FieldSet::from_paths(changed.map(Vec::as_slice))
}

/// A field another manager owns with another value than the applied one.
#[derive(Clone, Debug, PartialEq)]
pub struct Conflict {
    /// The owner, as the real server prints it: `"m" using apps/v1 at <time>`.
    pub manager: String,
    /// `.spec.replicas`
    pub field: String,
}

/// The 409 for `conflicts`, in the real server's words.
pub fn conflict_error(conflicts: &[Conflict]) -> ApiError {
    let message = match conflicts {
        [one] => format!("Apply failed with 1 conflict: conflict with {}: {}", one.manager, one.field),
        many => {
            let mut managers: Vec<&str> = many.iter().map(|c| c.manager.as_str()).collect();
            managers.sort_unstable();
            managers.dedup();
            let mut lines = Vec::new();
            for manager in managers {
                lines.push(format!("conflicts with {manager}:"));
                lines.extend(many.iter().filter(|c| c.manager == manager).map(|c| format!("- {}", c.field)));
            }
            format!("Apply failed with {} conflicts: {}", many.len(), lines.join("\n"))
        }
    };
    let causes = conflicts.iter().map(|c| (format!("conflict with {}", c.manager), c.field.clone())).collect();
    ApiError::ApplyConflict { message, causes }
}

/// Server-side apply of `applied` by `writer` onto `live` (`None`: it creates).
pub fn apply(
    schema: Schema<'_>,
    live: Option<&Value>,
    applied: &Value,
    writer: &Writer<'_>,
    force: bool,
) -> Result<Value, Vec<Conflict>> {
    let Some(live) = live else {
        let mut object = applied.clone();
        created(schema, &mut object, writer, "Apply");
        return Ok(object);
    };
    let fields = schema.fields_of(applied);
    let mut owners = entries(live);
    let leaves: Vec<Vec<Element>> = fields
        .owned_paths()
        .into_iter()
        .filter(|path| fields.node(path).is_some_and(|node| node.members.is_empty()))
        .collect();
    let mut conflicts = Vec::new();
    let mut taken = Vec::new();
    for entry in owners.iter().filter(|entry| !entry.is(writer, "Apply")) {
        for path in leaves.iter().filter(|path| entry.fields.owns(path)) {
            if value_at(live, path) != value_at(applied, path) {
                conflicts.push(Conflict { manager: entry.shown(), field: Shown(path).to_string() });
                taken.push(path.as_slice());
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    let taken = FieldSet::from_paths(taken);
    let mut merged = live.clone();
    schema.merge("", &mut merged, applied);
    let before =
        owners.iter().find(|entry| entry.is(writer, "Apply")).map(|entry| entry.fields.clone()).unwrap_or_default();
    let mut others = FieldSet::default();
    for entry in owners.iter_mut().filter(|entry| !entry.is(writer, "Apply")) {
        entry.fields = entry.fields.difference(&taken);
        others = others.union(&entry.fields);
    }
    for path in before.difference(&fields).difference(&others).owned_paths() {
        remove_at(&mut merged, &path);
    }
    let after = schema.fields_of(&merged);
    owners.retain(|entry| !entry.is(writer, "Apply"));
    for entry in &mut owners {
        entry.fields = entry.fields.intersection(&after);
    }
    owners.push(Entry {
        manager: writer.manager.to_string(),
        operation: "Apply".into(),
        api_version: writer.api_version.to_string(),
        time: writer.now.to_string(),
        subresource: writer.subresource.map(str::to_string),
        fields: fields.intersection(&after),
    });
    set_entries(&mut merged, owners);
    Ok(merged)
}

#[cfg(test)]
mod tests;
