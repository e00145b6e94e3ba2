//! `edge-node-lifecycle`: runs the edge-aware node lifecycle logic of the `node-lifecycle`
//! crate against a Kubernetes API server, as a replacement for kube-controller-manager's
//! node lifecycle controller (run the latter with `--controllers=*,-node-lifecycle-controller`).

pub mod cli;
pub mod controller;
pub mod metrics;
pub mod snapshot;
