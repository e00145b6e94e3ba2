//! Reading an AdmissionReview in one pass over the body, without building its JSON tree.
//!
//! The pass keeps the few fields a decision needs (`apiVersion`, `kind`, `request.uid`,
//! `request.resource`, `request.operation`) and reads `request.object` as the hook's
//! [`ObjectView`], borrowing its strings from the body. Everything else (`oldObject`,
//! `userInfo`, the object's other fields) is only checked to be JSON by serde_json's
//! skipping parser and dropped.
//!
//! It must answer every review as the tree reading (`serde_json::Value`) would, except on
//! JSON that no apiserver writes and that only a parser building values refuses, in parts
//! nobody reads: numbers beyond `f64`, lone UTF-16 surrogates in escapes, nesting deeper
//! than 128, serde_json's raw-value marker key holding text that is not JSON. Those it
//! answers; the tree reading would refuse the body. Otherwise it gives up (`None`) on
//! anything unusual (not an AdmissionReview, no uid, an envelope field given twice, an
//! object that does not read as the view, a read field given twice, serde_json's raw-value
//! marker key where keys are read, invalid JSON) and the caller reads the body as a tree,
//! which says exactly what is wrong. It has no errors of its own.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::view::{Key, ObjectView, ViewSeed};
use super::{API_VERSIONS, Hook, ObjectReading, Review};

/// Reads `body`, `request.object` as `hook`'s view; `None` when it is not the usual review.
pub(super) fn review(body: &[u8], hook: Hook) -> Option<Review<'_>> {
    // UTF-8 checked once for all, not string by string
    let mut deserializer = serde_json::Deserializer::from_str(std::str::from_utf8(body).ok()?);
    let fields = Body { hook }.deserialize(&mut deserializer).ok()?;
    deserializer.end().ok()?;
    let api_version = API_VERSIONS.into_iter().find(|v| fields.api_version.as_deref() == Some(*v))?;
    if fields.kind.as_deref() != Some("AdmissionReview") {
        return None;
    }
    let request = fields.request?;
    let uid = request.uid.filter(|uid| !uid.is_empty())?;
    Some(Review {
        api_version,
        uid,
        group: request.group,
        resource: request.resource,
        operation: request.operation,
        object: request.object.map_or(ObjectReading::NotAnObject, ObjectReading::View),
        lean: true,
    })
}

fn give_up<E: de::Error>() -> E {
    E::custom("not the usual review: read as a tree")
}

/// Skips an object whose fields nobody reads, its keys read as `Value` reads them (an
/// object led by the raw-value marker is no object to `Value`).
fn skip_map<'de, A: MapAccess<'de>>(mut fields: A) -> Result<(), A::Error> {
    while fields.next_key_seed(Key)?.is_some() {
        fields.next_value::<IgnoredAny>()?;
    }
    Ok(())
}

fn skip_seq<'de, A: SeqAccess<'de>>(mut items: A) -> Result<(), A::Error> {
    while items.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

/// A string, or `None` for any other value (checked and dropped): `Value::as_str` (the
/// view's `Text` is a string or an error).
struct AsStr;

impl<'de> DeserializeSeed<'de> for AsStr {
    type Value = Option<Cow<'de, str>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for AsStr {
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
        skip_seq(items).map(|()| None)
    }

    fn visit_map<A: MapAccess<'de>>(self, fields: A) -> Result<Self::Value, A::Error> {
        skip_map(fields).map(|()| None)
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
struct Body {
    hook: Hook,
}

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
        let (mut api_version, mut kind, mut request) = (None, None, None);
        while let Some(key) = fields.next_key_seed(Key)? {
            match key.as_ref() {
                "apiVersion" => once(&mut api_version, fields.next_value_seed(AsStr)?)?,
                "kind" => once(&mut kind, fields.next_value_seed(AsStr)?)?,
                "request" => once(&mut request, fields.next_value_seed(Request { hook: self.hook })?)?,
                _ => fields.next_value::<IgnoredAny>().map(drop)?,
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
    object: Option<ObjectView<'a>>,
}

/// `request`: an object (anything else gives up).
struct Request {
    hook: Hook,
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
        let (mut uid, mut resource, mut operation, mut object) = (None, None, None, None);
        while let Some(key) = fields.next_key_seed(Key)? {
            match key.as_ref() {
                "uid" => once(&mut uid, fields.next_value_seed(AsStr)?)?,
                "resource" => once(&mut resource, fields.next_value_seed(Resource)?)?,
                "operation" => once(&mut operation, fields.next_value_seed(AsStr)?)?,
                "object" => once(&mut object, fields.next_value_seed(ViewSeed(self.hook))?)?,
                _ => fields.next_value::<IgnoredAny>().map(drop)?,
            }
        }
        let (group, resource) = resource.unwrap_or_default();
        Ok(RequestFields { uid: uid.flatten(), group, resource, operation: operation.flatten(), object })
    }
}

/// `request.resource`'s `group` and `resource` when it is an object and they are strings
/// (`Value` indexing: anything else reads as absent).
struct Resource;

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
        let (mut group, mut resource) = (None, None);
        while let Some(key) = fields.next_key_seed(Key)? {
            match key.as_ref() {
                "group" => once(&mut group, fields.next_value_seed(AsStr)?)?,
                "resource" => once(&mut resource, fields.next_value_seed(AsStr)?)?,
                _ => fields.next_value::<IgnoredAny>().map(drop)?,
            }
        }
        Ok((group.flatten(), resource.flatten()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, items: A) -> Result<Self::Value, A::Error> {
        skip_seq(items).map(|()| (None, None))
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
