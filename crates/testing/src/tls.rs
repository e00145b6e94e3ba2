//! What tests of HTTPS servers share: a throwaway CA issuing server and client
//! certificates (rcgen), rustls client configurations trusting it, and one HTTPS request
//! that reports the certificate the server presented. For tests of HTTPS clients: kubelet
//! serving certificates (CA-signed or self-signed) and an HTTPS server that records the
//! `Authorization` header of every request it gets. The keys are generated per test,
//! except the one RSA key (ring cannot generate RSA keys), which is a fixture of this
//! crate and protects nothing.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType, SerialNumber,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, HandshakeKind, ProtocolVersion, RootCertStore, SupportedProtocolVersion};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// A 2048-bit RSA key (PKCS#8) for tests of RSA certificates only.
const TEST_RSA_KEY: &str = include_str!("test-rsa-2048.pkcs8.pem");

/// A CA, self-signed, with an ECDSA P-256 key.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate the [`TestCa`] issued and its private key.
#[derive(Clone, Debug)]
pub struct TestCert {
    pub cert_pem: String,
    pub cert_der: CertificateDer<'static>,
    /// PKCS#8.
    pub key_pem: String,
}

impl TestCa {
    /// Panics when rcgen does (it does not with these parameters).
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate().expect("an ECDSA key");
        Self { issuer: CertifiedIssuer::self_signed(params, key).expect("a self-signed CA certificate") }
    }

    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    pub fn cert_der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// A server certificate for `localhost`, 127.0.0.1 and ::1 with serial `serial`.
    pub fn server_cert(&self, serial: u64) -> TestCert {
        self.issue(serial, "server", ExtendedKeyUsagePurpose::ServerAuth, KeyPair::generate().expect("an ECDSA key"))
    }

    /// [`TestCa::server_cert`] with the (fixed) RSA test key.
    pub fn rsa_server_cert(&self, serial: u64) -> TestCert {
        let key = KeyPair::from_pem(TEST_RSA_KEY).expect("the RSA test key");
        self.issue(serial, "rsa-server", ExtendedKeyUsagePurpose::ServerAuth, key)
    }

    /// A client certificate for `common_name`.
    pub fn client_cert(&self, common_name: &str, serial: u64) -> TestCert {
        self.issue(serial, common_name, ExtendedKeyUsagePurpose::ClientAuth, KeyPair::generate().expect("an ECDSA key"))
    }

    fn issue(&self, serial: u64, common_name: &str, usage: ExtendedKeyUsagePurpose, key: KeyPair) -> TestCert {
        let names = vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()];
        let mut params = CertificateParams::new(names).expect("valid names");
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.serial_number = Some(SerialNumber::from(serial));
        params.extended_key_usages = vec![usage];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        let cert = params.signed_by(&key, &self.issuer).expect("a certificate");
        TestCert { cert_pem: cert.pem(), cert_der: cert.der().clone(), key_pem: key.serialize_pem() }
    }

    /// A kubelet serving certificate as the `kubernetes.io/kubelet-serving` signer issues
    /// it: `O=system:nodes, CN=system:node:<node>`, `ips` as IP SANs.
    pub fn kubelet_serving_cert(&self, serial: u64, node: &str, ips: &[IpAddr]) -> TestCert {
        let key = KeyPair::generate().expect("an ECDSA key");
        let cert = kubelet_serving_params(serial, node, ips).signed_by(&key, &self.issuer).expect("a certificate");
        TestCert { cert_pem: cert.pem(), cert_der: cert.der().clone(), key_pem: key.serialize_pem() }
    }

    /// A client trusting this CA only, presenting `identity` when given.
    pub fn client_config(&self, identity: Option<&TestCert>) -> Arc<ClientConfig> {
        client_config(&[self.cert_der()], identity, rustls::DEFAULT_VERSIONS)
    }
}

/// [`TestCa::kubelet_serving_cert`]'s subject and names, self-signed: what kubeadm's
/// kubelet serves by default, and what anyone can make for any name.
pub fn self_signed_kubelet_cert(node: &str, ips: &[IpAddr]) -> TestCert {
    let key = KeyPair::generate().expect("an ECDSA key");
    let cert = kubelet_serving_params(1, node, ips).self_signed(&key).expect("a certificate");
    TestCert { cert_pem: cert.pem(), cert_der: cert.der().clone(), key_pem: key.serialize_pem() }
}

