//! The controllers: each reconcile writes only what its grid controls, reports what is in
//! the way, and writes nothing when everything already matches.
//!
//! - Grids are watched as untyped objects and decoded per reconcile, so one object that
//!   does not decode (`replicas: "two"` on a server without schema validation) is reported
//!   on itself (`InvalidSpec` condition and Event) instead of failing the kind's list.
//! - Generated objects are read from label-selected caches (`superedge.io/grid-selector`);
//!   a generated name missing from the cache is read once by GET, which is how a
//!   foreign object under that name is found and left alone (`NameConflict`).
//! - Node labels come from a metadata-only watch folded into [`NodeUnits`]; a node event
//!   requeues only the grids whose unit set changed, never every grid.
//! - Writes happen only on a difference (see [`crate::ownership::needs_apply`]), status
//!   only when it changed, Events only when a condition changed.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use controller_support::watch::{Index, Key, Watch};
use edgegrid_core::crd::{
    DeploymentGrid, ServiceGrid, ServiceGridStatus, StatefulSetGrid, UnitWorkloadState, WorkloadCondition,
    WorkloadGridStatus,
};
use edgegrid_core::keys;
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::core::{NamespaceResourceScope, PartialObjectMeta};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::metrics::Metrics;
use crate::ownership::{self, Ownership};
use crate::plan::{self, WorkloadGrid};
use crate::status::{self, Announcement, Findings, Outcome, Problem};
use crate::status_subresource::{self, Gate, StatusSubresources, Transition};
use crate::units::NodeUnits;

/// Field manager of everything this controller writes.
pub const MANAGER: &str = "grid-controller";
/// Re-check even without changes, as a safety net (costs reads only when nothing changed).
const RESYNC: Duration = Duration::from_secs(300);
/// A name conflict clears when someone else's object goes; that object is not watched.
const CONFLICT_RECHECK: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Api(#[from] kube::Error),
    #[error("serialising: {0}")]
    Serialize(#[from] serde_json::Error),
    /// Some generated objects could not be written; the status says which.
    #[error("{reason}: {message}")]
    Incomplete { reason: &'static str, message: String },
}

impl Error {
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Api(kube::Error::Api(s)) if s.code == 409 => "conflict",
            Self::Api(_) => "api",
            Self::Serialize(_) => "serialize",
            Self::Incomplete { reason: "DeleteFailed", .. } => "delete_failed",
            Self::Incomplete { .. } => "apply_failed",
        }
    }
}

pub struct Context {
    pub client: Client,
    recorder: Recorder,
    pub metrics: Arc<Metrics>,
    nodes: Arc<RwLock<NodeUnits>>,
    services: Store<Service>,
    deployments: Store<Deployment>,
    statefulsets: Store<StatefulSet>,
    /// Objects whose applied form the apiserver normalises (e.g. `cpu: 1000m` -> `1`),
    /// so they never look applied: uid -> (generation, hash) after our last apply.
    normalised: Mutex<HashMap<String, (i64, String)>>,
    /// Consecutive failures per grid (kind, namespace, name), for exponential backoff.
    failures: Mutex<HashMap<GridKey, u32>>,
    /// First retry delay after a failure; doubles up to [`Context::max_retry`].
    pub retry_base: Duration,
    pub max_retry: Duration,
    /// Which grid kinds' CRDs serve the status subresource (SuperEdge's do not).
    status_subresources: StatusSubresources,
    /// The status each grid of a kind without the status subresource would have: what its
    /// next reconcile compares with (transition times, which Events are due), since the
    /// object cannot keep it. (kind, namespace, name) -> (uid, status): one entry per grid
    /// name seen while the subresource is missing, dropped when it returns.
    unstored: Mutex<HashMap<GridKey, (String, Value)>>,
}

/// What [`run_with`] can be told (the binary uses the defaults).
#[derive(Clone, Debug)]
pub struct Settings {
    /// How often, at most, a grid kind whose CRD lacks the status subresource is checked
    /// again (see [`crate::status_subresource`]).
    pub status_reprobe: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self { status_reprobe: status_subresource::DEFAULT_REPROBE }
    }
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

