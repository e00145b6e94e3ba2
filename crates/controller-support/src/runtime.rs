//! The runtime every edgegrid binary runs in, so its `main.rs` only parses its own flags,
//! builds its context and hands its work over: common flags, logging, the API clients
//! (each built from the one client configuration the runtime reads), the admin server,
//! optional leader election with the `<prefix>_leader` gauge, and shutdown on
//! SIGTERM/Ctrl-C with a bounded drain. It must never let a process outlive a
//! signal by more than the grace period (plus a few seconds), whatever state it is in.
//!
//! Exit status: 0 after a signal (even when the work had to be abandoned), an error (1)
//! when a held leader Lease was lost or the work stopped on its own.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::serve::ListenerExt;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::Error;
use crate::admin::{self, Admin, Readiness, ReadinessGate};
use crate::flags::{BindAddress, parse_duration};
use crate::leader::{self, LeaderFlags};
use crate::legacy_flags::LegacyFlags;
use crate::logging::{self, LogFormat};
use crate::metrics::{self, Register};
use crate::server::{self, ServerFlags, ServerLimits, ServerMetrics};
use crate::tls::{CertResolver, TlsConfig, TlsListener, TlsMetrics};

/// How long giving the leader Lease up may take once the work has stopped (the election
/// bounds its own release; this is the backstop).
const ELECTION_STOP_TIMEOUT: Duration = Duration::from_secs(3);
/// How long open admin connections may hold the process once everything else stopped.
const ADMIN_STOP_TIMEOUT: Duration = Duration::from_secs(1);

/// The flags every binary takes. The admin ports are the binary's defaults, e.g.
/// `RuntimeFlags<8081, 8080>`, so `--help` shows them. They default to every interface
/// (`:PORT`); with `LOOPBACK` (`RuntimeFlags<51006, 51007, true>`, for a per-node binary
/// only its own node calls) to `127.0.0.1:PORT`.
#[derive(clap::Args, Clone, Debug)]
pub struct RuntimeFlags<const HEALTH_PORT: u16, const METRICS_PORT: u16, const LOOPBACK: bool = false> {
    /// Kubeconfig file; without it the files in KUBECONFIG, else the in-cluster service
    /// account.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Address for /healthz and /readyz, and for the binary's own API if it serves one
    /// (`:PORT` = every interface).
    // not `default_value_t`: clap renders that once into a `static` shared by every
    // `RuntimeFlags<..>` of the process, so the first one parsed would set all defaults
    #[arg(long, default_value = default_address(HEALTH_PORT, LOOPBACK).to_string())]
    pub bind_address: BindAddress,
    /// Address for /metrics (may equal --bind-address).
    #[arg(long, default_value = default_address(METRICS_PORT, LOOPBACK).to_string())]
    pub metrics_bind_address: BindAddress,
    /// Log as text (coloured only on a terminal) or as one JSON object a line.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// The node this process runs on (default: the host name); with a random suffix it
    /// names this process in a leader Lease.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// How long in-flight work may take to finish after SIGTERM before the process exits
    /// anyway.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub shutdown_grace_period: Duration,
    /// Limits of every listener (timeouts, connections, requests in flight).
    #[command(flatten)]
    pub server: ServerFlags,
}

/// `port` on every interface, or on 127.0.0.1 only when `loopback`.
const fn default_address(port: u16, loopback: bool) -> BindAddress {
    if loopback {
        BindAddress::Socket(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)))
    } else {
        BindAddress::AllInterfaces { port }
    }
}

/// The client configuration from `kubeconfig` when given, else from the files in
/// `KUBECONFIG`, else from the in-cluster service account (never `~/.kube/config`: a pod
/// must not pick up whatever a developer left there). Read once per process, by
/// [`Builder::load_config`] or [`Builder::build`]: two reads could disagree (a rotated
/// file, a changed context), and a binary's clients must all talk to one cluster as one user.
async fn read_config(kubeconfig: Option<PathBuf>) -> Result<kube::Config, Error> {
    let kubeconfig = match kubeconfig {
        Some(path) => Some(
            Kubeconfig::read_from(&path)
                .map_err(|source| Error::Kubeconfig { from: path.display().to_string(), source })?,
        ),
        None => Kubeconfig::from_env().map_err(|source| Error::Kubeconfig { from: "KUBECONFIG".into(), source })?,
    };
    match kubeconfig {
        Some(kubeconfig) => kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|source| Error::Kubeconfig { from: "the kubeconfig's current context".into(), source }),
        None => kube::Config::incluster().map_err(Error::InCluster),
    }
}

/// `config` for a client that reports a refused request (429, 503, 504) at once instead
/// of retrying it within the request, as kube's client does for as long as the API server
/// stays away: for work whose own backoff, metrics and next period decide (watches that
/// must notice an outage, writes recomputed from what is observed next).
pub fn without_retries(mut config: kube::Config) -> kube::Config {
    config.default_retry = false;
    config
}

/// The service a [`Runtime::client_through`] layer wraps: kube's own stack for the
/// configuration (kube's `GenericService`, which kube does not export by name).
pub type ClientStack = tower::util::BoxService<
    axum::http::Request<kube::client::Body>,
    axum::http::Response<Box<kube::client::DynBody>>,
    tower::BoxError,
>;