fn kubelet_serving_params(serial: u64, node: &str, ips: &[IpAddr]) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::OrganizationName, "system:nodes");
    params.distinguished_name.push(DnType::CommonName, format!("system:node:{node}"));
    params.subject_alt_names = ips.iter().map(|ip| SanType::IpAddress(*ip)).collect();
    params.serial_number = Some(SerialNumber::from(serial));
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params
}

impl TestCert {
    /// The key as SEC1 (`EC PRIVATE KEY`), for an EC key.
    pub fn key_pem_sec1(&self) -> String {
        self.key_pem_unwrapped("EC PRIVATE KEY")
    }

    /// The key as PKCS#1 (`RSA PRIVATE KEY`), for an RSA key.
    pub fn key_pem_pkcs1(&self) -> String {
        self.key_pem_unwrapped("RSA PRIVATE KEY")
    }

    /// The algorithm-specific key inside the PKCS#8 wrapping, under `label`.
    fn key_pem_unwrapped(&self, label: &str) -> String {
        let pkcs8 = match PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).expect("a PEM key") {
            PrivateKeyDer::Pkcs8(key) => key.secret_pkcs8_der().to_vec(),
            other => panic!("not PKCS#8: {other:?}"),
        };
        pem(label, pkcs8_inner_key(&pkcs8).expect("a PKCS#8 PrivateKeyInfo"))
    }
}

/// `der` as PEM under `label`, 64 characters a line.
pub fn pem(label: &str, der: &[u8]) -> String {
    let text = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in text.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// The contents of the `privateKey` OCTET STRING of a PKCS#8 `PrivateKeyInfo` (SEQUENCE
/// of version, algorithm, privateKey, ...).
fn pkcs8_inner_key(der: &[u8]) -> Option<&[u8]> {
    let (tag, info, _) = der_element(der)?;
    if tag != 0x30 {
        return None;
    }
    let (_version, _, rest) = der_element(info)?;
    let (_algorithm, _, rest) = der_element(rest)?;
    let (tag, key, _) = der_element(rest)?;
    (tag == 0x04).then_some(key)
}

/// One DER element: its tag, its contents and what follows it.
fn der_element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let length = rest[..count].iter().fold(0usize, |length, &byte| (length << 8) | usize::from(byte));
        (length, &rest[count..])
    };
    (rest.len() >= length).then(|| (tag, &rest[..length], &rest[length..]))
}

/// A client trusting `roots`, presenting `identity` when given, speaking `versions` and
/// offering h2 and http/1.1 in ALPN.
pub fn client_config(
    roots: &[CertificateDer<'static>],
    identity: Option<&TestCert>,
    versions: &[&'static SupportedProtocolVersion],
) -> Arc<ClientConfig> {
    let mut store = RootCertStore::empty();
    for root in roots {
        store.add(root.clone()).expect("a usable root");
    }
    let builder = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(versions)
        .expect("versions ring supports")
        .with_root_certificates(store);
    let mut config = match identity {
        Some(cert) => builder
            .with_client_auth_cert(
                vec![cert.cert_der.clone()],
                PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).expect("a PEM key"),
            )
            .expect("a usable client certificate"),
        None => builder.with_no_client_auth(),
    };
    // as the kube-apiserver's Go client offers them
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

/// What one HTTPS request got.
#[derive(Clone, Debug)]
pub struct HttpsResponse {
    pub status: u16,
    pub body: String,
    /// The server's leaf certificate.
    pub peer_certificate: Option<CertificateDer<'static>>,
    pub protocol_version: Option<ProtocolVersion>,
    pub alpn_protocol: Option<Vec<u8>>,
    /// Full, or resumed from an earlier session of the same client configuration.
    pub handshake_kind: Option<HandshakeKind>,
}

/// `GET path` over HTTPS (HTTP/1.0, a connection of its own) to `address`, verified for
/// the address's IP; an error when the handshake or the exchange fails or takes over
/// five seconds.
pub async fn https_get(address: SocketAddr, path: &str, client: Arc<ClientConfig>) -> io::Result<HttpsResponse> {
    let exchange = async {
        let connection = tokio::net::TcpStream::connect(address).await?;
        let mut stream =
            TlsConnector::from(client).connect(ServerName::IpAddress(address.ip().into()), connection).await?;
        let (_, session) = stream.get_ref();
        let peer_certificate = session.peer_certificates().and_then(|chain| chain.first()).cloned();
        let protocol_version = session.protocol_version();
        let alpn_protocol = session.alpn_protocol().map(<[u8]>::to_vec);
        let handshake_kind = session.handshake_kind();
        stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes()).await?;
        let mut response = Vec::new();
        match stream.read_to_end(&mut response).await {
            Ok(_) => {}
            // a peer that closes without close_notify after a whole response
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof && !response.is_empty() => {}
            Err(error) => return Err(error),
        }
        let response = String::from_utf8_lossy(&response).into_owned();
        let malformed = || io::Error::new(io::ErrorKind::InvalidData, format!("not an HTTP response: {response:?}"));
        let (head, body) = response.split_once("\r\n\r\n").ok_or_else(malformed)?;
        let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or_else(malformed)?;
        Ok(HttpsResponse {
            status,
            body: body.to_string(),
            peer_certificate,
            protocol_version,
            alpn_protocol,
            handshake_kind,
        })
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, "no answer within 5 s")))
}

