//! HTTPS on the `--bind-address` listener: the server certificate from files (or pushed
//! in memory by the binary) behind a rustls [`ResolvesServerCert`], taken up without a
//! restart and without disturbing open connections, and optional client-certificate
//! authentication against a CA bundle that is re-read as well.
//!
//! It must never take the server down for one connection (a failed or stalled handshake
//! ends that connection only), never hold other clients up behind a slow handshake, and
//! never give up a good certificate for files it cannot use: a changed file that does not
//! parse, or a key that is not the certificate's, is logged and counted once and the
//! certificate served so far stays.
//!
//! Rotation is found by re-reading the files every reload interval (1 s by default) and
//! comparing their bytes with the last ones seen, so it works the same for a kubelet
//! Secret volume (an atomic symlink swap) and for files rewritten in place; a new
//! certificate is served within one interval of both files being complete. Connections
//! already open keep the certificate they were set up with. Sessions are never resumed,
//! so every new connection is authenticated with the certificate and client CA bundle
//! current at its handshake (the kube-apiserver's and kube-proxy's Go clients do not
//! resume sessions anyway; they keep connections open).

use std::error::Error as _;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ClientHello, NoServerSessionStorage, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{InconsistentKeys, RootCertStore, ServerConfig, SupportedProtocolVersion};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How often the certificate, key and client CA files are re-read by default.
pub const DEFAULT_RELOAD_INTERVAL: Duration = Duration::from_secs(1);
/// TLS 1.3 and 1.2; never anything older (rustls has nothing older).
pub const PROTOCOL_VERSIONS: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13, &rustls::version::TLS12];
/// The ALPN protocols offered: HTTP/1.1, the only protocol the runtime's server speaks.
pub const ALPN_PROTOCOLS: &[&[u8]] = &[b"http/1.1"];
/// Handshakes in progress at once; connections beyond are closed at once.
const MAX_PENDING_HANDSHAKES: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("malformed PEM in {origin}")]
    Pem {
        origin: String,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("no certificate in {origin}")]
    NoCertificate { origin: String },
    #[error("no private key (PKCS#8, PKCS#1 RSA or SEC1 EC, unencrypted) in {origin}")]
    NoPrivateKey { origin: String },
    #[error("unusable private key in {origin}")]
    PrivateKey {
        origin: String,
        #[source]
        source: rustls::Error,
    },
    #[error("unusable certificate in {origin}")]
    Certificate {
        origin: String,
        #[source]
        source: rustls::Error,
    },
    #[error("the private key in {key} is not the one of the certificate in {certificate}")]
    KeyMismatch { certificate: String, key: String },
    #[error("unusable client CA bundle {origin}: {reason}")]
    ClientCa { origin: String, reason: String },
    #[error("building the TLS configuration")]
    Config(#[source] rustls::Error),
    #[error("{0}")]
    Flags(String),
}

/// The error with its causes, `outer: inner: innermost`, for one log line.
fn chain(error: &TlsError) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The crypto every TLS object of this module uses (ring, as the rest of the workspace),
/// named rather than taken from a process-wide default.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A certificate chain (leaf first) and its private key from PEM (PKCS#8, PKCS#1 RSA or
/// SEC1 EC), refused when the key is not the leaf's. Sections of other kinds are
/// skipped, so one file holding both works for both.
pub fn certified_key_from_pem(cert_chain_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, TlsError> {
    parse_certified_key(cert_chain_pem, key_pem, "the certificate PEM", "the private key PEM", &provider())
}

fn parse_certified_key(
    cert_chain_pem: &[u8],
    key_pem: &[u8],
    cert_origin: &str,
    key_origin: &str,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain = CertificateDer::pem_slice_iter(cert_chain_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem { origin: cert_origin.into(), source })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate { origin: cert_origin.into() });
    }
    let key = match PrivateKeyDer::from_pem_slice(key_pem) {
        Ok(key) => key,
        Err(rustls::pki_types::pem::Error::NoItemsFound) => {
            return Err(TlsError::NoPrivateKey { origin: key_origin.into() });
        }
        Err(source) => return Err(TlsError::Pem { origin: key_origin.into(), source }),
    };
    let key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|source| TlsError::PrivateKey { origin: key_origin.into(), source })?;
    checked(CertifiedKey::new(chain, key), cert_origin, key_origin)
}

