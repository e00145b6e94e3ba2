//! Indirect probing, as SWIM does it: before a checker accuses a node its direct probe
//! could not reach, it asks a few other members to probe that node; the accusation stands
//! only if none of them reaches it either. A lossy or broken path between two nodes then
//! does not make an accusation, a dead node still does.
//!
//! [`IndirectProbes`] is the checker's side as a state machine over its outstanding
//! accusations: direct result -> requests to send -> answers / deadline -> conclusion.
//! It never sends anything and reads no clock; the daemon sends the requests it returns
//! (signed, see [`crate::message`]) and feeds back answers and the time.
//!
//! Only answers from the helpers actually asked, for the request actually made, count: a
//! "reachable" answer nobody asked for cannot clear an accusation. And a "reachable" counts
//! only with the target's signature over this probe's own nonce ([`crate::liveness`]),
//! which the daemon checks (against [`IndirectProbes::challenge`]) before feeding the
//! answer: a helper cannot revive a dead node by saying so.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::liveness::Nonce;
use crate::time::{Period, Timestamp};

/// A request for the daemon to send: ask `helper` to probe `target`, quoting `id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeRequest {
    pub id: u64,
    pub helper: String,
    pub target: String,
    /// The checker's challenge for the target, for the helper to pass on.
    pub nonce: Nonce,
}

/// How a check of one target ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Basis {
    /// The direct probe reached it.
    Direct,
    /// The direct probe failed and this helper reached it.
    Helper(String),
    /// The direct probe failed and every helper asked said unreachable.
    AllHelpersFailed,
    /// The direct probe failed and the deadline passed before any helper reached it.
    Deadline,
    /// The direct probe failed and there was nobody to ask.
    NoHelpers,
}

/// A checker's verdict about one target for one period: its ballot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conclusion {
    pub target: String,
    pub period: Period,
    pub healthy: bool,
    pub basis: Basis,
}

/// What to do after a direct probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DirectStep {
    Concluded(Conclusion),
    /// Send these requests and wait for answers or the deadline.
    Ask(Vec<ProbeRequest>),
}

#[derive(Clone, Debug)]
struct Pending {
    target: String,
    period: Period,
    nonce: Nonce,
    waiting: BTreeSet<String>,
    deadline: Timestamp,
}

/// The checker's outstanding indirect probes.
#[derive(Clone, Debug)]
pub struct IndirectProbes {
    timeout: Duration,
    next_id: u64,
    pending: BTreeMap<u64, Pending>,
}

impl IndirectProbes {
    /// `timeout`: how long to wait for helpers after the direct probe failed.
    /// `first_id`: e.g. the start time, so ids do not repeat across restarts.
    pub fn new(timeout: Duration, first_id: u64) -> Self {
        Self { timeout, next_id: first_id, pending: BTreeMap::new() }
    }

    /// The direct probe of `target` (for `period`, challenged with `nonce`) ended;
    /// `helpers` are the members to ask if it failed (see
    /// [`crate::selection::Assignment::helpers`]): they pass the same nonce on.
    pub fn direct_result(
        &mut self,
        target: &str,
        period: Period,
        reachable: bool,
        nonce: Nonce,
        helpers: &[&str],
        now: Timestamp,
    ) -> DirectStep {
        let conclude =
            |healthy, basis| DirectStep::Concluded(Conclusion { target: target.to_string(), period, healthy, basis });
        if reachable {
            return conclude(true, Basis::Direct);
        }
        let waiting: BTreeSet<String> = helpers.iter().filter(|h| **h != target).map(|h| h.to_string()).collect();
        if waiting.is_empty() {
            return conclude(false, Basis::NoHelpers);
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let requests = waiting
            .iter()
            .map(|helper| ProbeRequest { id, helper: helper.clone(), target: target.to_string(), nonce })
            .collect();
        self.pending.insert(
            id,
            Pending { target: target.to_string(), period, nonce, waiting, deadline: now.saturating_add(self.timeout) },
        );
        DirectStep::Ask(requests)
    }

    /// A helper answered. Returns the conclusion when this answer settles it: the first
    /// "reachable" does, and so does the last "unreachable". Answers that match no
    /// outstanding request (unknown id, a helper not asked or already answered, another
    /// target) are ignored.
    pub fn answer(&mut self, helper: &str, id: u64, target: &str, reachable: bool) -> Option<Conclusion> {
        let pending = self.pending.get_mut(&id)?;
        if pending.target != target || !pending.waiting.remove(helper) {
            return None;
        }
        if reachable {
            let pending = self.pending.remove(&id)?;
            return Some(Conclusion {
                target: pending.target,
                period: pending.period,
                healthy: true,
                basis: Basis::Helper(helper.to_string()),
            });
        }
        if pending.waiting.is_empty() {
            let pending = self.pending.remove(&id)?;
            return Some(Conclusion {
                target: pending.target,
                period: pending.period,
                healthy: false,
                basis: Basis::AllHelpersFailed,
            });
        }
        None
    }

    /// The target and nonce of outstanding probe `id`: what a "reachable" answer to it
    /// must carry the target's signature over.
    pub fn challenge(&self, id: u64) -> Option<(&str, Nonce)> {
        self.pending.get(&id).map(|p| (p.target.as_str(), p.nonce))
    }

    /// Concludes (unhealthy) every probe whose deadline is at or before `now`.
    pub fn expire(&mut self, now: Timestamp) -> Vec<Conclusion> {
        let due: Vec<u64> = self.pending.iter().filter(|(_, p)| p.deadline <= now).map(|(id, _)| *id).collect();
        due.into_iter()
            .filter_map(|id| self.pending.remove(&id))
            .map(|p| Conclusion { target: p.target, period: p.period, healthy: false, basis: Basis::Deadline })
            .collect()
    }

    /// The earliest deadline, for the daemon's timer.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.pending.values().map(|p| p.deadline).min()
    }

