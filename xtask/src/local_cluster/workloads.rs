//! What the local cluster has no real controllers for, done as kube-controller-manager and
//! the scheduler would: a ReplicaSet per Deployment template and one pod per replica (the
//! deployment and replicaset controllers), a ControllerRevision per StatefulSet and its
//! pods one at a time, each once the one before runs and is ready (the statefulset
//! controller's OrderedReady), each pod placed by its template's `nodeSelector` (the
//! scheduler), with the Events those components record and the workloads' `.status`
//! ([`workload_status`](super::workload_status)); and an EndpointSlice per selector
//! Service (the endpointslice controller's part, readiness from the pods' Ready
//! condition). The kubelets' part (pod status) is in `kubelet`. Decisions are pure
//! functions of the objects; [`run`] only lists and writes.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Node, ObjectReference, Pod, PodCondition, PodSpec, PodStatus, PodTemplateSpec, Service, Toleration,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

use super::events::{self, Source};
use super::workload_status::{
    REVISION_ANNOTATION, controller_reference, controller_revision, deployment_status, new_replica_set, pod_ready,
    replica_set_status, stateful_set_pod_template, stateful_set_status,
};

/// The label the endpointslice controller puts on its slices, and its value.
pub const MANAGED_BY: (&str, &str) = ("endpointslice.kubernetes.io/managed-by", "endpointslice-controller.k8s.io");
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Which controller makes a workload's pods, and so which Event it records for each.
#[derive(Clone, Debug, PartialEq)]
pub enum Maker {
    ReplicaSet,
    StatefulSet,
}

/// A workload's pods as its controller would want them.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub namespace: String,
    /// The pods are `<name>-<ordinal>`.
    pub name: String,
    /// The controller the pods belong to (a Deployment's ReplicaSet, a StatefulSet).
    pub owner: OwnerReference,
    /// The owner as its Events name it.
    pub owner_object: ObjectReference,
    pub maker: Maker,
    /// Each replica's pod template, by ordinal.
    pub pods: Vec<PodTemplateSpec>,
    /// Made one at a time, each once the one before runs and is ready (OrderedReady).
    pub ordered: bool,
}

impl Workload {
    /// The pods of `deployment`'s ReplicaSet `replica_set`.
    pub fn of_replica_set(deployment: &Deployment, replica_set: &ReplicaSet) -> Option<Self> {
        let spec = replica_set.spec.as_ref()?;
        let replicas = spec.replicas.unwrap_or(1).max(0) as usize;
        Some(Self {
            namespace: replica_set.namespace()?,
            name: deployment.name_any(),
            owner: controller_reference(replica_set),
            owner_object: events::reference(replica_set),
            maker: Maker::ReplicaSet,
            pods: vec![spec.template.clone()?; replicas],
            ordered: false,
        })
    }

    /// The pods of `stateful_set` at `revision` (its ControllerRevision's name).
    pub fn of_stateful_set(stateful_set: &StatefulSet, revision: &str) -> Option<Self> {
        let spec = stateful_set.spec.as_ref()?;
        let replicas = spec.replicas.unwrap_or(1).max(0) as usize;
        Some(Self {
            namespace: stateful_set.namespace()?,
            name: stateful_set.name_any(),
            owner: controller_reference(stateful_set),
            owner_object: events::reference(stateful_set),
            maker: Maker::StatefulSet,
            pods: (0..replicas).map(|ordinal| stateful_set_pod_template(stateful_set, revision, ordinal)).collect(),
            ordered: spec.pod_management_policy.as_deref() != Some("Parallel"),
        })
    }

    /// The Event the controller records for a pod it created, as `(source, reason, message)`.
    pub fn created_event(&self, pod: &str) -> (Source, &'static str, String) {
        match self.maker {
            Maker::ReplicaSet => (events::REPLICASET_CONTROLLER, "SuccessfulCreate", format!("Created pod: {pod}")),
            Maker::StatefulSet => (
                events::STATEFULSET_CONTROLLER,
                "SuccessfulCreate",
                format!("create Pod {pod} in StatefulSet {} successful", self.name),
            ),
        }
    }
}

