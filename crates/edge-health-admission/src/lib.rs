//! The edge-health admission webhook: while a node is Ready=Unknown but its unit's peers
//! have not voted it unhealthy, strip the unreachable NoExecute taint the node lifecycle
//! controller adds and keep its endpoints ready, on the way into the apiserver.
//!
//! [`review`] decides (pure, on `edgegrid_core::admission`), [`nodes`] is the watch-backed
//! verdict cache, [`server`] the router the binary serves over TLS, [`self_managed`] the
//! optional mode that issues and shares its own certificate and keeps `caBundle` current,
//! [`taint_remover`] takes off an unreachable NoExecute taint that got past the webhook;
//! [`verdict_writer`] writes the `nodeunhealth` verdicts from the views the edge-health
//! daemons publish on their own Nodes.

pub mod cli;
pub mod configuration;
pub mod metrics;
pub mod nodes;
pub mod review;
pub mod self_managed;
pub mod server;
pub mod taint_remover;
pub mod verdict_writer;
