use std::time::Duration;

use edgegrid_core::protection::ProtectionLimit;

/// Flags of the node lifecycle controller, with Kubernetes' defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct LifecycleConfig {
    /// `--node-monitor-period`
    pub monitor_period: Duration,
    /// `--node-monitor-grace-period` (50 s since v1.32)
    pub grace_period: Duration,
    /// `--node-startup-grace-period`
    pub startup_grace_period: Duration,
    /// `--unhealthy-zone-threshold`
    pub unhealthy_zone_threshold: f64,
    /// `--large-cluster-size-threshold`
    pub large_cluster_threshold: usize,
    /// `--node-eviction-rate` (nodes per second)
    pub eviction_rate: f64,
    /// `--secondary-node-eviction-rate`
    pub secondary_eviction_rate: f64,
    /// `--max-unreachable-protection`: the cluster-wide default of the longest a node may
    /// stay Unknown and still be protected by the edge rule; a node's
    /// `superedge.io/max-unreachable-protection` annotation overrides it. Unlimited (`0`)
    /// by default, SuperEdge's behaviour.
    pub max_unreachable_protection: ProtectionLimit,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        Self {
            monitor_period: Duration::from_secs(5),
            grace_period: Duration::from_secs(50),
            startup_grace_period: Duration::from_secs(60),
            unhealthy_zone_threshold: 0.55,
            large_cluster_threshold: 50,
            eviction_rate: 0.1,
            secondary_eviction_rate: 0.01,
            max_unreachable_protection: ProtectionLimit::Unlimited,
        }
    }
}
