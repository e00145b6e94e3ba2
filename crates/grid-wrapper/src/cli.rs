//! The grid wrapper's command line (SuperEdge's `--wrapper-in-cluster` among ours; its
//! other flags are translated by [`superedge::GRID_WRAPPER`]), and the configuration each
//! part takes from it.

pub mod superedge;

use std::path::PathBuf;
use std::time::Duration;

use controller_support::state_file::ClusterIdentity;
use controller_support::tls::TlsFlags;
use controller_support::{BindAddress, Cidr, NodeLocal, RuntimeFlags, parse_duration};
use listwatch::{LogConfig, WatchConfig};

use crate::WrapperConfig;
use crate::persist::Saver;
use crate::verdicts::VerdictsConfig;

#[derive(clap::Parser, Debug)]
#[command(
    version,
    about = "Serves kube-proxy the Services and endpoints of its node unit",
    after_help = controller_support::legacy_flags::HELP_NOTE
)]
pub struct Flags {
    #[command(flatten)]
    pub runtime: RuntimeFlags<51006, 51007, true>,
    /// Serve over HTTPS, optionally requiring client certificates (`--client-ca-file`),
    /// e.g. when clients reach the wrapper from outside the node.
    #[command(flatten)]
    pub tls: TlsFlags,
    /// Rewrite `default/kubernetes` Endpoints and EndpointSlices to the address in their
    /// `superedge.io/local-endpoint` and `superedge.io/local-port` annotations (SuperEdge's
    /// flag of the same name and default: an edge-local API server cache serves the node's
    /// pods). Only an annotated `default/kubernetes` is rewritten; `=false` turns it off.
    // Go's boolean syntax: `--wrapper-in-cluster`, `=true`, `=false`, never a separate value
    #[arg(long, default_value_t = true, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_parser = controller_support::legacy_flags::parse_go_bool, action = clap::ArgAction::Set)]
    wrapper_in_cluster: bool,
    /// Changes kept so watchers can resume; older versions get 410 and relist.
    #[arg(long, default_value_t = crate::DEFAULT_HISTORY)]
    history_size: usize,
    /// Changes buffered per watcher; a watcher further behind is cut off with 410.
    #[arg(long, default_value_t = crate::DEFAULT_WATCH_BUFFER)]
    watch_buffer: usize,
    /// How often watchers that allow bookmarks get one.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    bookmark_interval: Duration,
    /// Persist the served view here, and serve it after a restart while the upstream is
    /// unreachable.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// The saved view's size bound; a larger view is not saved (the previous file stays).
    #[arg(long, default_value_t = 64 * 1024 * 1024)]
    cache_max_bytes: usize,
    /// How often a changed view is saved.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    cache_sync_period: Duration,
    /// Service autonomy: the local edge-health daemon's verdicts URL (e.g.
    /// `http://127.0.0.1:51005/verdicts`). Endpoints on nodes the local unit votes down are
    /// not served while the verdict stands. Off when not given.
    #[arg(long)]
    edge_health_url: Option<http::Uri>,
    /// How often the verdicts are read.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    edge_health_poll_interval: Duration,
    /// Verdicts not refreshed for this long are forgotten (every node served again).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    edge_health_stale_after: Duration,
    /// Networks (CIDRs, comma-separated) whose clients may read `/debug/topology`, on
    /// either listener, besides this node's own processes over loopback (`kubectl
    /// port-forward` connects from the node itself). Others get 403. The metrics listener
    /// is on every address for Prometheus; list the control plane's addresses here to read
    /// the view through the API server's pod proxy. Default: none.
    #[arg(long, value_name = "CIDR", value_delimiter = ',')]
    debug_allowed_from: Vec<Cidr>,
    /// Share one upstream per node unit: the nodes sharing this label's value elect one
    /// wrapper that watches the cloud and serves the others over the site network (mutual
    /// TLS by the nodes' edge-health keys, which must run on the unit's nodes). Off when
    /// empty (every wrapper watches the cloud).
    #[arg(long, default_value = "")]
    unit_label_key: String,
    /// Where this wrapper serves its unit when it leads (every address by default: only
    /// clients proving a member's key get anything). Its port is the unit's: followers
    /// reach a leader at the host of its edge-health address and this port.
    #[arg(long, default_value = "0.0.0.0:51010")]
    unit_upstream_bind_address: std::net::SocketAddr,
    /// This node's edge-health key file (PKCS#8, written by edge-health): the wrapper's
    /// identity in its unit. Required with --unit-label-key.
    #[arg(long)]
    node_key_file: Option<PathBuf>,
    /// A leader silent this long is taken for gone (its bookmarks come every second; a
    /// leader that dies or restarts is noticed at once by its connections' reset).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    unit_upstream_read_timeout: Duration,
    /// How long a member whose link failed is passed over.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    unit_upstream_retry_after: Duration,
    /// How long a leader may answer "not synced" before it is passed over.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    unit_upstream_sync_timeout: Duration,
    /// Vouched sharing: the unit signer's public keys (base64 Ed25519, comma-separated;
    /// two while the key rotates; `unit-signer --print-public-key` prints one). A follower
    /// then serves only states of its leader's streams that the signer vouched for, so a
    /// compromised leader cannot feed its unit endpoints the cloud does not hold. Off when
    /// empty.
    #[arg(long, value_name = "BASE64", value_delimiter = ',', value_parser = parse_public_key)]
    unit_vouch_keys: Vec<[u8; 32]>,
    /// The namespace of the signer's ConfigMap `edgegrid-unit-digests`.
    #[arg(long, env = "POD_NAMESPACE", default_value = "kube-system")]
    unit_vouch_namespace: String,
    /// How long a follower holds a step of its leader's streams for the signer's batch, or
    /// serves a state no batch vouches for any more, before it passes the leader over (it
    /// serves its last vouched view meanwhile).
    // more than a round of the signer's per-unit refreshes (5 periods of 1 s)
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    unit_vouch_patience: Duration,
    /// How far a batch's signing time may be from this node's clock (older batches kept
    /// back by a leader are refused).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    unit_vouch_max_clock_skew: Duration,
    /// How long a state vouched for stays good after its batch was signed, by this node's
    /// clock (the signer names a unit's current state at least every 5 periods): a leader
    /// holding batches back gains nothing by serving them late. A node whose clock runs
    /// ahead of the signer's by this much takes batches that vouch for nothing, and
    /// watches the cloud.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    unit_vouch_window: Duration,
}

