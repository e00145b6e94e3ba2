//! Reading an AdmissionReview without building its JSON tree, for the usual request.
//!
//! One pass over the body keeps the few fields a decision needs (`apiVersion`, `kind`,
//! `request.uid`, `request.resource`, `request.operation`) and `request.object` as text;
//! a second pass over that text keeps only what the hook's rule reads of the object
//! ([`Keep`]), as a small tree the rules in `edgegrid_core::admission` take unchanged.
//! Everything else (`oldObject`, `userInfo`, the object's other fields) is parsed and
//! checked exactly as `serde_json::Value` parses it (strings, escapes, numbers, keys) and
//! dropped without being stored.
//!
//! It must never accept a body that the tree reading would answer differently: it gives
//! up (`None`) on anything unusual — not an AdmissionReview, no uid, a key given twice
//! where text is kept, serde_json's raw-value marker key (which `Value` parses
//! specially), nesting deeper than [`MAX_DEPTH`], invalid JSON — and the caller then
//! reads the body as a tree, which says exactly what is wrong. It has no errors of its
//! own.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::API_VERSIONS;

/// The deepest nesting (objects and arrays inside each other, from the body's root) read
/// here; serde_json refuses 128, so anything this reader accepts, `Value` accepts too.
pub(super) const MAX_DEPTH: usize = 100;

/// The key with which serde_json marks a raw value: `Value` parses an object whose first
/// key it is as the JSON text of its value.
const RAW_VALUE_MARKER: &str = "$serde_json::private::RawValue";

/// The envelope of a review, as the one-pass reading keeps it.
#[derive(Debug)]
pub(super) struct Envelope<'a> {
    pub api_version: &'static str,
    pub uid: Cow<'a, str>,
    /// `request.resource.group`, `request.resource.resource` and `request.operation`,
    /// when they are strings.
    pub group: Option<Cow<'a, str>>,
    pub resource: Option<Cow<'a, str>>,
    pub operation: Option<Cow<'a, str>>,
    /// `request.object` as sent (not yet checked beyond its brackets and quotes).
    pub object: Option<&'a RawValue>,
}

/// Reads `body`'s envelope, or `None` when it is not the usual review.
pub(super) fn envelope(body: &[u8]) -> Option<Envelope<'_>> {
    // UTF-8 checked once for all, not string by string
    let mut deserializer = serde_json::Deserializer::from_str(std::str::from_utf8(body).ok()?);
    let fields = Body.deserialize(&mut deserializer).ok()?;
    deserializer.end().ok()?;
    let api_version = API_VERSIONS.into_iter().find(|v| fields.api_version.as_deref() == Some(*v))?;
    if fields.kind.as_deref() != Some("AdmissionReview") {
        return None;
    }
    let request = fields.request?;
    let uid = request.uid.filter(|uid| !uid.is_empty())?;
    Some(Envelope {
        api_version,
        uid,
        group: request.group,
        resource: request.resource,
        operation: request.operation,
        object: request.object,
    })
}

/// What of the object a hook's rule reads: an object's fields, each kept as said (the
/// others checked and dropped); an array's elements, each kept as said, at their
/// indices; or the whole value. Where the sent value is not the object or array
/// expected, `null` is kept: a rule reading it by key or as an array sees no difference.
#[derive(Debug)]
pub(super) enum Keep {
    All,
    Fields(&'static [(&'static str, Keep)]),
    Each(&'static Keep),
}

/// Reads the object's text (at the depth it has in the body) keeping what `keep` says,
/// checking the rest; `None` on anything unusual.
pub(super) fn kept(object: &RawValue, keep: &'static Keep) -> Option<Value> {
    const OBJECT_DEPTH: usize = 2; // body { request { object
    let mut deserializer = serde_json::Deserializer::from_str(object.get());
    let value = Pick { keep, depth: OBJECT_DEPTH }.deserialize(&mut deserializer).ok()?;
    deserializer.end().ok()?;
    Some(value)
}

fn give_up<E: de::Error>() -> E {
    E::custom("not the usual review: read as a tree")
}

