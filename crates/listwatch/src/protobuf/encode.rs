//! Kubernetes JSON objects to their protobuf messages, by the tables of [`super::schema`],
//! written as Go's generated marshallers write them: fields in field-number order, map
//! entries in key order, negative integers as ten-byte varints, and the apimachinery types
//! whose JSON differs from their message (`Time`, `IntOrString`, `Quantity`, `FieldsV1`)
//! converted. The envelope around a message is [`super::envelope`]'s.
//!
//! A JSON member decides whether its field is written: absent or `null` writes nothing,
//! a present `false`, `0` or `""` is written (Go's pointer fields, such as an
//! EndpointSlice's `conditions.ready`, tell absent from zero), an empty array or map
//! writes nothing, as in Go. Unlike Go, a non-pointer field absent from the JSON is not
//! written as its zero value; decoders read both the same.
//!
//! This must never panic or guess: a member without a field in the table, or a value of
//! the wrong JSON type, is left out and its path reported in [`Encoded::dropped`].

use std::fmt::Write as _;

use serde_json::{Map, Value};

use super::schema::{self, FieldKind, Message};
use super::wire::{put_bytes_field, put_bytes_head, put_varint_field};

/// A message's bytes and the JSON paths (`spec.ports[0].foo`, `metadata.labels[key]`)
/// that are not in them.
#[derive(Debug, Default)]
pub(crate) struct Encoded {
    pub bytes: Vec<u8>,
    pub dropped: Vec<String>,
}

/// The message of a served kind, `None` for kinds served as JSON only.
pub(crate) fn message_for(api_version: &str, kind: &str) -> Option<&'static Message> {
    match (api_version, kind) {
        ("v1", "Service") => Some(&schema::SERVICE),
        ("v1", "Endpoints") => Some(&schema::ENDPOINTS),
        ("v1", "Node") => Some(&schema::NODE),
        ("v1", "Status") => Some(&schema::STATUS),
        ("discovery.k8s.io/v1", "EndpointSlice") => Some(&schema::ENDPOINT_SLICE),
        _ => None,
    }
}

/// `object`'s message, without envelope. The object's own `apiVersion` and `kind` are
/// its TypeMeta, which the envelope carries, not fields of the message.
pub(crate) fn encode(message: &'static Message, object: &Value) -> Encoded {
    let mut encoder = Encoder::default();
    let mut bytes = Vec::new();
    match object.as_object() {
        Some(members) => encoder.message(&mut bytes, message, members, &["apiVersion", "kind"]),
        // the root's path is empty; "." reads better in a log line
        None => encoder.dropped.push(".".to_owned()),
    }
    Encoded { bytes, dropped: encoder.dropped }
}

/// A list's `metadata` (meta/v1 ListMeta) message. Lists' metadata is written by this
/// crate, not stored, so a member the table lacks would be this crate's own bug: it is
/// left out like any other.
pub(crate) fn list_meta(metadata: &Value) -> Vec<u8> {
    encode(&schema::LIST_META, metadata).bytes
}

#[derive(Default)]
struct Encoder {
    /// The JSON path of the value being encoded; members and indexes are appended and
    /// truncated again, so only dropped paths allocate.
    path: String,
    dropped: Vec<String>,
}

impl Encoder {
    fn message(&mut self, out: &mut Vec<u8>, message: &Message, members: &Map<String, Value>, type_meta: &[&str]) {
        for field in message.fields {
            let Some(value) = members.get(field.json) else { continue };
            let mark = self.enter_member(field.json);
            if field.repeated {
                self.repeated(out, field.number, &field.kind, value);
            } else if !value.is_null() {
                self.value(out, field.number, &field.kind, value);
            }
            self.path.truncate(mark);
        }
        for name in members.keys() {
            if message.field(name).is_none() && !type_meta.contains(&name.as_str()) {
                let mark = self.enter_member(name);
                self.drop_here();
                self.path.truncate(mark);
            }
        }
    }

    fn repeated(&mut self, out: &mut Vec<u8>, number: u32, kind: &FieldKind, value: &Value) {
        let Some(items) = value.as_array() else {
            self.drop_here();
            return;
        };
        for (index, item) in items.iter().enumerate() {
            let mark = self.path.len();
            // writing to a String cannot fail
            let _ = write!(self.path, "[{index}]");
            if item.is_null() {
                // Go would write a zero element; whether that is what was meant is unknown
                self.drop_here();
            } else {
                self.value(out, number, kind, item);
            }
            self.path.truncate(mark);
        }
    }

