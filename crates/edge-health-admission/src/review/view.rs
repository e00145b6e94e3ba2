//! What each hook's rule reads of its object, typed: the object "decodes" when these
//! fields have the types Kubernetes gives them (or are absent or `null`).
//!
//! The other fields are not judged: the apiserver sends a webhook its own encoding of an
//! object it has already decoded, so they always have their types, and checking them all
//! (k8s-openapi's typed decoding of the whole object) would cost about a third of a slice
//! review's CPU time without ever changing an answer.
//!
//! The views are read by serde, from the request's text (the lean reading, which borrows
//! the strings) or from a `serde_json::Value` (the tree reading): one definition of what
//! decodes for both. Objects are read only from JSON objects ([`Obj`]: serde's derived
//! structs would read an array too, by position).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use edgegrid_core::admission::{SliceEndpoint, Subset};
use edgegrid_core::keys;
use edgegrid_core::protection::{NodeReading, ReadyCondition, Timestamp};
use serde::Deserialize;
use serde::de::value::{BorrowedStrDeserializer, MapAccessDeserializer, StringDeserializer};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use super::Hook;

/// The key with which serde_json marks a raw value: `Value` reads an object whose first key
/// it is as the JSON text of its value, so a reading that does not build `Value`s cannot
/// read such an object as `Value` would: it gives up.
const RAW_VALUE_MARKER: &str = "$serde_json::private::RawValue";

/// A key, as `Value` reads it; the raw-value marker is an error.
pub(super) struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        let Text(key) = Text::deserialize(deserializer)?;
        if key == RAW_VALUE_MARKER {
            return Err(de::Error::custom("serde_json's raw-value marker key: read as a tree"));
        }
        Ok(key)
    }
}

/// A string, borrowed from the request's text where it has no escapes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Text<'a>(pub Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(text)))
            }

            fn visit_str<E>(self, text: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(text.to_string())))
            }

            fn visit_string<E>(self, text: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(text)))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

fn text<'a>(text: &'a Option<Text<'_>>) -> Option<&'a str> {
    text.as_ref().map(|t| t.0.as_ref())
}

/// `metav1.Time`: a string holding an RFC 3339 time, read as the instant it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Time(pub Timestamp);

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Text::deserialize(deserializer)?;
        match text.0.parse::<Timestamp>() {
            Ok(time) => Ok(Time(time)),
            Err(error) => Err(de::Error::custom(format_args!("{:?} is not an RFC 3339 time: {error}", text.0))),
        }
    }
}

/// `T` read from a JSON object, and only from one; its keys read as `Value` reads them
/// (see [`RAW_VALUE_MARKER`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Obj<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjVisitor<T> {
            type Value = Obj<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }

            fn visit_map<A: MapAccess<'de>>(self, fields: A) -> Result<Obj<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(Keys(fields))).map(Obj)
            }
        }
        deserializer.deserialize_map(ObjVisitor(PhantomData))
    }
}

