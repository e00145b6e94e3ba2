//! Which peers each member of a unit probes in a period, so that probing costs O(n*k) per
//! period instead of everyone probing everyone (O(n^2)).
//!
//! Scheme: a seeded shuffle shared by all members. In period `p` the members are ordered
//! by a hash of `(p, name)` into a ring; each member probes the `k` members that follow it
//! on the ring. So every member probes exactly `min(k, n-1)` others, is probed by exactly
//! `min(k, n-1)` others, and never probes itself; with `n <= k+1` everyone probes
//! everyone. Members agree on the assignment without talking, because it depends only on
//! the member list, `k` and the period number (see [`crate::time`]).
//!
//! Why a shuffle rather than a ring over sorted names with a rotating offset: with sorted
//! names a node's checkers are always its name-neighbours (`edge-07`'s are `edge-04..06`),
//! which often share a rack or a switch, and the same correlated group judges it every
//! period. A fresh shuffle per period gives every node independent checkers each period,
//! so the vote over a window of periods combines independent observations, which is what
//! keeps one bad vantage point from accusing a node (see [`crate::vote`]).
//!
//! The hash is specified here (FNV-1a 64 of the name, mixed with the period by the
//! SplitMix64 finaliser), not `std`'s `DefaultHasher`, whose output may change between
//! Rust releases: two daemon versions in one unit during a rolling upgrade must still
//! compute the same assignment. A golden test pins it.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::time::Period;

/// Who probes whom in one period, for one unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    period: Period,
    /// Sorted, unique.
    members: Vec<String>,
    /// Member indices in ring order.
    ring: Vec<usize>,
    /// Member index -> position on the ring.
    position: Vec<usize>,
    per_member: usize,
}

impl Assignment {
    /// `members` need not be sorted or unique; `probes_per_period` is `k`.
    pub fn new(members: &[String], probes_per_period: usize, period: Period) -> Self {
        let mut members = members.to_vec();
        members.sort();
        members.dedup();
        let n = members.len();
        let seed = period_seed(period);
        let mut ring: Vec<usize> = (0..n).collect();
        let ranks: Vec<u64> = members.iter().map(|m| splitmix64(fnv1a64(m.as_bytes()) ^ seed)).collect();
        // ties (astronomically rare) fall back to the name order, which every member shares
        ring.sort_by_key(|&i| (ranks[i], i));
        let mut position = vec![0; n];
        for (pos, &i) in ring.iter().enumerate() {
            position[i] = pos;
        }
        Self { period, members, ring, position, per_member: probes_per_period.min(n.saturating_sub(1)) }
    }

    pub fn period(&self) -> Period {
        self.period
    }

    pub fn members(&self) -> &[String] {
        &self.members
    }

    pub fn contains(&self, name: &str) -> bool {
        self.index(name).is_some()
    }

    /// How many members each member probes (and is probed by): `min(k, n-1)`.
    pub fn probes_per_member(&self) -> usize {
        self.per_member
    }

    /// The members `checker` is assigned to probe this period (empty for a non-member).
    pub fn targets_of(&self, checker: &str) -> Vec<&str> {
        self.walk(checker, |pos, j, n| (pos + j) % n)
    }

    /// The members `checker` probes this period when some members may be silent: walking
    /// the ring forward from `checker`, every member up to and including the `k`-th that
    /// `believed_alive` says is. With nobody silent these are [`Assignment::targets_of`];
    /// each silent member before the `k`-th adds one more, so `checker` also covers, as a
    /// *standby*, the targets a silent member ahead of it on the ring would have checked.
    ///
    /// Seen from a target: its candidate checkers are the members behind it on the ring,
    /// nearest first (the first `k` are [`Assignment::checkers_of`]); a candidate checks
    /// it when fewer than `k` members it believes alive stand between them. So a target
    /// is checked by `k` members the unit believes alive whatever died among its assigned
    /// ones, and nobody has to agree with anybody about who is silent: a member that
    /// thinks a live peer silent checks one target more, no less.
    pub fn targets_until(&self, checker: &str, believed_alive: impl Fn(&str) -> bool) -> Vec<&str> {
        let Some(i) = self.index(checker) else {
            return Vec::new();
        };
        let n = self.members.len();
        let pos = self.position[i];
        let mut alive = 0;
        let mut targets = Vec::new();
        for j in 1..n {
            if alive == self.per_member {
                break;
            }
            let target = self.members[self.ring[(pos + j) % n]].as_str();
            targets.push(target);
            alive += usize::from(believed_alive(target));
        }
        targets
    }

    /// The members that probe `target` this period (empty for a non-member).
    pub fn checkers_of(&self, target: &str) -> Vec<&str> {
        self.walk(target, |pos, j, n| (pos + n - j) % n)
    }