fn grid_key<G: Resource<DynamicType = ()>>(grid: &DynamicObject) -> GridKey {
    (G::kind(&()).to_string(), grid.namespace().unwrap_or_default(), grid.name_any())
}

/// Who a reconcile writes for.
struct GridIdentity {
    name: String,
    namespace: String,
    uid: String,
}

impl Context {
    async fn announce(&self, grid: &DynamicObject, resource: &ApiResource, announcements: Vec<Announcement>) {
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

    fn is_normalised(&self, uid: &str, generation: Option<i64>, hash: &str) -> bool {
        let normalised = self.normalised.lock().unwrap_or_else(|e| e.into_inner());
        normalised.get(uid).is_some_and(|(g, h)| Some(*g) == generation && h == hash)
    }

    fn remember_normalised(&self, uid: String, generation: Option<i64>, hash: String) {
        let mut normalised = self.normalised.lock().unwrap_or_else(|e| e.into_inner());
        normalised.insert(uid, (generation.unwrap_or_default(), hash));
    }

    /// Reports what changed about a kind's status subresource: the first time it is
    /// found missing, a Warning Event on this grid (the one whose status could not be
    /// written), a log line and the gauge; later changes only move the gauge and log.
    async fn status_gate_changed(&self, grid: &DynamicObject, resource: &ApiResource, change: Option<Transition>) {
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

    fn remember_unstored(&self, grid: &DynamicObject, resource: &ApiResource, status: &impl Serialize) {
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

    fn retry_after(&self, grid: GridKey) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let count = failures.entry(grid).or_default();
        *count = count.saturating_add(1);
        let factor = 2u32.saturating_pow(count.saturating_sub(1).min(16));
        self.retry_base.saturating_mul(factor).min(self.max_retry)
    }

    fn succeeded(&self, grid: &GridKey) {
        self.failures.lock().unwrap_or_else(|e| e.into_inner()).remove(grid);
    }
}

fn now() -> Time {
    Time(jiff::Timestamp::now())
}

fn hash_of(body: &Value) -> String {
    body["metadata"]["annotations"][keys::APPLIED_HASH_ANNOTATION].as_str().unwrap_or_default().to_string()
}

/// Makes `live` match `desired` if this grid may write it. The live object (as written,
/// or untouched when it already matched) or what is in the way.
async fn sync_object<W: Generated>(ctx: &Context, grid: &GridIdentity, desired: &W) -> Result<W, Problem> {
    let name = desired.name_any();
    let what = format!("{} {}/{}", W::kind(&()), grid.namespace, name);
    let failed = |verb: &str, e: &dyn std::fmt::Display| Problem {
        reason: "ApplyFailed",
        message: format!("{verb} {what}: {e}"),
    };
    let api: Api<W> = Api::namespaced(ctx.client.clone(), &grid.namespace);
    let cached = W::cache(ctx).get(&ObjectRef::new(&name).within(&grid.namespace)).map(|o| (*o).clone());
    let live = match cached {
        Some(live) => Some(live),
        None => api.get_opt(&name).await.map_err(|e| failed("reading", &e))?,
    };
    let mut body = serde_json::to_value(desired).map_err(|e| failed("serialising", &e))?;
    ownership::stamp_hash(&mut body);
    let Some(live) = live else {
        // POST, not apply: if someone creates an object under this name between our read
        // and this write, we get 409 instead of taking theirs over. Known limitation: on
        // a real apiserver the fields of this create belong to an Update entry of our
        // manager, which later applies do not clear, so a field the grid stops setting
        // stays on the object (only ever a field this grid set).
        let object: W = serde_json::from_value(body).map_err(|e| failed("serialising", &e))?;
        let params = PostParams { field_manager: Some(MANAGER.into()), ..Default::default() };
        tracing::info!(object = %what, "creating");
        return api.create(&params, &object).await.map_err(|e| failed("creating", &e));
    };
    let ownership = ownership::ownership(&grid.uid, &grid.name, live.meta());
    match ownership {
        Ownership::Foreign { controller } => {
            let message = match controller {
                Some(controller) => format!("{what} exists and is controlled by {controller}"),
                None => format!(
                    "{what} exists and is not controlled by this grid (adopted only when labelled {}={})",
                    keys::GRID_SELECTOR_LABEL,
                    grid.name
                ),
            };
            Err(Problem { reason: "NameConflict", message })
        }
        Ownership::Terminating => Err(Problem {
            reason: "Terminating",
            message: format!("{what} is being deleted; it is re-created once it is gone"),
        }),
        Ownership::Controlled | Ownership::Adoptable => {
            let uid = live.uid().unwrap_or_default();
            let generation = live.meta().generation;
            let hash = hash_of(&body);
            if ownership == Ownership::Controlled {
                let live_json = serde_json::to_value(&live).map_err(|e| failed("serialising", &e))?;
                if !ownership::needs_apply(&body, &live_json) || ctx.is_normalised(&uid, generation, &hash) {
                    return Ok(live);
                }
            }
            // the uid is a precondition: an object re-created since we read it is not ours
            body["metadata"]["uid"] = json!(uid);
            tracing::info!(object = %what, adopt = (ownership == Ownership::Adoptable), "applying");
            let applied = api
                .patch(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&body))
                .await
                .map_err(|e| failed("applying", &e))?;
            let applied_json = serde_json::to_value(&applied).map_err(|e| failed("serialising", &e))?;
            if ownership::needs_apply(&body, &applied_json) {
                ctx.remember_normalised(uid, applied.meta().generation, hash);
            }
            Ok(applied)
        }
    }
}

/// Deletes this grid's objects of kind `W` that its plan no longer wants, each under a
/// uid precondition. Gone already (404) or replaced meanwhile (409) is fine.
async fn prune<W: Generated>(ctx: &Context, grid: &GridIdentity, wanted: &BTreeSet<String>) -> Vec<Problem> {
    let cached = W::cache(ctx).state();
    let candidates = cached.iter().map(|o| o.meta()).filter(|m| {
        m.namespace.as_deref() == Some(grid.namespace.as_str())
            && m.labels.as_ref().and_then(|l| l.get(keys::GRID_SELECTOR_LABEL)) == Some(&grid.name)
    });
    let api: Api<W> = Api::namespaced(ctx.client.clone(), &grid.namespace);
    let mut problems = Vec::new();
    for stale in plan::stale_workloads(&grid.uid, candidates, wanted) {
        let params = delete_params(&stale);
        tracing::info!(object = %stale.name, kind = %W::kind(&()), "deleting a workload no unit wants");
        match api.delete(&stale.name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => problems.push(Problem {
                reason: "DeleteFailed",
                message: format!("deleting {} {}/{}: {e}", W::kind(&()), grid.namespace, stale.name),
            }),
        }
    }
    problems
}

/// Background deletion of exactly the object we saw: the uid precondition makes the
/// apiserver refuse (409) if the name now belongs to a re-created object.
fn delete_params(stale: &plan::Stale) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions { uid: Some(stale.uid.clone()), resource_version: None }),
        ..DeleteParams::background()
    }
}

