//! The DeploymentGrid and StatefulSetGrid reconciler: one workload per node unit, pruning
//! those no unit wants, and each workload's state read back for the grid's status. One
//! module for both kinds because they differ only in their types.

use std::sync::Arc;
use std::time::Duration;

use edgegrid_core::crd::{UnitWorkloadState, WorkloadCondition, WorkloadGridStatus};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use serde::de::DeserializeOwned;

use super::context::{Context, Generated};
use super::frame::{Error, decode, finish, resource_of, timed};
use super::status_write::{conclude, now, previous_status};
use super::write::{delete_unused_templates, identity, prune, sync_object};
use crate::plan::{self, WorkloadGrid};
use crate::status::{self, Conclusion, Findings};

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
                Conclusion::Blocked { reason: e.reason(), message: e.to_string() }
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
                Conclusion::Reconciled(findings)
            }
        };
        let status = status::workload_grid_status(previous.as_ref(), &outcome, grid.metadata.generation, &now());
        conclude(&ctx, &grid, &resource, previous.as_ref(), &status).await?;
        finish(&outcome)
    })
    .await
}
