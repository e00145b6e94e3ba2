//! Real TLS 1.3 handshakes, driven in memory: a `ClientConnection` and a
//! `ServerConnection` hand each other their flights until neither has anything to say.
//! Each side queues application data before the handshake, so what the other side
//! decrypted shows whether data went out before (or without) verification.

use std::io::{Read, Write};
use std::sync::Mutex;

use ring::rand::SystemRandom;
use ring::signature::Ed25519KeyPair;
use rustls::{AlertDescription, ClientConnection, Connection};

use super::*;

const FOLLOWER_DATA: &[u8] = b"status from the follower";
const LEADER_DATA: &[u8] = b"objects from the upstream";

fn identity(node: &str) -> NodeIdentity {
    let document = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).expect("generating a key");
    NodeIdentity::from_pkcs8(node, document.as_ref()).expect("a node identity")
}

fn members(identities: &[&NodeIdentity]) -> BTreeMap<String, PublicKeyBytes> {
    identities.iter().map(|i| (i.node().to_owned(), i.public_key())).collect()
}

fn expecting(leader: &NodeIdentity) -> ExpectedServer {
    ExpectedServer { node: leader.node().to_owned(), key: leader.public_key() }
}

/// One unit (`a` its leader, `b` and `c` followers, `c` not yet a member), a node of
/// another unit and a rogue host on the LAN.
struct Site {
    a: NodeIdentity,
    b: NodeIdentity,
    c: NodeIdentity,
    other_unit: NodeIdentity,
    rogue: NodeIdentity,
    members: MemberKeys,
}

impl Site {
    fn new() -> Self {
        let (a, b, c) = (identity("shop-1-a"), identity("shop-1-b"), identity("shop-1-c"));
        let members = MemberKeys::new(members(&[&a, &b]));
        Self { a, b, c, other_unit: identity("shop-2-a"), rogue: identity("rogue"), members }
    }

    fn leader(&self) -> Arc<ServerConfig> {
        server_config(&self.a, self.members.clone()).expect("the leader's config")
    }

    fn follower(&self, who: &NodeIdentity) -> Arc<ClientConfig> {
        client_config(who, expecting(&self.a)).expect("a follower's config")
    }
}

struct Side {
    conn: Connection,
    error: Option<TlsError>,
    received: Vec<u8>,
}

impl Side {
    fn new(mut conn: Connection, data: &[u8]) -> Self {
        // Queued until rustls has traffic keys: sent only once this side verified the other.
        conn.writer().write_all(data).expect("queueing application data");
        Self { conn, error: None, received: Vec::new() }
    }
}

