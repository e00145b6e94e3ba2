//! Mutual TLS between the grid wrappers of one node unit, keyed by the nodes' edge-health
//! identities: each node's Ed25519 key pair (the key file edge-health generates) and the
//! public half it publishes on its own Node (`edgegrid.io/edge-health-public-key`, which
//! admission lets only that node write).
//!
//! One wrapper of the unit is elected and serves the others over the site LAN. A follower
//! ([`client_config`]) accepts only the wrapper whose key is the published key of the
//! member it chose as leader; the leader ([`server_config`]) serves only clients whose key
//! is one of its unit's members' published keys ([`MemberKeys`], updated in place as the
//! Nodes change) and learns which member a connection is ([`peer_node`]).
//!
//! Peers present raw public keys (RFC 7250), not certificates: the key is the identity,
//! so there is no CA, name or validity period that could be trusted instead of it. What
//! must never happen here: trusting a peer for anything but its key (and its proof of
//! holding it, the TLS 1.3 CertificateVerify signature), sending a client key or
//! application data before the peer's key was verified, or skipping the check by resuming
//! an earlier session.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{AlwaysResolvesClientRawPublicKeys, Resumption};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms, verify_tls13_signature_with_raw_key};
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer, ServerName, UnixTime, alg_id};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{AlwaysResolvesServerRawPublicKeys, NoServerSessionStorage};
use rustls::sign::{CertifiedKey, public_key_to_spki};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, DistinguishedName, Error as TlsError, PeerMisbehaved,
    ServerConfig, ServerConnection, SignatureScheme,
};

#[cfg(test)]
mod tests;

/// An Ed25519 public key as a node publishes it (the 32 raw bytes; base64 in the annotation).
pub type PublicKeyBytes = [u8; 32];

#[derive(Debug, thiserror::Error)]
pub enum NodeIdentityError {
    #[error("the node key is not an Ed25519 key in a PKCS#8 document")]
    Key(#[source] TlsError),
    #[error("rustls refused the node identity or the TLS settings")]
    Tls(#[source] TlsError),
}

impl NodeIdentityError {
    /// The label of this error kind on an error counter.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Key(_) => "key",
            Self::Tls(_) => "tls",
        }
    }
}

/// This node's key, and its public half as TLS presents it.
#[derive(Clone)]
pub struct NodeIdentity {
    node: String,
    public_key: PublicKeyBytes,
    certified: Arc<CertifiedKey>,
}

impl NodeIdentity {
    /// The identity of `node_name` from its key file's PKCS#8 document (v1 or v2, as
    /// ring's `Ed25519KeyPair::generate_pkcs8` writes it).
    pub fn from_pkcs8(node_name: &str, pkcs8_der: &[u8]) -> Result<Self, NodeIdentityError> {
        let document = PrivatePkcs8KeyDer::from(pkcs8_der);
        // Pinning the algorithm: another key kind in the key file is an error, not a key
        // peers would refuse later.
        let signing_key = rustls::crypto::ring::sign::any_eddsa_type(&document).map_err(NodeIdentityError::Key)?;
        let spki = signing_key.public_key().ok_or(NodeIdentityError::Key(TlsError::General(
            "the signing key has no public half to present".to_owned(),
        )))?;
        // What peers are shown is the SubjectPublicKeyInfo itself (RFC 7250).
        let presented = CertificateDer::from(spki.as_ref().to_vec());
        let public_key = identity_key(&presented).map_err(NodeIdentityError::Key)?;
        let certified = CertifiedKey::new(vec![presented], signing_key);
        Ok(Self { node: node_name.to_owned(), public_key, certified: Arc::new(certified) })
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    /// The public key as the node publishes it.
    pub fn public_key(&self) -> PublicKeyBytes {
        self.public_key
    }

    /// What this identity presents in TLS: its SubjectPublicKeyInfo, as a raw public key.
    pub fn presented(&self) -> &CertificateDer<'static> {
        &self.certified.cert[0]
    }
}

/// By hand so that no formatting of the private key can ever reach a log.
impl fmt::Debug for NodeIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeIdentity").field("node", &self.node).field("public_key", &self.public_key).finish()
    }
}

/// The published keys of the unit's members, by node name: what the leader admits.
///
/// A cheap handle: clones share one set, and [`MemberKeys::replace`] takes effect at the
/// next handshake of every server config built with any clone (connections already open
/// are not touched; the caller closes those of members it dropped, see [`peer_node`]).
#[derive(Clone, Debug, Default)]
pub struct MemberKeys(Arc<RwLock<BTreeMap<String, PublicKeyBytes>>>);

