//! Whether each grid kind's CRD serves the status subresource, as this process knows it,
//! so a cluster that kept SuperEdge's CRDs is reconciled without a status write storm.
//!
//! SuperEdge's CRDs declare no `subresources.status`, and Helm never upgrades CRDs: after
//! a migration the cluster may still serve SuperEdge's, where every status write (server-
//! side apply to `/status`) is 404. Such a kind's status is then not written at all; its
//! generated objects are reconciled as usual, and the fix is reported once per kind.
//!
//! How it is detected, and why this way:
//! - Discovery (`GET /apis/superedge.io/v1`), which lists `<plural>/status` exactly when
//!   the CRD has the subresource, is asked before a kind's first status write. Discovery is
//!   readable by every authenticated client (the default `system:discovery` binding), unlike
//!   the CRDs themselves (the controller's role need not read them), it answers for the
//!   kind rather than one object, and asking first means no status write ever fails: one
//!   GET per kind per process, and concurrent first reconciles wait for that one answer.
//! - A 404 of a status write is not trusted alone: the grid deleted during its reconcile
//!   gets the same 404, and the two differ only in message text. It triggers a new
//!   discovery answer instead, which catches a CRD replaced at run time (SuperEdge's own
//!   controller re-applies its CRDs every minute while it runs,
//!   pkg/application-grid-controller/prepare/crd.go:64); when discovery still lists
//!   `/status`, the 404 was the object's and is not an error.
//! - While the subresource is missing, discovery is asked again at most once per
//!   `reprobe` (a minute by default) per kind, at a reconcile that has a status to write:
//!   stored status never matches what we would write there, so every reconcile has one,
//!   and every grid reconciles on any change and at least every resync. Status writes
//!   resume at the first such reconcile after the CRD gained the subresource. No CRD
//!   watch, so no RBAC on CRDs and nothing running while nothing reconciles.
//!
//! Never: write a status while the subresource is known to be missing, or report the
//! missing subresource twice for a kind in one process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::ApiResource;

/// How often, at most, a kind known to lack the subresource is asked about again.
pub const DEFAULT_REPROBE: Duration = Duration::from_secs(60);

/// What is known about one kind's status subresource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Known {
    /// Not asked yet.
    Unknown,
    /// Served (or assumed served: discovery failed; a 404 will ask again).
    Served,
    /// Not served, as of `asked`.
    Missing { asked: Instant },
}

/// What to do about a status write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Write,
    Skip,
    /// Ask discovery first.
    Ask,
}

/// A change of what is known, for the caller to report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// The subresource is missing; `first` when this process had not reported it for the kind.
    Missing { first: bool },
    /// It is served again after having been missing: status writes resume.
    Resumed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct KindState {
    known: Known,
    reported: bool,
}

impl KindState {
    const NEW: Self = Self { known: Known::Unknown, reported: false };

    fn decide(&self, now: Instant, reprobe: Duration) -> Decision {
        match self.known {
            Known::Unknown => Decision::Ask,
            Known::Served => Decision::Write,
            Known::Missing { asked } if now.saturating_duration_since(asked) >= reprobe => Decision::Ask,
            Known::Missing { .. } => Decision::Skip,
        }
    }

    /// Folds in discovery's answer (`None`: discovery failed).
    fn observe(&mut self, served: Option<bool>, now: Instant) -> Option<Transition> {
        let was_missing = matches!(self.known, Known::Missing { .. });
        match served {
            Some(true) => {
                self.known = Known::Served;
                was_missing.then_some(Transition::Resumed)
            }
            Some(false) => {
                self.known = Known::Missing { asked: now };
                if was_missing {
                    return None;
                }
                let first = !self.reported;
                self.reported = true;
                Some(Transition::Missing { first })
            }
            // unknown stays writable (a 404 asks again); missing is asked again after `reprobe`
            None => {
                self.known = if was_missing { Known::Missing { asked: now } } else { Known::Served };
                None
            }
        }
    }
}

/// One kind's state, and the lock that makes concurrent reconciles wait for one answer.
#[derive(Debug)]
struct KindEntry {
    state: Mutex<KindState>,
    asking: tokio::sync::Mutex<()>,
}

/// What the controllers know about their kinds' status subresources.
#[derive(Debug)]
pub struct StatusSubresources {
    reprobe: Duration,
    kinds: Mutex<HashMap<String, Arc<KindEntry>>>,
}

/// Whether to write a status, and what changed on the way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusWrite {
    pub write: bool,
    pub transition: Option<Transition>,
}

impl StatusSubresources {
    pub fn new(reprobe: Duration) -> Self {
        Self { reprobe, kinds: Mutex::default() }
    }

    fn entry(&self, kind: &str) -> Arc<KindEntry> {
        let mut kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        kinds
            .entry(kind.to_string())
            .or_insert_with(|| Arc::new(KindEntry { state: Mutex::new(KindState::NEW), asking: Default::default() }))
            .clone()
    }

    fn state(entry: &KindEntry) -> std::sync::MutexGuard<'_, KindState> {
        entry.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `kind` is known to lack the subresource (its status then lives only in memory).
    pub fn is_missing(&self, kind: &str) -> bool {
        matches!(Self::state(&self.entry(kind)).known, Known::Missing { .. })
    }

    /// Whether to write a status of `resource`'s kind now, asking discovery when due.
    pub async fn gate(&self, client: &Client, resource: &ApiResource) -> StatusWrite {
        let entry = self.entry(&resource.kind);
        let decided = Self::state(&entry).decide(Instant::now(), self.reprobe);
        if decided != Decision::Ask {
            return StatusWrite { write: decided == Decision::Write, transition: None };
        }
        let _asking = entry.asking.lock().await;
        // whoever held the lock before may have asked already
        let decided = Self::state(&entry).decide(Instant::now(), self.reprobe);
        if decided != Decision::Ask {
            return StatusWrite { write: decided == Decision::Write, transition: None };
        }
        let served = serves_status(client, resource).await;
        let mut state = Self::state(&entry);
        let transition = state.observe(served, Instant::now());
        StatusWrite { write: state.known == Known::Served, transition }
    }

