//! The certificates of the self-managed mode: a CA and serving certificates it signs,
//! issued with rcgen (ECDSA P-256), and what a Secret holds read back with x509-parser
//! for [`decide`](super::decide::decide). No I/O.
//!
//! A certificate's `notBefore` is set a little in the past (a tenth of its validity, at
//! most five minutes) so that an apiserver whose clock is slightly behind still accepts
//! it; `notAfter` is `now + validity`, never beyond the CA's. Both are whole seconds, as
//! X.509 writes them.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    PublicKeyData,
};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;

use super::facts::{CaFacts, SECRET_TYPE, SecretFacts, ServingFacts, Validity};

/// Keys of the Secret's data. `tls.crt`/`tls.key` as every `kubernetes.io/tls` Secret;
/// `ca.crt` as cert-manager's; `ca.key` is this mode's own, to sign renewals with.
pub const TLS_CERT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";
pub const CA_CERT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";
/// During a CA rotation: the next CA (published, not signing yet) and the CAs that
/// signed before (certificates only, one after the other; trusted until they expire).
pub const CA_NEXT_CERT: &str = "ca-next.crt";
pub const CA_NEXT_KEY: &str = "ca-next.key";
pub const CA_PREVIOUS_CERT: &str = "ca-previous.crt";

/// How long a CA is valid by default (`--ca-validity`); it is rotated before it expires
/// (see [`decide`](super::decide)).
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
pub const CA_COMMON_NAME: &str = "edge-health-admission-ca";
/// The most a certificate is backdated.
const MAX_BACKDATE: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("issuing a certificate: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("a time X.509 cannot hold: {0}")]
    Time(String),
    #[error("the Secret has no {0}")]
    Missing(&'static str),
}

/// A certificate and its private key, PEM (the key PKCS#8).
#[derive(Clone, PartialEq, Eq)]
pub struct Pair {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for Pair {
    // never the key
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pair").field("cert_pem", &self.cert_pem).finish_non_exhaustive()
    }
}

/// What the Secret holds: a CA and a serving certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bundle {
    pub ca: Pair,
    pub serving: Pair,
}

/// What the Secret holds during a CA rotation, besides the [`Bundle`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rotation {
    /// The next CA, published in caBundle before it signs.
    pub next: Option<Pair>,
    /// The certificates of the CAs that signed before, PEM, one after the other.
    pub previous: Vec<String>,
}

impl Rotation {
    /// `data` with the rotation's keys set (or removed when there is nothing to keep).
    pub fn write_into(&self, data: &mut BTreeMap<String, ByteString>) {
        let mut set = |key: &str, value: Option<&str>| match value {
            Some(value) => data.insert(key.to_string(), ByteString(value.as_bytes().to_vec())),
            None => data.remove(key),
        };
        set(CA_NEXT_CERT, self.next.as_ref().map(|next| next.cert_pem.as_str()));
        set(CA_NEXT_KEY, self.next.as_ref().map(|next| next.key_pem.as_str()));
        let previous = self.previous.concat();
        set(CA_PREVIOUS_CERT, (!previous.is_empty()).then_some(previous.as_str()));
    }
}

/// The rotation a Secret's data holds (parts that are not text are left out).
pub fn rotation(secret: &Secret) -> Rotation {
    let text = |key: &str| {
        secret.data.as_ref().and_then(|data| data.get(key)).and_then(|value| String::from_utf8(value.0.clone()).ok())
    };
    let next = match (text(CA_NEXT_CERT), text(CA_NEXT_KEY)) {
        (Some(cert_pem), Some(key_pem)) => Some(Pair { cert_pem, key_pem }),
        _ => None,
    };
    Rotation { next, previous: text(CA_PREVIOUS_CERT).map(|pem| split_pem(&pem)).unwrap_or_default() }
}

/// The PEM blocks of `text`, each as written (with its line end).
pub fn split_pem(text: &str) -> Vec<String> {
    const END: &str = "-----END CERTIFICATE-----";
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("-----BEGIN CERTIFICATE-----") {
        let Some(end) = rest[start..].find(END) else { break };
        let mut stop = start + end + END.len();
        if rest[stop..].starts_with('\n') {
            stop += 1;
        }
        blocks.push(rest[start..stop].to_string());
        rest = &rest[stop..];
    }
    blocks
}