/// The depth of a container's elements, the container being at `depth`.
fn enter<E: de::Error>(depth: usize) -> Result<usize, E> {
    if depth >= MAX_DEPTH { Err(give_up()) } else { Ok(depth + 1) }
}

/// How many containers nest in `value` (a scalar: 0).
fn nesting(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(nesting).max().unwrap_or(0),
        Value::Object(fields) => 1 + fields.values().map(nesting).max().unwrap_or(0),
        _ => 0,
    }
}

/// A key, as `Value` reads it; the raw-value marker gives up.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_borrowed_str<E: de::Error>(self, key: &'de str) -> Result<Self::Value, E> {
        if key == RAW_VALUE_MARKER { Err(give_up()) } else { Ok(Cow::Borrowed(key)) }
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        if key == RAW_VALUE_MARKER { Err(give_up()) } else { Ok(Cow::Owned(key.to_string())) }
    }
}

/// Any JSON value, checked as `Value` would check it, and dropped.
#[derive(Clone, Copy)]
struct Checked {
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Checked {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Checked {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        let inner = Checked { depth: enter(self.depth)? };
        while items.next_element_seed(inner)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut fields: A) -> Result<(), A::Error> {
        let inner = Checked { depth: enter(self.depth)? };
        while fields.next_key_seed(Key)?.is_some() {
            fields.next_value_seed(inner)?;
        }
        Ok(())
    }
}

/// A value read as `Value` reads it, at `depth`.
struct Whole {
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Whole {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        let value = Value::deserialize(deserializer)?;
        if self.depth + nesting(&value) > MAX_DEPTH {
            return Err(give_up());
        }
        Ok(value)
    }
}

/// A string, or `None` for any other value (checked and dropped): `Value::as_str`.
struct Text {
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Text {
    type Value = Option<Cow<'de, str>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Text {
    type Value = Option<Cow<'de, str>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Self::Value, E> {
        Ok(Some(Cow::Borrowed(text)))
    }

    fn visit_str<E>(self, text: &str) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(text.to_string())))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, items: A) -> Result<Self::Value, A::Error> {
        Checked { depth: self.depth }.visit_seq(items).map(|()| None)
    }

    fn visit_map<A: MapAccess<'de>>(self, fields: A) -> Result<Self::Value, A::Error> {
        Checked { depth: self.depth }.visit_map(fields).map(|()| None)
    }
}

/// Sets `slot` to `value`, giving up if it was set before: a key given twice.
fn once<T, E: de::Error>(slot: &mut Option<T>, value: T) -> Result<(), E> {
    if slot.replace(value).is_some() { Err(give_up()) } else { Ok(()) }
}

/// The body's fields this reading keeps.
struct BodyFields<'a> {
    api_version: Option<Cow<'a, str>>,
    kind: Option<Cow<'a, str>>,
    request: Option<RequestFields<'a>>,
}

/// The body: an object (anything else gives up).
struct Body;

impl<'de> DeserializeSeed<'de> for Body {
    type Value = BodyFields<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Body {
    type Value = BodyFields<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an AdmissionReview")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut fields: A) -> Result<Self::Value, A::Error> {
        let depth = enter(0)?;
        let (mut api_version, mut kind, mut request) = (None, None, None);
        while let Some(key) = fields.next_key_seed(Key)? {
            match key.as_ref() {
                "apiVersion" => once(&mut api_version, fields.next_value_seed(Text { depth })?)?,
                "kind" => once(&mut kind, fields.next_value_seed(Text { depth })?)?,
                "request" => once(&mut request, fields.next_value_seed(Request { depth })?)?,
                _ => fields.next_value_seed(Checked { depth })?,
            }
        }
        Ok(BodyFields { api_version: api_version.flatten(), kind: kind.flatten(), request })
    }
}

/// `request`'s fields this reading keeps.
struct RequestFields<'a> {
    uid: Option<Cow<'a, str>>,
    group: Option<Cow<'a, str>>,
    resource: Option<Cow<'a, str>>,
    operation: Option<Cow<'a, str>>,
    object: Option<&'a RawValue>,
}

