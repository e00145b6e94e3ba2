//! The binary's flags and their validation into [`Settings`], before anything starts.
//!
//! Every number given is the number used (SuperEdge parsed its numeric flags and then
//! overwrote them with defaults); a configuration that cannot work (no check, a check
//! that cannot finish within the period, no address peers could reach) is a start-up
//! error naming the flag, not a daemon that votes everyone unhealthy. SuperEdge's flags are
//! translated into these first ([`superedge`]).

pub mod superedge;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use controller_support::{BindAddress, RuntimeFlags, parse_duration};
use edgegrid_prober::TlsVerification;

use super::kubelet_credential::{KubeletCredential, RequestedToken};
use crate::config::{CheckConfig, CheckKind, CheckSpec, ConfigError, KUBELET_HEALTHZ_PATH, ProtocolConfig};
use crate::membership::UnitSource;

/// Where a pod finds its own service-account token: the daemon's identity, which
/// `--token-file` may not name (a kubelet check sends its token to whoever answers at a
/// peer's address).
pub const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// The default --state-dir: where the chart mounts the node's hostPath.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/edge-health";

/// The signing key's file name in --state-dir.
pub const SIGNING_KEY_FILE_NAME: &str = "signing-key";

/// Every evaluation walks the assignments of the whole window; 1,000 periods of 10 s are
/// nearly three hours of ballots, far more than says anything about a node now.
pub const MAX_VOTE_WINDOW: u64 = 1000;

