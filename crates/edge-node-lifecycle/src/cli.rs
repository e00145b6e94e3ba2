//! The controller's command line: kube-controller-manager's node lifecycle flags with
//! their defaults, and the edge rule's.

use std::time::Duration;

use controller_support::{LeaderFlags, RuntimeFlags, parse_duration};
use edgegrid_core::edge_rule::EdgeRuleFlags;
use node_lifecycle::lifecycle::LifecycleConfig;

use crate::controller::ControllerConfig;

/// A flag out of its range.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct FlagError(String);

#[derive(clap::Parser, Debug)]
#[command(version, about = "Edge-aware node lifecycle controller (replaces kube-controller-manager's)")]
pub struct Flags {
    #[command(flatten)]
    pub runtime: RuntimeFlags<10258, 10259>,
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub node_monitor_period: Duration,
    #[arg(long, default_value = "50s", value_parser = parse_duration)]
    pub node_monitor_grace_period: Duration,
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    pub node_startup_grace_period: Duration,
    #[arg(long, default_value_t = 0.55)]
    pub unhealthy_zone_threshold: f64,
    #[arg(long, default_value_t = 50)]
    pub large_cluster_size_threshold: usize,
    #[arg(long, default_value_t = 0.1)]
    pub node_eviction_rate: f64,
    #[arg(long, default_value_t = 0.01)]
    pub secondary_node_eviction_rate: f64,
    #[command(flatten)]
    pub edge_rule: EdgeRuleFlags,
    #[command(flatten)]
    pub leader: LeaderFlags,
}

impl Flags {
    /// The controller's configuration; an error names the flag out of range.
    pub fn controller_config(&self) -> Result<ControllerConfig, FlagError> {
        Ok(ControllerConfig {
            lifecycle: self.lifecycle()?,
            unit_source: self.edge_rule.unit_source(),
            edge_health_config_namespace: self.edge_rule.edge_health_config_namespace.clone(),
            ..Default::default()
        })
    }

    fn lifecycle(&self) -> Result<LifecycleConfig, FlagError> {
        if !(0.0..=1.0).contains(&self.unhealthy_zone_threshold) {
            return Err(FlagError(format!(
                "--unhealthy-zone-threshold must be within [0, 1], got {}",
                self.unhealthy_zone_threshold
            )));
        }
        if self.node_eviction_rate < 0.0 || self.secondary_node_eviction_rate < 0.0 {
            return Err(FlagError("eviction rates must not be negative".into()));
        }
        Ok(LifecycleConfig {
            monitor_period: self.node_monitor_period,
            grace_period: self.node_monitor_grace_period,
            startup_grace_period: self.node_startup_grace_period,
            unhealthy_zone_threshold: self.unhealthy_zone_threshold,
            large_cluster_threshold: self.large_cluster_size_threshold,
            eviction_rate: self.node_eviction_rate,
            secondary_eviction_rate: self.secondary_node_eviction_rate,
            max_unreachable_protection: self.edge_rule.max_unreachable_protection,
        })
    }
}
