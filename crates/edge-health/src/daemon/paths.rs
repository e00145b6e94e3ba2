//! The HTTP paths other nodes call on a daemon: [`EXCHANGE_PATH`], which peers send their
//! frames to ([`super::round`] sends, [`super::server`] serves), and SuperEdge's retired
//! edge-health API ([`SUPEREDGE_PATHS`], answered `410 Gone` by [`super::server`] and
//! counted by path in [`super::metrics`]).

/// Where peers take messages.
pub const EXCHANGE_PATH: &str = "/exchange";

/// SuperEdge v0.9's edge-health API (`pkg/edge-health/communicate`): its daemons `PUT
/// /result` to each peer they check, its grid wrapper `GET`s `/localinfo` from the node's
/// own daemon, `/probe` runs probes for callers.
pub const SUPEREDGE_PATHS: [&str; 3] = ["/result", "/localinfo", "/probe"];