    /// Writes field `number` holding `value` (not null); `false` when it was dropped.
    fn value(&mut self, out: &mut Vec<u8>, number: u32, kind: &FieldKind, value: &Value) -> bool {
        let written = match kind {
            FieldKind::Str => value.as_str().map(|text| put_bytes_field(out, number, text.as_bytes())).is_some(),
            FieldKind::Bool => value.as_bool().map(|flag| put_varint_field(out, number, u64::from(flag))).is_some(),
            FieldKind::Int32 => value
                .as_i64()
                .and_then(|wide| i32::try_from(wide).ok())
                // sign-extended through i64, as Go's `uint64(int32)` does
                .map(|narrow| put_varint_field(out, number, i64::from(narrow) as u64))
                .is_some(),
            FieldKind::Int64 => value.as_i64().map(|wide| put_varint_field(out, number, wide as u64)).is_some(),
            FieldKind::Msg(message) => match value.as_object() {
                Some(members) => {
                    nested(out, number, |out| self.message(out, message, members, &[]));
                    true
                }
                None => false,
            },
            FieldKind::Map(value_kind) => match value.as_object() {
                Some(entries) => {
                    self.map(out, number, value_kind, entries);
                    true
                }
                None => false,
            },
            FieldKind::Time => match value.as_str().and_then(|text| text.parse::<jiff::Timestamp>().ok()) {
                Some(time) => {
                    nested(out, number, |out| {
                        put_varint_field(out, 1, unix_seconds(time) as u64);
                        put_varint_field(out, 2, 0);
                    });
                    true
                }
                None => false,
            },
            FieldKind::IntOrString => match value {
                Value::String(text) => {
                    nested(out, number, |out| {
                        put_varint_field(out, 1, 1);
                        put_varint_field(out, 2, 0);
                        put_bytes_field(out, 3, text.as_bytes());
                    });
                    true
                }
                _ => match value.as_i64().and_then(|wide| i32::try_from(wide).ok()) {
                    Some(int) => {
                        nested(out, number, |out| {
                            put_varint_field(out, 1, 0);
                            put_varint_field(out, 2, i64::from(int) as u64);
                            put_bytes_field(out, 3, b"");
                        });
                        true
                    }
                    None => false,
                },
            },
            FieldKind::Quantity => match value.as_str() {
                Some(text) => {
                    nested(out, number, |out| put_bytes_field(out, 1, text.as_bytes()));
                    true
                }
                None => false,
            },
            FieldKind::FieldsV1 => match (value.is_object(), serde_json::to_vec(value)) {
                (true, Ok(raw)) => {
                    nested(out, number, |out| put_bytes_field(out, 1, &raw));
                    true
                }
                _ => false,
            },
        };
        if !written {
            self.drop_here();
        }
        written
    }

    /// One `{key = 1, value = 2}` entry per member, in key order as Go writes them (the
    /// JSON map's own order may be insertion order).
    fn map(&mut self, out: &mut Vec<u8>, number: u32, value_kind: &FieldKind, entries: &Map<String, Value>) {
        let mut sorted: Vec<(&String, &Value)> = entries.iter().collect();
        sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (key, value) in sorted {
            let mark = self.path.len();
            self.path.push('[');
            self.path.push_str(key);
            self.path.push(']');
            if value.is_null() {
                self.drop_here();
            } else {
                let start = out.len();
                let mut written = false;
                nested(out, number, |entry| {
                    put_bytes_field(entry, 1, key.as_bytes());
                    written = self.value(entry, 2, value_kind, value);
                });
                if !written {
                    // an entry without its value would decode as the value's zero
                    out.truncate(start);
                }
            }
            self.path.truncate(mark);
        }
    }

    /// Appends `.name` (or `name` at the root) to the path; returns the length to truncate to.
    fn enter_member(&mut self, name: &str) -> usize {
        let mark = self.path.len();
        if mark > 0 {
            self.path.push('.');
        }
        self.path.push_str(name);
        mark
    }

    fn drop_here(&mut self) {
        self.dropped.push(self.path.clone());
    }
}

/// A length-delimited field whose payload `body` writes. The payload is written in place
/// and its head inserted before it afterwards, so nested messages need no buffer of
/// their own.
fn nested(out: &mut Vec<u8>, number: u32, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    body(out);
    let len = out.len() - start;
    // a tag (at most 5 bytes for a u32 field number) and a length (at most 10)
    let mut head = [0u8; 16];
    let mut free = &mut head[..];
    put_bytes_head(&mut free, number, len);
    let used = 16 - free.len();
    out.splice(start..start, head[..used].iter().copied());
}

/// Go's `time.Time.Unix()`: whole seconds rounded down, also before 1970 (jiff's
/// seconds round toward zero).
fn unix_seconds(time: jiff::Timestamp) -> i64 {
    let seconds = time.as_second();
    if time.subsec_nanosecond() < 0 { seconds - 1 } else { seconds }
}

#[cfg(test)]
mod tests;
