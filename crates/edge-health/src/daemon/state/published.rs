//! What this node shows of itself: the view `GET /verdicts` serves, and whether its own Node's
//! address, public-key and (cloud writer) view annotations say what they should.

use std::collections::BTreeSet;

use edgegrid_core::unit::local_verdicts::LocalVerdicts;

use super::{AddressState, Daemon};
use crate::daemon::cli::VerdictWriter;
use crate::vote::Verdict;

impl Daemon {
    /// What `GET /verdicts` serves.
    pub fn view(&self) -> LocalVerdicts {
        self.lock().view.clone()
    }

    /// Whether this node's Node carries `address` in its address annotation and this
    /// node's public key in its key annotation.
    pub fn address_state(&self, address: &str) -> AddressState {
        let st = self.lock();
        let key = st.crypto.signing.public_key().to_annotation();
        match st.nodes.get(self.local()) {
            None => AddressState::NoNode,
            Some(node)
                if node.address_annotation.as_deref() == Some(address)
                    && node.key_annotation.as_deref() == Some(key.as_str()) =>
            {
                AddressState::Published
            }
            Some(_) => AddressState::Stale,
        }
    }

    /// With `--verdict-writer=cloud`: the view annotation this node's Node should carry
    /// (the members of its units it holds Unhealthy and Undecided, and which members those
    /// are: see `edgegrid_core::unit::verdict::View`), when it does not carry it yet.
    /// Nothing before a whole window has been evaluated since the start.
    pub fn view_to_publish(&self) -> Option<String> {
        if self.settings.verdict_writer != VerdictWriter::Cloud {
            return None;
        }
        let st = self.lock();
        if st.evaluated.is_none_or(|period| period < st.warm_from) {
            return None;
        }
        let held = |verdict: Verdict| -> BTreeSet<String> {
            st.view.nodes.iter().filter(|(_, v)| v.verdict == verdict).map(|(n, _)| n.clone()).collect()
        };
        let members = st.view.nodes.keys().map(String::as_str).chain([self.local()]);
        let wanted = edgegrid_core::unit::verdict::View {
            members: edgegrid_core::unit::verdict::members_version(members),
            unhealthy: held(Verdict::Unhealthy),
            undecided: held(Verdict::Undecided),
        }
        .format();
        let node = st.nodes.get(self.local())?;
        (node.view_annotation.as_deref() != Some(wanted.as_str())).then_some(wanted)
    }

    /// This node's public key as its annotation carries it.
    pub fn public_key_annotation(&self) -> String {
        self.lock().crypto.signing.public_key().to_annotation()
    }
}