impl MemberKeys {
    pub fn new(members: BTreeMap<String, PublicKeyBytes>) -> Self {
        Self(Arc::new(RwLock::new(members)))
    }

    /// Makes `members` the whole set.
    pub fn replace(&self, members: BTreeMap<String, PublicKeyBytes>) {
        // A poisoned lock still holds a whole map: the only write is this one assignment.
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = members;
    }

    /// The published key of `node`, if it is a member.
    pub fn get(&self, node: &str) -> Option<PublicKeyBytes> {
        self.0.read().unwrap_or_else(PoisonError::into_inner).get(node).copied()
    }

    /// The member that published `key`, if exactly one did.
    ///
    /// A key published by two members names neither: admission keeps each node to its own
    /// annotation, but nothing stops a compromised member from publishing another's key,
    /// and the connection must then not be taken for its own (it cannot hold the
    /// private half, yet it would otherwise win the name of the other's connections).
    pub fn node_with_key(&self, key: &PublicKeyBytes) -> Option<String> {
        let members = self.0.read().unwrap_or_else(PoisonError::into_inner);
        let mut holders = members.iter().filter(|(_, published)| *published == key).map(|(node, _)| node);
        match (holders.next(), holders.next()) {
            (Some(node), None) => Some(node.clone()),
            _ => None,
        }
    }
}

/// The unit member a follower chose as leader, with the key that member published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpectedServer {
    pub node: String,
    pub key: PublicKeyBytes,
}

/// The leader's TLS settings: TLS 1.3 only, this identity's key, and a client key required
/// that is a member's ([`MemberKeys`], read at each handshake).
pub fn server_config(identity: &NodeIdentity, members: MemberKeys) -> Result<Arc<ServerConfig>, NodeIdentityError> {
    let verifier = MemberClientVerifier { members, algorithms: crypto_provider().signature_verification_algorithms };
    build_server_config(identity.certified.clone(), Arc::new(verifier)).map(Arc::new)
}

/// A follower's TLS settings: TLS 1.3 only, this identity's key as client key, and only a
/// server presenting `server.key` accepted.
///
/// The server name given to the connector does not matter (the leader is reached by its
/// IP address): it is neither matched against anything nor sent as SNI. The key is what
/// is checked, and the client's key is sent only after it was.
pub fn client_config(identity: &NodeIdentity, server: ExpectedServer) -> Result<Arc<ClientConfig>, NodeIdentityError> {
    let verifier = ExpectedServerVerifier { server, algorithms: crypto_provider().signature_verification_algorithms };
    build_client_config(identity.certified.clone(), Arc::new(verifier)).map(Arc::new)
}

/// The member a connection to the leader belongs to: the node that published the key of
/// its (verified) client key. For a tokio-rustls stream pass `stream.get_ref().1`.
///
/// `None` before the handshake completed, and for a member dropped from `members` since
/// its handshake (or whose key another member now publishes too): the caller then treats
/// the connection as no member's and closes it.
pub fn peer_node(conn: &ServerConnection, members: &MemberKeys) -> Option<String> {
    let certificate = conn.peer_certificates()?.first()?;
    let key = identity_key(certificate).ok()?;
    members.node_with_key(&key)
}