/// Whether a [`Runtime::client_through`] client retries refused requests within the
/// request (kube's default, as [`Runtime::client`]) or reports them at once
/// ([`without_retries`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retries {
    Kept,
    Off,
}

/// What a [`Runtime::client_through`] client changes in the runtime's configuration. A
/// [`Retries`] alone is these options with no read timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientOptions {
    pub retries: Retries,
    /// How long a response (a watch's stream included) may send nothing before the request
    /// fails; counted from the request's last write, not from when its pooled connection
    /// went idle. `None`: kube's default, no limit. Why a binary sets one: a connection
    /// that hangs silently (a path that drops packets rather than resetting) otherwise
    /// keeps a watch "open" and its view old for as long as kube's watch idle timeout
    /// (295 s), with no error for the binary to see.
    pub read_timeout: Option<Duration>,
}

impl From<Retries> for ClientOptions {
    fn from(retries: Retries) -> Self {
        Self { retries, read_timeout: None }
    }
}

impl ClientOptions {
    /// `config` as these options have it (for a client built outside a runtime: tests,
    /// benches).
    pub fn apply(self, config: kube::Config) -> kube::Config {
        let mut config = match self.retries {
            Retries::Kept => config,
            Retries::Off => without_retries(config),
        };
        if let Some(timeout) = self.read_timeout {
            config.read_timeout = Some(timeout);
            config.reset_reader_on_write = true;
        }
        config
    }
}

/// The node name given, else the host name.
pub fn node_name(given: Option<&str>) -> String {
    given
        .map(str::to_string)
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_string()))
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// `<node name>_<random>`, as client-go names leader candidates: unique per process, so two
/// replicas on one host (or sharing `--node-name`) never both believe they hold the Lease.
pub fn identity(node_name: &str) -> String {
    format!("{node_name}_{}", random_suffix())
}

fn random_suffix() -> String {
    if let Ok(uuid) = std::fs::read_to_string("/proc/sys/kernel/random/uuid") {
        let uuid = uuid.trim();
        if !uuid.is_empty() {
            return uuid.to_string();
        }
    }
    // no procfs: std's per-process random hash keys, mixed with the pid and the time
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher
        .write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    format!("{:016x}", hasher.finish())
}

/// Resolves once shutdown has begun (a signal, or a lost leader Lease); what the work
/// watches to stop.
#[derive(Clone, Debug)]
pub struct ShutdownSignal(watch::Receiver<bool>);

/// A signal that fires when `stop` turns true (e.g. a test's own channel).
impl From<watch::Receiver<bool>> for ShutdownSignal {
    fn from(stop: watch::Receiver<bool>) -> Self {
        Self(stop)
    }
}

impl ShutdownSignal {
    pub fn is_signalled(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves when shutdown begins (at once if it has).
    pub async fn signalled(mut self) {
        // a dropped sender means the runtime is gone: stop as well
        let _ = self.0.wait_for(|stop| *stop).await;
    }

    /// The same signal as a watch channel (`true` once shutdown began).
    pub fn receiver(&self) -> watch::Receiver<bool> {
        self.0.clone()
    }
}

/// Sets up a [`Runtime`]; see [`Runtime::builder`].
pub struct Builder {
    name: String,
    kubeconfig: Option<PathBuf>,
    /// Read from `kubeconfig` by [`load_config`](Self::load_config) when the binary needs
    /// it before [`build`](Self::build), else by `build`.
    config: Option<kube::Config>,
    admin_addresses: [BindAddress; 2],
    log_format: LogFormat,
    node_name: String,
    grace_period: Duration,
    registry: Registry,
    leader: Option<LeaderFlags>,
    routes: Option<Router>,
    metrics_routes: Option<Router>,
    tls: Option<TlsConfig>,
    server_limits: ServerLimits,
    legacy: Option<LegacyFlags>,
}

impl Builder {
    /// The SuperEdge flags the command line held ([`crate::legacy_flags`]): logged once as
    /// deprecated as soon as logging is set up, and `--v`'s level is the default log filter.
    pub fn legacy_flags(mut self, legacy: LegacyFlags) -> Self {
        self.legacy = Some(legacy);
        self
    }

    /// The largest request body the binary's routes accept (413 above; default
    /// [`server::DEFAULT_MAX_REQUEST_BODY_BYTES`]). With `--max-requests-inflight` it bounds
    /// the memory request bodies take.
    pub fn max_request_body_bytes(mut self, bytes: usize) -> Self {
        self.server_limits.max_request_body_bytes = bytes;
        self
    }

    /// Serve `metrics` on `/metrics`, prefixed with the binary's name (as the runtime's
    /// own: the leader gauge, the listeners' and TLS counters). Called again, adds more.
    pub fn metrics(mut self, metrics: &dyn Register) -> Self {
        metrics.register(&mut self.registry);
        self
    }

    /// Take part in leader election on Lease `<namespace>/<name>` (name defaulting to the
    /// binary's), or lead at once with `--leader-elect=false`. Either way `<prefix>_leader`
    /// says whether this process leads. Binaries that never elect skip this.
    pub fn leader_election(mut self, flags: &LeaderFlags) -> Self {
        self.leader = Some(flags.clone());
        self
    }

