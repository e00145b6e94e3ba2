//! The `edge-health-config` ConfigMap, followed for the cloud components that must agree
//! with edge-health on which units are checked (`edgegrid_core::membership`): SuperEdge
//! node units are checked as that ConfigMap says, so whom the edge rule may protect
//! depends on it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use edgegrid_core::keys;
use edgegrid_core::membership::NodeUnitCheck;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};

/// Watches the ConfigMap in `namespace` (by name, with a field selector: RBAC may grant
/// just that one object) and calls `on_change` with what it says now: after every change,
/// deletion, and relist (a relist that finds none: no ConfigMap). `synced` turns true once
/// the first list is in, before `on_change` hears of it. Runs until the task is dropped.
pub async fn follow_edge_health_config(
    client: kube::Client,
    namespace: &str,
    synced: Arc<AtomicBool>,
    mut on_change: impl FnMut(NodeUnitCheck),
) {
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    let selector = format!("metadata.name={}", keys::EDGE_HEALTH_CONFIGMAP);
    let mut events = std::pin::pin!(watcher(api, watcher::Config::default().fields(&selector)).default_backoff());
    // what a relist has found so far: applied at its end, so a relist is one change
    let mut listed: Option<NodeUnitCheck> = None;
    while let Some(event) = events.next().await {
        let listing_done = matches!(event, Ok(watcher::Event::InitDone));
        let check = match event {
            Ok(watcher::Event::Apply(cm)) => Some(NodeUnitCheck::from_config_map(Some(&cm.data.unwrap_or_default()))),
            Ok(watcher::Event::InitApply(cm)) => {
                listed = Some(NodeUnitCheck::from_config_map(Some(&cm.data.unwrap_or_default())));
                None
            }
            Ok(watcher::Event::Delete(_)) => Some(NodeUnitCheck::from_config_map(None)),
            Ok(watcher::Event::Init) => {
                listed = None;
                None
            }
            Ok(watcher::Event::InitDone) => Some(listed.take().unwrap_or_else(|| NodeUnitCheck::from_config_map(None))),
            Err(error) => {
                tracing::warn!(%error, "edge-health-config watch failed; retrying with backoff");
                None
            }
        };
        if listing_done {
            synced.store(true, Ordering::SeqCst);
        }
        if let Some(check) = check {
            on_change(check);
        }
    }
}
