//! The rate-limited timed queue that paces NoExecute tainting: de-duplicated, ordered by
//! the time an entry is due (first added, first due), drained through a token bucket
//! whose rate can be swapped at runtime as the zone's state changes.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use tokio::time::Instant;

/// A token bucket (burst 1 in the controller). A rate of zero never admits anything.
///
/// Kept as "when is the next token free" in exact durations rather than a float token
/// count, so a 0.1/s bucket admits at exactly 10 s intervals however often it is polled.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: u32,
    interval: Duration,
    next_free: Instant,
}

impl TokenBucket {
    /// Starts full, as client-go's token bucket does.
    pub fn new(qps: f64, burst: u32, now: Instant) -> Self {
        let qps = if qps.is_finite() { qps.max(0.0) } else { 0.0 };
        let interval = if qps > 0.0 { Duration::from_secs_f64(1.0 / qps) } else { Duration::MAX };
        let burst = burst.max(1);
        let mut bucket = Self { qps, burst, interval, next_free: now };
        bucket.next_free = bucket.earliest(now);
        bucket
    }

    /// Starts empty: the first token is free one interval after `now`. For a limiter
    /// that cannot know when it was last used (see [`RateLimitedTimedQueue::new_empty`]).
    pub fn new_empty(qps: f64, burst: u32, now: Instant) -> Self {
        let mut bucket = Self::new(qps, burst, now);
        bucket.drain(now);
        bucket
    }

    pub fn qps(&self) -> f64 {
        self.qps
    }

    /// The oldest `next_free` that still caps the stored tokens at `burst`.
    fn earliest(&self, now: Instant) -> Instant {
        let saved = self.interval.checked_mul(self.burst - 1).unwrap_or(Duration::MAX);
        now.checked_sub(saved).unwrap_or(now)
    }

    pub fn try_accept(&mut self, now: Instant) -> bool {
        if !self.has_token(now) {
            return false;
        }
        self.next_free = self.next_free.max(self.earliest(now)) + self.interval;
        true
    }

    fn has_token(&self, now: Instant) -> bool {
        self.qps > 0.0 && now >= self.next_free
    }

    fn drain(&mut self, now: Instant) {
        if self.qps > 0.0 {
            self.next_free = now + self.interval;
        }
    }
}

#[derive(Clone, Debug)]
pub struct RateLimitedTimedQueue {
    /// (due, insertion sequence, name): the head is the entry due first.
    order: BTreeSet<(Instant, u64, String)>,
    entries: HashMap<String, (Instant, u64)>,
    next_seq: u64,
    limiter: TokenBucket,
}

impl RateLimitedTimedQueue {
    /// A queue whose bucket starts full, as client-go's does: the first entry goes at once.
    pub fn new(qps: f64, now: Instant) -> Self {
        Self::with_limiter(TokenBucket::new(qps, 1, now))
    }

    /// A queue whose bucket starts empty: the first entry waits one interval. A queue
    /// created by a controller that just started (or just took over) cannot know when the
    /// previous instance last let an entry through, perhaps a moment ago; starting full
    /// would let a restart add one taint more than the rate allows.
    pub fn new_empty(qps: f64, now: Instant) -> Self {
        Self::with_limiter(TokenBucket::new_empty(qps, 1, now))
    }

    fn with_limiter(limiter: TokenBucket) -> Self {
        Self { order: BTreeSet::new(), entries: HashMap::new(), next_seq: 0, limiter }
    }

    /// Adds `name` due now; false if it is already queued (the earlier entry keeps its place).
    pub fn add(&mut self, name: &str, now: Instant) -> bool {
        if self.entries.contains_key(name) {
            return false;
        }
        self.next_seq += 1;
        self.entries.insert(name.to_string(), (now, self.next_seq));
        self.order.insert((now, self.next_seq, name.to_string()));
        true
    }

