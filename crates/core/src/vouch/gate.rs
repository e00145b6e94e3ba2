//! Both ends of a stream: the signer's [`StateRecorder`] notes the states a stream goes
//! through; a follower's [`VouchGate`] holds what its leader sends until a state at or after it
//! is vouched for.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

use super::KeyedSet;
use super::batch::Voucher;
use super::set_hash::{ElementDigest, StateDigest};

/// One step of a stream, as a list/watch delivers it: a list (`Begin`, every object
/// `Apply`, each one missing `Delete`, `Done`), or one change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op<K, T> {
    Begin,
    /// `K` holds the object `T`, whose element digest is given.
    Apply(K, ElementDigest, T),
    Delete(K),
    Done,
}

/// A state a stream can be checked at: after a change outside a list, or once a list is
/// done (halfway through a list, the set is neither the old state nor the new one).
fn is_point<K, T>(op: &Op<K, T>, listing: bool) -> bool {
    match op {
        Op::Done => true,
        Op::Apply(..) | Op::Delete(_) => !listing,
        Op::Begin => false,
    }
}

/// The set a stream's steps build, and whether a list is under way.
#[derive(Clone, Debug)]
struct Tracked<K: Ord> {
    set: KeyedSet<K>,
    listing: bool,
}

impl<K: Ord> Default for Tracked<K> {
    fn default() -> Self {
        Self { set: KeyedSet::default(), listing: false }
    }
}

impl<K: Ord + Clone> Tracked<K> {
    /// Takes `op` into the set; the state's digest if it is a point.
    fn step<T>(&mut self, op: &Op<K, T>) -> Option<StateDigest> {
        match op {
            Op::Begin => self.listing = true,
            Op::Apply(key, element, _) => self.set.put(key.clone(), *element),
            Op::Delete(key) => self.set.delete(key),
            Op::Done => {}
        }
        let point = is_point(op, self.listing).then(|| self.set.digest());
        if matches!(op, Op::Done) {
            self.listing = false;
        }
        point
    }
}

/// The signer's record of one stream: the digests of the states it went through since
/// the last batch.
#[derive(Debug)]
pub struct StateRecorder<K: Ord> {
    tracked: Tracked<K>,
    /// Whether a list has completed (before that, the stream vouches for nothing).
    synced: bool,
    since_batch: Vec<StateDigest>,
}

impl<K: Ord> Default for StateRecorder<K> {
    fn default() -> Self {
        Self { tracked: Tracked::default(), synced: false, since_batch: Vec::new() }
    }
}

impl<K: Ord + Clone> StateRecorder<K> {
    /// Takes one step of the stream.
    pub fn step<T>(&mut self, op: &Op<K, T>) {
        if let Some(point) = self.tracked.step(op) {
            self.synced |= matches!(op, Op::Done);
            if self.synced && self.since_batch.last() != Some(&point) {
                self.since_batch.push(point);
            }
        }
    }

    /// The states for the next batch, the current one last (also when nothing changed,
    /// so that a state that lasts stays vouched for); `None` until the stream is listed.
    pub fn take_states(&mut self) -> Option<Vec<StateDigest>> {
        self.take_states_refreshing(true)
    }

    /// [`StateRecorder::take_states`], naming the current state when nothing changed only if
    /// `refresh` (a stream of many, e.g. one per unit, refreshed in turns to keep batches
    /// small: followers must then keep a digest for longer than a round of refreshes).
    pub fn take_states_refreshing(&mut self, refresh: bool) -> Option<Vec<StateDigest>> {
        if !self.synced {
            return None;
        }
        let mut states = std::mem::take(&mut self.since_batch);
        // a list under way: the state before it began is still the last whole one
        if !self.tracked.listing && (refresh || !states.is_empty()) {
            let current = self.tracked.set.digest();
            if states.last() != Some(&current) {
                states.push(current);
            }
        }
        Some(states)
    }

    /// Takes back `states` a batch could not carry: they go out, before the states
    /// recorded since, with the next one.
    pub fn give_back(&mut self, mut states: Vec<StateDigest>) {
        states.append(&mut self.since_batch);
        self.since_batch = states;
    }

    /// How many objects the stream holds.
    pub fn len(&self) -> usize {
        self.tracked.set.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tracked.set.is_empty()
    }
}

/// A step held back, when it arrived, and the state's digest after it if it is a point.
#[derive(Debug)]
struct Held<K, T> {
    op: Op<K, T>,
    at: Instant,
    point: Option<StateDigest>,
    /// A list's delete of a key the stream never held: an object the index held before
    /// this gate (see [`VouchGate::take`]).
    held_before: bool,
}

