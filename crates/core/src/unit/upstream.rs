//! Which grid wrapper of a node unit holds the unit's one upstream (the cloud watches),
//! and whom each other wrapper takes its upstream objects from.
//!
//! What it is decided from is what every wrapper of the unit has without the cloud, once
//! its edge-health has seen the Nodes: the unit's **members** (nodes sharing the unit
//! label's value that publish an edge-health key and address: the wrapper runs beside
//! edge-health and proves itself with that node's key), the members the unit's
//! edge-health votes down (the local daemon's verdicts, agreed by the unit over the site
//! network), and the members this wrapper failed to reach lately. Members and keys come
//! from the local daemon ([`members_of`]), which reads the Nodes from the API server
//! itself: never from the leader, which could otherwise name itself or its accomplices
//! the unit's members.
//!
//! The rule: members in name order, minus those voted down and those unreachable from
//! here; the first one leads. A wrapper never counts itself down or unreachable (it is
//! running), so a wrapper cut off from every peer leads itself, as a lone wrapper does
//! today.
//!
//! Two wrappers may disagree for a while (verdicts reach them at different times; one can
//! reach a member another cannot). That costs only extra cloud watches: a follower takes
//! objects only from a member whose published key the TLS handshake proved, and serves
//! its own last view until a relist from whichever upstream it chose completes, so no
//! choice can make it serve something wrong or empty. As the inputs agree again (one
//! period of edge-health, or the unreachable mark's expiry), so do the choices.
//!
//! Pure: the wrapper feeds the inputs.

use std::collections::BTreeSet;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// An Ed25519 public key as published: 32 raw bytes (base64 in the annotation).
pub type NodeKey = [u8; 32];

/// A unit member a wrapper can take its upstream from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitMember {
    pub node: String,
    pub key: NodeKey,
    /// Where the node is reached on the site network: the host of its edge-health address.
    pub host: String,
}

impl UnitMember {
    /// A member from its Node's annotations (`edgegrid.io/edge-health-public-key`,
    /// `edgegrid.io/edge-health-address`); `None` unless both are well-formed.
    pub fn from_annotations(node: &str, public_key: Option<&str>, address: Option<&str>) -> Option<Self> {
        let key = STANDARD.decode(public_key?.trim()).ok()?.try_into().ok()?;
        Some(Self { node: node.to_string(), key, host: address_host(address?)?.to_string() })
    }
}

/// The members of the unit(s) `verdicts` is about that publish a well-formed identity, as
/// the local edge-health daemon read them from the API server.
pub fn members_of(verdicts: &crate::unit::local_verdicts::LocalVerdicts) -> Vec<UnitMember> {
    verdicts
        .identities
        .iter()
        .filter_map(|(node, identity)| {
            UnitMember::from_annotations(node, Some(&identity.public_key), Some(&identity.address))
        })
        .collect()
}

/// The host of a `host:port` or `[v6]:port` address.
fn address_host(address: &str) -> Option<&str> {
    let (host, port) = address.trim().rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    (!host.is_empty()).then_some(host)
}

/// Where a wrapper takes its upstream from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Not a member of any unit (no unit label, or its node publishes no key): the cloud,
    /// serving no follower.
    Alone,
    /// The cloud, serving the unit's other members.
    Lead,
    /// The leader's wrapper.
    Follow(UnitMember),
}