/// SuperEdge's `autoDeleteUnusedTemplate`: remove the pool entries nothing names, under
/// the grid's resourceVersion so a concurrent edit by the user wins.
async fn delete_unused_templates(
    ctx: &Context,
    grid: &DynamicObject,
    resource: &ApiResource,
    unused: Vec<String>,
) -> Option<Problem> {
    if unused.is_empty() {
        return None;
    }
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &grid.namespace().unwrap_or_default(), resource);
    let pool: serde_json::Map<String, Value> = unused.iter().map(|n| (n.clone(), Value::Null)).collect();
    let patch = json!({"metadata": {"resourceVersion": grid.resource_version()}, "spec": {"templatePool": pool}});
    let params = PatchParams { field_manager: Some(MANAGER.into()), ..Default::default() };
    match api.patch(&grid.name_any(), &params, &Patch::Merge(&patch)).await {
        Ok(_) => {
            let note = format!("autoDeleteUnusedTemplate removed templatePool entries {}", unused.join(", "));
            let announcement = Announcement { warning: false, reason: "TemplatesDeleted".into(), note };
            ctx.announce(grid, resource, vec![announcement]).await;
            None
        }
        Err(kube::Error::Api(s)) if s.code == 409 => None,
        Err(e) => {
            Some(Problem { reason: "ApplyFailed", message: format!("removing unused templatePool entries: {e}") })
        }
    }
}