/// `key` when its private key is its leaf certificate's.
fn checked(key: CertifiedKey, cert_origin: &str, key_origin: &str) -> Result<CertifiedKey, TlsError> {
    match key.keys_match() {
        // a key type that cannot tell its public key: nothing to compare (none of ring's)
        Ok(()) | Err(rustls::Error::InconsistentKeys(InconsistentKeys::Unknown)) => Ok(key),
        Err(rustls::Error::InconsistentKeys(InconsistentKeys::KeyMismatch)) => {
            Err(TlsError::KeyMismatch { certificate: cert_origin.into(), key: key_origin.into() })
        }
        Err(source) => Err(TlsError::Certificate { origin: cert_origin.into(), source }),
    }
}

/// The server certificate every new handshake gets: whatever was set last, from the
/// files of a [`TlsConfig::from_files`] or in memory by the binary ([`CertResolver::set`],
/// e.g. a certificate it issued itself). Connections already set up keep theirs.
pub struct CertResolver {
    current: RwLock<Arc<CertifiedKey>>,
}

impl CertResolver {
    /// Serves `key`; refused when its private key is not its leaf certificate's.
    pub fn new(key: CertifiedKey) -> Result<Self, TlsError> {
        let key = checked(key, "the certificate chain", "the private key")?;
        Ok(Self::serving(key))
    }

    /// Serves the chain and key of [`certified_key_from_pem`].
    pub fn from_pem(cert_chain_pem: &[u8], key_pem: &[u8]) -> Result<Self, TlsError> {
        Self::new(certified_key_from_pem(cert_chain_pem, key_pem)?)
    }

    /// Serves `key` to every handshake from now on, unless its private key is not its
    /// leaf certificate's (then the current one stays). With files behind this resolver,
    /// their next change replaces it again.
    pub fn set(&self, key: CertifiedKey) -> Result<(), TlsError> {
        let key = checked(key, "the certificate chain", "the private key")?;
        self.set_unchecked(key);
        Ok(())
    }

    /// [`CertResolver::set`] from PEM, as [`certified_key_from_pem`] reads it.
    pub fn set_pem(&self, cert_chain_pem: &[u8], key_pem: &[u8]) -> Result<(), TlsError> {
        self.set(certified_key_from_pem(cert_chain_pem, key_pem)?)
    }

    /// What a handshake gets now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        // a panic elsewhere while holding the lock cannot leave a half-set key behind
        self.current.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    fn serving(key: CertifiedKey) -> Self {
        Self { current: RwLock::new(Arc::new(key)) }
    }

    fn set_unchecked(&self, key: CertifiedKey) {
        *self.current.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(key);
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

impl fmt::Debug for CertResolver {
    // never the key
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertResolver").field("chain_length", &self.current().cert.len()).finish()
    }
}

/// Files re-read every interval: the contents last seen (or why they could not be read),
/// so the same contents are parsed, and the same failure is logged, once.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    Contents(Vec<Vec<u8>>),
    Unreadable(String),
}

impl Seen {
    fn read(paths: &[PathBuf]) -> Self {
        let mut contents = Vec::new();
        for path in paths {
            match std::fs::read(path) {
                Ok(bytes) => contents.push(bytes),
                Err(error) => return Self::Unreadable(format!("reading {}: {error}", path.display())),
            }
        }
        Self::Contents(contents)
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { path: path.to_path_buf(), source })
}

fn origin(path: &Path) -> String {
    path.display().to_string()
}

/// The certificate and key files behind a resolver.
#[derive(Clone, Debug)]
struct CertFiles {
    cert: PathBuf,
    key: PathBuf,
    seen: Seen,
}

impl CertFiles {
    fn parse(&self, cert: &[u8], key: &[u8], provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
        parse_certified_key(cert, key, &origin(&self.cert), &origin(&self.key), provider)
    }
}

/// The client CA bundle file.
#[derive(Clone, Debug)]
struct ClientCaFile {
    path: PathBuf,
    seen: Seen,
}

/// A verifier that requires a client certificate issued by one of the CAs in `pem`.
fn client_verifier(
    pem: &[u8],
    origin: &str,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|source| TlsError::Pem { origin: origin.into(), source })?;
        roots.add(cert).map_err(|error| TlsError::ClientCa { origin: origin.into(), reason: error.to_string() })?;
    }
    if roots.is_empty() {
        return Err(TlsError::NoCertificate { origin: origin.into() });
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|error| TlsError::ClientCa { origin: origin.into(), reason: error.to_string() })
}

