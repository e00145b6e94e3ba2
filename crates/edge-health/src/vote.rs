//! The vote: what a unit's members, together, conclude about each member, who writes the
//! conclusion to the Node, and the patch that writes it.
//!
//! Each member keeps a [`VoteTable`] per unit, fed the ballots (verdicts) of every checker
//! it hears from, its own included, and evaluates it once per period. Every member
//! evaluates the same rule over (mostly) the same ballots, so they reach the same verdicts
//! without a coordinator, and each can serve its local view while the cloud is away.
//!
//! The rule, for a target `t` evaluated at period `p` with a window of `W` periods
//! (periods `p-W+1 ..= p`):
//! - **who checks**: each period the [`crate::selection`] assignment gives `t` its `k`
//!   checkers, and behind them a standby order; a member checks `t` as a standby when
//!   fewer than `k` members between it and `t` on the ring were heard from the period
//!   before ([`VoteTable::targets`]), so `t` keeps `k` checkers believed alive however
//!   many of its assigned ones died. Why not "all other members": with `k` probes per
//!   member per period, a unit costs `O(n*k)` probes instead of `O(n^2)`;
//! - a **ballot** from any member of the unit about another is taken: standbys are chosen
//!   by what each of them heard, which receivers cannot know, so nothing may depend on
//!   members agreeing who is silent. A ballot received from another member is taken only
//!   with its checker's valid signature ([`crate::ballot`]; [`VoteTable::record_received`]),
//!   and never when it claims to be the receiver's own, so relaying members cannot speak
//!   for the checkers. One ballot per checker: the latest (highest period, then last
//!   received) replaces earlier ones, so a member that ballots about everyone (a liar may)
//!   is still one voice per target; it counts while its period is in the window. `E(t)`,
//!   the **eligible** checkers a tally reports, are the assigned ones of the window and
//!   every checker with a counted ballot;
//! - of `E(t)`, the checkers with a counted ballot **count** (a silent one, dead or cut
//!   off, does not: it stops counting once its last ballot leaves the window, so a
//!   death never turns its live neighbours' majority into a minority, and a few dead
//!   checkers never block a decision). A checker voted Unhealthy still counts with the
//!   ballots it cast before: they say what it saw while it lived, and dropping them at
//!   once could leave one of its targets with a single voice for the rest of the window. `t` is
//!   **Unhealthy** or **Healthy** as [`VoteRule::decide`] says: at least two counted
//!   ballots agreeing and a strict majority of those counted (the one rule the cloud's
//!   writer applies to the views, see `edgegrid_core::unit::verdict`); otherwise (a tie, a
//!   single ballot, none) it is **Undecided**, at every evaluation: a verdict is never
//!   kept on no majority, so a liar making a tie cannot hold a dead node's protection. A
//!   node starts Undecided, and a restarted daemon writes and publishes nothing for its
//!   first window ([`crate::daemon`]): an empty table must not withdraw everyone's
//!   protection;
//! - ballots older than the window are dropped when the table is evaluated.
//!
//! In a unit of two each member is the other's only checker: one ballot, which decides
//! nothing unless the operator opts in ([`VoteRule::allow_units_of_two`]). Three members
//! are the least for a verdict, and there one liar can still withhold protection from the
//! other two (a tie, or silence); five are the least in which it cannot.
//!
//! **One writer per verdict**: the annotation of `t` is written only by members of `t`'s
//! home unit ([`crate::membership::UnitMembership::home_unit`]), and among them only by the
//! lowest-named member other than `t` that the writer's own table does not hold
//! Unhealthy. Members agreeing on the verdicts agree on the writer, so `n` agreeing nodes
//! make one write, not `n`. The writer writes whenever the Node it observes differs from
//! the verdict (not only on a change), which is how verdicts reach the Node once the cloud
//! link is back. The patch carries the `resourceVersion` it was computed from as a `test`
//! operation, so two members that briefly both think they are the writer, or a writer with
//! a stale view of the Node, cannot overwrite a newer state: the second write fails and
//! is recomputed from the refreshed Node.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use crate::ballot::{Ballot, BallotIgnored, SignedBallot};
use crate::selection::{Assignment, Schedule};
use crate::time::Period;

