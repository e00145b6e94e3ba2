//! Probe workers and the manager under paused tokio time: exact probe instants and
//! exact published changes, no sleeping.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use edgegrid_prober::*;
use futures::future::BoxFuture;
use tokio::time::Instant;

/// Answers from a script (then Success), recording when it was asked.
struct Scripted {
    script: Mutex<VecDeque<Result<Outcome, ProberError>>>,
    calls: Mutex<Vec<Duration>>,
    start: Instant,
    busy_for: Duration,
    in_flight: Mutex<(usize, usize)>,
}

impl Scripted {
    fn new(script: Vec<Result<Outcome, ProberError>>) -> Arc<Self> {
        Self::slow(script, Duration::ZERO)
    }

    fn slow(script: Vec<Result<Outcome, ProberError>>, busy_for: Duration) -> Arc<Self> {
        Arc::new(Self {
            script: Mutex::new(script.into()),
            calls: Mutex::default(),
            start: Instant::now(),
            busy_for,
            in_flight: Mutex::default(),
        })
    }

    fn call_seconds(&self) -> Vec<u64> {
        self.calls.lock().unwrap().iter().map(|d| d.as_secs()).collect()
    }
}

impl Prober for Scripted {
    fn probe<'a>(&'a self, _: &'a ProbeTarget, _: Duration) -> BoxFuture<'a, Result<ProbeReport, ProberError>> {
        Box::pin(async move {
            self.calls.lock().unwrap().push(self.start.elapsed());
            {
                let mut f = self.in_flight.lock().unwrap();
                f.0 += 1;
                f.1 = f.1.max(f.0);
            }
            tokio::time::sleep(self.busy_for).await;
            self.in_flight.lock().unwrap().0 -= 1;
            let next = self.script.lock().unwrap().pop_front().unwrap_or(Ok(Outcome::Success));
            next.map(|outcome| ProbeReport { outcome, detail: String::new() })
        })
    }
}

const S: Result<Outcome, ProberError> = Ok(Outcome::Success);
const F: Result<Outcome, ProberError> = Ok(Outcome::Failure);

fn err() -> Result<Outcome, ProberError> {
    Err(ProberError::Exec("no such file".into()))
}

fn spec(role: ProbeRole, initial_delay: u64, failure_threshold: u32) -> WorkerSpec {
    WorkerSpec {
        target: ProbeTarget::Tcp { host: "127.0.0.1".into(), port: 1 },
        role,
        thresholds: Thresholds {
            initial_delay: Duration::from_secs(initial_delay),
            period: Duration::from_secs(10),
            failure_threshold,
            ..Default::default()
        },
    }
}

/// (second, outcome) of every change published until `until`.
async fn changes_until(
    manager: &ProbeManager,
    rx: &mut tokio::sync::broadcast::Receiver<ResultChange>,
    start: Instant,
    until: u64,
) -> Vec<(u64, Outcome)> {
    let _ = manager;
    let mut out = Vec::new();
    let deadline = start + Duration::from_secs(until);
    loop {
        tokio::select! {
            change = rx.recv() => out.push((start.elapsed().as_secs(), change.unwrap().outcome)),
            _ = tokio::time::sleep_until(deadline) => return out,
        }
    }
}

fn manager(prober: Arc<Scripted>) -> ProbeManager {
    ProbeManager::new(prober, 16).with_jitter(|_, _| Duration::from_secs(3))
}

#[tokio::test(start_paused = true)]
async fn jitter_period_and_failure_threshold() {
    let prober = Scripted::new(vec![S, S, F, F, F, S]);
    let manager = manager(prober.clone());
    let mut rx = manager.subscribe();
    let start = Instant::now();
    manager.add("peer-a", spec(ProbeRole::Readiness, 0, 3), Some("boot-1".into()));
    assert_eq!(manager.result("peer-a"), Some(Outcome::Failure), "readiness starts failed");
    let changes = changes_until(&manager, &mut rx, start, 60).await;
    assert_eq!(prober.call_seconds(), [3, 13, 23, 33, 43, 53]);
    assert_eq!(changes, [(3, Outcome::Success), (43, Outcome::Failure), (53, Outcome::Success)]);
    assert_eq!(manager.result("peer-a"), Some(Outcome::Success));
}