fn server_config(
    provider: &Arc<CryptoProvider>,
    resolver: Arc<CertResolver>,
    client_verifier: Option<Arc<dyn ClientCertVerifier>>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(PROTOCOL_VERSIONS)
        .map_err(TlsError::Config)?;
    let builder = match client_verifier {
        Some(verifier) => builder.with_client_cert_verifier(verifier),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = ALPN_PROTOCOLS.iter().map(|protocol| protocol.to_vec()).collect();
    // no resumption: a session set up before a rotation would skip the new certificate
    // (or the new client CA bundle)
    config.session_storage = Arc::new(NoServerSessionStorage {});
    config.send_tls13_tickets = 0;
    Ok(Arc::new(config))
}

/// `--tls-cert-file`, `--tls-private-key-file` and `--client-ca-file`, for a binary to
/// flatten into its flags next to [`RuntimeFlags`](crate::RuntimeFlags).
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFlags {
    /// PEM certificate, followed by any intermediates, to serve --bind-address over HTTPS
    /// (with --tls-private-key-file); re-read when it changes.
    #[arg(long, requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of --tls-cert-file (PKCS#8, PKCS#1 RSA or SEC1 EC); re-read when it
    /// changes.
    #[arg(long, requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,
    /// PEM bundle of CAs: HTTPS clients must present a certificate one of them issued.
    /// Re-read when it changes.
    #[arg(long, requires = "tls_cert_file")]
    pub client_ca_file: Option<PathBuf>,
}

impl TlsFlags {
    /// The configuration the flags give, with the files read and checked now; `None`
    /// without a certificate (plain HTTP).
    pub fn config(&self) -> Result<Option<TlsConfig>, TlsError> {
        match (&self.tls_cert_file, &self.tls_private_key_file, &self.client_ca_file) {
            (None, None, None) => Ok(None),
            (Some(cert), Some(key), client_ca) => {
                let config = TlsConfig::from_files(cert, key)?;
                match client_ca {
                    Some(path) => config.with_client_ca_file(path).map(Some),
                    None => Ok(Some(config)),
                }
            }
            _ => Err(TlsError::Flags(
                "--tls-cert-file and --tls-private-key-file go together, and --client-ca-file needs them".into(),
            )),
        }
    }
}

/// How the `--bind-address` listener serves HTTPS: the certificate (from files or pushed
/// by the binary), the optional client CA bundle, and how often files are re-read.
pub struct TlsConfig {
    provider: Arc<CryptoProvider>,
    resolver: Arc<CertResolver>,
    cert_files: Option<CertFiles>,
    client_ca: Option<(ClientCaFile, Arc<dyn ClientCertVerifier>)>,
    reload_interval: Duration,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("cert_file", &self.cert_files.as_ref().map(|files| &files.cert))
            .field("key_file", &self.cert_files.as_ref().map(|files| &files.key))
            .field("client_ca_file", &self.client_ca.as_ref().map(|(file, _)| &file.path))
            .field("reload_interval", &self.reload_interval)
            .finish_non_exhaustive()
    }
}

impl TlsConfig {
    /// Serves the certificate chain in `cert_file` with the key in `key_file`, read and
    /// checked now, and again whenever either changes.
    pub fn from_files(cert_file: impl Into<PathBuf>, key_file: impl Into<PathBuf>) -> Result<Self, TlsError> {
        let (cert, key) = (cert_file.into(), key_file.into());
        let provider = provider();
        let (cert_pem, key_pem) = (read(&cert)?, read(&key)?);
        let files = CertFiles { cert, key, seen: Seen::Contents(vec![cert_pem.clone(), key_pem.clone()]) };
        let certified = files.parse(&cert_pem, &key_pem, &provider)?;
        Ok(Self {
            resolver: Arc::new(CertResolver::serving(certified)),
            provider,
            cert_files: Some(files),
            client_ca: None,
            reload_interval: DEFAULT_RELOAD_INTERVAL,
        })
    }

    /// Serves whatever `resolver` holds, which only the binary changes (no files).
    pub fn from_resolver(resolver: Arc<CertResolver>) -> Self {
        Self {
            provider: provider(),
            resolver,
            cert_files: None,
            client_ca: None,
            reload_interval: DEFAULT_RELOAD_INTERVAL,
        }
    }

