//! What both reconcilers do around their grid-specific step: decode the untyped grid,
//! count and time the run, and turn its outcome into the next requeue, an error, or a
//! backoff. Separate so each reconciler holds only what its kind does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{ApiResource, DynamicObject};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

use super::context::{Context, grid_key};
use crate::status::Conclusion;

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

/// The result of a reconcile from its outcome: failures back off, conflicts re-check soon.
pub(super) fn finish(outcome: &Conclusion) -> Result<Action, Error> {
    let Conclusion::Reconciled(findings) = outcome else {
        return Ok(Action::await_change());
    };
    if let Some(failure) = findings.problems.iter().find(|p| p.reason == "ApplyFailed" || p.reason == "DeleteFailed") {
        return Err(Error::Incomplete { reason: failure.reason, message: failure.message.clone() });
    }
    if findings.problems.is_empty() { Ok(Action::requeue(RESYNC)) } else { Ok(Action::requeue(CONFLICT_RECHECK)) }
}

pub(super) fn decode<G: Resource<DynamicType = ()> + DeserializeOwned>(grid: &DynamicObject) -> Result<G, Conclusion> {
    let blocked = |e: serde_json::Error| Conclusion::Blocked {
        reason: "InvalidSpec",
        message: format!("the object does not decode as a {}: {e}", G::kind(&())),
    };
    let mut value = serde_json::to_value(grid).map_err(blocked)?;
    // list items need not carry their type; the kind is known here
    value["apiVersion"] = json!(G::api_version(&()));
    value["kind"] = json!(G::kind(&()));
    serde_json::from_value(value).map_err(blocked)
}

pub(super) fn resource_of<K: Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// Runs a reconcile body with the shared bookkeeping: the metrics, backoff reset.
pub(super) async fn timed<G, F>(grid: &DynamicObject, ctx: &Context, body: F) -> Result<Action, Error>
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

pub(super) fn error_policy<G: Resource<DynamicType = ()>>(
    grid: Arc<DynamicObject>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    let kind = G::kind(&());
    let delay = ctx.retry_after(grid_key::<G>(&grid));
    tracing::warn!(%kind, grid = %grid.name_any(), error = %error, label = error.metric_label(), retry_in = ?delay, "reconcile failed");
    ctx.metrics.failed(&kind, error.metric_label());
    Action::requeue(delay)
}
