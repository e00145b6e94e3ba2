//! The webhook's metrics: reviews by hook and outcome, patches emitted, latency.

use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReviewLabels {
    pub hook: &'static str,
    /// patched, unchanged, wrong_request, undecodable, nodes_not_synced, malformed
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HookLabel {
    pub hook: &'static str,
}

pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
    pub reviews: Family<ReviewLabels, Counter>,
    /// JSON patch operations emitted, by hook.
    pub patch_operations: Family<HookLabel, Counter>,
    pub review_duration: Family<HookLabel, Histogram>,
    pub cached_nodes: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("edge_health_admission");
        let metrics = Self {
            registry: Arc::default(),
            reviews: Family::default(),
            patch_operations: Family::default(),
            review_duration: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.000_01, 3.0, 10))),
            cached_nodes: Gauge::default(),
        };
        registry.register("reviews", "AdmissionReviews answered, by hook and outcome", metrics.reviews.clone());
        registry.register(
            "patch_operations",
            "JSON patch operations emitted, by hook",
            metrics.patch_operations.clone(),
        );
        registry.register(
            "review_duration_seconds",
            "Time to decide and encode one review",
            metrics.review_duration.clone(),
        );
        registry.register("cached_nodes", "Nodes in the verdict cache", metrics.cached_nodes.clone());
        *metrics.registry.lock().unwrap_or_else(|p| p.into_inner()) = registry;
        metrics
    }
}

impl Metrics {
    pub fn registry(&self) -> Arc<Mutex<Registry>> {
        self.registry.clone()
    }
}