async fn write_status(
    ctx: &Context,
    grid: &DynamicObject,
    resource: &ApiResource,
    status: &impl Serialize,
) -> Result<(), Error> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &grid.namespace().unwrap_or_default(), resource);
    let body = json!({"apiVersion": resource.api_version, "kind": resource.kind, "status": status});
    api.patch_status(&grid.name_any(), &PatchParams::apply(MANAGER).force(), &Patch::Apply(&body)).await?;
    Ok(())
}

/// Whether the live status differs from `status`; undecodable live status counts as different.
fn status_differs<S: Serialize + DeserializeOwned + PartialEq>(grid: &DynamicObject, status: &S) -> bool {
    grid.data.get("status").and_then(|s| serde_json::from_value::<S>(s.clone()).ok()).as_ref() != Some(status)
}

/// The status the grid had: the object's, or, for a kind without the status subresource,
/// the one this process last computed for it.
fn previous_status<S: DeserializeOwned>(ctx: &Context, resource: &ApiResource, grid: &DynamicObject) -> Option<S> {
    if ctx.status_subresources.is_missing(&resource.kind) {
        let unstored = ctx.unstored.lock().unwrap_or_else(|e| e.into_inner());
        let (uid, status) = unstored.get(&unstored_key(resource, grid))?;
        return (Some(uid.as_str()) == grid.uid().as_deref()).then(|| serde_json::from_value(status.clone()).ok())?;
    }
    grid.data.get("status").and_then(|s| serde_json::from_value(s.clone()).ok())
}

fn unstored_key(resource: &ApiResource, grid: &DynamicObject) -> GridKey {
    (resource.kind.clone(), grid.namespace().unwrap_or_default(), grid.name_any())
}

fn conditions_of(status: Option<&impl HasConditions>) -> &[edgegrid_core::crd::GridCondition] {
    status.map(|s| s.conditions()).unwrap_or_default()
}

/// The grid statuses share their condition list.
trait HasConditions {
    fn conditions(&self) -> &[edgegrid_core::crd::GridCondition];
}

impl HasConditions for WorkloadGridStatus {
    fn conditions(&self) -> &[edgegrid_core::crd::GridCondition] {
        &self.conditions
    }
}

impl HasConditions for ServiceGridStatus {
    fn conditions(&self) -> &[edgegrid_core::crd::GridCondition] {
        &self.conditions
    }
}

/// Publishes the Events of a status change, then writes the status if it changed and the
/// kind's CRD can hold it.
async fn conclude<S>(
    ctx: &Context,
    grid: &DynamicObject,
    resource: &ApiResource,
    previous: Option<&S>,
    next: &S,
) -> Result<(), Error>
where
    S: HasConditions + Serialize + DeserializeOwned + PartialEq,
{
    ctx.announce(grid, resource, status::announcements(conditions_of(previous), next.conditions())).await;
    if !status_differs(grid, next) {
        return Ok(());
    }
    let gate = ctx.status_subresources.gate(&ctx.client, resource).await;
    ctx.status_gate_changed(grid, resource, gate.transition).await;
    if !gate.write {
        ctx.remember_unstored(grid, resource, next);
        return Ok(());
    }
    match write_status(ctx, grid, resource, next).await {
        Err(Error::Api(kube::Error::Api(status))) if status.code == 404 => {
            match ctx.status_subresources.after_not_found(&ctx.client, resource).await {
                // discovery cannot tell why: the 404 stands (and is retried with backoff)
                None => Err(Error::Api(kube::Error::Api(status))),
                Some(Gate { write: true, .. }) => {
                    tracing::debug!(grid = %grid.name_any(), "status write 404: the grid is gone");
                    Ok(())
                }
                Some(Gate { write: false, transition }) => {
                    ctx.status_gate_changed(grid, resource, transition).await;
                    ctx.remember_unstored(grid, resource, next);
                    Ok(())
                }
            }
        }
        other => other,
    }
}

