//! Signed ballots: what makes a ballot true is its checker's signature, not the frame
//! that carries it.
//!
//! Every member has its own Ed25519 key pair ([`crate::node_key`]), generated on the node
//! and never leaving it; the public half is published on the member's own Node
//! ([`EDGE_HEALTH_PUBLIC_KEY_ANNOTATION`]), which only that node's identity may write (the
//! chart's ValidatingAdmissionPolicy). A checker signs each ballot it casts, and the
//! ballot travels with that signature unchanged however many members relay it; a receiver
//! takes a ballot only when it verifies against the published key of the member it names
//! as its checker ([`crate::vote::VoteTable::record_received`]).
//!
//! So a member holding the unit's frame key (every member does) can still relay, withhold
//! or replay what others signed, but cannot make a ballot say what its checker did not:
//! - forged ballots of other checkers fail their signature;
//! - ballots claiming to be the receiver's own are refused before anything else (the
//!   receiver knows its own);
//! - a replayed ballot is one its checker signed: it is either the one the table holds
//!   (nothing changes, no signature is checked) or older, which the table refuses;
//! - a ballot more than one period ahead is refused before its signature is checked.
//!
//! What is signed: a domain tag, checker, target, period and verdict, with the names
//! length-prefixed, so no two different ballots share signed bytes.
//!
//! [`EDGE_HEALTH_PUBLIC_KEY_ANNOTATION`]: edgegrid_core::keys::EDGE_HEALTH_PUBLIC_KEY_ANNOTATION

use serde::{Deserialize, Serialize};

use crate::node_key::{PublicKey, Signature, SigningKey};
use crate::time::Period;

/// The bytes a signature covers start with this: a signature made for anything else
/// never verifies as a ballot.
const DOMAIN: &[u8] = b"edgegrid.io/edge-health ballot v1\0";

/// One checker's verdict about one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Ballot {
    /// The period the check was made in: the vote counts it only while that period is in
    /// its window, and only if the sender was assigned to check the target in it.
    pub period: Period,
    pub healthy: bool,
}

/// A ballot with its checker's signature, as it travels: `{"p":<period>,"h":<healthy>,"s":"<signature>"}`.
/// Ballots are most of what a unit sends (every member learns every ballot): one-letter
/// names keep a ballot at about 120 bytes, 12% less than with the field names spelled out,
/// which pays for the liveness proofs' frames (see the edge-health costs in docs/benchmarks.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedBallot {
    #[serde(rename = "p")]
    pub period: Period,
    #[serde(rename = "h")]
    pub healthy: bool,
    #[serde(rename = "s")]
    pub signature: Signature,
}

impl SignedBallot {
    pub fn ballot(&self) -> Ballot {
        Ballot { period: self.period, healthy: self.healthy }
    }
}

/// A member's node key ([`crate::node_key`]) signing ballots: over the bytes the module
/// comment lists, under the ballot domain tag.
impl SigningKey {
    /// `checker`'s ballot about `target`, signed (the caller is `checker`).
    pub fn sign(&self, checker: &str, target: &str, ballot: Ballot) -> SignedBallot {
        let signature = self.sign_bytes(&signed_bytes(checker, target, ballot));
        SignedBallot { period: ballot.period, healthy: ballot.healthy, signature }
    }
}

impl PublicKey {
    /// Whether `signed` is `checker`'s ballot about `target` under this key.
    pub fn verifies(&self, checker: &str, target: &str, signed: &SignedBallot) -> bool {
        self.verifies_bytes(&signed_bytes(checker, target, signed.ballot()), &signed.signature)
    }
}

/// Why a ballot was not stored (by a [`VoteTable`](crate::vote::VoteTable)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BallotIgnored {
    /// A node's ballot about itself.
    SelfBallot,
    /// Its period is already out of the window.
    Stale,
    /// Its period is more than one period ahead of ours (a clock far off, or a lie).
    Future,
    /// The checker or the target is not a member of the unit (as this member's schedule
    /// has it).
    NotAMember,
    /// A later ballot from the same checker about the same node is already stored.
    Superseded,
    /// A received ballot naming the receiver as its checker: the receiver knows its own
    /// ballots (gossip brings them back; a liar would use this to replace them).
    OwnBallot,
    /// The checker publishes no (valid) public key yet.
    NoPublicKey,
    /// The signature is not the checker's: forged, altered, or signed with a key the
    /// checker no longer (or not yet, as this member sees it) publishes.
    BadSignature,
}

impl BallotIgnored {
    pub const ALL: [BallotIgnored; 8] = [
        Self::SelfBallot,
        Self::Stale,
        Self::Future,
        Self::NotAMember,
        Self::Superseded,
        Self::OwnBallot,
        Self::NoPublicKey,
        Self::BadSignature,
    ];

