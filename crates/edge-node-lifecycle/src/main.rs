//! `edge-node-lifecycle`: the controller in the shared runtime, leader-elected on Lease
//! `kube-system/edge-node-lifecycle`. Standbys keep their caches warm (and are ready once
//! synced) but act only while leading; losing the Lease exits 1, SIGTERM exits 0.

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use controller_support::{LeaderFlags, Runtime, RuntimeFlags, parse_duration};
use edge_node_lifecycle::controller::{self, ControllerConfig};
use edge_node_lifecycle::metrics::Metrics;
use edgegrid_core::membership::UnitSource;
use edgegrid_core::protection::ProtectionLimit;
use node_lifecycle::lifecycle::LifecycleConfig;

#[derive(Parser, Debug)]
#[command(version, about = "Edge-aware node lifecycle controller (replaces kube-controller-manager's)")]
struct Flags {
    #[command(flatten)]
    runtime: RuntimeFlags<10258, 10259>,
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    node_monitor_period: Duration,
    #[arg(long, default_value = "50s", value_parser = parse_duration)]
    node_monitor_grace_period: Duration,
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    node_startup_grace_period: Duration,
    #[arg(long, default_value_t = 0.55)]
    unhealthy_zone_threshold: f64,
    #[arg(long, default_value_t = 50)]
    large_cluster_size_threshold: usize,
    #[arg(long, default_value_t = 0.1)]
    node_eviction_rate: f64,
    #[arg(long, default_value_t = 0.01)]
    secondary_node_eviction_rate: f64,
    /// The longest a node may stay Ready=Unknown and still be protected while its unit's
    /// peers see it alive (e.g. 30m, 2h), counted from the Ready condition's
    /// lastTransitionTime; past it the node is tainted and its pods evicted as stock
    /// Kubernetes would. 0 is unlimited (SuperEdge's behaviour). A node's
    /// superedge.io/max-unreachable-protection annotation may only shorten it.
    #[arg(long, default_value = "0", value_parser = ProtectionLimit::parse)]
    max_unreachable_protection: ProtectionLimit,
    /// The node label key edge-health groups units by (its own --unit-label-key); empty:
    /// SuperEdge's node units (<unit>=nodeunits.superedge.io) with the edge-health-config
    /// ConfigMap. Only nodes edge-health watches (with a peer of their unit running it) can
    /// be protected; every other node is handled as stock Kubernetes does.
    #[arg(long, default_value = "")]
    unit_label_key: String,
    /// Namespace of the edge-health-config ConfigMap (read only for SuperEdge node units).
    #[arg(long, default_value = "kube-system")]
    edge_health_config_namespace: String,
    #[command(flatten)]
    leader: LeaderFlags,
}

impl Flags {
    fn lifecycle(&self) -> anyhow::Result<LifecycleConfig> {
        if !(0.0..=1.0).contains(&self.unhealthy_zone_threshold) {
            anyhow::bail!("--unhealthy-zone-threshold must be within [0, 1], got {}", self.unhealthy_zone_threshold);
        }
        if self.node_eviction_rate < 0.0 || self.secondary_node_eviction_rate < 0.0 {
            anyhow::bail!("eviction rates must not be negative");
        }
        Ok(LifecycleConfig {
            monitor_period: self.node_monitor_period,
            grace_period: self.node_monitor_grace_period,
            startup_grace_period: self.node_startup_grace_period,
            unhealthy_zone_threshold: self.unhealthy_zone_threshold,
            large_cluster_threshold: self.large_cluster_size_threshold,
            eviction_rate: self.node_eviction_rate,
            secondary_eviction_rate: self.secondary_node_eviction_rate,
            max_unreachable_protection: self.max_unreachable_protection,
        })
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let config = ControllerConfig {
        lifecycle: flags.lifecycle()?,
        unit_source: UnitSource::from_flag(&flags.unit_label_key),
        edge_health_config_namespace: flags.edge_health_config_namespace.clone(),
        ..Default::default()
    };
    let metrics = Arc::new(Metrics::default());
    let runtime = Runtime::builder("edge-node-lifecycle", &flags.runtime)
        .metrics(metrics.registry())
        .leader_election(&flags.leader)
        .build()
        .await?;
    let work = controller::run(
        runtime.client(),
        config,
        metrics,
        runtime.leadership(),
        runtime.readiness(),
        runtime.shutdown_signal().receiver(),
    );
    runtime.run(work).await?;
    Ok(())
}
