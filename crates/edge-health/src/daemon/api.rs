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

use edgegrid_core::keys::{EDGE_HEALTH_ADDRESS_ANNOTATION, EDGE_HEALTH_CONFIGMAP};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, PartialObjectMeta, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
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
    let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
    let mut listing = Vec::new();
    while let Some(event) = events.next().await {
        match event {
            Ok(Event::Init) => listing.clear(),
            Ok(Event::InitApply(node)) => listing.push(node.metadata),
            Ok(Event::InitDone) => {
                daemon.replace_nodes(&std::mem::take(&mut listing));
                synced();
            }
            Ok(Event::Apply(node)) => daemon.apply_node(&node.metadata),
            Ok(Event::Delete(node)) => {
                if let Some(name) = node.metadata.name.as_deref() {
                    daemon.delete_node(name);
                }
            }
            Err(error) => tracing::warn!(%error, "node watch failed; retrying with backoff"),
        }
    }
}

/// Feeds the `edge-health-config` ConfigMap (node-units mode) to the daemon; `synced` is
/// called after every complete (re)list.
pub async fn follow_config(client: kube::Client, daemon: Arc<Daemon>, namespace: String, synced: impl Fn()) {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={EDGE_HEALTH_CONFIGMAP}"));
    let mut events = std::pin::pin!(watcher(api, config).default_backoff());
    let mut listed = None;
    while let Some(event) = events.next().await {
        match event {
            Ok(Event::Init) => listed = None,
            Ok(Event::InitApply(map)) => listed = Some(map.data.unwrap_or_default()),
            Ok(Event::InitDone) => {
                daemon.set_node_unit_config(listed.as_ref());
                synced();
            }
            Ok(Event::Apply(map)) => daemon.set_node_unit_config(Some(&map.data.unwrap_or_default())),
            Ok(Event::Delete(_)) => daemon.set_node_unit_config(None),
            Err(error) => tracing::warn!(%error, %namespace, "edge-health-config watch failed; retrying with backoff"),
        }
    }
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
        None => tracing::info!(node = %patch.node, unhealthy = patch.unhealthy, "verdict written"),
        Some(error) => tracing::warn!(node = %patch.node, unhealthy = patch.unhealthy, outcome, %error,
            "verdict not written; retrying next period"),
    }
}

/// Sets this node's address annotation when the Node lacks it or says otherwise.
pub async fn publish_address(nodes: &Api<Node>, daemon: &Daemon, address: &str, limit: Duration) {
    if daemon.address_state(address) != AddressState::Stale {
        return;
    }
    let node = daemon.settings().node_name.clone();
    let patch = json!({"metadata": {"annotations": {EDGE_HEALTH_ADDRESS_ANNOTATION: address}}});
    let (params, merge) = (params(), Patch::Merge(&patch));
    let outcome = match tokio::time::timeout(limit, nodes.patch_metadata(&node, &params, &merge)).await {
        Ok(Ok(_)) => {
            tracing::info!(%node, %address, "address published");
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
