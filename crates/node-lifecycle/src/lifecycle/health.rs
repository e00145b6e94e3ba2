//! Is a node ready, judged the way the controller does: by when it last *saw* a
//! heartbeat change (its own clock), never by comparing the node's timestamps with its
//! own, so clock skew between cloud and edge cannot fake health or death.

use std::collections::HashMap;
use std::time::Duration;

use edgegrid_core::protection::Timestamp;
use tokio::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReadyStatus {
    True,
    False,
    Unknown,
}

/// What a node's objects say right now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeReport {
    /// The Ready condition's status as the kubelet last wrote it (`None`: never reported).
    pub ready: Option<ReadyStatus>,
    /// The Ready condition's `lastHeartbeatTime`, as an opaque value.
    pub heartbeat: Option<String>,
    /// The Ready condition's `lastTransitionTime`: for a condition that says Unknown,
    /// when the node went Unknown, which the edge rule's protection limit counts from. Not
    /// a heartbeat. The Unknown is written by the cloud-side controller, so comparing it
    /// with this controller's wall clock involves no edge clock.
    pub ready_transition: Option<Timestamp>,
    /// The node Lease's `renewTime`, as an opaque value.
    pub lease_renew: Option<String>,
}

#[derive(Clone, Debug)]
struct Seen {
    report: NodeReport,
    probe_at: Instant,
}

#[derive(Clone, Debug, Default)]
pub struct HealthTracker {
    nodes: HashMap<String, Seen>,
}

impl HealthTracker {
    /// Records a report; the probe timestamp moves only when a heartbeat changed (the
    /// Ready condition's heartbeat, the Lease, or the condition appearing or vanishing),
    /// not when the status alone changed: the controller's own "Unknown" write keeps the
    /// old heartbeat and must not count as one.
    pub fn observe(&mut self, node: &str, report: NodeReport, now: Instant) {
        match self.nodes.get_mut(node) {
            None => {
                self.nodes.insert(node.to_string(), Seen { report, probe_at: now });
            }
            Some(seen) => {
                let renewed = seen.report.heartbeat != report.heartbeat
                    || seen.report.lease_renew != report.lease_renew
                    || seen.report.ready.is_some() != report.ready.is_some();
                if renewed {
                    seen.probe_at = now;
                }
                seen.report = report;
            }
        }
    }

    /// Counts the grace period afresh from `now` (kube-controller-manager does this for
    /// every node when it leaves full disruption).
    pub fn reset_probe(&mut self, node: &str, now: Instant) {
        if let Some(seen) = self.nodes.get_mut(node) {
            seen.probe_at = now;
        }
    }

    /// The controller could not see for `blind` (its view of the nodes was not current):
    /// that time does not count against any node's grace period. Every probe timestamp
    /// moves forward by it; none was taken meanwhile (no pass runs on a view that is not
    /// current), so none moves past now. A status already written Unknown stays so.
    pub fn discount_blind(&mut self, blind: Duration) {
        for seen in self.nodes.values_mut() {
            seen.probe_at += blind;
        }
    }

    pub fn forget(&mut self, node: &str) {
        self.nodes.remove(node);
    }

    /// The node's readiness at `now`: Unknown once no heartbeat was seen for the grace
    /// period (the startup grace period if the node never reported Ready at all).
    pub fn status(&self, node: &str, now: Instant, grace: Duration, startup_grace: Duration) -> ReadyStatus {
        let Some(seen) = self.nodes.get(node) else {
            return ReadyStatus::Unknown;
        };
        let grace = if seen.report.ready.is_none() { startup_grace } else { grace };
        if now.saturating_duration_since(seen.probe_at) > grace {
            return ReadyStatus::Unknown;
        }
        seen.report.ready.unwrap_or(ReadyStatus::Unknown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(50);
    const STARTUP: Duration = Duration::from_secs(60);

    fn report(ready: Option<ReadyStatus>, heartbeat: &str, lease: &str) -> NodeReport {
        NodeReport { ready, heartbeat: Some(heartbeat.into()), lease_renew: Some(lease.into()), ready_transition: None }
    }

    #[test]
    fn grace_period_from_the_last_observed_change() {
        let mut tracker = HealthTracker::default();
        let t0 = Instant::now();
        let s = |d: u64| t0 + Duration::from_secs(d);
        tracker.observe("n", report(Some(ReadyStatus::True), "h1", "l1"), s(0));
        assert_eq!(tracker.status("n", s(50), GRACE, STARTUP), ReadyStatus::True);
        assert_eq!(tracker.status("n", s(51), GRACE, STARTUP), ReadyStatus::Unknown);
        // the same report again is not a heartbeat
        tracker.observe("n", report(Some(ReadyStatus::True), "h1", "l1"), s(40));
        assert_eq!(tracker.status("n", s(51), GRACE, STARTUP), ReadyStatus::Unknown);
        // nor is the controller's own Unknown write (same heartbeat)
        tracker.observe("n", report(Some(ReadyStatus::Unknown), "h1", "l1"), s(55));
        assert_eq!(tracker.status("n", s(56), GRACE, STARTUP), ReadyStatus::Unknown);
        // a lease renewal alone is
        tracker.observe("n", report(Some(ReadyStatus::True), "h1", "l2"), s(60));
        assert_eq!(tracker.status("n", s(100), GRACE, STARTUP), ReadyStatus::True);
        assert_eq!(tracker.status("n", s(111), GRACE, STARTUP), ReadyStatus::Unknown);
    }

    #[test]
    fn time_the_controller_could_not_see_does_not_count() {
        let mut tracker = HealthTracker::default();
        let t0 = Instant::now();
        let s = |d: u64| t0 + Duration::from_secs(d);
        tracker.observe("alive", report(Some(ReadyStatus::True), "h", "l1"), s(0));
        tracker.observe("dead", report(Some(ReadyStatus::Unknown), "h", "l"), s(0));
        // blind from 10 to 70: without the discount every node would be silent at 70
        assert_eq!(tracker.status("alive", s(70), GRACE, STARTUP), ReadyStatus::Unknown);
        tracker.discount_blind(Duration::from_secs(60));
        assert_eq!(tracker.status("alive", s(70), GRACE, STARTUP), ReadyStatus::True);
        assert_eq!(tracker.status("alive", s(110), GRACE, STARTUP), ReadyStatus::True);
        assert_eq!(tracker.status("alive", s(111), GRACE, STARTUP), ReadyStatus::Unknown);
        // what was written Unknown stays Unknown
        assert_eq!(tracker.status("dead", s(70), GRACE, STARTUP), ReadyStatus::Unknown);
    }

    #[test]
    fn reported_status_and_startup_grace() {
        let mut tracker = HealthTracker::default();
        let t0 = Instant::now();
        let s = |d: u64| t0 + Duration::from_secs(d);
        tracker.observe("new", NodeReport::default(), s(0));
        assert_eq!(tracker.status("new", s(59), GRACE, STARTUP), ReadyStatus::Unknown, "never reported: Unknown");
        tracker.observe("sick", report(Some(ReadyStatus::False), "h", "l"), s(0));
        assert_eq!(tracker.status("sick", s(10), GRACE, STARTUP), ReadyStatus::False);
        assert_eq!(tracker.status("ghost", s(0), GRACE, STARTUP), ReadyStatus::Unknown);
        tracker.forget("sick");
        assert_eq!(tracker.status("sick", s(10), GRACE, STARTUP), ReadyStatus::Unknown);
    }
}