/// The choice of the wrapper of `local` among `members` (its unit's, itself included when
/// it is one), given the members voted `down` and those `unreachable` from here.
pub fn choose(local: &str, members: &[UnitMember], down: &BTreeSet<String>, unreachable: &BTreeSet<String>) -> Choice {
    if !members.iter().any(|m| m.node == local) {
        return Choice::Alone;
    }
    let mut eligible: Vec<&UnitMember> = members
        .iter()
        .filter(|m| m.node == local || !(down.contains(&m.node) || unreachable.contains(&m.node)))
        .collect();
    eligible.sort_by(|a, b| a.node.cmp(&b.node));
    match eligible.first() {
        Some(first) if first.node != local => Choice::Follow((*first).clone()),
        _ => Choice::Lead,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn member(node: &str) -> UnitMember {
        UnitMember { node: node.into(), key: [node.len() as u8; 32], host: format!("10.0.0.{}", node.len()) }
    }

    fn set(nodes: &[&str]) -> BTreeSet<String> {
        nodes.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn members_are_the_identities_the_local_daemon_read() {
        use crate::unit::local_verdicts::{LocalVerdicts, PeerIdentity};
        let key = STANDARD.encode([7u8; 32]);
        let identity = |address: &str| PeerIdentity { public_key: key.clone(), address: address.into() };
        let verdicts = LocalVerdicts {
            node: "n1".into(),
            identities: [("n1".to_string(), identity("10.0.0.1:51005")), ("n2".to_string(), identity("bad"))].into(),
            ..LocalVerdicts::default()
        };
        assert_eq!(members_of(&verdicts), [UnitMember { node: "n1".into(), key: [7; 32], host: "10.0.0.1".into() }]);
    }

    #[test]
    fn members_are_read_from_well_formed_annotations_only() {
        let key = STANDARD.encode([7u8; 32]);
        let read = |k: Option<&str>, a: Option<&str>| UnitMember::from_annotations("n1", k, a);
        assert_eq!(
            read(Some(&key), Some("192.168.1.10:51005")),
            Some(UnitMember { node: "n1".into(), key: [7; 32], host: "192.168.1.10".into() })
        );
        assert_eq!(read(Some(&key), Some("[fd00::1]:51005")).map(|m| m.host), Some("fd00::1".into()));
        assert_eq!(read(Some(&format!(" {key}\n")), Some("a:1")).map(|m| m.host), Some("a".into()));
        for (k, a) in [
            (None, Some("10.0.0.1:1")),
            (Some(key.as_str()), None),
            (Some(key.as_str()), Some("10.0.0.1")),
            (Some(key.as_str()), Some(":51005")),
            (Some(key.as_str()), Some("10.0.0.1:port")),
            (Some(&STANDARD.encode([7u8; 31])), Some("10.0.0.1:1")),
            (Some("not base64!"), Some("10.0.0.1:1")),
        ] {
            assert_eq!(read(k, a), None, "{k:?} {a:?}");
        }
    }

    #[test]
    fn the_first_member_by_name_that_is_neither_down_nor_unreachable_leads() {
        let members = [member("c"), member("a"), member("b")];
        let none = BTreeSet::new();
        assert_eq!(choose("a", &members, &none, &none), Choice::Lead);
        assert_eq!(choose("b", &members, &none, &none), Choice::Follow(member("a")));
        assert_eq!(choose("b", &members, &set(&["a"]), &none), Choice::Lead);
        assert_eq!(choose("c", &members, &set(&["a"]), &none), Choice::Follow(member("b")));
        assert_eq!(choose("c", &members, &none, &set(&["a"])), Choice::Follow(member("b")));
        assert_eq!(choose("c", &members, &set(&["a"]), &set(&["b"])), Choice::Lead);
        // a wrapper never counts itself out: it is running
        assert_eq!(choose("a", &members, &set(&["a"]), &set(&["a"])), Choice::Lead);
        // not a member (no unit, or no published key): alone on the cloud
        assert_eq!(choose("d", &members, &none, &none), Choice::Alone);
        assert_eq!(choose("a", &[], &none, &none), Choice::Alone);
    }

    proptest! {
        /// Wrappers that see the same inputs agree: exactly one of them leads (when any is
        /// eligible) and every other follows it; a follower never follows a member that is
        /// down, unreachable, or itself.
        #[test]
        fn wrappers_with_the_same_inputs_agree_on_one_leader(
            names in proptest::collection::btree_set("[a-f]{1,2}", 1..8),
            down_mask in proptest::collection::vec(any::<bool>(), 8),
            unreachable_mask in proptest::collection::vec(any::<bool>(), 8),
        ) {
            let members: Vec<UnitMember> = names.iter().map(|n| member(n)).collect();
            let pick = |mask: &[bool]| names.iter().zip(mask).filter(|(_, on)| **on).map(|(n, _)| n.clone()).collect::<BTreeSet<_>>();
            let (down, unreachable) = (pick(&down_mask), pick(&unreachable_mask));
            let healthy: Vec<&String> = names.iter().filter(|n| !down.contains(*n) && !unreachable.contains(*n)).collect();
            let choices: Vec<(String, Choice)> =
                healthy.iter().map(|n| ((*n).clone(), choose(n, &members, &down, &unreachable))).collect();
            let leaders: Vec<&String> = choices.iter().filter(|(_, c)| *c == Choice::Lead).map(|(n, _)| n).collect();
            prop_assert_eq!(leaders.len(), usize::from(!healthy.is_empty()));
            for (node, choice) in &choices {
                if let Choice::Follow(leader) = choice {
                    prop_assert_eq!(&leader.node, leaders[0]);
                    prop_assert!(leader.node != *node && !down.contains(&leader.node) && !unreachable.contains(&leader.node));
                }
            }
            // a member counted out by the others still runs, and leads itself or follows the leader
            for node in names.iter().filter(|n| !healthy.contains(n)) {
                match choose(node, &members, &down, &unreachable) {
                    Choice::Lead => prop_assert!(healthy.first().is_none_or(|first| *first > node)),
                    Choice::Follow(leader) => prop_assert_eq!(Some(&&leader.node), healthy.first()),
                    Choice::Alone => prop_assert!(false, "a member is never alone"),
                }
            }
        }
    }
}
