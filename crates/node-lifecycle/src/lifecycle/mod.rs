//! The node lifecycle controller's logic (kube-controller-manager's `nodelifecycle`),
//! pure: no API calls, no clock. Callers feed node snapshots and instants; the logic
//! answers with actions (mark Unknown, add/remove taints, evict pods).
//!
//! Edge awareness: a node whose Ready condition went Unknown because its heartbeats stopped
//! reaching the cloud, while edge-health watches it (`edgegrid_core::unit::membership`) and
//! its unit's peers have NOT voted it unhealthy (no `nodeunhealth`, whatever its value), is
//! not given the NoExecute taint, its pods are not marked not ready and never evicted, for
//! as long as its protection limit allows (`LifecycleConfig::max_unreachable_protection`;
//! the node's `superedge.io/max-unreachable-protection` annotation may only shorten it).
//! The rule itself is `edgegrid_core::protection`'s, shared with the admission webhook. A
//! node voted unhealthy, past its limit, not watched, or reporting Ready=False itself, is
//! handled as stock Kubernetes would.

mod config;
mod health;
mod monitor;
mod queue;
mod tolerations;
mod zones;

pub use config::LifecycleConfig;
pub use health::{HealthTracker, NodeReport, ReadyStatus};
pub use monitor::{Action, MonitorCore, NodeSnapshot, TaintRef, condition_taint_actions, wanted_no_schedule};
pub use queue::{RateLimitedTimedQueue, TokenBucket};
pub use tolerations::{EvictionDecision, Taint, Toleration, eviction_decision, tolerates};
pub use zones::{ZoneKey, ZoneState, eviction_rate, zone_rate, zone_state};