    /// Whether `checker` probes `target` this period. O(log n).
    pub fn is_assigned(&self, checker: &str, target: &str) -> bool {
        let (Some(c), Some(t)) = (self.index(checker), self.index(target)) else {
            return false;
        };
        let n = self.members.len();
        let distance = (self.position[t] + n - self.position[c]) % n;
        (1..=self.per_member).contains(&distance)
    }

    /// Up to `count` members for `checker` to ask to probe `target` indirectly: neither of
    /// the two and none `excluded` (e.g. members voted unhealthy). The starting point
    /// depends on the checker, so the `k` checkers of a node ask different helpers and one
    /// unlucky helper cannot sink them all.
    pub fn helpers(&self, checker: &str, target: &str, count: usize, excluded: impl Fn(&str) -> bool) -> Vec<&str> {
        let seed = splitmix64(
            period_seed(self.period) ^ fnv1a64(checker.as_bytes()) ^ fnv1a64(target.as_bytes()).rotate_left(32),
        );
        self.sample(seed, count, |m| m == checker || m == target || excluded(m))
    }

    /// The `count` peers `sender` pushes its relay round `round` to (see [`crate::relay`]):
    /// neither itself nor any `excluded`, from a starting point on the ring that depends on
    /// the sender and the round, so its rounds reach different peers and different
    /// senders' rounds spread over the unit.
    pub fn relay_peers(&self, sender: &str, round: u32, count: usize, excluded: impl Fn(&str) -> bool) -> Vec<&str> {
        let seed = splitmix64(
            period_seed(self.period) ^ fnv1a64(sender.as_bytes()).rotate_left(17) ^ splitmix64(u64::from(round)),
        );
        self.sample(seed, count, |m| m == sender || excluded(m))
    }

    /// Up to `count` members, walking the ring from a point `seed` picks, skipping `skip`.
    fn sample(&self, seed: u64, count: usize, skip: impl Fn(&str) -> bool) -> Vec<&str> {
        let n = self.members.len();
        if n == 0 || count == 0 {
            return Vec::new();
        }
        let start = (seed % n as u64) as usize;
        (0..n).map(|j| self.members[self.ring[(start + j) % n]].as_str()).filter(|m| !skip(m)).take(count).collect()
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.members.binary_search_by(|m| m.as_str().cmp(name)).ok()
    }

    fn walk(&self, from: &str, step: impl Fn(usize, usize, usize) -> usize) -> Vec<&str> {
        let Some(i) = self.index(from) else {
            return Vec::new();
        };
        let n = self.members.len();
        let pos = self.position[i];
        (1..=self.per_member).map(|j| self.members[self.ring[step(pos, j, n)]].as_str()).collect()
    }
}

/// A unit's member list and `k`, handing out (and remembering) each period's assignment:
/// votes look at several periods at once and each period's ring costs a sort to build.
#[derive(Clone, Debug)]
pub struct Schedule {
    members: Vec<String>,
    probes_per_period: usize,
    /// Bounded: older periods are dropped first.
    cache: BTreeMap<Period, Arc<Assignment>>,
    keep: usize,
}

impl Schedule {
    /// `keep`: how many periods' assignments to remember (at least the vote window + 1).
    pub fn new(members: &[String], probes_per_period: usize, keep: usize) -> Self {
        let mut members = members.to_vec();
        members.sort();
        members.dedup();
        Self { members, probes_per_period, cache: BTreeMap::new(), keep: keep.max(1) }
    }

    pub fn members(&self) -> &[String] {
        &self.members
    }

    pub fn probes_per_period(&self) -> usize {
        self.probes_per_period
    }

    pub fn assignment(&mut self, period: Period) -> Arc<Assignment> {
        if let Some(a) = self.cache.get(&period) {
            return a.clone();
        }
        let a = Arc::new(Assignment::new(&self.members, self.probes_per_period, period));
        self.cache.insert(period, a.clone());
        while self.cache.len() > self.keep {
            self.cache.pop_first();
        }
        a
    }
}

fn period_seed(period: Period) -> u64 {
    // a fixed domain constant keeps period 0 from seeding with 0
    splitmix64(period.0 ^ 0x6564_6765_6865_616c)
}

