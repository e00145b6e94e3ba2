//! The edge rule, in the one place it is written: whether a node whose Ready condition
//! went Unknown keeps its pods and endpoints, because the unit's peers still see it alive
//! and so it is the cloud link that failed, not the node.
//!
//! A node is protected when its Ready condition is Unknown, edge-health watches it (it is a
//! member of a unit whose peers probe it and vote on it: [`crate::unit::membership`]), it
//! is not annotated `nodeunhealth` (any value: the vote's writers mark a node its unit
//! voted down `"yes"` and one it reached no verdict on `"undecided"`, so the annotation is
//! absent only where two peers vouch for the node, see [`crate::unit::verdict`]), and it
//! has not been Unknown for longer than its protection limit. The limit is the cluster-wide
//! one (`--max-unreachable-protection`), or the node's
//! [`MAX_UNREACHABLE_PROTECTION_ANNOTATION`] when that is valid and shorter: a node may ask
//! to be protected for less, never for more (the annotation is on the node's own object,
//! which its edge identity may be able to write). Zero means unlimited. Once the limit has
//! passed, or for a node nobody watches, the node is handled as stock Kubernetes would
//! handle it.
//!
//! Both enforcers call [`judge`]: the admission mutations (on the raw JSON the apiserver
//! sends, see [`crate::admission`]) and the edge-aware node lifecycle controller (on its
//! own snapshots and judged readiness), each under the [`ProtectionPolicy`] its flags set.
//! What a Node's object says is read here, once, into a [`NodeReading`] (from a typed
//! Node, its JSON, or a caller's own parse of the fields the reading names); the webhook
//! turns it into [`NodeFacts`] with [`NodeReading::facts`], the controller combines it
//! with the readiness it judged itself. Neither may re-state the rule.
//!
//! Pure: the current time is an argument, never read here. Time is wall-clock
//! [`Timestamp`], the representation of Kubernetes' `metav1.Time` (k8s-openapi's `Time`
//! wraps one), because the limit counts from the Ready condition's `lastTransitionTime`,
//! a wall-clock time written by the cloud-side controller that marked the node Unknown.
//!
//! [`MAX_UNREACHABLE_PROTECTION_ANNOTATION`]: crate::keys::MAX_UNREACHABLE_PROTECTION_ANNOTATION

use std::str::FromStr;
use std::time::Duration;

use jiff::SignedDuration;
pub use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use serde_json::Value;

use crate::keys;

/// The longest a node may stay Unknown and still be protected.
///
/// Written like a Go duration (`time.ParseDuration`): `30m`, `2h`, `1h30m`, `90s`, `1.5h`
/// (units `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`). Zero in any form (`0`, `0s`) means
/// [`Unlimited`](Self::Unlimited). Negative durations are invalid.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ProtectionLimit {
    /// Protected for as long as the node stays Unknown and is not voted unhealthy.
    #[default]
    Unlimited,
    /// Protected for at most this long after the Ready condition went Unknown (never zero).
    After(Duration),
}

impl ProtectionLimit {
    /// Zero is [`Unlimited`](Self::Unlimited), as for the `--max-unreachable-protection` flag.
    pub fn from_duration(limit: Duration) -> Self {
        if limit.is_zero() { Self::Unlimited } else { Self::After(limit) }
    }

    /// Parses the annotation / flag value (see the type's documentation for the format).
    pub fn parse(text: &str) -> Result<Self, InvalidLimit> {
        go_duration(text)
            .map(Self::from_duration)
            .map_err(|reason| InvalidLimit { value: text.to_string(), reason: reason.to_string() })
    }
}

impl FromStr for ProtectionLimit {
    type Err = InvalidLimit;

    fn from_str(text: &str) -> Result<Self, InvalidLimit> {
        Self::parse(text)
    }
}

/// A protection limit that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid protection limit {value:?}: {reason} (want a duration such as 30m, 2h or 1h30m; 0 is unlimited)")]
pub struct InvalidLimit {
    /// The text as written.
    pub value: String,
    /// What is wrong with it.
    pub reason: String,
}

