//! The edge rule's cluster-wide settings, alike on every cloud component that applies it
//! (the admission webhook and the edge-aware node lifecycle controller). With the `cli`
//! feature they are clap arguments, so both binaries take the same flags with the same help.

use crate::protection::ProtectionLimit;
use crate::unit::membership::UnitSource;

#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct EdgeRuleFlags {
    /// The longest a node may stay Ready=Unknown and still be protected while its unit's
    /// peers see it alive (e.g. 30m, 2h), counted from the Ready condition's
    /// lastTransitionTime; past it the node is handled as stock Kubernetes would. 0 is
    /// unlimited (SuperEdge's behaviour). A node's superedge.io/max-unreachable-protection
    /// annotation may only shorten it.
    #[cfg_attr(feature = "cli", arg(long, default_value = "0", value_parser = ProtectionLimit::parse))]
    pub max_unreachable_protection: ProtectionLimit,
    /// The node label key edge-health groups units by (its own --unit-label-key); empty:
    /// SuperEdge's node units (<unit>=nodeunits.superedge.io) with the edge-health-config
    /// ConfigMap. Only nodes edge-health watches (with a peer of their unit running it) can
    /// be protected; every other node is handled as stock Kubernetes does.
    #[cfg_attr(feature = "cli", arg(long, default_value = ""))]
    pub unit_label_key: String,
    /// Namespace of the edge-health-config ConfigMap (read only for SuperEdge node units).
    #[cfg_attr(feature = "cli", arg(long, default_value = "kube-system"))]
    pub edge_health_config_namespace: String,
}

impl EdgeRuleFlags {
    pub fn unit_source(&self) -> UnitSource {
        UnitSource::from_flag(&self.unit_label_key)
    }
}
