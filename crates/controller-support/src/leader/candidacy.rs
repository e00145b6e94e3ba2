//! This process's standing in a Lease election, decided without I/O and without the wall
//! clock (client-go's semantics): a Lease held by another process expires
//! `leaseDurationSeconds` after THIS process last saw the record change, on the local
//! monotonic clock. The holder's `renewTime` is only ever compared for change, never with
//! the local time, so clocks skewed between hosts cannot make two leaders. A leader keeps
//! leading through failed renewals until the renew deadline has passed since its last
//! successful write; the deadline is shorter than the lease duration, so it steps down
//! before any standby may take over.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;

/// What the election reads from a Lease. Two reads that differ in any field are a
/// change: the holder renewed, released, or someone else took over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    pub holder_identity: Option<String>,
    pub lease_duration: Option<Duration>,
    pub renew_time: Option<jiff::Timestamp>,
    pub lease_transitions: i32,
    pub resource_version: Option<String>,
}

impl From<&Lease> for LeaseRecord {
    fn from(lease: &Lease) -> Self {
        let spec = lease.spec.as_ref();
        Self {
            holder_identity: spec.and_then(|s| s.holder_identity.clone()).filter(|h| !h.is_empty()),
            lease_duration: spec
                .and_then(|s| s.lease_duration_seconds)
                .and_then(|secs| u64::try_from(secs).ok())
                .map(Duration::from_secs),
            renew_time: spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0),
            lease_transitions: spec.and_then(|s| s.lease_transitions).unwrap_or(0),
            resource_version: lease.metadata.resource_version.clone(),
        }
    }
}

/// When this process first saw the Lease as it is now (`record: None`: absent).
#[derive(Clone, Debug)]
struct Observation {
    record: Option<LeaseRecord>,
    since: Instant,
}

#[derive(Clone, Debug)]
pub struct Candidacy {
    identity: String,
    /// Ours; also how long a record that states none lasts.
    lease_duration: Duration,
    renew_deadline: Duration,
    observed: Option<Observation>,
    /// When our last successful write of the Lease was sent; `None` while not leading.
    renewed_at: Option<Instant>,
}