/// What a unit concluded about a node: the type `GET /verdicts` serves.
pub use edgegrid_core::unit::local_verdicts::Verdict;
/// The verdict annotation's patch: the same for the edge writer and the cloud's.
pub use edgegrid_core::unit::verdict::{AnnotationPatch, ObservedNode, VoteRule, annotation_patch};

/// The counted ballots about one node at one evaluation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tally {
    pub eligible: usize,
    pub healthy: usize,
    pub unhealthy: usize,
}

impl Tally {
    /// The verdict this tally calls for under `rule` in a unit of `unit_size` members.
    pub fn decision(&self, rule: VoteRule, unit_size: usize) -> Verdict {
        rule.decide(self.healthy, self.unhealthy, unit_size)
    }
}

/// A verdict that changed at an evaluation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerdictChange {
    pub node: String,
    pub from: Verdict,
    pub to: Verdict,
    pub tally: Tally,
}

/// What storing a ballot changed, which is what decides whether it is relayed on (see
/// [`crate::relay`]): a ballot is passed on once, by each member, when it first learns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// The table did not hold it: a new checker, a later period, or a changed verdict.
    New,
    /// The table already held exactly this ballot.
    Known,
}

/// One unit's ballots and verdicts, as one member sees them.
#[derive(Clone, Debug)]
pub struct VoteTable {
    window: u64,
    rule: VoteRule,
    /// target -> checker -> latest ballot
    ballots: BTreeMap<String, BTreeMap<String, Ballot>>,
    /// Absent: Undecided.
    verdicts: BTreeMap<String, Verdict>,
    /// The first period each member was evaluated in (see [`VoteTable::evaluate`]).
    first_evaluated: BTreeMap<String, Period>,
    /// checker -> the latest period of a ballot it cast that this table took (see
    /// [`VoteTable::silent`]).
    heard: BTreeMap<String, Period>,
}

impl VoteTable {
    /// `window`: how many periods a ballot stays fresh (at least 1).
    pub fn new(window: u64, rule: VoteRule) -> Self {
        Self {
            window: window.max(1),
            rule,
            ballots: BTreeMap::new(),
            verdicts: BTreeMap::new(),
            first_evaluated: BTreeMap::new(),
            heard: BTreeMap::new(),
        }
    }

    pub fn window(&self) -> u64 {
        self.window
    }

    /// The first period of the window ending at `now`.
    pub fn window_start(&self, now: Period) -> Period {
        Period(now.0.saturating_sub(self.window - 1))
    }

    /// Stores one checker's ballot about one target, trusted as is: the local member's own
    /// (received ballots go through [`VoteTable::record_received`]). `schedule` is the
    /// unit's, the one [`VoteTable::evaluate`] is given.
    pub fn record(
        &mut self,
        checker: &str,
        target: &str,
        ballot: Ballot,
        now: Period,
        schedule: &mut Schedule,
    ) -> Result<Recorded, BallotIgnored> {
        match self.admit(checker, target, ballot, now, schedule)? {
            Recorded::Known => Ok(Recorded::Known),
            Recorded::New => Ok(self.store(checker, target, ballot)),
        }
    }

    /// Stores a ballot another member sent, when it is true: `local` is this member (a
    /// ballot claiming to be its own is refused: it knows its own), `verify` checks the
    /// signature against the key `checker` publishes (the daemon:
    /// [`crate::ballot::check_signature`]; the simulation verifies each distinct signature
    /// once for all its members). Every check that costs nothing comes first; `verify` runs
    /// only for a ballot that would change the table, so copies of a ballot already held
    /// (most of what gossip delivers) and refused ones cost no verification.
    #[allow(clippy::too_many_arguments)]
    pub fn record_received(
        &mut self,
        local: &str,
        checker: &str,
        target: &str,
        signed: &SignedBallot,
        now: Period,
        schedule: &mut Schedule,
        verify: impl FnOnce() -> Result<(), BallotIgnored>,
    ) -> Result<Recorded, BallotIgnored> {
        if checker == local {
            return Err(BallotIgnored::OwnBallot);
        }
        let ballot = signed.ballot();
        if self.admit(checker, target, ballot, now, schedule)? == Recorded::Known {
            return Ok(Recorded::Known);
        }
        verify()?;
        Ok(self.store(checker, target, ballot))
    }