    /// Requires every client to present a certificate issued by a CA of the PEM bundle in
    /// `path`, read now and again whenever it changes (new connections only).
    pub fn with_client_ca_file(mut self, path: impl Into<PathBuf>) -> Result<Self, TlsError> {
        let path = path.into();
        let pem = read(&path)?;
        let verifier = client_verifier(&pem, &origin(&path), &self.provider)?;
        self.client_ca = Some((ClientCaFile { path, seen: Seen::Contents(vec![pem]) }, verifier));
        Ok(self)
    }

    /// How often the files are re-read ([`DEFAULT_RELOAD_INTERVAL`] unless set), which
    /// bounds how long a rotated certificate takes to be served.
    pub fn with_reload_interval(mut self, interval: Duration) -> Self {
        self.reload_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// The resolver handshakes take the certificate from, for a binary that sets
    /// certificates itself.
    pub fn resolver(&self) -> Arc<CertResolver> {
        self.resolver.clone()
    }

    pub fn requires_client_certificates(&self) -> bool {
        self.client_ca.is_some()
    }

    /// The rustls configuration as it stands (TLS 1.2 and 1.3, ALPN http/1.1, the
    /// resolver, the client CA if any, no session resumption).
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, TlsError> {
        server_config(&self.provider, self.resolver.clone(), self.client_ca.as_ref().map(|(_, v)| v.clone()))
    }
}

/// What TLS serving counts, for `/metrics`.
#[derive(Clone, Debug, Default)]
pub struct TlsMetrics {
    pub reloads: Counter,
    pub reload_errors: Counter,
    pub handshake_errors: Counter,
}

impl crate::metrics::Register for TlsMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register("tls_reloads", "Changed certificate, key or client CA files taken up", self.reloads.clone());
        registry.register(
            "tls_reload_errors",
            "Changed certificate, key or client CA files that could not be used (the previous ones stay)",
            self.reload_errors.clone(),
        );
        registry.register(
            "tls_handshake_errors",
            "TLS handshakes that failed or timed out (including plain HTTP sent to the HTTPS port)",
            self.handshake_errors.clone(),
        );
    }
}

/// Re-reads the files every interval: a changed certificate goes into the resolver, a
/// changed client CA bundle into a new rustls configuration for new connections.
struct Reloader {
    provider: Arc<CryptoProvider>,
    resolver: Arc<CertResolver>,
    cert_files: Option<CertFiles>,
    client_ca: Option<(ClientCaFile, Arc<dyn ClientCertVerifier>)>,
    interval: Duration,
    configs: watch::Sender<Arc<ServerConfig>>,
    metrics: TlsMetrics,
}

impl Reloader {
    async fn run(mut self) {
        if self.cert_files.is_none() && self.client_ca.is_none() {
            return;
        }
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // the first tick is at once: the files were just read
        ticks.tick().await;
        loop {
            ticks.tick().await;
            self.poll().await;
        }
    }

    async fn poll(&mut self) {
        let cert_paths = self.cert_files.as_ref().map(|files| vec![files.cert.clone(), files.key.clone()]);
        let ca_path = self.client_ca.as_ref().map(|(file, _)| vec![file.path.clone()]);
        let read = tokio::task::spawn_blocking(move || {
            (cert_paths.as_deref().map(Seen::read), ca_path.as_deref().map(Seen::read))
        });
        let Ok((cert_seen, ca_seen)) = read.await else { return };
        if let Some(seen) = cert_seen {
            self.cert_files_seen(seen);
        }
        if let Some(seen) = ca_seen {
            self.client_ca_seen(seen);
        }
    }

    fn cert_files_seen(&mut self, seen: Seen) {
        let Some(files) = self.cert_files.as_mut() else { return };
        if files.seen == seen {
            return;
        }
        files.seen = seen.clone();
        let (cert_file, key_file) = (origin(&files.cert), origin(&files.key));
        let parsed = match &seen {
            Seen::Contents(contents) => match contents.as_slice() {
                [cert, key] => files.parse(cert, key, &self.provider).map_err(|error| chain(&error)),
                _ => Err("not a certificate and a key".to_string()),
            },
            Seen::Unreadable(error) => Err(error.clone()),
        };
        match parsed {
            Ok(certified) => {
                self.metrics.reloads.inc();
                tracing::info!(cert_file, key_file, "serving the changed TLS certificate");
                self.resolver.set_unchecked(certified);
            }
            Err(error) => {
                self.metrics.reload_errors.inc();
                tracing::warn!(
                    cert_file,
                    key_file,
                    error,
                    "cannot use the changed TLS certificate files: serving the previous one"
                );
            }
        }
    }

