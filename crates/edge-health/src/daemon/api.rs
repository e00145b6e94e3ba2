//! What the daemon reads from and writes to the API server: Node metadata (a metadata-only
//! watch: node status churn never reaches the edge), the `edge-health-config` ConfigMap in
//! node-units mode, the `nodeunhealth` patches it is the writer of, and its own address
//! annotation.
//!
//! Nothing here decides anything: the watch events go to the [`Daemon`], the patches come
//! from it. A failed write is not retried here: the writer recomputes it from the Node it
//! then observes at the next period, which is also how verdicts reach the Nodes once a
//! lost cloud link is back.

use std::sync::Arc;
use std::time::Duration;

use controller_support::watch::{Index, Key, Watch, follow_object};
use edgegrid_core::keys::{
    EDGE_HEALTH_ADDRESS_ANNOTATION, EDGE_HEALTH_CONFIGMAP, EDGE_HEALTH_PUBLIC_KEY_ANNOTATION,
    EDGE_HEALTH_UNHEALTHY_VIEW_ANNOTATION,
};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PartialObjectMeta, Patch, PatchParams};
use serde_json::json;

use super::state::{AddressState, Daemon};
use crate::vote::AnnotationPatch;

/// The field manager of every patch.
pub const FIELD_MANAGER: &str = "edge-health";

/// Feeds Node metadata to the daemon until the stream ends; `synced` is called after
/// every complete (re)list.
pub async fn follow_nodes(client: kube::Client, daemon: Arc<Daemon>, synced: impl Fn()) {
    // metadata-only list and watch: Node status updates stay on the cloud side
    let api: Api<PartialObjectMeta<Node>> = Api::all(client);
    let feed = NodeFeed { daemon, listing: None, synced };
    Watch::new(api).named("nodes (metadata)").run(feed).await
}

/// Node metadata into the daemon: a (re)list replaces its nodes at once, so its
/// membership is recomputed once per list, not once per node.
struct NodeFeed<S> {
    daemon: Arc<Daemon>,
    listing: Option<Vec<ObjectMeta>>,
    synced: S,
}

impl<S: Fn()> Index<PartialObjectMeta<Node>> for NodeFeed<S> {
    fn begin(&mut self) {
        self.listing = Some(Vec::new());
    }

    fn apply(&mut self, node: PartialObjectMeta<Node>) {
        match self.listing.as_mut() {
            Some(listing) => listing.push(node.metadata),
            None => self.daemon.apply_node(&node.metadata),
        }
    }

    fn delete(&mut self, key: Key) {
        // in a list, the replacement at `done` drops what it does not hold
        if self.listing.is_none() {
            self.daemon.delete_node(&key.name);
        }
    }

    fn done(&mut self) {
        self.daemon.replace_nodes(&self.listing.take().unwrap_or_default());
        (self.synced)();
    }
}

/// Feeds the `edge-health-config` ConfigMap (node-units mode) to the daemon; `synced` is
/// called after every complete (re)list.
pub async fn follow_config(client: kube::Client, daemon: Arc<Daemon>, namespace: String, synced: impl Fn()) {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let on_change =
        |map: Option<&ConfigMap>| daemon.set_node_unit_config(map.map(|m| m.data.clone().unwrap_or_default()).as_ref());
    follow_object(api, EDGE_HEALTH_CONFIGMAP, on_change, synced).await
}

fn params() -> PatchParams {
    PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..PatchParams::default() }
}

/// Writes one verdict (the core's JSON patch, with its resourceVersion precondition).
pub async fn write_verdict(nodes: &Api<Node>, daemon: &Daemon, patch: AnnotationPatch, limit: Duration) {
    let (params, json) = (params(), Patch::Json::<()>(patch.patch));
    let (outcome, error) = match tokio::time::timeout(limit, nodes.patch_metadata(&patch.node, &params, &json)).await {
        Ok(Ok(_)) => ("written", None),
        // the precondition (test of resourceVersion) failed: the Node moved on
        Ok(Err(kube::Error::Api(status))) if matches!(status.code, 409 | 422) => ("conflict", Some(status.to_string())),
        Ok(Err(error)) => ("failed", Some(error.to_string())),
        Err(_) => ("failed", Some(format!("no answer within {limit:?}"))),
    };
    daemon.metrics().write("verdict", outcome);
    match error {
        None => tracing::info!(node = %patch.node, verdict = patch.verdict.as_str(), "verdict written"),
        Some(error) => tracing::warn!(node = %patch.node, verdict = patch.verdict.as_str(), outcome, %error,
            "verdict not written; retrying next period"),
    }
}

/// Sets this node's address annotation when the Node lacks it or says otherwise.
pub async fn publish_address(nodes: &Api<Node>, daemon: &Daemon, address: &str, limit: Duration) {
    if daemon.address_state(address) != AddressState::Stale {
        return;
    }
    let node = daemon.settings().node_name.clone();
    let key = daemon.public_key_annotation();
    let patch = json!({"metadata": {"annotations": {
        EDGE_HEALTH_ADDRESS_ANNOTATION: address,
        EDGE_HEALTH_PUBLIC_KEY_ANNOTATION: key,
    }}});
    let (params, merge) = (params(), Patch::Merge(&patch));
    let outcome = match tokio::time::timeout(limit, nodes.patch_metadata(&node, &params, &merge)).await {
        Ok(Ok(_)) => {
            tracing::info!(%node, %address, public_key = %key, "address and public key published");
            "written"
        }
        Ok(Err(error)) => {
            tracing::warn!(%node, %error, "address not published; retrying next period");
            "failed"
        }
        Err(_) => {
            tracing::warn!(%node, ?limit, "address not published in time; retrying next period");
            "failed"
        }
    };
    daemon.metrics().write("address", outcome);
}

/// With `--verdict-writer=cloud`: puts this node's view (the members it holds Unhealthy) on
/// its own Node when it changed; the cloud writes the verdicts from the unit's views. One
/// write per change of the view, not per period.
pub async fn publish_view(nodes: &Api<Node>, daemon: &Daemon, limit: Duration) {
    let Some(view) = daemon.view_to_publish() else { return };
    let node = daemon.settings().node_name.clone();
    let patch = json!({"metadata": {"annotations": {EDGE_HEALTH_UNHEALTHY_VIEW_ANNOTATION: view}}});
    let (params, merge) = (params(), Patch::Merge(&patch));
    let outcome = match tokio::time::timeout(limit, nodes.patch_metadata(&node, &params, &merge)).await {
        Ok(Ok(_)) => {
            tracing::info!(%node, unhealthy = %view, "view published");
            "written"
        }
        Ok(Err(error)) => {
            tracing::warn!(%node, %error, "view not published; retrying next period");
            "failed"
        }
        Err(_) => {
            tracing::warn!(%node, ?limit, "view not published in time; retrying next period");
            "failed"
        }
    };
    daemon.metrics().write("view", outcome);
}