/// The certificates (DER) of a PEM bundle; what does not parse is left out.
pub fn certificates(pem: &[u8]) -> BTreeSet<Vec<u8>> {
    x509_parser::pem::Pem::iter_from_buffer(pem)
        .map_while(Result::ok)
        .filter(|block| block.label == "CERTIFICATE")
        .map(|block| block.contents)
        .collect()
}

impl Bundle {
    /// The Secret's data.
    pub fn data(&self) -> BTreeMap<String, ByteString> {
        [
            (TLS_CERT, &self.serving.cert_pem),
            (TLS_KEY, &self.serving.key_pem),
            (CA_CERT, &self.ca.cert_pem),
            (CA_KEY, &self.ca.key_pem),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_string(), ByteString(value.as_bytes().to_vec())))
        .collect()
    }
}

fn x509_time(time: SystemTime) -> Result<time::OffsetDateTime, PkiError> {
    let seconds = time.duration_since(SystemTime::UNIX_EPOCH).map_err(|e| PkiError::Time(e.to_string()))?.as_secs();
    let seconds = i64::try_from(seconds).map_err(|e| PkiError::Time(e.to_string()))?;
    time::OffsetDateTime::from_unix_timestamp(seconds).map_err(|e| PkiError::Time(e.to_string()))
}

fn validity_from(now: SystemTime, validity: Duration, cap: Option<SystemTime>) -> (SystemTime, SystemTime) {
    let not_before = now - (validity / 10).min(MAX_BACKDATE);
    let not_after = now + validity;
    (not_before, cap.map_or(not_after, |cap| not_after.min(cap)))
}

/// A new self-signed CA, valid `validity` from `now`.
pub fn new_ca(now: SystemTime, validity: Duration) -> Result<Pair, PkiError> {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, CA_COMMON_NAME);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let (not_before, not_after) = validity_from(now, validity, None);
    params.not_before = x509_time(not_before)?;
    params.not_after = x509_time(not_after)?;
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok(Pair { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
}

/// A serving certificate for `names` (DNS names or IP addresses) signed by `ca`, valid
/// `validity` from `now` (at most until the CA expires).
pub fn issue_serving(
    ca: &Pair,
    names: &BTreeSet<String>,
    now: SystemTime,
    validity: Duration,
) -> Result<Pair, PkiError> {
    let ca_key = KeyPair::from_pem(&ca.key_pem)?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key)?;
    let ca_expiry = inspect_pem(&ca.cert_pem).ok().map(|c| c.validity.not_after);
    let mut params = CertificateParams::new(names.iter().cloned().collect::<Vec<_>>())?;
    if let Some(first) = names.iter().find(|n| n.parse::<IpAddr>().is_err()).or(names.first()) {
        params.distinguished_name.push(DnType::CommonName, first.as_str());
    }
    params.is_ca = IsCa::ExplicitNoCa;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.use_authority_key_identifier_extension = true;
    let (not_before, not_after) = validity_from(now, validity, ca_expiry);
    params.not_before = x509_time(not_before)?;
    params.not_after = x509_time(not_after)?;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Pair { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
}

/// A new CA (valid `ca_validity`) and a serving certificate it signed.
pub fn new_bundle(
    names: &BTreeSet<String>,
    now: SystemTime,
    validity: Duration,
    ca_validity: Duration,
) -> Result<Bundle, PkiError> {
    let ca = new_ca(now, ca_validity)?;
    let serving = issue_serving(&ca, names, now, validity)?;
    Ok(Bundle { ca, serving })
}

/// A self-signed certificate nobody trusts, for the listener to hold until the real
/// one is known (a TLS listener needs some certificate; clients that verify fail, and
/// with `failurePolicy: Ignore` the apiserver goes on without the webhook meanwhile).
pub fn placeholder() -> Result<Pair, PkiError> {
    let mut params = CertificateParams::new(vec!["edge-health-admission.invalid".to_string()])?;
    params.distinguished_name.push(DnType::CommonName, "edge-health-admission: no certificate yet");
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok(Pair { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
}

/// One parsed certificate, what the decision reads of it.
struct Parsed {
    validity: Validity,
    names: BTreeSet<String>,
    is_ca: bool,
}

fn parsed(cert: &X509Certificate<'_>) -> Result<Parsed, String> {
    let time = |t: &x509_parser::time::ASN1Time| {
        u64::try_from(t.timestamp())
            .map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s))
            .map_err(|_| "a validity before 1970".to_string())
    };
    let validity = cert.validity();
    let mut names = BTreeSet::new();
    let alternative = cert.subject_alternative_name().map_err(|e| format!("subjectAltName: {e}"))?;
    for name in alternative.iter().flat_map(|extension| extension.value.general_names.iter()) {
        match name {
            GeneralName::DNSName(dns) => {
                names.insert(dns.to_ascii_lowercase());
            }
            GeneralName::IPAddress(bytes) => {
                let ip = match bytes.len() {
                    4 => <[u8; 4]>::try_from(*bytes).ok().map(IpAddr::from),
                    16 => <[u8; 16]>::try_from(*bytes).ok().map(IpAddr::from),
                    _ => None,
                };
                if let Some(ip) = ip {
                    names.insert(ip.to_string());
                }
            }
            _ => {}
        }
    }
    Ok(Parsed {
        validity: Validity { not_before: time(&validity.not_before)?, not_after: time(&validity.not_after)? },
        names,
        is_ca: cert.is_ca(),
    })
}

fn der_of(pem: &str, what: &str) -> Result<Vec<u8>, String> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|e| format!("{what} is not PEM: {e}"))?;
    Ok(pem.contents)
}

