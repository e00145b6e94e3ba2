//! The node lifecycle controller's logic, made edge-aware: a node whose unit's peers see it
//! alive is never tainted NoExecute and its pods are never evicted. Pure (no API calls, no
//! clock); `edge-node-lifecycle` runs it against an API server.

pub mod lifecycle;
