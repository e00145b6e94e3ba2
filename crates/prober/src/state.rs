//! The kubelet probe worker's decisions, without time or I/O: given what the target is
//! and what a probe said, what (if anything) becomes the published result.
//!
//! Rules (kubelet's `worker.doProbe`):
//! - no probing while the target is absent, before `initialDelay` has passed since the
//!   target (identity) appeared, or while on hold;
//! - a prober error is discarded (nothing counted, nothing published);
//! - consecutive equal outcomes are counted; the published result changes only when the
//!   run reaches `successThreshold` / `failureThreshold`;
//! - after a liveness or startup failure is published the worker holds until the target's
//!   identity changes (it was restarted), then starts over from the initial result.

use std::time::Duration;

use tokio::time::Instant;

/// What a probe found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    Success,
    Failure,
}

/// Which kind of kubelet probe the worker behaves as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeRole {
    /// Starts as Failure; never holds.
    Readiness,
    /// Starts as Success; holds after a published failure.
    Liveness,
    /// Starts as Failure (kubelet: Unknown); holds after a published failure, and once it
    /// has succeeded it is done (the container is started).
    Startup,
}

impl ProbeRole {
    pub fn initial(self) -> Outcome {
        match self {
            Self::Liveness => Outcome::Success,
            Self::Readiness | Self::Startup => Outcome::Failure,
        }
    }

    fn holds_after_failure(self) -> bool {
        matches!(self, Self::Liveness | Self::Startup)
    }
}

/// The timing and thresholds of a probe (kubelet defaults).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Thresholds {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            initial_delay: Duration::ZERO,
            period: Duration::from_secs(10),
            timeout: Duration::from_secs(1),
            success_threshold: 1,
            failure_threshold: 3,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// The target does not exist (not running / unknown).
    NoTarget,
    /// The target appeared less than `initialDelay` ago.
    InitialDelay,
    /// A liveness/startup failure was published; waiting for a new target identity.
    OnHold,
    /// A startup probe that succeeded has nothing left to do.
    Done,
}

#[derive(Clone, Debug)]
pub struct ProbeState {
    role: ProbeRole,
    thresholds: Thresholds,
    identity: Option<String>,
    appeared_at: Option<Instant>,
    last: Option<Outcome>,
    run: u32,
    published: Outcome,
    on_hold: bool,
}

impl ProbeState {
    pub fn new(role: ProbeRole, thresholds: Thresholds) -> Self {
        Self {
            role,
            thresholds,
            identity: None,
            appeared_at: None,
            last: None,
            run: 0,
            published: role.initial(),
            on_hold: false,
        }
    }

    pub fn published(&self) -> Outcome {
        self.published
    }

    pub fn thresholds(&self) -> &Thresholds {
        &self.thresholds
    }

    /// Called on every tick with the target's current identity (e.g. a peer's boot id).
    /// Returns `Ok(())` when a probe should run now, and the result to publish if a new
    /// identity reset the worker.
    pub fn before_probe(&mut self, identity: Option<&str>, now: Instant) -> (Result<(), Skip>, Option<Outcome>) {
        let mut reset = None;
        if identity != self.identity.as_deref() {
            self.identity = identity.map(str::to_string);
            self.appeared_at = identity.map(|_| now);
            self.on_hold = false;
            self.last = None;
            self.run = 0;
            if self.published != self.role.initial() {
                self.published = self.role.initial();
                reset = Some(self.published);
            }
        }
        let decision = match self.appeared_at {
            None => Err(Skip::NoTarget),
            Some(_) if self.on_hold => Err(Skip::OnHold),
            Some(_) if self.role == ProbeRole::Startup && self.published == Outcome::Success => Err(Skip::Done),
            Some(appeared) if now.duration_since(appeared) < self.thresholds.initial_delay => Err(Skip::InitialDelay),
            Some(_) => Ok(()),
        };
        (decision, reset)
    }

    /// Records one probe's result (after its retries); returns the newly published
    /// result when the published value changed.
    pub fn record(&mut self, result: Result<Outcome, ProberErrorSeen>) -> Option<Outcome> {
        let Ok(outcome) = result else {
            return None;
        };
        if self.last == Some(outcome) {
            self.run = self.run.saturating_add(1);
        } else {
            self.last = Some(outcome);
            self.run = 1;
        }
        let threshold = match outcome {
            Outcome::Success => self.thresholds.success_threshold.max(1),
            Outcome::Failure => self.thresholds.failure_threshold.max(1),
        };
        if self.run < threshold {
            return None;
        }
        let changed = self.published != outcome;
        self.published = outcome;
        if outcome == Outcome::Failure && self.role.holds_after_failure() {
            self.on_hold = true;
            self.run = 0;
        }
        changed.then_some(outcome)
    }
}

/// Marker for "the prober itself failed" (discarded, never counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProberErrorSeen;

#[cfg(test)]
mod tests {
    use super::*;
    use Outcome::*;