    /// The metric label.
    pub fn metric_label(self) -> &'static str {
        match self {
            Self::SelfBallot => "self_ballot",
            Self::Stale => "stale",
            Self::Future => "future",
            Self::NotAMember => "not_a_member",
            Self::Superseded => "superseded",
            Self::OwnBallot => "own_ballot",
            Self::NoPublicKey => "no_public_key",
            Self::BadSignature => "bad_signature",
        }
    }
}

/// Whether `signed` is `checker`'s ballot about `target` under `key`, the key `checker`
/// publishes (`None`: it publishes none yet), as [`crate::vote::VoteTable::record_received`]
/// wants the answer.
pub fn check_signature(
    key: Option<&PublicKey>,
    checker: &str,
    target: &str,
    signed: &SignedBallot,
) -> Result<(), BallotIgnored> {
    let key = key.ok_or(BallotIgnored::NoPublicKey)?;
    key.verifies(checker, target, signed).then_some(()).ok_or(BallotIgnored::BadSignature)
}

/// How many ballots with a bad signature one frame may carry before the rest of it is
/// dropped unread. An honest relay passes on only ballots it verified, so a bad one is
/// either a forgery or a key that changed while the frame travelled (a re-imaged node,
/// one checker); a flood of forged ballots costs a receiver a few verifications per frame,
/// not one per ballot.
pub const MAX_BAD_SIGNATURES_PER_FRAME: u32 = 4;

/// Counts one frame's bad signatures against [`MAX_BAD_SIGNATURES_PER_FRAME`].
#[derive(Debug)]
pub struct ForgeryBudget {
    left: u32,
}

impl ForgeryBudget {
    pub fn per_frame() -> Self {
        Self { left: MAX_BAD_SIGNATURES_PER_FRAME }
    }

    /// Takes one ballot's outcome; false: drop the rest of the frame.
    pub fn goes_on<T>(&mut self, outcome: Result<T, BallotIgnored>) -> bool {
        if outcome.is_err_and(|refused| refused == BallotIgnored::BadSignature) {
            self.left = self.left.saturating_sub(1);
        }
        self.left > 0
    }
}

fn signed_bytes(checker: &str, target: &str, ballot: Ballot) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(DOMAIN.len() + checker.len() + target.len() + 25);
    bytes.extend_from_slice(DOMAIN);
    for name in [checker, target] {
        bytes.extend_from_slice(&(name.len() as u64).to_be_bytes());
        bytes.extend_from_slice(name.as_bytes());
    }
    bytes.extend_from_slice(&ballot.period.0.to_be_bytes());
    bytes.push(u8::from(ballot.healthy));
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ballot(period: u64, healthy: bool) -> Ballot {
        Ballot { period: Period(period), healthy }
    }

    #[test]
    fn a_signed_ballot_verifies_only_as_itself() {
        let key = SigningKey::from_seed(&[7; 32]);
        let other = SigningKey::from_seed(&[8; 32]);
        let signed = key.sign("a", "b", ballot(10, false));
        let public = key.public_key();
        assert!(public.verifies("a", "b", &signed));
        assert!(!other.public_key().verifies("a", "b", &signed), "another member's key");
        assert!(!public.verifies("c", "b", &signed), "another checker");
        assert!(!public.verifies("a", "c", &signed), "another target");
        // the names are length-prefixed: moving a character between them changes the bytes
        assert!(!public.verifies("ab", "", &key.sign("a", "b", ballot(10, false))));
        let mut flipped = signed;
        flipped.healthy = true;
        assert!(!public.verifies("a", "b", &flipped), "another verdict");
        let mut later = signed;
        later.period = Period(11);
        assert!(!public.verifies("a", "b", &later), "another period");
        let mut tampered = signed;
        tampered.signature.0[0] ^= 1;
        assert!(!public.verifies("a", "b", &tampered));
    }

    #[test]
    fn signed_ballots_round_trip_through_their_text_form() {
        let (key, _) = SigningKey::generate().unwrap();
        let signed = key.sign("a", "b", ballot(3, true));
        let json = serde_json::to_value(signed).unwrap();
        assert_eq!(json["p"], 3);
        assert_eq!(json["h"], true);
        assert_eq!(json["s"].as_str().unwrap().len(), 88);
        assert_eq!(json.as_object().unwrap().len(), 3);
        let back: SignedBallot = serde_json::from_value(json).unwrap();
        assert_eq!(back, signed);
        assert!(serde_json::from_str::<SignedBallot>(r#"{"p":3,"h":true,"s":"AAAA"}"#).is_err());
        assert!(serde_json::from_str::<SignedBallot>(r#"{"p":3,"h":true}"#).is_err());
    }
}
