//! The wrapper's metrics, registered once and shared by the upstream loop and the server.

use controller_support::metrics::Register;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

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
pub struct StreamLabel {
    pub stream: &'static str,
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
pub struct SourceLabel {
    pub source: &'static str,
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
    /// Body bytes received from the upstream (the cloud or the unit's leader), by stream.
    pub upstream_bytes: Family<StreamLabel, Counter>,
    /// 1 for where the upstream objects come from now (`cloud` or the unit's `leader`).
    pub upstream_source: Family<SourceLabel, Gauge>,
    /// Whether this wrapper leads its unit.
    pub unit_leading: Gauge,
    /// 1 while this wrapper keeps a replica of its leader's log (it is next in line).
    pub unit_standby: Gauge,
    /// Terms of leadership begun from a replica (the followers could resume).
    pub unit_standby_promotions: Counter,
    /// Changes of where the upstream comes from (another leader, leading, the cloud).
    pub unit_leader_changes: Counter,
    /// The unit signer's batches a leader served this follower, by result (`taken`,
    /// `again`, or why refused).
    pub unit_vouch_batches: Family<ResultLabel, Counter>,
    /// 1 while no key of --unit-vouch-keys verifies the signer's batches, the cloud's copy
    /// included (this wrapper then watches the cloud alone), until a batch is taken.
    pub unit_vouch_keys_refused: Gauge,
    /// Unit members edge-health sees alive whose unit port refuses connections from here
    /// for longer than a pass-over (their wrapper is down, not sharing, or serves another
    /// port: every member must use the same --unit-upstream-bind-address port).
    pub unit_members_not_listening: Gauge,
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
            upstream_bytes: Family::default(),
            upstream_source: Family::default(),
            unit_leading: Gauge::default(),
            unit_standby: Gauge::default(),
            unit_standby_promotions: Counter::default(),
            unit_leader_changes: Counter::default(),
            unit_vouch_batches: Family::default(),
            unit_vouch_keys_refused: Gauge::default(),
            unit_members_not_listening: Gauge::default(),
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
        registry.register(
            "upstream_bytes",
            "Body bytes received from the upstream (the cloud API server or the unit's leader), by stream",
            self.upstream_bytes.clone(),
        );
        registry.register(
            "upstream_source",
            "1 for where the upstream objects come from now: the cloud API server, or the unit's leader",
            self.upstream_source.clone(),
        );
        registry.register("unit_leading", "1 while this wrapper leads its unit's upstream", self.unit_leading.clone());
        registry.register(
            "unit_standby",
            "1 while this wrapper keeps a replica of its unit leader's log, as the next in line",
            self.unit_standby.clone(),
        );
        registry.register(
            "unit_standby_promotions",
            "Terms of leadership this wrapper began from its replica of the previous leader's log",
            self.unit_standby_promotions.clone(),
        );
        registry.register(
            "unit_vouch_batches",
            "Signed batches of the unit signer a leader served, by result (taken, again, or why refused)",
            self.unit_vouch_batches.clone(),
        );
        registry.register(
            "unit_vouch_keys_refused",
            "1 while no key of --unit-vouch-keys verifies the unit signer's batches, the cloud's copy \
             included (the wrapper watches the cloud alone meanwhile)",
            self.unit_vouch_keys_refused.clone(),
        );
        registry.register(
            "unit_members_not_listening",
            "Unit members seen alive whose unit port has refused connections from here for long: \
             their wrapper is down, not sharing, or uses another --unit-upstream-bind-address port",
            self.unit_members_not_listening.clone(),
        );
        registry.register(
            "unit_leader_changes",
            "Changes of the unit upstream: another leader, this wrapper leading, or the cloud",
            self.unit_leader_changes.clone(),
        );
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
