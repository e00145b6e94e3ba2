//! What kube-controller-manager's workload controllers keep, for the local cluster's
//! stand-ins ([`super::workloads`]): the ReplicaSet of a Deployment's template, the
//! ControllerRevision of a StatefulSet's, the pods they own, and the `.status` of
//! Deployments, ReplicaSets and StatefulSets computed from those pods the way the real
//! controllers compute it (`deployment/sync.go` `calculateStatus`, `deployment/progress.go`
//! `syncRolloutStatus`, `replicaset/replica_set_utils.go` `calculateStatus`,
//! `statefulset/stateful_set_control.go` `computeReplicaStatus`). Pure: objects and the
//! time in, objects out.
//!
//! Where the stand-ins differ from the real controllers: a Deployment's pods are named
//! `<deployment>-<ordinal>` (the demo's tables name them) rather than `<replicaset>-<random>`,
//! and a changed template gets its new ReplicaSet but no rollout of the old one's pods.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    ControllerRevision, Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet, ReplicaSetSpec,
    ReplicaSetStatus, StatefulSet, StatefulSetStatus,
};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::{Resource, ResourceExt};
use serde_json::json;

pub const POD_TEMPLATE_HASH_LABEL: &str = "pod-template-hash";
pub const REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";
const DESIRED_REPLICAS_ANNOTATION: &str = "deployment.kubernetes.io/desired-replicas";
const MAX_REPLICAS_ANNOTATION: &str = "deployment.kubernetes.io/max-replicas";
/// Deployment annotations the controller does not copy onto its ReplicaSets.
const NOT_COPIED: [&str; 6] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION_ANNOTATION,
    "deployment.kubernetes.io/revision-history",
    DESIRED_REPLICAS_ANNOTATION,
    MAX_REPLICAS_ANNOTATION,
    "deprecated.deployment.rollback.to",
];
pub const STATEFULSET_REVISION_LABEL: &str = "controller-revision-hash";
const STATEFULSET_POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
const CONTROLLER_REVISION_HASH_LABEL: &str = "controller.kubernetes.io/hash";

/// The Progressing condition's reasons and the Available condition's (`deployment/util`).
const NEW_RS_CREATED: &str = "NewReplicaSetCreated";
const FOUND_NEW_RS: &str = "FoundNewReplicaSet";
const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
const RS_UPDATED: &str = "ReplicaSetUpdated";
const TIMED_OUT: &str = "ProgressDeadlineExceeded";
const MIN_AVAILABLE: &str = "MinimumReplicasAvailable";
const MIN_UNAVAILABLE: &str = "MinimumReplicasUnavailable";

/// FNV-32a, the hash behind `pod-template-hash` and ControllerRevision names.
fn fnv32a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, byte| (hash ^ u32::from(*byte)).wrapping_mul(0x0100_0193))
}

/// A hash as `rand.SafeEncodeString` spells its decimal digits: no vowels, no 0/1/3, so
/// a name never spells a word.
fn safe_encode(text: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    text.bytes().map(|b| ALPHANUMS[usize::from(b) % ALPHANUMS.len()] as char).collect()
}

/// The hash of `value` (its JSON) with the collision count appended as the controllers
/// append it (8 bytes, the count little-endian in the first 4).
fn object_hash(value: &serde_json::Value, collision_count: Option<i32>) -> String {
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    if let Some(count) = collision_count {
        bytes.extend_from_slice(&(count as u32).to_le_bytes());
        bytes.extend_from_slice(&[0; 4]);
    }
    safe_encode(&fnv32a(&bytes).to_string())
}

/// The owner reference a controller puts on what it creates.
pub fn controller_reference<K: Resource<DynamicType = ()>>(owner: &K) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: owner.name_any(),
        uid: owner.meta().uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Whether `pod`'s controller is the object with `uid`.
fn controlled_by(pod: &Pod, uid: Option<&str>) -> bool {
    let Some(uid) = uid else { return false };
    pod.owner_references().iter().any(|r| r.controller == Some(true) && r.uid == uid)
}

