//! The daemon's metrics, prefixed `edge_health_`: probe attempts by check and result,
//! ballots cast, verdict changes and the current verdicts, messages accepted and
//! rejected (one label value per [`Rejection`]), messages sent, the vote latency, Node
//! writes by outcome, key reloads, kubelet-check TokenRequests and the requests SuperEdge's
//! edge-health components send a node running this daemon.

use controller_support::metrics::Register;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::paths::SUPEREDGE_PATHS;
use crate::ballot::BallotIgnored;
use crate::liveness::ProofRefused;
use crate::message::Rejection;
use crate::vote::Verdict;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeLabels {
    /// kubelet, http, https, tcp, grpc
    pub check: &'static str,
    /// success, failure, error (our side: an invalid probe)
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BallotLabels {
    /// healthy, unhealthy
    pub verdict: &'static str,
    /// direct, helper, all_helpers_failed, deadline, no_helpers
    pub basis: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabel {
    pub verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// results, probe_request, probe_answer
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// [`Rejection::metric_label`]; for declined probe requests: busy, not_checked
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SentLabels {
    pub kind: &'static str,
    /// delivered, refused (the peer answered 4xx), failed (no answer, 5xx), retried (a
    /// probe request attempt that failed and was sent again)
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    /// verdict (the `nodeunhealth` annotation), address (this node's own address and key
    /// annotations), view (its own view annotation, `--verdict-writer=cloud`)
    pub target: &'static str,
    /// written, conflict (the precondition failed: recomputed next period), failed
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PathLabel {
    /// One of [`SUPEREDGE_PATHS`].
    pub path: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// key reloads: loaded, unreadable, invalid; kubelet-check tokens: issued, failed
    pub result: &'static str,
}

pub struct Metrics {
    pub probes: Family<ProbeLabels, Counter>,
    /// Peers of the period's assignment not probed: their published address does not parse.
    pub probes_skipped: Counter,
    pub ballots: Family<BallotLabels, Counter>,
    pub verdict_changes: Family<VerdictLabel, Counter>,
    /// Members of this node's units by current verdict.
    pub verdicts: Family<VerdictLabel, Gauge>,
    pub peers: Gauge,
    pub messages_accepted: Family<KindLabel, Counter>,
    pub messages_rejected: Family<ReasonLabel, Counter>,
    pub messages_sent: Family<SentLabels, Counter>,
    /// From the first ballot against a standing verdict to the verdict's change.
    pub vote_latency: Histogram,
    pub writes: Family<WriteLabels, Counter>,
    pub key_reloads: Family<ResultLabel, Counter>,
    /// Peers' indirect probe requests declined, by reason.
    pub probe_requests_declined: Family<ReasonLabel, Counter>,
    /// Received ballots no vote table took, by [`BallotIgnored::metric_label`].
    pub ballots_refused: Family<ReasonLabel, Counter>,
    /// Frames whose rest was dropped after too many bad signatures.
    pub frames_dropped_for_forgeries: Counter,
    /// TokenRequests for the kubelet-check ServiceAccount, by result.
    pub kubelet_check_tokens: Family<ResultLabel, Counter>,
    /// Requests for SuperEdge's edge-health API (its daemons' `/result`, its grid
    /// wrapper's `/localinfo`), answered 410: a unit running both daemons.
    pub superedge_requests: Family<PathLabel, Counter>,
    /// Liveness proofs this node asked for or was handed, by result: verified, unanswered
    /// (no reply from the address), or a [`ProofRefused::metric_label`].
    pub liveness_proofs: Family<ResultLabel, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let metrics = Self {
            probes: Family::default(),
            probes_skipped: Counter::default(),
            ballots: Family::default(),
            verdict_changes: Family::default(),
            verdicts: Family::default(),
            peers: Gauge::default(),
            messages_accepted: Family::default(),
            messages_rejected: Family::default(),
            messages_sent: Family::default(),
            vote_latency: Histogram::new(exponential_buckets(0.05, 2.0, 14)),
            writes: Family::default(),
            key_reloads: Family::default(),
            probe_requests_declined: Family::default(),
            ballots_refused: Family::default(),
            frames_dropped_for_forgeries: Counter::default(),
            kubelet_check_tokens: Family::default(),
            superedge_requests: Family::default(),
            liveness_proofs: Family::default(),
        };
        for result in ["verified", "unanswered"].into_iter().chain(ProofRefused::ALL.map(ProofRefused::metric_label)) {
            let _ = metrics.liveness_proofs.get_or_create(&ResultLabel { result });
        }
        for path in SUPEREDGE_PATHS {
            let _ = metrics.superedge_requests.get_or_create(&PathLabel { path });
        }
        for refused in BallotIgnored::ALL {
            let _ = metrics.ballots_refused.get_or_create(&ReasonLabel { reason: refused.metric_label() });
        }
        // every rejection reason is visible at 0 before the first refusal
        for rejection in Rejection::ALL {
            let _ = metrics.messages_rejected.get_or_create(&ReasonLabel { reason: rejection.metric_label() });
        }
        for verdict in [Verdict::Undecided, Verdict::Healthy, Verdict::Unhealthy] {
            let _ = metrics.verdicts.get_or_create(&VerdictLabel { verdict: verdict.as_str() });
        }
        metrics
    }
}

impl Register for Metrics {
    fn register(&self, registry: &mut Registry) {
        registry.register("probes", "Probe attempts on peers, by check and result", self.probes.clone());
        registry.register(
            "probes_skipped",
            "Assigned peers not probed because their published address does not parse",
            self.probes_skipped.clone(),
        );
        registry.register("ballots", "Ballots this node cast, by verdict and basis", self.ballots.clone());
        registry.register("verdict_changes", "Verdict changes in this node's vote tables, by new verdict", {
            self.verdict_changes.clone()
        });
        registry.register("verdicts", "Members of this node's units by current verdict", self.verdicts.clone());
        registry.register("peers", "Members of this node's units, itself excluded", self.peers.clone());
        registry.register("messages_accepted", "Messages from peers accepted, by kind", self.messages_accepted.clone());
        registry.register("messages_rejected", "Messages refused, by reason", self.messages_rejected.clone());
        registry.register("messages_sent", "Messages sent to peers, by kind and result", self.messages_sent.clone());
        registry.register(
            "vote_latency_seconds",
            "Time from the first ballot against a standing verdict to the verdict's change",
            self.vote_latency.clone(),
        );
        registry.register("writes", "Node patches, by target and outcome", self.writes.clone());
        registry.register("key_reloads", "Reads of a changed --hmac-key-file, by result", self.key_reloads.clone());
        registry.register(
            "probe_requests_declined",
            "Peers' indirect probe requests this node declined: busy (at --max-concurrent-probe-requests), \
             not_checked (a node it does not check or cannot reach)",
            self.probe_requests_declined.clone(),
        );
        registry.register(
            "ballots_refused",
            "Received ballots no vote table took, by reason: bad_signature (forged, or signed under a key the \
             checker does not publish), no_public_key, own_ballot (naming this node as checker: gossip brings \
             its own back), future, stale, superseded, not_a_member, self_ballot",
            self.ballots_refused.clone(),
        );
        registry.register(
            "frames_dropped_for_forgeries",
            "Results frames whose remaining ballots were dropped after too many bad signatures",
            self.frames_dropped_for_forgeries.clone(),
        );
        registry.register(
            "superedge_requests",
            "Requests for SuperEdge's edge-health API answered 410 Gone, by path: /result (a SuperEdge \
             edge-health daemon of this node's unit sending its results: the unit runs both daemons), \
             /localinfo (SuperEdge's grid wrapper on this node), /probe",
            self.superedge_requests.clone(),
        );
        registry.register(
            "liveness_proofs",
            "Peers' signatures over this node's challenges (direct, or relayed by a helper), by result: \
             verified, unanswered, missing (a helper said reachable without one), other_challenge (made for \
             another checker or nonce), no_public_key, bad_signature (not the peer's key: an impostor at its \
             address, or a forgery)",
            self.liveness_proofs.clone(),
        );
        registry.register(
            "kubelet_check_tokens",
            "TokenRequests for the kubelet-check ServiceAccount's token (--kubelet-check-service-account), by \
             result: issued, failed",
            self.kubelet_check_tokens.clone(),
        );
    }
}

impl Metrics {
    pub fn rejected(&self, rejection: Rejection) {
        self.messages_rejected.get_or_create(&ReasonLabel { reason: rejection.metric_label() }).inc();
    }

    pub fn proof(&self, result: Result<(), ProofRefused>) {
        let result = result.map_or_else(ProofRefused::metric_label, |()| "verified");
        self.liveness_proofs.get_or_create(&ResultLabel { result }).inc();
    }

    pub fn ballot_refused(&self, refused: BallotIgnored) {
        self.ballots_refused.get_or_create(&ReasonLabel { reason: refused.metric_label() }).inc();
    }

    pub fn write(&self, target: &'static str, outcome: &'static str) {
        self.writes.get_or_create(&WriteLabels { target, outcome }).inc();
    }

    pub fn sent(&self, kind: &'static str, result: &'static str) {
        self.messages_sent.get_or_create(&SentLabels { kind, result }).inc();
    }
}
