//! The edge-health admission mutations, pure: given an object the node lifecycle
//! controller is writing and what is known about nodes, the JSON patch that keeps an
//! unreachable-but-alive node's pods running and its endpoints serving.
//!
//! The only changes ever made: remove the `node.kubernetes.io/unreachable` NoExecute taint
//! from a protected node; move a protected node's addresses from `notReadyAddresses` to
//! `addresses` (core Endpoints) or set `ready` on its non-terminating endpoints
//! (EndpointSlices). A node is protected when its Ready condition is Unknown and its unit
//! has not voted it unhealthy. Anything doubtful (no Ready condition, unknown node, no
//! nodeName) is left unchanged: no patch, never a panic.

mod mutations;

pub use mutations::{NodeState, endpoint_slice_patch, endpoints_patch, node_patch, node_state};
