//! What every edgegrid controller binary shares, so each `main.rs` stays thin: Lease
//! leader election, the `/metrics` `/healthz` `/readyz` endpoints, Kubernetes-style
//! duration flags, client construction and SIGTERM handling.

pub mod flags;
pub mod leader;
pub mod probes;
pub mod process;