    /// A status write of `resource`'s kind was answered 404: asks discovery whether the
    /// subresource went away. `None` when discovery could not tell (the 404 stands).
    pub async fn after_not_found(&self, client: &Client, resource: &ApiResource) -> Option<StatusWrite> {
        let entry = self.entry(&resource.kind);
        let _asking = entry.asking.lock().await;
        let served = serves_status(client, resource).await?;
        let mut state = Self::state(&entry);
        let transition = state.observe(Some(served), Instant::now());
        Some(StatusWrite { write: served, transition })
    }
}

/// Discovery's answer: whether `<plural>/status` is served. `None` when discovery failed.
async fn serves_status(client: &Client, resource: &ApiResource) -> Option<bool> {
    let status = format!("{}/status", resource.plural);
    match client.list_api_group_resources(&resource.api_version).await {
        Ok(list) => Some(list.resources.iter().any(|r| r.name == status)),
        Err(error) => {
            tracing::warn!(%error, kind = %resource.kind, "discovery failed; assuming the status subresource is served");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPROBE: Duration = Duration::from_secs(60);

    #[test]
    fn unknown_asks_served_writes_missing_skips_until_reprobe() {
        let t0 = Instant::now();
        let mut state = KindState::NEW;
        assert_eq!(state.decide(t0, REPROBE), Decision::Ask);
        assert_eq!(state.observe(Some(false), t0), Some(Transition::Missing { first: true }));
        assert_eq!(state.decide(t0, REPROBE), Decision::Skip);
        assert_eq!(state.decide(t0 + REPROBE - Duration::from_millis(1), REPROBE), Decision::Skip);
        assert_eq!(state.decide(t0 + REPROBE, REPROBE), Decision::Ask);
        // still missing: no new transition, asked again only after another interval
        let t1 = t0 + REPROBE;
        assert_eq!(state.observe(Some(false), t1), None);
        assert_eq!(state.decide(t1 + Duration::from_secs(1), REPROBE), Decision::Skip);
        // the CRD gained the subresource
        let t2 = t1 + REPROBE;
        assert_eq!(state.observe(Some(true), t2), Some(Transition::Resumed));
        assert_eq!(state.decide(t2, REPROBE), Decision::Write);
        assert_eq!(state.observe(Some(true), t2), None, "served twice is no change");
        // and lost it again (SuperEdge's CRD re-applied): missing, but reported once only
        assert_eq!(state.observe(Some(false), t2), Some(Transition::Missing { first: false }));
    }

    #[test]
    fn failed_discovery_writes_when_unknown_and_waits_when_missing() {
        let t0 = Instant::now();
        let mut unknown = KindState::NEW;
        assert_eq!(unknown.observe(None, t0), None);
        assert_eq!(unknown.decide(t0, REPROBE), Decision::Write, "a 404 will ask again");
        let mut missing = KindState::NEW;
        missing.observe(Some(false), t0);
        let t1 = t0 + REPROBE;
        assert_eq!(missing.observe(None, t1), None);
        assert_eq!(missing.decide(t1, REPROBE), Decision::Skip, "no discovery storm while it fails");
        assert_eq!(missing.decide(t1 + REPROBE, REPROBE), Decision::Ask);
    }

    proptest::proptest! {
        /// Any sequence of discovery answers (served, missing, failed) at any times: the
        /// missing subresource is reported as `first` exactly once, and only if it ever
        /// went missing; `Resumed` only follows a `Missing`; a status is written only while
        /// the last answer was "served" (or failed before anything was known), and
        /// discovery is asked again only once `reprobe` has passed since it said missing.
        #[test]
        fn answers_in_any_order_keep_the_promises(
            steps in proptest::collection::vec((proptest::option::of(proptest::bool::ANY), 0u64..120), 0..30)
        ) {
            let mut now = Instant::now();
            let mut state = KindState::NEW;
            let (mut firsts, mut missing, mut went_missing, mut last_missing_at) = (0, false, false, None);
            for (answer, advance) in steps {
                now += Duration::from_secs(advance);
                let decided = state.decide(now, REPROBE);
                match (missing, last_missing_at) {
                    (true, Some(at)) => proptest::prop_assert_eq!(
                        decided,
                        if now.duration_since(at) >= REPROBE { Decision::Ask } else { Decision::Skip }
                    ),
                    _ => proptest::prop_assert_ne!(decided, Decision::Skip),
                }
                match state.observe(answer, now) {
                    Some(Transition::Missing { first }) => {
                        proptest::prop_assert!(!missing);
                        firsts += usize::from(first);
                        proptest::prop_assert_eq!(first, !went_missing);
                        went_missing = true;
                    }
                    Some(Transition::Resumed) => proptest::prop_assert!(missing),
                    None => {}
                }
                if let Some(served) = answer {
                    missing = !served;
                }
                if missing {
                    last_missing_at = Some(now);
                }
                proptest::prop_assert_eq!(state.decide(now, REPROBE) == Decision::Write, !missing);
            }
            proptest::prop_assert_eq!(firsts, usize::from(went_missing));
        }
    }

    #[test]
    fn served_from_the_start_is_never_a_transition() {
        let mut state = KindState::NEW;
        assert_eq!(state.observe(Some(true), Instant::now()), None);
        assert_eq!(state.decide(Instant::now(), REPROBE), Decision::Write);
    }
}
