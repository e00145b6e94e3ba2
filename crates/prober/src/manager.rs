//! Runs many probe workers on one tokio runtime: at most `max_concurrent_probes` probes
//! in flight at once, current results readable at any time, changes as a stream.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{Semaphore, broadcast, watch};
use tokio::task::JoinHandle;

use crate::probes::Prober;
use crate::state::Outcome;
use crate::worker::{Worker, WorkerSpec};

/// A published result changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResultChange {
    pub key: String,
    pub outcome: Outcome,
}

struct Handle {
    identity: watch::Sender<Option<String>>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

type Jitter = dyn Fn(&str, Duration) -> Duration + Send + Sync;

pub struct ProbeManager {
    prober: Arc<dyn Prober>,
    limiter: Arc<Semaphore>,
    results: Arc<RwLock<HashMap<String, Outcome>>>,
    changes: broadcast::Sender<ResultChange>,
    workers: Mutex<HashMap<String, Handle>>,
    jitter: Arc<Jitter>,
}

impl ProbeManager {
    pub fn new(prober: Arc<dyn Prober>, max_concurrent_probes: usize) -> Self {
        let (changes, _) = broadcast::channel(4096);
        Self {
            prober,
            limiter: Arc::new(Semaphore::new(max_concurrent_probes.max(1))),
            results: Arc::default(),
            changes,
            workers: Mutex::default(),
            jitter: Arc::new(spread_by_key),
        }
    }

    /// Replaces how the first-probe delay is chosen (tests pin it).
    pub fn with_jitter(mut self, jitter: impl Fn(&str, Duration) -> Duration + Send + Sync + 'static) -> Self {
        self.jitter = Arc::new(jitter);
        self
    }

    /// Starts (or restarts) the worker for `key`. Its result starts at the role's
    /// initial value. `identity` is the target's identity (`None` = absent).
    pub fn add(&self, key: impl Into<String>, spec: WorkerSpec, identity: Option<String>) {
        let key = key.into();
        self.remove(&key);
        let (identity_tx, identity_rx) = watch::channel(identity);
        let (stop_tx, stop_rx) = watch::channel(false);
        let initial = spec.role.initial();
        self.write_results().insert(key.clone(), initial);
        let worker = Worker {
            first_delay: (self.jitter)(&key, spec.thresholds.period),
            spec,
            identity: identity_rx,
            prober: self.prober.clone(),
            limiter: self.limiter.clone(),
            stop: stop_rx,
        };
        let results = self.results.clone();
        let changes = self.changes.clone();
        let worker_key = key.clone();
        let task = tokio::spawn(worker.run(move |outcome| {
            results.write().unwrap_or_else(|e| e.into_inner()).insert(worker_key.clone(), outcome);
            // no subscriber is fine
            let _ = changes.send(ResultChange { key: worker_key.clone(), outcome });
        }));
        self.lock_workers().insert(key, Handle { identity: identity_tx, stop: stop_tx, task });
    }

    /// Tells a worker its target's identity changed (restarted, went away, came back).
    pub fn set_identity(&self, key: &str, identity: Option<String>) {
        if let Some(handle) = self.lock_workers().get(key) {
            handle.identity.send_if_modified(|current| {
                let changed = *current != identity;
                *current = identity;
                changed
            });
        }
    }

    /// Stops and forgets a worker (its result is removed).
    pub fn remove(&self, key: &str) {
        if let Some(handle) = self.lock_workers().remove(key) {
            let _ = handle.stop.send(true);
        }
        self.write_results().remove(key);
    }

    pub fn result(&self, key: &str) -> Option<Outcome> {
        self.results.read().unwrap_or_else(|e| e.into_inner()).get(key).copied()
    }

    pub fn results(&self) -> HashMap<String, Outcome> {
        self.results.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<ResultChange> {
        self.changes.subscribe()
    }

    pub fn len(&self) -> usize {
        self.lock_workers().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops every worker and waits for them to finish.
    pub async fn shutdown(&self) {
        let handles: Vec<Handle> = self.lock_workers().drain().map(|(_, h)| h).collect();
        for handle in &handles {
            let _ = handle.stop.send(true);
        }
        for handle in handles {
            let _ = handle.task.await;
        }
    }

    fn lock_workers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Handle>> {
        self.workers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn write_results(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Outcome>> {
        self.results.write().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for ProbeManager {
    fn drop(&mut self) {
        for handle in self.lock_workers().values() {
            let _ = handle.stop.send(true);
        }
    }
}

/// Spreads first probes over the period by a hash of the key: thousands of workers
/// started together do not probe in lock-step, and a given key always gets the same slot.
pub fn spread_by_key(key: &str, period: Duration) -> Duration {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut hasher);
    let nanos = period.as_nanos().max(1) as u64;
    Duration::from_nanos(hasher.finish() % nanos)
}
