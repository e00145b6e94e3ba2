//! Time as values: wall-clock timestamps and the numbered check periods every member of a
//! unit agrees on.
//!
//! Nothing here reads a clock. The daemon passes `now` in; tests and the simulation pass
//! a simulated clock. Periods are aligned to the Unix epoch rather than to each daemon's
//! start so that members with synchronised clocks (NTP, as Kubernetes already requires
//! for certificates and leases) compute the same period number, and with it the same
//! probe assignment, without talking to each other.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch, as carried on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(u64);

impl Timestamp {
    pub const fn from_unix_millis(millis: u64) -> Self {
        Self(millis)
    }

    pub const fn as_unix_millis(self) -> u64 {
        self.0
    }

    pub fn saturating_add(self, by: Duration) -> Self {
        Self(self.0.saturating_add(duration_millis(by)))
    }

    pub fn saturating_sub(self, by: Duration) -> Self {
        Self(self.0.saturating_sub(duration_millis(by)))
    }

    /// How far apart two timestamps are, whichever is later.
    pub fn distance(self, other: Self) -> Duration {
        Duration::from_millis(self.0.abs_diff(other.0))
    }
}

/// A check period's number: `floor(unix time / period length)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Period(pub u64);

impl Period {
    pub fn next(self) -> Self {
        Self(self.0.saturating_add(1))
    }
}

/// Maps wall-clock time to period numbers for one period length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeriodClock {
    length_millis: u64,
}

/// Why a period length cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the check period must be at least 1ms, got {0:?}")]
pub struct ZeroPeriod(pub Duration);

impl PeriodClock {
    pub fn new(length: Duration) -> Result<Self, ZeroPeriod> {
        let length_millis = duration_millis(length);
        if length_millis == 0 {
            return Err(ZeroPeriod(length));
        }
        Ok(Self { length_millis })
    }

    pub fn length(&self) -> Duration {
        Duration::from_millis(self.length_millis)
    }

    pub fn period_at(&self, now: Timestamp) -> Period {
        Period(now.0 / self.length_millis)
    }

    pub fn start_of(&self, period: Period) -> Timestamp {
        Timestamp(period.0.saturating_mul(self.length_millis))
    }
}

fn duration_millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_are_aligned_to_the_epoch() {
        let clock = PeriodClock::new(Duration::from_secs(10)).unwrap();
        assert_eq!(clock.period_at(Timestamp::from_unix_millis(0)), Period(0));
        assert_eq!(clock.period_at(Timestamp::from_unix_millis(9_999)), Period(0));
        assert_eq!(clock.period_at(Timestamp::from_unix_millis(10_000)), Period(1));
        assert_eq!(clock.start_of(Period(7)), Timestamp::from_unix_millis(70_000));
        assert_eq!(clock.length(), Duration::from_secs(10));
    }

    #[test]
    fn a_zero_period_is_refused() {
        assert_eq!(PeriodClock::new(Duration::from_micros(999)), Err(ZeroPeriod(Duration::from_micros(999))));
    }

    #[test]
    fn timestamp_arithmetic_saturates() {
        let t = Timestamp::from_unix_millis(5);
        assert_eq!(t.saturating_sub(Duration::from_secs(1)), Timestamp::from_unix_millis(0));
        assert_eq!(
            Timestamp::from_unix_millis(u64::MAX).saturating_add(Duration::from_secs(1)).as_unix_millis(),
            u64::MAX
        );
        assert_eq!(t.distance(Timestamp::from_unix_millis(2)), Duration::from_millis(3));
        assert_eq!(Timestamp::from_unix_millis(2).distance(t), Duration::from_millis(3));
    }
}