    /// Serve the binary's own `routes` on the `--bind-address` listener, next to the admin
    /// endpoints, from [`build`](Self::build) on. `/healthz`, `/readyz` and `/metrics` stay
    /// the admin server's, whatever `routes` holds (see [`admin::with_routes`]); a fallback
    /// of `routes` gets every other path. A separate `--metrics-bind-address` listener
    /// serves the admin endpoints only; with both flags the same address, the one listener
    /// serves everything. The routes keep serving through the shutdown drain and stop
    /// with the admin server once [`Runtime::run`] has stopped the work (open connections,
    /// such as long watches, are waited for one second at most). Called again,
    /// the routers are merged with [`Router::merge`] (which panics on a path both define
    /// or on two fallbacks).
    pub fn routes(mut self, routes: Router) -> Self {
        self.routes = Some(match self.routes.take() {
            Some(earlier) => earlier.merge(routes),
            None => routes,
        });
        self
    }

    /// Serve `routes` on a separate `--metrics-bind-address` listener too, next to the admin
    /// endpoints (which take precedence, as for [`routes`](Self::routes)): read-only
    /// diagnostics a binary whose `--bind-address` is loopback-only must also offer where
    /// the metrics are scraped, e.g. through the API server's pod proxy. When both flags
    /// name one address, that listener serves [`routes`](Self::routes) only: the binary's
    /// routes are expected to hold these already.
    pub fn metrics_routes(mut self, routes: Router) -> Self {
        self.metrics_routes = Some(routes);
        self
    }

    /// Serve the `--bind-address` listener (the binary's routes, `/healthz`, `/readyz`,
    /// and `/metrics` when `--metrics-bind-address` is the same address) over HTTPS with
    /// `tls`; `None` keeps it plain HTTP. A separate `--metrics-bind-address` listener stays
    /// plain HTTP. The certificate is re-read as [`TlsConfig`] says and can be replaced
    /// through [`Runtime::tls_resolver`]; `<prefix>_tls_reloads_total`,
    /// `<prefix>_tls_reload_errors_total` and `<prefix>_tls_handshake_errors_total` join
    /// the registry.
    pub fn tls(mut self, tls: Option<TlsConfig>) -> Self {
        self.tls = tls;
        self
    }

    /// The client configuration every client of the runtime will be built from, read now
    /// (once: [`build`](Self::build) keeps it), for what the binary must set up before the
    /// runtime is built with it, e.g. routes that pass requests on to the API server with
    /// the binary's own credentials. After `build`: [`Runtime::config`].
    pub async fn load_config(&mut self) -> Result<kube::Config, Error> {
        if self.config.is_none() {
            self.config = Some(read_config(self.kubeconfig.clone()).await?);
        }
        Ok(self.config.clone().expect("read above"))
    }

    /// Starts logging, reads the client configuration (unless
    /// [`load_config`](Self::load_config) did), builds the client, binds and serves the
    /// admin server (and the binary's routes) and starts the election. Nothing the binary
    /// does runs yet.
    pub async fn build(mut self) -> Result<Runtime, Error> {
        let default_filter = self.legacy.as_ref().and_then(LegacyFlags::default_log_filter).unwrap_or("info");
        if let Err(error) = logging::init_with_default(self.log_format, default_filter) {
            tracing::debug!(%error, "logging was set up before this runtime");
        }
        if let Some(legacy) = &self.legacy {
            legacy.log();
        }
        // early, so a SIGTERM during start-up is not fatal before the handler is in place
        let signals = Signals::install()?;
        let config = self.load_config().await?;
        let client = Client::try_from(config.clone()).map_err(Error::Client)?;
        let registry = Arc::new(Mutex::new(self.registry));
        let election_config = match &self.leader {
            Some(flags) => flags.config(&self.name, identity(&self.node_name))?,
            None => None,
        };
        let identity = election_config.as_ref().map(|config| config.identity.clone());

        let [bind_address, _] = self.admin_addresses;
        let listeners = admin::bind(&self.admin_addresses).await?;
        let readiness = Readiness::new();
        let started = readiness.gate("starting");
        let state = Admin { registry: registry.clone(), readiness: readiness.clone() };
        let mut routes = self.routes;
        let mut metrics_routes = self.metrics_routes;
        let mut tls = self.tls;
        let tls_resolver = tls.as_ref().map(TlsConfig::resolver);
        let tls_metrics = TlsMetrics::default();
        let server_metrics = ServerMetrics::default();
        {
            let mut registry = registry.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            server_metrics.register(&mut registry);
            if tls.is_some() {
                tls_metrics.register(&mut registry);
            }
        }
        let limits = self.server_limits;
        let (admin_stop, admin_stopped) = watch::channel(false);
        let mut admin = Vec::new();
        for (address, listener) in listeners {
            let app = match routes.take_if(|_| address == bind_address) {
                Some(routes) => admin::with_routes(state.clone(), routes),
                None => match metrics_routes.take_if(|_| address != bind_address) {
                    Some(routes) => admin::with_routes(state.clone(), routes),
                    None => admin::router(state.clone()),
                },
            };
            let (limits, metrics, stop) = (limits.clone(), server_metrics.clone(), admin_stopped.clone());
            admin.push(match tls.take_if(|_| address == bind_address) {
                Some(config) => {
                    let handshake_timeout = limits.flags.read_header_timeout;
                    let listener = TlsListener::new(listener, config, handshake_timeout, tls_metrics.clone())?;
                    server::serve(listener, app, limits, metrics, stop)
                }
                None => server::serve(listener.tap_io(server::no_delay), app, limits, metrics, stop),
            });
        }

        let (shutdown, _) = watch::channel(false);
        let (leadership_tx, leadership) = watch::channel(false);
        if self.leader.is_some() {
            let gauge = Gauge::<i64>::default();
            registry.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).register(
                "leader",
                "Whether this process leads (1) or stands by (0)",
                gauge.clone(),
            );
            tokio::spawn(mirror_leadership(leadership.clone(), gauge));
        }
        let (election, constant_leadership) = match election_config {
            Some(config) => {
                let (stop, stopped) = watch::channel(false);
                tracing::info!(identity = %config.identity, lease = %format!("{}/{}", config.namespace, config.name),
                    "standing for leader");
                let task = tokio::spawn(leader::run(client.clone(), config, leadership_tx, stopped));
                (Some(Election { stop, task }), None)
            }
            None => {
                // no election: this process acts on its own, for as long as it runs
                leadership_tx.send_replace(true);
                (None, Some(leadership_tx))
            }
        };
        Ok(Runtime {
            name: self.name,
            config,
            client,
            node_name: self.node_name,
            identity,
            readiness,
            started,
            registry,
            leadership,
            constant_leadership,
            election,
            shutdown,
            admin,
            admin_stop,
            tls_resolver,
            signals,
            grace_period: self.grace_period,
        }
        .started())
    }
}

