//! One period's probes: whom this node checks, which helpers it asks when a direct probe
//! fails, and the ballot each probe concludes with.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use super::{AfterDirect, Cast, Daemon, OutgoingRequest, PlannedProbe, State};
use crate::ballot::Ballot;
use crate::daemon::metrics::BallotLabels;
use crate::indirect::{Basis, Conclusion, DirectStep};
use crate::liveness::Nonce;
use crate::time::{Period, Timestamp};
use crate::vote::Verdict;

impl Daemon {
    /// The peers this node probes in `period`: in every unit, its assigned targets and
    /// those it stands by for (see [`VoteTable::targets`](crate::vote::VoteTable::targets)).
    pub fn plan(&self, period: Period) -> Vec<PlannedProbe> {
        let mut st = self.lock();
        let st = &mut *st;
        let mut targets: BTreeMap<String, Option<SocketAddr>> = BTreeMap::new();
        for vote in st.units.values_mut() {
            let assignment = vote.schedule.assignment(period);
            for target in vote.table.targets(self.local(), period, &assignment) {
                targets.insert(target.to_string(), st.nodes.get(target).and_then(|n| n.address));
            }
        }
        targets.into_iter().map(|(target, address)| PlannedProbe { target, address }).collect()
    }

    /// The direct probe of `target` for `period` (challenged with `nonce`) ended: concludes,
    /// or returns the indirect requests to send (to helpers with an address, not held
    /// unhealthy), which pass the same nonce on.
    pub fn direct_result(
        &self,
        target: &str,
        period: Period,
        reachable: bool,
        nonce: Nonce,
        now: Timestamp,
    ) -> AfterDirect {
        let mut st = self.lock();
        let st = &mut *st;
        let local = self.local();
        let assignment = st.units.values_mut().find_map(|vote| {
            let assignment = vote.schedule.assignment(period);
            (assignment.contains(local) && assignment.contains(target)).then_some(assignment)
        });
        let helpers: Vec<String> = match &assignment {
            Some(assignment) => {
                let (units, nodes) = (&st.units, &st.nodes);
                let excluded = |h: &str| {
                    units.values().any(|v| v.table.verdict(h) == Verdict::Unhealthy)
                        || nodes.get(h).and_then(|n| n.address).is_none()
                };
                let count = self.settings.protocol.indirect_helpers;
                assignment.helpers(local, target, count, excluded).into_iter().map(str::to_string).collect()
            }
            None => Vec::new(),
        };
        let helpers: Vec<&str> = helpers.iter().map(String::as_str).collect();
        match st.indirect.direct_result(target, period, reachable, nonce, &helpers, now) {
            DirectStep::Concluded(conclusion) => {
                self.conclude_locked(st, conclusion, now);
                AfterDirect::Concluded
            }
            DirectStep::Ask(requests) => AfterDirect::Ask(
                requests
                    .into_iter()
                    .filter_map(|request| {
                        let address = st.nodes.get(&request.helper)?.address?;
                        Some(OutgoingRequest {
                            helper: request.helper,
                            address,
                            id: request.id,
                            target: request.target,
                            nonce: request.nonce,
                        })
                    })
                    .collect(),
            ),
        }
    }

    /// Concludes (unhealthy) every indirect probe whose deadline has passed.
    pub fn expire(&self, now: Timestamp) {
        let mut st = self.lock();
        for conclusion in st.indirect.expire(now) {
            self.conclude_locked(&mut st, conclusion, now);
        }
    }

    pub(super) fn conclude_locked(&self, st: &mut State, conclusion: Conclusion, now: Timestamp) {
        let basis = match &conclusion.basis {
            Basis::Direct => "direct",
            Basis::Helper(_) => "helper",
            Basis::AllHelpersFailed => "all_helpers_failed",
            Basis::Deadline => "deadline",
            Basis::NoHelpers => "no_helpers",
        };
        let verdict = if conclusion.healthy { "healthy" } else { "unhealthy" };
        self.metrics.ballots.get_or_create(&BallotLabels { verdict, basis }).inc();
        if !conclusion.healthy {
            tracing::info!(target_node = %conclusion.target, period = conclusion.period.0, basis = ?conclusion.basis,
                "peer unreachable");
        }
        let ballot = Ballot { period: conclusion.period, healthy: conclusion.healthy };
        let local = self.local().to_string();
        // an own ballot no unit table takes (a membership change raced the probe) is dropped
        let _ = self.record(st, &local, &conclusion.target, Cast::Own(ballot), now);
    }
}