#[derive(clap::Parser, Debug)]
#[command(
    name = "edge-health",
    version,
    about = "Checks the nodes of this node's unit with its peers and votes on which are down",
    after_help = controller_support::legacy_flags::HELP_NOTE
)]
pub struct Flags {
    /// `--bind-address` serves the peer exchange (`POST /exchange`), `GET /verdicts`,
    /// `/healthz` and `/readyz` (SuperEdge's port 51005).
    #[command(flatten)]
    pub runtime: RuntimeFlags<51005, 51008>,
    /// The IP peers reach this daemon and run their checks at (published on this node's
    /// Node as `edgegrid.io/edge-health-address` = `<ip>:<--bind-address port>`). Default:
    /// the --bind-address IP, when it is a single address.
    #[arg(long, env = "POD_IP")]
    pub advertise_address: Option<IpAddr>,
    /// Units are the nodes sharing this node's value of this label key (a ServiceGrid's
    /// `gridUniqKey`). Without it: SuperEdge node units (`<unit>=nodeunits.superedge.io`
    /// labels, filtered by the `edge-health-config` ConfigMap in --namespace).
    #[arg(long, env = "EDGE_HEALTH_UNIT_LABEL_KEY")]
    pub unit_label_key: Option<String>,
    /// Namespace of the `edge-health-config` ConfigMap (node-units mode).
    #[arg(long, default_value = "kube-system")]
    pub namespace: String,
    /// The unit's HMAC-SHA256 key (a mounted Secret, at least 32 bytes, used as is); re-read
    /// when it changes. There is no default key.
    #[arg(long)]
    pub hmac_key_file: PathBuf,
    /// Where this daemon keeps what must outlive a restart on this node: its signing key,
    /// unless --signing-key-file names another place. Made (mode 0700) when absent. In a
    /// DaemonSet, a hostPath: a directory inside the container is lost with the pod, and
    /// the node then starts under a new key (which it publishes, as a re-imaged node does).
    #[arg(long, default_value = DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// This node's own Ed25519 key (PKCS#8), which signs its ballots: generated on first
    /// start (mode 0600) and kept, so on the node's disk. A re-imaged node makes a new one
    /// and publishes it on its Node; peers take it without a restart. Default:
    /// `signing-key` in --state-dir (SuperEdge's DaemonSet, which has no such flag, starts
    /// so).
    #[arg(long)]
    pub signing_key_file: Option<PathBuf>,
    /// A check run on each assigned peer, repeatable:
    /// `kind=<kubelet|http|https|tcp|grpc>,port=N,timeout=300ms[,retries=N][,weight=W]`
    /// `[,path=/healthz]` (http, https) `[,service=NAME]` (grpc) `[,ca-file=PEM]` (https,
    /// kubelet; otherwise the certificate is not verified, as kubelet's probes do; for
    /// kubelet the peer's certificate must also carry `CN=system:node:<peer node>` and a
    /// SAN of its address). `retries` defaults to 0 and `weight` to 1. A kubelet check
    /// passes on 2xx/3xx and on the kubelet's 401/403 (it is serving), and sends the token
    /// of --kubelet-check-service-account or --token-file, or none.
    /// (SuperEdge's `--kubeletauthplugin`, `--kubeletplugin` and `--pingplugin` are read as
    /// checks: see `edge_health::daemon::cli::superedge::EDGE_HEALTH`.)
    #[arg(long = "check", value_name = "CHECK", value_parser = parse_check)]
    pub checks: Vec<CheckSpec>,
    /// A peer passes when the weights of its passing checks reach this. Default: the sum
    /// of all weights (every check must pass).
    #[arg(long)]
    pub healthy_score: Option<f64>,
    /// Length of a check period; periods are aligned to the Unix epoch so all members
    /// agree on them (clocks must be synchronised to well within --max-clock-skew).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub period: Duration,
    /// `k`: peers each member probes per period (each member is probed by `k` others).
    #[arg(long, default_value_t = 3)]
    pub probes_per_period: usize,
    /// Members asked to probe a peer the direct check failed on before accusing it (0:
    /// accuse on the direct result).
    #[arg(long, default_value_t = 3)]
    pub indirect_helpers: usize,
    /// How long to wait for indirect probe answers.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub indirect_timeout: Duration,
    /// Periods a ballot counts for.
    #[arg(long, default_value_t = 3)]
    pub vote_window: u64,
    /// Largest tolerated difference between a message's timestamp and this node's clock.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub max_clock_skew: Duration,
    /// Further attempts to deliver a results message a peer did not take, and to get an
    /// indirect probe request answered (within the indirect timeout).
    #[arg(long, default_value_t = 1)]
    pub send_retries: u32,
    /// Relay rounds per period: how often this node passes on the ballots it learned
    /// (results travel by push gossip, not to every peer).
    #[arg(long, default_value_t = 8)]
    pub relay_rounds: u32,
    /// Peers each relay round is sent to.
    #[arg(long, default_value_t = 3)]
    pub relay_fanout: usize,
    /// In how many relay rounds each ballot is passed on.
    #[arg(long, default_value_t = 2)]
    pub relay_spread: u32,
    /// In a unit of exactly two members, let each member's ballot alone decide about the
    /// other. Off, nobody in a unit of two is protected (nor voted down): one peer is one
    /// voice, and a compromised partner would decide alone. Set it only where that risk is
    /// accepted; every daemon and the cloud's verdict writer must agree.
    #[arg(long)]
    pub allow_units_of_two: bool,
    /// Per attempt of sending one message to a peer (an indirect probe request's answer,
    /// which comes once the helper has run its own checks, is waited for until
    /// --indirect-timeout instead; connecting still gives up after this).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub message_timeout: Duration,
    /// `kind=kubelet` checks send the short-lived tokens of this ServiceAccount
    /// (`<namespace>/<name>`), asked for with the TokenRequest API (`create` on its
    /// `serviceaccounts/token`) and renewed in memory. It should be allowed nothing but
    /// `get nodes/healthz` (the chart's `edge-health-kubelet-check`): a peer's kubelet
    /// certificate can rarely be verified, so whoever answers at a peer's address gets it.
    #[arg(long, value_name = "NAMESPACE/NAME", conflicts_with = "token_file")]
    pub kubelet_check_service_account: Option<String>,
    /// Instead: a token file of your choice that `kind=kubelet` checks send (re-read each
    /// period: it may rotate); the same caution applies. Not this pod's own
    /// service-account token. Neither given: the checks send no token.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// How often --hmac-key-file is looked at for a new key.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub key_reload_interval: Duration,
    /// After a new key is loaded, how long frames under the key it replaced are still
    /// accepted: nodes see an updated Secret at different times (the kubelet's sync
    /// period plus its cache, a minute or two), and must not refuse each other meanwhile.
    /// 0: refuse the old key at once.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub key_rotation_overlap: Duration,
    /// Keeps the unit's Nodes (names, labels, addresses) in this file on the node, so a
    /// daemon restarted while the API server is unreachable still knows its peers (a
    /// hostPath such as /var/lib/edge-health/peers.json). Unset: no cache.
    #[arg(long)]
    pub peer_cache_file: Option<PathBuf>,
    /// Indirect probes this node runs for peers at once; more requests are declined (the
    /// requester asks its other helpers), so no member can make this node probe without
    /// bound.
    #[arg(long, default_value_t = 16)]
    pub max_concurrent_probe_requests: usize,
    /// Who writes the `nodeunhealth` verdicts. `edge`: the unit's members, one writer per
    /// verdict (SuperEdge's way; the daemon's identity must be allowed to annotate other
    /// Nodes). `cloud`: each daemon publishes only its own view on its own Node
    /// (`edgegrid.io/edge-health-unhealthy`) and the admission webhook's deployment writes
    /// the verdicts from the views (the chart's choice: then the daemon's identity writes
    /// nothing but its own Node).
    #[arg(long, value_enum, default_value_t = VerdictWriter::Edge)]
    pub verdict_writer: VerdictWriter,
    /// Networks (CIDRs, comma-separated) whose clients may read `GET /verdicts` besides
    /// this node's own processes over loopback (its grid wrapper). Others get 403: the
    /// listener is on the node's address for the peers' `/exchange`, and no other host
    /// needs this node's view. Default: none.
    #[arg(long, value_name = "CIDR", value_delimiter = ',')]
    pub verdicts_allowed_from: Vec<controller_support::Cidr>,
}