/// The pods `workloads` want that `existing` lacks, with the workload each is for:
/// `<workload>-<ordinal>`, owned by the workload's controller, bound to the nodes the
/// template's `nodeSelector` matches in turn (sorted by name), with the tolerations the
/// DefaultTolerationSeconds admission plugin adds (so a NoExecute taint evicts only after
/// 300 s, as in a real cluster). A workload no node matches gets no pods (they would stay
/// Pending); an ordered one gets its next pod only once every pod before it runs and is
/// ready.
pub fn missing_pods<'a>(workloads: &'a [Workload], nodes: &[Node], existing: &[Pod]) -> Vec<(&'a Workload, Pod)> {
    let have: BTreeMap<(String, String), &Pod> =
        existing.iter().map(|p| ((p.namespace().unwrap_or_default(), p.name_any()), p)).collect();
    let mut out = Vec::new();
    for workload in workloads {
        for (ordinal, template) in workload.pods.iter().enumerate() {
            let name = format!("{}-{ordinal}", workload.name);
            if let Some(pod) = have.get(&(workload.namespace.clone(), name.clone())) {
                let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
                if workload.ordered && !(running && pod_ready(pod)) {
                    break;
                }
                continue;
            }
            let spec = template.spec.clone().unwrap_or_default();
            let selector = spec.node_selector.clone().unwrap_or_default();
            let mut matching: Vec<&Node> =
                nodes.iter().filter(|n| selector.iter().all(|(k, v)| n.labels().get(k) == Some(v))).collect();
            matching.sort_by_key(|n| n.name_any());
            if matching.is_empty() {
                break;
            }
            let node = matching[ordinal % matching.len()].name_any();
            let mut tolerations = spec.tolerations.clone().unwrap_or_default();
            for key in ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"] {
                tolerations.push(Toleration {
                    key: Some(key.into()),
                    operator: Some("Exists".into()),
                    effect: Some("NoExecute".into()),
                    toleration_seconds: Some(300),
                    value: None,
                });
            }
            let pod = Pod {
                metadata: ObjectMeta {
                    name: Some(name),
                    namespace: Some(workload.namespace.clone()),
                    labels: template.metadata.as_ref().and_then(|m| m.labels.clone()),
                    owner_references: Some(vec![workload.owner.clone()]),
                    ..Default::default()
                },
                spec: Some(PodSpec { node_name: Some(node), tolerations: Some(tolerations), ..spec }),
                status: None,
            };
            out.push((workload, pod));
            if workload.ordered {
                break;
            }
        }
    }
    out
}

/// The pod's QoS class, as the API server sets it on create: Guaranteed when every
/// container's cpu and memory limits equal their requests, BestEffort when no container
/// asks for anything, Burstable otherwise.
pub fn qos_class(spec: &PodSpec) -> &'static str {
    let containers: Vec<_> = spec.containers.iter().chain(spec.init_containers.iter().flatten()).collect();
    let resources: Vec<_> = containers.iter().map(|c| c.resources.clone().unwrap_or_default()).collect();
    let asks = |r: &k8s_openapi::api::core::v1::ResourceRequirements| {
        r.requests.iter().chain(r.limits.iter()).flatten().any(|(k, _)| k == "cpu" || k == "memory")
    };
    if !resources.iter().any(asks) {
        return "BestEffort";
    }
    let guaranteed = resources.iter().all(|r| {
        ["cpu", "memory"].iter().all(|key| {
            let limit = r.limits.as_ref().and_then(|l| l.get(*key));
            let request = r.requests.as_ref().and_then(|q| q.get(*key)).or(limit);
            limit.is_some() && request == limit
        })
    });
    if guaranteed { "Guaranteed" } else { "Burstable" }
}

