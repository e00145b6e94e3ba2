//! What to check on each peer and how the protocol is timed, validated as a whole before
//! the daemon starts.
//!
//! Two SuperEdge defects this module exists to prevent:
//! - with no check configured, SuperEdge scored every peer 0 and voted everyone
//!   unhealthy; here an empty check list is a configuration error;
//! - SuperEdge parsed its numeric flags and then overwrote them with defaults; here there
//!   are no defaults at all in the core: every number given is the number used, and each
//!   is checked for a value that cannot work (a zero timeout, a score no peer can reach, a
//!   check that cannot finish within its period).
//!
//! The checks themselves are `edgegrid-prober`'s probes ([`ProbeTarget`], run by its
//! `run_probe`, answering its [`Outcome`]): this module only says which probe to run
//! against a peer's address and how to score the results. The prober's `ProbeState`
//! (consecutive-result thresholds) is deliberately not used: with the rotating
//! assignment a checker probes a given peer about once per vote window, so there is no
//! run of results to count; the vote window over several independent checkers plays the
//! part of the failure threshold.

use std::time::Duration;

use edgegrid_core::unit::verdict::VoteRule;
use edgegrid_prober::{HttpProbe, Outcome, ProbeTarget, TlsVerification};

/// The kubelet's authenticated port.
pub const KUBELET_PORT: u16 = 10250;
/// The path every check of kind "kubelet" or SuperEdge's kubelet plugins probes.
pub const KUBELET_HEALTHZ_PATH: &str = "/healthz";
/// What a kubelet answers a request it cannot authenticate (401: no token, or one it
/// cannot review, as when its API server is out of reach) or authorize (403). Either
/// comes from a kubelet serving on its port, which is what a kind=kubelet check asks:
/// they count as a pass. Not a 500 (`/healthz` failing, or the kubelet's authorizer
/// erring), which stays a failure.
pub const KUBELET_ALIVE_REFUSALS: [u16; 2] = [401, 403];
/// Which probe a check runs against a peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckKind {
    /// `GET https://<peer>:<port>/healthz` with the kubelet-check token, if there is one
    /// (never the daemon's own identity: see `daemon::kubelet_credential`). With a CA
    /// bundle the peer's serving certificate must chain to it and name the peer's node
    /// and address ([`TlsVerification::KubeletServing`]); without one it is not verified
    /// (kubeadm's kubelets serve self-signed certificates). A kubelet's 401 or 403 passes
    /// ([`KUBELET_ALIVE_REFUSALS`]).
    KubeletHealthz { port: u16, ca_bundle: Option<Vec<u8>> },
    /// `GET` of a path over HTTP or HTTPS, without credentials.
    Http { https: bool, port: u16, path: String, tls: TlsVerification },
    /// A TCP connect.
    Tcp { port: u16 },
    /// `grpc.health.v1.Health/Check`.
    Grpc { port: u16, service: Option<String> },
}

impl CheckKind {
    /// A metric label.
    pub fn name(&self) -> &'static str {
        match self {
            Self::KubeletHealthz { .. } => "kubelet",
            Self::Http { https: true, .. } => "https",
            Self::Http { https: false, .. } => "http",
            Self::Tcp { .. } => "tcp",
            Self::Grpc { .. } => "grpc",
        }
    }

    fn port(&self) -> u16 {
        match self {
            Self::KubeletHealthz { port, .. }
            | Self::Http { port, .. }
            | Self::Tcp { port }
            | Self::Grpc { port, .. } => *port,
        }
    }
}

/// One check.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckSpec {
    pub kind: CheckKind,
    /// Per attempt.
    pub timeout: Duration,
    /// Further attempts after a failed one, within the same period.
    pub retries: u32,
    /// Points a passing check adds to the peer's score.
    pub weight: f64,
}

impl CheckSpec {
    pub fn attempts(&self) -> u32 {
        self.retries.saturating_add(1)
    }

    /// The longest this check can take against one peer.
    pub fn worst_case(&self) -> Duration {
        self.timeout.saturating_mul(self.attempts())
    }