/// A node's [`MAX_UNREACHABLE_PROTECTION_ANNOTATION`](keys::MAX_UNREACHABLE_PROTECTION_ANNOTATION), as read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum LimitAnnotation {
    /// Not annotated: the cluster-wide default applies.
    #[default]
    Absent,
    /// Annotated with a valid limit: it applies when it is shorter than the cluster-wide
    /// one; a longer one (or `0`, unlimited, under a bounded default) is ignored.
    Valid(ProtectionLimit),
    /// Annotated with something that does not parse. The cluster-wide default applies, as
    /// if the node were not annotated: a typo must neither remove the operator's bound nor
    /// evict at once. Callers report it (an Event, a metric) from here.
    Invalid(InvalidLimit),
}

impl LimitAnnotation {
    /// Reads the annotation's value (`None`: the node does not carry it).
    pub fn read(value: Option<&str>) -> Self {
        match value {
            None => Self::Absent,
            Some(text) => match ProtectionLimit::parse(text) {
                Ok(limit) => Self::Valid(limit),
                Err(invalid) => Self::Invalid(invalid),
            },
        }
    }

    /// The limit that applies to the node under the cluster-wide `default`: the shorter
    /// of the two.
    pub fn effective(&self, default: ProtectionLimit) -> ProtectionLimit {
        match (self, default) {
            (Self::Valid(ProtectionLimit::After(own)), ProtectionLimit::After(bound)) => {
                ProtectionLimit::After((*own).min(bound))
            }
            (Self::Valid(own), ProtectionLimit::Unlimited) => *own,
            (Self::Valid(ProtectionLimit::Unlimited) | Self::Absent | Self::Invalid(_), _) => default,
        }
    }

    /// The parse error to report, if the annotation is invalid.
    pub fn invalid(&self) -> Option<&InvalidLimit> {
        match self {
            Self::Invalid(invalid) => Some(invalid),
            _ => None,
        }
    }
}

/// Whether a node's `nodeunhealth` annotation value (`None`: absent) says its unit voted
/// it unhealthy. Its presence does, whatever the value, as every SuperEdge v0.9 reader
/// reads it (the webhook's `endpoint.go` and `nodetaint.go`, edge-health's `vote.go`):
/// in a cluster where both run, a node one of them holds voted down is voted down for the
/// other too. The conservative reading: a present annotation only ever removes the edge
/// protection, leaving the node to stock Kubernetes.
pub fn voted_unhealthy(nodeunhealth: Option<&str>) -> bool {
    nodeunhealth.is_some()
}

/// What the rule needs to know about a node; each enforcer fills it from what it has.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// The node's Ready condition is Unknown: the cloud stopped hearing from it. (The
    /// webhook reads the condition; the lifecycle controller uses its own judgment.)
    pub ready_unknown: bool,
    /// When the Ready condition went Unknown: its `lastTransitionTime`. `None` when absent
    /// or unparsable; only a bounded limit needs it.
    pub unknown_since: Option<Timestamp>,
    /// Edge-health watches the node ([`crate::unit::membership::WatchedNodes`]): only then
    /// can its not being voted unhealthy mean its peers see it alive.
    pub watched: bool,
    /// `nodeunhealth` present: the node's unit voted it unhealthy (see [`voted_unhealthy`]).
    pub voted_unhealthy: bool,
    /// The node's own limit, if annotated.
    pub limit: LimitAnnotation,
}

/// What the rule reads of a Node: its Ready condition and two annotations. The one place
/// a Node's fields are found: from a typed Node ([`Self::of_node`]), from its JSON
/// ([`Self::of`]), or filled by a caller that parsed those fields itself (the webhook reads
/// them straight from the request's text).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeReading<'a> {
    /// The Ready condition (`None`: there is none, nothing to judge by).
    pub ready: Option<ReadyCondition<'a>>,
    /// The `nodeunhealth` annotation (a value that is not a string, which no API server
    /// stores, reads as `""`: present).
    pub unhealth: Option<&'a str>,
    /// The `superedge.io/max-unreachable-protection` annotation.
    pub max_unreachable_protection: Option<&'a str>,
}

/// A node's Ready condition, as far as the rule reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadyCondition<'a> {
    pub status: Option<&'a str>,
    /// `lastTransitionTime`; `None` when absent or unparsable.
    pub last_transition_time: Option<Timestamp>,
}