    pub fn remove(&mut self, name: &str) -> bool {
        match self.entries.remove(name) {
            Some((due, seq)) => self.order.remove(&(due, seq, name.to_string())),
            None => false,
        }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn rate(&self) -> f64 {
        self.limiter.qps()
    }

    /// Changes the drain rate. A bucket that was empty stays empty under the new rate, so
    /// a rate change cannot be used to skip the wait (client-go's SwapLimiter).
    pub fn swap_rate(&mut self, qps: f64, now: Instant) {
        if (self.limiter.qps() - qps).abs() < f64::EPSILON {
            return;
        }
        let was_waiting = !self.limiter.has_token(now);
        let mut limiter = TokenBucket::new(qps, 1, now);
        if was_waiting {
            limiter.drain(now);
        }
        self.limiter = limiter;
    }

    /// Processes due entries while tokens last. `process` returns `Ok` when done with an
    /// entry, or `Err(wait)` to retry it after `wait`. An entry not yet due does not
    /// spend a token (client-go spends one first; nothing else differs).
    pub fn try_process(&mut self, now: Instant, mut process: impl FnMut(&str) -> Result<(), Duration>) {
        while let Some((due, seq, name)) = self.order.first().cloned() {
            if due > now || !self.limiter.try_accept(now) {
                return;
            }
            self.order.remove(&(due, seq, name.clone()));
            match process(&name) {
                Ok(()) => {
                    self.entries.remove(&name);
                }
                Err(wait) => {
                    let retry_at = now + wait + Duration::from_nanos(1);
                    self.entries.insert(name.clone(), (retry_at, seq));
                    self.order.insert((retry_at, seq, name));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(queue: &mut RateLimitedTimedQueue, at: Instant) -> Vec<String> {
        let mut out = Vec::new();
        queue.try_process(at, |name| {
            out.push(name.to_string());
            Ok(())
        });
        out
    }

    #[test]
    fn dedup_order_and_rate() {
        let t0 = Instant::now();
        let s = |secs: f64| t0 + Duration::from_secs_f64(secs);
        let mut q = RateLimitedTimedQueue::new(0.1, t0);
        assert!(q.add("b", s(0.0)));
        assert!(q.add("a", s(1.0)));
        assert!(!q.add("b", s(2.0)), "already queued");
        assert!(q.add("c", s(2.0)));
        assert_eq!(drain(&mut q, s(2.0)), ["b"], "burst 1: one at once, oldest first");
        assert_eq!(drain(&mut q, s(11.0)), Vec::<String>::new(), "next token at 12s");
        assert_eq!(drain(&mut q, s(12.0)), ["a"]);
        assert!(q.remove("c"));
        assert!(!q.remove("c"));
        assert_eq!(drain(&mut q, s(100.0)), Vec::<String>::new());
        assert!(q.is_empty());
    }

    #[test]
    fn retries_are_rescheduled_and_zero_rate_stops() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let mut q = RateLimitedTimedQueue::new(1.0, t0);
        q.add("x", s(0));
        q.try_process(s(0), |_| Err(Duration::from_secs(5)));
        assert!(q.contains("x"));
        assert_eq!(drain(&mut q, s(4)), Vec::<String>::new(), "not due before 5s");
        q.swap_rate(0.0, s(4));
        assert_eq!(drain(&mut q, s(100)), Vec::<String>::new(), "rate 0 never drains");
        q.swap_rate(1.0, s(100));
        assert_eq!(drain(&mut q, s(100)), Vec::<String>::new(), "leaving rate 0 starts with an empty bucket");
        assert_eq!(drain(&mut q, s(101)), ["x"]);
    }

    #[test]
    fn token_bucket_is_exact_and_caps_at_burst() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(0.1, 1, t0);
        let accepted: Vec<u64> = (0..=35).filter(|s| bucket.try_accept(t0 + Duration::from_secs(*s))).collect();
        assert_eq!(accepted, [0, 10, 20, 30], "polled every second, admits every 10 s exactly");
        let mut burst = TokenBucket::new(1.0, 3, t0);
        let later = t0 + Duration::from_secs(100);
        let admitted = (0..5).filter(|_| burst.try_accept(later)).count();
        assert_eq!(admitted, 3, "idle time saves at most `burst` tokens");
        assert!(!TokenBucket::new(0.0, 1, t0).try_accept(later));
    }

    #[test]
    fn an_empty_queue_waits_one_interval_before_its_first_entry() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let mut q = RateLimitedTimedQueue::new_empty(0.1, t0);
        q.add("a", t0);
        q.add("b", t0);
        assert_eq!(drain(&mut q, s(0)), Vec::<String>::new(), "no token at creation");
        assert_eq!(drain(&mut q, s(9)), Vec::<String>::new());
        assert_eq!(drain(&mut q, s(10)), ["a"]);
        assert_eq!(drain(&mut q, s(19)), Vec::<String>::new());
        assert_eq!(drain(&mut q, s(20)), ["b"]);
        // swapping the rate keeps it empty
        let mut q = RateLimitedTimedQueue::new_empty(0.1, t0);
        q.add("a", t0);
        q.swap_rate(1.0, s(1));
        assert_eq!(drain(&mut q, s(1)), Vec::<String>::new());
        assert_eq!(drain(&mut q, s(2)), ["a"]);
        assert!(!TokenBucket::new_empty(0.0, 1, t0).try_accept(s(100)), "rate 0 stays closed");
    }

    #[test]
    fn swapping_rates_keeps_an_empty_bucket_empty() {
        let t0 = Instant::now();
        let mut q = RateLimitedTimedQueue::new(0.01, t0);
        q.add("a", t0);
        q.add("b", t0);
        assert_eq!(drain(&mut q, t0), ["a"]);
        q.swap_rate(0.1, t0 + Duration::from_secs(1));
        assert_eq!(drain(&mut q, t0 + Duration::from_secs(10)), Vec::<String>::new(), "bucket was empty");
        assert_eq!(drain(&mut q, t0 + Duration::from_secs(11)), ["b"], "10 s at the new rate");
    }
}
