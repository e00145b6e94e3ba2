//! The controllers: each reconcile applies its grid's plan with server-side apply, deletes
//! workloads the grid no longer wants, writes status through the status subresource and
//! reports skipped units and errors as Events.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use edgegrid_core::crd::{
    ConditionStatus, DeploymentGrid, GridCondition, GridConditionType, ServiceGrid, StatefulSetGrid, UnitWorkloadState,
    WorkloadCondition, WorkloadGridStatus, set_condition,
};
use edgegrid_core::keys;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use crate::metrics::Metrics;
use crate::plan::{self, PlanError, SkippedUnit, WorkloadGrid, WorkloadPlan};

/// Field manager of everything this controller applies.
pub const MANAGER: &str = "grid-controller";
/// Re-check even without changes, as a safety net.
const RESYNC: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Api(#[from] kube::Error),
    #[error("serialising a generated object: {0}")]
    Serialize(#[from] serde_json::Error),
}

impl Error {
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Api(kube::Error::Api(s)) if s.code == 409 => "conflict",
            Self::Api(_) => "api",
            Self::Serialize(_) => "serialize",
        }
    }
}

pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
}

impl Context {
    pub fn new(client: Client, metrics: Arc<Metrics>) -> Arc<Self> {
        let reporter = Reporter { controller: MANAGER.into(), instance: std::env::var("POD_NAME").ok() };
        Arc::new(Self { recorder: Recorder::new(client.clone(), reporter), client, metrics })
    }

    async fn warn<K: Resource<DynamicType = ()>>(&self, grid: &K, reason: &str, note: String) {
        let event = Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(note),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &grid.object_ref(&())).await {
            tracing::warn!("publishing event: {e}");
        }
    }
}

fn now() -> Time {
    Time(jiff::Timestamp::now())
}

fn condition(
    type_: GridConditionType,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
) -> GridCondition {
    GridCondition {
        type_,
        status: if ok { ConditionStatus::True } else { ConditionStatus::False },
        reason: reason.into(),
        message,
        last_transition_time: now(),
        observed_generation: generation,
    }
}

fn apply_params() -> PatchParams {
    PatchParams::apply(MANAGER).force()
}

async fn write_status<K>(api: &Api<K>, grid: &K, status: serde_json::Value) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let body = json!({"apiVersion": K::api_version(&()), "kind": K::kind(&()), "status": status});
    api.patch_status(&grid.name_any(), &apply_params(), &Patch::Apply(&body)).await?;
    Ok(())
}

pub async fn reconcile_service_grid(grid: Arc<ServiceGrid>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.metrics.reconciled("ServiceGrid");
    let namespace = grid.namespace().unwrap_or_default();
    let grids: Api<ServiceGrid> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut status = grid.status.clone().unwrap_or_default();
    let generation = grid.metadata.generation;
    match plan::plan_service_grid(&grid) {
        Ok(service) => {
            let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
            services.patch(&service.name_any(), &apply_params(), &Patch::Apply(&service)).await?;
            status.service = Some(service.name_any());
            set_condition(
                &mut status.conditions,
                condition(GridConditionType::Ready, true, "ServiceApplied", String::new(), generation),
            );
        }
        Err(e) => {
            ctx.warn(&*grid, e.reason(), e.to_string()).await;
            set_condition(
                &mut status.conditions,
                condition(GridConditionType::Ready, false, e.reason(), e.to_string(), generation),
            );
        }
    }
    status.observed_generation = generation;
    if grid.status.as_ref() != Some(&status) {
        write_status(&grids, &*grid, serde_json::to_value(&status)?).await?;
    }
    Ok(Action::requeue(RESYNC))
}