async fn mirror_leadership(mut leadership: watch::Receiver<bool>, gauge: Gauge<i64>) {
    loop {
        gauge.set(i64::from(*leadership.borrow_and_update()));
        if leadership.changed().await.is_err() {
            gauge.set(0);
            return;
        }
    }
}

struct Election {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

struct Signals {
    terminate: Signal,
    interrupt: Signal,
}

impl Signals {
    fn install() -> Result<Self, Error> {
        Ok(Self {
            terminate: signal(SignalKind::terminate()).map_err(Error::Signals)?,
            interrupt: signal(SignalKind::interrupt()).map_err(Error::Signals)?,
        })
    }

    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.terminate.recv() => "SIGTERM",
            _ = self.interrupt.recv() => "SIGINT",
        }
    }
}

/// Why the work is being stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Signal(&'static str),
    LostLease,
    WorkEnded,
}

/// A running binary: its client and admin server are up, its election (if any) is running;
/// [`Runtime::run`] or [`Runtime::run_while_leading`] hands it the binary's work.
pub struct Runtime {
    name: String,
    config: kube::Config,
    client: Client,
    node_name: String,
    identity: Option<String>,
    readiness: Readiness,
    /// Opened by [`Runtime::mark_ready`].
    started: ReadinessGate,
    registry: Arc<Mutex<Registry>>,
    leadership: watch::Receiver<bool>,
    /// Holds `leadership` true for a process that does not elect.
    constant_leadership: Option<watch::Sender<bool>>,
    election: Option<Election>,
    shutdown: watch::Sender<bool>,
    admin: Vec<(SocketAddr, JoinHandle<()>)>,
    admin_stop: watch::Sender<bool>,
    /// Where the `--bind-address` listener's certificate comes from, when it serves HTTPS.
    tls_resolver: Option<Arc<CertResolver>>,
    signals: Signals,
    grace_period: Duration,
}

impl Runtime {
    /// `name` is the binary's: it names the leader Lease and the default metrics prefix.
    pub fn builder<const HEALTH_PORT: u16, const METRICS_PORT: u16, const LOOPBACK: bool>(
        name: &str,
        flags: &RuntimeFlags<HEALTH_PORT, METRICS_PORT, LOOPBACK>,
    ) -> Builder {
        Builder {
            name: name.to_string(),
            kubeconfig: flags.kubeconfig.clone(),
            config: None,
            admin_addresses: [flags.bind_address, flags.metrics_bind_address],
            log_format: flags.log_format,
            node_name: node_name(flags.node_name.as_deref()),
            grace_period: flags.shutdown_grace_period,
            registry: metrics::registry(name),
            leader: None,
            routes: None,
            metrics_routes: None,
            tls: None,
            server_limits: ServerLimits { flags: flags.server.clone(), ..ServerLimits::default() },
            legacy: None,
        }
    }

    fn started(self) -> Self {
        let addresses: Vec<String> = self.admin.iter().map(|(address, _)| address.to_string()).collect();
        let identity = self.identity.as_deref();
        let https = self.tls_resolver.is_some();
        tracing::info!(binary = %self.name, node = %self.node_name, identity, admin = ?addresses, https, "started");
        self
    }

