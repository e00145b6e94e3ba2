//! Liveness proven by the target's own key: a checker counts a peer alive only with the
//! peer's signature over the checker's fresh challenge.
//!
//! Why: an address answers for nobody. Root on a site's LAN can bind a dead neighbour's IP
//! and listen on any port: a tcp check passes on any listener, a kubelet check (whose
//! certificate can rarely be verified) on any TLS server answering 401. A peer's Ed25519
//! key (published on its Node, which only its identity may write) never leaves it, so a
//! signature over a nonce the checker just drew can only come from the peer itself, alive
//! now. Helpers (indirect probes) relay the target's signature over the *asking checker's*
//! nonce: a helper that says "reachable" without it is not believed, so a lying helper
//! cannot revive a dead node, and cannot reuse a proof made for another checker or an
//! earlier probe.
//!
//! The configured checks (kubelet, tcp, http, ...) still run: they can make a node look
//! worse (its kubelet is down although its daemon answers), never better (a node whose key
//! proof fails is unreachable whatever they say). The check's direct result is
//! `proof && checks`.
//!
//! What is signed: a domain tag, then target, checker and nonce, the names length-prefixed
//! (no two different proofs share signed bytes, and no ballot or frame signature is one).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::node_key::{PublicKey, Signature, SigningKey};

const DOMAIN: &[u8] = b"edgegrid.io/edge-health liveness v1\0";

/// A checker's fresh challenge: 16 random bytes, hex on the wire.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Nonce(pub [u8; 16]);

impl Nonce {
    /// A fresh nonce from the operating system's generator (`None` if it fails).
    pub fn random() -> Option<Self> {
        let mut bytes = [0; 16];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).ok()?;
        Some(Self(bytes))
    }

    fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl std::fmt::Debug for Nonce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Nonce({})", self.hex())
    }
}

impl Serialize for Nonce {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.hex())
    }
}

impl<'de> Deserialize<'de> for Nonce {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        let invalid = || serde::de::Error::custom("a nonce is 32 hex digits");
        if text.len() != 32 || !text.is_ascii() {
            return Err(invalid());
        }
        let mut bytes = [0; 16];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| invalid())?;
        }
        Ok(Self(bytes))
    }
}

/// `target`'s signature over `checker`'s `nonce`: "I, target, am alive and answered
/// checker's challenge".
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LivenessProof {
    pub target: String,
    pub checker: String,
    pub nonce: Nonce,
    #[serde(rename = "sig")]
    pub signature: Signature,
}

fn signed_bytes(target: &str, checker: &str, nonce: &Nonce) -> Vec<u8> {
    let mut bytes = DOMAIN.to_vec();
    for name in [target, checker] {
        bytes.extend_from_slice(&(name.len() as u32).to_be_bytes());
        bytes.extend_from_slice(name.as_bytes());
    }
    bytes.extend_from_slice(&nonce.0);
    bytes
}

/// The proof `target` (whose key `signing` is) gives `checker` for `nonce`.
pub fn prove(signing: &SigningKey, target: &str, checker: &str, nonce: Nonce) -> LivenessProof {
    let signature = signing.sign_bytes(&signed_bytes(target, checker, &nonce));
    LivenessProof { target: target.to_string(), checker: checker.to_string(), nonce, signature }
}

/// Why a proof does not count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProofRefused {
    /// No proof came with a "reachable".
    #[error("no proof")]
    Missing,
    /// It names another target, another checker, or another nonce than the one asked.
    #[error("the proof is for another challenge")]
    OtherChallenge,
    /// The target publishes no (valid) key.
    #[error("the target publishes no key")]
    NoPublicKey,
    #[error("the signature is not the target's")]
    BadSignature,
}

impl ProofRefused {
    pub const ALL: [Self; 4] = [Self::Missing, Self::OtherChallenge, Self::NoPublicKey, Self::BadSignature];

    pub fn metric_label(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::OtherChallenge => "other_challenge",
            Self::NoPublicKey => "no_public_key",
            Self::BadSignature => "bad_signature",
        }
    }
}

/// Whether `proof` is `target`'s answer to `checker`'s challenge `nonce`, under `key`, the
/// key `target` publishes.
pub fn verify(
    proof: Option<&LivenessProof>,
    target: &str,
    checker: &str,
    nonce: &Nonce,
    key: Option<&PublicKey>,
) -> Result<(), ProofRefused> {
    let proof = proof.ok_or(ProofRefused::Missing)?;
    if proof.target != target || proof.checker != checker || proof.nonce != *nonce {
        return Err(ProofRefused::OtherChallenge);
    }
    let key = key.ok_or(ProofRefused::NoPublicKey)?;
    key.verifies_bytes(&signed_bytes(target, checker, nonce), &proof.signature)
        .then_some(())
        .ok_or(ProofRefused::BadSignature)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> SigningKey {
        let mut seed = [0; 32];
        seed[..name.len()].copy_from_slice(name.as_bytes());
        SigningKey::from_seed(&seed)
    }

    const N1: Nonce = Nonce([1; 16]);
    const N2: Nonce = Nonce([2; 16]);

    #[test]
    fn only_the_targets_signature_over_this_checkers_nonce_counts() {
        let (t, other) = (key("t"), key("x"));
        let public = t.public_key();
        let proof = prove(&t, "t", "c", N1);
        assert_eq!(verify(Some(&proof), "t", "c", &N1, Some(&public)), Ok(()));
        assert_eq!(verify(None, "t", "c", &N1, Some(&public)), Err(ProofRefused::Missing));
        assert_eq!(verify(Some(&proof), "t", "c", &N2, Some(&public)), Err(ProofRefused::OtherChallenge), "an old one");
        assert_eq!(verify(Some(&proof), "t", "h", &N1, Some(&public)), Err(ProofRefused::OtherChallenge), "another's");
        assert_eq!(verify(Some(&proof), "u", "c", &N1, Some(&public)), Err(ProofRefused::OtherChallenge));
        assert_eq!(verify(Some(&proof), "t", "c", &N1, None), Err(ProofRefused::NoPublicKey));
        // an impostor (or a helper) signing in the target's name with its own key
        let forged = prove(&other, "t", "c", N1);
        assert_eq!(verify(Some(&forged), "t", "c", &N1, Some(&public)), Err(ProofRefused::BadSignature));
        // fields edited after signing
        let mut moved = proof.clone();
        moved.checker = "h".into();
        assert_eq!(verify(Some(&moved), "t", "h", &N1, Some(&public)), Err(ProofRefused::BadSignature));
        // a ballot signature over the same names is no proof
        let ballot = t.sign("t", "c", crate::ballot::Ballot { period: crate::time::Period(1), healthy: true });
        let as_proof = LivenessProof { signature: ballot.signature, ..proof.clone() };
        assert_eq!(verify(Some(&as_proof), "t", "c", &N1, Some(&public)), Err(ProofRefused::BadSignature));
    }

    #[test]
    fn proofs_and_nonces_round_trip_on_the_wire() {
        let proof = prove(&key("t"), "t", "c", Nonce([0xab; 16]));
        let json = serde_json::to_value(&proof).unwrap();
        assert_eq!(json["nonce"], "ab".repeat(16));
        assert_eq!(serde_json::from_value::<LivenessProof>(json).unwrap(), proof);
        for bad in ["ab", "zz".repeat(16).as_str(), &"é".repeat(16)] {
            assert!(serde_json::from_value::<Nonce>(serde_json::json!(bad)).is_err(), "{bad}");
        }
        let (a, b) = (Nonce::random().unwrap(), Nonce::random().unwrap());
        assert_ne!(a, b, "fresh each time");
    }
}
