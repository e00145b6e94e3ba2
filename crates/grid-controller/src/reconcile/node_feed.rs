//! The node feed: a metadata-only watch of Nodes folded into [`NodeUnits`], requeueing
//! only the workload grids whose label key's unit set changed. Separate because it is the
//! one input that triggers grids from outside their own objects.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};

use controller_support::watch::{Index, Key, Watch};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};

use crate::units::NodeUnits;

/// A workload grid controller's cache of its grids, the grids' type and its trigger.
type GridTrigger = (Store<DynamicObject>, ApiResource, tokio::sync::mpsc::UnboundedSender<ObjectRef<DynamicObject>>);

/// Feeds node label changes into `nodes` and sends each affected workload grid to its
/// controller's trigger. Runs until the watch stream ends.
pub(super) async fn follow_nodes(client: Client, nodes: Arc<RwLock<NodeUnits>>, grids: Vec<GridTrigger>) {
    let api: Api<PartialObjectMeta<Node>> = Api::all(client);
    Watch::new(api).named("nodes (metadata)").run(NodeFeed { nodes, grids }).await
}

struct NodeFeed {
    nodes: Arc<RwLock<NodeUnits>>,
    grids: Vec<GridTrigger>,
}

impl NodeFeed {
    fn nodes(&self) -> std::sync::RwLockWriteGuard<'_, NodeUnits> {
        self.nodes.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Requeues every grid keyed on a label key whose set of values changed.
    fn trigger(&self, changed: BTreeSet<String>) {
        if changed.is_empty() {
            return;
        }
        for (store, resource, trigger) in &self.grids {
            for grid in store.state() {
                let key = grid.data["spec"]["gridUniqKey"].as_str().unwrap_or_default();
                if changed.contains(key) {
                    let _ = trigger.send(ObjectRef::from_obj_with(&*grid, resource.clone()));
                }
            }
        }
    }
}

impl Index<PartialObjectMeta<Node>> for NodeFeed {
    fn apply(&mut self, node: PartialObjectMeta<Node>) {
        let changed = self.nodes().apply(&node.name_any(), node.labels());
        self.trigger(changed);
    }

    fn delete(&mut self, key: Key) {
        let changed = self.nodes().delete(&key.name);
        self.trigger(changed);
    }

    fn done(&mut self) {
        self.nodes().mark_synced();
    }
}