#[tokio::test(start_paused = true)]
async fn prober_errors_are_retried_within_a_tick_then_discarded() {
    let prober = Scripted::new(vec![err(), err(), S, err(), err(), err(), F]);
    let manager = manager(prober.clone());
    let mut rx = manager.subscribe();
    let start = Instant::now();
    manager.add("peer-a", spec(ProbeRole::Readiness, 0, 1), Some("boot-1".into()));
    let changes = changes_until(&manager, &mut rx, start, 20).await;
    // tick 3: two errors then a success; tick 13: three errors (discarded) ...
    assert_eq!(prober.call_seconds(), [3, 3, 3, 13, 13, 13]);
    assert_eq!(changes, [(3, Outcome::Success)]);
    let changes = changes_until(&manager, &mut rx, start, 30).await;
    assert_eq!(changes, [(23, Outcome::Failure)], "... and tick 23 counts normally again");
}

#[tokio::test(start_paused = true)]
async fn initial_delay_and_absent_targets_are_not_probed() {
    let prober = Scripted::new(vec![]);
    let manager = manager(prober.clone());
    let mut rx = manager.subscribe();
    let start = Instant::now();
    manager.add("peer-a", spec(ProbeRole::Readiness, 25, 3), None);
    tokio::time::sleep(Duration::from_secs(10)).await;
    manager.set_identity("peer-a", Some("boot-1".into())); // appears at t=10, seen at the t=13 tick
    let changes = changes_until(&manager, &mut rx, start, 50).await;
    assert_eq!(prober.call_seconds(), [43], "first probe once 25s passed since it was seen at t=13");
    assert_eq!(changes, [(43, Outcome::Success)]);
}

#[tokio::test(start_paused = true)]
async fn liveness_holds_after_failure_until_the_target_restarts() {
    let prober = Scripted::new(vec![F]);
    let manager = manager(prober.clone());
    let mut rx = manager.subscribe();
    let start = Instant::now();
    manager.add("peer-a", spec(ProbeRole::Liveness, 0, 1), Some("boot-1".into()));
    assert_eq!(manager.result("peer-a"), Some(Outcome::Success), "liveness starts healthy");
    let changes = changes_until(&manager, &mut rx, start, 30).await;
    assert_eq!(changes, [(3, Outcome::Failure)]);
    assert_eq!(prober.call_seconds(), [3], "on hold: no probes at 13 and 23");
    manager.set_identity("peer-a", Some("boot-2".into()));
    let changes = changes_until(&manager, &mut rx, start, 40).await;
    assert_eq!(changes, [(33, Outcome::Success)], "reset to the initial result on restart");
    assert_eq!(prober.call_seconds(), [3, 33]);
}

#[tokio::test(start_paused = true)]
async fn removed_workers_stop_cleanly() {
    let prober = Scripted::new(vec![]);
    let manager = manager(prober.clone());
    manager.add("peer-a", spec(ProbeRole::Readiness, 0, 3), Some("boot-1".into()));
    manager.add("peer-b", spec(ProbeRole::Readiness, 0, 3), Some("boot-1".into()));
    tokio::time::sleep(Duration::from_secs(15)).await;
    manager.remove("peer-a");
    assert_eq!(manager.result("peer-a"), None);
    assert_eq!(manager.len(), 1);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(prober.call_seconds(), [3, 3, 13, 13, 23, 33, 43], "only peer-b after t=15");
    manager.shutdown().await;
    assert!(manager.is_empty());
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(prober.calls.lock().unwrap().len(), 7, "nothing after shutdown");
}

#[tokio::test(start_paused = true)]
async fn concurrency_is_bounded() {
    let prober = Scripted::slow(vec![], Duration::from_secs(1));
    let manager = ProbeManager::new(prober.clone(), 2).with_jitter(|_, _| Duration::ZERO);
    for i in 0..10 {
        manager.add(format!("peer-{i}"), spec(ProbeRole::Readiness, 0, 3), Some("boot".into()));
    }
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(prober.in_flight.lock().unwrap().1, 2, "never more than 2 probes at once");
    assert_eq!(prober.calls.lock().unwrap().len(), 10, "all 10 probed within the first period");
    assert!(manager.results().values().all(|o| *o == Outcome::Success));
}

#[test]
fn default_jitter_spreads_within_the_period() {
    let period = Duration::from_secs(10);
    let delays: Vec<Duration> = (0..1000).map(|i| spread_by_key(&format!("node-{i}"), period)).collect();
    assert!(delays.iter().all(|d| *d < period));
    let buckets = delays.iter().fold([0usize; 10], |mut b, d| {
        b[d.as_secs() as usize] += 1;
        b
    });
    assert!(buckets.iter().all(|n| (50..=150).contains(n)), "roughly uniform: {buckets:?}");
    assert_eq!(spread_by_key("node-1", period), spread_by_key("node-1", period), "stable per key");
}
