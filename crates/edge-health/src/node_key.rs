//! A member's node key: its own Ed25519 key pair, the public half it publishes, and the
//! signatures it makes over its ballots ([`crate::ballot`]), its liveness proofs
//! ([`crate::liveness`]) and its frames ([`crate::message`]). The three share the key
//! types from here, below all of them; what each one signs, under its own domain tag, is
//! its own to say.
//!
//! The pair is generated on the node and never leaves it (kept on disk by
//! [`crate::daemon::signing_key`]); the public half is published on the member's own Node
//! ([`EDGE_HEALTH_PUBLIC_KEY_ANNOTATION`]), which only that node's identity may write.
//!
//! [`EDGE_HEALTH_PUBLIC_KEY_ANNOTATION`]: edgegrid_core::keys::EDGE_HEALTH_PUBLIC_KEY_ANNOTATION

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair as _, UnparsedPublicKey};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_their_text_forms() {
        let (key, document) = SigningKey::generate().unwrap();
        let reloaded = SigningKey::from_pkcs8(&document).unwrap();
        assert_eq!(key.public_key(), reloaded.public_key());
        let annotation = key.public_key().to_annotation();
        assert_eq!(annotation.len(), 44);
        assert_eq!(PublicKey::from_annotation(&annotation), Some(key.public_key()));
        assert_eq!(PublicKey::from_annotation(&STANDARD.encode([1; 31])), None, "31 bytes");
        assert_eq!(PublicKey::from_annotation("not base64!"), None);
        assert!(matches!(SigningKey::from_pkcs8(b"garbage"), Err(SigningKeyError::Invalid(_))));
    }
}
