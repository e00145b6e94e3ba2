//! How every member comes to hold every ballot of its unit without every member sending
//! to every other: push gossip.
//!
//! Every member needs every ballot: each evaluates the vote about every member (that is
//! what it serves on `GET /verdicts`, and how members agree on who writes). Sending one's
//! ballots straight to every peer costs `n - 1` messages per member per period, O(n^2)
//! for the unit. Instead each period has `rounds` relay rounds; in each, a member sends
//! one frame, to `fanout` peers, holding the ballots it learned since (its own and
//! received ones), each ballot in the first `spread` rounds after it was learned. A ballot
//! is learned once: the vote table says whether a ballot is new ([`Recorded::New`]), and
//! only new ones are passed on, so a ballot's copies stop where everyone has it. Messages
//! per member per period: at most `rounds * fanout`, whatever `n`. A ballot reaches `n`
//! members in about `log(n) / log(1 + fanout)` rounds; a member the pushes miss (about
//! `e^-(fanout*spread)` of them, more under loss) lacks that one ballot, which the vote
//! treats as a missing ballot: it can delay a verdict, never change it.
//!
//! Whom to send a round to is [`Assignment::relay_peers`]: a different slice of the
//! period's shuffled ring per sender and round, so over a few rounds a member pushes to
//! many different peers.
//!
//! Trust: a relayed ballot names its checker and carries its checker's signature
//! ([`crate::ballot`]), passed on unchanged; the frame around it is sealed by the relaying
//! member with the unit's shared key, which proves nothing about who wrote the ballots.
//! A relaying member can withhold or repeat what others signed, never alter it, and the
//! vote takes a ballot only from a checker the assignment had check that target in that
//! period: one liar moves at most the ballots it casts itself.
//!
//! [`Recorded::New`]: crate::vote::Recorded::New
//! [`Assignment::relay_peers`]: crate::selection::Assignment::relay_peers

use std::collections::BTreeMap;

use crate::ballot::SignedBallot;
use crate::time::{Period, PeriodClock, Timestamp};

/// Ballots as they travel: checker -> target -> the checker's signed ballot.
pub type BallotsByChecker = BTreeMap<String, BTreeMap<String, SignedBallot>>;

/// Whether members pass on the ballots they receive: not when every round of every
/// member reaches every other member directly (`members <= fanout + 1`), where a relayed
/// ballot could only go back to members that already have it.
pub fn relays_received(members: usize, fanout: usize) -> bool {
    members > fanout.saturating_add(1)
}

/// The first relay round at or after `now`: its period, its number and its time. A
/// period of length `L` has `rounds` rounds, round `j` at `start + j*L/rounds +
/// L/(2*rounds)` (the middle of its slice), so every member runs round `j` at about the
/// same time and the last round ends before the period's evaluation.
pub fn next_round(clock: PeriodClock, rounds: u32, now: Timestamp) -> (Period, u32, Timestamp) {
    let rounds = rounds.max(1);
    let interval = clock.length() / rounds;
    let period = clock.period_at(now);
    let start = clock.start_of(period);
    (0..rounds)
        .map(|j| (period, j, start.saturating_add(interval * j + interval / 2)))
        .find(|(_, _, at)| *at >= now)
        .unwrap_or_else(|| (period.next(), 0, clock.start_of(period.next()).saturating_add(interval / 2)))
}

/// One member's ballots still to pass on.
#[derive(Clone, Debug, Default)]
pub struct Relay {
    spread: u32,
    /// checker -> target -> (ballot, rounds it is still sent in)
    pending: BTreeMap<String, BTreeMap<String, (SignedBallot, u32)>>,
}

impl Relay {
    /// `spread`: in how many rounds each ballot is sent (at least 1).
    pub fn new(spread: u32) -> Self {
        Self { spread: spread.max(1), pending: BTreeMap::new() }
    }

    /// A ballot the vote table took as new: send it in the next `spread` rounds. A later
    /// ballot of the same checker about the same target replaces one not yet sent out.
    pub fn learned(&mut self, checker: &str, target: &str, ballot: SignedBallot) {
        let by_target = match self.pending.get_mut(checker) {
            Some(by_target) => by_target,
            None => self.pending.entry(checker.to_string()).or_default(),
        };
        match by_target.get_mut(target) {
            Some(entry) => *entry = (ballot, self.spread),
            None => {
                by_target.insert(target.to_string(), (ballot, self.spread));
            }
        }
    }

    /// The ballots this round's frame carries (`None`: nothing to send, so no frame).
    /// Ballots from before `window_start` are dropped unsent: no vote counts them.
    pub fn round(&mut self, window_start: Period) -> Option<BallotsByChecker> {
        let mut out = BallotsByChecker::new();
        self.pending.retain(|checker, by_target| {
            let mut sent = BTreeMap::new();
            by_target.retain(|target, (ballot, left)| {
                if ballot.period < window_start {
                    return false;
                }
                sent.insert(target.clone(), *ballot);
                *left -= 1;
                *left > 0
            });
            if !sent.is_empty() {
                out.insert(checker.clone(), sent);
            }
            !by_target.is_empty()
        });
        (!out.is_empty()).then_some(out)
    }