/// See [`Flags::verdict_writer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum VerdictWriter {
    Edge,
    Cloud,
}

/// The validated configuration the daemon runs with.
#[derive(Clone, Debug)]
pub struct Settings {
    pub node_name: String,
    /// The IP of this node's address annotation (and of its checks).
    pub advertise_ip: IpAddr,
    /// Where this daemon's own connections (exchanges, checks) come from: the address it
    /// binds when `--bind-address` names one, so its peers (and a firewall between them)
    /// see the address it is known by; otherwise the kernel's choice.
    pub source_ip: Option<IpAddr>,
    pub unit_source: UnitSource,
    pub namespace: String,
    pub key_file: PathBuf,
    pub signing_key_file: PathBuf,
    pub checks: CheckConfig,
    pub protocol: ProtocolConfig,
    pub message_timeout: Duration,
    /// What kubelet checks send (always [`KubeletCredential::None`] without one).
    pub kubelet_credential: KubeletCredential,
    pub key_reload_interval: Duration,
    pub key_rotation_overlap: Duration,
    pub peer_cache_file: Option<PathBuf>,
    pub max_concurrent_probe_requests: usize,
    pub verdict_writer: VerdictWriter,
}

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(
        "--advertise-address (or POD_IP) is required when --bind-address {0} listens on every address: peers need one to reach this node at"
    )]
    NoAdvertiseAddress(BindAddress),
    #[error("--advertise-address {0} is not an address peers can reach")]
    UnroutableAdvertiseAddress(IpAddr),
    #[error(
        "--message-timeout must be positive, and with --indirect-timeout (when helpers are asked) shorter than \
         --period ({period:?}): a probe's liveness challenge waits for it before helpers are asked; got {timeout:?}"
    )]
    MessageTimeout { timeout: Duration, period: Duration },
    #[error(
        "a probe can take {probe:?}, not less than --period ({period:?}): kubelet checks send a token, so they \
         run after the peer's liveness proof (--message-timeout x (--send-retries + 1)), then helpers are asked \
         (--indirect-timeout); shorten those or the checks' timeouts and retries, or lengthen the period"
    )]
    ProbeTooSlow { probe: Duration, period: Duration },
    #[error("--vote-window {0} is more periods than the {MAX_VOTE_WINDOW} a vote may span")]
    VoteWindow(u64),
    #[error("--key-reload-interval must be positive")]
    KeyReloadInterval,
    #[error("--max-concurrent-probe-requests must be at least 1")]
    MaxConcurrentProbeRequests,
    #[error("--unit-label-key must not be empty")]
    EmptyUnitLabelKey,
    #[error("--node-name (or NODE_NAME) must name this node")]
    NoNodeName,
    #[error(
        "--token-file {0} is this pod's own service-account token, which kubelet checks would send to whoever answers at a peer's address: use --kubelet-check-service-account"
    )]
    OwnTokenForKubeletChecks(PathBuf),
    #[error("--kubelet-check-service-account must be <namespace>/<name>, got {0:?}")]
    KubeletCheckServiceAccount(String),
}

