//! The writes of a grid's generated objects: create or apply one when it differs and is
//! this grid's to write, delete those its plan no longer wants, and drop unused template
//! pool entries. Separate because only these decide, per object, whether writing is allowed.

use std::collections::BTreeSet;

use edgegrid_core::keys;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::ObjectRef;
use serde_json::{Value, json};

use super::MANAGER;
use super::context::{Context, Generated};
use crate::ownership::{self, Ownership};
use crate::plan;
use crate::status::{Announcement, Problem};

/// Who a reconcile writes for.
pub(super) struct GridIdentity {
    name: String,
    namespace: String,
    uid: String,
}

pub(super) fn identity(grid: &DynamicObject) -> GridIdentity {
    GridIdentity {
        name: grid.name_any(),
        namespace: grid.namespace().unwrap_or_default(),
        uid: grid.uid().unwrap_or_default(),
    }
}

fn hash_of(body: &Value) -> String {
    body["metadata"]["annotations"][keys::APPLIED_HASH_ANNOTATION].as_str().unwrap_or_default().to_string()
}

/// Makes `live` match `desired` if this grid may write it. The live object (as written,
/// or untouched when it already matched) or what is in the way.
pub(super) async fn sync_object<W: Generated>(ctx: &Context, grid: &GridIdentity, desired: &W) -> Result<W, Problem> {
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
pub(super) async fn prune<W: Generated>(ctx: &Context, grid: &GridIdentity, wanted: &BTreeSet<String>) -> Vec<Problem> {
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
pub(super) async fn delete_unused_templates(
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