/// FNV-1a, 64 bit.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The SplitMix64 finaliser: a bijective mix with good avalanche.
pub(crate) fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use proptest::prelude::*;

    use super::*;

    fn members(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("edge-{i:02}")).collect()
    }

    /// How often each member is probed, and every (checker, target) pair.
    fn coverage(a: &Assignment) -> (BTreeMap<String, usize>, Vec<(String, String)>) {
        let mut counts: BTreeMap<String, usize> = a.members().iter().map(|m| (m.clone(), 0)).collect();
        let mut pairs = Vec::new();
        for checker in a.members() {
            for target in a.targets_of(checker) {
                *counts.get_mut(target).unwrap() += 1;
                pairs.push((checker.clone(), target.to_string()));
            }
        }
        (counts, pairs)
    }

    proptest! {
        #[test]
        fn every_member_is_covered_k_times_and_nobody_probes_itself(
            names in proptest::collection::btree_set("[a-z]{1,6}", 0..40),
            k in 0usize..8,
            period in any::<u64>(),
        ) {
            let names: Vec<String> = names.into_iter().collect();
            let a = Assignment::new(&names, k, Period(period));
            let want = k.min(names.len().saturating_sub(1));
            prop_assert_eq!(a.probes_per_member(), want);
            let (counts, pairs) = coverage(&a);
            for (member, count) in &counts {
                prop_assert!(*count >= want, "{} probed {} times, want >= {}", member, count, want);
                prop_assert_eq!(*count, want, "exactly k: no member probed more than needed");
            }
            prop_assert_eq!(pairs.len(), names.len() * want, "O(n*k) probes");
            for (checker, target) in &pairs {
                prop_assert_ne!(checker, target);
                prop_assert!(a.is_assigned(checker, target));
            }
            for checker in &names {
                let targets = a.targets_of(checker);
                let distinct: BTreeSet<&str> = targets.iter().copied().collect();
                prop_assert_eq!(distinct.len(), targets.len(), "no target twice");
                // checkers_of is the inverse of targets_of
                for target in &targets {
                    prop_assert!(a.checkers_of(target).contains(&checker.as_str()));
                }
            }
        }

        #[test]
        fn input_order_and_duplicates_do_not_matter(
            names in proptest::collection::vec("[a-c]{1,3}", 0..20),
            k in 1usize..5,
            period in 0u64..1000,
        ) {
            let mut reversed = names.clone();
            reversed.reverse();
            prop_assert_eq!(Assignment::new(&names, k, Period(period)), Assignment::new(&reversed, k, Period(period)));
        }

        #[test]
        fn helpers_are_distinct_others(
            n in 0usize..30,
            count in 0usize..6,
            period in any::<u64>(),
            checker in 0usize..30,
            target in 0usize..30,
        ) {
            let names = members(n);
            let a = Assignment::new(&names, 3, Period(period));
            let checker = format!("edge-{checker:02}");
            let target = format!("edge-{target:02}");
            let excluded = |m: &str| m.ends_with('7');
            let helpers = a.helpers(&checker, &target, count, excluded);
            let distinct: BTreeSet<&str> = helpers.iter().copied().collect();
            prop_assert_eq!(distinct.len(), helpers.len());
            let available = names.iter().filter(|m| **m != checker && **m != target && !excluded(m)).count();
            prop_assert_eq!(helpers.len(), count.min(available));
            for h in helpers {
                prop_assert!(h != checker && h != target && !excluded(h) && a.contains(h));
            }
        }
    }

    proptest! {
        /// With some members silent, a target's checkers that are believed alive are exactly
        /// the first `k` believed alive among its candidates (the members behind it on the
        /// ring, nearest first), and the silent ones among them come before the `k`-th; with
        /// nobody silent, the assignment.
        #[test]
        fn standbys_replace_exactly_the_silent_checkers(
            n in 0usize..24,
            k in 0usize..6,
            silent in proptest::collection::btree_set(0usize..24, 0..24),
            period in any::<u64>(),
        ) {
            let names = members(n);
            let a = Assignment::new(&names, k, Period(period));
            // the ring does not depend on k: with k = n, checkers_of lists every candidate
            let all = Assignment::new(&names, n, Period(period));
            let alive = |m: &str| !silent.iter().any(|&i| i < n && names[i] == m);
            for checker in &names {
                prop_assert_eq!(a.targets_until(checker, |_| true), a.targets_of(checker));
            }
            for target in &names {
                let checking: Vec<&str> = all
                    .checkers_of(target)
                    .into_iter()
                    .filter(|c| a.targets_until(c, alive).contains(&target.as_str()))
                    .collect();
                let candidates = all.checkers_of(target);
                let live: Vec<&str> = candidates.iter().copied().filter(|c| alive(c)).collect();
                let want_live: Vec<&str> = live.iter().copied().take(k).collect();
                let got_live: Vec<&str> = checking.iter().copied().filter(|c| alive(c)).collect();
                prop_assert_eq!(&got_live, &want_live, "{}", target);
                // every candidate up to the k-th live one checks, and nobody after it
                let last = want_live.last().map_or(0, |l| candidates.iter().position(|c| c == l).unwrap() + 1);
                let want_all = if want_live.len() < k { candidates.clone() } else { candidates[..last].to_vec() };
                prop_assert_eq!(checking, want_all, "{}", target);
            }
        }

        #[test]
        fn relay_peers_are_distinct_others(
            n in 0usize..30,
            count in 0usize..6,
            period in any::<u64>(),
            sender in 0usize..30,
            round in 0u32..8,
        ) {
            let names = members(n);
            let a = Assignment::new(&names, 3, Period(period));
            let sender = format!("edge-{sender:02}");
            let excluded = |m: &str| m.ends_with('3');
            let peers = a.relay_peers(&sender, round, count, excluded);
            let distinct: BTreeSet<&str> = peers.iter().copied().collect();
            prop_assert_eq!(distinct.len(), peers.len());
            let available = names.iter().filter(|m| **m != sender && !excluded(m)).count();
            prop_assert_eq!(peers.len(), count.min(available));
            for p in peers {
                prop_assert!(p != sender && !excluded(p) && a.contains(p));
            }
        }
    }

    #[test]
    fn relay_rounds_reach_many_peers_and_every_member_hears_from_others() {
        let names = members(200);
        let a = Assignment::new(&names, 3, Period(42));
        // one sender's 4 rounds of 3: mostly different peers
        let reached: BTreeSet<&str> = (0..4).flat_map(|r| a.relay_peers("edge-07", r, 3, |_| false)).collect();
        assert!(reached.len() >= 10, "4 rounds x 3 peers reached only {}: {reached:?}", reached.len());
        // every member is pushed to by someone over the period's rounds: the load spreads
        let mut received: BTreeMap<&str, usize> = names.iter().map(|n| (n.as_str(), 0)).collect();
        for sender in &names {
            for r in 0..4 {
                for peer in a.relay_peers(sender, r, 3, |_| false) {
                    *received.get_mut(peer).unwrap() += 1;
                }
            }
        }
        let most = received.values().max().copied().unwrap_or(0);
        let silent = received.values().filter(|c| **c == 0).count();
        assert!(silent <= 2, "{silent} of 200 members never pushed to");
        assert!(most <= 40, "one member takes {most} of 2400 pushes (mean 12)");
    }

    #[test]
    fn small_units_probe_everyone() {
        let names = members(3);
        let a = Assignment::new(&names, 5, Period(1));
        for checker in &names {
            let mut targets = a.targets_of(checker);
            targets.sort();
            let others: Vec<&str> = names.iter().filter(|m| *m != checker).map(String::as_str).collect();
            assert_eq!(targets, others);
        }
        assert!(Assignment::new(&members(1), 3, Period(1)).targets_of("edge-00").is_empty());
        assert!(Assignment::new(&[], 3, Period(1)).targets_of("edge-00").is_empty());
        assert!(a.targets_of("stranger").is_empty() && a.checkers_of("stranger").is_empty());
        assert!(!a.is_assigned("stranger", "edge-00"));
    }

    #[test]
    fn checkers_change_from_period_to_period() {
        let names = members(50);
        let distinct: BTreeSet<BTreeSet<String>> = (0..10)
            .map(|p| {
                Assignment::new(&names, 3, Period(p)).checkers_of("edge-07").into_iter().map(String::from).collect()
            })
            .collect();
        assert!(distinct.len() >= 9, "checker sets should differ between periods: {distinct:?}");
    }

    /// The assignment is a wire-level agreement between daemons, possibly of different
    /// versions: changing the hash or the ring rule changes this and is a breaking change.
    #[test]
    fn assignment_is_pinned() {
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(splitmix64(0), 0xe220_a839_7b1d_cdaf);
        let names = members(6);
        let a = Assignment::new(&names, 2, Period(172_800_000));
        let ring: Vec<(&str, Vec<&str>)> = names.iter().map(|m| (m.as_str(), a.targets_of(m))).collect();
        // ring order: 00 01 05 02 03 04
        assert_eq!(
            ring,
            vec![
                ("edge-00", vec!["edge-01", "edge-05"]),
                ("edge-01", vec!["edge-05", "edge-02"]),
                ("edge-02", vec!["edge-03", "edge-04"]),
                ("edge-03", vec!["edge-04", "edge-00"]),
                ("edge-04", vec!["edge-00", "edge-01"]),
                ("edge-05", vec!["edge-02", "edge-03"]),
            ]
        );
        assert_eq!(a.helpers("edge-00", "edge-01", 2, |_| false), vec!["edge-05", "edge-02"]);
    }

    #[test]
    fn schedule_remembers_a_bounded_number_of_periods() {
        let mut s = Schedule::new(&members(10), 3, 2);
        let a1 = s.assignment(Period(1));
        assert!(Arc::ptr_eq(&a1, &s.assignment(Period(1))));
        s.assignment(Period(2));
        s.assignment(Period(3));
        assert_eq!(s.cache.len(), 2);
        assert!(!Arc::ptr_eq(&a1, &s.assignment(Period(1))), "period 1 was evicted and rebuilt");
        assert_eq!(*s.assignment(Period(1)), *a1, "rebuilt identically");
    }
}
