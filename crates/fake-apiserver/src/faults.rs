//! Fault injection: make a resource fail, hang or slow down, for tests and the local
//! cluster's chaos switches. Rules are keyed by resource plural (`pods`), or `*` for all.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::error::ApiError;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Fault {
    /// Answer every request with this HTTP status (as a `Status` object).
    Error(u16),
    /// Never answer (until the fault is cleared).
    Hang,
    /// Answer after this many milliseconds.
    LatencyMs(u64),
}

#[derive(Default)]
pub struct Faults {
    rules: Mutex<BTreeMap<String, Fault>>,
    /// Bumped whenever rules change, releasing hung requests to re-check.
    changed: watch::Sender<u64>,
}

impl Faults {
    pub fn set(&self, resource: &str, fault: Fault) {
        self.lock().insert(resource.to_string(), fault);
        self.changed.send_modify(|g| *g += 1);
    }

    pub fn clear(&self) {
        self.lock().clear();
        self.changed.send_modify(|g| *g += 1);
    }

    pub fn list(&self) -> BTreeMap<String, Fault> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Fault>> {
        self.rules.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn current(&self, plural: &str) -> Option<Fault> {
        let rules = self.lock();
        rules.get(plural).or_else(|| rules.get("*")).cloned()
    }

    /// Applies the fault for `plural`, if any: waits, or fails the request.
    pub async fn apply(&self, plural: &str) -> Result<(), ApiError> {
        let mut changes = self.changed.subscribe();
        loop {
            match self.current(plural) {
                None => return Ok(()),
                Some(Fault::LatencyMs(ms)) => {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    return Ok(());
                }
                Some(Fault::Error(code)) => return Err(injected(code)),
                Some(Fault::Hang) => {
                    if changes.changed().await.is_err() {
                        return Err(ApiError::Unavailable("server shutting down".into()));
                    }
                }
            }
        }
    }
}

fn injected(code: u16) -> ApiError {
    let message = format!("injected fault ({code})");
    match code {
        404 => ApiError::NoSuchResource,
        409 => ApiError::Conflict {
            resource: "injected".into(),
            name: String::new(),
            group: String::new(),
            kind: String::new(),
        },
        410 => ApiError::Expired { requested: 0, oldest: 0 },
        429 => ApiError::TooManyRequests(message),
        503 => ApiError::Unavailable(message),
        504 => ApiError::Timeout(message),
        _ => ApiError::Internal(message),
    }
}
