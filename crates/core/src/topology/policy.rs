//! A Service's topology policy: which of its endpoints a node may see.
//!
//! Read from two annotations so that existing SuperEdge manifests keep their meaning:
//! - `topologyKeys: '["k1","k2"]'` alone: SuperEdge's rule, keep an endpoint when its node
//!   shares the local node's value for ANY listed key.
//! - plus `superedge.io/topology-mode: ordered`: the retired Kubernetes `topologyKeys` rule,
//!   the FIRST key that leaves at least one ready endpoint wins; a trailing `"*"` means
//!   "any endpoint" when no key wins.
//!
//! In `any` mode `"*"` is an ordinary key that no node can carry (it is not a valid label
//! key), exactly as in SuperEdge, so adding the wildcard never silently widens an existing
//! manifest: users opt into fallback with the mode annotation.

use std::collections::BTreeMap;

use crate::keys;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TopologyPolicy {
    /// No `topologyKeys` annotation (or an empty list): every endpoint is kept.
    PassThrough,
    /// SuperEdge semantics: same value for any of these keys.
    AnyKey(Vec<String>),
    /// Ordered fallback; see [`OrderedKey`].
    Ordered(Vec<OrderedKey>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OrderedKey {
    Label(String),
    /// `"*"`: every endpoint, with or without a node. Only meaningful last.
    Wildcard,
}

/// Why a Service's topology annotations could not be read. The view then passes the
/// Service through unpruned (what SuperEdge did) and the wrapper reports the error,
/// because dropping all traffic on a typo is worse than losing isolation for a while.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("annotation {annotation} must be a JSON list of strings, got {value:?}: {reason}")]
    MalformedKeys { annotation: &'static str, value: String, reason: String },
    #[error("annotation {annotation} must be \"any\" or \"ordered\", got {value:?}")]
    UnknownMode { annotation: &'static str, value: String },
    #[error("in ordered mode \"*\" must be the last entry of {annotation}, got {keys:?}")]
    WildcardNotLast { annotation: &'static str, keys: Vec<String> },
    #[error("{annotation} contains an empty key: {keys:?}")]
    EmptyKey { annotation: &'static str, keys: Vec<String> },
}

impl TopologyPolicy {
    /// Reads the policy from a Service's annotations.
    pub fn from_annotations(annotations: Option<&BTreeMap<String, String>>) -> Result<Self, PolicyError> {
        let Some(annotations) = annotations else {
            return Ok(Self::PassThrough);
        };
        let ordered = match annotations.get(keys::TOPOLOGY_MODE_ANNOTATION).map(String::as_str) {
            None | Some("any") => false,
            Some("ordered") => true,
            Some(other) => {
                return Err(PolicyError::UnknownMode {
                    annotation: keys::TOPOLOGY_MODE_ANNOTATION,
                    value: other.to_string(),
                });
            }
        };
        let Some(raw) = annotations.get(keys::TOPOLOGY_KEYS_ANNOTATION) else {
            return Ok(Self::PassThrough);
        };
        let list: Vec<String> = serde_json::from_str(raw).map_err(|e| PolicyError::MalformedKeys {
            annotation: keys::TOPOLOGY_KEYS_ANNOTATION,
            value: raw.clone(),
            reason: e.to_string(),
        })?;
        if list.is_empty() {
            return Ok(Self::PassThrough);
        }
        if list.iter().any(String::is_empty) {
            return Err(PolicyError::EmptyKey { annotation: keys::TOPOLOGY_KEYS_ANNOTATION, keys: list });
        }
        if !ordered {
            return Ok(Self::AnyKey(list));
        }
        let last = list.len() - 1;
        if list[..last].iter().any(|k| k == keys::TOPOLOGY_WILDCARD) {
            return Err(PolicyError::WildcardNotLast { annotation: keys::TOPOLOGY_KEYS_ANNOTATION, keys: list });
        }
        Ok(Self::Ordered(
            list.into_iter()
                .map(|k| if k == keys::TOPOLOGY_WILDCARD { OrderedKey::Wildcard } else { OrderedKey::Label(k) })
                .collect(),
        ))
    }

    pub fn is_pass_through(&self) -> bool {
        matches!(self, Self::PassThrough)
    }

    /// Whether one slice's pruned form can depend on the Service's other slices.
    pub fn spans_slices(&self) -> bool {
        matches!(self, Self::Ordered(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYS: &str = keys::TOPOLOGY_KEYS_ANNOTATION;
    const MODE: &str = keys::TOPOLOGY_MODE_ANNOTATION;

    fn parse(pairs: &[(&str, &str)]) -> Result<TopologyPolicy, PolicyError> {
        let map: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        TopologyPolicy::from_annotations(Some(&map))
    }

    #[test]
    fn policy_table() {
        use OrderedKey::*;
        use TopologyPolicy::*;
        let label = |s: &str| Label(s.to_string());
        type Case = (&'static str, Vec<(&'static str, &'static str)>, Result<TopologyPolicy, PolicyError>);
        let cases: Vec<Case> = vec![
            ("no annotations", vec![], Ok(PassThrough)),
            ("unrelated annotation", vec![("a", "b")], Ok(PassThrough)),
            ("superedge default", vec![(KEYS, r#"["zone1"]"#)], Ok(AnyKey(vec!["zone1".into()]))),
            (
                "explicit any mode",
                vec![(KEYS, r#"["a","b"]"#), (MODE, "any")],
                Ok(AnyKey(vec!["a".into(), "b".into()])),
            ),
            ("empty list", vec![(KEYS, "[]")], Ok(PassThrough)),
            (
                "wildcard in any mode is an ordinary key, as in SuperEdge",
                vec![(KEYS, r#"["zone","*"]"#)],
                Ok(AnyKey(vec!["zone".into(), "*".into()])),
            ),
            (
                "ordered with wildcard",
                vec![(KEYS, r#"["unit","zone","*"]"#), (MODE, "ordered")],
                Ok(Ordered(vec![label("unit"), label("zone"), Wildcard])),
            ),
            ("mode without keys", vec![(MODE, "ordered")], Ok(PassThrough)),
            (
                "wildcard not last",
                vec![(KEYS, r#"["*","zone"]"#), (MODE, "ordered")],
                Err(PolicyError::WildcardNotLast { annotation: KEYS, keys: vec!["*".into(), "zone".into()] }),
            ),
            (
                "unknown mode",
                vec![(KEYS, r#"["zone"]"#), (MODE, "Ordered")],
                Err(PolicyError::UnknownMode { annotation: MODE, value: "Ordered".into() }),
            ),
            (
                "empty key",
                vec![(KEYS, r#"["zone",""]"#)],
                Err(PolicyError::EmptyKey { annotation: KEYS, keys: vec!["zone".into(), "".into()] }),
            ),
        ];
        for (name, annotations, want) in cases {
            assert_eq!(parse(&annotations), want, "case {name}");
        }
        assert_eq!(TopologyPolicy::from_annotations(None), Ok(PassThrough));
    }

    #[test]
    fn malformed_keys_name_the_annotation_and_value() {
        for raw in ["zone1", r#"{"a":1}"#, "[1,2]", r#"["a""#] {
            match parse(&[(KEYS, raw)]) {
                Err(PolicyError::MalformedKeys { annotation, value, .. }) => {
                    assert_eq!(annotation, KEYS);
                    assert_eq!(value, raw);
                }
                other => panic!("{raw}: expected MalformedKeys, got {other:?}"),
            }
        }
    }
}