impl Flags {
    /// Validates the flags; `node_name` is the runtime's (flag, else the host name).
    pub fn settings(&self, node_name: String) -> Result<Settings, SettingsError> {
        if node_name.is_empty() || node_name == "unknown" {
            return Err(SettingsError::NoNodeName);
        }
        let checks = self.checks.clone();
        let total: f64 = checks.iter().map(|c| c.weight).sum();
        let uses_kubelet = checks.iter().any(|c| matches!(c.kind, CheckKind::KubeletHealthz { .. }));
        let checks = CheckConfig::new(checks, self.healthy_score.unwrap_or(total))?;
        let protocol = ProtocolConfig {
            period: self.period,
            probes_per_period: self.probes_per_period,
            indirect_helpers: self.indirect_helpers,
            indirect_timeout: self.indirect_timeout,
            vote_window: self.vote_window,
            max_clock_skew: self.max_clock_skew,
            send_retries: self.send_retries,
            relay_rounds: self.relay_rounds,
            relay_fanout: self.relay_fanout,
            relay_spread: self.relay_spread,
            vote_rule: crate::vote::VoteRule { allow_units_of_two: self.allow_units_of_two },
        };
        protocol.validate(&checks)?;
        let indirect = if self.indirect_helpers > 0 { self.indirect_timeout } else { Duration::ZERO };
        if self.message_timeout.is_zero() || self.message_timeout.saturating_add(indirect) >= self.period {
            return Err(SettingsError::MessageTimeout { timeout: self.message_timeout, period: self.period });
        }
        if self.vote_window > MAX_VOTE_WINDOW {
            return Err(SettingsError::VoteWindow(self.vote_window));
        }
        if self.key_reload_interval.is_zero() {
            return Err(SettingsError::KeyReloadInterval);
        }
        if self.max_concurrent_probe_requests == 0 {
            return Err(SettingsError::MaxConcurrentProbeRequests);
        }
        let advertise_ip = match (self.advertise_address, self.runtime.bind_address) {
            (Some(ip), _) => ip,
            (None, BindAddress::Socket(addr)) if !addr.ip().is_unspecified() => addr.ip(),
            (None, bind) => return Err(SettingsError::NoAdvertiseAddress(bind)),
        };
        if advertise_ip.is_unspecified() || advertise_ip.is_multicast() {
            return Err(SettingsError::UnroutableAdvertiseAddress(advertise_ip));
        }
        let kubelet_credential = match (&self.kubelet_check_service_account, &self.token_file) {
            (_, Some(path)) if path == Path::new(SERVICE_ACCOUNT_TOKEN) => {
                return Err(SettingsError::OwnTokenForKubeletChecks(path.clone()));
            }
            (Some(account), _) => KubeletCredential::Requested(Arc::new(
                RequestedToken::parse(account)
                    .ok_or_else(|| SettingsError::KubeletCheckServiceAccount(account.clone()))?,
            )),
            (None, Some(path)) => KubeletCredential::File(path.clone()),
            (None, None) => KubeletCredential::None,
        };
        let kubelet_credential = if uses_kubelet { kubelet_credential } else { KubeletCredential::None };
        // without a token the proof runs alongside the checks and gets their time, which
        // the protocol's validation bounds; with one the checks wait for it
        if !matches!(kubelet_credential, KubeletCredential::None) {
            let proof = proof_time(&checks, self.message_timeout, self.send_retries, true);
            let probe = proof.saturating_add(checks.worst_case()).saturating_add(indirect);
            if probe >= self.period {
                return Err(SettingsError::ProbeTooSlow { probe, period: self.period });
            }
        }
        let unit_source = match &self.unit_label_key {
            Some(key) if key.is_empty() => return Err(SettingsError::EmptyUnitLabelKey),
            Some(key) => UnitSource::LabelKey(key.clone()),
            None => UnitSource::NodeUnits,
        };
        let source_ip = match self.runtime.bind_address {
            BindAddress::Socket(addr) if !addr.ip().is_unspecified() => Some(addr.ip()),
            _ => None,
        };
        Ok(Settings {
            node_name,
            advertise_ip,
            source_ip,
            unit_source,
            namespace: self.namespace.clone(),
            key_file: self.hmac_key_file.clone(),
            signing_key_file: self
                .signing_key_file
                .clone()
                .unwrap_or_else(|| self.state_dir.join(SIGNING_KEY_FILE_NAME)),
            checks,
            protocol,
            message_timeout: self.message_timeout,
            kubelet_credential,
            key_reload_interval: self.key_reload_interval,
            key_rotation_overlap: self.key_rotation_overlap,
            peer_cache_file: self.peer_cache_file.clone(),
            max_concurrent_probe_requests: self.max_concurrent_probe_requests,
            verdict_writer: self.verdict_writer,
        })
    }
}

impl Settings {
    /// The value of this node's address annotation once bound on `bound`.
    pub fn advertised(&self, bound: SocketAddr) -> SocketAddr {
        SocketAddr::new(self.advertise_ip, bound.port())
    }

    /// How long a liveness proof may be retried (see [`super::round::prove_alive`]).
    pub fn proof_time(&self, before_checks: bool) -> Duration {
        proof_time(&self.checks, self.message_timeout, self.protocol.send_retries, before_checks)
    }
}

/// How long a liveness proof may be retried: alongside the checks, as long as they may run;
/// before them (they send a token only to a peer that proved itself), `send_retries` more
/// attempts of `message_timeout`.
fn proof_time(checks: &CheckConfig, message_timeout: Duration, send_retries: u32, before_checks: bool) -> Duration {
    if before_checks { message_timeout.saturating_mul(send_retries.saturating_add(1)) } else { checks.worst_case() }
}