    /// The client of [`config`](Self::config), with kube's retries (a refused request is
    /// retried within the call).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// A new client of [`config`](Self::config) whose requests and responses also pass
    /// through `layer`, outermost (e.g. one counting what a stream received), and that
    /// keeps kube's retries or reports a refused request at once, with or without a read
    /// timeout ([`ClientOptions`], or a [`Retries`] alone), so a binary that needs more of
    /// its client than [`client`](Self::client) still does not build one of its own. This
    /// is the one way to any other client: without a layer of its own a binary passes
    /// `&tower::layer::util::Identity::new()`.
    pub fn client_through<L, B>(&self, layer: &L, options: impl Into<ClientOptions>) -> Result<Client, Error>
    where
        L: tower::Layer<ClientStack>,
        L::Service: tower::Service<axum::http::Request<kube::client::Body>, Response = axum::http::Response<B>>
            + Send
            + 'static,
        <L::Service as tower::Service<axum::http::Request<kube::client::Body>>>::Future: Send + 'static,
        <L::Service as tower::Service<axum::http::Request<kube::client::Body>>>::Error: Into<tower::BoxError>,
        B: hyper::body::Body<Data = hyper::body::Bytes> + Send + 'static,
        B::Error: Into<tower::BoxError>,
    {
        let config = options.into().apply(self.config.clone());
        let stack = kube::client::ClientBuilder::try_from(config).map_err(Error::Client)?;
        Ok(stack.with_layer(layer).build())
    }

    /// The client configuration, read once (by [`Builder::load_config`] or
    /// [`Builder::build`]), that every client of the runtime is built from (e.g. to
    /// identify the cluster a saved state belongs to).
    pub fn config(&self) -> &kube::Config {
        &self.config
    }

    /// `--node-name`, else the host name.
    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    /// This process's name in the leader Lease, when it stands for leader.
    pub fn identity(&self) -> Option<&str> {
        self.identity.as_deref()
    }

    /// What `/readyz` answers: the binary adds a [`ReadinessGate`] for each thing it must have
    /// before it can do its job (`readiness().gate("the node watch has not listed yet")`)
    /// and opens it when it has; clones can be moved into its tasks. Once shutdown begins
    /// the answer is `not ready: shutting down`.
    pub fn readiness(&self) -> Readiness {
        self.readiness.clone()
    }

    /// The binary has started its work: ready once its own gates are open too (at once
    /// for a binary with nothing to warm up).
    pub fn mark_ready(&self) {
        self.started.open();
    }

    /// The registry `/metrics` serves.
    pub fn registry(&self) -> Arc<Mutex<Registry>> {
        self.registry.clone()
    }

    /// Whether this process leads: follows the election; always true with
    /// `--leader-elect=false` or when the binary does not elect.
    pub fn leadership(&self) -> watch::Receiver<bool> {
        self.leadership.clone()
    }

    pub fn shutdown_signal(&self) -> ShutdownSignal {
        ShutdownSignal(self.shutdown.subscribe())
    }

    /// The certificate the `--bind-address` listener serves, when it serves HTTPS: a
    /// binary that issues its own certificates sets new ones here
    /// ([`CertResolver::set`]); new connections get them at once.
    pub fn tls_resolver(&self) -> Option<Arc<CertResolver>> {
        self.tls_resolver.clone()
    }

    /// The admin server's bound addresses (e.g. to find a port 0): `--bind-address`'s
    /// first (where the binary's routes are served), then `--metrics-bind-address`'s when
    /// it differs.
    pub fn admin_addresses(&self) -> Vec<SocketAddr> {
        self.admin.iter().map(|(address, _)| *address).collect()
    }

    /// Runs `work` until a signal (or, when electing, the loss of a held Lease); then
    /// signals [`ShutdownSignal`], gives the work the grace period to finish (none after a
    /// lost Lease), releases the Lease and stops the admin server. A second signal abandons
    /// the work at once.
    pub async fn run<W>(mut self, work: W) -> Result<(), Error>
    where
        W: Future<Output = ()> + Send + 'static,
    {
        let mut work = tokio::spawn(work);
        let mut leadership = self.leadership.clone();
        let stop = tokio::select! {
            signal = self.signals.next() => Stop::Signal(signal),
            _ = lost_leadership(&mut leadership) => Stop::LostLease,
            _ = &mut work => Stop::WorkEnded,
        };
        match stop {
            Stop::Signal(signal) => tracing::info!(signal, "shutting down"),
            Stop::LostLease => tracing::error!("lost the leader lease: shutting down"),
            Stop::WorkEnded => tracing::error!("the work stopped on its own: shutting down"),
        }
        self.readiness.shutting_down();
        self.shutdown.send_replace(true);

        if let Stop::Signal(_) = stop {
            tokio::select! {
                finished = tokio::time::timeout(self.grace_period, &mut work) => {
                    if finished.is_err() {
                        tracing::warn!(grace_period = ?self.grace_period, "work did not stop in time: abandoning it");
                    }
                }
                signal = self.signals.next() => tracing::warn!(signal, "second signal: abandoning the work"),
            }
        }
        // after a lost Lease another process may already lead: no drain, stop at once
        work.abort();
        // the Lease is held while the work drains, so no new leader overlaps with it
        if let Some(election) = self.election.take() {
            election.stop.send_replace(true);
            let mut task = election.task;
            if tokio::time::timeout(ELECTION_STOP_TIMEOUT, &mut task).await.is_err() {
                tracing::warn!("leader election did not stop in time");
                task.abort();
            }
        }
        self.admin_stop.send_replace(true);
        for (address, mut server) in std::mem::take(&mut self.admin) {
            if tokio::time::timeout(ADMIN_STOP_TIMEOUT, &mut server).await.is_err() {
                tracing::debug!(%address, "closing admin connections");
                server.abort();
            }
        }
        drop(self.constant_leadership.take());
        match stop {
            Stop::Signal(_) => Ok(()),
            Stop::LostLease => Err(Error::LostLease),
            Stop::WorkEnded => Err(Error::WorkEnded),
        }
    }