impl<'a> ReadyCondition<'a> {
    /// From the condition's fields as text (`lastTransitionTime` as RFC 3339).
    pub fn from_text(status: Option<&'a str>, last_transition_time: Option<&str>) -> Self {
        Self { status, last_transition_time: last_transition_time.and_then(|t| t.parse().ok()) }
    }
}

impl<'a> NodeReading<'a> {
    /// Reads a typed Node.
    pub fn of_node(node: &'a Node) -> Self {
        let conditions = node.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
        let ready = conditions.iter().find(|c| c.type_ == keys::NODE_CONDITION_READY).map(|ready| ReadyCondition {
            status: Some(ready.status.as_str()),
            last_transition_time: ready.last_transition_time.as_ref().map(|t| t.0),
        });
        let annotations = node.metadata.annotations.as_ref();
        let annotation = |key: &str| annotations.and_then(|a| a.get(key)).map(String::as_str);
        Self {
            ready,
            unhealth: annotation(keys::NODE_UNHEALTH_ANNOTATION),
            max_unreachable_protection: annotation(keys::MAX_UNREACHABLE_PROTECTION_ANNOTATION),
        }
    }

    /// Reads a Node's JSON; a field of another type reads as absent.
    pub fn of(node: &'a Value) -> Self {
        let ready = node["status"]["conditions"].as_array().and_then(|conditions| {
            conditions
                .iter()
                .find(|c| c["type"] == keys::NODE_CONDITION_READY)
                .map(|ready| ReadyCondition::from_text(ready["status"].as_str(), ready["lastTransitionTime"].as_str()))
        });
        let annotation = |key: &str| node["metadata"]["annotations"][key].as_str();
        let present = |key: &str| node["metadata"]["annotations"].get(key).map(|v| v.as_str().unwrap_or_default());
        Self {
            ready,
            unhealth: present(keys::NODE_UNHEALTH_ANNOTATION),
            max_unreachable_protection: annotation(keys::MAX_UNREACHABLE_PROTECTION_ANNOTATION),
        }
    }

    /// Whether the node's unit voted it unhealthy ([`voted_unhealthy`]).
    pub fn voted_unhealthy(&self) -> bool {
        voted_unhealthy(self.unhealth)
    }

    /// The node's own protection limit, as annotated.
    pub fn limit(&self) -> LimitAnnotation {
        LimitAnnotation::read(self.max_unreachable_protection)
    }

    /// What the rule needs to know about the node when its written Ready condition is its
    /// readiness (the webhook's case); `None` without a Ready condition. An absent or
    /// unparsable `lastTransitionTime` is `unknown_since: None`, which only matters to a
    /// bounded limit. Whether edge-health `watched` the node is not on the node alone (it
    /// takes its unit's other members: [`crate::unit::membership::WatchedNodes`]).
    pub fn facts(&self, watched: bool) -> Option<NodeFacts> {
        let ready = self.ready?;
        Some(NodeFacts {
            ready_unknown: ready.status == Some(keys::CONDITION_UNKNOWN),
            watched,
            unknown_since: ready.last_transition_time,
            voted_unhealthy: self.voted_unhealthy(),
            limit: self.limit(),
        })
    }
}

/// The rule's answer for one node at one time: protected (until when), or why not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protection {
    /// Protected: no NoExecute taint, no eviction, endpoints kept ready. `until` is the
    /// last instant the protection holds (inclusive); `None` when it has no end.
    Protected { until: Option<Timestamp> },
    /// Not Unknown (Ready True or False, or no Ready condition): nothing to protect from.
    NotUnknown,
    /// No unit's edge-health watches the node: nobody could vote it down, so its not being
    /// voted down says nothing. Handle it as stock Kubernetes.
    NotWatched,
    /// The unit voted the node unhealthy: it is really down, handle it as stock Kubernetes.
    VotedUnhealthy,
    /// Unknown for longer than `limit` since `since`: handle it as stock Kubernetes.
    LimitPassed { since: Timestamp, limit: Duration },
    /// A bounded limit applies but when the node went Unknown is not known (no usable
    /// `lastTransitionTime`): nothing shows the bound still holds, so it is not protected.
    UnknownSince { limit: Duration },
}