/// A base64 Ed25519 public key.
fn parse_public_key(text: &str) -> Result<[u8; 32], String> {
    use base64::Engine as _;
    let bytes =
        base64::engine::general_purpose::STANDARD.decode(text.trim()).map_err(|e| format!("not base64 ({e})"))?;
    bytes.try_into().map_err(|bytes: Vec<u8>| format!("{} bytes, not an Ed25519 public key's 32", bytes.len()))
}

/// Flags that would expose the wrapper's identity.
#[derive(Debug, thiserror::Error)]
#[error(
    "--bind-address {0} is reachable from other hosts: whoever reaches it reads and writes through the wrapper's \
     identity; bind a loopback address (the default) or require client certificates with --client-ca-file"
)]
pub struct ExposedBindAddress(BindAddress);

/// Flags that cannot work together.
#[derive(Debug, thiserror::Error)]
pub enum FlagError {
    #[error(transparent)]
    Exposed(#[from] ExposedBindAddress),
    #[error("--unit-label-key needs {0}")]
    UnitNeeds(&'static str),
}

impl Flags {
    /// Refuses a `--bind-address` other hosts can reach unless clients must present a
    /// certificate: the pass-through lends them the wrapper's credentials.
    pub fn check(&self) -> Result<(), FlagError> {
        if self.shares_upstream() && self.node_key_file.is_none() {
            return Err(FlagError::UnitNeeds("--node-key-file (this node's identity in its unit)"));
        }
        if self.shares_upstream() && self.edge_health_url.is_none() {
            return Err(FlagError::UnitNeeds(
                "--edge-health-url (the unit's members and their keys, as the local edge-health reads them)",
            ));
        }
        let loopback = match self.runtime.bind_address {
            BindAddress::Socket(address) => address.ip().is_loopback(),
            BindAddress::AllInterfaces { .. } => false,
        };
        match loopback || self.tls.client_ca_file.is_some() {
            true => Ok(()),
            false => Err(FlagError::Exposed(ExposedBindAddress(self.runtime.bind_address))),
        }
    }

    pub fn wrapper_config(&self) -> WrapperConfig {
        WrapperConfig {
            node_name: controller_support::runtime::node_name(self.runtime.node_name.as_deref()),
            rewrite_local_apiserver: self.wrapper_in_cluster,
            log: LogConfig { history_limit: self.history_size, watch_buffer: self.watch_buffer },
            watch: WatchConfig {
                bookmark_interval: self.bookmark_interval,
                default_timeout: crate::DEFAULT_WATCH_TIMEOUT,
            },
            cache_dir: self.cache_dir.clone(),
            unit_label_key: self.shares_upstream().then(|| self.unit_label_key.clone()),
        }
    }

    /// The saved view's settings, for the cluster `cluster` (the upstream's).
    pub fn saver(&self, cluster: ClusterIdentity) -> Saver {
        Saver { dir: self.cache_dir.clone(), limit: self.cache_max_bytes, period: self.cache_sync_period, cluster }
    }

    /// Who may read `/debug/topology` (see [`crate::server::debug_readers`]).
    pub fn debug_readers(&self) -> NodeLocal {
        crate::server::debug_readers(self.debug_allowed_from.clone())
    }

    /// Whether the unit shares one upstream (`--unit-label-key`).
    pub fn shares_upstream(&self) -> bool {
        !self.unit_label_key.is_empty()
    }

    /// How this wrapper joins its unit's shared upstream (`--unit-label-key`), its unit
    /// listener's metrics registered with `runtime`'s.
    pub fn joining(
        &self,
        served: unit_link::unit_server::UnitServerMetrics,
        runtime: &controller_support::Runtime,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Option<unit_link::unit::Joining> {
        use controller_support::metrics::Register as _;
        if !self.shares_upstream() {
            return None;
        }
        let (server_metrics, tls_metrics) =
            (controller_support::server::ServerMetrics::default(), controller_support::tls::TlsMetrics::default());
        {
            // `grid_wrapper_unit_http_*`, `grid_wrapper_unit_tls_*`: the listener's own
            let registry = runtime.registry();
            let mut registry = registry.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let unit = registry.sub_registry_with_prefix("unit");
            server_metrics.register(unit);
            tls_metrics.register(unit);
        }
        let label_key = self.unit_label_key.clone();
        let bind_address = self.unit_upstream_bind_address;
        let (port, read_timeout) = (bind_address.port(), self.unit_upstream_read_timeout);
        let (retry_after, sync_timeout) = (self.unit_upstream_retry_after, self.unit_upstream_sync_timeout);
        let log = LogConfig { history_limit: self.history_size, watch_buffer: self.watch_buffer };
        let vouch = self.vouch_config().map(|config| std::sync::Arc::new(unit_link::vouched::Vouching::new(config)));
        Some(unit_link::unit::Joining {
            key_file: self.node_key_file.clone().unwrap_or_default(),
            unit_config: Box::new(move |identity| unit_link::unit::UnitConfig {
                identity,
                label_key,
                port,
                unreachable_for: retry_after,
                not_ready_for: sync_timeout,
                read_timeout,
                connect_timeout: read_timeout.min(Duration::from_secs(2)),
                source: Some(bind_address.ip()).filter(|ip| !ip.is_unspecified()),
                log,
                vouch,
            }),
            address: self.unit_upstream_bind_address,
            // a new leader holds its followers' relists for its first sync, for less than
            // their read timeout (or they would take it for dead)
            serve: unit_link::unit_server::ServeConfig {
                sync_wait: read_timeout.mul_f64(0.6),
                ..unit_link::unit_server::UNIT_SERVE
            },
            limits: controller_support::server::ServerLimits {
                flags: self.runtime.server.clone(),
                ..Default::default()
            },
            server_metrics,
            tls_metrics,
            served,
            stop,
        })
    }

    /// Vouched sharing's configuration, when `--unit-vouch-keys` are given.
    pub fn vouch_config(&self) -> Option<unit_link::vouched::VouchConfig> {
        (!self.unit_vouch_keys.is_empty()).then(|| unit_link::vouched::VouchConfig {
            namespace: self.unit_vouch_namespace.clone(),
            voucher: edgegrid_core::vouch::VoucherConfig {
                keys: self.unit_vouch_keys.clone(),
                max_skew: self.unit_vouch_max_clock_skew,
                window: self.unit_vouch_window,
            },
            patience: self.unit_vouch_patience,
        })
    }

    /// Service autonomy's configuration, when `--edge-health-url` is given.
    pub fn verdicts(&self) -> Option<VerdictsConfig> {
        self.edge_health_url.clone().map(|url| VerdictsConfig {
            url,
            interval: self.edge_health_poll_interval,
            stale_after: self.edge_health_stale_after,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn check(args: &[&str]) -> Result<(), String> {
        let flags = Flags::try_parse_from([&["grid-wrapper"], args].concat()).expect("flags parse");
        flags.check().map_err(|error| error.to_string())
    }

    fn rewrites(args: &[&str]) -> Result<bool, String> {
        Flags::try_parse_from([&["grid-wrapper"], args].concat())
            .map(|flags| flags.wrapper_config().rewrite_local_apiserver)
            .map_err(|error| error.to_string())
    }

    /// SuperEdge's default: the local API server rewrite is on unless turned off.
    #[test]
    fn wrapper_in_cluster_is_on_by_default_and_takes_go_booleans() {
        assert_eq!(rewrites(&[]), Ok(true));
        assert_eq!(rewrites(&["--wrapper-in-cluster"]), Ok(true));
        assert_eq!(rewrites(&["--wrapper-in-cluster=true"]), Ok(true));
        assert_eq!(rewrites(&["--wrapper-in-cluster=false"]), Ok(false));
        assert_eq!(rewrites(&["--wrapper-in-cluster=0"]), Ok(false));
        assert_eq!(rewrites(&["--wrapper-in-cluster=T"]), Ok(true));
        assert!(rewrites(&["--wrapper-in-cluster=maybe"]).is_err());
        // a Go boolean flag never takes a separate value
        assert!(rewrites(&["--wrapper-in-cluster", "false"]).is_err());
    }

    #[test]
    fn superedge_flags_reach_our_configuration() {
        use super::superedge::GRID_WRAPPER;
        use controller_support::legacy_flags::try_parse_from;
        let args = [
            "grid-wrapper",
            "--hostname=edge-1",
            "--notify-channel-size=77",
            "--wrapper-in-cluster=false",
            "--service-autonomy-enhancement=enabled=true,interval=7",
        ];
        let (flags, legacy) = try_parse_from::<Flags, _, _>(&GRID_WRAPPER, args).unwrap();
        let config = flags.wrapper_config();
        assert_eq!((config.node_name.as_str(), config.log.watch_buffer), ("edge-1", 77));
        assert!(!config.rewrite_local_apiserver);
        let verdicts = flags.verdicts().expect("service autonomy on");
        assert_eq!(verdicts.url.to_string(), "http://localhost:51005/verdicts");
        assert_eq!(verdicts.interval, Duration::from_secs(7));
        assert_eq!(legacy.deprecations().len(), 3);
    }

    #[test]
    fn a_bind_address_other_hosts_reach_needs_client_certificates() {
        assert_eq!(check(&[]), Ok(()), "the default is 127.0.0.1:51006");
        assert_eq!(check(&["--bind-address", "127.100.1.1:51006"]), Ok(()));
        assert_eq!(check(&["--bind-address", "[::1]:51006"]), Ok(()));
        let exposed = check(&["--bind-address", "0.0.0.0:51006"]).unwrap_err();
        assert!(exposed.starts_with("--bind-address 0.0.0.0:51006 is reachable from other hosts"), "{exposed}");
        assert!(check(&["--bind-address", ":51006"]).is_err());
        assert!(check(&["--bind-address", "10.0.0.5:51006"]).is_err());
        let with_ca = [
            "--bind-address",
            "10.0.0.5:51006",
            "--tls-cert-file",
            "/c",
            "--tls-private-key-file",
            "/k",
            "--client-ca-file",
            "/ca",
        ];
        assert_eq!(check(&with_ca), Ok(()));
    }
}
