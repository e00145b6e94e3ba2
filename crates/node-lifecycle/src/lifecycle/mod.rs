//! The node lifecycle controller's logic (kube-controller-manager's `nodelifecycle`),
//! pure: no API calls, no clock. Callers feed node snapshots and instants; the logic
//! answers with actions (mark Unknown, add/remove taints, evict pods).
//!
//! Edge awareness: a node whose Ready condition went Unknown because its heartbeats stopped
//! reaching the cloud, while its unit's peers have NOT voted it unhealthy (no
//! `nodeunhealth: "yes"`), is never given the NoExecute taint and its pods are never
//! evicted. A node voted unhealthy, or reporting Ready=False itself, is handled as stock
//! Kubernetes would.

mod config;
mod health;
mod monitor;
mod queue;
mod tolerations;
mod zones;

pub use config::LifecycleConfig;
pub use health::{HealthTracker, NodeReport, ReadyStatus};
pub use monitor::{Action, MonitorCore, NodeSnapshot, TaintRef};
pub use queue::{RateLimitedTimedQueue, TokenBucket};
pub use tolerations::{EvictionDecision, Taint, Toleration, eviction_decision, tolerates};
pub use zones::{ZoneKey, ZoneState, eviction_rate, zone_state};
