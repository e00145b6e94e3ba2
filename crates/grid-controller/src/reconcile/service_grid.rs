//! The ServiceGrid reconciler: one Service per grid. Separate from the workload grids',
//! which depend on the node units and prune what no unit wants.

use std::sync::Arc;

use edgegrid_core::crd::{ServiceGrid, ServiceGridStatus};
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;

use super::context::Context;
use super::frame::{Error, decode, finish, resource_of, timed};
use super::status_write::{conclude, now, previous_status};
use super::write::{identity, sync_object};
use crate::plan;
use crate::status::{self, Conclusion, Findings};

#[tracing::instrument(skip_all, fields(kind = "ServiceGrid", namespace = grid.namespace().unwrap_or_default(), name = %grid.name_any()))]
pub async fn reconcile_service_grid(grid: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    timed::<ServiceGrid, _>(&grid, &ctx, async {
        let resource = resource_of::<ServiceGrid>();
        let previous: Option<ServiceGridStatus> = previous_status(&ctx, &resource, &grid);
        let mut service_name = None;
        let outcome = match decode::<ServiceGrid>(&grid) {
            Err(blocked) => blocked,
            Ok(typed) => match plan::plan_service_grid(&typed) {
                Err(e) => Conclusion::Blocked { reason: e.reason(), message: e.to_string() },
                Ok(service) => {
                    let mut findings = Findings::default();
                    match sync_object(&ctx, &identity(&grid), &service).await {
                        Ok(live) => service_name = Some(live.name_any()),
                        Err(problem) => findings.problems.push(problem),
                    }
                    Conclusion::Reconciled(findings)
                }
            },
        };
        if let Conclusion::Blocked { reason, .. } = &outcome {
            ctx.metrics.failed("ServiceGrid", reason);
        }
        let status =
            status::service_grid_status(previous.as_ref(), &outcome, service_name, grid.metadata.generation, &now());
        conclude(&ctx, &grid, &resource, previous.as_ref(), &status).await?;
        finish(&outcome)
    })
    .await
}
