//! The webhook's metrics: reviews by hook and outcome, patches emitted, latency; in the
//! self-managed certificate mode, certificates issued, the served one's expiry, caBundle
//! patches and failed attempts.

use controller_support::metrics::Register;
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IssuedLabel {
    /// ca or serving
    pub kind: &'static str,
}

impl IssuedLabel {
    pub const CA: Self = Self { kind: "ca" };
    pub const SERVING: Self = Self { kind: "serving" };
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RemovalLabel {
    /// removed, conflict (the node changed, or another replica removed it), error
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictWriteLabels {
    /// unhealthy (nodeunhealth=yes added), healthy (removed)
    pub verdict: &'static str,
    /// written, conflict (the node changed, or another replica wrote it), error
    pub outcome: &'static str,
}

pub struct Metrics {
    /// `nodeunhealth` verdicts written from the unit members' published views.
    pub verdict_writes: Family<VerdictWriteLabels, Counter>,
    /// Unreachable NoExecute taints removed from protected nodes by the cloud-side remover.
    pub unreachable_taint_removals: Family<RemovalLabel, Counter>,
    pub reviews: Family<ReviewLabels, Counter>,
    /// JSON patch operations emitted, by hook.
    pub patch_operations: Family<HookLabel, Counter>,
    pub review_duration: Family<HookLabel, Histogram>,
    pub cached_nodes: Gauge,
    /// Self-managed mode: certificates this replica issued (and wrote, or lost to another
    /// replica), by kind.
    pub certificates_issued: Family<IssuedLabel, Counter>,
    /// Self-managed mode: `notAfter` of the serving certificate served, Unix seconds.
    pub certificate_expiry: Gauge,
    /// Self-managed mode: JSON patches that set caBundle.
    pub ca_bundle_patches: Counter,
    /// Self-managed mode: looks at the Secret that failed (retried with a backoff).
    pub certificate_errors: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            verdict_writes: Family::default(),
            unreachable_taint_removals: Family::default(),
            reviews: Family::default(),
            patch_operations: Family::default(),
            review_duration: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.000_01, 3.0, 10))),
            cached_nodes: Gauge::default(),
            certificates_issued: Family::default(),
            certificate_expiry: Gauge::default(),
            ca_bundle_patches: Counter::default(),
            certificate_errors: Counter::default(),
        }
    }
}

impl Register for Metrics {
    fn register(&self, registry: &mut Registry) {
        registry.register("reviews", "AdmissionReviews answered, by hook and outcome", self.reviews.clone());
        registry.register(
            "verdict_writes",
            "nodeunhealth verdicts written from the unit members' published views, by verdict and outcome",
            self.verdict_writes.clone(),
        );
        registry.register(
            "unreachable_taint_removals",
            "Unreachable NoExecute taints the remover took off protected nodes, by outcome",
            self.unreachable_taint_removals.clone(),
        );
        registry.register("patch_operations", "JSON patch operations emitted, by hook", self.patch_operations.clone());
        registry.register(
            "review_duration_seconds",
            "Time to decide and encode one review",
            self.review_duration.clone(),
        );
        registry.register("cached_nodes", "Nodes in the verdict cache", self.cached_nodes.clone());
        registry.register(
            "certificates_issued",
            "Self-managed certificates issued by this replica, by kind (ca, serving)",
            self.certificates_issued.clone(),
        );
        registry.register(
            "certificate_expiry_seconds",
            "notAfter of the self-managed serving certificate served, Unix time",
            self.certificate_expiry.clone(),
        );
        registry.register(
            "ca_bundle_patches",
            "Patches setting the MutatingWebhookConfiguration's caBundle to the self-managed CA",
            self.ca_bundle_patches.clone(),
        );
        registry.register(
            "certificate_errors",
            "Failed attempts to keep the self-managed certificate (retried)",
            self.certificate_errors.clone(),
        );
    }
}

impl Metrics {
    pub fn issued(&self, kind: IssuedLabel) {
        self.certificates_issued.get_or_create(&kind).inc();
    }
}