/// A follower's gate on one stream from its leader: steps pass once the state after them,
/// or a later one, was vouched for; until then they are held (the cache serves the last
/// vouched state meanwhile).
#[derive(Debug)]
pub struct VouchGate<K: Ord, T> {
    stream: String,
    tracked: Tracked<K>,
    held: VecDeque<Held<K, T>>,
    /// The state passed on last (vouched for then): a held state equal to it (a relist
    /// from another leader of what is served) passes without a new batch.
    passed: Option<StateDigest>,
    /// The keys of that state: a delete passes on only for a key it holds.
    passed_keys: BTreeSet<K>,
}

impl<K: Ord + Clone, T> VouchGate<K, T> {
    /// A gate for `stream` (its name in the batches).
    pub fn new(stream: impl Into<String>) -> Self {
        Self {
            stream: stream.into(),
            tracked: Tracked::default(),
            held: VecDeque::new(),
            passed: None,
            passed_keys: BTreeSet::new(),
        }
    }

    /// Takes the next step from the leader, arrived at `now`; it is held until
    /// [`VouchGate::release`] finds it vouched for. A delete of a key the stream does not
    /// hold changes no state. Outside a list it is dropped (passed on, it could reach an
    /// object the cache keys otherwise, e.g. a Node by name). Inside a list it is the
    /// list/watch's own difference for an object its index held before the stream began
    /// (restored, inherited, or left by an earlier stream: the list/watch is told what the
    /// index holds, and deletes what the list lacks), not the leader's word: it passes with
    /// the list's end, whose state, once vouched for, does not have the object.
    pub fn take(&mut self, op: Op<K, T>, now: Instant) {
        let held_before = match &op {
            Op::Delete(key) if !self.tracked.set.contains(key) => {
                if !self.tracked.listing {
                    return;
                }
                true
            }
            _ => false,
        };
        let point = self.tracked.step(&op);
        self.held.push_back(Held { op, at: now, point, held_before });
    }

    /// [`VouchGate::release`] when only the newest held step can have made a difference (a
    /// step taken since the last release; the batches are unchanged): one check, not a
    /// scan of everything held.
    pub fn release_newest(&mut self, voucher: &Voucher, now: Instant) -> Vec<Op<K, T>> {
        let newest = self.held.back().and_then(|held| held.point);
        match newest {
            Some(point) if self.passed == Some(point) || voucher.vouches(&self.stream, &point, now) => {
                self.release_through(self.held.len() - 1)
            }
            _ => Vec::new(),
        }
    }

    /// The steps up to the last held state the voucher vouches for at `now`, or that is
    /// the state passed on last (none if there is no such state), as that state's
    /// differences: each object's last step
    /// only, in key order, inside `Begin`/`Done` if a list was among them. The states in
    /// between were not vouched for (a forger may put an object in and take it out again
    /// before a vouched state), so no step leads to one: only the vouched state is served.
    /// A list among the steps applied every object of the state (the list/watch does, and
    /// deletes each one missing, including those its index held before the stream), so the
    /// differences of a list are the whole state again.
    pub fn release(&mut self, voucher: &Voucher, now: Instant) -> Vec<Op<K, T>> {
        let passes =
            |point: &StateDigest| self.passed.as_ref() == Some(point) || voucher.vouches(&self.stream, point, now);
        let last = self.held.iter().rposition(|held| held.point.as_ref().is_some_and(passes));
        match last {
            Some(last) => self.release_through(last),
            None => Vec::new(),
        }
    }

    /// The held steps up to `last` (a passing point), as its state's differences.
    fn release_through(&mut self, last: usize) -> Vec<Op<K, T>> {
        self.passed = self.held[last].point;
        let (mut listed, mut last_steps) = (false, BTreeMap::new());
        for held in self.held.drain(..=last) {
            match held.op {
                Op::Begin | Op::Done => listed = true,
                Op::Apply(key, element, object) => {
                    last_steps.insert(key.clone(), (Op::Apply(key, element, object), false));
                }
                Op::Delete(key) => {
                    last_steps.insert(key.clone(), (Op::Delete(key), held.held_before));
                }
            }
        }
        let mut released = Vec::with_capacity(last_steps.len() + 2);
        if listed {
            released.push(Op::Begin);
        }
        for (key, (step, held_before)) in last_steps {
            match step {
                Op::Apply(..) => {
                    self.passed_keys.insert(key);
                    released.push(step);
                }
                // an object put in and taken out between two passed states never reached
                // the cache: nothing to delete there; one the index held before the stream
                // did reach it
                Op::Delete(_) if self.passed_keys.remove(&key) || held_before => released.push(step),
                Op::Delete(_) | Op::Begin | Op::Done => {}
            }
        }
        if listed {
            released.push(Op::Done);
        }
        released
    }

    /// When the oldest step still held arrived: `None` when nothing is held.
    pub fn held_since(&self) -> Option<Instant> {
        self.held.front().map(|held| held.at)
    }

    /// How many steps are held.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// The stream's name in the batches.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The digest of the state passed on last, if any.
    pub fn passed(&self) -> Option<&StateDigest> {
        self.passed.as_ref()
    }
}