/// Whether `pod`'s Ready condition is True.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or_default()
}

fn terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Ready for at least `min_ready_seconds` (`podutil.IsPodAvailable`).
fn available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    if !pod_ready(pod) {
        return false;
    }
    if min_ready_seconds <= 0 {
        return true;
    }
    let since = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time.as_ref());
    since.is_some_and(|since| since.0.as_second() + i64::from(min_ready_seconds) <= now.as_second())
}

fn nonzero(n: i32) -> Option<i32> {
    (n != 0).then_some(n)
}

fn with_label(template: &PodTemplateSpec, key: &str, value: &str) -> PodTemplateSpec {
    let mut template = template.clone();
    let metadata = template.metadata.get_or_insert_with(Default::default);
    metadata.labels.get_or_insert_with(Default::default).insert(key.into(), value.into());
    template
}

// ---- Deployments and their ReplicaSets ----

fn deployment_replicas(deployment: &Deployment) -> i32 {
    deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

/// `intstr.GetScaledValueFromIntOrPercent`.
fn scaled(value: Option<&IntOrString>, total: i32, round_up: bool) -> i32 {
    match value {
        Some(IntOrString::Int(n)) => *n,
        Some(IntOrString::String(text)) => {
            let percent: i64 = text.trim_end_matches('%').parse().unwrap_or(0);
            let product = percent * i64::from(total);
            (if round_up { (product + 99) / 100 } else { product / 100 }) as i32
        }
        // the API server's defaults: 25% each
        None => scaled(Some(&IntOrString::String("25%".into())), total, round_up),
    }
}

/// `(maxSurge, maxUnavailable)` as `deploymentutil.ResolveFenceposts` resolves them; both
/// 0 for a Recreate Deployment.
fn surge_and_unavailable(deployment: &Deployment) -> (i32, i32) {
    let strategy = deployment.spec.as_ref().and_then(|s| s.strategy.as_ref());
    if strategy.and_then(|s| s.type_.as_deref()).is_some_and(|t| t == "Recreate") {
        return (0, 0);
    }
    let rolling = strategy.and_then(|s| s.rolling_update.as_ref());
    let replicas = deployment_replicas(deployment);
    let surge = scaled(rolling.and_then(|r| r.max_surge.as_ref()), replicas, true);
    let unavailable = scaled(rolling.and_then(|r| r.max_unavailable.as_ref()), replicas, false);
    let unavailable = if surge == 0 && unavailable == 0 { 1 } else { unavailable };
    (surge, unavailable.min(replicas))
}

/// The ReplicaSet the deployment controller keeps for `deployment`'s current template
/// (`getNewReplicaSet`): `<deployment>-<pod-template-hash>`, the hash in its labels,
/// selector and template, scaled to the Deployment's replicas, revision 1.
pub fn new_replica_set(deployment: &Deployment) -> Option<ReplicaSet> {
    let spec = deployment.spec.as_ref()?;
    let collisions = deployment.status.as_ref().and_then(|s| s.collision_count);
    let hash = object_hash(&serde_json::to_value(&spec.template).ok()?, collisions);
    let template = with_label(&spec.template, POD_TEMPLATE_HASH_LABEL, &hash);
    let mut selector = spec.selector.clone();
    selector.match_labels.get_or_insert_with(Default::default).insert(POD_TEMPLATE_HASH_LABEL.into(), hash.clone());
    let replicas = deployment_replicas(deployment);
    let mut annotations: BTreeMap<String, String> = deployment
        .annotations()
        .iter()
        .filter(|(k, _)| !NOT_COPIED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    annotations.insert(REVISION_ANNOTATION.into(), "1".into());
    annotations.insert(DESIRED_REPLICAS_ANNOTATION.into(), replicas.to_string());
    annotations.insert(MAX_REPLICAS_ANNOTATION.into(), (replicas + surge_and_unavailable(deployment).0).to_string());
    Some(ReplicaSet {
        metadata: ObjectMeta {
            name: Some(format!("{}-{hash}", deployment.name_any())),
            namespace: deployment.namespace(),
            labels: template.metadata.as_ref().and_then(|m| m.labels.clone()),
            annotations: Some(annotations),
            owner_references: Some(vec![controller_reference(deployment)]),
            ..Default::default()
        },
        spec: Some(ReplicaSetSpec {
            replicas: Some(replicas),
            min_ready_seconds: spec.min_ready_seconds,
            selector,
            template: Some(template),
        }),
        status: None,
    })
}

/// A ReplicaSet's status from the pods it controls (`replicaset.calculateStatus`):
/// active pods (not terminating, not finished), those carrying the template's labels,
/// the ready and the available ones.
pub fn replica_set_status(replica_set: &ReplicaSet, pods: &[Pod], now: Timestamp) -> ReplicaSetStatus {
    let spec = replica_set.spec.clone().unwrap_or_default();
    let template_labels = spec.template.as_ref().and_then(|t| t.metadata.as_ref()).and_then(|m| m.labels.clone());
    let uid = replica_set.meta().uid.as_deref();
    let active: Vec<&Pod> = pods
        .iter()
        .filter(|p| controlled_by(p, uid) && !terminating(p) && !matches!(phase(p), "Succeeded" | "Failed"))
        .collect();
    let fully_labeled =
        active.iter().filter(|p| template_labels.iter().flatten().all(|(k, v)| p.labels().get(k) == Some(v))).count();
    let ready = active.iter().filter(|p| pod_ready(p)).count();
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let available = active.iter().filter(|p| available(p, min_ready, now)).count();
    ReplicaSetStatus {
        replicas: active.len() as i32,
        fully_labeled_replicas: nonzero(fully_labeled as i32),
        ready_replicas: nonzero(ready as i32),
        available_replicas: nonzero(available as i32),
        observed_generation: replica_set.metadata.generation,
        conditions: None,
        terminating_replicas: None,
    }
}

fn deployment_condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    now: Timestamp,
) -> DeploymentCondition {
    DeploymentCondition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// `deploymentutil.SetDeploymentCondition`: nothing when the status and reason are the
/// same; the transition time kept when only the reason changes; the condition moved last.
fn set_condition(conditions: &mut Vec<DeploymentCondition>, mut condition: DeploymentCondition) {
    if let Some(current) = conditions.iter().find(|c| c.type_ == condition.type_) {
        if current.status == condition.status && current.reason == condition.reason {
            return;
        }
        if current.status == condition.status {
            condition.last_transition_time = current.last_transition_time.clone();
        }
    }
    conditions.retain(|c| c.type_ != condition.type_);
    conditions.push(condition);
}

/// A Deployment's status as its controller writes it once `replica_set` (its only
/// ReplicaSet, with its status) exists; `created` when that ReplicaSet was created by
/// this pass. The previous status (`deployment.status`) decides the conditions' history:
/// `Progressing` goes NewReplicaSetCreated (or FoundNewReplicaSet) -> ReplicaSetUpdated ->
/// NewReplicaSetAvailable and stays there once the rollout completed; `Available` follows
/// the available replicas against `replicas - maxUnavailable`.
pub fn deployment_status(
    deployment: &Deployment,
    replica_set: &ReplicaSet,
    created: bool,
    now: Timestamp,
) -> DeploymentStatus {
    let previous = deployment.status.clone().unwrap_or_default();
    let spec = deployment.spec.clone().unwrap_or_default();
    let replicas = deployment_replicas(deployment);
    let deadline = spec.progress_deadline_seconds.unwrap_or(600);
    let has_deadline = deadline != i32::MAX;
    let rs_name = replica_set.name_any();
    let mut conditions = previous.conditions.clone().unwrap_or_default();
    // getNewReplicaSet: the condition that says which ReplicaSet the rollout is about
    let progressing = |c: &Vec<DeploymentCondition>| c.iter().find(|c| c.type_ == "Progressing").cloned();
    if has_deadline && created {
        let message = format!("Created new replica set {rs_name:?}");
        set_condition(&mut conditions, deployment_condition("Progressing", true, NEW_RS_CREATED, message, now));
    } else if has_deadline && progressing(&conditions).is_none() {
        let message = format!("Found new replica set {rs_name:?}");
        set_condition(&mut conditions, deployment_condition("Progressing", true, FOUND_NEW_RS, message, now));
    }
    let current = progressing(&conditions);

    // calculateStatus
    let rs_status = replica_set.status.clone().unwrap_or_default();
    let rs_replicas = replica_set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    let available = rs_status.available_replicas.unwrap_or(0);
    let mut status = DeploymentStatus {
        observed_generation: deployment.metadata.generation,
        replicas: nonzero(rs_status.replicas),
        updated_replicas: nonzero(rs_status.replicas),
        ready_replicas: nonzero(rs_status.ready_replicas.unwrap_or(0)),
        available_replicas: nonzero(available),
        unavailable_replicas: nonzero((rs_replicas - available).max(0)),
        collision_count: previous.collision_count,
        conditions: None,
        terminating_replicas: None,
    };
    if available >= replicas - surge_and_unavailable(deployment).1 {
        let message = "Deployment has minimum availability.".to_string();
        set_condition(&mut conditions, deployment_condition("Available", true, MIN_AVAILABLE, message, now));
    } else {
        let message = "Deployment does not have minimum availability.".to_string();
        set_condition(&mut conditions, deployment_condition("Available", false, MIN_UNAVAILABLE, message, now));
    }

    // syncRolloutStatus
    let count = |n: Option<i32>| n.unwrap_or(0);
    if !has_deadline {
        conditions.retain(|c| c.type_ != "Progressing");
    }
    let complete_before = status.replicas == status.updated_replicas
        && current.as_ref().and_then(|c| c.reason.as_deref()) == Some(NEW_RS_AVAILABLE);
    if has_deadline && !complete_before {
        let complete = count(status.updated_replicas) == replicas
            && count(status.replicas) == replicas
            && count(status.available_replicas) == replicas
            && status.observed_generation >= deployment.metadata.generation;
        let old_before = count(previous.replicas) - count(previous.updated_replicas);
        let old_now = count(status.replicas) - count(status.updated_replicas);
        let progressed = count(status.updated_replicas) > count(previous.updated_replicas)
            || old_now < old_before
            || count(status.ready_replicas) > count(previous.ready_replicas)
            || count(status.available_replicas) > count(previous.available_replicas);
        if complete {
            let message = format!("ReplicaSet {rs_name:?} has successfully progressed.");
            set_condition(&mut conditions, deployment_condition("Progressing", true, NEW_RS_AVAILABLE, message, now));
        } else if progressed {
            let mut condition = deployment_condition(
                "Progressing",
                true,
                RS_UPDATED,
                format!("ReplicaSet {rs_name:?} is progressing."),
                now,
            );
            if let Some(current) = &current {
                if current.status == "True" {
                    condition.last_transition_time = current.last_transition_time.clone();
                }
                conditions.retain(|c| c.type_ != "Progressing");
            }
            set_condition(&mut conditions, condition);
        } else if let Some(current) = &current {
            let since = current.last_update_time.as_ref().map_or(now.as_second(), |t| t.0.as_second());
            if current.reason.as_deref() != Some(TIMED_OUT) && since + i64::from(deadline) < now.as_second() {
                let message = format!("ReplicaSet {rs_name:?} has timed out progressing.");
                set_condition(&mut conditions, deployment_condition("Progressing", false, TIMED_OUT, message, now));
            }
        }
    }
    status.conditions = Some(conditions);
    status
}

// ---- StatefulSets ----

/// The ControllerRevision the StatefulSet controller keeps for `stateful_set`'s template:
/// `<statefulset>-<hash of its data>`, revision 1.
pub fn controller_revision(stateful_set: &StatefulSet) -> Option<ControllerRevision> {
    let spec = stateful_set.spec.as_ref()?;
    let mut template = serde_json::to_value(&spec.template).ok()?;
    template["$patch"] = json!("replace");
    let data = json!({"spec": {"template": template}});
    // the controller counts collisions from 0 (a Deployment's count stays unset until one)
    let collisions = stateful_set.status.as_ref().and_then(|s| s.collision_count).unwrap_or(0);
    let hash = object_hash(&data, Some(collisions));
    let mut labels = spec.template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
    labels.insert(CONTROLLER_REVISION_HASH_LABEL.into(), hash.clone());
    Some(ControllerRevision {
        metadata: ObjectMeta {
            name: Some(format!("{}-{hash}", stateful_set.name_any())),
            namespace: stateful_set.namespace(),
            labels: Some(labels),
            owner_references: Some(vec![controller_reference(stateful_set)]),
            ..Default::default()
        },
        data: Some(RawExtension(data)),
        revision: 1,
    })
}

/// The template of the pods a StatefulSet makes at `revision`, for ordinal `ordinal`: its
/// labels plus the revision, pod name and index, its hostname and subdomain.
pub fn stateful_set_pod_template(stateful_set: &StatefulSet, revision: &str, ordinal: usize) -> PodTemplateSpec {
    let spec = stateful_set.spec.clone().unwrap_or_default();
    let name = format!("{}-{ordinal}", stateful_set.name_any());
    let template = with_label(&spec.template, STATEFULSET_REVISION_LABEL, revision);
    let template = with_label(&template, STATEFULSET_POD_NAME_LABEL, &name);
    let mut template = with_label(&template, POD_INDEX_LABEL, &ordinal.to_string());
    if let Some(pod_spec) = template.spec.as_mut() {
        pod_spec.hostname = Some(name);
        pod_spec.subdomain = spec.service_name.clone().filter(|s| !s.is_empty());
    }
    template
}

/// A StatefulSet's status from the pods it controls (`computeReplicaStatus`), all at
/// `revision`: created pods (a phase set), running and ready ones, available ones, and
/// the current/updated counts of the revision they carry.
pub fn stateful_set_status(
    stateful_set: &StatefulSet,
    revision: &str,
    pods: &[Pod],
    now: Timestamp,
) -> StatefulSetStatus {
    let min_ready = stateful_set.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0);
    let uid = stateful_set.meta().uid.as_deref();
    let owned: Vec<&Pod> = pods.iter().filter(|p| controlled_by(p, uid)).collect();
    let created = |p: &&&Pod| !phase(p).is_empty();
    let running_ready = |p: &&&Pod| phase(p) == "Running" && pod_ready(p);
    let at_revision = owned
        .iter()
        .filter(created)
        .filter(|p| !terminating(p) && p.labels().get(STATEFULSET_REVISION_LABEL).map(String::as_str) == Some(revision))
        .count() as i32;
    StatefulSetStatus {
        observed_generation: stateful_set.metadata.generation,
        replicas: owned.iter().filter(created).count() as i32,
        ready_replicas: nonzero(owned.iter().filter(running_ready).count() as i32),
        available_replicas: Some(
            owned.iter().filter(running_ready).filter(|p| available(p, min_ready, now)).count() as i32
        ),
        current_replicas: nonzero(at_revision),
        updated_replicas: nonzero(at_revision),
        current_revision: Some(revision.into()),
        update_revision: Some(revision.into()),
        collision_count: Some(stateful_set.status.as_ref().and_then(|s| s.collision_count).unwrap_or(0)),
        conditions: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    const T0: &str = "2026-01-01T00:00:00Z";

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + second).expect("time")
    }

    fn deployment(replicas: i32, status: Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "echo-unit-a", "namespace": "default", "uid": "d-1", "generation": 1,
                "annotations": {"superedge.io/grid": "echo"}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"appGrid": "echo"}}, "strategy": {},
                "template": {"metadata": {"labels": {"appGrid": "echo"}},
                    "spec": {"containers": [{"name": "echo", "image": "superedge/echoserver:2.2"}]}}},
            "status": status,
        }))
        .expect("deployment")
    }

    /// A pod owned by `owner` (uid), Running and Ready since `ready_at` (or not ready).
    fn pod(name: &str, owner: &str, labels: Value, ready_at: Option<i64>) -> Pod {
        let ready = match ready_at {
            Some(second) => json!({"type": "Ready", "status": "True", "lastTransitionTime": Time(at(second))}),
            None => json!({"type": "Ready", "status": "False", "lastTransitionTime": T0}),
        };
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "labels": labels,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "owner", "uid": owner,
                    "controller": true}]},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "conditions": [ready]},
        }))
        .expect("pod")
    }

    fn replica_set_of(deployment: &Deployment) -> ReplicaSet {
        let mut rs = new_replica_set(deployment).expect("a replica set");
        rs.metadata.uid = Some("rs-1".into());
        rs.metadata.generation = Some(1);
        rs
    }

    #[test]
    fn a_deployments_replica_set_carries_the_template_hash_and_revision_1() {
        let d = deployment(2, json!({}));
        let rs = serde_json::to_value(new_replica_set(&d).expect("a replica set")).expect("json");
        let hash = rs["metadata"]["labels"][POD_TEMPLATE_HASH_LABEL].as_str().expect("hash").to_string();
        assert!(hash.len() >= 8 && hash.bytes().all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b)), "{hash}");
        assert_eq!(
            rs,
            json!({
                "apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": format!("echo-unit-a-{hash}"), "namespace": "default",
                    "labels": {"appGrid": "echo", "pod-template-hash": hash},
                    "annotations": {"superedge.io/grid": "echo", "deployment.kubernetes.io/revision": "1",
                        "deployment.kubernetes.io/desired-replicas": "2", "deployment.kubernetes.io/max-replicas": "3"},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "echo-unit-a",
                        "uid": "d-1", "controller": true, "blockOwnerDeletion": true}]},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"appGrid": "echo", "pod-template-hash": hash}},
                    "template": {"metadata": {"labels": {"appGrid": "echo", "pod-template-hash": hash}},
                        "spec": {"containers": [{"name": "echo", "image": "superedge/echoserver:2.2"}]}}}
            })
        );
        // another template, another ReplicaSet; a collision count moves the hash too
        let mut changed = d.clone();
        changed.spec.as_mut().expect("spec").template.metadata.as_mut().expect("meta").labels =
            Some(BTreeMap::from([("appGrid".into(), "other".into())]));
        assert_ne!(
            new_replica_set(&changed).expect("rs").metadata.name,
            new_replica_set(&d).expect("rs").metadata.name
        );
        let collided = deployment(2, json!({"collisionCount": 1}));
        assert_ne!(
            new_replica_set(&collided).expect("rs").metadata.name,
            new_replica_set(&d).expect("rs").metadata.name
        );
    }

    #[test]
    fn a_replica_sets_status_counts_its_active_ready_and_available_pods() {
        let d = deployment(3, json!({}));
        let mut rs = replica_set_of(&d);
        rs.spec.as_mut().expect("spec").min_ready_seconds = Some(10);
        let labels =
            rs.spec.as_ref().and_then(|s| s.template.as_ref()).and_then(|t| t.metadata.clone()).and_then(|m| m.labels);
        let labels = serde_json::to_value(labels).expect("labels");
        let mut terminating = pod("t", "rs-1", labels.clone(), Some(0));
        terminating.metadata.deletion_timestamp = Some(Time(at(0)));
        let pods = [
            pod("ready-long", "rs-1", labels.clone(), Some(0)),
            pod("ready-just-now", "rs-1", labels.clone(), Some(25)),
            pod("not-ready", "rs-1", json!({"appGrid": "echo"}), None),
            pod("someone-elses", "rs-2", labels, Some(0)),
            terminating,
        ];
        assert_eq!(
            replica_set_status(&rs, &pods, at(30)),
            ReplicaSetStatus {
                replicas: 3,
                fully_labeled_replicas: Some(2),
                ready_replicas: Some(2),
                available_replicas: Some(1),
                observed_generation: Some(1),
                conditions: None,
                terminating_replicas: None,
            }
        );
    }

    /// The status written at each step of a fresh Deployment: its ReplicaSet created (no
    /// pods yet), its pods created, one ready, both ready; then a pod goes not ready.
    #[test]
    fn a_deployments_status_follows_its_pods_as_the_deployment_controller_writes_it() {
        let mut d = deployment(2, json!(null));
        let mut rs = replica_set_of(&d);
        let rs_name = rs.name_any();
        let labels = json!({"appGrid": "echo", "pod-template-hash": rs.labels()[POD_TEMPLATE_HASH_LABEL]});
        let mut step = |d: &mut Deployment, pods: &[Pod], created: bool, second: i64| {
            rs.status = Some(replica_set_status(&rs, pods, at(second)));
            let status = deployment_status(d, &rs, created, at(second));
            d.status = Some(status.clone());
            serde_json::to_value(status).expect("json")
        };
        let condition = |type_: &str, status: &str, reason: &str, message: &str, updated: i64, transition: i64| {
            json!({"type": type_, "status": status, "reason": reason, "message": message,
                "lastUpdateTime": Time(at(updated)), "lastTransitionTime": Time(at(transition))})
        };
        let progressing = |reason: &str, message: String, updated: i64, transition: i64| {
            condition("Progressing", "True", reason, &message, updated, transition)
        };
        let unavailable = condition(
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
            0,
            0,
        );

        assert_eq!(
            step(&mut d, &[], true, 0),
            json!({"observedGeneration": 1, "unavailableReplicas": 2, "conditions": [
                progressing("NewReplicaSetCreated", format!("Created new replica set {rs_name:?}"), 0, 0),
                unavailable.clone()]})
        );
        let pending =
            [pod("echo-unit-a-0", "rs-1", labels.clone(), None), pod("echo-unit-a-1", "rs-1", labels.clone(), None)];
        assert_eq!(
            step(&mut d, &pending, false, 1),
            json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "unavailableReplicas": 2,
                "conditions": [unavailable.clone(),
                    progressing("ReplicaSetUpdated", format!("ReplicaSet {rs_name:?} is progressing."), 1, 0)]})
        );
        let one = [pod("echo-unit-a-0", "rs-1", labels.clone(), Some(2)), pending[1].clone()];
        assert_eq!(
            step(&mut d, &one, false, 2),
            json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 1,
                "availableReplicas": 1, "unavailableReplicas": 1,
                "conditions": [unavailable,
                    progressing("ReplicaSetUpdated", format!("ReplicaSet {rs_name:?} is progressing."), 2, 0)]})
        );
        let both = [one[0].clone(), pod("echo-unit-a-1", "rs-1", labels.clone(), Some(3))];
        let available =
            condition("Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability.", 3, 3);
        let done =
            progressing("NewReplicaSetAvailable", format!("ReplicaSet {rs_name:?} has successfully progressed."), 3, 0);
        let ready = json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2,
            "availableReplicas": 2, "conditions": [available, done.clone()]});
        assert_eq!(step(&mut d, &both, false, 3), ready);
        assert_eq!(step(&mut d, &both, false, 9), ready, "nothing changed, nothing moves");
        // edge-a-1 dies: its pod goes not ready; the finished rollout stays finished
        let degraded = [both[0].clone(), pod("echo-unit-a-1", "rs-1", labels, None)];
        assert_eq!(
            step(&mut d, &degraded, false, 20),
            json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 1,
                "availableReplicas": 1, "unavailableReplicas": 1, "conditions": [done,
                    condition("Available", "False", "MinimumReplicasUnavailable",
                        "Deployment does not have minimum availability.", 20, 20)]})
        );
    }

    #[test]
    fn max_unavailable_resolves_as_the_controller_resolves_it() {
        let with = |replicas: i32, strategy: Value| {
            let mut d = deployment(replicas, json!({}));
            d.spec.as_mut().expect("spec").strategy = serde_json::from_value(strategy).expect("strategy");
            surge_and_unavailable(&d)
        };
        assert_eq!(with(2, json!({})), (1, 0), "25% of 2: surge rounds up, unavailable down");
        assert_eq!(with(10, json!({})), (3, 2));
        assert_eq!(with(4, json!({"rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}})), (0, 1), "never both 0");
        assert_eq!(with(3, json!({"rollingUpdate": {"maxUnavailable": 5}})), (1, 3), "at most the replicas");
        assert_eq!(with(3, json!({"type": "Recreate"})), (0, 0));
    }

    #[test]
    fn a_stateful_sets_status_counts_created_ready_and_available_pods_of_its_revision() {
        let set: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "cache-unit-b", "namespace": "default", "uid": "s-1", "generation": 2},
            "spec": {"replicas": 3, "serviceName": "cache-svc", "selector": {"matchLabels": {"appGrid": "cache"}},
                "template": {"metadata": {"labels": {"appGrid": "cache"}},
                    "spec": {"containers": [{"name": "cache", "image": "redis:7"}]}}}
        }))
        .expect("statefulset");
        let revision = controller_revision(&set).expect("a revision");
        let name = revision.name_any();
        let mut counted = set.clone();
        counted.status = Some(StatefulSetStatus { collision_count: Some(0), ..Default::default() });
        assert_eq!(controller_revision(&counted).map(|r| r.name_any()), Some(name.clone()), "no count is a count of 0");
        assert!(name.starts_with("cache-unit-b-"), "{name}");
        assert_eq!(revision.metadata.labels.as_ref().map(|l| l["appGrid"].as_str()), Some("cache"));
        assert_eq!(revision.data.as_ref().map(|d| d.0["spec"]["template"]["$patch"].clone()), Some(json!("replace")));
        let template = serde_json::to_value(stateful_set_pod_template(&set, &name, 1)).expect("json");
        assert_eq!(
            template,
            json!({"metadata": {"labels": {"appGrid": "cache", "controller-revision-hash": name,
                    "statefulset.kubernetes.io/pod-name": "cache-unit-b-1", "apps.kubernetes.io/pod-index": "1"}},
                "spec": {"containers": [{"name": "cache", "image": "redis:7"}], "hostname": "cache-unit-b-1",
                    "subdomain": "cache-svc"}})
        );
        let labels = template["metadata"]["labels"].clone();
        let mut created_only = pod("cache-unit-b-1", "s-1", labels.clone(), None);
        created_only.status.as_mut().expect("status").phase = Some("Pending".into());
        let mut not_created = pod("cache-unit-b-2", "s-1", labels.clone(), None);
        not_created.status.as_mut().expect("status").phase = None;
        let pods = [pod("cache-unit-b-0", "s-1", labels, Some(0)), created_only, not_created];
        assert_eq!(
            serde_json::to_value(stateful_set_status(&set, &name, &pods, at(5))).expect("json"),
            json!({"observedGeneration": 2, "replicas": 2, "readyReplicas": 1, "availableReplicas": 1,
                "currentReplicas": 2, "updatedReplicas": 2, "currentRevision": name, "updateRevision": name,
                "collisionCount": 0})
        );
    }

    #[test]
    fn template_hashes_are_fnv32a_spelt_safely() {
        assert_eq!(fnv32a(b""), 0x811c_9dc5);
        assert_eq!(fnv32a(b"a"), 0xe40c_292c);
        assert_eq!(safe_encode("0123456789"), "456789bcdf");
    }
}
