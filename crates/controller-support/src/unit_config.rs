//! The `edge-health-config` ConfigMap, followed for the cloud components that must agree
//! with edge-health on which units are checked (`edgegrid_core::membership`): SuperEdge
//! node units are checked as that ConfigMap says, so whom the edge rule may protect
//! depends on it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use edgegrid_core::keys;
use edgegrid_core::membership::{NodeUnitCheck, UnitSource};
use edgegrid_core::protection::ProtectionLimit;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use crate::watch::{Index, Key, Watch};

/// The edge rule's cluster-wide flags, alike on every cloud component that applies it.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct EdgeRuleFlags {
    /// The longest a node may stay Ready=Unknown and still be protected while its unit's
    /// peers see it alive (e.g. 30m, 2h), counted from the Ready condition's
    /// lastTransitionTime; past it the node is handled as stock Kubernetes would. 0 is
    /// unlimited (SuperEdge's behaviour). A node's superedge.io/max-unreachable-protection
    /// annotation may only shorten it.
    #[arg(long, default_value = "0", value_parser = ProtectionLimit::parse)]
    pub max_unreachable_protection: ProtectionLimit,
    /// The node label key edge-health groups units by (its own --unit-label-key); empty:
    /// SuperEdge's node units (<unit>=nodeunits.superedge.io) with the edge-health-config
    /// ConfigMap. Only nodes edge-health watches (with a peer of their unit running it) can
    /// be protected; every other node is handled as stock Kubernetes does.
    #[arg(long, default_value = "")]
    pub unit_label_key: String,
    /// Namespace of the edge-health-config ConfigMap (read only for SuperEdge node units).
    #[arg(long, default_value = "kube-system")]
    pub edge_health_config_namespace: String,
}

impl EdgeRuleFlags {
    pub fn unit_source(&self) -> UnitSource {
        UnitSource::from_flag(&self.unit_label_key)
    }
}

/// Watches the ConfigMap in `namespace` (by name, with a field selector: RBAC may grant
/// just that one object) and calls `on_change` with what it says now: after every change,
/// deletion, and relist (a relist that finds none: no ConfigMap). `synced` turns true once
/// the first list is in, before `on_change` hears of it. Runs until the task is dropped.
pub async fn follow_edge_health_config(
    client: kube::Client,
    namespace: &str,
    synced: Arc<AtomicBool>,
    mut on_change: impl FnMut(NodeUnitCheck),
) {
    let on_data = move |data: Option<&BTreeMap<String, String>>| on_change(NodeUnitCheck::from_config_map(data));
    follow_edge_health_config_data(client, namespace, on_data, move || synced.store(true, Ordering::SeqCst)).await
}

/// As [`follow_edge_health_config`], with the ConfigMap's data itself (`None`: there is
/// none) for a reader that keeps it; `synced` is called after every complete (re)list,
/// before `on_change` hears of it.
pub async fn follow_edge_health_config_data(
    client: kube::Client,
    namespace: &str,
    on_change: impl FnMut(Option<&BTreeMap<String, String>>),
    synced: impl FnMut(),
) {
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    let selector = format!("metadata.name={}", keys::EDGE_HEALTH_CONFIGMAP);
    let feed = ConfigFeed { listing: None, on_change, synced };
    Watch::new(api).fields(&selector).named(keys::EDGE_HEALTH_CONFIGMAP).run(feed).await
}

/// The one ConfigMap's data: a relist is applied at its end, so it is one change.
struct ConfigFeed<C, S> {
    /// While a list is in progress: what it found so far.
    listing: Option<Option<BTreeMap<String, String>>>,
    on_change: C,
    synced: S,
}

impl<C, S> Index<ConfigMap> for ConfigFeed<C, S>
where
    C: FnMut(Option<&BTreeMap<String, String>>),
    S: FnMut(),
{
    fn begin(&mut self) {
        self.listing = Some(None);
    }

    fn apply(&mut self, map: ConfigMap) {
        let data = map.data.unwrap_or_default();
        match self.listing.as_mut() {
            Some(listed) => *listed = Some(data),
            None => (self.on_change)(Some(&data)),
        }
    }

    fn delete(&mut self, _: Key) {
        // in a list, absence is what `done` reports
        if self.listing.is_none() {
            (self.on_change)(None);
        }
    }

    fn done(&mut self) {
        let listed = self.listing.take().flatten();
        (self.synced)();
        (self.on_change)(listed.as_ref());
    }
}
