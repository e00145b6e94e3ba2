//! The edge-health admission mutations, pure: given an object the node lifecycle
//! controller is writing and what is known about nodes, the JSON patch that keeps an
//! unreachable-but-alive node's pods running and its endpoints serving.
//!
//! The only changes ever made: remove the `node.kubernetes.io/unreachable` NoExecute taint
//! from a protected node; move a protected node's addresses from `notReadyAddresses` to
//! `addresses` (core Endpoints) or set `ready` on its non-terminating endpoints
//! (EndpointSlices). Whether a node is protected is [`crate::protection`]'s rule (Ready
//! Unknown, not voted unhealthy, within its protection limit), judged at the `now` and
//! under the cluster-wide [`ProtectionPolicy`](crate::protection::ProtectionPolicy) the
//! caller passes; this module only reads the node's JSON into
//! [`NodeFacts`](crate::protection::NodeFacts) (through
//! [`NodeReading`](crate::protection::NodeReading)). Anything doubtful (no Ready condition,
//! unknown node, no nodeName) is left unchanged: no patch, never a panic.

mod mutations;

pub use mutations::{
    SliceEndpoint, Subset, endpoint_slice_patch, endpoints_patch, node_facts, node_patch, node_patch_judging,
    slice_endpoints_patch, subsets_patch, taints_patch,
};