    /// Whether a ballot may be stored (`New`) or is already held (`Known`).
    fn admit(
        &self,
        checker: &str,
        target: &str,
        ballot: Ballot,
        now: Period,
        schedule: &mut Schedule,
    ) -> Result<Recorded, BallotIgnored> {
        if checker == target {
            return Err(BallotIgnored::SelfBallot);
        }
        if ballot.period < self.window_start(now) {
            return Err(BallotIgnored::Stale);
        }
        if ballot.period > now.next() {
            return Err(BallotIgnored::Future);
        }
        let assignment = schedule.assignment(ballot.period);
        if !assignment.contains(checker) || !assignment.contains(target) {
            return Err(BallotIgnored::NotAMember);
        }
        match self.ballots.get(target).and_then(|by_checker| by_checker.get(checker)) {
            Some(stored) if stored.period > ballot.period => Err(BallotIgnored::Superseded),
            Some(stored) if *stored == ballot => Ok(Recorded::Known),
            _ => Ok(Recorded::New),
        }
    }

    fn store(&mut self, checker: &str, target: &str, ballot: Ballot) -> Recorded {
        match self.heard.get_mut(checker) {
            Some(heard) => *heard = (*heard).max(ballot.period),
            None => {
                self.heard.insert(checker.to_string(), ballot.period);
            }
        }
        // ballots arrive by the thousand per period: allocate names only for new entries
        let by_checker = match self.ballots.get_mut(target) {
            Some(by_checker) => by_checker,
            None => self.ballots.entry(target.to_string()).or_default(),
        };
        match by_checker.get_mut(checker) {
            Some(stored) => *stored = ballot,
            None => {
                by_checker.insert(checker.to_string(), ballot);
            }
        }
        Recorded::New
    }

