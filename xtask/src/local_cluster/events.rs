//! The Events the local cluster's stand-ins record, shaped as the components they stand in
//! for record them, so `kubectl get events` and `kubectl describe` read as on a real
//! cluster. The kubelet and kube-controller-manager's controllers record through
//! client-go's legacy recorder: a `v1` Event named `<object>.<unix nanos in hex>` in the
//! object's namespace (`default` for a Node), with `source`, `firstTimestamp` =
//! `lastTimestamp`, `count` 1, `reportingComponent` = the source component and
//! `reportingInstance` = its host. The scheduler records through the `events.k8s.io/v1`
//! recorder: `eventTime`, `action`, `reportingController` and
//! `reportingInstance` = `<controller>-<hostname>`, no `source` and no timestamps of the old
//! API. Building is pure; [`record`] and [`record_new`] only write, and never fail the
//! stand-in that records (a lost Event is logged, as client-go drops one).

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::api::events::v1::Event as NewEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::{Client, Resource, ResourceExt};

/// The component an Event comes from (`source.component`) and where it runs
/// (`source.host`: a kubelet's node; none for the controller manager's controllers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    pub component: &'static str,
    pub host: Option<String>,
}

impl Source {
    pub fn kubelet(node: &str) -> Self {
        Self { component: "kubelet", host: Some(node.to_string()) }
    }

    pub const fn controller(component: &'static str) -> Self {
        Self { component, host: None }
    }
}

pub const DEPLOYMENT_CONTROLLER: Source = Source::controller("deployment-controller");
pub const REPLICASET_CONTROLLER: Source = Source::controller("replicaset-controller");
pub const STATEFULSET_CONTROLLER: Source = Source::controller("statefulset-controller");
pub const SCHEDULER: &str = "default-scheduler";

/// What client-go's `ref.GetReference` makes of `object`: kind, apiVersion, namespace,
/// name, uid and the resourceVersion it was seen at.
pub fn reference<K: Resource<DynamicType = ()>>(object: &K) -> ObjectReference {
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        namespace: object.namespace(),
        name: Some(object.name_any()),
        uid: object.meta().uid.clone(),
        resource_version: object.meta().resource_version.clone(),
        field_path: None,
    }
}

/// The reference the kubelet records its node's Events against: no apiVersion, and the
/// node's name as its uid (`kubelet.go`'s `nodeRef`).
pub fn kubelet_node_reference(node: &str) -> ObjectReference {
    ObjectReference { kind: Some("Node".into()), name: Some(node.into()), uid: Some(node.into()), ..Default::default() }
}

/// The reference the kubelet records a container's Events against: the pod's, with
/// `fieldPath: spec.containers{<name>}`.
pub fn container_reference(pod: &k8s_openapi::api::core::v1::Pod, container: &str) -> ObjectReference {
    ObjectReference { field_path: Some(format!("spec.containers{{{container}}}")), ..reference(pod) }
}

/// `<name>.<unix nanoseconds in hex>`, as both recorders name their Events.
fn event_name(involved: &str, at: Timestamp) -> String {
    format!("{involved}.{:x}", at.as_nanosecond())
}

/// A `v1` Event as client-go's legacy recorder makes it (`makeEvent` in
/// `tools/record/event.go`).
pub fn legacy_event(
    source: &Source,
    involved: ObjectReference,
    type_: &str,
    reason: &str,
    message: String,
    at: Timestamp,
) -> Event {
    let name = involved.name.clone().unwrap_or_default();
    let namespace = involved.namespace.clone().filter(|ns| !ns.is_empty()).unwrap_or_else(|| "default".into());
    Event {
        metadata: ObjectMeta { name: Some(event_name(&name, at)), namespace: Some(namespace), ..Default::default() },
        involved_object: involved,
        reason: Some(reason.into()),
        message: Some(message),
        first_timestamp: Some(Time(at)),
        last_timestamp: Some(Time(at)),
        count: Some(1),
        type_: Some(type_.into()),
        source: Some(EventSource { component: Some(source.component.into()), host: source.host.clone() }),
        reporting_component: Some(source.component.into()),
        reporting_instance: Some(source.host.clone().unwrap_or_default()),
        ..Default::default()
    }
}

/// An `events.k8s.io/v1` Event as client-go's `tools/events` recorder makes it.
pub fn new_api_event(
    controller: &str,
    instance: &str,
    regarding: ObjectReference,
    reason: &str,
    action: &str,
    note: String,
    at: Timestamp,
) -> NewEvent {
    let name = regarding.name.clone().unwrap_or_default();
    let namespace = regarding.namespace.clone().filter(|ns| !ns.is_empty()).unwrap_or_else(|| "default".into());
    NewEvent {
        metadata: ObjectMeta { name: Some(event_name(&name, at)), namespace: Some(namespace), ..Default::default() },
        event_time: Some(MicroTime(at)),
        regarding: Some(regarding),
        reason: Some(reason.into()),
        action: Some(action.into()),
        note: Some(note),
        type_: Some("Normal".into()),
        reporting_controller: Some(controller.into()),
        reporting_instance: Some(instance.into()),
        ..Default::default()
    }
}

