//! Node health for edge clusters: kubelet-style probe workers (used by edge-health to
//! probe peers) and the node lifecycle controller's logic, made edge-aware: a node whose
//! unit's peers see it alive is never tainted NoExecute and its pods are never evicted.

pub mod lifecycle;
pub mod prober;