    fn client_ca_seen(&mut self, seen: Seen) {
        let Some((file, verifier)) = self.client_ca.as_mut() else { return };
        if file.seen == seen {
            return;
        }
        file.seen = seen.clone();
        let path = origin(&file.path);
        let parsed = match &seen {
            Seen::Contents(contents) => {
                client_verifier(&contents.concat(), &path, &self.provider).map_err(|e| chain(&e))
            }
            Seen::Unreadable(error) => Err(error.clone()),
        };
        match parsed {
            Ok(new) => {
                *verifier = new;
                self.metrics.reloads.inc();
                tracing::info!(client_ca = path, "verifying client certificates with the changed CA bundle");
                self.rebuild();
            }
            Err(error) => {
                self.metrics.reload_errors.inc();
                tracing::warn!(
                    client_ca = path,
                    error,
                    "cannot use the changed client CA bundle: keeping the previous one"
                );
            }
        }
    }

    fn rebuild(&self) {
        let verifier = self.client_ca.as_ref().map(|(_, verifier)| verifier.clone());
        match server_config(&self.provider, self.resolver.clone(), verifier) {
            Ok(config) => {
                self.configs.send_replace(config);
            }
            Err(error) => tracing::error!(error = chain(&error), "rebuilding the TLS configuration"),
        }
    }
}

/// Aborts its tasks when dropped, so they end with the listener that owns them.
struct Tasks(Vec<JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// A TCP listener that hands out connections once their TLS handshake is done, for
/// `axum::serve`. Handshakes run concurrently (a client that stalls holds up no other)
/// and are bounded in time; a failed one is counted, logged at debug and closed. Dropping
/// it stops accepting, abandons handshakes in progress and stops re-reading the files.
pub struct TlsListener {
    incoming: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local_addr: Option<SocketAddr>,
    /// `None` with a fixed rustls configuration ([`TlsListener::with_server_config`]).
    resolver: Option<Arc<CertResolver>>,
    _tasks: Tasks,
}

impl TlsListener {
    /// Starts accepting on `listener` with `config` (within a tokio runtime); a client that
    /// has not finished its handshake within `handshake_timeout` is dropped.
    pub fn new(
        listener: TcpListener,
        config: TlsConfig,
        handshake_timeout: Duration,
        metrics: TlsMetrics,
    ) -> Result<Self, TlsError> {
        let (configs, current) = watch::channel(config.server_config()?);
        let resolver = config.resolver.clone();
        let reloader = Reloader {
            provider: config.provider,
            resolver: config.resolver,
            cert_files: config.cert_files,
            client_ca: config.client_ca,
            interval: config.reload_interval,
            configs,
            metrics: metrics.clone(),
        };
        let mut listening = Self::accepting(listener, current, handshake_timeout, metrics);
        listening.resolver = Some(resolver);
        listening._tasks.0.push(tokio::spawn(reloader.run()));
        Ok(listening)
    }

    /// Starts accepting on `listener` with a rustls configuration the caller built and
    /// keeps up to date itself (e.g. unit-link's `node_identity::server_config`, whose verifier reads
    /// the unit's member keys at each handshake): no files, nothing re-read. Handshakes are
    /// bounded and counted as with [`TlsListener::new`].
    pub fn with_server_config(
        listener: TcpListener,
        config: Arc<ServerConfig>,
        handshake_timeout: Duration,
        metrics: TlsMetrics,
    ) -> Self {
        // the receiver keeps the value once the sender is gone: it is never replaced
        let (_, current) = watch::channel(config);
        Self::accepting(listener, current, handshake_timeout, metrics)
    }

    fn accepting(
        listener: TcpListener,
        configs: watch::Receiver<Arc<ServerConfig>>,
        handshake_timeout: Duration,
        metrics: TlsMetrics,
    ) -> Self {
        let local_addr = listener.local_addr().ok();
        let (ready, incoming) = mpsc::channel(64);
        let task = tokio::spawn(accept(listener, configs, handshake_timeout, ready, metrics));
        Self { incoming, local_addr, resolver: None, _tasks: Tasks(vec![task]) }
    }

    /// The resolver the handshakes take the certificate from; `None` for a listener built
    /// [`with_server_config`](TlsListener::with_server_config).
    pub fn resolver(&self) -> Option<Arc<CertResolver>> {
        self.resolver.clone()
    }
}

impl fmt::Debug for TlsListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsListener").field("local_addr", &self.local_addr).finish_non_exhaustive()
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.incoming.recv().await {
            Some(connection) => connection,
            // the accepting task is gone (it never returns on its own): nothing more comes
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.local_addr.ok_or_else(|| io::Error::other("the listener has no local address"))
    }
}