/// Moves what `from` has to send into `to`; the number of TLS bytes moved.
fn flight(from: &mut Side, to: &mut Side) -> usize {
    let mut bytes = Vec::new();
    while from.conn.wants_write() {
        match from.conn.write_tls(&mut bytes) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    let mut rest = bytes.as_slice();
    while to.error.is_none() && !rest.is_empty() {
        match to.conn.read_tls(&mut rest) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if let Err(error) = to.conn.process_new_packets() {
            to.error = Some(error);
        }
        let mut plaintext = Vec::new();
        // `WouldBlock` once the buffered plaintext is read; what was read is kept.
        let _ = to.conn.reader().read_to_end(&mut plaintext);
        to.received.extend(plaintext);
    }
    bytes.len()
}

struct Exchange {
    client: Side,
    server: Side,
}

impl Exchange {
    fn server(&self) -> &ServerConnection {
        match &self.server.conn {
            Connection::Server(server) => server,
            Connection::Client(_) => unreachable!("the server side is a server"),
        }
    }
}

fn exchange(client: Arc<ClientConfig>, server: Arc<ServerConfig>) -> Exchange {
    // Any name: the key is what is checked.
    let name = ServerName::try_from("leader.invalid").expect("a server name");
    let client = ClientConnection::new(client, name).expect("a client connection");
    let server = ServerConnection::new(server).expect("a server connection");
    let mut client = Side::new(client.into(), FOLLOWER_DATA);
    let mut server = Side::new(server.into(), LEADER_DATA);
    for _ in 0..32 {
        let moved = flight(&mut client, &mut server) + flight(&mut server, &mut client);
        if moved == 0 {
            return Exchange { client, server };
        }
    }
    panic!("the handshake did not settle");
}

fn refused_certificate(why: CertificateError) -> Option<TlsError> {
    Some(TlsError::InvalidCertificate(why))
}

fn alert(description: AlertDescription) -> Option<TlsError> {
    Some(TlsError::AlertReceived(description))
}

/// Asserts the leader refused the client with `why` (the client got `alert`), took no
/// data from it and sent none to it.
fn assert_server_refused(exchange: &Exchange, why: Option<TlsError>, alert_received: Option<TlsError>) {
    assert_eq!(exchange.server.error, why);
    assert_eq!(exchange.client.error, alert_received);
    assert_eq!(exchange.server.received, b"");
    assert_eq!(exchange.client.received, b"");
}

/// A client certificate verifier that records what reaches it before delegating: a
/// rogue server's view of what a follower disclosed.
#[derive(Debug)]
struct Recording {
    inner: Arc<dyn ClientCertVerifier>,
    presented: Arc<Mutex<Vec<CertificateDer<'static>>>>,
}

impl ClientCertVerifier for Recording {
    fn client_auth_mandatory(&self) -> bool {
        // A rogue server takes whatever it gets.
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, TlsError> {
        self.presented.lock().expect("the record").push(end_entity.clone().into_owned());
        self.inner.verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.inner.verify_tls12_signature(message, certificate, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.inner.verify_tls13_signature(message, certificate, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }

    fn requires_raw_public_keys(&self) -> bool {
        self.inner.requires_raw_public_keys()
    }
}

/// A server presenting `certified` that would admit the follower `b` and records what
/// client certificates reach it.
fn recording_server(
    certified: Arc<CertifiedKey>,
    site: &Site,
) -> (Arc<ServerConfig>, Arc<Mutex<Vec<CertificateDer<'static>>>>) {
    let presented = Arc::new(Mutex::new(Vec::new()));
    let inner = MemberClientVerifier {
        members: MemberKeys::new(members(&[&site.b])),
        algorithms: crypto_provider().signature_verification_algorithms,
    };
    let verifier = Recording { inner: Arc::new(inner), presented: presented.clone() };
    let config = build_server_config(certified, Arc::new(verifier)).expect("a recording server's config");
    (Arc::new(config), presented)
}

/// Asserts the follower refused the server with `why` before disclosing anything: the
/// server got the alert, no client certificate and no application data.
fn assert_client_refused(
    exchange: &Exchange,
    presented: &Mutex<Vec<CertificateDer<'static>>>,
    why: Option<TlsError>,
    alert_received: Option<TlsError>,
) {
    assert_eq!(exchange.client.error, why);
    assert_eq!(exchange.server.error, alert_received);
    assert_eq!(*presented.lock().expect("the record"), Vec::<CertificateDer<'static>>::new());
    assert!(exchange.server().peer_certificates().is_none());
    assert_eq!(exchange.server.received, b"");
    assert_eq!(exchange.client.received, b"");
}

#[test]
fn a_member_and_its_leader_exchange_data_and_the_leader_learns_the_member() {
    let site = Site::new();

    let exchange = exchange(site.follower(&site.b), site.leader());

    assert_eq!(exchange.client.error, None);
    assert_eq!(exchange.server.error, None);
    assert_eq!(exchange.server.received, FOLLOWER_DATA);
    assert_eq!(exchange.client.received, LEADER_DATA);
    assert_eq!(peer_node(exchange.server(), &site.members), Some("shop-1-b".to_owned()));
}

#[test]
fn the_leader_refuses_a_client_whose_key_is_no_members() {
    let site = Site::new();

    for stranger in [&site.other_unit, &site.rogue] {
        let exchange = exchange(site.follower(stranger), site.leader());

        assert_server_refused(
            &exchange,
            refused_certificate(CertificateError::ApplicationVerificationFailure),
            alert(AlertDescription::AccessDenied),
        );
        assert_eq!(peer_node(exchange.server(), &site.members), None, "{}", stranger.node());
    }
}

#[test]
fn the_leader_refuses_a_client_without_a_certificate() {
    let site = Site::new();
    let verifier = ExpectedServerVerifier {
        server: expecting(&site.a),
        algorithms: crypto_provider().signature_verification_algorithms,
    };
    let anonymous = ClientConfig::builder_with_provider(crypto_provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();

    let exchange = exchange(Arc::new(anonymous), site.leader());

    // it does not even offer a raw public key, so it is refused at its ClientHello
    assert_server_refused(
        &exchange,
        Some(TlsError::PeerIncompatible(rustls::PeerIncompatible::IncorrectCertificateTypeExtension)),
        alert(AlertDescription::HandshakeFailure),
    );
}

#[test]
fn a_follower_refuses_a_server_that_is_not_its_leader_and_discloses_nothing() {
    let site = Site::new();

    // Another member of the same unit (a real member key, not the chosen leader's) and a
    // rogue host with a fresh key.
    for impostor in [&site.b, &site.rogue] {
        let (server, presented) = recording_server(impostor.certified.clone(), &site);

        let exchange = exchange(site.follower(&site.b), server);

        assert_client_refused(
            &exchange,
            &presented,
            refused_certificate(CertificateError::ApplicationVerificationFailure),
            alert(AlertDescription::AccessDenied),
        );
    }
}

#[test]
fn the_recording_server_does_see_what_a_follower_discloses_to_its_leader() {
    // The control of the test above: the same server built with the leader's identity
    // receives the follower's certificate and data.
    let site = Site::new();
    let (server, presented) = recording_server(site.a.certified.clone(), &site);

    let exchange = exchange(site.follower(&site.b), server);

    assert_eq!(exchange.client.error, None);
    assert_eq!(exchange.server.error, None);
    assert_eq!(*presented.lock().expect("the record"), vec![site.b.presented().clone()]);
    assert_eq!(exchange.server.received, FOLLOWER_DATA);
}

#[test]
fn membership_changes_take_effect_at_the_next_handshake() {
    let site = Site::new();
    let leader = site.leader();
    // The follower would resume if the leader let it: the leader must not, or a dropped
    // member would come back without its certificate being checked.
    let mut follower = (*site.follower(&site.b)).clone();
    follower.resumption = Resumption::in_memory_sessions(8);
    let follower = Arc::new(follower);

    let before = exchange(follower.clone(), leader.clone());
    assert_eq!(before.server.error, None);
    assert_eq!(before.server.received, FOLLOWER_DATA);
    let newcomer = exchange(site.follower(&site.c), leader.clone());
    assert_eq!(newcomer.server.error, refused_certificate(CertificateError::ApplicationVerificationFailure));

    site.members.replace(members(&[&site.a, &site.c]));

    let removed = exchange(follower, leader.clone());
    assert_server_refused(
        &removed,
        refused_certificate(CertificateError::ApplicationVerificationFailure),
        alert(AlertDescription::AccessDenied),
    );
    let added = exchange(site.follower(&site.c), leader);
    assert_eq!(added.server.error, None);
    assert_eq!(added.server.received, FOLLOWER_DATA);
    assert_eq!(added.client.received, LEADER_DATA);
    assert_eq!(peer_node(added.server(), &site.members), Some("shop-1-c".to_owned()));
    // The connection of the member dropped before is no member's any more.
    assert_eq!(peer_node(before.server(), &site.members), None);
}

/// The certificate of `holder` with the signing key of `signer`: the right key on the
/// certificate, the handshake signed by another.
fn mismatched(holder: &NodeIdentity, signer: &NodeIdentity) -> Arc<CertifiedKey> {
    let certified = CertifiedKey::new(vec![holder.presented().clone()], signer.certified.key.clone());
    assert!(certified.keys_match().is_err(), "the test needs a certificate and key that do not match");
    Arc::new(certified)
}

#[test]
fn a_follower_refuses_the_leaders_certificate_signed_for_by_another_key() {
    let site = Site::new();
    let (server, presented) = recording_server(mismatched(&site.a, &site.rogue), &site);

    let exchange = exchange(site.follower(&site.b), server);

    assert_client_refused(
        &exchange,
        &presented,
        refused_certificate(CertificateError::BadSignature),
        alert(AlertDescription::DecryptError),
    );
}

#[test]
fn the_leader_refuses_a_members_certificate_signed_for_by_another_key() {
    let site = Site::new();
    let verifier = ExpectedServerVerifier {
        server: expecting(&site.a),
        algorithms: crypto_provider().signature_verification_algorithms,
    };
    let impostor = build_client_config(mismatched(&site.b, &site.rogue), Arc::new(verifier)).expect("a config");

    let exchange = exchange(Arc::new(impostor), site.leader());

    assert_server_refused(
        &exchange,
        refused_certificate(CertificateError::BadSignature),
        alert(AlertDescription::DecryptError),
    );
}

#[test]
fn a_key_two_members_publish_admits_neither() {
    let site = Site::new();
    // `b` publishes `a`'s key (as a compromised `b` could): `a`'s own connection must not
    // be taken for `b`'s, nor for `a`'s while the key is ambiguous.
    let mut published = members(&[&site.a, &site.b]);
    published.insert("shop-1-b".to_owned(), site.a.public_key());
    site.members.replace(published);

    let exchange = exchange(client_config(&site.a, expecting(&site.a)).expect("a config"), site.leader());

    assert_server_refused(
        &exchange,
        refused_certificate(CertificateError::ApplicationVerificationFailure),
        alert(AlertDescription::AccessDenied),
    );
    assert_eq!(site.members.node_with_key(&site.a.public_key()), None);
}

#[test]
fn member_keys_are_looked_up_by_node_and_by_key() {
    let site = Site::new();
    let handle = site.members.clone();

    assert_eq!(handle.get("shop-1-a"), Some(site.a.public_key()));
    assert_eq!(handle.get("shop-1-c"), None);
    assert_eq!(handle.node_with_key(&site.b.public_key()), Some("shop-1-b".to_owned()));
    assert_eq!(handle.node_with_key(&site.rogue.public_key()), None);

    site.members.replace(members(&[&site.c]));
    assert_eq!(handle.get("shop-1-a"), None);
    assert_eq!(handle.node_with_key(&site.c.public_key()), Some("shop-1-c".to_owned()));
}

#[test]
fn only_an_ed25519_certificate_is_a_node_identity() {
    let site = Site::new();
    let ecdsa_key = rcgen::KeyPair::generate().expect("an ECDSA key");
    let ecdsa = CertificateDer::from(rcgen::PublicKeyData::subject_public_key_info(&ecdsa_key));
    let verifier = MemberClientVerifier {
        members: site.members.clone(),
        algorithms: crypto_provider().signature_verification_algorithms,
    };
    let not_an_identity = Err(TlsError::InvalidCertificate(CertificateError::BadEncoding));

    assert_eq!(identity_key(site.a.presented()), Ok(site.a.public_key()));
    assert_eq!(identity_key(&ecdsa), not_an_identity);
    assert_eq!(identity_key(&CertificateDer::from(b"not a certificate".to_vec())), not_an_identity);
    assert_eq!(verifier.verify_client_cert(&ecdsa, &[], UnixTime::now()).map(|_| ()), not_an_identity.map(|_| ()));
}

#[test]
fn a_key_file_of_another_kind_is_refused() {
    let ecdsa = rcgen::KeyPair::generate().expect("an ECDSA key");

    let refused = NodeIdentity::from_pkcs8("shop-1-a", &ecdsa.serialize_der());

    assert!(matches!(refused, Err(NodeIdentityError::Key(_))), "{refused:?}");
}