/// ring, the workspace's provider; built per call because configs own their provider.
fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn build_server_config(
    certified: Arc<CertifiedKey>,
    verifier: Arc<dyn ClientCertVerifier>,
) -> Result<ServerConfig, NodeIdentityError> {
    let mut config = ServerConfig::builder_with_provider(crypto_provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(NodeIdentityError::Tls)?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(Arc::new(AlwaysResolvesServerRawPublicKeys::new(certified)));
    // A resumed session skips the client key check, so a member dropped from
    // `MemberKeys` could come back on an old ticket: no session cache, no tickets.
    config.session_storage = Arc::new(NoServerSessionStorage {});
    config.send_tls13_tickets = 0;
    // Nothing is sent before the client is verified (already rustls' default under
    // client authentication) and nothing is accepted before its handshake is complete.
    config.send_half_rtt_data = false;
    config.max_early_data_size = 0;
    Ok(config)
}

fn build_client_config(
    certified: Arc<CertifiedKey>,
    verifier: Arc<dyn ServerCertVerifier>,
) -> Result<ClientConfig, NodeIdentityError> {
    // `dangerous()` only because the verifier is not rustls' CA-based one; it is
    // stricter than a CA check: one key is accepted.
    let mut config = ClientConfig::builder_with_provider(crypto_provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(NodeIdentityError::Tls)?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_client_cert_resolver(Arc::new(AlwaysResolvesClientRawPublicKeys::new(certified)));
    // A resumed session would not check the server's key again.
    config.resumption = Resumption::disabled();
    config.enable_early_data = false;
    // The name proves nothing, so it is not sent either.
    config.enable_sni = false;
    Ok(config)
}

/// The leader's check of a follower: its key is a member's published key.
#[derive(Debug)]
struct MemberClientVerifier {
    members: MemberKeys,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for MemberClientVerifier {
    fn client_auth_mandatory(&self) -> bool {
        true
    }

    /// No CA: trust comes from the published keys.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    /// Only the key counts: the chain (a self-signed carrier, intermediates ignored), its
    /// issuer and validity period mean nothing here.
    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, TlsError> {
        let key = identity_key(end_entity)?;
        match self.members.node_with_key(&key) {
            Some(_) => Ok(ClientCertVerified::assertion()),
            None => {
                tracing::debug!(key = ?key, "refused a TLS client whose key is no unit member's");
                Err(TlsError::InvalidCertificate(CertificateError::ApplicationVerificationFailure))
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _certificate: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        Err(tls12_refused())
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        verify_identity_signature(message, certificate, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }

    /// Peers present their key alone (RFC 7250): a certificate is refused.
    fn requires_raw_public_keys(&self) -> bool {
        true
    }
}

/// A follower's check of the leader: its key is the chosen member's.
#[derive(Debug)]
struct ExpectedServerVerifier {
    server: ExpectedServer,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for ExpectedServerVerifier {
    /// Only the key counts: the name (the leader is reached by IP address), the chain,
    /// issuer, validity period and OCSP response mean nothing here.
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        let key = identity_key(end_entity)?;
        if key == self.server.key {
            Ok(ServerCertVerified::assertion())
        } else {
            tracing::debug!(leader = %self.server.node, key = ?key, "refused a TLS server whose key is not the leader's");
            Err(TlsError::InvalidCertificate(CertificateError::ApplicationVerificationFailure))
        }
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _certificate: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        Err(tls12_refused())
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        verify_identity_signature(message, certificate, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }

    /// Peers present their key alone (RFC 7250): a certificate is refused.
    fn requires_raw_public_keys(&self) -> bool {
        true
    }
}

/// The configs are TLS 1.3 only, so rustls never asks; refuse rather than trust.
fn tls12_refused() -> TlsError {
    TlsError::General("node identities are used with TLS 1.3 only".to_owned())
}

/// The Ed25519 key a peer presented: exactly an Ed25519 SubjectPublicKeyInfo (RFC 8410:
/// that algorithm, no parameters, 32 key bytes); anything else is no node identity.
fn identity_key(presented: &CertificateDer<'_>) -> Result<PublicKeyBytes, TlsError> {
    let not_an_identity = || TlsError::InvalidCertificate(CertificateError::BadEncoding);
    let (_, key) = presented.as_ref().split_last_chunk::<32>().ok_or_else(not_an_identity)?;
    // Rebuilding the whole SubjectPublicKeyInfo from the last 32 bytes checks everything
    // in front of them: the algorithm, the absent parameters and the lengths.
    if public_key_to_spki(&alg_id::ED25519, key).as_ref() != presented.as_ref() {
        return Err(not_an_identity());
    }
    Ok(*key)
}

/// The TLS 1.3 CertificateVerify check: `dss` is an Ed25519 signature over `message` by
/// the key in `certificate` (the end-entity certificate rustls just had accepted by
/// `verify_*_cert`), i.e. the peer holds the private half of the key that was checked.
fn verify_identity_signature(
    message: &[u8],
    certificate: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
    algorithms: &WebPkiSupportedAlgorithms,
) -> Result<HandshakeSignatureValid, TlsError> {
    // Only Ed25519 was offered; the provider's algorithms would take others too.
    if dss.scheme != SignatureScheme::ED25519 {
        return Err(PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme.into());
    }
    let key = identity_key(certificate)?;
    // The signature is checked with the very key compared above (the same parser
    // extracted it), not with whatever another parser would read in the certificate.
    verify_tls13_signature_with_raw_key(message, &public_key_to_spki(&alg_id::ED25519, key), dss, algorithms)
}