fn certificate<'a>(der: &'a [u8], what: &str) -> Result<X509Certificate<'a>, String> {
    x509_parser::parse_x509_certificate(der).map(|(_, cert)| cert).map_err(|e| format!("{what} does not parse: {e}"))
}

/// Whether `key_pem` is the private key of `cert`.
fn key_matches(cert: &X509Certificate<'_>, key_pem: &str, what: &str) -> Result<(), String> {
    let key = KeyPair::from_pem(key_pem).map_err(|e| format!("{what} does not parse: {e}"))?;
    if key.subject_public_key_info() == cert.public_key().raw {
        Ok(())
    } else {
        Err(format!("{what} is not the certificate's key"))
    }
}

/// A serving certificate's facts, alone (no CA, no key checked).
fn inspect_pem(cert_pem: &str) -> Result<ServingFacts, String> {
    let der = der_of(cert_pem, "the certificate")?;
    let parsed = parsed(&certificate(&der, "the certificate")?)?;
    Ok(ServingFacts { validity: parsed.validity, names: parsed.names })
}

/// The CA and serving certificate a Secret's data holds, if usable.
pub fn bundle(secret: &Secret) -> Result<Bundle, PkiError> {
    let text = |key: &'static str| {
        secret
            .data
            .as_ref()
            .and_then(|data| data.get(key))
            .and_then(|value| String::from_utf8(value.0.clone()).ok())
            .ok_or(PkiError::Missing(key))
    };
    Ok(Bundle {
        ca: Pair { cert_pem: text(CA_CERT)?, key_pem: text(CA_KEY)? },
        serving: Pair { cert_pem: text(TLS_CERT)?, key_pem: text(TLS_KEY)? },
    })
}

/// A CA certificate (`what`) with its key (when given, with its key's name: a CA that
/// is to sign).
fn ca_facts(cert_pem: &str, key: Option<(Result<String, String>, &str)>, what: &str) -> Result<CaFacts, String> {
    let der = der_of(cert_pem, what)?;
    let cert = certificate(&der, what)?;
    if let Some((key_pem, key_name)) = key {
        key_matches(&cert, &key_pem?, key_name)?;
    }
    let parsed = parsed(&cert)?;
    if !parsed.is_ca {
        return Err(format!("{what} is not a CA certificate"));
    }
    Ok(CaFacts { validity: parsed.validity, der, pem: cert_pem.to_string() })
}

