//! The probe kinds, as kubelet runs them: HTTP(S) GET, TCP connect, exec, gRPC health.
//!
//! A probe answers Success or Failure (the target's fault) or a [`ProberError`] (ours:
//! bad configuration, a command that cannot start); the worker discards the latter.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpSocket, TcpStream};

use crate::state::Outcome;

/// kubelet reads at most this much of an HTTP probe's body.
pub const MAX_BODY_BYTES: usize = 10 * 1024;
/// kubelet follows at most this many same-host redirects.
const MAX_REDIRECTS: usize = 10;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeTarget {
    Http(HttpProbe),
    Tcp {
        host: String,
        port: u16,
    },
    /// A local command; exit status 0 is success.
    Exec {
        command: Vec<String>,
    },
    /// `grpc.health.v1.Health/Check` over plaintext HTTP/2, as kubelet does.
    Grpc {
        host: String,
        port: u16,
        service: Option<String>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpProbe {
    pub https: bool,
    pub host: String,
    pub port: u16,
    /// Path and query, e.g. `/healthz`.
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub bearer_token: Option<String>,
    pub tls: TlsVerification,
    /// Statuses outside 200-399 that count as a success too (kubelet's own probes have
    /// none): for a probe asking whether the server answers at all, such as edge-health's
    /// kubelet check, where a 401 comes from a live kubelet refusing the credential.
    pub extra_success_statuses: Vec<u16>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlsVerification {
    /// Trust only these PEM certificates (and a SAN matching the host dialled).
    CaBundle(Vec<u8>),
    /// A kubelet's serving certificate (signer `kubernetes.io/kubelet-serving`): a chain to
    /// these PEM certificates, a SAN matching the host dialled (an IP SAN for an IP), and
    /// the subject `CN=system:node:<name>` for one of `node_names` (none: every
    /// certificate is refused).
    KubeletServing { ca_bundle: Vec<u8>, node_names: Vec<String> },
    /// Accept any certificate, as kubelet does for HTTPS probes (a kubelet's own serving
    /// certificate is usually self-signed).
    InsecureSkipVerify,
}

/// The prefix of a kubelet serving certificate's common name, before the node's name.
pub const KUBELET_SERVING_CN_PREFIX: &str = "system:node:";

/// What a probe found, with kubelet-style detail for logs and Events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeReport {
    pub outcome: Outcome,
    pub detail: String,
}

impl ProbeReport {
    fn success(detail: impl Into<String>) -> Self {
        Self { outcome: Outcome::Success, detail: detail.into() }
    }
    fn failure(detail: impl Into<String>) -> Self {
        Self { outcome: Outcome::Failure, detail: detail.into() }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProberError {
    #[error("invalid probe: {0}")]
    Invalid(String),
    #[error("cannot run probe command: {0}")]
    Exec(String),
}

/// Runs probes. A trait so workers can be driven by scripted results in tests.
pub trait Prober: Send + Sync + 'static {
    fn probe<'a>(
        &'a self,
        target: &'a ProbeTarget,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<ProbeReport, ProberError>>;
}

/// The real prober.
#[derive(Clone, Copy, Debug, Default)]
pub struct NetworkProber;

impl Prober for NetworkProber {
    fn probe<'a>(
        &'a self,
        target: &'a ProbeTarget,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<ProbeReport, ProberError>> {
        Box::pin(run_probe(target, timeout))
    }
}

pub async fn run_probe(target: &ProbeTarget, timeout: Duration) -> Result<ProbeReport, ProberError> {
    run_probe_from(target, timeout, None).await
}

/// [`run_probe`] with its connections made from `source` when given: a daemon bound to
/// one address of a multi-homed node speaks from it, so its peers, and the firewall
/// between them, see the address it is known by.
pub async fn run_probe_from(
    target: &ProbeTarget,
    timeout: Duration,
    source: Option<IpAddr>,
) -> Result<ProbeReport, ProberError> {
    let timed_out = || ProbeReport::failure(format!("probe timed out after {timeout:?}"));
    match target {
        ProbeTarget::Tcp { host, port } => Ok(match tokio::time::timeout(timeout, dial(host, *port, source)).await {
            Err(_) => timed_out(),
            Ok(Err(e)) => ProbeReport::failure(format!("dial tcp {host}:{port}: {e}")),
            Ok(Ok(_)) => ProbeReport::success(""),
        }),
        ProbeTarget::Exec { command } => exec(command, timeout).await,
        ProbeTarget::Http(probe) => {
            check_host(&probe.host)?;
            Ok(tokio::time::timeout(timeout, http(probe, source)).await.unwrap_or_else(|_| Ok(timed_out()))?)
        }
        ProbeTarget::Grpc { host, port, service } => {
            check_host(host)?;
            Ok(tokio::time::timeout(timeout, grpc(host, *port, service.as_deref(), source))
                .await
                .unwrap_or_else(|_| timed_out()))
        }
    }
}

fn check_host(host: &str) -> Result<(), ProberError> {
    if host.is_empty() || host.contains('/') {
        return Err(ProberError::Invalid(format!("invalid host {host:?}")));
    }
    Ok(())
}

async fn exec(command: &[String], timeout: Duration) -> Result<ProbeReport, ProberError> {
    let (program, args) = command.split_first().ok_or_else(|| ProberError::Invalid("empty exec command".into()))?;
    let child = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ProberError::Exec(format!("{program}: {e}")))?;
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        // dropping the future drops the child, which kills it
        Err(_) => Ok(ProbeReport::failure(format!("command timed out after {timeout:?}"))),
        Ok(Err(e)) => Err(ProberError::Exec(e.to_string())),
        Ok(Ok(output)) => {
            let mut text = output.stdout;
            text.extend_from_slice(&output.stderr);
            text.truncate(MAX_BODY_BYTES);
            let text = String::from_utf8_lossy(&text).into_owned();
            Ok(if output.status.success() {
                ProbeReport::success(text)
            } else {
                ProbeReport::failure(format!("command exited with {}: {text}", output.status))
            })
        }
    }
}

trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// A TCP connection to `host:port`, from `source` when given; the host's addresses of
/// the source's family are tried in turn, as `TcpStream::connect` tries them all.
async fn dial(host: &str, port: u16, source: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let Some(source) = source else { return TcpStream::connect((host, port)).await };
    let mut last = None;
    for address in tokio::net::lookup_host((host, port)).await? {
        if address.is_ipv4() != source.is_ipv4() {
            continue;
        }
        let socket = if address.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
        socket.bind(SocketAddr::new(source, 0))?;
        match socket.connect(address).await {
            Ok(stream) => return Ok(stream),
            Err(error) => last = Some(error),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::AddrNotAvailable,
            format!("{host} has no address to reach from {source}"),
        )
    }))
}

async fn connect(probe: &HttpProbe, host: &str, port: u16, source: Option<IpAddr>) -> Result<Box<dyn Io>, String> {
    let tcp = dial(host, port, source).await.map_err(|e| format!("dial tcp {host}:{port}: {e}"))?;
    if !probe.https {
        return Ok(Box::new(tcp));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let config = match &probe.tls {
        TlsVerification::InsecureSkipVerify => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
            .with_no_client_auth(),
        TlsVerification::CaBundle(pem) => builder.with_root_certificates(roots(pem)?).with_no_client_auth(),
        TlsVerification::KubeletServing { ca_bundle, node_names } => {
            let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots(ca_bundle)?),
                provider.clone(),
            )
            .build()
            .map_err(|e| format!("CA bundle: {e}"))?;
            let verifier = KubeletServingVerifier { webpki, node_names: node_names.clone() };
            builder.dangerous().with_custom_certificate_verifier(Arc::new(verifier)).with_no_client_auth()
        }
    };
    let name = ServerName::try_from(host.to_string()).map_err(|e| format!("server name {host}: {e}"))?;
    let tls =
        tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.map_err(|e| format!("tls: {e}"))?;
    Ok(Box::new(tls))
}

fn roots(pem: &[u8]) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        roots.add(cert.map_err(|e| format!("CA bundle: {e}"))?).map_err(|e| format!("CA bundle: {e}"))?;
    }
    Ok(roots)
}