    /// The probe to run against a peer at `host`, published by the Node(s) `node_names`
    /// (whose name a verified kubelet certificate must carry). `token` is the kubelet-check
    /// token as read now (it rotates), sent only to the kubelet.
    pub fn target(&self, host: &str, node_names: &[String], token: Option<&str>) -> ProbeTarget {
        match &self.kind {
            CheckKind::KubeletHealthz { port, ca_bundle } => ProbeTarget::Http(HttpProbe {
                https: true,
                host: host.to_string(),
                port: *port,
                path: KUBELET_HEALTHZ_PATH.to_string(),
                headers: Vec::new(),
                bearer_token: token.map(str::to_string),
                tls: match ca_bundle {
                    Some(ca_bundle) => TlsVerification::KubeletServing {
                        ca_bundle: ca_bundle.clone(),
                        node_names: node_names.to_vec(),
                    },
                    None => TlsVerification::InsecureSkipVerify,
                },
                extra_success_statuses: KUBELET_ALIVE_REFUSALS.to_vec(),
            }),
            CheckKind::Http { https, port, path, tls } => ProbeTarget::Http(HttpProbe {
                https: *https,
                host: host.to_string(),
                port: *port,
                path: path.clone(),
                headers: Vec::new(),
                bearer_token: None,
                tls: tls.clone(),
                extra_success_statuses: Vec::new(),
            }),
            CheckKind::Tcp { port } => ProbeTarget::Tcp { host: host.to_string(), port: *port },
            CheckKind::Grpc { port, service } => {
                ProbeTarget::Grpc { host: host.to_string(), port: *port, service: service.clone() }
            }
        }
    }
}

/// The checks run on each peer and the score that makes it healthy.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckConfig {
    checks: Vec<CheckSpec>,
    healthy_score: f64,
}

impl CheckConfig {
    /// A peer passes when the weights of its passing checks add up to at least
    /// `healthy_score`.
    pub fn new(checks: Vec<CheckSpec>, healthy_score: f64) -> Result<Self, ConfigError> {
        if checks.is_empty() {
            return Err(ConfigError::NoChecks);
        }
        for (index, check) in checks.iter().enumerate() {
            let name = check.kind.name();
            if check.timeout.is_zero() {
                return Err(ConfigError::ZeroTimeout { index, name });
            }
            if check.kind.port() == 0 {
                return Err(ConfigError::ZeroPort { index, name });
            }
            if !(check.weight.is_finite() && check.weight > 0.0) {
                return Err(ConfigError::BadWeight { index, name, weight: check.weight });
            }
            if let CheckKind::Http { path, .. } = &check.kind
                && !path.starts_with('/')
            {
                return Err(ConfigError::BadPath { index, path: path.clone() });
            }
        }
        let total: f64 = checks.iter().map(|c| c.weight).sum();
        if !(healthy_score.is_finite() && healthy_score > 0.0) {
            return Err(ConfigError::BadHealthyScore(healthy_score));
        }
        if healthy_score > total {
            // no peer could ever pass: everyone would be voted unhealthy
            return Err(ConfigError::UnreachableHealthyScore { score: healthy_score, total });
        }
        Ok(Self { checks, healthy_score })
    }

    pub fn checks(&self) -> &[CheckSpec] {
        &self.checks
    }

    pub fn healthy_score(&self) -> f64 {
        self.healthy_score
    }

    /// The score of a peer; `outcomes[i]` is the result of `checks()[i]` after its
    /// retries (a missing result counts as a failure).
    pub fn score(&self, outcomes: &[Outcome]) -> f64 {
        self.checks
            .iter()
            .zip(outcomes.iter().map(Some).chain(std::iter::repeat(None)))
            .filter(|(_, outcome)| *outcome == Some(&Outcome::Success))
            .map(|(check, _)| check.weight)
            .sum()
    }

    /// Whether a peer with these results is reachable (its score reaches the line).
    pub fn passes(&self, outcomes: &[Outcome]) -> bool {
        self.score(outcomes) >= self.healthy_score
    }

    /// The longest one peer's checks can take when they run one after the other.
    pub fn worst_case(&self) -> Duration {
        self.checks.iter().map(CheckSpec::worst_case).fold(Duration::ZERO, Duration::saturating_add)
    }
}