/// The scheduler's `Scheduled` Event for `pod`, bound to `node`.
pub fn scheduled(pod: &k8s_openapi::api::core::v1::Pod, node: &str, instance: &str, at: Timestamp) -> NewEvent {
    let note = format!("Successfully assigned {}/{} to {node}", pod.namespace().unwrap_or_default(), pod.name_any());
    new_api_event(SCHEDULER, instance, reference(pod), "Scheduled", "Binding", note, at)
}

/// `<controller>-<hostname>`: the reporting instance of an `events.k8s.io/v1` recorder.
pub fn instance_of(controller: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{controller}-{}", host.trim())
}

/// Writes a `v1` Event; a failure is logged, not returned.
pub async fn record(client: &Client, event: Event) {
    let namespace = event.metadata.namespace.clone().unwrap_or_default();
    let reason = event.reason.clone().unwrap_or_default();
    if let Err(error) =
        Api::<Event>::namespaced(client.clone(), &namespace).create(&PostParams::default(), &event).await
    {
        tracing::warn!(%reason, error = format!("{error:#}"), "recording an Event");
    }
}

/// Writes an `events.k8s.io/v1` Event; a failure is logged, not returned.
pub async fn record_new(client: &Client, event: NewEvent) {
    let namespace = event.metadata.namespace.clone().unwrap_or_default();
    let reason = event.reason.clone().unwrap_or_default();
    if let Err(error) =
        Api::<NewEvent>::namespaced(client.clone(), &namespace).create(&PostParams::default(), &event).await
    {
        tracing::warn!(%reason, error = format!("{error:#}"), "recording an Event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn at() -> Timestamp {
        "2026-01-01T00:00:00.000000123Z".parse().expect("time")
    }

    fn pod() -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "echo-unit-a-0", "namespace": "default",
            "uid": "u-1", "resourceVersion": "42"}}))
        .expect("pod")
    }

    #[test]
    fn a_kubelet_event_is_the_legacy_recorders_with_the_node_as_source_host() {
        let event = legacy_event(
            &Source::kubelet("edge-a-0"),
            container_reference(&pod(), "echo"),
            "Normal",
            "Started",
            "Started container echo".into(),
            at(),
        );
        assert_eq!(
            serde_json::to_value(&event).expect("json"),
            json!({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": format!("echo-unit-a-0.{:x}", 1_767_225_600_000_000_123i64), "namespace": "default"},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": "default", "name": "echo-unit-a-0",
                    "uid": "u-1", "resourceVersion": "42", "fieldPath": "spec.containers{echo}"},
                "reason": "Started", "message": "Started container echo", "type": "Normal",
                "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z", "count": 1,
                "source": {"component": "kubelet", "host": "edge-a-0"},
                "reportingComponent": "kubelet", "reportingInstance": "edge-a-0"
            })
        );
    }

    #[test]
    fn a_node_event_lives_in_default_and_names_the_node_as_its_uid() {
        let event = legacy_event(
            &Source::kubelet("edge-b-1"),
            kubelet_node_reference("edge-b-1"),
            "Normal",
            "NodeReady",
            "Node edge-b-1 status is now: NodeReady".into(),
            at(),
        );
        assert_eq!(event.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(
            serde_json::to_value(&event.involved_object).expect("json"),
            json!({"kind": "Node", "name": "edge-b-1", "uid": "edge-b-1"})
        );
        let controller = legacy_event(
            &DEPLOYMENT_CONTROLLER,
            kubelet_node_reference("x"),
            "Normal",
            "ScalingReplicaSet",
            String::new(),
            at(),
        );
        assert_eq!(
            (controller.source, controller.reporting_component, controller.reporting_instance),
            (
                Some(EventSource { component: Some("deployment-controller".into()), host: None }),
                Some("deployment-controller".into()),
                Some(String::new())
            )
        );
    }

    #[test]
    fn the_schedulers_event_is_an_events_api_binding() {
        let event = scheduled(&pod(), "edge-a-0", "default-scheduler-vm", at());
        let value = serde_json::to_value(&event).expect("json");
        assert_eq!(
            value,
            json!({
                "apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": format!("echo-unit-a-0.{:x}", 1_767_225_600_000_000_123i64), "namespace": "default"},
                "eventTime": "2026-01-01T00:00:00.000000Z",
                "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": "default", "name": "echo-unit-a-0",
                    "uid": "u-1", "resourceVersion": "42"},
                "reason": "Scheduled", "action": "Binding", "type": "Normal",
                "note": "Successfully assigned default/echo-unit-a-0 to edge-a-0",
                "reportingController": "default-scheduler", "reportingInstance": "default-scheduler-vm"
            })
        );
    }
}