/// Accepts connections and runs their handshakes, each with the configuration current
/// when it was accepted, until `ready`'s receiver is gone.
async fn accept(
    listener: TcpListener,
    configs: watch::Receiver<Arc<ServerConfig>>,
    handshake_timeout: Duration,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
    metrics: TlsMetrics,
) {
    let mut handshakes = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((connection, peer)) if handshakes.len() < MAX_PENDING_HANDSHAKES => {
                    let acceptor = TlsAcceptor::from(configs.borrow().clone());
                    handshakes.spawn(handshake(acceptor, connection, peer, handshake_timeout, ready.clone(), metrics.clone()));
                }
                Ok((_, peer)) => {
                    metrics.handshake_errors.inc();
                    tracing::debug!(%peer, "too many TLS handshakes in progress: closing the connection");
                }
                Err(error) => accept_failed(error).await,
            },
            Some(_) = handshakes.join_next(), if !handshakes.is_empty() => {}
            _ = ready.closed() => return,
        }
    }
}

async fn handshake(
    acceptor: TlsAcceptor,
    connection: TcpStream,
    peer: SocketAddr,
    timeout: Duration,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
    metrics: TlsMetrics,
) {
    let mut connection = connection;
    crate::server::no_delay(&mut connection);
    match tokio::time::timeout(timeout, acceptor.accept(connection)).await {
        Ok(Ok(stream)) => {
            // the server stopped accepting in the meantime: the connection closes
            let _ = ready.send((stream, peer)).await;
        }
        Ok(Err(error)) => {
            metrics.handshake_errors.inc();
            tracing::debug!(%peer, %error, "TLS handshake failed");
        }
        Err(_) => {
            metrics.handshake_errors.inc();
            tracing::debug!(%peer, ?timeout, "TLS handshake timed out");
        }
    }
}