/// The result of a reconcile from its outcome: failures back off, conflicts re-check soon.
fn finish(outcome: &Outcome) -> Result<Action, Error> {
    let Outcome::Reconciled(findings) = outcome else {
        return Ok(Action::await_change());
    };
    if let Some(failure) = findings.problems.iter().find(|p| p.reason == "ApplyFailed" || p.reason == "DeleteFailed") {
        return Err(Error::Incomplete { reason: failure.reason, message: failure.message.clone() });
    }
    if findings.problems.is_empty() { Ok(Action::requeue(RESYNC)) } else { Ok(Action::requeue(CONFLICT_RECHECK)) }
}

fn identity(grid: &DynamicObject) -> GridIdentity {
    GridIdentity {
        name: grid.name_any(),
        namespace: grid.namespace().unwrap_or_default(),
        uid: grid.uid().unwrap_or_default(),
    }
}

fn decode<G: Resource<DynamicType = ()> + DeserializeOwned>(grid: &DynamicObject) -> Result<G, Outcome> {
    let blocked = |e: serde_json::Error| Outcome::Blocked {
        reason: "InvalidSpec",
        message: format!("the object does not decode as a {}: {e}", G::kind(&())),
    };
    let mut value = serde_json::to_value(grid).map_err(blocked)?;
    // list items need not carry their type; the kind is known here
    value["apiVersion"] = json!(G::api_version(&()));
    value["kind"] = json!(G::kind(&()));
    serde_json::from_value(value).map_err(blocked)
}

fn resource_of<K: Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// Runs a reconcile body with the shared bookkeeping: the metrics, backoff reset.
async fn timed<G, F>(grid: &DynamicObject, ctx: &Context, body: F) -> Result<Action, Error>
where
    G: Resource<DynamicType = ()>,
    F: std::future::Future<Output = Result<Action, Error>>,
{
    let kind = G::kind(&());
    ctx.metrics.reconciled(&kind);
    let started = Instant::now();
    let result = body.await;
    ctx.metrics.observe_reconcile(&kind, started.elapsed().as_secs_f64());
    if result.is_ok() {
        ctx.succeeded(&grid_key::<G>(grid));
    }
    result
}

#[tracing::instrument(skip_all, fields(kind = "ServiceGrid", namespace = grid.namespace().unwrap_or_default(), name = %grid.name_any()))]
pub async fn reconcile_service_grid(grid: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    timed::<ServiceGrid, _>(&grid, &ctx, async {
        let resource = resource_of::<ServiceGrid>();
        let previous: Option<ServiceGridStatus> = previous_status(&ctx, &resource, &grid);
        let mut service_name = None;
        let outcome = match decode::<ServiceGrid>(&grid) {
            Err(blocked) => blocked,
            Ok(typed) => match plan::plan_service_grid(&typed) {
                Err(e) => Outcome::Blocked { reason: e.reason(), message: e.to_string() },
                Ok(service) => {
                    let mut findings = Findings::default();
                    match sync_object(&ctx, &identity(&grid), &service).await {
                        Ok(live) => service_name = Some(live.name_any()),
                        Err(problem) => findings.problems.push(problem),
                    }
                    Outcome::Reconciled(findings)
                }
            },
        };
        if let Outcome::Blocked { reason, .. } = &outcome {
            ctx.metrics.failed("ServiceGrid", reason);
        }
        let status =
            status::service_grid_status(previous.as_ref(), &outcome, service_name, grid.metadata.generation, &now());
        conclude(&ctx, &grid, &resource, previous.as_ref(), &status).await?;
        finish(&outcome)
    })
    .await
}

/// Reads a generated workload's state for the grid's `status.states`.
pub trait ObservedWorkload {
    fn unit_state(&self) -> UnitWorkloadState;
}

/// The fields Deployment and StatefulSet statuses share, by name.
macro_rules! unit_state {
    ($workload:expr) => {{
        let status = $workload.status.clone().unwrap_or_default();
        UnitWorkloadState {
            workload: $workload.name_any(),
            replicas: $workload.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
            ready_replicas: status.ready_replicas.unwrap_or(0),
            available_replicas: status.available_replicas.unwrap_or(0),
            updated_replicas: status.updated_replicas.unwrap_or(0),
            observed_generation: status.observed_generation,
            conditions: status
                .conditions
                .unwrap_or_default()
                .into_iter()
                .map(|c| WorkloadCondition {
                    type_: c.type_,
                    status: c.status,
                    reason: c.reason,
                    message: c.message,
                    last_transition_time: c.last_transition_time,
                })
                .collect(),
        }
    }};
}