/// The workloads whose status does not (yet) say every replica is ready, as
/// `<kind> <namespace>/<name>: <ready>/<replicas> ready`; a status not of the current
/// generation counts as none ready.
pub fn unsettled(deployments: &[Deployment], stateful_sets: &[StatefulSet]) -> Vec<String> {
    let of = |kind: &str, meta: &ObjectMeta, wanted: Option<i32>, ready: Option<i32>, observed: Option<i64>| {
        let wanted = wanted.unwrap_or(1);
        let ready = if observed == meta.generation { ready.unwrap_or(0) } else { 0 };
        (ready != wanted).then(|| {
            let name =
                format!("{}/{}", meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default());
            format!("{kind} {name}: {ready}/{wanted} ready")
        })
    };
    let deployments = deployments.iter().filter_map(|d| {
        let status = d.status.clone().unwrap_or_default();
        of(
            "Deployment",
            &d.metadata,
            d.spec.as_ref().and_then(|s| s.replicas),
            status.ready_replicas,
            status.observed_generation,
        )
    });
    let sets = stateful_sets.iter().filter_map(|s| {
        let status = s.status.clone().unwrap_or_default();
        of(
            "StatefulSet",
            &s.metadata,
            s.spec.as_ref().and_then(|s| s.replicas),
            status.ready_replicas,
            status.observed_generation,
        )
    });
    deployments.chain(sets).collect()
}