/// As axum's own listener: a connection that went away is nothing; anything else (out of
/// file descriptors) is logged and waited out for a second.
async fn accept_failed(error: io::Error) {
    if matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(%error, "accepting a connection");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgegrid_testing::tls::TestCa;

    #[test]
    fn pem_chains_and_key_kinds() {
        let ca = TestCa::new("pem-ca");
        let leaf = ca.server_cert(1);
        // leaf then CA: a chain
        let chain = format!("{}{}", leaf.cert_pem, ca.cert_pem());
        let key = certified_key_from_pem(chain.as_bytes(), leaf.key_pem.as_bytes()).unwrap();
        assert_eq!(key.cert, [leaf.cert_der.clone(), ca.cert_der()]);
        // one file holding both
        let both = format!("{}{}", leaf.key_pem, leaf.cert_pem);
        assert_eq!(
            certified_key_from_pem(both.as_bytes(), both.as_bytes()).unwrap().cert,
            std::slice::from_ref(&leaf.cert_der)
        );
        // SEC1 EC and PKCS#1 RSA as well as PKCS#8
        let sec1 = leaf.key_pem_sec1();
        assert!(sec1.starts_with("-----BEGIN EC PRIVATE KEY-----"), "{sec1}");
        certified_key_from_pem(leaf.cert_pem.as_bytes(), sec1.as_bytes()).unwrap();
        let rsa = ca.rsa_server_cert(2);
        let pkcs1 = rsa.key_pem_pkcs1();
        assert!(pkcs1.starts_with("-----BEGIN RSA PRIVATE KEY-----"), "{pkcs1}");
        certified_key_from_pem(rsa.cert_pem.as_bytes(), pkcs1.as_bytes()).unwrap();
        certified_key_from_pem(rsa.cert_pem.as_bytes(), rsa.key_pem.as_bytes()).unwrap();
    }

    #[test]
    fn unusable_pem_is_refused_with_the_reason() {
        let ca = TestCa::new("pem-ca");
        let (one, two) = (ca.server_cert(1), ca.server_cert(2));
        let error = |cert: &str, key: &str| certified_key_from_pem(cert.as_bytes(), key.as_bytes()).unwrap_err();
        assert!(matches!(error(&one.cert_pem, &two.key_pem), TlsError::KeyMismatch { .. }));
        assert!(matches!(error("", &one.key_pem), TlsError::NoCertificate { .. }));
        assert!(matches!(error(&one.key_pem, &one.key_pem), TlsError::NoCertificate { .. }));
        assert!(matches!(error(&one.cert_pem, &one.cert_pem), TlsError::NoPrivateKey { .. }));
        let truncated = &one.cert_pem[..one.cert_pem.len() / 2];
        assert!(matches!(error(truncated, &one.key_pem), TlsError::Pem { .. }), "{:?}", error(truncated, &one.key_pem));
        let garbage = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(
            matches!(error(garbage, &one.key_pem), TlsError::Certificate { .. }),
            "{:?}",
            error(garbage, &one.key_pem)
        );
        let bad_key = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        assert!(matches!(error(&one.cert_pem, bad_key), TlsError::PrivateKey { .. }));
        assert_eq!(
            chain(&error(&one.cert_pem, &one.cert_pem)),
            "no private key (PKCS#8, PKCS#1 RSA or SEC1 EC, unencrypted) in the private key PEM"
        );
    }

    #[test]
    fn a_resolver_keeps_its_certificate_when_given_a_mismatched_key() {
        let ca = TestCa::new("resolver-ca");
        let (one, two) = (ca.server_cert(1), ca.server_cert(2));
        let resolver = CertResolver::from_pem(one.cert_pem.as_bytes(), one.key_pem.as_bytes()).unwrap();
        let mismatched = CertifiedKey::new(
            vec![two.cert_der.clone()],
            provider()
                .key_provider
                .load_private_key(PrivateKeyDer::from_pem_slice(one.key_pem.as_bytes()).unwrap())
                .unwrap(),
        );
        assert!(matches!(resolver.set(mismatched), Err(TlsError::KeyMismatch { .. })));
        assert_eq!(resolver.current().cert, std::slice::from_ref(&one.cert_der));
        resolver.set_pem(two.cert_pem.as_bytes(), two.key_pem.as_bytes()).unwrap();
        assert_eq!(resolver.current().cert, std::slice::from_ref(&two.cert_der));
    }

    #[test]
    fn flags_go_together() {
        use clap::Parser;
        #[derive(clap::Parser, Debug)]
        struct Flags {
            #[command(flatten)]
            tls: TlsFlags,
        }
        assert_eq!(Flags::try_parse_from(["x"]).unwrap().tls, TlsFlags::default());
        assert_eq!(TlsFlags::default().config().unwrap().map(|_| ()), None);
        let both = Flags::try_parse_from(["x", "--tls-cert-file=c.pem", "--tls-private-key-file", "k.pem"]).unwrap();
        assert_eq!(
            (both.tls.tls_cert_file.as_deref(), both.tls.tls_private_key_file.as_deref()),
            (Some(Path::new("c.pem")), Some(Path::new("k.pem")))
        );
        for (given, missing) in [
            (["x", "--tls-cert-file=c.pem"].as_slice(), "--tls-private-key-file <TLS_PRIVATE_KEY_FILE>"),
            (["x", "--tls-private-key-file=k.pem"].as_slice(), "--tls-cert-file <TLS_CERT_FILE>"),
            (["x", "--client-ca-file=ca.pem"].as_slice(), "--tls-cert-file <TLS_CERT_FILE>"),
        ] {
            let error = Flags::try_parse_from(given).unwrap_err();
            assert_eq!(error.kind(), clap::error::ErrorKind::MissingRequiredArgument, "{given:?}");
            assert!(error.to_string().contains(missing), "{given:?}: {error}");
        }
        // built without clap
        let half = TlsFlags { tls_cert_file: Some("c.pem".into()), ..TlsFlags::default() };
        assert!(matches!(half.config(), Err(TlsError::Flags(_))));
    }
}