impl Protection {
    pub fn protected(&self) -> bool {
        matches!(self, Self::Protected { .. })
    }

    /// A stable name for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Protected { .. } => "protected",
            Self::NotUnknown => "not_unknown",
            Self::NotWatched => "not_watched",
            Self::VotedUnhealthy => "voted_unhealthy",
            Self::LimitPassed { .. } => "limit_passed",
            Self::UnknownSince { .. } => "unknown_since",
        }
    }
}

/// The cluster-wide settings of the rule, as an enforcer's flags give them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ProtectionPolicy {
    /// `--max-unreachable-protection`: the longest a node may stay Unknown and still be
    /// protected; a node's own annotation may only shorten it.
    pub default_limit: ProtectionLimit,
    /// SuperEdge's `--always-reachable`: the unit's vote is not counted, so a watched node
    /// within its limit is protected even when its unit voted it unhealthy.
    pub always_reachable: bool,
}

impl ProtectionPolicy {
    /// The policy with this default limit, counting the unit's vote.
    pub fn with_default_limit(default_limit: ProtectionLimit) -> Self {
        Self { default_limit, always_reachable: false }
    }
}

/// The edge rule: is the node protected at `now`, under the cluster-wide `policy`?
///
/// Protected while `now <= unknown_since + limit`: the limit is the longest time a node
/// may stay Unknown and still be protected, so at exactly the limit it still is. A
/// `lastTransitionTime` in the future (clock skew) counts as "just went Unknown".
pub fn judge(facts: &NodeFacts, now: Timestamp, policy: ProtectionPolicy) -> Protection {
    if !facts.ready_unknown {
        return Protection::NotUnknown;
    }
    if !facts.watched {
        return Protection::NotWatched;
    }
    if facts.voted_unhealthy && !policy.always_reachable {
        return Protection::VotedUnhealthy;
    }
    let ProtectionLimit::After(limit) = facts.limit.effective(policy.default_limit) else {
        return Protection::Protected { until: None };
    };
    let Some(since) = facts.unknown_since else {
        return Protection::UnknownSince { limit };
    };
    // beyond jiff's range (past the year 9999) the bound is never reached
    let until = SignedDuration::try_from(limit).ok().and_then(|limit| since.checked_add(limit).ok());
    match until {
        None => Protection::Protected { until: None },
        Some(until) if now <= until => Protection::Protected { until: Some(until) },
        Some(_) => Protection::LimitPassed { since, limit },
    }
}