/// The unit values present on nodes right now.
async fn units(client: &Client, key: &str) -> Result<BTreeSet<String>, Error> {
    if crate::names::check_label_key(key).is_err() {
        return Ok(BTreeSet::new());
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let listed = nodes.list(&ListParams::default().labels(key)).await?;
    Ok(plan::unit_values(key, listed.items.iter().filter_map(|n| n.metadata.labels.as_ref())))
}

/// What the workload grids share: apply the plan, prune, and summarise per unit.
async fn reconcile_workloads<K, W>(
    grid: &K,
    ctx: &Context,
    planned: Result<WorkloadPlan<W>, PlanError>,
    observe: impl Fn(&W) -> UnitWorkloadState,
) -> Result<WorkloadGridStatus, Error>
where
    K: Resource<DynamicType = ()>,
    W: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let namespace = grid.namespace().unwrap_or_default();
    let generation = grid.meta().generation;
    let mut status = WorkloadGridStatus::default();
    let plan = match planned {
        Ok(plan) => plan,
        Err(e) => {
            ctx.warn(grid, e.reason(), e.to_string()).await;
            status.conditions.push(condition(GridConditionType::Ready, false, e.reason(), e.to_string(), generation));
            return Ok(status);
        }
    };
    let api: Api<W> = Api::namespaced(ctx.client.clone(), &namespace);
    for (unit, workload) in &plan.desired {
        let applied = api.patch(&workload.name_any(), &apply_params(), &Patch::Apply(workload)).await?;
        status.states.insert(unit.clone(), observe(&applied));
    }
    let uid = grid.uid().unwrap_or_default();
    let selector = format!("{}={}", keys::GRID_SELECTOR_LABEL, grid.name_any());
    let existing = api.list(&ListParams::default().labels(&selector)).await?;
    let wanted: BTreeSet<String> = plan.desired.values().map(|w| w.name_any()).collect();
    for stale in plan::stale_workloads(&uid, existing.items.iter().map(|w| w.meta()), &wanted) {
        match api.delete(&stale, &DeleteParams::background()).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    for SkippedUnit { unit, reason } in &plan.skipped {
        ctx.warn(grid, "UnitSkipped", format!("unit {unit:?} skipped: {reason}")).await;
    }
    status.workloads = wanted.into_iter().collect();
    status.units = status.states.len() as i32;
    status.ready_units =
        status.states.values().filter(|s| s.replicas > 0 && s.ready_replicas >= s.replicas).count() as i32;
    let names_ok = plan.skipped.is_empty();
    let message = plan.skipped.iter().map(|s| format!("{}: {}", s.unit, s.reason)).collect::<Vec<_>>().join("; ");
    status.conditions.push(condition(
        GridConditionType::UnitNamesValid,
        names_ok,
        if names_ok { "AllUnitsValid" } else { "UnitsSkipped" },
        message,
        generation,
    ));
    status.conditions.push(condition(GridConditionType::Ready, true, "WorkloadsApplied", String::new(), generation));
    Ok(status)
}

/// Keeps the previous transition times for conditions whose status did not change.
fn merge_conditions(
    previous: Option<&WorkloadGridStatus>,
    mut status: WorkloadGridStatus,
    generation: Option<i64>,
) -> WorkloadGridStatus {
    let mut conditions = previous.map(|p| p.conditions.clone()).unwrap_or_default();
    for c in std::mem::take(&mut status.conditions) {
        set_condition(&mut conditions, c);
    }
    status.conditions = conditions;
    status.observed_generation = generation;
    status
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
pub async fn reconcile_workload_grid<G>(grid: Arc<G>, ctx: Arc<Context>) -> Result<Action, Error>
where
    G: WorkloadGrid
        + Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    G::Workload: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + ObservedWorkload
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    ctx.metrics.reconciled(&G::kind(&()));
    let units = units(&ctx.client, grid.grid_uniq_key()).await?;
    let planned = plan::plan_workload_grid(&*grid, &units);
    let status = reconcile_workloads(&*grid, &ctx, planned, G::Workload::unit_state).await?;
    let status = merge_conditions(grid.status(), status, grid.meta().generation);
    if grid.status() != Some(&status) {
        let api: Api<G> = Api::namespaced(ctx.client.clone(), &grid.namespace().unwrap_or_default());
        write_status(&api, &*grid, serde_json::to_value(&status)?).await?;
    }
    Ok(Action::requeue(RESYNC))
}

fn error_policy<K: Resource<DynamicType = ()>>(grid: Arc<K>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(grid = %grid.name_any(), error = error.metric_label(), "reconcile failed: {error}");
    ctx.metrics.failed(&K::kind(&()), error.metric_label());
    Action::requeue(Duration::from_secs(5))
}

/// Runs the three controllers until `shutdown` resolves.
pub async fn run(
    client: Client,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let ctx = Context::new(client.clone(), metrics);
    let config = watcher::Config::default();
    let shutdown = futures::future::FutureExt::shared(Box::pin(shutdown));

    let service_grids = Controller::new(Api::<ServiceGrid>::all(client.clone()), config.clone())
        .owns(Api::<Service>::all(client.clone()), config.clone())
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile_service_grid, error_policy, ctx.clone())
        .for_each(|_| async {});

    let deployments = Controller::new(Api::<DeploymentGrid>::all(client.clone()), config.clone());
    let deployment_grids = deployments.store();
    let deployment_grids = deployments
        .owns(Api::<Deployment>::all(client.clone()), config.clone())
        // a node's unit label changing can add or remove a unit of any grid
        .watches(Api::<Node>::all(client.clone()), config.clone(), move |_: Node| {
            deployment_grids.state().iter().map(|g| ObjectRef::from_obj(&**g)).collect::<Vec<_>>()
        })
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile_workload_grid::<DeploymentGrid>, error_policy, ctx.clone())
        .for_each(|_| async {});

    let statefulsets = Controller::new(Api::<StatefulSetGrid>::all(client.clone()), config.clone());
    let statefulset_grids = statefulsets.store();
    let statefulset_grids = statefulsets
        .owns(Api::<StatefulSet>::all(client.clone()), config.clone())
        .watches(Api::<Node>::all(client), config, move |_: Node| {
            statefulset_grids.state().iter().map(|g| ObjectRef::from_obj(&**g)).collect::<Vec<_>>()
        })
        .graceful_shutdown_on(shutdown)
        .run(reconcile_workload_grid::<StatefulSetGrid>, error_policy, ctx)
        .for_each(|_| async {});

    futures::join!(service_grids, deployment_grids, statefulset_grids);
}