async fn http(probe: &HttpProbe, source: Option<IpAddr>) -> Result<ProbeReport, ProberError> {
    let scheme = if probe.https { "https" } else { "http" };
    let mut path = probe.path.clone();
    if !path.starts_with('/') {
        path.insert(0, '/');
    }
    for _ in 0..=MAX_REDIRECTS {
        let url = format!("{scheme}://{}:{}{path}", probe.host, probe.port);
        let io = match connect(probe, &probe.host, probe.port, source).await {
            Ok(io) => io,
            Err(e) => return Ok(ProbeReport::failure(format!("Get {url:?}: {e}"))),
        };
        let (mut sender, connection) = match hyper::client::conn::http1::handshake(TokioIo::new(io)).await {
            Ok(parts) => parts,
            Err(e) => return Ok(ProbeReport::failure(format!("Get {url:?}: {e}"))),
        };
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let mut request = http::Request::get(path.as_str())
            .header(http::header::HOST, format!("{}:{}", probe.host, probe.port))
            .header(http::header::USER_AGENT, "edgegrid-probe/1.0")
            .header(http::header::ACCEPT, "*/*");
        if let Some(token) = &probe.bearer_token {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        for (name, value) in &probe.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let request = request.body(Empty::<Bytes>::new()).map_err(|e| ProberError::Invalid(e.to_string()))?;
        let response = match sender.send_request(request).await {
            Ok(response) => response,
            Err(e) => return Ok(ProbeReport::failure(format!("Get {url:?}: {e}"))),
        };
        let status = response.status();
        if status.is_redirection()
            && let Some(location) = response.headers().get(http::header::LOCATION).and_then(|l| l.to_str().ok())
        {
            match redirect_path(location, probe) {
                Some(next) => {
                    path = next;
                    continue;
                }
                // kubelet does not follow a redirect to another host and counts it as a success
                None => return Ok(ProbeReport::success(format!("Probe terminated redirects, Response: {status}"))),
            }
        }
        let body = read_capped(response.into_body()).await;
        let body = String::from_utf8_lossy(&body).into_owned();
        return Ok(if (200..400).contains(&status.as_u16()) {
            ProbeReport::success(body)
        } else if probe.extra_success_statuses.contains(&status.as_u16()) {
            ProbeReport::success(format!("HTTP probe answered {}, counted as a success", status.as_u16()))
        } else {
            ProbeReport::failure(format!("HTTP probe failed with statuscode: {}", status.as_u16()))
        });
    }
    Ok(ProbeReport::failure(format!("stopped after {MAX_REDIRECTS} redirects")))
}

/// The path to follow for a same-host redirect, or `None` for another host.
fn redirect_path(location: &str, probe: &HttpProbe) -> Option<String> {
    let uri: http::Uri = location.parse().ok()?;
    match uri.host() {
        None => Some(uri.path_and_query().map_or("/", |p| p.as_str()).to_string()),
        Some(host) => {
            let same_port = uri.port_u16().is_none_or(|p| p == probe.port);
            (host == probe.host && same_port).then(|| uri.path_and_query().map_or("/", |p| p.as_str()).to_string())
        }
    }
}

/// Reads at most [`MAX_BODY_BYTES`] and drops the rest (a huge body costs nothing more).
async fn read_capped(mut body: hyper::body::Incoming) -> Vec<u8> {
    let mut out = Vec::new();
    while out.len() < MAX_BODY_BYTES {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    let room = MAX_BODY_BYTES - out.len();
                    out.extend_from_slice(&data[..data.len().min(room)]);
                }
            }
            _ => break,
        }
    }
    out
}

/// gRPC health status SERVING.
const SERVING: u64 = 1;

async fn grpc(host: &str, port: u16, service: Option<&str>, source: Option<IpAddr>) -> ProbeReport {
    let target = format!("{host}:{port}");
    let tcp = match dial(host, port, source).await {
        Ok(tcp) => tcp,
        Err(e) => return ProbeReport::failure(format!("failed to connect service {target:?}: {e}")),
    };
    let (mut sender, connection) =
        match hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp)).await {
            Ok(parts) => parts,
            Err(e) => return ProbeReport::failure(format!("failed to connect service {target:?}: {e}")),
        };
    tokio::spawn(async move {
        let _ = connection.await;
    });
    // HealthCheckRequest { string service = 1; } in a length-prefixed gRPC frame
    let mut message = Vec::new();
    if let Some(service) = service.filter(|s| !s.is_empty()) {
        message.push(0x0a);
        push_varint(&mut message, service.len() as u64);
        message.extend_from_slice(service.as_bytes());
    }
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(&message);
    let request = http::Request::post(format!("http://{target}/grpc.health.v1.Health/Check"))
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from(frame)));
    let Ok(request) = request else {
        return ProbeReport::failure("cannot build gRPC request");
    };
    let response = match sender.send_request(request).await {
        Ok(response) => response,
        Err(e) => return ProbeReport::failure(format!("health rpc to {target:?} failed: {e}")),
    };
    let grpc_status_header = response.headers().get("grpc-status").cloned();
    let collected = match response.into_body().collect().await {
        Ok(collected) => collected,
        Err(e) => return ProbeReport::failure(format!("health rpc to {target:?} failed: {e}")),
    };
    let grpc_status = collected
        .trailers()
        .and_then(|t| t.get("grpc-status").cloned())
        .or(grpc_status_header)
        .and_then(|v| v.to_str().ok().map(str::to_string))
        .unwrap_or_default();
    if grpc_status != "0" {
        return ProbeReport::failure(format!("health rpc to {target:?} returned grpc-status {grpc_status:?}"));
    }
    let body = collected.to_bytes();
    match health_status(&body) {
        Some(SERVING) => ProbeReport::success("status: SERVING"),
        Some(other) => ProbeReport::failure(format!("service unhealthy (responded with status {other})")),
        None => ProbeReport::failure("malformed health response"),
    }
}

