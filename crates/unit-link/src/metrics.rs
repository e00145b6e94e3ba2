//! What the unit link counts: where the upstream comes from, leading, the standby, the
//! signer's batches and the bytes received. The wrapper registers these with its own
//! families, in one registry under its own prefix (`grid_wrapper_upstream_source`,
//! `grid_wrapper_unit_leading`, ...); the unit listener counts apart
//! (`unit_server::UnitServerMetrics`).

use controller_support::metrics::Register;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// [`Stream::name`](crate::stream::Stream::name)
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StreamLabel {
    pub stream: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    /// cloud, leader
    pub source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// taken, again, too_old, or why a batch was refused
    pub result: &'static str,
}

#[derive(Default)]
pub struct LinkMetrics {
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

impl Register for LinkMetrics {
    fn register(&self, registry: &mut Registry) {
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
