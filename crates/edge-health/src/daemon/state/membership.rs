//! What the API server says of the Nodes and of the `edge-health-config` ConfigMap: the node
//! records, the unit membership and the per-unit vote tables and schedules it shapes, and the
//! peer cache that carries them across a restart.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{Daemon, NodeRecord, State, UnitVote};
use crate::daemon::peer_cache::PeerCache;
use crate::membership::{Labels, MembershipChange, NodeUnitCheck};
use crate::relay::Relay;
use crate::selection::Schedule;
use crate::vote::VoteTable;

impl Daemon {
    /// A Node was added or its metadata changed (also: the answer to this daemon's patch).
    pub fn apply_node(&self, meta: &ObjectMeta) {
        let Some(name) = meta.name.as_deref() else { return };
        let mut st = self.lock();
        st.generation += 1;
        st.nodes.insert(name.to_string(), NodeRecord::from_meta(meta));
        let change = st.membership.apply_node(name, &labels(meta), runs_edge_health(meta));
        self.membership_changed(&mut st, change);
    }

    pub fn delete_node(&self, name: &str) {
        let mut st = self.lock();
        st.generation += 1;
        st.nodes.remove(name);
        let change = st.membership.delete(name);
        self.membership_changed(&mut st, change);
    }

    /// A (re)list: these are all the Nodes there are.
    pub fn replace_nodes(&self, metas: &[ObjectMeta]) {
        let mut st = self.lock();
        st.generation += 1;
        st.nodes = metas.iter().filter_map(|meta| Some((meta.name.clone()?, NodeRecord::from_meta(meta)))).collect();
        let change = st.membership.replace_all_nodes(
            metas.iter().filter_map(|meta| Some((meta.name.clone()?, labels(meta), runs_edge_health(meta)))),
        );
        self.membership_changed(&mut st, change);
    }

    /// The `edge-health-config` ConfigMap's data (`None`: there is none).
    pub fn set_node_unit_config(&self, data: Option<&BTreeMap<String, String>>) {
        let mut st = self.lock();
        st.generation += 1;
        st.node_unit_config = data.cloned();
        let change = st.membership.set_node_unit_check(NodeUnitCheck::from_config_map(data));
        self.membership_changed(&mut st, change);
    }

    /// What the peer cache should hold now, and the generation it is of.
    pub fn peer_cache(&self) -> (u64, PeerCache) {
        let st = self.lock();
        let nodes = st.nodes.values().map(|record| record.cached.clone()).collect();
        (st.generation, PeerCache { nodes, node_unit_config: st.node_unit_config.clone() })
    }

    /// Starts from a peer cache (before the API server has answered).
    pub fn restore(&self, cache: &PeerCache) {
        if matches!(self.settings.unit_source, crate::membership::UnitSource::NodeUnits) {
            self.set_node_unit_config(cache.node_unit_config.as_ref());
        }
        self.replace_nodes(&cache.nodes);
    }

    fn membership_changed(&self, st: &mut State, change: MembershipChange) {
        if change.is_empty() {
            return;
        }
        let State { membership, units, crypto, .. } = st;
        if change.units_changed {
            let k = self.settings.protocol.probes_per_period;
            let keep = usize::try_from(self.settings.protocol.vote_window).unwrap_or(usize::MAX).saturating_add(2);
            let mut previous = std::mem::take(units);
            for unit in membership.units() {
                let vote = match previous.remove(&unit.id) {
                    Some(vote) if vote.schedule.members() == unit.members.as_slice() => vote,
                    // the table forgets departed members at its next evaluation
                    Some(vote) => UnitVote { schedule: Schedule::new(&unit.members, k, keep), ..vote },
                    None => UnitVote {
                        table: VoteTable::new(self.settings.protocol.vote_window, self.settings.protocol.vote_rule),
                        schedule: Schedule::new(&unit.members, k, keep),
                        relay: Relay::new(self.settings.protocol.relay_spread),
                    },
                };
                units.insert(unit.id.clone(), vote);
            }
        }
        if !change.left.is_empty() {
            crypto.verifier.retain_senders(|n| membership.is_peer(n));
        }
        self.metrics.peers.set(i64::try_from(membership.peers().len()).unwrap_or(i64::MAX));
        tracing::info!(joined = ?change.joined, left = ?change.left, units = ?membership.units().iter().map(|u| &u.id).collect::<Vec<_>>(),
            peers = membership.peers().len(), "unit membership changed");
    }
}

fn labels(meta: &ObjectMeta) -> Labels {
    meta.labels.clone().unwrap_or_default()
}

/// Whether the Node publishes this daemon's address: only then is it a member (see
/// [`crate::membership`]).
fn runs_edge_health(meta: &ObjectMeta) -> bool {
    crate::membership::runs_edge_health(meta.annotations.as_ref())
}
