//! Prometheus metrics of the controller, served on `/metrics` (the runtime adds
//! `edge_node_lifecycle_leader`).

use controller_support::metrics::Register;
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

#[derive(Default)]
pub struct Metrics {
    actions: Family<ActionLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    zones: Family<ZoneLabels, Gauge>,
    pub evictions: Counter,
    pub monitor_passes: Counter,
    /// 1 while the Node and Lease caches are current (judged from), 0 while not.
    pub view_current: Gauge,
}

impl Register for Metrics {
    fn register(&self, registry: &mut Registry) {
        registry.register("actions", "Node writes by kind (mark_unknown, add_taint, ...)", self.actions.clone());
        registry.register("errors", "Failed writes and evictions by cause", self.errors.clone());
        registry.register("zone_state", "1 for the current disruption state of each zone", self.zones.clone());
        registry.register("evictions", "Pods deleted by the taint manager", self.evictions.clone());
        registry.register("monitor_passes", "Node monitor passes run", self.monitor_passes.clone());
        registry.register(
            "view_current",
            "1 while the Node and Lease caches are current; 0 while a watch failed or relists (nothing is judged)",
            self.view_current.clone(),
        );
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
}
