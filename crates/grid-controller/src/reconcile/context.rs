//! The state every reconcile shares (client, caches, Event recorder, metrics) and the
//! bookkeeping kept on it between reconciles: normalised applies, failure backoff, and the
//! statuses a CRD without the status subresource cannot hold. Separate so its locks and
//! maps sit in one place, apart from the reconcilers that use them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use edgegrid_core::keys;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Service;
use kube::api::{ApiResource, DynamicObject};
use kube::core::NamespaceResourceScope;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::metrics::Metrics;
use crate::status::Announcement;
use crate::status_subresource::{StatusSubresources, Transition};
use crate::units::NodeUnits;

pub struct Context {
    pub client: Client,
    pub(super) recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub(super) nodes: Arc<RwLock<NodeUnits>>,
    pub(super) services: Store<Service>,
    pub(super) deployments: Store<Deployment>,
    pub(super) statefulsets: Store<StatefulSet>,
    /// Objects whose applied form the apiserver normalises (e.g. `cpu: 1000m` -> `1`),
    /// so they never look applied: uid -> (generation, hash) after our last apply.
    pub(super) normalised: Mutex<HashMap<String, (i64, String)>>,
    /// Consecutive failures per grid (kind, namespace, name), for exponential backoff.
    pub(super) failures: Mutex<HashMap<GridKey, u32>>,
    /// First retry delay after a failure; doubles up to [`Context::max_retry`].
    pub retry_base: Duration,
    pub max_retry: Duration,
    /// Which grid kinds' CRDs serve the status subresource (SuperEdge's do not).
    pub(super) status_subresources: StatusSubresources,
    /// The status each grid of a kind without the status subresource would have: what its
    /// next reconcile compares with (transition times, which Events are due), since the
    /// object cannot keep it. (kind, namespace, name) -> (uid, status): one entry per grid
    /// name seen while the subresource is missing, dropped when it returns.
    pub(super) unstored: Mutex<HashMap<GridKey, (String, Value)>>,
}

/// Where the message of a missing status subresource points the operator: the chart's
/// CRD files, applied as docs/development.md says after `helm upgrade`.
pub fn crd_fix_command(plural: &str) -> String {
    format!("kubectl apply --server-side --force-conflicts -f charts/edgegrid/crds/{plural}.{}.yaml", keys::GRID_GROUP)
}

/// A generated kind, read from its label-selected cache.
pub trait Generated:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Serialize
    + DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    fn cache(ctx: &Context) -> &Store<Self>;
}

impl Generated for Service {
    fn cache(ctx: &Context) -> &Store<Self> {
        &ctx.services
    }
}

impl Generated for Deployment {
    fn cache(ctx: &Context) -> &Store<Self> {
        &ctx.deployments
    }
}

impl Generated for StatefulSet {
    fn cache(ctx: &Context) -> &Store<Self> {
        &ctx.statefulsets
    }
}

/// (kind, namespace, name) of a grid.
type GridKey = (String, String, String);

pub(super) fn grid_key<G: Resource<DynamicType = ()>>(grid: &DynamicObject) -> GridKey {
    (G::kind(&()).to_string(), grid.namespace().unwrap_or_default(), grid.name_any())
}

impl Context {
    pub(super) async fn announce(
        &self,
        grid: &DynamicObject,
        resource: &ApiResource,
        announcements: Vec<Announcement>,
    ) {
        let reference = grid.object_ref(resource);
        for a in announcements {
            let event = Event {
                type_: if a.warning { EventType::Warning } else { EventType::Normal },
                reason: a.reason,
                note: Some(a.note),
                action: "Reconcile".into(),
                secondary: None,
            };
            if let Err(error) = self.recorder.publish(&event, &reference).await {
                tracing::warn!(%error, grid = %grid.name_any(), "publishing an event failed");
            }
        }
    }

    pub(super) fn is_normalised(&self, uid: &str, generation: Option<i64>, hash: &str) -> bool {
        let normalised = self.normalised.lock().unwrap_or_else(|e| e.into_inner());
        normalised.get(uid).is_some_and(|(g, h)| Some(*g) == generation && h == hash)
    }

    pub(super) fn remember_normalised(&self, uid: String, generation: Option<i64>, hash: String) {
        let mut normalised = self.normalised.lock().unwrap_or_else(|e| e.into_inner());
        normalised.insert(uid, (generation.unwrap_or_default(), hash));
    }

    /// Reports what changed about a kind's status subresource: the first time it is
    /// found missing, a Warning Event on this grid (the one whose status could not be
    /// written), a log line and the gauge; later changes only move the gauge and log.
    pub(super) async fn status_gate_changed(
        &self,
        grid: &DynamicObject,
        resource: &ApiResource,
        change: Option<Transition>,
    ) {
        let kind = &resource.kind;
        match change {
            None => {}
            Some(Transition::Missing { first }) => {
                self.metrics.status_subresource_missing(kind, true);
                let crd = format!("{}.{}", resource.plural, resource.group);
                let fix = crd_fix_command(&resource.plural);
                let note = format!(
                    "the {crd} CRD has no status subresource (SuperEdge's CRD; Helm does not upgrade CRDs), so no {kind} \
                     status is written; generated objects are still reconciled. Fix: {fix}"
                );
                if first {
                    tracing::warn!(%kind, crd = %crd, fix = %fix, "the CRD has no status subresource: status is not written");
                    let reason = "StatusSubresourceMissing".to_string();
                    self.announce(grid, resource, vec![Announcement { warning: true, reason, note }]).await;
                } else {
                    tracing::info!(%kind, "the status subresource is missing again: status is not written");
                }
            }
            Some(Transition::Resumed) => {
                self.metrics.status_subresource_missing(kind, false);
                tracing::info!(%kind, "the CRD serves the status subresource now: status writes resume");
                let mut unstored = self.unstored.lock().unwrap_or_else(|e| e.into_inner());
                unstored.retain(|(k, _, _), _| k != kind);
            }
        }
    }

    pub(super) fn remember_unstored(&self, grid: &DynamicObject, resource: &ApiResource, status: &impl Serialize) {
        let Ok(status) = serde_json::to_value(status) else {
            return;
        };
        let mut unstored = self.unstored.lock().unwrap_or_else(|e| e.into_inner());
        // a reconcile told to skip its write just before the subresource came back must not
        // leave a status behind for the next time it goes missing (Resumed cleared the kind
        // under this lock)
        if self.status_subresources.is_missing(&resource.kind) {
            unstored.insert(unstored_key(resource, grid), (grid.uid().unwrap_or_default(), status));
        }
    }

    pub(super) fn retry_after(&self, grid: GridKey) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let count = failures.entry(grid).or_default();
        *count = count.saturating_add(1);
        let factor = 2u32.saturating_pow(count.saturating_sub(1).min(16));
        self.retry_base.saturating_mul(factor).min(self.max_retry)
    }

    pub(super) fn succeeded(&self, grid: &GridKey) {
        self.failures.lock().unwrap_or_else(|e| e.into_inner()).remove(grid);
    }
}

pub(super) fn unstored_key(resource: &ApiResource, grid: &DynamicObject) -> GridKey {
    (resource.kind.clone(), grid.namespace().unwrap_or_default(), grid.name_any())
}