/// `request`: an object (anything else gives up).
struct Request {
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Request {
    type Value = RequestFields<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Request {
    type Value = RequestFields<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an AdmissionReview request")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut fields: A) -> Result<Self::Value, A::Error> {
        let depth = enter(self.depth)?;
        let (mut uid, mut resource, mut operation, mut object) = (None, None, None, None);
        while let Some(key) = fields.next_key_seed(Key)? {
            match key.as_ref() {
                "uid" => once(&mut uid, fields.next_value_seed(Text { depth })?)?,
                "resource" => once(&mut resource, fields.next_value_seed(Resource { depth })?)?,
                "operation" => once(&mut operation, fields.next_value_seed(Text { depth })?)?,
                // kept as text, checked by `kept`
                "object" => once(&mut object, fields.next_value::<&'de RawValue>()?)?,
                _ => fields.next_value_seed(Checked { depth })?,
            }
        }
        let (group, resource) = resource.unwrap_or_default();
        Ok(RequestFields { uid: uid.flatten(), group, resource, operation: operation.flatten(), object })
    }
}

/// `request.resource`'s `group` and `resource` when it is an object and they are strings
/// (`Value` indexing: anything else reads as absent).
struct Resource {
    depth: usize,
}

type GroupResource<'a> = (Option<Cow<'a, str>>, Option<Cow<'a, str>>);

impl<'de> DeserializeSeed<'de> for Resource {
    type Value = GroupResource<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Resource {
    type Value = GroupResource<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut fields: A) -> Result<Self::Value, A::Error> {
        let depth = enter(self.depth)?;
        let (mut group, mut resource) = (None, None);
        while let Some(key) = fields.next_key_seed(Key)? {
            match key.as_ref() {
                "group" => once(&mut group, fields.next_value_seed(Text { depth })?)?,
                "resource" => once(&mut resource, fields.next_value_seed(Text { depth })?)?,
                _ => fields.next_value_seed(Checked { depth })?,
            }
        }
        Ok((group.flatten(), resource.flatten()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, items: A) -> Result<Self::Value, A::Error> {
        Checked { depth: self.depth }.visit_seq(items).map(|()| (None, None))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok((None, None))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok((None, None))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok((None, None))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok((None, None))
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok((None, None))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok((None, None))
    }
}

/// What a [`Keep`] keeps of a value at `depth`.
#[derive(Clone, Copy)]
struct Pick {
    keep: &'static Keep,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Pick {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        match self.keep {
            Keep::All => Whole { depth: self.depth }.deserialize(deserializer),
            Keep::Fields(_) | Keep::Each(_) => deserializer.deserialize_any(self),
        }
    }
}

impl<'de> Visitor<'de> for Pick {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut fields: A) -> Result<Value, A::Error> {
        let Keep::Fields(wanted) = self.keep else {
            return Checked { depth: self.depth }.visit_map(fields).map(|()| Value::Null);
        };
        let depth = enter(self.depth)?;
        let mut kept = Map::new();
        while let Some(key) = fields.next_key_seed(Key)? {
            match wanted.iter().find(|(name, _)| *name == key.as_ref()) {
                // a key given twice: the last one, as `Value` has it
                Some((name, keep)) => {
                    kept.insert((*name).to_string(), fields.next_value_seed(Pick { keep, depth })?);
                }
                None => fields.next_value_seed(Checked { depth })?,
            }
        }
        Ok(Value::Object(kept))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Value, A::Error> {
        let Keep::Each(keep) = self.keep else {
            return Checked { depth: self.depth }.visit_seq(items).map(|()| Value::Null);
        };
        let element = Pick { keep, depth: enter(self.depth)? };
        let mut kept = Vec::new();
        while let Some(value) = items.next_element_seed(element)? {
            kept.push(value);
        }
        Ok(Value::Array(kept))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_str<E>(self, _: &str) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}
