//! Node units: the nodes grouped by a node label (e.g. `zone1=unit-a`) that judge one
//! another and may share one cloud upstream. Here is every rule about a unit that two
//! components must read alike:
//! - [`membership`]: which units a node belongs to, and whether edge-health really watches
//!   it (a peer of its unit runs edge-health too);
//! - [`verdict`]: the vote's rule, and the `nodeunhealth` verdict the cloud writes from the
//!   views the members publish;
//! - [`local_verdicts`]: what a node's edge-health daemon serves its own node on
//!   `GET /verdicts` (the unit's verdicts and its members' identities), the wire format the
//!   daemon writes and the grid wrapper reads;
//! - [`upstream`]: which grid wrapper of a unit holds the unit's one cloud upstream, and
//!   whom each other wrapper follows.
//!
//! Pure, like the rest of this crate: inputs are fed as data, decisions come back as data.
//! It must never do I/O. That is where `unit_link::unit` (the `unit-link` crate) differs:
//! it is the grid wrapper's supervisor that runs [`upstream::choose`] against the live
//! inputs, connects to the chosen leader and serves the unit's followers; this module only
//! says what the choice is.

pub mod local_verdicts;
pub mod membership;
pub mod upstream;
pub mod verdict;
