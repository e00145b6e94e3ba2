//! The wrapper's metrics, registered once and shared by the upstream loop and the server;
//! the unit link's own ([`LinkMetrics`]) are registered with them, under the same prefix.

use controller_support::metrics::Register;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use unit_link::metrics::{LinkMetrics, StreamLabel};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    pub kind: &'static str,
    /// ADDED, MODIFIED, DELETED
    pub r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// ok, error
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// [`PersistError::metric_label`](crate::persist::PersistError::metric_label)
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    pub code: u16,
}

pub struct Metrics {
    /// Objects served, by kind.
    pub cached_objects: Family<KindLabel, Gauge>,
    /// Upstream watch events taken, by stream.
    pub upstream_events: Family<StreamLabel, Counter>,
    /// Upstream watch failures (each followed by a retry with backoff), by stream.
    pub upstream_errors: Family<StreamLabel, Counter>,
    /// 1 while a stream's watch is established and has listed, 0 while it retries.
    pub upstream_synced: Family<StreamLabel, Gauge>,
    /// Changes served to watchers, by kind and event type.
    pub served_events: Family<EventLabels, Counter>,
    /// Pruned objects whose form changed.
    pub repruned_objects: Counter,
    /// Time to apply one upstream event through the topology view and commit its changes.
    pub reprune_duration: Histogram,
    /// Open downstream watches, by kind.
    pub watchers: Family<KindLabel, Gauge>,
    /// 1 while the served view is one restored from --cache-dir (the upstream has not
    /// synced since start).
    pub serving_restored: Gauge,
    /// Requests passed through to the upstream, by response code (0: upstream unreachable).
    pub proxied_requests: Family<CodeLabel, Counter>,
    /// Inputs the cache refused (an object without a name).
    pub rejected_inputs: Counter,
    /// Requests outside the pass-through allow-list, answered 403.
    pub refused_requests: Counter,
    /// Reads of the local edge-health verdicts (`--edge-health-url`), by result.
    pub verdict_polls: Family<ResultLabel, Counter>,
    /// Nodes the local unit votes down, whose endpoints are not served.
    pub nodes_down: Gauge,
    /// Saved views not restored at start, by reason.
    pub saved_view_refused: Family<ReasonLabel, Counter>,
    /// The unit link's: where the upstream comes from, leading, the standby, the signer's
    /// batches, and the bytes received from the cloud or the leader.
    pub link: LinkMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            cached_objects: Family::default(),
            upstream_events: Family::default(),
            upstream_errors: Family::default(),
            upstream_synced: Family::default(),
            served_events: Family::default(),
            repruned_objects: Counter::default(),
            reprune_duration: Histogram::new(exponential_buckets(0.000_005, 4.0, 10)),
            watchers: Family::default(),
            serving_restored: Gauge::default(),
            proxied_requests: Family::default(),
            rejected_inputs: Counter::default(),
            refused_requests: Counter::default(),
            verdict_polls: Family::default(),
            nodes_down: Gauge::default(),
            saved_view_refused: Family::default(),
            link: LinkMetrics::default(),
        }
    }
}

impl Register for Metrics {
    fn register(&self, registry: &mut Registry) {
        registry.register("cached_objects", "Objects served, by kind", self.cached_objects.clone());
        registry.register("upstream_events", "Upstream watch events taken, by stream", self.upstream_events.clone());
        registry.register(
            "upstream_errors",
            "Upstream watch failures, each retried with backoff",
            self.upstream_errors.clone(),
        );
        registry.register(
            "upstream_synced",
            "1 while a stream's upstream watch is established and listed",
            self.upstream_synced.clone(),
        );
        registry.register("served_events", "Changes served to watchers", self.served_events.clone());
        registry.register("repruned_objects", "Pruned objects whose form changed", self.repruned_objects.clone());
        registry.register(
            "reprune_duration_seconds",
            "Time to apply one upstream event through the topology view and commit it",
            self.reprune_duration.clone(),
        );
        registry.register("watchers", "Open downstream watches", self.watchers.clone());
        registry.register(
            "serving_restored",
            "1 while serving the view restored from --cache-dir, before the first upstream sync",
            self.serving_restored.clone(),
        );
        registry.register(
            "proxied_requests",
            "Requests passed through upstream, by response code (0: upstream unreachable)",
            self.proxied_requests.clone(),
        );
        registry.register("rejected_inputs", "Upstream objects the cache refused", self.rejected_inputs.clone());
        registry.register(
            "refused_requests",
            "Requests outside the pass-through allow-list (discovery, /version, ServiceCIDR reads, Event writes), answered 403",
            self.refused_requests.clone(),
        );
        registry.register(
            "edge_health_verdict_polls",
            "Reads of the local edge-health verdicts, by result",
            self.verdict_polls.clone(),
        );
        registry.register(
            "nodes_down",
            "Nodes the local unit votes down; their endpoints are not served",
            self.nodes_down.clone(),
        );
        registry.register(
            "saved_view_refused",
            "Views saved in --cache-dir not restored at start, by reason: other_cluster (saved for another \
             cluster: its --kubeconfig or in-cluster API server URL and CA bundle differ), other_node, \
             unreadable (including over --cache-max-bytes), malformed",
            self.saved_view_refused.clone(),
        );
        // the link's last, as they were registered before it had a crate of its own
        self.link.register(registry);
    }
}

impl Metrics {}

/// Counts one open watch for as long as it lives.
pub struct WatcherGuard(Gauge);

impl WatcherGuard {
    pub fn new(gauge: Gauge) -> Self {
        gauge.inc();
        Self(gauge)
    }
}

impl Drop for WatcherGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}
