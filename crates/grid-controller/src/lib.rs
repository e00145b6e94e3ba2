//! The grid controller: ServiceGrid -> Service `{name}-svc` annotated with `topologyKeys`;
//! DeploymentGrid / StatefulSetGrid -> one workload `{name}-{unit}` per distinct value of
//! the grid's node label, pinned to its unit.
//!
//! `plan` holds every decision as pure functions (what objects should exist, which unit
//! values are unusable and why); the runtime only applies plans.

pub mod metrics;
pub mod names;
pub mod ownership;
pub mod plan;
pub mod reconcile;
pub mod status;
pub mod status_subresource;
pub mod units;
