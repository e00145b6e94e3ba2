//! Prometheus metrics of the grid controllers, served on `/metrics` (the runtime adds
//! `grid_controller_leader`).

use controller_support::metrics::Register;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
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

type DurationHistograms = Family<KindLabels, Histogram, fn() -> Histogram>;

pub struct Metrics {
    reconciles: Family<KindLabels, Counter>,
    failures: Family<FailureLabels, Counter>,
    durations: DurationHistograms,
    status_subresource_missing: Family<KindLabels, Gauge>,
}

/// 5 ms .. ~20 s: an SSA round trip to a near API server up to a large grid over a slow link.
fn reconcile_duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 13))
}

impl Default for Metrics {
    fn default() -> Self {
        let durations: DurationHistograms = Family::new_with_constructor(reconcile_duration_histogram);
        Self {
            reconciles: Family::default(),
            failures: Family::default(),
            durations,
            status_subresource_missing: Family::default(),
        }
    }
}

impl Register for Metrics {
    fn register(&self, registry: &mut Registry) {
        registry.register("reconciles", "Reconciles started, by grid kind", self.reconciles.clone());
        registry.register("reconcile_failures", "Failed reconciles, by grid kind and cause", self.failures.clone());
        registry.register_with_unit(
            "reconcile_duration",
            "How long reconciles took, by grid kind",
            prometheus_client::registry::Unit::Seconds,
            self.durations.clone(),
        );
        registry.register(
            "status_subresource_missing",
            "1 while the grid kind's CRD serves no status subresource (SuperEdge's CRDs): its status is not written",
            self.status_subresource_missing.clone(),
        );
    }
}

impl Metrics {
    pub fn reconciled(&self, kind: &str) {
        self.reconciles.get_or_create(&KindLabels { kind: kind.into() }).inc();
    }

    pub fn failed(&self, kind: &str, error: &str) {
        self.failures.get_or_create(&FailureLabels { kind: kind.into(), error: error.into() }).inc();
    }

    pub fn observe_reconcile(&self, kind: &str, seconds: f64) {
        self.durations.get_or_create(&KindLabels { kind: kind.into() }).observe(seconds);
    }

    /// Whether `kind`'s CRD is known to lack the status subresource.
    pub fn status_subresource_missing(&self, kind: &str, missing: bool) {
        self.status_subresource_missing.get_or_create(&KindLabels { kind: kind.into() }).set(i64::from(missing));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconcile_durations_are_a_histogram_in_seconds_by_kind() {
        let metrics = Metrics::default();
        metrics.observe_reconcile("ServiceGrid", 0.003);
        metrics.observe_reconcile("ServiceGrid", 0.25);
        let text = controller_support::metrics::exposition("grid-controller", &metrics);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.contains(&"# TYPE grid_controller_reconcile_duration_seconds histogram"), "{text}");
        assert!(lines.contains(&r#"grid_controller_reconcile_duration_seconds_count{kind="ServiceGrid"} 2"#), "{text}");
        assert!(
            lines.contains(&r#"grid_controller_reconcile_duration_seconds_bucket{le="0.005",kind="ServiceGrid"} 1"#),
            "{text}"
        );
        assert!(
            lines.contains(&r#"grid_controller_reconcile_duration_seconds_bucket{le="0.32",kind="ServiceGrid"} 2"#),
            "{text}"
        );
    }
}