/// Parses one `--check`.
pub fn parse_check(text: &str) -> Result<CheckSpec, String> {
    let mut fields: Vec<(&str, &str)> = Vec::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').ok_or_else(|| format!("{pair:?} is not key=value"))?;
        let (key, value) = (key.trim(), value.trim());
        if fields.iter().any(|(k, _)| *k == key) {
            return Err(format!("{key} given twice"));
        }
        fields.push((key, value));
    }
    let take = |key: &str| fields.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
    let kind = take("kind").ok_or("kind is required (kubelet, http, https, tcp or grpc)")?;
    let allowed: &[&str] = match kind {
        "kubelet" => &["ca-file"],
        "http" => &["path"],
        "https" => &["path", "ca-file"],
        "tcp" => &[],
        "grpc" => &["service"],
        other => return Err(format!("unknown kind {other:?} (kubelet, http, https, tcp or grpc)")),
    };
    for (key, _) in &fields {
        if !["kind", "port", "timeout", "retries", "weight"].contains(key) && !allowed.contains(key) {
            return Err(format!("{key:?} does not apply to kind={kind}"));
        }
    }
    let port = take("port").ok_or("port is required")?;
    let port: u16 = port.parse().map_err(|_| format!("port {port:?} is not a port number"))?;
    let timeout = parse_duration(take("timeout").ok_or("timeout is required (e.g. timeout=1s)")?)?;
    let retries = match take("retries") {
        Some(r) => r.parse().map_err(|_| format!("retries {r:?} is not a whole number"))?,
        None => 0,
    };
    let weight = match take("weight") {
        Some(w) => w.parse().map_err(|_| format!("weight {w:?} is not a number"))?,
        None => 1.0,
    };
    let ca_bundle = match take("ca-file") {
        Some(path) => Some(std::fs::read(path).map_err(|e| format!("ca-file {path}: {e}"))?),
        None => None,
    };
    let tls = ca_bundle.clone().map_or(TlsVerification::InsecureSkipVerify, TlsVerification::CaBundle);
    let path = take("path").unwrap_or(KUBELET_HEALTHZ_PATH).to_string();
    let kind = match kind {
        "kubelet" => CheckKind::KubeletHealthz { port, ca_bundle },
        "http" => CheckKind::Http { https: false, port, path, tls },
        "https" => CheckKind::Http { https: true, port, path, tls },
        "tcp" => CheckKind::Tcp { port },
        _ => CheckKind::Grpc { port, service: take("service").map(str::to_string) },
    };
    Ok(CheckSpec { kind, timeout, retries, weight })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn flags(args: &[&str]) -> Flags {
        let mut all = vec![
            "edge-health",
            "--hmac-key-file",
            "/k",
            "--signing-key-file",
            "/s",
            "--advertise-address",
            "10.244.0.5",
        ];
        all.extend_from_slice(args);
        Flags::try_parse_from(all).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    fn settings(args: &[&str]) -> Result<Settings, SettingsError> {
        flags(args).settings("edge-1".into())
    }

    const HTTP: &str = "kind=http,port=8080,timeout=300ms";

    #[test]
    fn every_number_given_is_the_number_used() {
        let s = settings(&[
            "--check",
            "kind=http,port=8080,path=/ready,timeout=250ms,retries=2,weight=3",
            "--check",
            "kind=tcp,port=22,timeout=100ms,weight=0.5",
            "--healthy-score",
            "3.25",
            "--period",
            "7s",
            "--probes-per-period",
            "5",
            "--indirect-helpers",
            "4",
            "--indirect-timeout",
            "1500ms",
            "--vote-window",
            "6",
            "--max-clock-skew",
            "45s",
            "--send-retries",
            "3",
            "--relay-rounds",
            "5",
            "--relay-fanout",
            "2",
            "--relay-spread",
            "3",
            "--allow-units-of-two",
            "--message-timeout",
            "700ms",
            "--key-reload-interval",
            "9s",
            "--key-rotation-overlap",
            "90s",
            "--peer-cache-file",
            "/var/lib/edge-health/peers.json",
            "--max-concurrent-probe-requests",
            "4",
        ])
        .unwrap();
        assert_eq!(
            s.protocol,
            ProtocolConfig {
                period: Duration::from_secs(7),
                probes_per_period: 5,
                indirect_helpers: 4,
                indirect_timeout: Duration::from_millis(1500),
                vote_window: 6,
                max_clock_skew: Duration::from_secs(45),
                send_retries: 3,
                relay_rounds: 5,
                relay_fanout: 2,
                relay_spread: 3,
                vote_rule: crate::vote::VoteRule { allow_units_of_two: true },
            }
        );
        assert_eq!(s.checks.healthy_score(), 3.25);
        assert_eq!(
            s.checks.checks(),
            [
                CheckSpec {
                    kind: CheckKind::Http {
                        https: false,
                        port: 8080,
                        path: "/ready".into(),
                        tls: TlsVerification::InsecureSkipVerify
                    },
                    timeout: Duration::from_millis(250),
                    retries: 2,
                    weight: 3.0,
                },
                CheckSpec {
                    kind: CheckKind::Tcp { port: 22 },
                    timeout: Duration::from_millis(100),
                    retries: 0,
                    weight: 0.5
                },
            ]
        );
        assert_eq!(
            (s.message_timeout, s.key_reload_interval, s.key_rotation_overlap),
            (Duration::from_millis(700), Duration::from_secs(9), Duration::from_secs(90))
        );
        assert_eq!(s.peer_cache_file, Some(PathBuf::from("/var/lib/edge-health/peers.json")));
        assert_eq!(s.max_concurrent_probe_requests, 4);
        assert!(matches!(s.kubelet_credential, KubeletCredential::None), "no kubelet check, no token");
        assert_eq!(s.unit_source, UnitSource::NodeUnits);
        assert_eq!(s.namespace, "kube-system");
    }

    #[test]
    fn the_flags_are_well_formed() {
        use clap::CommandFactory;
        Flags::command().debug_assert();
        let defaults = flags(&["--check", HTTP]);
        assert_eq!(defaults.runtime.bind_address.to_string(), ":51005", "SuperEdge's port, every interface");
    }

    #[test]
    fn defaults_are_documented_values() {
        let s = settings(&["--check", HTTP, "--unit-label-key", "site"]).unwrap();
        assert_eq!(s.protocol.period, Duration::from_secs(10));
        assert_eq!((s.protocol.probes_per_period, s.protocol.indirect_helpers, s.protocol.vote_window), (3, 3, 3));
        assert_eq!(s.checks.healthy_score(), 1.0, "every check must pass");
        assert_eq!(s.unit_source, UnitSource::LabelKey("site".into()));
        assert_eq!(s.advertise_ip, "10.244.0.5".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn no_check_is_a_start_up_error() {
        let error = settings(&[]).unwrap_err();
        assert!(matches!(error, SettingsError::Config(ConfigError::NoChecks)), "{error}");
        assert!(error.to_string().contains("no check configured"), "{error}");
    }

    #[test]
    fn impossible_configurations_are_refused() {
        let slow = settings(&["--check", "kind=tcp,port=1,timeout=6s,retries=1", "--period", "10s"]).unwrap_err();
        assert!(matches!(slow, SettingsError::Config(ConfigError::ChecksTooSlow { .. })), "{slow}");
        let unreachable = settings(&["--check", HTTP, "--healthy-score", "2"]).unwrap_err();
        assert!(matches!(unreachable, SettingsError::Config(ConfigError::UnreachableHealthyScore { .. })));
        let zero_k = settings(&["--check", HTTP, "--probes-per-period", "0"]).unwrap_err();
        assert!(matches!(zero_k, SettingsError::Config(ConfigError::ZeroProbesPerPeriod)));
        let window = settings(&["--check", HTTP, "--vote-window", "1001"]).unwrap_err();
        assert!(matches!(window, SettingsError::VoteWindow(1001)), "{window}");
        let message = settings(&["--check", HTTP, "--message-timeout", "10s"]).unwrap_err();
        assert!(matches!(message, SettingsError::MessageTimeout { .. }), "{message}");
        let no_address = Flags::try_parse_from([
            "edge-health",
            "--hmac-key-file",
            "/k",
            "--signing-key-file",
            "/s",
            "--check",
            HTTP,
        ])
        .unwrap()
        .settings("edge-1".into())
        .unwrap_err();
        assert!(matches!(no_address, SettingsError::NoAdvertiseAddress(_)), "{no_address}");
        assert!(Flags::try_parse_from(["edge-health", "--check", HTTP]).is_err(), "--hmac-key-file is required");
    }

    /// SuperEdge's DaemonSet names no key file: the key lives in the state directory.
    #[test]
    fn the_signing_key_defaults_to_the_state_directory() {
        let settings = |args: &[&str]| {
            let all =
                [&["edge-health", "--hmac-key-file", "/k", "--advertise-address", "10.244.0.5", "--check", HTTP], args]
                    .concat();
            Flags::try_parse_from(all).unwrap().settings("edge-1".into()).unwrap().signing_key_file
        };
        assert_eq!(settings(&[]), Path::new("/var/lib/edge-health/signing-key"));
        assert_eq!(settings(&["--state-dir", "/srv/eh"]), Path::new("/srv/eh/signing-key"));
        assert_eq!(settings(&["--state-dir", "/srv/eh", "--signing-key-file", "/s"]), Path::new("/s"));
    }

    #[test]
    fn the_bind_address_is_advertised_when_it_is_one_address() {
        let flags = Flags::try_parse_from([
            "edge-health",
            "--hmac-key-file",
            "/k",
            "--signing-key-file",
            "/s",
            "--check",
            HTTP,
            "--bind-address",
            "127.0.0.11:51005",
        ])
        .unwrap();
        let s = flags.settings("edge-1".into()).unwrap();
        assert_eq!(s.advertised("127.0.0.11:4000".parse().unwrap()), "127.0.0.11:4000".parse().unwrap());
        assert_eq!(s.source_ip, Some("127.0.0.11".parse().unwrap()), "and its connections come from it");
        let every = settings(&["--check", HTTP]).unwrap();
        assert_eq!(every.source_ip, None, "bound to every address: the kernel picks the source");
    }

    /// SuperEdge's flags, through the translation the binary applies.
    fn legacy_settings(args: &[&str]) -> Result<Settings, SettingsError> {
        use super::superedge::EDGE_HEALTH;
        use controller_support::legacy_flags::try_parse_from;
        let all = [
            &["edge-health", "--hmac-key-file", "/k", "--signing-key-file", "/s", "--advertise-address", "10.244.0.5"],
            args,
        ]
        .concat();
        let (flags, _) = try_parse_from::<Flags, _, _>(&EDGE_HEALTH, all).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        flags.settings("edge-1".into())
    }

    #[test]
    fn superedge_plugin_flags_are_checks() {
        let s = legacy_settings(&["--kubeletauthplugin", "timeout=1,retrytime=2,weight=1,port=10250"]).unwrap();
        assert_eq!(s.checks.checks().len(), 1);
        assert_eq!(s.checks.healthy_score(), 100.0, "SuperEdge's weights are scaled to its score line");
        assert!(matches!(s.kubelet_credential, KubeletCredential::None), "not the pod's own token by default");
        // every number kept: retrytime counts attempts (retries + 1), weights scaled x100
        // to SuperEdge's score line, the kubelet plugin's check unverified as SuperEdge's was
        for (flag, want) in [
            (
                "--kubeletauthplugin=timeout=5,retrytime=3,weight=0.5,port=10250",
                CheckSpec {
                    kind: CheckKind::KubeletHealthz { port: 10250, ca_bundle: None },
                    timeout: Duration::from_secs(5),
                    retries: 2,
                    weight: 50.0,
                },
            ),
            (
                "--kubeletplugin=timeout=2,retrytime=1,weight=1,port=10255",
                CheckSpec {
                    kind: CheckKind::Http {
                        https: false,
                        port: 10255,
                        path: KUBELET_HEALTHZ_PATH.to_string(),
                        tls: TlsVerification::InsecureSkipVerify,
                    },
                    timeout: Duration::from_secs(2),
                    retries: 0,
                    weight: 100.0,
                },
            ),
            (
                "--pingplugin=port=22,timeout=1,retrytime=2,weight=0.25",
                CheckSpec {
                    kind: CheckKind::Tcp { port: 22 },
                    timeout: Duration::from_secs(1),
                    retries: 1,
                    weight: 25.0,
                },
            ),
        ] {
            let s = legacy_settings(&[flag]).unwrap();
            assert_eq!(s.checks.checks(), [want], "{flag}");
        }
    }

    /// SuperEdge's manifest (`deployment/edge-health.yaml`) gives a check that can take 15 s
    /// against a 10 s check period; the period here holds it.
    #[test]
    fn superedge_numbers_are_the_numbers_used() {
        let s = legacy_settings(&["--kubeletauthplugin=timeout=5,retrytime=3,weight=1,port=10250", "--v=2"]).unwrap();
        assert_eq!(s.protocol.period, Duration::from_secs(25));
        let s = legacy_settings(&[
            "--pingplugin=timeout=1,retrytime=1,weight=1,port=22",
            "--healthcheckperiod=4",
            "--healthcheckscoreline=100",
            "--votetimeout=12",
            "--voteperiod=3",
            "--communicateperiod=30",
            "--communicatetimetout=2",
            "--communicateretrytime=3",
            "--communicateserverport=51015",
            "--hostname=edge-9",
        ])
        .unwrap();
        assert_eq!(s.protocol.period, Duration::from_secs(5), "4 s plus the check's 1 s");
        assert_eq!(s.protocol.vote_window, 3, "12 s in periods of 5 s, rounded up");
        assert_eq!(s.protocol.send_retries, 2);
        assert_eq!(s.message_timeout, Duration::from_secs(2));
        assert_eq!(s.checks.healthy_score(), 100.0);
        let (flags, _) = controller_support::legacy_flags::try_parse_from::<Flags, _, _>(
            &super::superedge::EDGE_HEALTH,
            [
                "edge-health",
                "--hmac-key-file=/k",
                "--signing-key-file=/s",
                "--communicateserverport=51015",
                "--hostname=edge-9",
            ],
        )
        .unwrap();
        assert_eq!(flags.runtime.bind_address.to_string(), ":51015");
        assert_eq!(flags.runtime.node_name.as_deref(), Some("edge-9"));
    }

    /// The daemon's own identity is never what a kubelet check sends: by default nothing,
    /// a requested token of the ServiceAccount named, or a file of the operator's choice
    /// but not the pod's own token.
    #[test]
    fn kubelet_checks_never_send_the_daemons_own_token() {
        const KUBELET: &str = "kind=kubelet,port=10250,timeout=2s";
        let default = settings(&["--check", KUBELET]).unwrap();
        assert!(matches!(default.kubelet_credential, KubeletCredential::None), "{:?}", default.kubelet_credential);
        let requested =
            settings(&["--check", KUBELET, "--kubelet-check-service-account", "edgegrid/edge-health-kubelet-check"])
                .unwrap();
        match &requested.kubelet_credential {
            KubeletCredential::Requested(token) => {
                assert_eq!((token.namespace(), token.name()), ("edgegrid", "edge-health-kubelet-check"));
            }
            other => panic!("{other:?}"),
        }
        let own = settings(&["--check", KUBELET, "--token-file", SERVICE_ACCOUNT_TOKEN]).unwrap_err();
        assert!(matches!(own, SettingsError::OwnTokenForKubeletChecks(_)), "{own}");
        let chosen = settings(&["--check", KUBELET, "--token-file", "/etc/kubelet-check/token"]).unwrap();
        assert!(
            matches!(&chosen.kubelet_credential, KubeletCredential::File(p) if p == Path::new("/etc/kubelet-check/token"))
        );
        let bad = settings(&["--check", KUBELET, "--kubelet-check-service-account", "no-namespace"]).unwrap_err();
        assert!(matches!(bad, SettingsError::KubeletCheckServiceAccount(_)), "{bad}");
        let both = Flags::try_parse_from([
            "edge-health",
            "--hmac-key-file",
            "/k",
            "--signing-key-file",
            "/s",
            "--kubelet-check-service-account",
            "a/b",
            "--token-file",
            "/t",
        ]);
        assert!(both.is_err(), "one credential or the other");
        let no_kubelet_check = settings(&["--check", HTTP, "--kubelet-check-service-account", "a/b"]).unwrap();
        assert!(matches!(no_kubelet_check.kubelet_credential, KubeletCredential::None), "nothing to send it to");
    }

    /// With a token the checks wait for the liveness proof, so a probe takes the proof's
    /// attempts, then the checks, then the helpers: the period must hold them one after the
    /// other (the chart's defaults do: 2 x 1 s + 2 x 2 s + 2 s of 10 s). Without a token
    /// they overlap and the same numbers are fine.
    #[test]
    fn with_a_token_the_period_holds_the_proof_then_the_checks() {
        const KUBELET: &str = "kind=kubelet,port=10250,timeout=2s,retries=1";
        let token = ["--kubelet-check-service-account", "edgegrid/edge-health-kubelet-check"];
        let chart = settings(&[&["--check", KUBELET][..], &token].concat()).unwrap();
        assert_eq!(chart.proof_time(true), Duration::from_secs(2));
        assert_eq!(chart.proof_time(false), Duration::from_secs(4), "alongside: the checks' time");
        let tight = ["--check", KUBELET, "--period", "8s"];
        let slow = settings(&[&tight[..], &token].concat()).unwrap_err();
        match &slow {
            SettingsError::ProbeTooSlow { probe, period } => {
                assert_eq!((*probe, *period), (Duration::from_secs(8), Duration::from_secs(8)));
            }
            other => panic!("{other}"),
        }
        assert!(slow.to_string().contains("a probe can take 8s, not less than --period (8s)"), "{slow}");
        settings(&tight).expect("no token: the proof runs alongside the checks");
        let retries = ["--send-retries", "0"];
        settings(&[&tight[..], &token, &retries].concat()).expect("one attempt of the proof: 7 s");
    }

    #[test]
    fn check_flags_parse_or_say_why_not() {
        assert_eq!(
            parse_check("kind=grpc,port=9090,timeout=1s,service=health").unwrap().kind,
            CheckKind::Grpc { port: 9090, service: Some("health".into()) }
        );
        let kubelet = parse_check("kind=kubelet,port=10250,timeout=2s,retries=1").unwrap();
        assert_eq!(kubelet.kind, CheckKind::KubeletHealthz { port: 10250, ca_bundle: None });
        assert_eq!((kubelet.retries, kubelet.weight), (1, 1.0));
        for (text, why) in [
            ("port=1,timeout=1s", "kind is required"),
            ("kind=icmp,port=1,timeout=1s", "unknown kind"),
            ("kind=tcp,timeout=1s", "port is required"),
            ("kind=tcp,port=1", "timeout is required"),
            ("kind=tcp,port=1,timeout=5", "missing unit"),
            ("kind=tcp,port=1,timeout=1s,path=/x", "does not apply"),
            ("kind=tcp,port=70000,timeout=1s", "not a port"),
            ("kind=tcp,port=1,port=2,timeout=1s", "twice"),
            ("kind=tcp,port=1,timeout=1s,retries=-1", "not a whole number"),
            ("kind=tcp,port=1,timeout=1s,weight=x", "not a number"),
            ("kind=tcp,port", "not key=value"),
        ] {
            let error = parse_check(text).unwrap_err();
            assert!(error.contains(why), "{text}: {error}");
        }
    }
}
