//! Prometheus metrics of the controller, served on `/metrics` (the runtime adds
//! `edge_node_lifecycle_leader`).

use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use node_lifecycle::lifecycle::ZoneState;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ZoneLabels {
    region: String,
    zone: String,
    state: String,
}

pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
    actions: Family<ActionLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    zones: Family<ZoneLabels, Gauge>,
    pub evictions: Counter,
    pub monitor_passes: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("edge_node_lifecycle");
        let metrics = Self {
            actions: Family::default(),
            errors: Family::default(),
            zones: Family::default(),
            evictions: Counter::default(),
            monitor_passes: Counter::default(),
            registry: Arc::default(),
        };
        registry.register("actions", "Node writes by kind (mark_unknown, add_taint, ...)", metrics.actions.clone());
        registry.register("errors", "Failed writes and evictions by cause", metrics.errors.clone());
        registry.register("zone_state", "1 for the current disruption state of each zone", metrics.zones.clone());
        registry.register("evictions", "Pods deleted by the taint manager", metrics.evictions.clone());
        registry.register("monitor_passes", "Node monitor passes run", metrics.monitor_passes.clone());
        Self { registry: Arc::new(Mutex::new(registry)), ..metrics }
    }
}

impl Metrics {
    pub fn action(&self, action: &str) {
        self.actions.get_or_create(&ActionLabels { action: action.into() }).inc();
    }

    pub fn error(&self, error: &str) {
        self.errors.get_or_create(&ErrorLabels { error: error.into() }).inc();
    }

    pub fn set_zone_state(&self, region: &str, zone: &str, state: ZoneState) {
        for candidate in
            [ZoneState::Initial, ZoneState::Normal, ZoneState::PartialDisruption, ZoneState::FullDisruption]
        {
            let labels = ZoneLabels { region: region.into(), zone: zone.into(), state: format!("{candidate:?}") };
            self.zones.get_or_create(&labels).set(i64::from(candidate == state));
        }
    }

    /// The registry, to serve on `/metrics`.
    pub fn registry(&self) -> Arc<Mutex<Registry>> {
        self.registry.clone()
    }

    pub fn encode(&self) -> String {
        controller_support::admin::encode(&self.registry)
    }
}
