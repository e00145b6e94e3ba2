//! From ballots to verdicts: each ballot recorded in every unit table holding its checker and
//! target (passed on, and timed when it dissents), and at a period's end the tables evaluated
//! into verdict changes, the served view and the patches this node writes.

use std::collections::BTreeMap;

use edgegrid_core::unit::local_verdicts::{NodeVerdict, PeerIdentity};

use super::{Cast, Daemon, State};
use crate::ballot::{BallotIgnored, check_signature};
use crate::daemon::cli::VerdictWriter;
use crate::daemon::metrics::VerdictLabel;
use crate::relay::relays_received;
use crate::time::{Period, Timestamp};
use crate::vote::{AnnotationPatch, Recorded, Verdict, annotation_patch, writer_of};

impl Daemon {
    /// Records one checker's ballot in every unit table holding both, passes it on when it
    /// is new (see [`crate::relay`]; own ballots signed here, received ones with their
    /// signature unchanged), and notes when it goes against the standing verdict. `Err`:
    /// no table took it, and why the last one refused it.
    pub(super) fn record(
        &self,
        st: &mut State,
        checker: &str,
        target: &str,
        cast: Cast<'_>,
        now: Timestamp,
    ) -> Result<(), BallotIgnored> {
        let period = self.clock.period_at(now);
        let local = self.local();
        let key = st.nodes.get(checker).and_then(|n| n.public_key);
        let (ballot, mut signed) = match cast {
            Cast::Own(ballot) => (ballot, None),
            Cast::Received(signed) => (signed.ballot(), Some(*signed)),
        };
        let mut outcome = Err(BallotIgnored::NotAMember);
        for vote in st.units.values_mut() {
            let members = vote.schedule.members();
            if members.binary_search_by(|m| m.as_str().cmp(checker)).is_err()
                || members.binary_search_by(|m| m.as_str().cmp(target)).is_err()
            {
                continue;
            }
            let own = matches!(cast, Cast::Own(_));
            let relays = own || relays_received(members.len(), self.settings.protocol.relay_fanout);
            let recorded = match &cast {
                Cast::Own(ballot) => vote.table.record(checker, target, *ballot, period, &mut vote.schedule),
                Cast::Received(signed) => {
                    let verify = || check_signature(key.as_ref(), checker, target, signed);
                    vote.table.record_received(local, checker, target, signed, period, &mut vote.schedule, verify)
                }
            };
            if recorded == Ok(Recorded::New) && relays {
                let signed = *signed.get_or_insert_with(|| st.crypto.signing.sign(checker, target, ballot));
                vote.relay.learned(checker, target, signed);
            }
            match recorded {
                Ok(_) => outcome = Ok(()),
                Err(refused) if outcome.is_err() => outcome = Err(refused),
                Err(_) => {}
            }
            if recorded.is_ok() {
                let against = match vote.table.verdict(target) {
                    Verdict::Undecided => true,
                    Verdict::Healthy => !ballot.healthy,
                    Verdict::Unhealthy => ballot.healthy,
                };
                if against {
                    st.dissent.entry(target.to_string()).or_insert(now);
                }
            }
        }
        outcome
    }

    /// Ends `period`: evaluates every unit's table, refreshes the served view and returns
    /// the patches this node is the writer of (the Nodes it observes differ from the
    /// verdicts; retried every period until the Node says what the verdict does).
    pub fn evaluate(&self, period: Period, now: Timestamp) -> Vec<AnnotationPatch> {
        let mut st = self.lock();
        st.evaluated = Some(period);
        let warm = period >= st.warm_from;
        let State { membership, units, nodes, dissent, view, .. } = &mut *st;
        for (unit, vote) in units.iter_mut() {
            for change in vote.table.evaluate(period, &mut vote.schedule) {
                let to = change.to.as_str();
                self.metrics.verdict_changes.get_or_create(&VerdictLabel { verdict: to }).inc();
                let latency = dissent.remove(&change.node).map(|since| now.distance(since));
                if let Some(latency) = latency {
                    self.metrics.vote_latency.observe(latency.as_secs_f64());
                }
                tracing::info!(node = %change.node, from = change.from.as_str(), to, unit = ?unit,
                    eligible = change.tally.eligible, healthy = change.tally.healthy,
                    unhealthy = change.tally.unhealthy, latency = ?latency, "verdict changed");
            }
        }
        // dissent that has not changed a verdict within a window (and a period) is noise
        let horizon = self
            .clock
            .length()
            .saturating_mul(u32::try_from(self.settings.protocol.vote_window.saturating_add(1)).unwrap_or(u32::MAX));
        dissent.retain(|_, since| now.distance(*since) <= horizon);

        let mut served = BTreeMap::new();
        let local = self.settings.node_name.as_str();
        let mut writes = Vec::new();
        for unit in membership.units() {
            let Some(vote) = units.get_mut(&unit.id) else { continue };
            for member in &unit.members {
                if !served.contains_key(member) {
                    let tally = vote.table.tally(member, period, &mut vote.schedule);
                    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
                    served.insert(
                        member.clone(),
                        NodeVerdict {
                            verdict: vote.table.verdict(member),
                            eligible: count(tally.eligible),
                            healthy: count(tally.healthy),
                            unhealthy: count(tally.unhealthy),
                        },
                    );
                }
                if self.settings.verdict_writer == VerdictWriter::Cloud
                    || !warm
                    || membership.home_unit(member).as_ref() != Some(&unit.id)
                    || writer_of(&unit.members, member, &vote.table) != Some(local)
                {
                    continue;
                }
                if let Some(patch) =
                    nodes.get(member).and_then(|n| annotation_patch(&n.observed, vote.table.verdict(member)))
                {
                    writes.push(patch);
                }
            }
        }
        for verdict in [Verdict::Undecided, Verdict::Healthy, Verdict::Unhealthy] {
            let count = served.values().filter(|v| v.verdict == verdict).count();
            self.metrics
                .verdicts
                .get_or_create(&VerdictLabel { verdict: verdict.as_str() })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
        view.identities = served
            .keys()
            .filter_map(|member| {
                let node = nodes.get(member)?;
                // only identities this daemon would verify ballots with
                node.public_key?;
                node.address?;
                Some((
                    member.clone(),
                    PeerIdentity {
                        public_key: node.key_annotation.clone()?,
                        address: node.address_annotation.clone()?,
                    },
                ))
            })
            .collect();
        view.nodes = served;
        writes
    }
}