impl ObservedWorkload for Deployment {
    fn unit_state(&self) -> UnitWorkloadState {
        unit_state!(self)
    }
}

impl ObservedWorkload for StatefulSet {
    fn unit_state(&self) -> UnitWorkloadState {
        unit_state!(self)
    }
}

/// Reconciles a DeploymentGrid or StatefulSetGrid.
#[tracing::instrument(skip_all, fields(kind = %G::kind(&()), namespace = grid.namespace().unwrap_or_default(), name = %grid.name_any()))]
pub async fn reconcile_workload_grid<G>(grid: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error>
where
    G: WorkloadGrid + DeserializeOwned,
    G::Workload: Generated + ObservedWorkload,
{
    let kind = G::kind(&()).to_string();
    timed::<G, _>(&grid, &ctx, async {
        let resource = resource_of::<G>();
        let previous: Option<WorkloadGridStatus> = previous_status(&ctx, &resource, &grid);
        let typed = match decode::<G>(&grid) {
            Ok(typed) => typed,
            Err(blocked) => {
                ctx.metrics.failed(&kind, "invalid_spec");
                let status =
                    status::workload_grid_status(previous.as_ref(), &blocked, grid.metadata.generation, &now());
                conclude(&ctx, &grid, &resource, previous.as_ref(), &status).await?;
                return finish(&blocked);
            }
        };
        let units = {
            let nodes = ctx.nodes.read().unwrap_or_else(|e| e.into_inner());
            if !nodes.is_synced() {
                // an unread node list is not an empty cluster: deleting every workload now would be wrong
                return Ok(Action::requeue(Duration::from_millis(200)));
            }
            nodes.units(typed.grid_uniq_key())
        };
        let outcome = match plan::plan_workload_grid(&typed, &units) {
            Err(e) => {
                ctx.metrics.failed(&kind, e.reason());
                Outcome::Blocked { reason: e.reason(), message: e.to_string() }
            }
            Ok(plan) => {
                let who = identity(&grid);
                let mut findings = Findings { skipped: plan.skipped.clone(), ..Default::default() };
                for (unit, workload) in &plan.desired {
                    match sync_object(&ctx, &who, workload).await {
                        Ok(live) => {
                            findings.states.insert(unit.clone(), live.unit_state());
                        }
                        Err(problem) => findings.problems.push(problem),
                    }
                }
                // a unit without a template keeps the workload it has (see plan::WorkloadPlan::kept)
                let wanted = plan.desired.values().map(|w| w.name_any()).chain(plan.kept.iter().cloned()).collect();
                findings.problems.extend(prune::<G::Workload>(&ctx, &who, &wanted).await);
                if typed.auto_delete_unused_template() {
                    let unused = typed.templates().unused();
                    findings.problems.extend(delete_unused_templates(&ctx, &grid, &resource, unused).await);
                }
                Outcome::Reconciled(findings)
            }
        };
        let status = status::workload_grid_status(previous.as_ref(), &outcome, grid.metadata.generation, &now());
        conclude(&ctx, &grid, &resource, previous.as_ref(), &status).await?;
        finish(&outcome)
    })
    .await
}

fn error_policy<G: Resource<DynamicType = ()>>(grid: Arc<DynamicObject>, error: &Error, ctx: Arc<Context>) -> Action {
    let kind = G::kind(&());
    let delay = ctx.retry_after(grid_key::<G>(&grid));
    tracing::warn!(%kind, grid = %grid.name_any(), error = %error, label = error.metric_label(), retry_in = ?delay, "reconcile failed");
    ctx.metrics.failed(&kind, error.metric_label());
    Action::requeue(delay)
}

/// A cache of the objects grids generated (label-selected) and its event stream, which
/// both fills the cache and triggers the owning grids.
fn generated<K>(client: &Client) -> (Store<K>, impl Stream<Item = Result<K, watcher::Error>> + Send + 'static)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let config = watcher::Config::default().labels(keys::GRID_SELECTOR_LABEL);
    let stream = watcher(Api::<K>::all(client.clone()), config).default_backoff().reflect(writer).touched_objects();
    (reader, stream)
}

/// A workload grid controller's cache of its grids, the grids' type and its trigger.
type GridTrigger = (Store<DynamicObject>, ApiResource, tokio::sync::mpsc::UnboundedSender<ObjectRef<DynamicObject>>);

/// Feeds node label changes into `nodes` and sends each affected workload grid to its
/// controller's trigger. Runs until the watch stream ends.
async fn follow_nodes(client: Client, nodes: Arc<RwLock<NodeUnits>>, grids: Vec<GridTrigger>) {
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

fn receiver_stream<T: Send + 'static>(rx: tokio::sync::mpsc::UnboundedReceiver<T>) -> impl Stream<Item = T> + Send {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) })
}

/// Runs the three controllers until `shutdown` resolves.
pub async fn run(
    client: Client,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    run_with(client, metrics, Settings::default(), shutdown).await
}

/// [`run`] with explicit [`Settings`].
pub async fn run_with(
    client: Client,
    metrics: Arc<Metrics>,
    settings: Settings,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let (services, service_events) = generated::<Service>(&client);
    let (deployments, deployment_events) = generated::<Deployment>(&client);
    let (statefulsets, statefulset_events) = generated::<StatefulSet>(&client);
    let nodes = Arc::new(RwLock::new(NodeUnits::default()));
    let reporter = Reporter { controller: MANAGER.into(), instance: std::env::var("POD_NAME").ok() };
    let ctx = Arc::new(Context {
        recorder: Recorder::new(client.clone(), reporter),
        client: client.clone(),
        metrics,
        nodes: nodes.clone(),
        services,
        deployments,
        statefulsets,
        normalised: Mutex::default(),
        failures: Mutex::default(),
        retry_base: Duration::from_secs(1),
        max_retry: Duration::from_secs(300),
        status_subresources: StatusSubresources::new(settings.status_reprobe),
        unstored: Mutex::default(),
    });
    let config = watcher::Config::default();
    let shutdown = Box::pin(shutdown).shared();

    let sg = resource_of::<ServiceGrid>();
    let service_grids = Controller::new_with(Api::<DynamicObject>::all_with(client.clone(), &sg), config.clone(), sg)
        .owns_stream(service_events)
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile_service_grid, error_policy::<ServiceGrid>, ctx.clone())
        .for_each(|_| async {});

    let dg = resource_of::<DeploymentGrid>();
    let (dg_trigger, dg_triggered) = tokio::sync::mpsc::unbounded_channel();
    let deployment_grids =
        Controller::new_with(Api::<DynamicObject>::all_with(client.clone(), &dg), config.clone(), dg.clone());
    let dg_store = deployment_grids.store();
    let deployment_grids = deployment_grids
        .owns_stream(deployment_events)
        .reconcile_on(receiver_stream(dg_triggered))
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile_workload_grid::<DeploymentGrid>, error_policy::<DeploymentGrid>, ctx.clone())
        .for_each(|_| async {});

    let ssg = resource_of::<StatefulSetGrid>();
    let (ssg_trigger, ssg_triggered) = tokio::sync::mpsc::unbounded_channel();
    let statefulset_grids =
        Controller::new_with(Api::<DynamicObject>::all_with(client.clone(), &ssg), config, ssg.clone());
    let ssg_store = statefulset_grids.store();
    let statefulset_grids = statefulset_grids
        .owns_stream(statefulset_events)
        .reconcile_on(receiver_stream(ssg_triggered))
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile_workload_grid::<StatefulSetGrid>, error_policy::<StatefulSetGrid>, ctx)
        .for_each(|_| async {});

    let node_follower = follow_nodes(client, nodes, vec![(dg_store, dg, dg_trigger), (ssg_store, ssg, ssg_trigger)]);
    tokio::select! {
        _ = async { futures::join!(service_grids, deployment_grids, statefulset_grids) } => {}
        _ = node_follower => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deletes_carry_the_uid_they_were_decided_on() {
        let params = delete_params(&plan::Stale { name: "web-unit-b".into(), uid: "uid-1".into() });
        assert_eq!(
            serde_json::to_value(&params).unwrap(),
            json!({"propagationPolicy": "Background", "preconditions": {"uid": "uid-1"}})
        );
    }
}