    pub fn outstanding(&self) -> usize {
        self.pending.len()
    }
}

/// Whether to serve a peer's request to probe `target`: only nodes that are this node's
/// own peers, so a member cannot point the daemon at arbitrary addresses.
pub fn should_help(target: &str, is_peer: impl Fn(&str) -> bool) -> bool {
    is_peer(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = Timestamp::from_unix_millis(1_000_000);
    const P: Period = Period(7);
    const N: Nonce = Nonce([7; 16]);

    fn probes() -> IndirectProbes {
        IndirectProbes::new(Duration::from_secs(3), 100)
    }

    fn asked(step: DirectStep) -> Vec<ProbeRequest> {
        match step {
            DirectStep::Ask(requests) => requests,
            other => panic!("expected requests, got {other:?}"),
        }
    }

    fn conclusion(healthy: bool, basis: Basis) -> Conclusion {
        Conclusion { target: "x".into(), period: P, healthy, basis }
    }

    #[test]
    fn a_reachable_target_is_healthy_at_once() {
        let mut p = probes();
        assert_eq!(
            p.direct_result("x", P, true, N, &["a", "b"], T0),
            DirectStep::Concluded(conclusion(true, Basis::Direct))
        );
        assert_eq!(p.outstanding(), 0);
    }

    #[test]
    fn a_failed_direct_probe_asks_every_helper_once() {
        let mut p = probes();
        let requests = asked(p.direct_result("x", P, false, N, &["b", "a", "b", "x"], T0));
        assert_eq!(
            requests,
            vec![
                ProbeRequest { id: 100, helper: "a".into(), target: "x".into(), nonce: N },
                ProbeRequest { id: 100, helper: "b".into(), target: "x".into(), nonce: N },
            ],
            "duplicates and the target itself are not asked"
        );
        assert_eq!(p.next_deadline(), Some(T0.saturating_add(Duration::from_secs(3))));
        assert_eq!(p.challenge(100), Some(("x", N)), "what a reachable answer must prove");
        assert_eq!(p.challenge(101), None);
    }

    #[test]
    fn one_helper_reaching_the_target_clears_it() {
        let mut p = probes();
        asked(p.direct_result("x", P, false, N, &["a", "b", "c"], T0));
        assert_eq!(p.answer("a", 100, "x", false), None);
        assert_eq!(p.answer("b", 100, "x", true), Some(conclusion(true, Basis::Helper("b".into()))));
        assert_eq!(p.answer("c", 100, "x", false), None, "settled: late answers are ignored");
        assert_eq!(p.outstanding(), 0);
    }

    #[test]
    fn the_accusation_stands_when_no_helper_reaches_it() {
        let mut p = probes();
        asked(p.direct_result("x", P, false, N, &["a", "b"], T0));
        assert_eq!(p.answer("a", 100, "x", false), None);
        assert_eq!(p.answer("a", 100, "x", true), None, "a helper answers once");
        assert_eq!(p.answer("b", 100, "x", false), Some(conclusion(false, Basis::AllHelpersFailed)));
    }

    #[test]
    fn silence_until_the_deadline_is_an_accusation() {
        let mut p = probes();
        asked(p.direct_result("x", P, false, N, &["a", "b"], T0));
        assert_eq!(p.answer("a", 100, "x", false), None);
        assert!(p.expire(T0.saturating_add(Duration::from_millis(2_999))).is_empty());
        assert_eq!(p.expire(T0.saturating_add(Duration::from_secs(3))), vec![conclusion(false, Basis::Deadline)]);
        assert_eq!(p.answer("b", 100, "x", true), None, "too late");
        assert_eq!(p.next_deadline(), None);
    }

    #[test]
    fn without_helpers_the_direct_result_stands() {
        let mut p = probes();
        assert_eq!(
            p.direct_result("x", P, false, N, &[], T0),
            DirectStep::Concluded(conclusion(false, Basis::NoHelpers))
        );
        assert_eq!(
            p.direct_result("x", P, false, N, &["x"], T0),
            DirectStep::Concluded(conclusion(false, Basis::NoHelpers))
        );
    }

    #[test]
    fn answers_nobody_asked_for_are_ignored() {
        let mut p = probes();
        asked(p.direct_result("x", P, false, N, &["a"], T0));
        assert_eq!(p.answer("stranger", 100, "x", true), None, "helper not asked");
        assert_eq!(p.answer("a", 999, "x", true), None, "unknown id");
        assert_eq!(p.answer("a", 100, "y", true), None, "another target");
        assert_eq!(p.outstanding(), 1, "still waiting for the real answer");
        assert_eq!(p.answer("a", 100, "x", false), Some(conclusion(false, Basis::AllHelpersFailed)));
    }

    #[test]
    fn concurrent_accusations_are_independent() {
        let mut p = probes();
        let rx = asked(p.direct_result("x", P, false, N, &["a"], T0));
        let ry = asked(p.direct_result("y", Period(8), false, N, &["a"], T0.saturating_add(Duration::from_secs(1))));
        assert_ne!(rx[0].id, ry[0].id);
        assert_eq!(p.answer("a", ry[0].id, "y", true).map(|c| (c.target, c.period)), Some(("y".into(), Period(8))));
        let expired = p.expire(T0.saturating_add(Duration::from_secs(10)));
        assert_eq!(expired, vec![conclusion(false, Basis::Deadline)]);
    }

    #[test]
    fn helpers_only_probe_their_own_peers() {
        let peers = ["a", "b"];
        assert!(should_help("a", |n| peers.contains(&n)));
        assert!(!should_help("10.0.0.1", |n| peers.contains(&n)));
    }
}
