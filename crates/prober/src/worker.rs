//! One probe worker: ticks every period (after an initial jitter), asks the state
//! machine whether to probe, probes (retrying prober errors), publishes changes.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, watch};
use tokio::time::{Instant, MissedTickBehavior};

use crate::probes::{ProbeTarget, Prober};
use crate::state::{Outcome, ProbeRole, ProbeState, ProberErrorSeen, Thresholds};

/// kubelet retries a probe this many times within one tick while the prober errors.
pub const MAX_PROBE_ATTEMPTS: usize = 3;

/// What one worker probes and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerSpec {
    pub target: ProbeTarget,
    pub role: ProbeRole,
    pub thresholds: Thresholds,
}

pub(crate) struct Worker {
    pub spec: WorkerSpec,
    pub identity: watch::Receiver<Option<String>>,
    pub prober: Arc<dyn Prober>,
    pub limiter: Arc<Semaphore>,
    pub first_delay: Duration,
    pub stop: watch::Receiver<bool>,
}

impl Worker {
    pub async fn run(self, mut publish: impl FnMut(Outcome) + Send) {
        let Self { spec, identity, prober, limiter, first_delay, mut stop } = self;
        let mut state = ProbeState::new(spec.role, spec.thresholds.clone());
        tokio::select! {
            _ = tokio::time::sleep(first_delay) => {}
            _ = stop.changed() => return,
        }
        let period = spec.thresholds.period.max(Duration::from_millis(1));
        let mut ticker = tokio::time::interval_at(Instant::now(), period);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = stop.changed() => return,
            }
            let current = identity.borrow().clone();
            let (decision, reset) = state.before_probe(current.as_deref(), Instant::now());
            if let Some(outcome) = reset {
                publish(outcome);
            }
            if decision.is_err() {
                continue;
            }
            let result = tokio::select! {
                result = probe_with_retries(&spec, prober.as_ref(), &limiter) => result,
                _ = stop.changed() => return,
            };
            if let Some(outcome) = state.record(result) {
                publish(outcome);
            }
        }
    }
}

async fn probe_with_retries(
    spec: &WorkerSpec,
    prober: &dyn Prober,
    limiter: &Semaphore,
) -> Result<Outcome, ProberErrorSeen> {
    for attempt in 1..=MAX_PROBE_ATTEMPTS {
        let _permit = limiter.acquire().await.map_err(|_| ProberErrorSeen)?;
        match prober.probe(&spec.target, spec.thresholds.timeout).await {
            Ok(report) => return Ok(report.outcome),
            Err(e) => tracing::debug!(attempt, error = %e, "prober error (discarded)"),
        }
    }
    Err(ProberErrorSeen)
}
