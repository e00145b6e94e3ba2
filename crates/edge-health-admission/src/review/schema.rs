//! What of an object each hook's rule reads, and the type each of those fields must have
//! for the object to decode.
//!
//! An object "decodes" when every field its hook's rule reads has the type Kubernetes'
//! schema gives it (a string, a boolean, an RFC 3339 time, an object, an array of them),
//! or is absent or `null`. The other fields are not judged: the apiserver sends a webhook
//! its own encoding of an object it has already decoded, so they always have their types,
//! and checking them all (k8s-openapi's typed decoding of the whole object, as this webhook
//! once did) was a third of a slice review's CPU time without ever changing an answer.
//! Both readings of a review ([`super::read`] and the tree) judge with [`Schema::check`], so
//! they agree on what decodes.

use std::fmt;

use edgegrid_core::protection::Timestamp;
use serde_json::Value;

/// A field's type, and what of it a rule reads.
#[derive(Debug)]
pub(super) enum Schema {
    Str,
    Bool,
    /// A string holding an RFC 3339 time (`metav1.Time`).
    Time,
    /// An object of which only these fields are read (and kept by the lean reading).
    Fields(&'static [(&'static str, Schema)]),
    /// An object kept whole (a patch copies it); these of its fields are read.
    Whole(&'static [(&'static str, Schema)]),
    /// An array of elements of this type (an element may not be `null`).
    Each(&'static Schema),
}

impl Schema {
    /// Whether `value` has this type; where and why not.
    pub(super) fn check(&self, value: &Value) -> Result<(), Mismatch> {
        match (self, value) {
            (Self::Str, Value::String(_)) | (Self::Bool, Value::Bool(_)) => Ok(()),
            (Self::Time, Value::String(text)) => match text.parse::<Timestamp>() {
                Ok(_) => Ok(()),
                Err(_) => Err(Mismatch::here(self, "a string that is no time")),
            },
            (Self::Fields(fields) | Self::Whole(fields), Value::Object(object)) => {
                for (name, schema) in *fields {
                    match object.get(*name) {
                        None | Some(Value::Null) => {}
                        Some(field) => schema.check(field).map_err(|m| m.under(Segment::Field(name)))?,
                    }
                }
                Ok(())
            }
            (Self::Each(element), Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    element.check(item).map_err(|m| m.under(Segment::Index(i)))?;
                }
                Ok(())
            }
            (_, value) => Err(Mismatch::here(self, type_of(value))),
        }
    }

    fn expected(&self) -> &'static str {
        match self {
            Self::Str => "a string",
            Self::Bool => "a boolean",
            Self::Time => "an RFC 3339 time",
            Self::Fields(_) | Self::Whole(_) => "an object",
            Self::Each(_) => "an array",
        }
    }
}

fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Segment {
    Field(&'static str),
    Index(usize),
}

/// A read field of the wrong type: where (from the object's root), what was expected and
/// what was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Mismatch {
    /// Outermost first.
    path: Vec<Segment>,
    expected: &'static str,
    found: &'static str,
}

impl Mismatch {
    fn here(schema: &Schema, found: &'static str) -> Self {
        Self { path: Vec::new(), expected: schema.expected(), found }
    }

    /// The same mismatch, seen from the container holding it at `segment` (built on the
    /// way out, so the common case, no mismatch, builds no path).
    fn under(mut self, segment: Segment) -> Self {
        self.path.insert(0, segment);
        self
    }
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("object")?;
        for segment in &self.path {
            match segment {
                Segment::Field(name) => write!(f, ".{name}")?,
                Segment::Index(i) => write!(f, "[{i}]")?,
            }
        }
        write!(f, ": expected {}, found {}", self.expected, self.found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    static CONDITION: Schema = Schema::Fields(&[("type", Schema::Str), ("since", Schema::Time), ("on", Schema::Bool)]);
    static OBJECT: Schema = Schema::Fields(&[
        ("conditions", Schema::Each(&CONDITION)),
        ("addresses", Schema::Each(&Schema::Whole(&[("nodeName", Schema::Str)]))),
    ]);

    #[test]
    fn read_fields_of_their_type_absent_or_null_decode_whatever_the_rest_is() {
        for object in [
            json!({}),
            json!({"conditions": null, "addresses": null, "other": [1, {"x": "y"}]}),
            json!({"conditions": [{"type": "Ready", "since": "2026-11-22T10:00:00+01:00", "on": true, "extra": 5}]}),
            json!({"conditions": [{"type": null, "since": null, "on": null}], "addresses": [{"ip": 7}]}),
            json!({"addresses": [{"nodeName": "n", "targetRef": {"kind": "Pod"}}]}),
        ] {
            assert_eq!(OBJECT.check(&object), Ok(()), "{object}");
        }
    }

    #[test]
    fn a_read_field_of_another_type_is_named_with_its_path() {
        let cases = [
            (json!([]), "object: expected an object, found an array"),
            (json!({"conditions": {}}), "object.conditions: expected an array, found an object"),
            (json!({"conditions": [null]}), "object.conditions[0]: expected an object, found null"),
            (
                json!({"conditions": [{"type": "a"}, {"type": 5}]}),
                "object.conditions[1].type: expected a string, found a number",
            ),
            (
                json!({"conditions": [{"since": "yesterday"}]}),
                "object.conditions[0].since: expected an RFC 3339 time, found a string that is no time",
            ),
            (json!({"conditions": [{"on": "true"}]}), "object.conditions[0].on: expected a boolean, found a string"),
            (
                json!({"addresses": [{"nodeName": ["n"]}]}),
                "object.addresses[0].nodeName: expected a string, found an array",
            ),
        ];
        for (object, message) in cases {
            assert_eq!(OBJECT.check(&object).map_err(|m| m.to_string()), Err(message.to_string()), "{object}");
        }
    }
}