    /// How many ballots wait to be sent.
    pub fn pending(&self) -> usize {
        self.pending.values().map(BTreeMap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ballot::Ballot;

    /// The relay never looks at signatures: one key signs everything here.
    fn ballot(period: u64, healthy: bool) -> SignedBallot {
        crate::node_key::SigningKey::from_seed(&[1; 32]).sign("any", "any", Ballot { period: Period(period), healthy })
    }

    fn frame(entries: &[(&str, &str, SignedBallot)]) -> BallotsByChecker {
        let mut out = BallotsByChecker::new();
        for (checker, target, ballot) in entries {
            out.entry(checker.to_string()).or_default().insert(target.to_string(), *ballot);
        }
        out
    }

    #[test]
    fn each_ballot_goes_out_in_spread_rounds_then_stops() {
        let mut relay = Relay::new(2);
        assert_eq!(relay.round(Period(10)), None, "nothing learned: no frame");
        relay.learned("a", "b", ballot(10, true));
        relay.learned("a", "c", ballot(10, false));
        let both = frame(&[("a", "b", ballot(10, true)), ("a", "c", ballot(10, false))]);
        assert_eq!(relay.round(Period(10)), Some(both.clone()));
        relay.learned("d", "b", ballot(10, true));
        let mut with_d = both;
        with_d.insert("d".into(), [("b".to_string(), ballot(10, true))].into());
        assert_eq!(relay.round(Period(10)), Some(with_d), "a's second round, d's first");
        assert_eq!(relay.round(Period(10)), Some(frame(&[("d", "b", ballot(10, true))])));
        assert_eq!(relay.round(Period(10)), None);
        assert_eq!(relay.pending(), 0);
    }

    #[test]
    fn a_later_ballot_replaces_an_unsent_one_and_restarts_its_spread() {
        let mut relay = Relay::new(2);
        relay.learned("a", "b", ballot(10, true));
        assert_eq!(relay.round(Period(10)), Some(frame(&[("a", "b", ballot(10, true))])));
        relay.learned("a", "b", ballot(11, false));
        assert_eq!(relay.pending(), 1);
        assert_eq!(relay.round(Period(10)), Some(frame(&[("a", "b", ballot(11, false))])));
        assert_eq!(relay.round(Period(10)), Some(frame(&[("a", "b", ballot(11, false))])));
        assert_eq!(relay.round(Period(10)), None);
    }

    #[test]
    fn ballots_older_than_the_window_are_dropped_unsent() {
        let mut relay = Relay::new(3);
        relay.learned("a", "b", ballot(7, true));
        relay.learned("a", "c", ballot(9, true));
        assert_eq!(relay.round(Period(8)), Some(frame(&[("a", "c", ballot(9, true))])));
        assert_eq!(relay.pending(), 1, "the stale one is gone, not kept for later");
    }

    #[test]
    fn received_ballots_are_relayed_only_when_some_member_is_out_of_direct_reach() {
        assert!(!relays_received(2, 3));
        assert!(!relays_received(4, 3));
        assert!(relays_received(5, 3));
        assert!(relays_received(5, 1));
        assert!(!relays_received(1, 0));
        assert!(relays_received(3, 0), "fanout 0 is refused by the configuration; the rule stays total");
    }

    #[test]
    fn rounds_sit_in_the_middle_of_their_slices() {
        let clock = PeriodClock::new(std::time::Duration::from_secs(10)).unwrap();
        let at = |ms: u64| Timestamp::from_unix_millis(ms);
        // period 3 is [30 s, 40 s): rounds at 31.25, 33.75, 36.25, 38.75 s
        let cases = [
            (30_000, (3, 0, 31_250)),
            (31_250, (3, 0, 31_250)),
            (31_251, (3, 1, 33_750)),
            (36_000, (3, 2, 36_250)),
            (38_750, (3, 3, 38_750)),
            (38_751, (4, 0, 41_250)),
            (39_999, (4, 0, 41_250)),
        ];
        for (now, (period, round, time)) in cases {
            assert_eq!(next_round(clock, 4, at(now)), (Period(period), round, at(time)), "at {now} ms");
        }
        // one round: mid-period; zero rounds is treated as one
        assert_eq!(next_round(clock, 1, at(30_000)), (Period(3), 0, at(35_000)));
        assert_eq!(next_round(clock, 0, at(36_000)), (Period(4), 0, at(45_000)));
        // a period that does not divide evenly: 3 rounds of 3.333 s
        assert_eq!(next_round(clock, 3, at(39_000)), (Period(4), 0, at(41_666)));
    }

    #[test]
    fn a_spread_of_zero_still_sends_once() {
        let mut relay = Relay::new(0);
        relay.learned("a", "b", ballot(3, true));
        assert!(relay.round(Period(3)).is_some());
        assert_eq!(relay.round(Period(3)), None);
    }
}