/// What `secret` holds, for [`decide`](super::decide::decide).
pub fn inspect(secret: Option<&Secret>) -> SecretFacts {
    let Some(secret) = secret else { return SecretFacts::Absent };
    let kind = secret.type_.as_deref().unwrap_or("Opaque");
    if kind != SECRET_TYPE {
        return SecretFacts::OtherType(kind.to_string());
    }
    let text = |key: &str| -> Result<String, String> {
        let value = secret.data.as_ref().and_then(|data| data.get(key)).ok_or_else(|| format!("no {key}"))?;
        String::from_utf8(value.0.clone()).map_err(|_| format!("{key} is not text"))
    };
    let ca = text(CA_CERT).and_then(|pem| ca_facts(&pem, Some((text(CA_KEY), CA_KEY)), CA_CERT));
    let serving = match &ca {
        Err(_) => Err("no usable CA".to_string()),
        Ok(ca) => text(TLS_CERT).and_then(|pem| der_of(&pem, TLS_CERT)).and_then(|der| {
            let cert = certificate(&der, TLS_CERT)?;
            key_matches(&cert, &text(TLS_KEY)?, TLS_KEY)?;
            let ca_cert = certificate(&ca.der, CA_CERT)?;
            if cert.issuer().as_raw() != ca_cert.subject().as_raw()
                || cert.verify_signature(Some(ca_cert.public_key())).is_err()
            {
                return Err(format!("{TLS_CERT} is not signed by {CA_CERT}"));
            }
            let parsed = parsed(&cert)?;
            Ok(ServingFacts { validity: parsed.validity, names: parsed.names })
        }),
    };
    let present = |key: &str| secret.data.as_ref().is_some_and(|data| data.contains_key(key));
    let next = (present(CA_NEXT_CERT) || present(CA_NEXT_KEY)).then(|| {
        text(CA_NEXT_CERT).and_then(|pem| ca_facts(&pem, Some((text(CA_NEXT_KEY), CA_NEXT_KEY)), CA_NEXT_CERT))
    });
    let previous = match text(CA_PREVIOUS_CERT) {
        Ok(pem) => split_pem(&pem).iter().map(|block| ca_facts(block, None, CA_PREVIOUS_CERT)).collect(),
        Err(_) if present(CA_PREVIOUS_CERT) => vec![Err(format!("{CA_PREVIOUS_CERT} is not text"))],
        Err(_) => Vec::new(),
    };
    SecretFacts::Tls { ca, serving, next, previous }
}

