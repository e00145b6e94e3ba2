//! What the Secret of the self-managed mode holds, as far as the decision goes: what
//! [`pki::inspect`](super::pki::inspect) reads back and [`decide`](super::decide::decide)
//! decides on. A module of its own because `decide` uses `pki` (to read a caBundle's
//! certificates): `pki` names these facts without importing the decision.

use std::collections::BTreeSet;
use std::time::SystemTime;

/// The `type` of the Secret this mode keeps.
pub const SECRET_TYPE: &str = "kubernetes.io/tls";

/// When a certificate is valid, as written in it (whole seconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

impl Validity {
    /// Once two thirds of the validity have passed: then a serving certificate is renewed,
    /// leaving a third of it for every replica to take the new one up; and the next CA
    /// is issued and published.
    pub fn renewal_due(&self) -> SystemTime {
        self.after_fraction(2, 3)
    }

    /// Once five sixths of a CA's validity have passed: then the next CA, published
    /// since two thirds, signs.
    pub fn switch_due(&self) -> SystemTime {
        self.after_fraction(5, 6)
    }

    fn after_fraction(&self, numerator: u32, denominator: u32) -> SystemTime {
        let lifetime = self.not_after.duration_since(self.not_before).unwrap_or_default();
        self.not_before + lifetime * numerator / denominator
    }

    pub fn expired(&self, now: SystemTime) -> bool {
        now >= self.not_after
    }
}

/// A usable CA (its certificate parses, is a CA's, its key is there where one is needed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaFacts {
    pub validity: Validity,
    /// Its certificate, DER: what a caBundle is compared by.
    pub der: Vec<u8>,
    /// Its certificate, PEM: what a caBundle is made of.
    pub pem: String,
}

/// What the Secret holds, as far as the decision goes.
#[derive(Clone, Debug, PartialEq, Eq)]
#[expect(clippy::large_enum_variant, reason = "one value per look at the Secret, matched on by value")]
pub enum SecretFacts {
    /// No such Secret.
    Absent,
    /// A Secret of another `type` (which cannot be changed in place): left alone.
    OtherType(String),
    /// A `kubernetes.io/tls` Secret; each part usable or why not.
    Tls {
        ca: Result<CaFacts, String>,
        serving: Result<ServingFacts, String>,
        /// The CA published ahead of signing, if there is one.
        next: Option<Result<CaFacts, String>>,
        /// The CAs that signed before, kept trusted until they expire.
        previous: Vec<Result<CaFacts, String>>,
    },
}

/// A usable serving certificate: it parses, its key is in the Secret, the CA signed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServingFacts {
    pub validity: Validity,
    /// Its subject alternative names: DNS names, and IP addresses in `IpAddr` notation.
    pub names: BTreeSet<String>,
}