/// The protocol's timing and sizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolConfig {
    /// How often each member probes its assigned peers.
    pub period: Duration,
    /// `k`: peers each member probes per period (and checkers each member gets).
    pub probes_per_period: usize,
    /// `m`: members asked to probe a peer indirectly before accusing it (0: accuse on the
    /// direct result).
    pub indirect_helpers: usize,
    /// How long to wait for indirect answers.
    pub indirect_timeout: Duration,
    /// How many periods a ballot counts for.
    pub vote_window: u64,
    /// Largest tolerated difference between a message's timestamp and the receiver's clock.
    pub max_clock_skew: Duration,
    /// Further attempts to deliver a results message that was not acknowledged.
    pub send_retries: u32,
    /// Relay rounds per period: how often a member passes on the ballots it learned
    /// (see [`crate::relay`]).
    pub relay_rounds: u32,
    /// Peers each relay round goes to.
    pub relay_fanout: usize,
    /// In how many rounds each ballot is passed on.
    pub relay_spread: u32,
    /// How many agreeing checkers a verdict takes (see [`crate::vote`]).
    pub vote_rule: VoteRule,
}

/// The settings the simulation, its tests and the benchmark run, and sensible starting
/// values: a 10 s period, `k` = 3 probes and 3 indirect helpers, a 3-period vote window,
/// 30 s of tolerated clock skew, one resend, results relayed in 8 rounds per period to 3
/// peers each, every ballot in 2 rounds (in simulated units of 50 to 2,000 members a member
/// holds over 99% of a period's ballots by its end on average, the worst member of the
/// worst period 65% to 80% (late ballots still count: the window is three periods), and a
/// dead member is detected in 2 periods; with 4 rounds a period's ballots reached as few as
/// half of the members by its end and detection took 3).
impl Default for ProtocolConfig {
    fn default() -> Self {
        Self {
            period: Duration::from_secs(10),
            probes_per_period: 3,
            indirect_helpers: 3,
            indirect_timeout: Duration::from_secs(2),
            vote_window: 3,
            max_clock_skew: Duration::from_secs(30),
            send_retries: 1,
            relay_rounds: 8,
            relay_fanout: 3,
            relay_spread: 2,
            vote_rule: VoteRule::default(),
        }
    }
}

impl ProtocolConfig {
    /// The time between two relay rounds.
    pub fn relay_interval(&self) -> Duration {
        self.period / self.relay_rounds.max(1)
    }

