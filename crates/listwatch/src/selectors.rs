//! Label and field selectors, parsed as the real server parses them and matched against
//! JSON objects. Pure: no I/O, and never a silent "match everything" for input it cannot
//! parse (that is a 400).

use serde_json::Value;

use crate::error::Error;

/// What selectors read from an object. Implemented for JSON values and for stored
/// objects, which keep their labels and identity apart from their encoded bytes.
pub trait Selectable {
    /// The value of label `key`.
    fn label(&self, key: &str) -> Option<&str>;
    /// The value at a dotted field path as a field selector compares it: strings as they
    /// are, other scalars in their JSON form, a missing or null field as "".
    fn field(&self, path: &str) -> String;
}

impl Selectable for Value {
    fn label(&self, key: &str) -> Option<&str> {
        self["metadata"]["labels"].get(key).and_then(Value::as_str)
    }

    fn field(&self, path: &str) -> String {
        match path.split('.').try_fold(self, |v, seg| v.get(seg)) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum LabelRequirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<LabelRequirement>);

impl LabelSelector {
    pub fn parse(raw: &str) -> Result<Self, Error> {
        let mut requirements = Vec::new();
        for part in split_top_level(raw) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            requirements.push(parse_requirement(part)?);
        }
        Ok(Self(requirements))
    }

    pub fn matches(&self, object: &(impl Selectable + ?Sized)) -> bool {
        let get = |k: &str| object.label(k);
        self.0.iter().all(|r| match r {
            LabelRequirement::Equals(k, v) => get(k) == Some(v.as_str()),
            LabelRequirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            LabelRequirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelRequirement::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            LabelRequirement::Exists(k) => get(k).is_some(),
            LabelRequirement::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

/// Splits on commas outside parentheses (`a in (x,y),b` is two requirements).
fn split_top_level(raw: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in raw.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&raw[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&raw[start..]);
    parts
}

fn bad(part: &str, why: &str) -> Error {
    Error::BadRequest(format!("unable to parse requirement: {part:?}: {why}"))
}

fn check_key<'a>(key: &'a str, part: &str) -> Result<&'a str, Error> {
    let key = key.trim();
    let valid = !key.is_empty()
        && key.len() <= 317
        && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if valid { Ok(key) } else { Err(bad(part, "invalid label key")) }
}

fn check_value<'a>(value: &'a str, part: &str) -> Result<&'a str, Error> {
    let value = value.trim();
    let valid = value.len() <= 63 && value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid { Ok(value) } else { Err(bad(part, "invalid label value")) }
}

fn parse_requirement(part: &str) -> Result<LabelRequirement, Error> {
    if let Some(key) = part.strip_prefix('!') {
        return Ok(LabelRequirement::DoesNotExist(check_key(key, part)?.to_string()));
    }
    for (op, negated) in [(" notin ", true), (" in ", false)] {
        if let Some((key, set)) = part.split_once(op) {
            let set = set.trim();
            let inner = set
                .strip_prefix('(')
                .and_then(|s| s.strip_suffix(')'))
                .ok_or_else(|| bad(part, "set must be parenthesised"))?;
            let values =
                inner.split(',').map(|v| check_value(v, part).map(str::to_string)).collect::<Result<Vec<_>, _>>()?;
            let key = check_key(key, part)?.to_string();
            return Ok(if negated { LabelRequirement::NotIn(key, values) } else { LabelRequirement::In(key, values) });
        }
    }
    if let Some((key, value)) = part.split_once("!=") {
        return Ok(LabelRequirement::NotEquals(check_key(key, part)?.into(), check_value(value, part)?.into()));
    }
    if let Some((key, value)) = part.split_once("==").or_else(|| part.split_once('=')) {
        return Ok(LabelRequirement::Equals(check_key(key, part)?.into(), check_value(value, part)?.into()));
    }
    Ok(LabelRequirement::Exists(check_key(part, part)?.to_string()))
}

/// A field selector: `path=value`, `path==value`, `path!=value`, comma-separated.
/// Any dotted path of the object is accepted (the real server allows a per-resource
/// list); a missing field compares as the empty string.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    pub fn parse(raw: &str) -> Result<Self, Error> {
        let mut out = Vec::new();
        for part in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (path, equal, value) = if let Some((p, v)) = part.split_once("!=") {
                (p, false, v)
            } else if let Some((p, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (p, true, v)
            } else {
                return Err(Error::BadRequest(format!("invalid field selector: {part:?}")));
            };
            out.push((path.trim().to_string(), equal, value.trim().to_string()));
        }
        Ok(Self(out))
    }

    /// Whether the selector requires `path` to equal `value` (so it matches nothing else).
    pub fn requires_equal(&self, path: &str, value: &str) -> bool {
        self.0.iter().any(|(p, equal, v)| *equal && p == path && v == value)
    }

    pub fn matches(&self, object: &(impl Selectable + ?Sized)) -> bool {
        self.0.iter().all(|(path, equal, value)| (object.field(path) == *value) == *equal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}, "spec": {"clusterIP": "None"}})
    }

    #[test]
    fn label_selector_table() {
        let o = obj(json!({"app": "web", "tier": "front", "empty": ""}));
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app=api", false),
            ("app!=api", true),
            ("app!=web", false),
            ("missing!=x", true),
            ("app in (api, web)", true),
            ("app in (api)", false),
            ("app notin (api)", true),
            ("app notin (web,api)", false),
            ("missing notin (web)", true),
            ("missing in (web)", false),
            ("app", true),
            ("missing", false),
            ("!missing", true),
            ("!app", false),
            ("empty=", true),
            ("app=web,tier=front", true),
            ("app in (web,api),!service.kubernetes.io/headless", true),
            ("app=web,tier=back", false),
        ];
        for (selector, want) in cases {
            let parsed = LabelSelector::parse(selector).unwrap_or_else(|e| panic!("{selector}: {e}"));
            assert_eq!(parsed.matches(&o), want, "{selector}");
        }
    }

    #[test]
    fn malformed_label_selectors_are_bad_requests() {
        for selector in ["app in web", "app=we b", "a b c=d", "=x", "app in (x y)"] {
            let err = LabelSelector::parse(selector).expect_err(selector);
            assert_eq!((err.code(), err.reason()), (400, "BadRequest"), "{selector}");
        }
    }

    #[test]
    fn field_selector_table() {
        let o = obj(json!({}));
        for (selector, want) in [
            ("metadata.name=a", true),
            ("metadata.name==b", false),
            ("metadata.namespace=ns,metadata.name=a", true),
            ("spec.clusterIP!=None", false),
            ("spec.clusterIP=None", true),
            ("spec.nodeName=", true),
        ] {
            assert_eq!(FieldSelector::parse(selector).unwrap().matches(&o), want, "{selector}");
        }
        assert_eq!(FieldSelector::parse("metadata.name").unwrap_err().code(), 400);
    }

    #[test]
    fn a_required_equality_is_found_among_other_terms() {
        let requires = |raw: &str| FieldSelector::parse(raw).unwrap().requires_equal("metadata.name", "n1");
        assert!(requires("metadata.name=n1"));
        assert!(requires("spec.unschedulable=false,metadata.name==n1"));
        assert!(!requires("metadata.name!=n1"));
        assert!(!requires("metadata.name=n2"));
        assert!(!requires("metadata.namespace=n1"));
        assert!(!requires(""));
    }
}
