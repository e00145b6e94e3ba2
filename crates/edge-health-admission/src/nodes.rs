//! The node verdicts the endpoint hooks read: a watch-backed cache of each node's Ready
//! condition and `nodeunhealth` annotation, never a GET per request.
//!
//! Only what the verdict needs is kept (a node's metadata annotations and its Ready
//! condition), so a 5k-node cluster costs little memory. Fed watcher events directly;
//! a relist replaces the cache by what it listed.

use std::collections::{HashMap, HashSet};
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};

use edgegrid_core::admission;
use edgegrid_core::keys;
use edgegrid_core::protection::NodeFacts;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

use crate::review::NodeVerdicts;

#[derive(Default)]
pub struct NodeCache {
    synced: AtomicBool,
    nodes: RwLock<HashMap<String, Value>>,
    relisting: RwLock<Option<HashSet<String>>>,
}

/// What of a node the verdict reads, as JSON the core rule takes.
fn verdict_facts(node: &Node) -> Value {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == keys::NODE_CONDITION_READY));
    json!({
        "metadata": {"name": node.metadata.name, "annotations": node.metadata.annotations},
        "status": {"conditions": ready.map(|r| vec![r]).unwrap_or_default()},
    })
}

impl NodeCache {
    pub fn apply(&self, event: Event<Node>) {
        match event {
            Event::Init => *self.relisting.write().unwrap_or_else(|p| p.into_inner()) = Some(HashSet::new()),
            Event::InitApply(node) | Event::Apply(node) => {
                let Some(name) = node.metadata.name.clone() else { return };
                if let Some(seen) = self.relisting.write().unwrap_or_else(|p| p.into_inner()).as_mut() {
                    seen.insert(name.clone());
                }
                self.nodes.write().unwrap_or_else(|p| p.into_inner()).insert(name, verdict_facts(&node));
            }
            Event::Delete(node) => {
                if let Some(name) = &node.metadata.name {
                    self.nodes.write().unwrap_or_else(|p| p.into_inner()).remove(name);
                }
            }
            Event::InitDone => {
                let seen = self.relisting.write().unwrap_or_else(|p| p.into_inner()).take();
                if let Some(seen) = seen {
                    self.nodes.write().unwrap_or_else(|p| p.into_inner()).retain(|name, _| seen.contains(name));
                }
                self.synced.store(true, Ordering::SeqCst);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.nodes.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl NodeVerdicts for NodeCache {
    fn synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    fn state(&self, node: &str) -> Option<NodeFacts> {
        admission::node_facts(self.nodes.read().unwrap_or_else(|p| p.into_inner()).get(node)?)
    }
}
