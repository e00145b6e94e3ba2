//! The domain core shared by every edgegrid component: the `superedge.io/v1` CRD types,
//! the well-known keys, and the topology engine. It performs no I/O and knows no async
//! runtime, so every decision here is tested by feeding it objects directly.

pub mod admission;
pub mod crd;
pub mod keys;
pub mod topology;