/// Go's `time.ParseDuration` grammar, refusing negative durations: an optional sign, then
/// `0` alone or one or more `<number><unit>` (`1h30m`, `1.5h`, `.5s`), at most Go's
/// `int64` nanoseconds. Fractions finer than a nanosecond are truncated.
fn go_duration(text: &str) -> Result<Duration, &'static str> {
    const UNITS: [(&str, u128); 8] = [
        ("ns", 1),
        ("us", 1_000),
        ("\u{b5}s", 1_000),
        ("\u{3bc}s", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("m", 60_000_000_000),
        ("h", 3_600_000_000_000),
    ];
    fn digits(text: &str) -> (&str, &str) {
        text.split_at(text.bytes().take_while(u8::is_ascii_digit).count())
    }

    let (negative, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if body == "0" {
        return Ok(Duration::ZERO);
    }
    if body.is_empty() {
        return Err("empty");
    }
    let mut total: u128 = 0;
    let mut rest = body;
    while !rest.is_empty() {
        let (whole, after_whole) = digits(rest);
        let (fraction, after_number) = match after_whole.strip_prefix('.') {
            Some(after_dot) => digits(after_dot),
            None => ("", after_whole),
        };
        if whole.is_empty() && fraction.is_empty() {
            return Err("expected a number");
        }
        let unit_end = after_number.find(|c: char| c == '.' || c.is_ascii_digit()).unwrap_or(after_number.len());
        let (unit, after_unit) = after_number.split_at(unit_end);
        if unit.is_empty() {
            return Err("missing unit");
        }
        let (_, unit_nanos) = UNITS.iter().find(|(name, _)| *name == unit).ok_or("unknown unit")?;
        let whole_nanos = if whole.is_empty() { Some(0) } else { whole.parse::<u128>().ok() }
            .and_then(|w| w.checked_mul(*unit_nanos))
            .ok_or("too long")?;
        // 19 digits already resolve a nanosecond of an hour; more cannot add a whole one
        let fraction = &fraction[..fraction.len().min(19)];
        let fraction_nanos = if fraction.is_empty() {
            0
        } else {
            let scale = 10u128.pow(fraction.len() as u32);
            fraction.parse::<u128>().map_err(|_| "expected a number")? * unit_nanos / scale
        };
        total = total.checked_add(whole_nanos + fraction_nanos).ok_or("too long")?;
        if total > i64::MAX as u128 {
            return Err("too long");
        }
        rest = after_unit;
    }
    if negative && total > 0 {
        return Err("negative");
    }
    let secs = (total / 1_000_000_000) as u64;
    Ok(Duration::new(secs, (total % 1_000_000_000) as u32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    const MINUTE: Duration = Duration::from_secs(60);

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn limits_in_go_notation() {
        let ok = |text: &str| ProtectionLimit::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let after = ProtectionLimit::After;
        for (text, want) in [
            ("0", ProtectionLimit::Unlimited),
            ("-0", ProtectionLimit::Unlimited),
            ("0s", ProtectionLimit::Unlimited),
            ("0h0m", ProtectionLimit::Unlimited),
            ("30m", after(30 * MINUTE)),
            ("2h", after(120 * MINUTE)),
            ("1h30m", after(90 * MINUTE)),
            ("+90s", after(90 * MINUTE / 60)),
            ("1.5h", after(90 * MINUTE)),
            (".5m", after(MINUTE / 2)),
            ("1.m", after(MINUTE)),
            ("1s500ms", after(Duration::from_millis(1500))),
            ("10us", after(Duration::from_micros(10))),
            ("10µs", after(Duration::from_micros(10))),
            ("10μs", after(Duration::from_micros(10))),
            ("7ns", after(Duration::from_nanos(7))),
            ("1.0000000001s", after(Duration::from_secs(1))),
            ("0.333333333333333333333333s", after(Duration::new(0, 333_333_333))),
            ("2562047h47m16.854775807s", after(Duration::new(9_223_372_036, 854_775_807))),
        ] {
            assert_eq!(ok(text), want, "{text}");
            assert_eq!(text.parse::<ProtectionLimit>(), Ok(want), "{text}");
        }
        for (text, reason) in [
            ("", "empty"),
            ("-", "empty"),
            ("30", "missing unit"),
            ("1h30", "missing unit"),
            ("30min", "unknown unit"),
            ("1d", "unknown unit"),
            ("1e3s", "unknown unit"),
            ("-5m", "negative"),
            (" 5m", "expected a number"),
            ("5m ", "unknown unit"),
            (".s", "expected a number"),
            ("1.5.5s", "missing unit"),
            ("1h-5m", "unknown unit"),
            ("yes", "expected a number"),
            ("2562047h47m16.854775808s", "too long"),
            ("99999999999999999999999999999999999999999h", "too long"),
        ] {
            assert_eq!(
                ProtectionLimit::parse(text),
                Err(InvalidLimit { value: text.into(), reason: reason.into() }),
                "{text:?}"
            );
        }
        assert_eq!(ProtectionLimit::from_duration(Duration::ZERO), ProtectionLimit::Unlimited);
        assert_eq!(
            ProtectionLimit::parse("30min").unwrap_err().to_string(),
            r#"invalid protection limit "30min": unknown unit (want a duration such as 30m, 2h or 1h30m; 0 is unlimited)"#
        );
    }

    #[test]
    fn annotation_only_shortens_the_default_and_falls_back_when_invalid() {
        let ten = ProtectionLimit::After(10 * MINUTE);
        let hour = ProtectionLimit::After(60 * MINUTE);
        // (annotation, default, effective)
        let cases = [
            (None, ProtectionLimit::Unlimited, ProtectionLimit::Unlimited),
            (None, ten, ten),
            (Some("1h"), ten, ten),
            (Some("10m"), hour, ten),
            (Some("10m"), ten, ten),
            (Some("10m"), ProtectionLimit::Unlimited, ten),
            (Some("0"), ten, ten),
            (Some("0"), ProtectionLimit::Unlimited, ProtectionLimit::Unlimited),
            (Some("forever"), ten, ten),
            (Some("-1h"), ProtectionLimit::Unlimited, ProtectionLimit::Unlimited),
            (Some(""), hour, hour),
        ];
        for (value, default, want) in cases {
            let annotation = LimitAnnotation::read(value);
            assert_eq!(annotation.effective(default), want, "{value:?} under {default:?}");
            let invalid = matches!(value, Some("forever" | "-1h" | ""));
            assert_eq!(annotation.invalid().is_some(), invalid, "{value:?}");
        }
        assert_eq!(LimitAnnotation::read(None), LimitAnnotation::Absent);
        assert_eq!(LimitAnnotation::read(Some("0s")), LimitAnnotation::Valid(ProtectionLimit::Unlimited));
    }

    /// SuperEdge's readers: the annotation's presence is the vote, whatever its value.
    #[test]
    fn presence_is_a_vote() {
        let cases = [
            (None, false),
            (Some("yes"), true),
            (Some(""), true),
            (Some("no"), true),
            (Some("true"), true),
            (Some("YES"), true),
        ];
        for (value, voted) in cases {
            assert_eq!(voted_unhealthy(value), voted, "{value:?}");
            // the same through each way a Node is read
            let annotations = value.map_or(json!({"other": "x"}), |v| json!({"other": "x", "nodeunhealth": v}));
            let json = json!({"metadata": {"name": "n", "annotations": annotations}, "status": {"conditions": [
                {"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-11-21T10:00:00Z"}]}});
            let typed: Node = serde_json::from_value(json.clone()).unwrap();
            assert_eq!(NodeReading::of(&json).voted_unhealthy(), voted, "JSON {value:?}");
            assert_eq!(NodeReading::of_node(&typed).voted_unhealthy(), voted, "typed {value:?}");
            assert_eq!(NodeReading::of(&json).facts(true).map(|f| f.voted_unhealthy), Some(voted), "{value:?}");
        }
        // no API server stores a non-string annotation; if one came, it is present
        let odd = json!({"metadata": {"annotations": {"nodeunhealth": true}}});
        assert!(NodeReading::of(&odd).voted_unhealthy());
        assert!(!NodeReading::of(&json!({"metadata": {"annotations": {"other": true}}})).voted_unhealthy());
    }

    /// The rule over every kind of input: readiness, vote, default, annotation, how long
    /// the node has been Unknown (including exactly the limit), and unusable times.
    #[test]
    fn the_rule() {
        let since = at("2026-11-21T10:00:00Z");
        let now_after = |secs: i64| since + SignedDuration::from_secs(secs);
        let ten = ProtectionLimit::After(10 * MINUTE);
        let until_ten = Some(now_after(600));
        #[derive(Clone, Copy)]
        struct Case {
            name: &'static str,
            ready_unknown: bool,
            watched: bool,
            voted: bool,
            always_reachable: bool,
            since: Option<Timestamp>,
            annotation: Option<&'static str>,
            default: ProtectionLimit,
            now: Timestamp,
            want: Protection,
        }
        let base = Case {
            name: "",
            ready_unknown: true,
            watched: true,
            voted: false,
            always_reachable: false,
            since: Some(since),
            annotation: None,
            default: ProtectionLimit::Unlimited,
            now: now_after(1_000_000),
            want: Protection::Protected { until: None },
        };
        let cases = [
            Case { name: "Unknown, not voted, unlimited: protected for ever", ..base },
            Case {
                name: "Ready True/False or no Ready condition",
                ready_unknown: false,
                want: Protection::NotUnknown,
                ..base
            },
            Case { name: "voted unhealthy", voted: true, want: Protection::VotedUnhealthy, ..base },
            Case {
                name: "voted beats an unlimited annotation",
                voted: true,
                annotation: Some("0"),
                want: Protection::VotedUnhealthy,
                ..base
            },
            Case {
                name: "not Unknown beats everything",
                ready_unknown: false,
                voted: true,
                since: None,
                default: ten,
                want: Protection::NotUnknown,
                ..base
            },
            Case {
                name: "default 10m, 1 s in",
                default: ten,
                now: now_after(1),
                want: Protection::Protected { until: until_ten },
                ..base
            },
            Case {
                name: "default 10m, exactly at the limit: still protected",
                default: ten,
                now: now_after(600),
                want: Protection::Protected { until: until_ten },
                ..base
            },
            Case {
                name: "default 10m, one nanosecond past",
                default: ten,
                now: now_after(600) + SignedDuration::from_nanos(1),
                want: Protection::LimitPassed { since, limit: 10 * MINUTE },
                ..base
            },
            Case {
                name: "lastTransitionTime in the future (skew): just went Unknown",
                default: ten,
                now: now_after(-30),
                want: Protection::Protected { until: until_ten },
                ..base
            },
            Case {
                name: "annotation longer than the default is ignored",
                default: ten,
                annotation: Some("1h"),
                now: now_after(601),
                want: Protection::LimitPassed { since, limit: 10 * MINUTE },
                ..base
            },
            Case {
                name: "annotation shorter than a bounded default",
                default: ten,
                annotation: Some("5m"),
                now: now_after(300),
                want: Protection::Protected { until: Some(now_after(300)) },
                ..base
            },
            Case {
                name: "annotation shorter than an unlimited default",
                annotation: Some("5m"),
                now: now_after(301),
                want: Protection::LimitPassed { since, limit: 5 * MINUTE },
                ..base
            },
            Case {
                name: "annotation 0 cannot lift a bounded default",
                default: ten,
                annotation: Some("0"),
                now: now_after(601),
                want: Protection::LimitPassed { since, limit: 10 * MINUTE },
                ..base
            },
            Case {
                name: "not watched: nobody could vote it down",
                watched: false,
                want: Protection::NotWatched,
                ..base
            },
            Case {
                name: "not Unknown beats not watched",
                watched: false,
                ready_unknown: false,
                want: Protection::NotUnknown,
                ..base
            },
            Case { name: "not watched beats voted", watched: false, voted: true, want: Protection::NotWatched, ..base },
            Case {
                name: "always reachable: the vote is not counted",
                voted: true,
                always_reachable: true,
                want: Protection::Protected { until: None },
                ..base
            },
            Case {
                name: "always reachable still needs a watched node",
                voted: true,
                always_reachable: true,
                watched: false,
                want: Protection::NotWatched,
                ..base
            },
            Case {
                name: "always reachable still needs Unknown",
                voted: true,
                always_reachable: true,
                ready_unknown: false,
                want: Protection::NotUnknown,
                ..base
            },
            Case {
                name: "always reachable keeps the limit",
                voted: true,
                always_reachable: true,
                default: ten,
                now: now_after(601),
                want: Protection::LimitPassed { since, limit: 10 * MINUTE },
                ..base
            },
            Case {
                name: "invalid annotation: the default applies (bounded)",
                default: ten,
                annotation: Some("30min"),
                now: now_after(601),
                want: Protection::LimitPassed { since, limit: 10 * MINUTE },
                ..base
            },
            Case {
                name: "invalid annotation: the default applies (unlimited)",
                annotation: Some("-5m"),
                want: Protection::Protected { until: None },
                ..base
            },
            Case {
                name: "bounded, no lastTransitionTime: not protected",
                default: ten,
                since: None,
                now: now_after(0),
                want: Protection::UnknownSince { limit: 10 * MINUTE },
                ..base
            },
            Case { name: "unlimited needs no lastTransitionTime", since: None, ..base },
            Case {
                name: "a bound beyond the representable range never passes",
                default: ProtectionLimit::After(2562047 * 60 * MINUTE),
                want: Protection::Protected { until: None },
                since: Some(at("9900-01-01T00:00:00Z")),
                now: at("9999-01-01T00:00:00Z"),
                ..base
            },
        ];
        for case in cases {
            let facts = NodeFacts {
                ready_unknown: case.ready_unknown,
                watched: case.watched,
                unknown_since: case.since,
                voted_unhealthy: case.voted,
                limit: LimitAnnotation::read(case.annotation),
            };
            let policy = ProtectionPolicy { default_limit: case.default, always_reachable: case.always_reachable };
            let got = judge(&facts, case.now, policy);
            assert_eq!(got, case.want, "{}", case.name);
            assert_eq!(got.protected(), got.label() == "protected", "{}", case.name);
        }
    }

    /// A typed Node and its JSON read the same, and the reading gives the facts the rule
    /// judges by.
    #[test]
    fn a_node_reads_the_same_typed_and_as_json() {
        let nodes = [
            serde_json::json!({"metadata": {"name": "n", "annotations": {
                    "nodeunhealth": "yes", "superedge.io/max-unreachable-protection": "2h", "other": "x"}},
                "status": {"conditions": [{"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-11-21T10:00:00Z"}]}}),
            serde_json::json!({"metadata": {"name": "n", "annotations": {"superedge.io/max-unreachable-protection": "2 hours"}},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            serde_json::json!({"metadata": {"name": "n"}, "status": {"conditions": [{"type": "MemoryPressure", "status": "True"}]}}),
            serde_json::json!({"metadata": {"name": "n"}}),
        ];
        for node in &nodes {
            let typed: Node = serde_json::from_value(node.clone()).expect("a Node");
            assert_eq!(NodeReading::of_node(&typed), NodeReading::of(node), "{node}");
        }
        let typed: Node = serde_json::from_value(nodes[0].clone()).expect("a Node");
        assert_eq!(
            NodeReading::of_node(&typed).facts(true),
            Some(NodeFacts {
                ready_unknown: true,
                watched: true,
                unknown_since: Some(at("2026-11-21T10:00:00Z")),
                voted_unhealthy: true,
                limit: LimitAnnotation::Valid(ProtectionLimit::After(120 * MINUTE)),
            })
        );
        let reading = NodeReading::of(&nodes[1]);
        assert_eq!(reading.limit().invalid().map(|e| e.value.as_str()), Some("2 hours"));
        assert_eq!(reading.facts(false).map(|f| (f.ready_unknown, f.unknown_since)), Some((false, None)));
        for node in &nodes[2..] {
            let reading = NodeReading::of(node);
            assert_eq!(
                (reading.facts(true), reading.voted_unhealthy(), reading.limit()),
                (None, false, LimitAnnotation::Absent)
            );
        }
    }

    proptest! {
        /// Monotone in time: once a node is no longer protected (everything else equal),
        /// it stays so later; and a protected answer's `until` is exactly when it ends.
        #[test]
        fn protection_only_ends(
            ready_unknown: bool, watched: bool, voted: bool, has_since: bool, always_reachable: bool,
            since in 0i64..10_000, first in -100i64..10_000, later in 0i64..10_000,
            default_secs in 0u64..5_000, annotation in prop::option::of(0u64..5_000),
        ) {
            let epoch = at("2026-11-21T00:00:00Z");
            let secs = |s: i64| epoch + SignedDuration::from_secs(s);
            let annotation = annotation.map(|a| format!("{a}s"));
            let facts = NodeFacts {
                ready_unknown,
                watched,
                unknown_since: has_since.then(|| secs(since)),
                voted_unhealthy: voted,
                limit: LimitAnnotation::read(annotation.as_deref()),
            };
            let default = ProtectionPolicy {
                default_limit: ProtectionLimit::from_duration(Duration::from_secs(default_secs)),
                always_reachable,
            };
            let early = judge(&facts, secs(first), default);
            let late = judge(&facts, secs(first + later), default);
            prop_assert!(early.protected() || !late.protected());
            if let Protection::Protected { until: Some(until) } = early {
                prop_assert!(judge(&facts, until, default).protected());
                prop_assert!(!judge(&facts, until + SignedDuration::from_nanos(1), default).protected());
            }
            // a node's annotation never protects it where the operator's bound alone would not
            let unannotated = NodeFacts { limit: LimitAnnotation::Absent, ..facts.clone() };
            prop_assert!(!early.protected() || judge(&unannotated, secs(first), default).protected());
            // and nobody is protected unless watched
            prop_assert!(watched || !early.protected());
            // always reachable only ever discounts the vote
            let unvoted = NodeFacts { voted_unhealthy: false, ..facts.clone() };
            let counting = ProtectionPolicy { always_reachable: false, ..default };
            let want = judge(if always_reachable { &unvoted } else { &facts }, secs(first), counting);
            prop_assert_eq!(early, want);
        }
    }
}
