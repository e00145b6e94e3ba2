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
//!
//! The wiring is here; the rest is one module per idea: `context` (shared state),
//! `frame` (what every reconcile does around its grid's step), `write` (generated
//! objects), `status_write` (the grid's own status and Events), `service_grid` and
//! `workload_grid` (the reconcilers), `node_feed` (node labels to unit sets).

mod context;
mod frame;
mod node_feed;
mod service_grid;
mod status_write;
mod workload_grid;
mod write;

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use edgegrid_core::crd::{DeploymentGrid, ServiceGrid, StatefulSetGrid};
use edgegrid_core::keys;
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::controller::{self, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{self, Store};
use kube::runtime::utils::Backoff;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

pub use context::{Context, Generated, crd_fix_command};
pub use frame::Error;
pub use service_grid::reconcile_service_grid;
pub use workload_grid::{ObservedWorkload, reconcile_workload_grid};

use self::frame::{error_policy, resource_of};
use self::node_feed::follow_nodes;
use crate::metrics::Metrics;
use crate::status_subresource::{self, StatusSubresources};
use crate::units::NodeUnits;

/// Field manager of everything this controller writes.
pub const MANAGER: &str = "grid-controller";

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

/// The controller of the grids of `resource`, fed by a watch that backs off on its own.
/// The controller itself never pauses: kube's pauses all of a controller's triggers after
/// any of its watches fails (longer after each failure in a row, up to 30 s), so a failing
/// watch of generated objects held back every grid's own events (the soak saw a created
/// DeploymentGrid wait more than 45 s after an API server restart). Each watch, this one
/// and the generated objects' (see [`generated`]), backs off on its own instead.
fn grids_controller(client: &Client, resource: &ApiResource) -> Controller<DynamicObject> {
    let writer = Writer::new(resource.clone());
    let reader = writer.as_reader();
    let grids = watcher(Api::<DynamicObject>::all_with(client.clone(), resource), watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects();
    Controller::for_stream_with(grids, reader, resource.clone()).trigger_backoff(NoPause)
}

/// The controller's backoff of its triggers: none (see [`grids_controller`]).
struct NoPause;

impl Iterator for NoPause {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(Duration::ZERO)
    }
}

impl Backoff for NoPause {
    fn reset(&mut self) {}
}

/// What a controller yields besides reconciles (which report through `error_policy`): a
/// failure of a watch feeding it, which kube's controller would otherwise drop unseen.
async fn log_watch_failure<T, E: std::error::Error>(
    kind: &'static str,
    result: Result<T, controller::Error<E, watcher::Error>>,
) {
    if let Err(controller::Error::QueueError(error)) = result {
        tracing::warn!(kind, %error, "a watch feeding the controller failed; it retries on its own");
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
    let shutdown = Box::pin(shutdown).shared();

    let sg = resource_of::<ServiceGrid>();
    let service_grids = grids_controller(&client, &sg)
        .owns_stream(service_events)
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile_service_grid, error_policy::<ServiceGrid>, ctx.clone())
        .for_each(|result| log_watch_failure("ServiceGrid", result));

    let dg = resource_of::<DeploymentGrid>();
    let (dg_trigger, dg_triggered) = tokio::sync::mpsc::unbounded_channel();
    let deployment_grids = grids_controller(&client, &dg);
    let dg_store = deployment_grids.store();
    let deployment_grids = deployment_grids
        .owns_stream(deployment_events)
        .reconcile_on(receiver_stream(dg_triggered))
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile_workload_grid::<DeploymentGrid>, error_policy::<DeploymentGrid>, ctx.clone())
        .for_each(|result| log_watch_failure("DeploymentGrid", result));

    let ssg = resource_of::<StatefulSetGrid>();
    let (ssg_trigger, ssg_triggered) = tokio::sync::mpsc::unbounded_channel();
    let statefulset_grids = grids_controller(&client, &ssg);
    let ssg_store = statefulset_grids.store();
    let statefulset_grids = statefulset_grids
        .owns_stream(statefulset_events)
        .reconcile_on(receiver_stream(ssg_triggered))
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile_workload_grid::<StatefulSetGrid>, error_policy::<StatefulSetGrid>, ctx)
        .for_each(|result| log_watch_failure("StatefulSetGrid", result));

    let node_follower = follow_nodes(client, nodes, vec![(dg_store, dg, dg_trigger), (ssg_store, ssg, ssg_trigger)]);
    tokio::select! {
        _ = async { futures::join!(service_grids, deployment_grids, statefulset_grids) } => {}
        _ = node_follower => {}
    }
}