    /// Checks the numbers against each other and against the checks.
    pub fn validate(&self, checks: &CheckConfig) -> Result<(), ConfigError> {
        if self.period < Duration::from_millis(1) {
            return Err(ConfigError::ZeroPeriod);
        }
        if self.probes_per_period == 0 {
            return Err(ConfigError::ZeroProbesPerPeriod);
        }
        if self.vote_window == 0 {
            return Err(ConfigError::ZeroVoteWindow);
        }
        if self.max_clock_skew.is_zero() {
            return Err(ConfigError::ZeroClockSkew);
        }
        if self.indirect_helpers > 0 && self.indirect_timeout.is_zero() {
            return Err(ConfigError::ZeroIndirectTimeout);
        }
        if self.relay_rounds == 0 || self.relay_fanout == 0 || self.relay_spread == 0 {
            return Err(ConfigError::ZeroRelay);
        }
        if self.relay_interval() < Duration::from_millis(1) {
            return Err(ConfigError::RelayRoundsTooMany { rounds: self.relay_rounds, period: self.period });
        }
        // a verdict must be reached within the period it belongs to
        let worst = checks.worst_case().saturating_add(if self.indirect_helpers > 0 {
            self.indirect_timeout
        } else {
            Duration::ZERO
        });
        if worst >= self.period {
            return Err(ConfigError::ChecksTooSlow { worst, period: self.period });
        }
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("no check configured: at least one of the kubelet, HTTP, TCP or gRPC checks is required")]
    NoChecks,
    #[error("check {index} ({name}): the timeout must be positive")]
    ZeroTimeout { index: usize, name: &'static str },
    #[error("check {index} ({name}): the port must not be 0")]
    ZeroPort { index: usize, name: &'static str },
    #[error("check {index} ({name}): the weight must be a positive number, got {weight}")]
    BadWeight { index: usize, name: &'static str, weight: f64 },
    #[error("check {index}: the HTTP path must start with '/', got {path:?}")]
    BadPath { index: usize, path: String },
    #[error("the healthy score must be a positive number, got {0}")]
    BadHealthyScore(f64),
    #[error("the healthy score {score} exceeds the total weight of all checks ({total}): no peer could ever pass")]
    UnreachableHealthyScore { score: f64, total: f64 },
    #[error("the check period must be at least 1ms")]
    ZeroPeriod,
    #[error("probes per period must be at least 1")]
    ZeroProbesPerPeriod,
    #[error("the vote window must be at least 1 period")]
    ZeroVoteWindow,
    #[error("the allowed clock skew must be positive")]
    ZeroClockSkew,
    #[error("the indirect probe timeout must be positive when indirect helpers are used")]
    ZeroIndirectTimeout,
    #[error("relay rounds, relay fanout and relay spread must each be at least 1")]
    ZeroRelay,
    #[error("{rounds} relay rounds per period of {period:?} are less than 1ms apart")]
    RelayRoundsTooMany { rounds: u32, period: Duration },
    #[error(
        "checks can take {worst:?} (every attempt timing out, plus the indirect timeout), not less than the period {period:?}"
    )]
    ChecksTooSlow { worst: Duration, period: Duration },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(port: u16, weight: f64) -> CheckSpec {
        CheckSpec { kind: CheckKind::Tcp { port }, timeout: Duration::from_secs(1), retries: 0, weight }
    }

    fn protocol() -> ProtocolConfig {
        ProtocolConfig::default()
    }

    #[test]
    fn no_check_is_an_error_not_everyone_unhealthy() {
        assert_eq!(CheckConfig::new(Vec::new(), 1.0), Err(ConfigError::NoChecks));
    }

    #[test]
    fn every_check_number_is_validated() {
        let cases: Vec<(&str, CheckSpec, f64, ConfigError)> = vec![
            (
                "zero timeout",
                CheckSpec { timeout: Duration::ZERO, ..tcp(22, 1.0) },
                1.0,
                ConfigError::ZeroTimeout { index: 0, name: "tcp" },
            ),
            ("zero port", tcp(0, 1.0), 1.0, ConfigError::ZeroPort { index: 0, name: "tcp" }),
            ("zero weight", tcp(22, 0.0), 1.0, ConfigError::BadWeight { index: 0, name: "tcp", weight: 0.0 }),
            ("negative weight", tcp(22, -1.0), 1.0, ConfigError::BadWeight { index: 0, name: "tcp", weight: -1.0 }),
            ("zero line", tcp(22, 1.0), 0.0, ConfigError::BadHealthyScore(0.0)),
            ("unreachable line", tcp(22, 1.0), 1.5, ConfigError::UnreachableHealthyScore { score: 1.5, total: 1.0 }),
            (
                "relative path",
                CheckSpec {
                    kind: CheckKind::Http {
                        https: false,
                        port: 80,
                        path: "healthz".into(),
                        tls: TlsVerification::InsecureSkipVerify,
                    },
                    ..tcp(80, 1.0)
                },
                1.0,
                ConfigError::BadPath { index: 0, path: "healthz".into() },
            ),
        ];
        for (name, check, line, want) in cases {
            assert_eq!(CheckConfig::new(vec![check], line), Err(want), "{name}");
        }
        assert!(matches!(CheckConfig::new(vec![tcp(22, f64::NAN)], 1.0), Err(ConfigError::BadWeight { .. })));
    }

    #[test]
    fn score_is_the_sum_of_passing_weights() {
        let config = CheckConfig::new(vec![tcp(1, 60.0), tcp(2, 30.0), tcp(3, 10.0)], 70.0).unwrap();
        use Outcome::{Failure as F, Success as S};
        assert_eq!(config.score(&[S, S, S]), 100.0);
        assert_eq!(config.score(&[S, F, S]), 70.0);
        assert!(config.passes(&[S, F, S]), "reaching the line is enough");
        assert!(!config.passes(&[F, S, S]));
        assert!(!config.passes(&[S]), "missing results count as failed");
        assert_eq!(config.healthy_score(), 70.0);
    }

    #[test]
    fn targets_carry_every_setting() {
        let tls = TlsVerification::CaBundle(b"pem".to_vec());
        let names = ["edge-7".to_string()];
        let kubelet = CheckSpec {
            kind: CheckKind::KubeletHealthz { port: 10251, ca_bundle: Some(b"pem".to_vec()) },
            ..tcp(1, 1.0)
        };
        assert_eq!(
            kubelet.target("10.0.0.7", &names, Some("tok")),
            ProbeTarget::Http(HttpProbe {
                https: true,
                host: "10.0.0.7".into(),
                port: 10251,
                path: "/healthz".into(),
                headers: vec![],
                bearer_token: Some("tok".into()),
                tls: TlsVerification::KubeletServing { ca_bundle: b"pem".to_vec(), node_names: vec!["edge-7".into()] },
                extra_success_statuses: vec![401, 403],
            })
        );
        let unverified = CheckSpec { kind: CheckKind::KubeletHealthz { port: 10250, ca_bundle: None }, ..tcp(1, 1.0) };
        match unverified.target("10.0.0.7", &names, None) {
            ProbeTarget::Http(probe) => {
                assert_eq!((probe.tls, probe.bearer_token), (TlsVerification::InsecureSkipVerify, None));
            }
            other => panic!("{other:?}"),
        }
        let http = CheckSpec {
            kind: CheckKind::Http { https: false, port: 8080, path: "/ready".into(), tls: tls.clone() },
            ..tcp(1, 1.0)
        };
        match http.target("h", &names, Some("tok")) {
            ProbeTarget::Http(probe) => {
                assert_eq!((probe.port, probe.path.as_str(), probe.https), (8080, "/ready", false));
                assert_eq!(probe.bearer_token, None, "the token goes to the kubelet only");
                assert_eq!((probe.tls, probe.extra_success_statuses), (tls.clone(), vec![]), "a 401 fails");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(tcp(2222, 1.0).target("h", &names, None), ProbeTarget::Tcp { host: "h".into(), port: 2222 });
        let grpc = CheckSpec { kind: CheckKind::Grpc { port: 9090, service: Some("s".into()) }, ..tcp(1, 1.0) };
        assert_eq!(
            grpc.target("h", &names, None),
            ProbeTarget::Grpc { host: "h".into(), port: 9090, service: Some("s".into()) }
        );
        let retried = CheckSpec { retries: 4, timeout: Duration::from_millis(1500), ..tcp(1, 1.0) };
        assert_eq!(retried.attempts(), 5);
        assert_eq!(retried.worst_case(), Duration::from_millis(7500));
    }

    #[test]
    fn protocol_numbers_are_validated() {
        let checks = CheckConfig::new(vec![tcp(22, 1.0)], 1.0).unwrap();
        assert_eq!(protocol().validate(&checks), Ok(()));
        let cases: Vec<(&str, ProtocolConfig, ConfigError)> = vec![
            ("period", ProtocolConfig { period: Duration::ZERO, ..protocol() }, ConfigError::ZeroPeriod),
            ("k", ProtocolConfig { probes_per_period: 0, ..protocol() }, ConfigError::ZeroProbesPerPeriod),
            ("window", ProtocolConfig { vote_window: 0, ..protocol() }, ConfigError::ZeroVoteWindow),
            ("skew", ProtocolConfig { max_clock_skew: Duration::ZERO, ..protocol() }, ConfigError::ZeroClockSkew),
            ("relay rounds", ProtocolConfig { relay_rounds: 0, ..protocol() }, ConfigError::ZeroRelay),
            ("relay fanout", ProtocolConfig { relay_fanout: 0, ..protocol() }, ConfigError::ZeroRelay),
            ("relay spread", ProtocolConfig { relay_spread: 0, ..protocol() }, ConfigError::ZeroRelay),
            (
                "relay rounds too close",
                ProtocolConfig { relay_rounds: 20_000, ..protocol() },
                ConfigError::RelayRoundsTooMany { rounds: 20_000, period: Duration::from_secs(10) },
            ),
            (
                "indirect timeout",
                ProtocolConfig { indirect_timeout: Duration::ZERO, ..protocol() },
                ConfigError::ZeroIndirectTimeout,
            ),
            (
                "too slow",
                ProtocolConfig { period: Duration::from_secs(3), ..protocol() },
                ConfigError::ChecksTooSlow { worst: Duration::from_secs(3), period: Duration::from_secs(3) },
            ),
        ];
        for (name, config, want) in cases {
            assert_eq!(config.validate(&checks), Err(want), "{name}");
        }
        // without helpers the indirect timeout is unused and may be zero
        let direct_only = ProtocolConfig { indirect_helpers: 0, indirect_timeout: Duration::ZERO, ..protocol() };
        assert_eq!(direct_only.validate(&checks), Ok(()));
        // retries count toward the time a check can take
        let slow = CheckConfig::new(vec![CheckSpec { retries: 7, ..tcp(22, 1.0) }], 1.0).unwrap();
        assert_eq!(
            protocol().validate(&slow),
            Err(ConfigError::ChecksTooSlow { worst: Duration::from_secs(10), period: Duration::from_secs(10) })
        );
    }
}