    /// Like [`Runtime::run`], but starts the work only once this process leads (at once
    /// with `--leader-elect=false`); a standby only waits. Losing the Lease stops the work
    /// and the process exits 1, to come back as a standby with fresh state.
    pub async fn run_while_leading<F, W>(self, work: F) -> Result<(), Error>
    where
        F: FnOnce(ShutdownSignal) -> W + Send + 'static,
        W: Future<Output = ()> + Send + 'static,
    {
        let mut leadership = self.leadership();
        let shutdown = self.shutdown_signal();
        self.run(async move {
            let elected = tokio::select! {
                elected = leadership.wait_for(|leading| *leading) => elected.is_ok(),
                _ = shutdown.clone().signalled() => false,
            };
            // not elected: shutdown began while standing by, nothing to drain
            if elected {
                tracing::info!("leading: starting the work");
                work(shutdown).await;
            }
        })
        .await
    }
}

/// Resolves when a held leadership ends (or its election is gone while holding it).
async fn lost_leadership(leadership: &mut watch::Receiver<bool>) {
    if leadership.wait_for(|leading| *leading).await.is_err() {
        return std::future::pending().await;
    }
    let _ = leadership.wait_for(|leading| !*leading).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgegrid_testing::{KubeconfigFile, http_get, unreachable_url};

    #[test]
    fn identities_are_unique_per_process_and_name_the_node() {
        let (a, b) = (identity("node-1"), identity("node-1"));
        assert_ne!(a, b);
        assert!(a.starts_with("node-1_") && a.len() > "node-1_".len() + 8, "{a}");
    }

    #[test]
    fn client_options_change_only_what_they_name() {
        let base = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        assert!(base.default_retry && base.read_timeout.is_none() && !base.reset_reader_on_write);
        let kept = ClientOptions::from(Retries::Kept).apply(base.clone());
        assert!(kept.default_retry && kept.read_timeout.is_none() && !kept.reset_reader_on_write);
        let off = ClientOptions::from(Retries::Off).apply(base.clone());
        assert!(!off.default_retry && off.read_timeout.is_none() && !off.reset_reader_on_write);
        let timed = ClientOptions { retries: Retries::Kept, read_timeout: Some(Duration::from_secs(7)) }.apply(base);
        assert!(timed.default_retry);
        assert_eq!(timed.read_timeout, Some(Duration::from_secs(7)));
        // counted from the request, not from when its pooled connection went idle
        assert!(timed.reset_reader_on_write);
    }

    #[test]
    fn node_name_defaults_to_the_host_name() {
        assert_eq!(node_name(Some("edge-1")), "edge-1");
        assert!(!node_name(None).is_empty());
    }

    #[test]
    fn flags_take_go_forms() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Flags {
            #[command(flatten)]
            runtime: RuntimeFlags<8081, 8080>,
            #[command(flatten)]
            leader: LeaderFlags,
        }
        let defaults = Flags::try_parse_from(["x"]).unwrap();
        assert_eq!(defaults.runtime.bind_address, BindAddress::AllInterfaces { port: 8081 });
        assert_eq!(defaults.runtime.metrics_bind_address, BindAddress::AllInterfaces { port: 8080 });
        assert_eq!(defaults.runtime.log_format, LogFormat::Text);
        assert_eq!(defaults.runtime.shutdown_grace_period, Duration::from_secs(10));
        assert!(defaults.leader.leader_elect);
        assert_eq!(
            (
                defaults.leader.leader_elect_lease_duration,
                defaults.leader.leader_elect_renew_deadline,
                defaults.leader.leader_elect_retry_period
            ),
            (Duration::from_secs(15), Duration::from_secs(10), Duration::from_secs(2))
        );

        let given = Flags::try_parse_from([
            "x",
            "--bind-address",
            ":9000",
            "--metrics-bind-address=127.0.0.1:9001",
            "--log-format",
            "json",
            "--leader-elect",
            "--leader-elect-retry-period",
            "1.5s",
        ])
        .unwrap();
        assert_eq!(given.runtime.bind_address, BindAddress::AllInterfaces { port: 9000 });
        assert_eq!(given.runtime.metrics_bind_address, BindAddress::Socket("127.0.0.1:9001".parse().unwrap()));
        assert_eq!(given.runtime.log_format, LogFormat::Json);
        assert!(given.leader.leader_elect, "bare --leader-elect means true");
        assert_eq!(given.leader.leader_elect_retry_period, Duration::from_millis(1500));

        for off in [["x", "--leader-elect=false"].as_slice(), ["x", "--leader-elect", "false"].as_slice()] {
            assert!(!Flags::try_parse_from(off).unwrap().leader.leader_elect, "{off:?}");
        }
        assert!(Flags::try_parse_from(["x", "--leader-elect=yes"]).is_err());
        assert!(Flags::try_parse_from(["x", "--shutdown-grace-period", "10"]).is_err());
    }

    #[test]
    fn loopback_flags_default_to_127_0_0_1() {
        use clap::{CommandFactory, Parser};
        #[derive(clap::Parser)]
        struct Proxy {
            #[command(flatten)]
            runtime: RuntimeFlags<51006, 51007, true>,
        }
        #[derive(clap::Parser)]
        struct Controller {
            #[command(flatten)]
            runtime: RuntimeFlags<8081, 8080>,
        }
        Proxy::command().debug_assert();
        let defaults = Proxy::try_parse_from(["x"]).unwrap().runtime;
        assert_eq!(defaults.bind_address, BindAddress::Socket("127.0.0.1:51006".parse().unwrap()));
        assert_eq!(defaults.bind_address.to_string(), "127.0.0.1:51006");
        assert_eq!(defaults.metrics_bind_address.to_string(), "127.0.0.1:51007");
        let given = Proxy::try_parse_from(["x", "--bind-address", ":9000"]).unwrap().runtime;
        assert_eq!(given.bind_address, BindAddress::AllInterfaces { port: 9000 });

        let help = Proxy::command().render_long_help().to_string();
        let flag_help = |flag: &str| {
            let start = help.find(flag).unwrap_or_else(|| panic!("{flag} in {help}"));
            let rest = &help[start..];
            rest[..rest.find("\n\n").unwrap_or(rest.len())].split_whitespace().collect::<Vec<_>>().join(" ")
        };
        assert_eq!(
            flag_help("--bind-address"),
            "--bind-address <BIND_ADDRESS> Address for /healthz and /readyz, and for the binary's own API if it \
             serves one (`:PORT` = every interface) [default: 127.0.0.1:51006]"
        );
        assert_eq!(
            flag_help("--metrics-bind-address"),
            "--metrics-bind-address <METRICS_BIND_ADDRESS> Address for /metrics (may equal --bind-address) \
             [default: 127.0.0.1:51007]"
        );
        let help = Controller::command().render_long_help().to_string();
        assert!(help.contains("[default: :8081]") && help.contains("[default: :8080]"), "{help}");
    }

    #[tokio::test]
    async fn the_config_is_the_kubeconfigs() {
        let url = unreachable_url();
        let kubeconfig = KubeconfigFile::new(&url).unwrap();
        let config = read_config(Some(kubeconfig.path().to_path_buf())).await.unwrap();
        assert_eq!(config.cluster_url.to_string(), format!("{url}/"));
        let missing = config_error(kubeconfig.path().with_extension("missing")).await;
        assert!(matches!(missing, Error::Kubeconfig { .. }), "{missing:?}");
    }

    async fn config_error(path: PathBuf) -> Error {
        read_config(Some(path)).await.expect_err("an error")
    }

    #[tokio::test]
    async fn a_config_loaded_before_build_is_the_one_the_runtime_keeps() {
        let url = unreachable_url();
        let kubeconfig = KubeconfigFile::new(&url).unwrap();
        let mut builder = Runtime::builder("loaded-early", &local_flags(&kubeconfig, "127.0.0.1:0", "127.0.0.1:0"));
        let loaded = builder.load_config().await.unwrap();
        assert_eq!(loaded.cluster_url.to_string(), format!("{url}/"));
        // read once: neither a second load nor build reads the file again
        std::fs::remove_file(kubeconfig.path()).unwrap();
        assert_eq!(builder.load_config().await.unwrap().cluster_url, loaded.cluster_url);
        let runtime = builder.build().await.unwrap();
        assert_eq!(runtime.config().cluster_url, loaded.cluster_url);
    }

    fn local_flags(kubeconfig: &KubeconfigFile, bind: &str, metrics: &str) -> RuntimeFlags<0, 0> {
        RuntimeFlags {
            kubeconfig: Some(kubeconfig.path().to_path_buf()),
            bind_address: bind.parse().unwrap(),
            metrics_bind_address: metrics.parse().unwrap(),
            log_format: LogFormat::Text,
            node_name: Some("node-1".into()),
            shutdown_grace_period: Duration::from_secs(1),
            server: ServerFlags::default(),
        }
    }

    /// A proxy's routes: one of its own, another router's, and a fallback for every other
    /// path (which must not get the admin paths).
    async fn proxy(flags: &RuntimeFlags<0, 0>) -> Runtime {
        Runtime::builder("per-node-proxy", flags)
            .routes(Router::new().route("/api", axum::routing::get(|| async { "api" })))
            .routes(
                Router::new()
                    .route("/apis", axum::routing::get(|| async { "apis" }))
                    .fallback(|uri: axum::http::Uri| async move { format!("upstream {uri}") }),
            )
            .build()
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_client_through_a_layer_passes_each_request_through_it_and_retries_only_when_asked() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let server = fake_apiserver::FakeApiServer::start().await.unwrap();
        let kubeconfig = KubeconfigFile::new(&server.url()).unwrap();
        let runtime =
            Runtime::builder("layered", &local_flags(&kubeconfig, "127.0.0.1:0", "127.0.0.1:0")).build().await.unwrap();
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let layer = tower::util::MapRequestLayer::new({
            let seen = seen.clone();
            move |request: axum::http::Request<kube::client::Body>| {
                seen.lock().unwrap().push(request.uri().path().to_string());
                request
            }
        });
        let configmaps = "/api/v1/namespaces/default/configmaps";
        server.set_fault("configmaps", fake_apiserver::Fault::Error(503));

        let mark = server.requests().mark();
        let off = runtime.client_through(&layer, Retries::Off).unwrap();
        let refused = kube::Api::<ConfigMap>::default_namespaced(off).list(&Default::default()).await;
        assert!(matches!(refused, Err(kube::Error::Api(ref status)) if status.code == 503), "{refused:?}");
        let paths = |mark| server.requests().since(mark).into_iter().map(|r| r.path).collect::<Vec<_>>();
        assert_eq!(paths(mark), [configmaps], "one request, not retried");
        assert_eq!(*seen.lock().unwrap(), [configmaps]);

        // kept: the refused request is retried within the call, and the call succeeds once
        // the server answers again
        let mark = server.requests().mark();
        let kept = runtime.client_through(&layer, Retries::Kept).unwrap();
        let listing =
            tokio::spawn(
                async move { kube::Api::<ConfigMap>::default_namespaced(kept).list(&Default::default()).await },
            );
        while server.requests().since(mark).is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        server.clear_faults();
        assert!(listing.await.unwrap().is_ok());
        assert!(paths(mark).len() >= 2, "{:?}", paths(mark));
        assert_eq!(
            *seen.lock().unwrap(),
            [configmaps, configmaps],
            "the layer sees the call once, outside the retries"
        );
    }

    // no election: the runtime never calls the (unreachable) API server
    #[tokio::test]
    async fn the_binarys_routes_are_served_on_the_bind_address_only() {
        let url = unreachable_url();
        let kubeconfig = KubeconfigFile::new(&url).unwrap();
        let runtime = proxy(&local_flags(&kubeconfig, "127.0.0.1:0", "127.0.0.2:0")).await;
        let [api, metrics] = runtime.admin_addresses()[..] else { panic!("{:?}", runtime.admin_addresses()) };
        assert_eq!((api.ip(), metrics.ip()), ([127, 0, 0, 1].into(), [127, 0, 0, 2].into()), "--bind-address first");
        assert_eq!(runtime.config().cluster_url.to_string(), format!("{url}/"), "the client's configuration");
        runtime.mark_ready();

        assert_eq!(http_get(api, "/api").await, Some((200, "api".into())));
        assert_eq!(http_get(api, "/apis").await, Some((200, "apis".into())));
        assert_eq!(http_get(api, "/api/v1/pods").await, Some((200, "upstream /api/v1/pods".into())));
        assert_eq!(http_get(api, "/healthz").await, Some((200, "ok".into())));
        assert_eq!(http_get(api, "/readyz").await, Some((200, "ok".into())));
        assert_eq!(http_get(api, "/metrics").await.map(|(status, _)| status), Some(200));

        assert_eq!(http_get(metrics, "/api").await, Some((404, String::new())));
        assert_eq!(http_get(metrics, "/api/v1/pods").await, Some((404, String::new())));
        assert_eq!(http_get(metrics, "/healthz").await, Some((200, "ok".into())));
        assert_eq!(http_get(metrics, "/metrics").await.map(|(status, _)| status), Some(200));
    }

    #[tokio::test]
    async fn one_address_serves_the_binarys_routes_and_the_admin_endpoints() {
        let kubeconfig = KubeconfigFile::new(&unreachable_url()).unwrap();
        let runtime = proxy(&local_flags(&kubeconfig, "127.0.0.1:0", "127.0.0.1:0")).await;
        let [address] = runtime.admin_addresses()[..] else { panic!("{:?}", runtime.admin_addresses()) };
        assert_eq!(http_get(address, "/api").await, Some((200, "api".into())));
        assert_eq!(http_get(address, "/x").await, Some((200, "upstream /x".into())));
        assert_eq!(http_get(address, "/readyz").await, Some((503, "not ready: starting".into())));
        let (status, exposition) = http_get(address, "/metrics").await.unwrap();
        assert!(status == 200 && exposition.ends_with("# EOF\n"), "{status} {exposition}");
    }

    #[tokio::test]
    async fn a_readiness_note_reaches_readyz_and_shutdown_replaces_it() {
        let kubeconfig = KubeconfigFile::new(&unreachable_url()).unwrap();
        let runtime =
            Runtime::builder("noted", &local_flags(&kubeconfig, "127.0.0.1:0", "127.0.0.1:0")).build().await.unwrap();
        let admin = runtime.admin_addresses()[0];
        let readiness = runtime.readiness();
        assert_eq!(http_get(admin, "/readyz").await, Some((503, "not ready: starting".into())));
        let task = tokio::spawn({
            let readiness = readiness.clone();
            async move { readiness.gate("waiting for the first list") }
        });
        let listed = task.await.unwrap();
        runtime.mark_ready();
        assert_eq!(http_get(admin, "/readyz").await, Some((503, "not ready: waiting for the first list".into())));
        listed.open();
        readiness.set_note(Some("upstream reachable".into()));
        assert!(readiness.is_ready());
        assert_eq!(http_get(admin, "/readyz").await, Some((200, "ok: upstream reachable".into())));
        readiness.set_note(None);
        assert_eq!(http_get(admin, "/readyz").await, Some((200, "ok".into())));

        readiness.set_note(Some("upstream reachable".into()));
        // work that ends at once: shutdown begins, readiness drops and says why
        let result = runtime.run(async {}).await;
        assert!(matches!(result, Err(Error::WorkEnded)), "{result:?}");
        assert!(!readiness.is_ready());
        assert_eq!(
            readiness.answer(),
            (axum::http::StatusCode::SERVICE_UNAVAILABLE, "not ready: shutting down".into())
        );
    }
}