/// What a pod's status says once it is bound (the API server's `Pending` and QoS class,
/// the scheduler's `PodScheduled`).
pub fn bound_status(pod: &Pod, now: Timestamp) -> PodStatus {
    PodStatus {
        phase: Some("Pending".into()),
        qos_class: pod.spec.as_ref().map(|s| qos_class(s).to_string()),
        conditions: Some(vec![PodCondition {
            type_: "PodScheduled".into(),
            status: "True".into(),
            last_transition_time: Some(Time(now)),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

/// The EndpointSlice the endpointslice controller would keep for `service` (one per
/// Service here: the demo's Services have far fewer than 100 endpoints): every pod its
/// selector matches that has an IP, sorted by name, ready as the pod is, controlled by the
/// Service (so the garbage collector deletes it with the Service). `None` for a Service
/// without a selector.
pub fn desired_slice(service: &Service, pods: &[Pod]) -> Option<EndpointSlice> {
    let spec = service.spec.as_ref()?;
    let selector = spec.selector.as_ref().filter(|s| !s.is_empty())?;
    let namespace = service.namespace().unwrap_or_default();
    let mut matching: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|p| selector.iter().all(|(k, v)| p.labels().get(k) == Some(v)))
        .filter(|p| p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some())
        .collect();
    matching.sort_by_key(|p| p.name_any());
    let endpoints = matching
        .into_iter()
        .map(|pod| {
            let ready = pod_ready(pod) && pod.metadata.deletion_timestamp.is_none();
            Endpoint {
                addresses: vec![pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap_or_default()],
                conditions: Some(EndpointConditions {
                    ready: Some(ready),
                    serving: Some(ready),
                    terminating: Some(pod.metadata.deletion_timestamp.is_some()),
                }),
                node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
                target_ref: Some(k8s_openapi::api::core::v1::ObjectReference {
                    kind: Some("Pod".into()),
                    namespace: Some(namespace.clone()),
                    name: Some(pod.name_any()),
                    uid: pod.uid(),
                    ..Default::default()
                }),
                ..Default::default()
            }
        })
        .collect();
    let ports = spec
        .ports
        .iter()
        .flatten()
        .map(|p| EndpointPort {
            name: p.name.clone(),
            port: Some(match &p.target_port {
                Some(IntOrString::Int(port)) => *port,
                _ => p.port,
            }),
            protocol: p.protocol.clone().or(Some("TCP".into())),
            app_protocol: None,
        })
        .collect();
    let name = service.name_any();
    Some(EndpointSlice {
        metadata: ObjectMeta {
            name: Some(format!("{name}-sim")),
            namespace: Some(namespace),
            labels: Some(BTreeMap::from([
                (SERVICE_NAME_LABEL.to_string(), name.clone()),
                (MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string()),
            ])),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Service".into(),
                name: name.clone(),
                uid: service.uid().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        endpoints,
        ports: Some(ports),
    })
}

/// Whether `existing` already says what `desired` says (labels, endpoints, ports).
fn slice_matches(existing: &EndpointSlice, desired: &EndpointSlice) -> bool {
    existing.metadata.labels == desired.metadata.labels
        && existing.endpoints == desired.endpoints
        && existing.ports == desired.ports
        && existing.address_type == desired.address_type
}

/// The cloud-side controllers, every 300 ms until `stop` turns true.
pub async fn run(client: Client, mut stop: watch::Receiver<bool>) {
    let scheduler = events::instance_of(events::SCHEDULER);
    loop {
        if let Err(error) = pass(&client, &scheduler).await {
            tracing::warn!(error = format!("{error:#}"), "simulated workload controllers");
        }
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            () = tokio::time::sleep(Duration::from_millis(300)) => {}
        }
    }
}

/// Whether `a` and `b` are the same object by namespace and name.
fn same<A: ResourceExt, B: ResourceExt>(a: &A, b: &B) -> bool {
    a.namespace() == b.namespace() && a.name_any() == b.name_any()
}

fn conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

async fn pass(client: &Client, scheduler: &str) -> Result<()> {
    let all = ListParams::default();
    let nodes = Api::<Node>::all(client.clone()).list(&all).await.context("listing nodes")?.items;
    let deployments = Api::<Deployment>::all(client.clone()).list(&all).await.context("listing deployments")?;
    let stateful_sets = Api::<StatefulSet>::all(client.clone()).list(&all).await.context("listing statefulsets")?;
    let replica_sets = Api::<ReplicaSet>::all(client.clone()).list(&all).await.context("listing replicasets")?;
    let revisions =
        Api::<ControllerRevision>::all(client.clone()).list(&all).await.context("listing controllerrevisions")?;
    let pods = Api::<Pod>::all(client.clone()).list(&all).await.context("listing pods")?.items;

    let mut workloads = Vec::new();
    let mut rollouts = Vec::new();
    for deployment in &deployments {
        let Some(desired) = new_replica_set(deployment) else { continue };
        let (deployment, replica_set, created) = match replica_sets.iter().find(|rs| same(*rs, &desired)) {
            Some(existing) => (deployment.clone(), existing.clone(), false),
            None => {
                let (deployment, replica_set) = create_replica_set(client, deployment, &desired).await?;
                (deployment, replica_set, true)
            }
        };
        workloads.extend(Workload::of_replica_set(&deployment, &replica_set));
        rollouts.push((deployment, replica_set, created));
    }
    let mut sets = Vec::new();
    for set in &stateful_sets {
        let Some(desired) = controller_revision(set) else { continue };
        if !revisions.iter().any(|r| same(r, &desired)) {
            let api: Api<ControllerRevision> = Api::namespaced(client.clone(), &set.namespace().unwrap_or_default());
            api.create(&PostParams::default(), &desired)
                .await
                .with_context(|| format!("creating controllerrevision {}", desired.name_any()))?;
        }
        workloads.extend(Workload::of_stateful_set(set, &desired.name_any()));
        sets.push((set, desired.name_any()));
    }
    for (workload, pod) in missing_pods(&workloads, &nodes, &pods) {
        create_pod(client, workload, &pod, scheduler).await?;
    }

    // statuses in whole seconds, as they read back
    let now = Timestamp::from_second(Timestamp::now().as_second())?;
    for (deployment, mut replica_set, created) in rollouts {
        let namespace = deployment.namespace().unwrap_or_default();
        let status = replica_set_status(&replica_set, &pods, now);
        if replica_set.status.as_ref() != Some(&status) {
            replica_set.status = Some(status);
            let api: Api<ReplicaSet> = Api::namespaced(client.clone(), &namespace);
            replica_set = api.replace_status(&replica_set.name_any(), &PostParams::default(), &replica_set).await?;
        }
        let status = deployment_status(&deployment, &replica_set, created, now);
        if deployment.status.as_ref() != Some(&status) {
            let mut updated = deployment.clone();
            updated.status = Some(status);
            let api: Api<Deployment> = Api::namespaced(client.clone(), &namespace);
            match api.replace_status(&deployment.name_any(), &PostParams::default(), &updated).await {
                Err(error) if !conflict(&error) => return Err(error.into()),
                _ => {} // written, or changed meanwhile: the next pass sees it
            }
        }
    }
    for (set, revision) in sets {
        let status = stateful_set_status(set, &revision, &pods, now);
        if set.status.as_ref() != Some(&status) {
            let mut updated = set.clone();
            updated.status = Some(status);
            let api: Api<StatefulSet> = Api::namespaced(client.clone(), &set.namespace().unwrap_or_default());
            match api.replace_status(&set.name_any(), &PostParams::default(), &updated).await {
                Err(error) if !conflict(&error) => return Err(error.into()),
                _ => {}
            }
        }
    }

    for service in Api::<Service>::all(client.clone()).list(&all).await.context("listing services")? {
        let Some(desired) = desired_slice(&service, &pods) else { continue };
        let api: Api<EndpointSlice> =
            Api::namespaced(client.clone(), desired.metadata.namespace.as_deref().unwrap_or("default"));
        let name = desired.name_any();
        match api.get_opt(&name).await? {
            None => {
                api.create(&PostParams::default(), &desired).await?;
            }
            Some(existing) if slice_matches(&existing, &desired) => {}
            Some(existing) => {
                // an UPDATE, as the real controller's: the admission webhook reviews it
                let mut replacement = desired;
                replacement.metadata.resource_version = existing.metadata.resource_version;
                api.replace(&name, &PostParams::default(), &replacement).await?;
            }
        }
    }
    Ok(())
}

/// The deployment controller's first step for a template: its ReplicaSet, the
/// `ScalingReplicaSet` Event, the revision on the Deployment (returned as written).
async fn create_replica_set(
    client: &Client,
    deployment: &Deployment,
    desired: &ReplicaSet,
) -> Result<(Deployment, ReplicaSet)> {
    let namespace = deployment.namespace().unwrap_or_default();
    let created = Api::<ReplicaSet>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), desired)
        .await
        .with_context(|| format!("creating replicaset {}", desired.name_any()))?;
    let replicas = created.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    if replicas > 0 {
        let message = format!("Scaled up replica set {} from 0 to {replicas}", created.name_any());
        let event = events::legacy_event(
            &events::DEPLOYMENT_CONTROLLER,
            events::reference(deployment),
            "Normal",
            "ScalingReplicaSet",
            message,
            Timestamp::now(),
        );
        events::record(client, event).await;
    }
    let revision = json!({"metadata": {"annotations": {REVISION_ANNOTATION: "1"}}});
    let annotated = Api::<Deployment>::namespaced(client.clone(), &namespace)
        .patch(&deployment.name_any(), &PatchParams::default(), &Patch::Merge(&revision))
        .await
        .with_context(|| format!("annotating deployment {}", deployment.name_any()))?;
    Ok((annotated, created))
}

/// Creates `pod` for `workload` as its controller and the scheduler would: the
/// controller's `SuccessfulCreate`, the scheduler's `Scheduled`, then the bound status
/// (unless the kubelet has run the pod meanwhile).
async fn create_pod(client: &Client, workload: &Workload, pod: &Pod, scheduler: &str) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &workload.namespace);
    let mut created =
        api.create(&PostParams::default(), pod).await.with_context(|| format!("creating pod {}", pod.name_any()))?;
    let (source, reason, message) = workload.created_event(&created.name_any());
    let event =
        events::legacy_event(&source, workload.owner_object.clone(), "Normal", reason, message, Timestamp::now());
    events::record(client, event).await;
    let node = created.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
    events::record_new(client, events::scheduled(&created, &node, scheduler, Timestamp::now())).await;
    created.status = Some(bound_status(&created, Timestamp::from_second(Timestamp::now().as_second())?));
    match api.replace_status(&created.name_any(), &PostParams::default(), &created).await {
        Err(error) if !conflict(&error) => Err(error).with_context(|| format!("binding pod {}", pod.name_any())),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, unit: &str) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"zone1": unit}}})).expect("node")
    }

    fn workload(name: &str, replicas: usize, unit: &str) -> Workload {
        Workload {
            namespace: "default".into(),
            name: name.into(),
            owner: OwnerReference {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: format!("{name}-hash"),
                uid: format!("uid-{name}"),
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
            owner_object: ObjectReference { kind: Some("ReplicaSet".into()), ..Default::default() },
            maker: Maker::ReplicaSet,
            pods: vec![
                serde_json::from_value(json!({
                    "metadata": {"labels": {"app": "echo"}},
                    "spec": {"nodeSelector": {"zone1": unit}, "containers": [{"name": "c", "image": "i"}]}
                }))
                .expect("template");
                replicas
            ],
            ordered: false,
        }
    }

    fn pod(name: &str, node: &str, ip: Option<&str>, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "labels": {"app": "echo"}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
            "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        }))
        .expect("pod")
    }

    fn placed(pods: &[(&Workload, Pod)]) -> Vec<(String, String)> {
        pods.iter()
            .map(|(_, p)| (p.name_any(), p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default()))
            .collect()
    }

    fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
        expected.iter().map(|(p, n)| (p.to_string(), n.to_string())).collect()
    }

    #[test]
    fn pods_go_to_the_units_nodes_in_turn_and_existing_ones_are_kept() {
        let nodes = [node("b-1", "b"), node("a-1", "a"), node("a-0", "a")];
        let workloads = [workload("echo-a", 3, "a"), workload("echo-b", 1, "b"), workload("echo-c", 2, "c")];
        let existing = [pod("echo-a-1", "a-1", None, false)];
        let missing = missing_pods(&workloads, &nodes, &existing);
        assert_eq!(placed(&missing), pairs(&[("echo-a-0", "a-0"), ("echo-a-2", "a-0"), ("echo-b-0", "b-1")]));
        let (for_workload, created) = &missing[0];
        assert_eq!(for_workload.name, "echo-a");
        let tolerations = created.spec.as_ref().and_then(|s| s.tolerations.clone()).unwrap_or_default();
        let keys: Vec<_> =
            tolerations.iter().map(|t| (t.key.clone().unwrap_or_default(), t.toleration_seconds)).collect();
        assert_eq!(
            keys,
            [
                ("node.kubernetes.io/not-ready".to_string(), Some(300)),
                ("node.kubernetes.io/unreachable".into(), Some(300))
            ]
        );
        assert_eq!(created.labels().get("app").map(String::as_str), Some("echo"));
        assert_eq!(created.owner_references(), [workloads[0].owner.clone()], "the controller owns its pods");
    }

    /// A StatefulSet's pods come one at a time: the next only once the one before runs
    /// and is ready.
    #[test]
    fn an_ordered_workload_waits_for_each_pod_to_run_ready() {
        let nodes = [node("a-0", "a"), node("a-1", "a")];
        let mut set = workload("cache-a", 3, "a");
        set.ordered = true;
        let workloads = [set];
        assert_eq!(placed(&missing_pods(&workloads, &nodes, &[])), pairs(&[("cache-a-0", "a-0")]));
        let mut first = pod("cache-a-0", "a-0", Some("10.0.0.1"), false);
        assert_eq!(placed(&missing_pods(&workloads, &nodes, std::slice::from_ref(&first))), pairs(&[]));
        first.status.as_mut().expect("status").phase = Some("Running".into());
        assert_eq!(
            placed(&missing_pods(&workloads, &nodes, std::slice::from_ref(&first))),
            pairs(&[]),
            "not ready yet"
        );
        first.status.as_mut().expect("status").conditions.as_mut().expect("conditions")[0].status = "True".into();
        assert_eq!(placed(&missing_pods(&workloads, &nodes, &[first])), pairs(&[("cache-a-1", "a-1")]));
    }

    #[test]
    fn each_controller_records_its_own_successful_create() {
        let replica_set = workload("echo-unit-a", 1, "a");
        assert_eq!(
            replica_set.created_event("echo-unit-a-0"),
            (events::REPLICASET_CONTROLLER, "SuccessfulCreate", "Created pod: echo-unit-a-0".to_string())
        );
        let stateful_set = Workload { maker: Maker::StatefulSet, name: "cache-unit-b".into(), ..replica_set };
        assert_eq!(
            stateful_set.created_event("cache-unit-b-0"),
            (
                events::STATEFULSET_CONTROLLER,
                "SuccessfulCreate",
                "create Pod cache-unit-b-0 in StatefulSet cache-unit-b successful".to_string()
            )
        );
    }

    #[test]
    fn a_workload_is_settled_when_its_current_status_says_every_replica_is_ready() {
        let deployment = |generation: i64, status: serde_json::Value| -> Deployment {
            serde_json::from_value(
                json!({"metadata": {"name": "echo-unit-a", "namespace": "default", "generation": generation},
                "spec": {"replicas": 2, "selector": {}, "template": {}}, "status": status}),
            )
            .expect("deployment")
        };
        let set: StatefulSet =
            serde_json::from_value(json!({"metadata": {"name": "cache-unit-b", "namespace": "default",
                "generation": 1}, "spec": {"replicas": 3, "selector": {}, "template": {}},
            "status": {"replicas": 2, "readyReplicas": 2, "observedGeneration": 1}}))
            .expect("statefulset");
        let ready = deployment(1, json!({"readyReplicas": 2, "observedGeneration": 1}));
        assert_eq!(unsettled(std::slice::from_ref(&ready), &[]), Vec::<String>::new());
        let stale = deployment(2, json!({"readyReplicas": 2, "observedGeneration": 1}));
        let fresh = deployment(1, json!(null));
        assert_eq!(
            unsettled(&[stale, fresh], &[set]),
            [
                "Deployment default/echo-unit-a: 0/2 ready",
                "Deployment default/echo-unit-a: 0/2 ready",
                "StatefulSet default/cache-unit-b: 2/3 ready"
            ]
        );
    }

    #[test]
    fn a_bound_pod_is_pending_scheduled_and_of_its_qos_class() {
        let with = |resources: serde_json::Value| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c", "image": "i", "resources": resources}]}}))
            .expect("pod")
        };
        let at = Timestamp::from_second(1_767_225_600).expect("time");
        assert_eq!(
            serde_json::to_value(bound_status(&with(json!({})), at)).expect("json"),
            json!({"phase": "Pending", "qosClass": "BestEffort", "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
        );
        let qos = |resources| qos_class(with(resources).spec.as_ref().expect("spec"));
        assert_eq!(qos(json!({"requests": {"memory": "1Gi"}})), "Burstable");
        assert_eq!(qos(json!({"limits": {"memory": "1Gi", "cpu": "1"}})), "Guaranteed");
        assert_eq!(qos(json!({"limits": {"memory": "1Gi", "cpu": "1"}, "requests": {"cpu": "500m"}})), "Burstable");
    }

    #[test]
    fn a_slice_lists_the_selected_pods_with_an_ip_ready_as_they_are() {
        let service: Service = serde_json::from_value(json!({
            "metadata": {"name": "echo-svc", "namespace": "default", "uid": "uid-echo-svc"},
            "spec": {"selector": {"app": "echo"}, "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]}
        }))
        .expect("service");
        let mut other = pod("other-0", "a-0", Some("10.0.0.9"), true);
        other.metadata.labels = Some(BTreeMap::from([("app".into(), "web".into())]));
        let pods = [
            pod("echo-1", "a-1", Some("10.0.0.2"), false),
            pod("echo-0", "a-0", Some("10.0.0.1"), true),
            pod("echo-2", "a-0", None, true),
            other,
        ];
        let slice = serde_json::to_value(desired_slice(&service, &pods).expect("a slice")).expect("json");
        let endpoint = |name: &str, ip: &str, node: &str, ready: bool| {
            json!({"addresses": [ip], "conditions": {"ready": ready, "serving": ready, "terminating": false},
                "nodeName": node, "targetRef": {"kind": "Pod", "namespace": "default", "name": name, "uid": format!("uid-{name}")}})
        };
        assert_eq!(
            slice,
            json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "echo-svc-sim", "namespace": "default", "labels": {
                    "kubernetes.io/service-name": "echo-svc",
                    "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"},
                    // the Service's deletion takes its slices with it (the garbage collector)
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "echo-svc",
                        "uid": "uid-echo-svc", "controller": true, "blockOwnerDeletion": true}]},
                "addressType": "IPv4",
                "endpoints": [endpoint("echo-0", "10.0.0.1", "a-0", true), endpoint("echo-1", "10.0.0.2", "a-1", false)],
                "ports": [{"port": 8080, "protocol": "TCP"}]
            })
        );
        let headless: Service =
            serde_json::from_value(json!({"metadata": {"name": "x", "namespace": "default"}, "spec": {}}))
                .expect("service");
        assert_eq!(desired_slice(&headless, &pods), None);
    }
}