impl Candidacy {
    pub fn new(identity: impl Into<String>, lease_duration: Duration, renew_deadline: Duration) -> Self {
        Self { identity: identity.into(), lease_duration, renew_deadline, observed: None, renewed_at: None }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Takes in the Lease as just read (`None`: it does not exist). The expiry clock of a
    /// record restarts only when the record changes.
    pub fn observe(&mut self, record: Option<LeaseRecord>, now: Instant) {
        let changed = self.observed.as_ref().is_none_or(|seen| seen.record != record);
        if !self.holds(record.as_ref()) {
            // someone else holds it (or nobody): whatever we wrote before is gone
            self.renewed_at = None;
        }
        if changed {
            self.observed = Some(Observation { record, since: now });
        }
    }

    /// Whether to write the Lease now: it is absent, free, ours, or its holder has not
    /// changed it for its whole lease duration as measured here.
    pub fn should_try_acquire(&self, now: Instant) -> bool {
        let Some(seen) = &self.observed else { return true };
        let Some(record) = &seen.record else { return true };
        if record.holder_identity.is_none() || self.holds(Some(record)) {
            return true;
        }
        let lasts = record.lease_duration.filter(|d| !d.is_zero()).unwrap_or(self.lease_duration);
        now.saturating_duration_since(seen.since) >= lasts
    }

    /// Our write of `written` succeeded; `sent` is when the request left, since the server
    /// may have applied it (and standbys seen it) any time after.
    pub fn renewed(&mut self, written: LeaseRecord, sent: Instant, now: Instant) {
        if self.holds(Some(&written)) {
            self.renewed_at = Some(sent);
        }
        self.observed = Some(Observation { record: Some(written), since: now });
    }

    /// Until when we lead without another successful renewal; `None` when not leading.
    pub fn leading_until(&self, now: Instant) -> Option<Instant> {
        let until = self.renewed_at? + self.renew_deadline;
        (now < until).then_some(until)
    }

    pub fn is_leading(&self, now: Instant) -> bool {
        self.leading_until(now).is_some()
    }

    /// Whether the last Lease seen names us, i.e. whether there is something to release.
    pub fn holds_observed(&self) -> bool {
        self.observed.as_ref().is_some_and(|seen| self.holds(seen.record.as_ref()))
    }

    /// Writing `current` as ours: does it change hands (a new acquire time and one more
    /// transition) or is it a renewal?
    pub fn takes_over(&self, current: Option<&LeaseRecord>) -> bool {
        !self.holds(current)
    }

    fn holds(&self, record: Option<&LeaseRecord>) -> bool {
        record.and_then(|r| r.holder_identity.as_deref()) == Some(self.identity.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(15);
    const RENEW_DEADLINE: Duration = Duration::from_secs(10);

    fn secs(n: f64) -> Duration {
        Duration::from_secs_f64(n)
    }

    fn record(holder: &str, renew_time: &str, version: u32) -> LeaseRecord {
        LeaseRecord {
            holder_identity: (!holder.is_empty()).then(|| holder.to_string()),
            lease_duration: Some(LEASE),
            renew_time: Some(renew_time.parse().unwrap()),
            lease_transitions: 1,
            resource_version: Some(version.to_string()),
        }
    }

    fn standby() -> Candidacy {
        Candidacy::new("b_2", LEASE, RENEW_DEADLINE)
    }

    #[test]
    fn absent_or_released_lease_is_taken_at_once() {
        let t0 = Instant::now();
        let mut me = standby();
        assert!(me.should_try_acquire(t0), "nothing observed yet");
        me.observe(None, t0);
        assert!(me.should_try_acquire(t0));
        me.observe(Some(record("", "2030-01-01T00:00:00Z", 7)), t0);
        assert!(me.should_try_acquire(t0));
        assert!(!me.is_leading(t0), "trying is not leading");
    }

    #[test]
    fn holder_renew_time_far_in_the_past_does_not_expire_a_live_lease() {
        // the holder's clock is an hour behind ours: comparing its renewTime with our clock
        // would call the lease expired at once and make a second leader
        let t0 = Instant::now();
        let mut me = standby();
        me.observe(Some(record("a_1", "2020-01-01T00:00:00Z", 7)), t0);
        assert!(!me.should_try_acquire(t0));
        assert!(!me.should_try_acquire(t0 + secs(14.9)));
        // the holder keeps renewing (its renewTime moves, still far in the past): never ours
        for renewal in 1..30u32 {
            let at = t0 + secs(2.0 * f64::from(renewal));
            let renew_time = format!("2020-01-01T00:00:{:02}Z", 2 * renewal);
            me.observe(Some(record("a_1", &renew_time, 7 + renewal)), at);
            assert!(!me.should_try_acquire(at + secs(14.9)), "renewal {renewal}");
        }
    }

    #[test]
    fn holder_renew_time_far_in_the_future_still_expires_when_it_stops_changing() {
        // the holder's clock is a day ahead and it died: wall-clock expiry would wait a day
        let t0 = Instant::now();
        let mut me = standby();
        let frozen = record("a_1", "2099-01-01T00:00:00Z", 7);
        me.observe(Some(frozen.clone()), t0);
        for at in [1.0, 5.0, 10.0, 14.9] {
            me.observe(Some(frozen.clone()), t0 + secs(at));
            assert!(!me.should_try_acquire(t0 + secs(at)), "at {at}s");
        }
        assert!(me.should_try_acquire(t0 + LEASE), "15 s after we last saw it change");
    }

    #[test]
    fn expiry_counts_from_the_last_change_seen_not_the_first_sight() {
        let t0 = Instant::now();
        let mut me = standby();
        me.observe(Some(record("a_1", "2025-01-01T00:00:00Z", 7)), t0);
        // only the resourceVersion moved (e.g. a label was edited): still a change
        me.observe(Some(record("a_1", "2025-01-01T00:00:00Z", 8)), t0 + secs(10.0));
        assert!(!me.should_try_acquire(t0 + secs(20.0)));
        assert!(me.should_try_acquire(t0 + secs(25.0)));
    }

    #[test]
    fn the_holders_own_lease_duration_applies() {
        let t0 = Instant::now();
        let mut me = standby();
        let long = LeaseRecord { lease_duration: Some(secs(60.0)), ..record("a_1", "2025-01-01T00:00:00Z", 7) };
        me.observe(Some(long), t0);
        assert!(!me.should_try_acquire(t0 + secs(59.0)));
        assert!(me.should_try_acquire(t0 + secs(60.0)));
    }

    #[test]
    fn transient_renew_errors_keep_leadership_until_the_renew_deadline() {
        let t0 = Instant::now();
        let mut me = standby();
        me.observe(None, t0);
        me.renewed(record("b_2", "2025-01-01T00:00:00Z", 1), t0, t0 + secs(0.1));
        assert!(me.is_leading(t0 + secs(0.1)));
        // renewals at 2 s, 4 s, 6 s, 8 s fail (500s, timeouts): nothing is observed or written
        for at in [2.0, 4.0, 6.0, 8.0, 9.99] {
            assert!(me.is_leading(t0 + secs(at)), "at {at}s");
        }
        assert_eq!(me.leading_until(t0 + secs(9.0)), Some(t0 + RENEW_DEADLINE));
        assert!(!me.is_leading(t0 + RENEW_DEADLINE), "steps down at the deadline");
        assert!(RENEW_DEADLINE < LEASE, "before a standby may take over");
    }

    #[test]
    fn a_renewal_after_errors_extends_leadership_from_when_it_was_sent() {
        let t0 = Instant::now();
        let mut me = standby();
        me.observe(None, t0);
        me.renewed(record("b_2", "2025-01-01T00:00:00Z", 1), t0, t0);
        let current = record("b_2", "2025-01-01T00:00:00Z", 1);
        me.observe(Some(current.clone()), t0 + secs(7.0));
        assert!(me.should_try_acquire(t0 + secs(7.0)), "ours: renew");
        assert!(!me.takes_over(Some(&current)));
        me.renewed(record("b_2", "2025-01-01T00:00:08Z", 2), t0 + secs(8.0), t0 + secs(9.5));
        assert_eq!(me.leading_until(t0 + secs(9.5)), Some(t0 + secs(18.0)));
    }

    #[test]
    fn seeing_another_holder_ends_leadership_at_once() {
        let t0 = Instant::now();
        let mut me = standby();
        me.observe(None, t0);
        me.renewed(record("b_2", "2025-01-01T00:00:00Z", 1), t0, t0);
        me.observe(Some(record("c_3", "2025-01-01T00:00:01Z", 2)), t0 + secs(2.0));
        assert!(!me.is_leading(t0 + secs(2.0)));
        assert!(!me.holds_observed(), "nothing of ours to release");
        // and a failed renewal afterwards does not bring it back
        assert!(!me.is_leading(t0 + secs(3.0)));
    }

    #[test]
    fn taking_over_a_lease_of_another_is_a_transition() {
        let me = standby();
        assert!(me.takes_over(None));
        assert!(me.takes_over(Some(&record("a_1", "2025-01-01T00:00:00Z", 1))));
        assert!(me.takes_over(Some(&record("", "2025-01-01T00:00:00Z", 1))));
        assert!(!me.takes_over(Some(&record("b_2", "2025-01-01T00:00:00Z", 1))));
    }

    #[test]
    fn records_are_read_from_leases() {
        let lease: Lease = held_lease();
        assert_eq!(
            LeaseRecord::from(&lease),
            LeaseRecord {
                holder_identity: Some("a_1".into()),
                lease_duration: Some(LEASE),
                renew_time: Some("2025-01-01T00:00:00.5Z".parse().unwrap()),
                lease_transitions: 3,
                resource_version: Some("42".into()),
            }
        );
        let released = Lease {
            spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
                holder_identity: Some(String::new()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(LeaseRecord::from(&released).holder_identity, None, "an empty holder is no holder");
    }

    fn held_lease() -> Lease {
        use k8s_openapi::api::coordination::v1::LeaseSpec;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
        Lease {
            metadata: ObjectMeta { resource_version: Some("42".into()), ..Default::default() },
            spec: Some(LeaseSpec {
                holder_identity: Some("a_1".into()),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime("2025-01-01T00:00:00.5Z".parse().unwrap())),
                lease_transitions: Some(3),
                ..Default::default()
            }),
        }
    }
}
