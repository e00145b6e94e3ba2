//! What a node's edge-health daemon serves on `GET /verdicts`: the local unit's current
//! verdicts about its members, keyed by node name. The daemon writes it and the grid
//! wrapper reads it (to drop endpoints on nodes the unit voted down while the cloud cannot
//! update the slices), so the wire format is defined once, here.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// The path the daemon serves the view on.
pub const VERDICTS_PATH: &str = "/verdicts";

/// One node's view of its units' verdicts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalVerdicts {
    /// The node whose daemon answered.
    pub node: String,
    /// The verdict about each member of the node's units (the node itself included), by
    /// node name.
    pub nodes: BTreeMap<String, NodeVerdict>,
    /// The identities those members publish on their Nodes, as this daemon read them from
    /// the API server itself (the grid wrappers of a unit authenticate each other with
    /// them: never taken from a peer). Members publishing none are absent.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub identities: BTreeMap<String, PeerIdentity>,
}

/// What a member publishes on its Node: its public key (base64 of the 32 Ed25519 bytes)
/// and its daemon's address (`ip:port`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PeerIdentity {
    pub public_key: String,
    pub address: String,
}

/// The verdict about one node and the tally behind it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeVerdict {
    pub verdict: Verdict,
    /// Checkers whose fresh ballots could count.
    pub eligible: u32,
    pub healthy: u32,
    pub unhealthy: u32,
}

/// What a unit concluded about a node (edge-health's vote decides it; this is also the
/// vote's own type, so the daemon serves what it decided without translating).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Verdict {
    /// No majority yet since the voter started.
    #[default]
    Undecided,
    Healthy,
    Unhealthy,
}

impl Verdict {
    /// Its name on the wire, also its metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Undecided => "undecided",
            Self::Healthy => "healthy",
            Self::Unhealthy => "unhealthy",
        }
    }
}

impl LocalVerdicts {
    /// The nodes voted down (only a majority verdict counts; undecided is not down).
    pub fn down(&self) -> BTreeSet<String> {
        self.nodes.iter().filter(|(_, v)| v.verdict == Verdict::Unhealthy).map(|(n, _)| n.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_format_is_camel_case_and_only_unhealthy_is_down() {
        let json = r#"{"node":"n1","nodes":{
            "n1":{"verdict":"healthy","eligible":3,"healthy":3,"unhealthy":0},
            "n2":{"verdict":"unhealthy","eligible":3,"healthy":0,"unhealthy":2},
            "n3":{"verdict":"undecided","eligible":3,"healthy":1,"unhealthy":1}}}"#;
        let verdicts: LocalVerdicts = serde_json::from_str(json).expect("valid");
        assert_eq!(verdicts.down(), BTreeSet::from(["n2".to_string()]));
        let back: serde_json::Value = serde_json::to_value(&verdicts).expect("serialisable");
        assert_eq!(back, serde_json::from_str::<serde_json::Value>(json).expect("valid"));
        for verdict in [Verdict::Undecided, Verdict::Healthy, Verdict::Unhealthy] {
            assert_eq!(serde_json::to_value(verdict).expect("serialisable"), verdict.as_str());
        }
        assert!(
            serde_json::from_str::<LocalVerdicts>(
                r#"{"node":"n1","nodes":{"n2":{"verdict":"dead","eligible":1,"healthy":0,"unhealthy":1}}}"#
            )
            .is_err()
        );
    }
}
