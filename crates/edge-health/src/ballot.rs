//! Signed ballots: what makes a ballot true is its checker's signature, not the frame
//! that carries it.
//!
//! Every member has its own Ed25519 key pair, generated on the node and never leaving it;
//! the public half is published on the member's own Node
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

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair as _, UnparsedPublicKey};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

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

/// Why a signing key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SigningKeyError {
    #[error("not an Ed25519 PKCS#8 v2 key: {0}")]
    Invalid(String),
    #[error("the system random number generator failed")]
    Random,
}

/// A member's own key pair.
pub struct SigningKey {
    pair: Ed25519KeyPair,
    public: PublicKey,
}

impl SigningKey {
    /// A new key pair and its PKCS#8 document (what the key file holds).
    pub fn generate() -> Result<(Self, Vec<u8>), SigningKeyError> {
        let rng = ring::rand::SystemRandom::new();
        let document = Ed25519KeyPair::generate_pkcs8(&rng).map_err(|_| SigningKeyError::Random)?;
        let key = Self::from_pkcs8(document.as_ref())?;
        Ok((key, document.as_ref().to_vec()))
    }

    /// The key pair a key file holds.
    pub fn from_pkcs8(document: &[u8]) -> Result<Self, SigningKeyError> {
        let pair = Ed25519KeyPair::from_pkcs8(document).map_err(|e| SigningKeyError::Invalid(e.to_string()))?;
        Ok(Self::from_pair(pair))
    }

    /// A key pair from a 32-byte seed: the simulation's members, the tests' attackers.
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        let pair = Ed25519KeyPair::from_seed_unchecked(seed).expect("every 32-byte seed is an Ed25519 key");
        Self::from_pair(pair)
    }

    fn from_pair(pair: Ed25519KeyPair) -> Self {
        let mut public = [0; 32];
        public.copy_from_slice(pair.public_key().as_ref());
        Self { pair, public: PublicKey(public) }
    }

    pub fn public_key(&self) -> PublicKey {
        self.public
    }

    /// The signature of `bytes` (the caller's domain tag included: see
    /// [`crate::message`]'s frames).
    pub fn sign_bytes(&self, bytes: &[u8]) -> Signature {
        let mut signature = [0; 64];
        signature.copy_from_slice(self.pair.sign(bytes).as_ref());
        Signature(signature)
    }

    /// `checker`'s ballot about `target`, signed (the caller is `checker`).
    pub fn sign(&self, checker: &str, target: &str, ballot: Ballot) -> SignedBallot {
        let mut signature = [0; 64];
        signature.copy_from_slice(self.pair.sign(&signed_bytes(checker, target, ballot)).as_ref());
        SignedBallot { period: ballot.period, healthy: ballot.healthy, signature: Signature(signature) }
    }
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey").field("public", &self.public).finish_non_exhaustive()
    }
}

/// A member's published public key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey([u8; 32]);

impl PublicKey {
    /// As the annotation carries it: base64 of the 32 raw bytes.
    pub fn to_annotation(&self) -> String {
        STANDARD.encode(self.0)
    }

    /// `None` for anything but base64 of exactly 32 bytes.
    pub fn from_annotation(value: &str) -> Option<Self> {
        let bytes = STANDARD.decode(value.trim()).ok()?;
        Some(Self(bytes.try_into().ok()?))
    }

    /// Whether `signature` is this key's over `bytes`.
    pub fn verifies_bytes(&self, bytes: &[u8], signature: &Signature) -> bool {
        UnparsedPublicKey::new(&ED25519, &self.0).verify(bytes, &signature.0).is_ok()
    }

    /// Whether `signed` is `checker`'s ballot about `target` under this key.
    pub fn verifies(&self, checker: &str, target: &str, signed: &SignedBallot) -> bool {
        UnparsedPublicKey::new(&ED25519, &self.0)
            .verify(&signed_bytes(checker, target, signed.ballot()), &signed.signature.0)
            .is_ok()
    }
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({})", self.to_annotation())
    }
}

/// An Ed25519 signature, base64 on the wire.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Signature(pub [u8; 64]);

impl std::fmt::Debug for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signature({})", STANDARD.encode(self.0))
    }
}

impl Serialize for Signature {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(self.0))
    }
}

impl<'de> Deserialize<'de> for Signature {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        let bytes = STANDARD.decode(text.as_bytes()).map_err(serde::de::Error::custom)?;
        let bytes: [u8; 64] = bytes.try_into().map_err(|_| serde::de::Error::custom("a signature has 64 bytes"))?;
        Ok(Self(bytes))
    }
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
    fn keys_and_ballots_round_trip_through_their_text_forms() {
        let (key, document) = SigningKey::generate().unwrap();
        let reloaded = SigningKey::from_pkcs8(&document).unwrap();
        assert_eq!(key.public_key(), reloaded.public_key());
        let annotation = key.public_key().to_annotation();
        assert_eq!(annotation.len(), 44);
        assert_eq!(PublicKey::from_annotation(&annotation), Some(key.public_key()));
        assert_eq!(PublicKey::from_annotation(&STANDARD.encode([1; 31])), None, "31 bytes");
        assert_eq!(PublicKey::from_annotation("not base64!"), None);
        assert!(matches!(SigningKey::from_pkcs8(b"garbage"), Err(SigningKeyError::Invalid(_))));

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