/// The PEM certificate's DER, for comparing with what a server presents.
pub fn der(cert_pem: &str) -> Option<Vec<u8>> {
    der_of(cert_pem, "the certificate").ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::self_managed::decide::{Decision, decide};

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|n| n.to_string()).collect()
    }

    fn secret(data: BTreeMap<String, ByteString>) -> Secret {
        Secret { type_: Some(SECRET_TYPE.into()), data: Some(data), ..Default::default() }
    }

    fn seconds(time: SystemTime) -> u64 {
        time.duration_since(SystemTime::UNIX_EPOCH).expect("after 1970").as_secs()
    }

    #[test]
    fn a_new_bundle_reads_back_as_issued() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let wanted = names(&["webhook.ns.svc", "webhook.ns.svc.cluster.local", "127.0.0.1", "::1"]);
        let bundle = new_bundle(&wanted, now, Duration::from_secs(3_600), CA_VALIDITY).expect("issued");
        let SecretFacts::Tls { ca: Ok(ca), serving: Ok(serving), .. } = inspect(Some(&secret(bundle.data()))) else {
            panic!("unusable: {:?}", inspect(Some(&secret(bundle.data()))));
        };
        let ca = ca.validity;
        assert_eq!((seconds(ca.not_before), seconds(ca.not_after)), (1_800_000_000 - 300, 1_800_000_000 + 315_360_000));
        assert_eq!(
            (seconds(serving.validity.not_before), seconds(serving.validity.not_after)),
            (1_800_000_000 - 300, 1_800_000_000 + 3_600),
            "backdated by at most five minutes"
        );
        assert_eq!(serving.names, wanted);
        assert_eq!(bundle.serving.cert_pem, bundle.serving.cert_pem.trim_start(), "PEM");
        assert_eq!(super::bundle(&secret(bundle.data())).expect("complete"), bundle);
        assert_eq!(
            decide(&inspect(Some(&secret(bundle.data()))), None, now, &wanted),
            Decision::Use { renew_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 - 300 + 2_600) }
        );

        // a short validity is backdated by a tenth, and renewed with the same CA
        let renewed = issue_serving(&bundle.ca, &wanted, now, Duration::from_secs(60)).expect("renewed");
        let data = Bundle { ca: bundle.ca.clone(), serving: renewed }.data();
        let SecretFacts::Tls { serving: Ok(serving), .. } = inspect(Some(&secret(data))) else { panic!("unusable") };
        assert_eq!(
            (seconds(serving.validity.not_before), seconds(serving.validity.not_after)),
            (1_800_000_000 - 6, 1_800_000_060)
        );

        // the CA's expiry caps a serving certificate
        let long = issue_serving(&bundle.ca, &wanted, now, CA_VALIDITY * 2).expect("issued");
        assert_eq!(inspect_pem(&long.cert_pem).expect("parses").validity.not_after, ca.not_after);
    }

    #[test]
    fn the_server_accepts_what_is_issued() {
        let bundle = new_bundle(&names(&["127.0.0.1"]), SystemTime::now(), Duration::from_secs(60), CA_VALIDITY)
            .expect("issued");
        controller_support::tls::certified_key_from_pem(
            bundle.serving.cert_pem.as_bytes(),
            bundle.serving.key_pem.as_bytes(),
        )
        .expect("usable by the TLS listener");
        let placeholder = placeholder().expect("issued");
        controller_support::tls::certified_key_from_pem(
            placeholder.cert_pem.as_bytes(),
            placeholder.key_pem.as_bytes(),
        )
        .expect("usable by the TLS listener");
    }

    #[test]
    fn broken_secrets_say_why() {
        let now = SystemTime::now();
        let wanted = names(&["webhook.ns.svc"]);
        let bundle = new_bundle(&wanted, now, Duration::from_secs(60), CA_VALIDITY).expect("issued");
        let other = new_bundle(&wanted, now, Duration::from_secs(60), CA_VALIDITY).expect("issued");
        let with = |changes: &[(&str, Option<&str>)]| {
            let mut data = bundle.data();
            for (key, value) in changes {
                match value {
                    Some(value) => data.insert(key.to_string(), ByteString(value.as_bytes().to_vec())),
                    None => data.remove(*key),
                };
            }
            inspect(Some(&secret(data)))
        };
        let problems = |facts: SecretFacts| match facts {
            SecretFacts::Tls { ca, serving, .. } => (ca.err(), serving.err()),
            other => panic!("not TLS facts: {other:?}"),
        };
        // (case, facts, (the CA's problem, the serving certificate's problem) as they start)
        type Case<'a> = (&'a str, SecretFacts, (Option<&'a str>, Option<&'a str>));
        let cases: Vec<Case> = vec![
            ("no ca.key", with(&[(CA_KEY, None)]), (Some("no ca.key"), Some("no usable CA"))),
            (
                "another CA's key",
                with(&[(CA_KEY, Some(&other.ca.key_pem))]),
                (Some("ca.key is not the certificate's key"), Some("no usable CA")),
            ),
            (
                "ca.crt garbage",
                with(&[(CA_CERT, Some("garbage"))]),
                (Some("ca.crt is not PEM: "), Some("no usable CA")),
            ),
            (
                "a serving certificate as the CA",
                with(&[(CA_CERT, Some(&bundle.serving.cert_pem)), (CA_KEY, Some(&bundle.serving.key_pem))]),
                (Some("ca.crt is not a CA certificate"), Some("no usable CA")),
            ),
            ("no tls.crt", with(&[(TLS_CERT, None)]), (None, Some("no tls.crt"))),
            (
                "a key of another certificate",
                with(&[(TLS_KEY, Some(&other.serving.key_pem))]),
                (None, Some("tls.key is not the certificate's key")),
            ),
            (
                "signed by another CA",
                with(&[(TLS_CERT, Some(&other.serving.cert_pem)), (TLS_KEY, Some(&other.serving.key_pem))]),
                (None, Some("tls.crt is not signed by ca.crt")),
            ),
        ];
        for (name, facts, (ca, serving)) in cases {
            let (ca_problem, serving_problem) = problems(facts);
            let starts = |problem: Option<String>, expected: Option<&str>| match (problem, expected) {
                (None, None) => true,
                (Some(problem), Some(expected)) => problem.starts_with(expected),
                _ => false,
            };
            assert!(starts(ca_problem.clone(), ca), "{name}: CA {ca_problem:?}");
            assert!(starts(serving_problem.clone(), serving), "{name}: serving {serving_problem:?}");
        }
        let mut opaque = secret(bundle.data());
        opaque.type_ = Some("Opaque".into());
        assert_eq!(inspect(Some(&opaque)), SecretFacts::OtherType("Opaque".into()));
        assert_eq!(inspect(None), SecretFacts::Absent);
    }
}