    /// Every stored ballot: `(target, checker, ballot)`.
    pub fn ballots(&self) -> impl Iterator<Item = (&str, &str, Ballot)> + '_ {
        self.ballots
            .iter()
            .flat_map(|(target, by_checker)| by_checker.iter().map(move |(c, b)| (target.as_str(), c.as_str(), *b)))
    }

    pub fn verdict(&self, node: &str) -> Verdict {
        self.verdicts.get(node).copied().unwrap_or_default()
    }

    /// Every member's verdict (Undecided ones included), for `GET /verdicts`.
    pub fn verdicts<'a>(&'a self, members: &'a [String]) -> impl Iterator<Item = (&'a str, Verdict)> + 'a {
        members.iter().map(|m| (m.as_str(), self.verdict(m)))
    }

    /// Counts the ballots about `target` as of period `now`.
    pub fn tally(&self, target: &str, now: Period, schedule: &mut Schedule) -> Tally {
        self.tally_in(target, &self.window_assignments(now, schedule))
    }

    /// The assignments of the window ending at `now`, oldest first.
    fn window_assignments(&self, now: Period, schedule: &mut Schedule) -> Vec<Arc<Assignment>> {
        (self.window_start(now).0..=now.0).map(|p| schedule.assignment(Period(p))).collect()
    }

    fn tally_in(&self, target: &str, window: &[Arc<Assignment>]) -> Tally {
        let (Some(first), Some(last)) = (window.first(), window.last()) else {
            return Tally::default();
        };
        let mut eligible: BTreeSet<&str> = BTreeSet::new();
        for assignment in window {
            eligible.extend(assignment.checkers_of(target));
        }
        let mut tally = Tally::default();
        for (checker, ballot) in self.ballots.get(target).into_iter().flatten() {
            if ballot.period < first.period() || ballot.period > last.period() {
                continue;
            }
            // a standby's (see `Assignment::targets_until`)
            eligible.insert(checker);
            if ballot.healthy {
                tally.healthy += 1;
            } else {
                tally.unhealthy += 1;
            }
        }
        tally.eligible = eligible.len();
        tally
    }

    /// Whether `member` was silent before `period`, as this table heard it: it cast no
    /// ballot of period `period - 1` or later that reached this table, which has been
    /// evaluating it for at least the two periods before `period` (it would have heard).
    /// A live member ballots every period (it always has a target), so this is what a
    /// death, a cut-off or a member that stopped checking looks like, one period later.
    pub fn silent(&self, member: &str, period: Period) -> bool {
        let listening = self.first_evaluated.get(member).is_some_and(|first| first.0.saturating_add(2) <= period.0);
        listening && self.heard.get(member).is_none_or(|heard| heard.0.saturating_add(1) < period.0)
    }

    /// The members `local` checks in `period`: its assigned targets and, as a standby, those
    /// a member silent before `period` ahead of it on the ring would have checked (see
    /// [`Assignment::targets_until`]). Why: with `k` checkers per target drawn afresh every
    /// period, members that died keep being drawn, and a live member could be left with
    /// fewer than two live honest checkers in a window, which is no verdict, and so no
    /// protection, exactly when its unit needs one.
    pub fn targets<'a>(&self, local: &str, period: Period, assignment: &'a Assignment) -> Vec<&'a str> {
        assignment.targets_until(local, |member| !self.silent(member, period))
    }

    /// Applies the rule to every member of the schedule at the end of period `now`,
    /// drops expired ballots and forgets non-members. Returns the verdicts that changed.
    ///
    /// A member is not condemned before its window is full: until `window` periods of
    /// ballots about it have been evaluated (since this table's start, or since it joined),
    /// a decision Unhealthy is held Undecided. A short window holds a target's first
    /// period's ballots alone, and two of its three can both be wrong on a lossy link
    /// (under 30% loss about 2.2% of ballots are: liveness by key puts a challenge and its
    /// proof on the link besides the check), which accused a live member now and then in a
    /// unit of 300 or more at every start; over a full window a wrong verdict needs most of
    /// about nine ballots wrong. Nothing acts on it meanwhile anyway (a daemon writes and
    /// publishes nothing in its first window): this keeps the served view from saying so.
    pub fn evaluate(&mut self, now: Period, schedule: &mut Schedule) -> Vec<VerdictChange> {
        let start = self.window_start(now);
        let members: BTreeSet<String> = schedule.members().iter().cloned().collect();
        self.ballots.retain(|target, by_checker| {
            by_checker.retain(|checker, ballot| ballot.period >= start && members.contains(checker));
            members.contains(target) && !by_checker.is_empty()
        });
        self.verdicts.retain(|node, _| members.contains(node));
        self.first_evaluated.retain(|node, _| members.contains(node));
        self.heard.retain(|node, _| members.contains(node));
        for member in &members {
            self.first_evaluated.entry(member.clone()).or_insert(now);
        }
        // decide everything against the verdicts as they were
        let window = self.window_assignments(now, schedule);
        let decisions: Vec<(String, Tally)> = members.iter().map(|t| (t.clone(), self.tally_in(t, &window))).collect();
        let mut changes = Vec::new();
        let size = members.len();
        for (node, tally) in decisions {
            let from = self.verdict(&node);
            let full = self.first_evaluated.get(&node).is_some_and(|first| now.0 >= first.0 + self.window - 1);
            let to = match tally.decision(self.rule, size) {
                Verdict::Unhealthy if !full => Verdict::Undecided,
                decided => decided,
            };
            if to != from {
                self.verdicts.insert(node.clone(), to);
                changes.push(VerdictChange { node, from, to, tally });
            }
        }
        changes
    }
}

/// The member that writes `target`'s annotation, as this table sees it: the lowest-named
/// member other than `target` not held Unhealthy. The caller checks that the unit is
/// `target`'s home unit. `members` must be sorted (unit member lists are).
pub fn writer_of<'a>(members: &'a [String], target: &str, table: &VoteTable) -> Option<&'a str> {
    members.iter().map(String::as_str).find(|m| *m != target && table.verdict(m) != Verdict::Unhealthy)
}

#[cfg(test)]
mod tests;