/// An object's fields, each key read as [`Key`] first.
struct Keys<A>(A);

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Keys<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, A::Error> {
        let Some(key) = self.0.next_key_seed(Key)? else { return Ok(None) };
        match key {
            Cow::Borrowed(key) => seed.deserialize(BorrowedStrDeserializer::new(key)).map(Some),
            Cow::Owned(key) => seed.deserialize(StringDeserializer::new(key)).map(Some),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.0.next_value_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

// --- Node -------------------------------------------------------------------------------

/// What the node rule reads of a Node: its two annotations, each condition's type, status
/// and transition time, each taint's key and effect.
#[derive(Clone, Debug, Default, Deserialize)]
pub(super) struct NodeView<'a> {
    #[serde(borrow)]
    metadata: Option<Obj<NodeMetadata<'a>>>,
    #[serde(borrow)]
    spec: Option<Obj<NodeSpec<'a>>>,
    #[serde(borrow)]
    status: Option<Obj<NodeStatus<'a>>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct NodeMetadata<'a> {
    #[serde(borrow)]
    name: Option<Text<'a>>,
    #[serde(borrow)]
    annotations: Option<Obj<NodeAnnotations<'a>>>,
}

/// The annotations the rule reads (`edgegrid_core::keys`; a test holds the names to them).
#[derive(Clone, Debug, Default, Deserialize)]
struct NodeAnnotations<'a> {
    #[serde(borrow, rename = "nodeunhealth")]
    unhealth: Option<Text<'a>>,
    #[serde(borrow, rename = "superedge.io/max-unreachable-protection")]
    max_unreachable_protection: Option<Text<'a>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct NodeSpec<'a> {
    #[serde(borrow)]
    taints: Option<Vec<Obj<Taint<'a>>>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct Taint<'a> {
    #[serde(borrow)]
    key: Option<Text<'a>>,
    #[serde(borrow)]
    effect: Option<Text<'a>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct NodeStatus<'a> {
    #[serde(borrow)]
    conditions: Option<Vec<Obj<NodeCondition<'a>>>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeCondition<'a> {
    #[serde(borrow, rename = "type")]
    type_: Option<Text<'a>>,
    #[serde(borrow)]
    status: Option<Text<'a>>,
    last_transition_time: Option<Time>,
}

impl NodeView<'_> {
    /// The node's name (whom edge-health must watch for the rule to protect it).
    pub(super) fn name(&self) -> Option<&str> {
        self.metadata.as_ref().and_then(|m| text(&m.0.name))
    }

    pub(super) fn reading(&self) -> NodeReading<'_> {
        let annotations = self.metadata.as_ref().and_then(|m| m.0.annotations.as_ref()).map(|a| &a.0);
        let conditions = self.status.as_ref().and_then(|s| s.0.conditions.as_deref()).unwrap_or_default();
        let ready = conditions.iter().map(|c| &c.0).find(|c| text(&c.type_) == Some(keys::NODE_CONDITION_READY));
        NodeReading {
            ready: ready.map(|ready| ReadyCondition {
                status: text(&ready.status),
                last_transition_time: ready.last_transition_time.map(|t| t.0),
            }),
            unhealth: annotations.and_then(|a| text(&a.unhealth)),
            max_unreachable_protection: annotations.and_then(|a| text(&a.max_unreachable_protection)),
        }
    }

    /// Each taint's key and effect, in order; `None` without a taint list.
    pub(super) fn taints(&self) -> Option<impl Iterator<Item = (Option<&str>, Option<&str>)>> {
        let taints = self.spec.as_ref()?.0.taints.as_ref()?;
        Some(taints.iter().map(|t| (text(&t.0.key), text(&t.0.effect))))
    }
}

// --- Endpoints --------------------------------------------------------------------------

/// What the Endpoints rule reads: each subset's two address lists.
#[derive(Clone, Debug, Default, Deserialize)]
pub(super) struct EndpointsView {
    subsets: Option<Vec<Obj<EndpointSubset>>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct EndpointSubset {
    addresses: Option<Addresses>,
    not_ready_addresses: Option<Addresses>,
}

/// An address list, each address kept whole (a patch copies it, fields unknown here
/// included): each an object whose `nodeName`, if any, is a string.
#[derive(Clone, Debug, Default)]
struct Addresses(Vec<Value>);

impl<'de> Deserialize<'de> for Addresses {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let addresses = Vec::<Value>::deserialize(deserializer)?;
        for (i, address) in addresses.iter().enumerate() {
            match address {
                Value::Object(fields) => match fields.get("nodeName") {
                    None | Some(Value::Null | Value::String(_)) => {}
                    Some(_) => return Err(de::Error::custom(format_args!("[{i}].nodeName: expected a string"))),
                },
                _ => return Err(de::Error::custom(format_args!("[{i}]: expected an object"))),
            }
        }
        Ok(Addresses(addresses))
    }
}

impl EndpointsView {
    /// The subsets, in order; `None` without a subset list.
    pub(super) fn subsets(&self) -> Option<impl Iterator<Item = Subset<'_>>> {
        let subsets = self.subsets.as_ref()?;
        Some(subsets.iter().map(|s| Subset {
            addresses: s.0.addresses.as_ref().map(|a| a.0.as_slice()),
            not_ready_addresses: s.0.not_ready_addresses.as_ref().map(|a| a.0.as_slice()),
        }))
    }
}

// --- EndpointSlice ----------------------------------------------------------------------

/// What the EndpointSlice rule reads: each endpoint's node and ready/terminating conditions.
#[derive(Clone, Debug, Default, Deserialize)]
pub(super) struct SliceView<'a> {
    #[serde(borrow)]
    endpoints: Option<Vec<Obj<Endpoint<'a>>>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Endpoint<'a> {
    #[serde(borrow)]
    node_name: Option<Text<'a>>,
    conditions: Option<Obj<EndpointConditions>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct EndpointConditions {
    ready: Option<bool>,
    terminating: Option<bool>,
}

impl SliceView<'_> {
    /// The endpoints, in order; `None` without an endpoint list.
    pub(super) fn endpoints(&self) -> Option<impl Iterator<Item = SliceEndpoint<'_>>> {
        let endpoints = self.endpoints.as_ref()?;
        Some(endpoints.iter().map(|e| {
            let conditions = e.0.conditions.as_ref().map(|c| &c.0);
            SliceEndpoint {
                node_name: text(&e.0.node_name),
                ready: conditions.and_then(|c| c.ready),
                terminating: conditions.and_then(|c| c.terminating),
            }
        }))
    }
}

// --- Any of them ------------------------------------------------------------------------

/// The view of a hook's object.
#[derive(Clone, Debug)]
pub(super) enum ObjectView<'a> {
    Node(NodeView<'a>),
    Endpoints(EndpointsView),
    Slice(SliceView<'a>),
}

impl ObjectView<'static> {
    /// Reads `hook`'s view of an object from its tree; why it does not decode, with the
    /// path of the field that does not.
    pub(super) fn from_value(hook: Hook, object: Value) -> Result<Self, String> {
        fn read<T: Deserialize<'static>>(object: Value) -> Result<T, String> {
            serde_path_to_error::deserialize::<_, Obj<T>>(object).map(|o| o.0).map_err(|e| e.to_string())
        }
        match hook {
            Hook::NodeTaint => read(object).map(ObjectView::Node),
            Hook::Endpoint => read(object).map(ObjectView::Endpoints),
            Hook::EndpointSlice => read(object).map(ObjectView::Slice),
        }
    }
}

