//! A grid's own status: the one it had (on the object, or as this process remembered it
//! when the CRD lacks the status subresource), and the Events and status write that end a
//! reconcile. Separate from the generated objects' writes: these go to the grid itself.

use edgegrid_core::crd::{ServiceGridStatus, WorkloadGridStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::MANAGER;
use super::context::{Context, unstored_key};
use super::frame::Error;
use crate::status;
use crate::status_subresource::StatusWrite;

pub(super) fn now() -> Time {
    Time(jiff::Timestamp::now())
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
pub(super) fn previous_status<S: DeserializeOwned>(
    ctx: &Context,
    resource: &ApiResource,
    grid: &DynamicObject,
) -> Option<S> {
    if ctx.status_subresources.is_missing(&resource.kind) {
        let unstored = ctx.unstored.lock().unwrap_or_else(|e| e.into_inner());
        let (uid, status) = unstored.get(&unstored_key(resource, grid))?;
        return (Some(uid.as_str()) == grid.uid().as_deref()).then(|| serde_json::from_value(status.clone()).ok())?;
    }
    grid.data.get("status").and_then(|s| serde_json::from_value(s.clone()).ok())
}

fn conditions_of(status: Option<&impl HasConditions>) -> &[edgegrid_core::crd::GridCondition] {
    status.map(|s| s.conditions()).unwrap_or_default()
}

/// The grid statuses share their condition list.
pub(super) trait HasConditions {
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
pub(super) async fn conclude<S>(
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
                Some(StatusWrite { write: true, .. }) => {
                    tracing::debug!(grid = %grid.name_any(), "status write 404: the grid is gone");
                    Ok(())
                }
                Some(StatusWrite { write: false, transition }) => {
                    ctx.status_gate_changed(grid, resource, transition).await;
                    ctx.remember_unstored(grid, resource, next);
                    Ok(())
                }
            }
        }
        other => other,
    }
}
