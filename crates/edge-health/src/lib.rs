//! edge-health's domain core: the decisions of the per-node daemon that lets the nodes of
//! a unit judge, among themselves and independently of the cloud link, which of them are
//! alive, and writes the verdict as the Node annotation `nodeunhealth` (`"yes"`, or
//! `"undecided"` when the unit reaches no verdict; read, as SuperEdge reads it, by its
//! presence: only a Healthy verdict removes it).
//!
//! Everything here is pure: no async runtime, no sockets, no clock. Time is passed in as
//! values ([`time`]), inputs are fed as data, decisions come back as data (probe
//! assignments, frames to send, requests, verdict changes, JSON patches). The daemon is a
//! thin shell doing the I/O around it, and `sim` (built for this crate's tests and with the
//! `sim` feature, for the benchmark; not in the shipped binary) runs whole units in-process
//! on a simulated clock and a lossy simulated network.
//!
//! One period, as a member sees it:
//! 1. [`membership`] says which units the node is in and who its peers are;
//! 2. [`selection`] says which `k` peers it probes this period (every member is probed by
//!    `k` others);
//! 3. it challenges them for a signature over a fresh nonce ([`liveness`]: an address
//!    answers for nobody, only the peer's own key ([`node_key`]) does) and runs the
//!    [`config`] checks on them; when either fails, [`indirect`] asks a few other members
//!    to try, relaying the peer's signature over the same nonce, before accusing;
//! 4. it signs its verdicts with its own key ([`ballot`]) and passes them, and those it
//!    learned from others (their signatures unchanged), on to a few peers at a time in
//!    sealed [`message`]s ([`relay`]: push gossip, so messages per member stay constant as
//!    the unit grows), and checks the frames and the signatures it receives;
//! 5. [`vote`] turns the verdicts of a window of periods into each node's verdict, picks
//!    the one member that writes each change, and builds the patch.
//!
//! [`daemon`] is the exception: the binary's I/O shell (tokio, HTTP, the API server), which
//! drives the modules above one period at a time as `sim` does and decides nothing itself.

pub mod ballot;
pub mod config;
pub mod daemon;
pub mod indirect;
pub mod liveness;
pub mod membership;
pub mod message;
pub mod node_key;
pub mod relay;
pub mod selection;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod time;
pub mod vote;
