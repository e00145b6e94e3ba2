//! The webhook's command line (SuperEdge's `--always-reachable` among ours), and what each
//! part takes from it.

use std::sync::Arc;
use std::time::Duration;

use controller_support::tls::{TlsError, TlsFlags};
use controller_support::unit_config::EdgeRuleFlags;
use controller_support::{CertResolver, RuntimeFlags, TlsConfig};

use crate::metrics::Metrics;
use crate::nodes::NodeCache;
use crate::self_managed::{SelfManagedFlags, pki};
use crate::server::Webhook;
use crate::taint_remover::RemoverConfig;

#[derive(clap::Parser, Debug)]
#[command(version, about = "Keeps an unreachable-but-alive edge node's pods and endpoints")]
pub struct Flags {
    #[command(flatten)]
    pub runtime: RuntimeFlags<8443, 8080>,
    #[command(flatten)]
    pub tls: TlsFlags,
    #[command(flatten)]
    pub self_managed: SelfManagedFlags,
    /// Protect an Unknown node even when its unit voted it unhealthy (SuperEdge's flag).
    #[arg(long)]
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
