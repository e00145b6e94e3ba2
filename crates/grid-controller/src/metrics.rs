//! Prometheus metrics of the grid controllers.

use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    kind: String,
    error: String,
}

pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
    reconciles: Family<KindLabels, Counter>,
    failures: Family<FailureLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let reconciles = Family::<KindLabels, Counter>::default();
        let failures = Family::<FailureLabels, Counter>::default();
        let mut registry = Registry::with_prefix("grid_controller");
        registry.register("reconciles", "Reconciles started, by grid kind", reconciles.clone());
        registry.register("reconcile_failures", "Failed reconciles, by grid kind and cause", failures.clone());
        Self { registry: Arc::new(Mutex::new(registry)), reconciles, failures }
    }
}

impl Metrics {
    pub fn reconciled(&self, kind: &str) {
        self.reconciles.get_or_create(&KindLabels { kind: kind.into() }).inc();
    }

    pub fn failed(&self, kind: &str, error: &str) {
        self.failures.get_or_create(&FailureLabels { kind: kind.into(), error: error.into() }).inc();
    }

    pub fn registry(&self) -> Arc<Mutex<Registry>> {
        self.registry.clone()
    }

    pub fn encode(&self) -> String {
        controller_support::probes::encode(&self.registry)
    }
}