    const S: Result<Outcome, ProberErrorSeen> = Ok(Success);
    const F: Result<Outcome, ProberErrorSeen> = Ok(Failure);
    const E: Result<Outcome, ProberErrorSeen> = Err(ProberErrorSeen);

    fn thresholds(success: u32, failure: u32) -> Thresholds {
        Thresholds { success_threshold: success, failure_threshold: failure, ..Default::default() }
    }

    /// Feeds results for a present target; returns what got published after each.
    fn publish_sequence(
        role: ProbeRole,
        t: Thresholds,
        results: &[Result<Outcome, ProberErrorSeen>],
    ) -> Vec<Option<Outcome>> {
        let mut state = ProbeState::new(role, t);
        let now = Instant::now();
        results
            .iter()
            .map(|r| match state.before_probe(Some("id-1"), now).0 {
                Ok(()) => state.record(*r),
                Err(_) => None,
            })
            .collect()
    }

    #[test]
    fn threshold_table() {
        type Case = (&'static str, ProbeRole, Thresholds, Vec<Result<Outcome, ProberErrorSeen>>, Vec<Option<Outcome>>);
        let cases: Vec<Case> = vec![
            (
                "readiness starts failed; one success publishes",
                ProbeRole::Readiness,
                thresholds(1, 3),
                vec![S, S],
                vec![Some(Success), None],
            ),
            (
                "needs 3 consecutive failures",
                ProbeRole::Readiness,
                thresholds(1, 3),
                vec![S, F, F, F, F],
                vec![Some(Success), None, None, Some(Failure), None],
            ),
            (
                "a success breaks the failure run",
                ProbeRole::Readiness,
                thresholds(1, 3),
                vec![S, F, F, S, F, F, F],
                vec![Some(Success), None, None, None, None, None, Some(Failure)],
            ),
            (
                "success threshold 2",
                ProbeRole::Readiness,
                thresholds(2, 1),
                vec![S, F, S, S],
                vec![None, None, None, Some(Success)],
            ),
            (
                "prober errors are discarded, not counted, not breaking runs",
                ProbeRole::Readiness,
                thresholds(1, 2),
                vec![S, F, E, F],
                vec![Some(Success), None, None, Some(Failure)],
            ),
            (
                "liveness starts healthy; failure publishes then holds",
                ProbeRole::Liveness,
                thresholds(1, 2),
                vec![F, F, S, S],
                vec![None, Some(Failure), None, None],
            ),
            (
                "startup succeeds once then is done",
                ProbeRole::Startup,
                thresholds(1, 1),
                vec![S, F, F],
                vec![Some(Success), None, None],
            ),
            (
                "zero thresholds act as one",
                ProbeRole::Readiness,
                thresholds(0, 0),
                vec![S, F],
                vec![Some(Success), Some(Failure)],
            ),
        ];
        for (name, role, t, results, want) in cases {
            assert_eq!(publish_sequence(role, t, &results), want, "{name}");
        }
    }

    #[test]
    fn on_hold_until_identity_changes_then_reset() {
        let mut state = ProbeState::new(ProbeRole::Liveness, thresholds(1, 1));
        let now = Instant::now();
        assert_eq!(state.before_probe(Some("boot-1"), now), (Ok(()), None));
        assert_eq!(state.record(F), Some(Failure));
        assert_eq!(state.before_probe(Some("boot-1"), now), (Err(Skip::OnHold), None));
        // restarted: hold released, published result back to the initial value
        assert_eq!(state.before_probe(Some("boot-2"), now), (Ok(()), Some(Success)));
        assert_eq!(state.record(S), None);
    }

    #[test]
    fn initial_delay_counts_from_when_the_target_appeared() {
        let t = Thresholds { initial_delay: Duration::from_secs(30), ..Default::default() };
        let mut state = ProbeState::new(ProbeRole::Readiness, t);
        let start = Instant::now();
        assert_eq!(state.before_probe(None, start).0, Err(Skip::NoTarget));
        assert_eq!(state.before_probe(Some("a"), start + Duration::from_secs(5)).0, Err(Skip::InitialDelay));
        assert_eq!(state.before_probe(Some("a"), start + Duration::from_secs(34)).0, Err(Skip::InitialDelay));
        assert_eq!(state.before_probe(Some("a"), start + Duration::from_secs(35)).0, Ok(()));
        // the target goes away and comes back: the delay starts over
        assert_eq!(state.before_probe(None, start + Duration::from_secs(40)).0, Err(Skip::NoTarget));
        assert_eq!(state.before_probe(Some("b"), start + Duration::from_secs(41)).0, Err(Skip::InitialDelay));
    }

    #[test]
    fn target_disappearing_resets_the_published_result() {
        let mut state = ProbeState::new(ProbeRole::Readiness, thresholds(1, 3));
        let now = Instant::now();
        assert_eq!(state.before_probe(Some("a"), now), (Ok(()), None));
        assert_eq!(state.record(S), Some(Success));
        assert_eq!(state.before_probe(None, now), (Err(Skip::NoTarget), Some(Failure)));
        assert_eq!(state.published(), Failure);
    }
}
