//! The webhook's command line (SuperEdge's `--always-reachable` among ours; its other flags
//! are translated by [`superedge::EDGE_HEALTH_ADMISSION`]), and what each part takes from
//! it.

pub mod superedge;

use std::sync::Arc;
use std::time::Duration;

use controller_support::tls::{TlsError, TlsFlags};
use controller_support::{CertResolver, RuntimeFlags, TlsConfig};
use edgegrid_core::edge_rule::EdgeRuleFlags;

use crate::metrics::Metrics;
use crate::nodes::NodeCache;
use crate::self_managed::{SelfManagedFlags, pki};
use crate::server::Webhook;
use crate::taint_remover::RemoverConfig;

#[derive(clap::Parser, Debug)]
#[command(
    version,
    about = "Keeps an unreachable-but-alive edge node's pods and endpoints",
    after_help = controller_support::legacy_flags::HELP_NOTE
)]
pub struct Flags {
    #[command(flatten)]
    pub runtime: RuntimeFlags<8443, 8080>,
    #[command(flatten)]
    pub tls: TlsFlags,
    #[command(flatten)]
    pub self_managed: SelfManagedFlags,
    /// Protect an Unknown node even when its unit voted it unhealthy (SuperEdge's flag).
    // Go's boolean syntax: `--always-reachable`, `=true`, `=false`, never a separate value
    #[arg(long, default_value_t = false, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_parser = controller_support::legacy_flags::parse_go_bool, action = clap::ArgAction::Set)]
    pub always_reachable: bool,
    #[command(flatten)]
    pub edge_rule: EdgeRuleFlags,
    /// How often to look for protected nodes carrying an unreachable NoExecute taint that
    /// got past the webhook (written while it was unavailable), to remove it; 0 turns that off.
    #[arg(long, default_value = "1s", value_parser = controller_support::parse_duration)]
    pub unreachable_taint_removal_period: Duration,
    /// How often the `nodeunhealth` verdicts are written from the views the edge-health
    /// daemons publish on their own Nodes (`--verdict-writer=cloud`); 0 turns that off.
    #[arg(long, default_value = "1s", value_parser = controller_support::parse_duration)]
    pub verdict_write_period: Duration,
    /// In a unit of exactly two members, let each member's view alone decide about the
    /// other (off: nobody in a unit of two is protected, nor voted down). Must match the
    /// edge-health daemons' `--allow-units-of-two`.
    #[arg(long)]
    pub allow_units_of_two: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(
        "--tls-cert-file and --tls-private-key-file, or --self-managed-certificates, are required: the apiserver \
         calls webhooks over HTTPS"
    )]
    NoCertificate,
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("making the placeholder certificate")]
    Placeholder(#[from] pki::PkiError),
}

impl Flags {
    /// The serving certificate: the files given, or with self-managed certificates a
    /// placeholder nobody trusts until the Secret's certificate is served (through the
    /// resolver returned).
    pub fn serving_tls(&self) -> Result<(TlsConfig, Option<Arc<CertResolver>>), CliError> {
        if self.self_managed.options().is_some() {
            let placeholder = pki::placeholder()?;
            let resolver =
                Arc::new(CertResolver::from_pem(placeholder.cert_pem.as_bytes(), placeholder.key_pem.as_bytes())?);
            return Ok((TlsConfig::from_resolver(resolver.clone()), Some(resolver)));
        }
        self.tls.config()?.map(|tls| (tls, None)).ok_or(CliError::NoCertificate)
    }

    pub fn node_cache(&self) -> NodeCache {
        NodeCache::new(self.edge_rule.unit_source())
            .with_vote_rule(edgegrid_core::unit::verdict::VoteRule { allow_units_of_two: self.allow_units_of_two })
    }

    pub fn webhook(&self, nodes: Arc<NodeCache>, metrics: Arc<Metrics>) -> Webhook {
        Webhook {
            nodes,
            metrics,
            max_unreachable_protection: self.edge_rule.max_unreachable_protection,
            always_reachable: self.always_reachable,
        }
    }

    pub fn remover(&self) -> RemoverConfig {
        RemoverConfig {
            period: self.unreachable_taint_removal_period,
            default: self.edge_rule.max_unreachable_protection,
            always_reachable: self.always_reachable,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use controller_support::legacy_flags::try_parse_from;

    use super::superedge::EDGE_HEALTH_ADMISSION;
    use super::*;

    fn always_reachable(args: &[&str]) -> Result<bool, String> {
        let args = [&["edge-health-admission", "--tls-cert-file=/c", "--tls-private-key-file=/k"], args].concat();
        try_parse_from::<Flags, _, _>(&EDGE_HEALTH_ADMISSION, args)
            .map(|(flags, _)| flags.always_reachable)
            .map_err(|error| error.to_string())
    }

    /// SuperEdge's flag, in every spelling Go's `flag` package took.
    #[test]
    fn always_reachable_takes_go_booleans() {
        assert_eq!(always_reachable(&[]), Ok(false));
        for on in ["--always-reachable", "-always-reachable", "--always-reachable=true", "-always-reachable=1"] {
            assert_eq!(always_reachable(&[on]), Ok(true), "{on}");
        }
        for off in ["--always-reachable=false", "-always-reachable=false", "--always-reachable=F"] {
            assert_eq!(always_reachable(&[off]), Ok(false), "{off}");
        }
        assert!(always_reachable(&["--always-reachable", "false"]).is_err(), "never a separate value");
        assert!(always_reachable(&["--always-reachable=maybe"]).is_err());
    }

    #[test]
    fn superedge_flags_reach_our_configuration() {
        let args = [
            "edge-health-admission",
            "-alsologtostderr",
            "-v=4",
            "-admission-control-server-cert=/c",
            "--admission-control-server-key",
            "/k",
            "-adminssion-control-listen-addr=127.0.0.1:9443",
            "-kubeconfigpath=/kc",
        ];
        let (flags, legacy) = try_parse_from::<Flags, _, _>(&EDGE_HEALTH_ADMISSION, args).unwrap();
        assert_eq!(flags.tls.tls_cert_file.as_deref(), Some(std::path::Path::new("/c")));
        assert_eq!(flags.tls.tls_private_key_file.as_deref(), Some(std::path::Path::new("/k")));
        assert_eq!(flags.runtime.bind_address.to_string(), "127.0.0.1:9443");
        assert_eq!(flags.runtime.kubeconfig.as_deref(), Some(std::path::Path::new("/kc")));
        assert_eq!(legacy.default_log_filter(), Some("debug"));
        assert!(Flags::try_parse_from(["edge-health-admission", "--admission-control-server-cert=/c"]).is_err());
    }
}