/// Reads `hook`'s view of an object (from the request's text).
#[derive(Clone, Copy)]
pub(super) struct ViewSeed(pub Hook);

impl<'de> DeserializeSeed<'de> for ViewSeed {
    type Value = ObjectView<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        match self.0 {
            Hook::NodeTaint => Obj::deserialize(deserializer).map(|o| ObjectView::Node(o.0)),
            Hook::Endpoint => Obj::deserialize(deserializer).map(|o| ObjectView::Endpoints(o.0)),
            Hook::EndpointSlice => Obj::deserialize(deserializer).map(|o| ObjectView::Slice(o.0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Both ways of reading an object: from its text (borrowing) and from its tree.
    fn both(hook: Hook, object: &Value) -> (Result<ObjectView<'static>, String>, Result<ObjectView<'static>, String>) {
        let text = Box::leak(object.to_string().into_boxed_str());
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let lean = ViewSeed(hook).deserialize(&mut deserializer).map_err(|e| e.to_string());
        (lean, ObjectView::from_value(hook, object.clone()))
    }

    #[test]
    fn the_node_view_reads_the_annotations_conditions_and_taints_the_rule_names() {
        let node = json!({
            "metadata": {"annotations": {(keys::NODE_UNHEALTH_ANNOTATION): "yes",
                (keys::MAX_UNREACHABLE_PROTECTION_ANNOTATION): "1h", "other": "x"}},
            "spec": {"taints": [{"key": keys::TAINT_UNREACHABLE, "effect": keys::TAINT_EFFECT_NO_EXECUTE, "timeAdded": null}, {}]},
            "status": {"conditions": [{"type": "MemoryPressure", "status": "False"},
                {"type": keys::NODE_CONDITION_READY, "status": "Unknown", "lastTransitionTime": "2026-11-22T10:00:00Z"}]}});
        let (Ok(ObjectView::Node(lean)), Ok(ObjectView::Node(tree))) = both(Hook::NodeTaint, &node) else {
            panic!("both read a Node view")
        };
        let want = NodeReading {
            ready: Some(ReadyCondition::from_text(Some("Unknown"), Some("2026-11-22T10:00:00Z"))),
            unhealth: Some("yes"),
            max_unreachable_protection: Some("1h"),
        };
        assert_eq!((lean.reading(), tree.reading()), (want, want));
        assert_eq!((lean.reading(), tree.reading()), (NodeReading::of(&node), NodeReading::of(&node)));
        let taints: Vec<_> = lean.taints().expect("a taint list").collect();
        assert_eq!(taints, [(Some(keys::TAINT_UNREACHABLE), Some(keys::TAINT_EFFECT_NO_EXECUTE)), (None, None)]);
        assert!(
            matches!(
                &lean.metadata,
                Some(Obj(NodeMetadata {
                    annotations: Some(Obj(NodeAnnotations { unhealth: Some(Text(Cow::Borrowed(_))), .. })),
                    ..
                }))
            ),
            "strings borrowed from the text"
        );
    }

    #[test]
    fn a_read_field_of_another_type_does_not_decode_and_is_named_by_its_path() {
        let cases = [
            (
                Hook::NodeTaint,
                json!({"spec": {"taints": {"key": "k"}}}),
                "spec.taints: invalid type: map, expected a sequence",
            ),
            (
                Hook::NodeTaint,
                json!({"status": {"conditions": [{"type": "Ready"}, {"type": 5}]}}),
                "status.conditions[1].type: invalid type: integer `5`, expected a string",
            ),
            (
                Hook::NodeTaint,
                json!({"metadata": {"annotations": {"nodeunhealth": true}}}),
                "metadata.annotations.nodeunhealth: invalid type: boolean `true`, expected a string",
            ),
            (
                Hook::NodeTaint,
                json!({"spec": {"taints": [null]}}),
                "spec.taints[0]: invalid type: null, expected an object",
            ),
            (
                Hook::NodeTaint,
                json!({"spec": {"taints": [["node.kubernetes.io/unreachable", "NoExecute"]]}}),
                "spec.taints[0]: invalid type: sequence, expected an object",
            ),
            (
                Hook::EndpointSlice,
                json!({"endpoints": [{"conditions": {"ready": "false"}}]}),
                "endpoints[0].conditions.ready: invalid type: string \"false\", expected a boolean",
            ),
            (
                Hook::Endpoint,
                json!({"subsets": [{"notReadyAddresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2", "nodeName": 7}]}]}),
                "subsets[0].notReadyAddresses: [1].nodeName: expected a string",
            ),
            (
                Hook::Endpoint,
                json!({"subsets": [{"addresses": ["10.0.0.1"]}]}),
                "subsets[0].addresses: [0]: expected an object",
            ),
        ];
        for (hook, object, message) in cases {
            let (lean, tree) = both(hook, &object);
            assert!(lean.is_err(), "{object}: the lean reading gives up");
            assert_eq!(tree.map(|_| ()), Err(message.to_string()), "{object}");
        }
        let (lean, tree) =
            both(Hook::NodeTaint, &json!({"status": {"conditions": [{"lastTransitionTime": "yesterday"}]}}));
        assert!(lean.is_err());
        let message = tree.map(|_| ()).unwrap_err();
        assert!(
            message.starts_with("status.conditions[0].lastTransitionTime: \"yesterday\" is not an RFC 3339 time: "),
            "{message}"
        );
    }

    #[test]
    fn absent_and_null_fields_and_the_fields_nobody_reads_decode() {
        for (hook, object) in [
            (Hook::NodeTaint, json!({})),
            (
                Hook::NodeTaint,
                json!({"metadata": null, "spec": {"taints": null}, "status": {"conditions": [{"type": null}]}}),
            ),
            (Hook::NodeTaint, json!({"metadata": {"labels": 5, "annotations": {"a": 1}}, "status": {"images": "x"}})),
            (
                Hook::EndpointSlice,
                json!({"endpoints": [{"addresses": 7, "conditions": {"serving": "yes"}}], "ports": "x"}),
            ),
            (Hook::Endpoint, json!({"subsets": [{"addresses": [{"ip": 5, "futureField": [1]}], "ports": 1}]})),
        ] {
            let (lean, tree) = both(hook, &object);
            assert!(lean.is_ok() && tree.is_ok(), "{object}: {lean:?} {tree:?}");
        }
    }
}