fn push_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn read_varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// `HealthCheckResponse.status` (field 1, varint) from one gRPC frame; absent means 0.
fn health_status(frame: &[u8]) -> Option<u64> {
    let (&compressed, rest) = frame.split_first()?;
    if compressed != 0 || rest.len() < 4 {
        return None;
    }
    let len = u32::from_be_bytes(rest[..4].try_into().ok()?) as usize;
    let mut message = rest.get(4..4 + len)?;
    let mut status = 0;
    while !message.is_empty() {
        let (key, used) = read_varint(message)?;
        message = &message[used..];
        match (key >> 3, key & 7) {
            (1, 0) => {
                let (value, used) = read_varint(message)?;
                status = value;
                message = &message[used..];
            }
            (_, 0) => message = &message[read_varint(message)?.1..],
            (_, 2) => {
                let (len, used) = read_varint(message)?;
                message = message.get(used + len as usize..)?;
            }
            _ => return None,
        }
    }
    Some(status)
}

/// A kubelet's serving certificate for one of `node_names`: webpki's checks (the chain to
/// the CA bundle, validity, the serverAuth usage, a SAN matching the host dialled), then
/// exactly one subject common name, `system:node:<name>`. Without the name check any
/// certificate the kubelet-serving signer issued (every node's) would pass for every
/// node whose address it names, and a node can ask for its own addresses only.
#[derive(Debug)]
struct KubeletServingVerifier {
    webpki: Arc<rustls::client::WebPkiServerVerifier>,
    node_names: Vec<String>,
}

impl rustls::client::danger::ServerCertVerifier for KubeletServingVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        let verified = self.webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)?;
        let refused = |why: String| {
            rustls::Error::InvalidCertificate(rustls::CertificateError::Other(rustls::OtherError(Arc::new(
                std::io::Error::other(why),
            ))))
        };
        let (_, cert) = x509_parser::parse_x509_certificate(end_entity)
            .map_err(|e| refused(format!("unreadable certificate: {e}")))?;
        let names: Vec<&str> = cert.subject().iter_common_name().filter_map(|cn| cn.as_str().ok()).collect();
        let node = match names.as_slice() {
            [name] => name.strip_prefix(KUBELET_SERVING_CN_PREFIX),
            _ => None,
        };
        match node {
            Some(node) if self.node_names.iter().any(|n| n == node) => Ok(verified),
            _ => Err(refused(format!(
                "the certificate's subject common name is {names:?}, not {KUBELET_SERVING_CN_PREFIX}<one of {:?}>",
                self.node_names
            ))),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// Accepts any server certificate but still checks handshake signatures.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_response_decoding() {
        assert_eq!(health_status(&[0, 0, 0, 0, 2, 0x08, 0x01]), Some(1));
        assert_eq!(health_status(&[0, 0, 0, 0, 2, 0x08, 0x02]), Some(2));
        assert_eq!(health_status(&[0, 0, 0, 0, 0]), Some(0), "empty message: default UNKNOWN");
        assert_eq!(health_status(&[0, 0, 0, 0, 5, 0x12, 0x01, b'x', 0x08, 0x01]), Some(1), "unknown fields skipped");
        assert_eq!(health_status(&[1, 0, 0, 0, 0]), None, "compressed frames are not supported");
        assert_eq!(health_status(&[0, 0, 0, 0, 9, 0x08]), None, "truncated");
    }

    #[test]
    fn varints_round_trip() {
        for value in [0u64, 1, 127, 128, 300, 16_384, u64::from(u32::MAX)] {
            let mut buf = Vec::new();
            push_varint(&mut buf, value);
            assert_eq!(read_varint(&buf), Some((value, buf.len())));
        }
    }
}