/// An HTTPS server presenting one certificate that answers every request with one status
/// and records each request's `Authorization` header: what a client sent to whoever holds
/// a peer's address. Stops when dropped.
pub struct RecordingHttpsServer {
    addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Seen {
    handshakes: usize,
    authorizations: Vec<Option<String>>,
}

impl RecordingHttpsServer {
    /// Listens on `address` (port 0: any), presenting `cert`, answering `status`.
    pub async fn start(address: SocketAddr, cert: &TestCert, status: u16) -> io::Result<Self> {
        let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).map_err(io::Error::other)?;
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(io::Error::other)?
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert_der.clone()], key)
            .map_err(io::Error::other)?;
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind(address).await?;
        let addr = listener.local_addr()?;
        let seen = Arc::new(Mutex::new(Seen::default()));
        let recorder = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((connection, _)) = listener.accept().await {
                let (acceptor, seen) = (acceptor.clone(), recorder.clone());
                tokio::spawn(async move {
                    let exchange = async {
                        // a client refusing the certificate ends here: nothing was sent
                        let mut stream = acceptor.accept(connection).await.ok()?;
                        seen.lock().unwrap_or_else(|e| e.into_inner()).handshakes += 1;
                        let head = read_head(&mut stream).await?;
                        let authorization = head.lines().find_map(|line| {
                            let (name, value) = line.split_once(':')?;
                            name.trim().eq_ignore_ascii_case("authorization").then(|| value.trim().to_string())
                        });
                        seen.lock().unwrap_or_else(|e| e.into_inner()).authorizations.push(authorization);
                        let response = format!(
                            "HTTP/1.1 {status} Recorded\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                        );
                        stream.write_all(response.as_bytes()).await.ok()?;
                        stream.shutdown().await.ok()
                    };
                    let _ = tokio::time::timeout(Duration::from_secs(5), exchange).await;
                });
            }
        });
        Ok(Self { addr, seen, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// TLS handshakes completed (a client that refused the certificate completed none).
    pub fn handshakes(&self) -> usize {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).handshakes
    }

    /// The `Authorization` header of each request received, in order (`None`: none sent).
    pub fn authorizations(&self) -> Vec<Option<String>> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).authorizations.clone()
    }
}

impl Drop for RecordingHttpsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A request's head (up to the blank line, at most 16 KiB).
async fn read_head(stream: &mut (impl tokio::io::AsyncRead + Unpin)) -> Option<String> {
    let mut head = Vec::new();
    let mut buffer = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() > 16 * 1024 {
            return None;
        }
        let read = stream.read(&mut buffer).await.ok()?;
        if read == 0 {
            return None;
        }
        head.extend_from_slice(&buffer[..read]);
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}
