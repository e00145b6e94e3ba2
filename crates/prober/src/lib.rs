//! Kubelet-style probing: probe kinds, the worker state machine, workers and a manager.
//! edge-health probes its unit's peers with it; it knows nothing of nodes, units or votes.

mod manager;
mod probes;
mod state;
mod worker;

pub use manager::{ProbeManager, ResultChange, spread_by_key};
pub use probes::{
    HttpProbe, KUBELET_SERVING_CN_PREFIX, MAX_BODY_BYTES, NetworkProber, ProbeReport, ProbeTarget, Prober, ProberError,
    TlsVerification, run_probe, run_probe_from,
};
pub use state::{Outcome, ProbeRole, ProbeState, ProberErrorSeen, Skip, Thresholds};
pub use worker::{MAX_PROBE_ATTEMPTS, WorkerSpec};
