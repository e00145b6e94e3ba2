//! The domain core shared by every edgegrid component: the `superedge.io/v1` CRD types,
//! the well-known keys, the topology engine, the rules about node units ([`unit`]), and the
//! edge rule deciding which unreachable nodes are protected. It performs no I/O, reads no
//! clock and knows no async runtime, so every decision here is tested by feeding it objects
//! (and the time) directly.

pub mod admission;
pub mod crd;
pub mod edge_rule;
pub mod keys;
pub mod protection;
pub mod topology;
pub mod unit;
pub mod vouch;
