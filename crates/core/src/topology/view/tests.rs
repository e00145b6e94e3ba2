//! The incremental view: exact change sets for each kind of input, and the property that
//! incremental results equal a diff of full rebuilds on random change sequences.

use std::collections::BTreeMap;

use proptest::prelude::*;

use k8s_openapi::api::core::v1::Endpoints;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::*;
use crate::keys;
use crate::topology::fixtures::*;
use crate::topology::local_endpoint::LocalEndpoint;
use crate::topology::prune::Labels;
use crate::topology::{PolicyError, ViewChangeKind::*};

fn node(name: &str, pairs: &[(&str, &str)]) -> InputChange {
    InputChange::NodeUpserted { name: name.into(), labels: labels(pairs) }
}

fn changed(view: &mut PrunedView, change: InputChange) -> Vec<(ObjectKey, ViewChangeKind)> {
    view.apply(change).expect("valid input").into_iter().map(|c| (c.key, c.kind)).collect()
}

fn pruned_slice_ips(view: &PrunedView, namespace: &str, name: &str) -> Vec<String> {
    match view.pruned(&ObjectKey::slice(namespace, name)) {
        Some(PrunedObject::Slice(s)) => slice_ips(&s),
        other => panic!("expected slice {namespace}/{name}, got {other:?}"),
    }
}

/// Local node n1 in unit a; web (unit policy) has slices on n1/n3 and n4; api (unit
/// policy) a slice on n2; plain (no policy) a slice on n3.
fn populated() -> PrunedView {
    let mut view = PrunedView::new("n1", false);
    for change in [
        node("n1", &[("unit", "a")]),
        node("n2", &[("unit", "a")]),
        node("n3", &[("unit", "b")]),
        node("n4", &[("unit", "b")]),
        InputChange::ServiceUpserted(service("ns", "web", any_keys(r#"["unit"]"#))),
        InputChange::ServiceUpserted(service("ns", "api", any_keys(r#"["unit"]"#))),
        InputChange::ServiceUpserted(service("ns", "plain", Vec::<(&str, &str)>::new())),
        InputChange::SliceUpserted(slice(
            "ns",
            "web-1",
            Some("web"),
            &[ep("10.244.0.1", "n1"), ep("10.244.0.3", "n3")],
        )),
        InputChange::SliceUpserted(slice("ns", "web-2", Some("web"), &[ep("10.244.0.4", "n4")])),
        InputChange::SliceUpserted(slice("ns", "api-1", Some("api"), &[ep("10.244.0.2", "n2")])),
        InputChange::SliceUpserted(slice("ns", "plain-1", Some("plain"), &[ep("10.244.0.5", "n3")])),
        InputChange::EndpointsUpserted(endpoints(
            "ns",
            "web",
            &[(&[ep("10.244.0.1", "n1"), ep("10.244.0.3", "n3")], &[])],
        )),
    ] {
        view.apply(change).expect("valid fixture");
    }
    view
}

#[test]
fn indexes_answer_by_node_and_by_service() {
    let mut view = populated();
    assert_eq!(
        view.objects_on_node("n3"),
        vec![ObjectKey::slice("ns", "plain-1"), ObjectKey::slice("ns", "web-1"), ObjectKey::endpoints("ns", "web")]
    );
    assert_eq!(view.objects_on_node("n9"), Vec::<ObjectKey>::new());
    assert_eq!(view.slices_of_service(&NamespacedName::new("ns", "web")), ["web-1", "web-2"]);
    // a slice moving to another node and another Service moves in both indexes
    view.apply(InputChange::SliceUpserted(slice("ns", "web-1", Some("api"), &[ep("10.244.0.7", "n4")]))).unwrap();
    assert_eq!(view.objects_on_node("n3"), vec![ObjectKey::slice("ns", "plain-1"), ObjectKey::endpoints("ns", "web")]);
    assert_eq!(view.objects_on_node("n1"), vec![ObjectKey::endpoints("ns", "web")]);
    assert_eq!(view.slices_of_service(&NamespacedName::new("ns", "web")), ["web-2"]);
    assert_eq!(view.slices_of_service(&NamespacedName::new("ns", "api")), ["api-1", "web-1"]);
    view.apply(InputChange::SliceDeleted(NamespacedName::new("ns", "web-2"))).unwrap();
    assert_eq!(view.slices_of_service(&NamespacedName::new("ns", "web")), Vec::<String>::new());
    assert_eq!(view.objects_on_node("n4"), vec![ObjectKey::slice("ns", "web-1")]);
}

#[test]
fn remote_node_label_change_reprunes_only_its_objects() {
    let mut view = populated();
    assert_eq!(pruned_slice_ips(&view, "ns", "web-1"), vec!["10.244.0.1"]);
    assert_eq!(
        changed(&mut view, node("n3", &[("unit", "a")])),
        vec![(ObjectKey::slice("ns", "web-1"), Modified), (ObjectKey::endpoints("ns", "web"), Modified)],
        "plain-1 also runs on n3 but has no policy, so its pruned form is unchanged"
    );
    assert_eq!(pruned_slice_ips(&view, "ns", "web-1"), vec!["10.244.0.1", "10.244.0.3"]);
    // a label the policy does not read: nothing to tell anyone
    assert_eq!(changed(&mut view, node("n3", &[("unit", "a"), ("rack", "r9")])), vec![]);
    // the same labels again (informer resync): nothing
    assert_eq!(changed(&mut view, node("n3", &[("unit", "a"), ("rack", "r9")])), vec![]);
}

#[test]
fn local_node_change_reprunes_every_topology_aware_object() {
    let mut view = populated();
    assert_eq!(
        changed(&mut view, node("n1", &[("unit", "b")])),
        vec![
            (ObjectKey::slice("ns", "api-1"), Modified),
            (ObjectKey::slice("ns", "web-1"), Modified),
            (ObjectKey::slice("ns", "web-2"), Modified),
            (ObjectKey::endpoints("ns", "web"), Modified),
        ]
    );
    assert_eq!(pruned_slice_ips(&view, "ns", "web-1"), vec!["10.244.0.1", "10.244.0.3"]);
    assert_eq!(pruned_slice_ips(&view, "ns", "web-2"), vec!["10.244.0.4"]);
    assert_eq!(pruned_slice_ips(&view, "ns", "api-1"), Vec::<String>::new());
    // losing the local node: every topology-aware object prunes to nothing
    assert_eq!(
        changed(&mut view, InputChange::NodeDeleted("n1".into())),
        vec![
            (ObjectKey::slice("ns", "web-1"), Modified),
            (ObjectKey::slice("ns", "web-2"), Modified),
            (ObjectKey::endpoints("ns", "web"), Modified),
        ]
    );
    assert!(!view.knows_local_node());
}

#[test]
fn service_policy_change_reprunes_that_service_only() {
    let mut view = populated();
    assert_eq!(
        changed(&mut view, InputChange::ServiceUpserted(service("ns", "web", Vec::<(&str, &str)>::new()))),
        vec![
            (ObjectKey::slice("ns", "web-1"), Modified),
            (ObjectKey::slice("ns", "web-2"), Modified),
            (ObjectKey::endpoints("ns", "web"), Modified),
        ]
    );
    assert_eq!(pruned_slice_ips(&view, "ns", "web-2"), vec!["10.244.0.4"]);
    // a Service update that leaves the policy alone (e.g. a port change): nothing
    let mut unchanged = service("ns", "api", any_keys(r#"["unit"]"#));
    unchanged.metadata.labels = Some(labels(&[("team", "x")]));
    assert_eq!(changed(&mut view, InputChange::ServiceUpserted(unchanged)), vec![]);
    // deleting a Service makes its objects dangling: passed through, as SuperEdge did;
    // api-1's only endpoint is in the local unit, so its pruned form does not change
    assert_eq!(changed(&mut view, InputChange::ServiceDeleted(NamespacedName::new("ns", "api"))), vec![]);
    assert_eq!(pruned_slice_ips(&view, "ns", "api-1"), vec!["10.244.0.2"]);
    view.apply(InputChange::ServiceUpserted(service("ns", "web", any_keys(r#"["unit"]"#)))).unwrap();
    assert_eq!(pruned_slice_ips(&view, "ns", "web-2"), Vec::<String>::new());
    assert_eq!(
        changed(&mut view, InputChange::ServiceDeleted(NamespacedName::new("ns", "web"))),
        vec![
            (ObjectKey::slice("ns", "web-1"), Modified),
            (ObjectKey::slice("ns", "web-2"), Modified),
            (ObjectKey::endpoints("ns", "web"), Modified),
        ]
    );
    assert_eq!(pruned_slice_ips(&view, "ns", "web-2"), vec!["10.244.0.4"]);
}

#[test]
fn slices_map_to_services_by_label_never_by_name() {
    // SuperEdge defect: it looked the Service up by the slice's name.
    let mut view = populated();
    assert_eq!(
        changed(&mut view, InputChange::SliceUpserted(slice("ns", "plain", Some("web"), &[ep("10.244.0.9", "n4")]))),
        vec![(ObjectKey::slice("ns", "plain"), Added)]
    );
    assert_eq!(pruned_slice_ips(&view, "ns", "plain"), Vec::<String>::new(), "governed by web's policy");
    // relabelled to another Service: now passes through under plain's (empty) policy
    assert_eq!(
        changed(&mut view, InputChange::SliceUpserted(slice("ns", "plain", Some("plain"), &[ep("10.244.0.9", "n4")]))),
        vec![(ObjectKey::slice("ns", "plain"), Modified)]
    );
    assert_eq!(pruned_slice_ips(&view, "ns", "plain"), vec!["10.244.0.9"]);
    // and web's policy change no longer touches it
    assert_eq!(
        changed(&mut view, InputChange::ServiceUpserted(service("ns", "web", any_keys(r#"["zone"]"#)))),
        vec![(ObjectKey::slice("ns", "web-1"), Modified), (ObjectKey::endpoints("ns", "web"), Modified)],
    );
}

#[test]
fn object_lifecycle_changes() {
    let mut view = populated();
    let web1 = slice("ns", "web-1", Some("web"), &[ep("10.244.0.1", "n1"), ep("10.244.0.3", "n3")]);
    assert_eq!(changed(&mut view, InputChange::SliceUpserted(web1.clone())), vec![], "identical resync");
    let mut rewritten = web1.clone();
    rewritten.metadata.resource_version = Some("42".into());
    rewritten.metadata.generation = Some(7);
    rewritten.metadata.annotations = Some(
        [("endpoints.kubernetes.io/last-change-trigger-time".to_string(), "2026-11-22T00:00:00Z".to_string())].into(),
    );
    assert_eq!(
        changed(&mut view, InputChange::SliceUpserted(rewritten)),
        vec![],
        "a new upstream version differing only in volatile metadata is the same pruned form"
    );
    // n3 is in unit b: its endpoint of web-1 is pruned away here, so its change is invisible
    let remote_change = slice("ns", "web-1", Some("web"), &[ep("10.244.0.1", "n1"), ep("10.244.9.9", "n3")]);
    assert_eq!(changed(&mut view, InputChange::SliceUpserted(remote_change)), vec![]);
    let mut labelled = web1.clone();
    labelled.metadata.labels.get_or_insert_default().insert("team".into(), "x".into());
    let got = view.apply(InputChange::SliceUpserted(labelled.clone())).expect("valid input");
    let mut want = labelled;
    want.endpoints.truncate(1);
    assert_eq!(
        got,
        vec![ViewChange {
            key: ObjectKey::slice("ns", "web-1"),
            kind: Modified,
            object: Some(PrunedObject::Slice(want))
        }],
        "a change carries the new pruned object"
    );
    assert_eq!(
        changed(&mut view, InputChange::SliceDeleted(NamespacedName::new("ns", "web-1"))),
        vec![(ObjectKey::slice("ns", "web-1"), Deleted)]
    );
    assert_eq!(changed(&mut view, InputChange::SliceDeleted(NamespacedName::new("ns", "web-1"))), vec![]);
    assert_eq!(view.pruned(&ObjectKey::slice("ns", "web-1")), None);
    // n3 no longer carries any web slice endpoint: only the Endpoints object reacts
    assert_eq!(changed(&mut view, node("n3", &[("unit", "a")])), vec![(ObjectKey::endpoints("ns", "web"), Modified)]);
    assert_eq!(
        changed(&mut view, InputChange::EndpointsDeleted(NamespacedName::new("ns", "web"))),
        vec![(ObjectKey::endpoints("ns", "web"), Deleted)]
    );
    assert_eq!(changed(&mut view, node("n3", &[("unit", "b")])), vec![]);
}

/// The apiserver's slice carries no annotation (its reconciler keeps none there): it is
/// rewritten from the Endpoints `default/kubernetes`'s announcement, and re-served each
/// time that announcement is added, changed or removed, though the slice itself did not
/// change upstream.
#[test]
fn apiserver_slices_follow_the_endpoints_announcement() {
    let id = || NamespacedName::new(keys::KUBERNETES_SERVICE_NAMESPACE, keys::KUBERNETES_SERVICE_NAME);
    let slice_key = ObjectKey::slice(keys::KUBERNETES_SERVICE_NAMESPACE, keys::KUBERNETES_SERVICE_NAME);
    let endpoints_key = ObjectKey::endpoints(keys::KUBERNETES_SERVICE_NAMESPACE, keys::KUBERNETES_SERVICE_NAME);
    let apiserver_slice = slice(
        keys::KUBERNETES_SERVICE_NAMESPACE,
        keys::KUBERNETES_SERVICE_NAME,
        Some(keys::KUBERNETES_SERVICE_NAME),
        &[Ep { ip: "10.0.0.1", node: None, ready: Some(true) }],
    );
    let apiserver_endpoints = |ip: &str, announce: Option<(&str, &str)>| {
        let mut e = endpoints(
            keys::KUBERNETES_SERVICE_NAMESPACE,
            keys::KUBERNETES_SERVICE_NAME,
            &[(&[Ep { ip, node: None, ready: Some(true) }], &[])],
        );
        e.metadata.annotations = announce
            .map(|(ip, port)| labels(&[(keys::LOCAL_ENDPOINT_ANNOTATION, ip), (keys::LOCAL_PORT_ANNOTATION, port)]));
        e
    };
    let local = |ip: &str, port| LocalEndpoint { ip: ip.parse().unwrap(), port };
    let slice_change = |kind, object: EndpointSlice| ViewChange {
        key: slice_key.clone(),
        kind,
        object: Some(PrunedObject::Slice(object)),
    };
    let endpoints_change = |kind, object: Endpoints| ViewChange {
        key: endpoints_key.clone(),
        kind,
        object: Some(PrunedObject::Endpoints(object)),
    };

    let mut view = PrunedView::new("n1", true);
    view.apply(node("n1", &[("unit", "a")])).unwrap();
    assert_eq!(
        view.apply(InputChange::SliceUpserted(apiserver_slice.clone())).unwrap(),
        vec![slice_change(Added, apiserver_slice.clone())],
        "nothing announced yet: served as upstream"
    );

    // added
    let a = apiserver_endpoints("10.0.0.1", Some(("169.254.0.2", "51003")));
    assert_eq!(
        view.apply(InputChange::EndpointsUpserted(a.clone())).unwrap(),
        vec![
            slice_change(Modified, local("169.254.0.2", 51003).rewrite_slice(&apiserver_slice)),
            endpoints_change(Added, local("169.254.0.2", 51003).rewrite_endpoints(&a)),
        ]
    );
    // the apiserver's addresses change upstream, the announcement does not: nothing served changes
    let moved = apiserver_endpoints("10.0.0.9", Some(("169.254.0.2", "51003")));
    assert_eq!(view.apply(InputChange::EndpointsUpserted(moved)).unwrap(), vec![]);
    // changed
    let b = apiserver_endpoints("10.0.0.9", Some(("fe80::2", "6443")));
    assert_eq!(
        view.apply(InputChange::EndpointsUpserted(b.clone())).unwrap(),
        vec![
            slice_change(Modified, local("fe80::2", 6443).rewrite_slice(&apiserver_slice)),
            endpoints_change(Modified, local("fe80::2", 6443).rewrite_endpoints(&b)),
        ]
    );
    // removed
    let plain = apiserver_endpoints("10.0.0.9", None);
    assert_eq!(
        view.apply(InputChange::EndpointsUpserted(plain.clone())).unwrap(),
        vec![slice_change(Modified, apiserver_slice.clone()), endpoints_change(Modified, plain)]
    );
    // the Endpoints deleted while announcing: the slice goes back to its upstream form
    view.apply(InputChange::EndpointsUpserted(a.clone())).unwrap();
    assert_eq!(
        view.apply(InputChange::EndpointsDeleted(id())).unwrap(),
        vec![
            slice_change(Modified, apiserver_slice.clone()),
            ViewChange { key: endpoints_key.clone(), kind: Deleted, object: None },
        ]
    );
    // a slice announcing its own endpoint keeps it whatever the Endpoints announce
    let mut own = apiserver_slice.clone();
    own.metadata.annotations =
        Some(labels(&[(keys::LOCAL_ENDPOINT_ANNOTATION, "169.254.0.1"), (keys::LOCAL_PORT_ANNOTATION, "443")]));
    assert_eq!(
        view.apply(InputChange::SliceUpserted(own.clone())).unwrap(),
        vec![slice_change(Modified, local("169.254.0.1", 443).rewrite_slice(&own))]
    );
    assert_eq!(
        view.apply(InputChange::EndpointsUpserted(a.clone())).unwrap(),
        vec![endpoints_change(Added, local("169.254.0.2", 51003).rewrite_endpoints(&a))]
    );
    assert_eq!(
        view.full_rebuild().get(&slice_key),
        Some(&PrunedObject::Slice(local("169.254.0.1", 443).rewrite_slice(&own)))
    );

    // out of cluster: the announcement changes nothing but the Endpoints object itself
    let mut off = PrunedView::new("n1", false);
    off.apply(node("n1", &[("unit", "a")])).unwrap();
    off.apply(InputChange::SliceUpserted(apiserver_slice.clone())).unwrap();
    assert_eq!(off.apply(InputChange::EndpointsUpserted(a.clone())).unwrap(), vec![endpoints_change(Added, a)]);
    assert_eq!(off.apply(InputChange::EndpointsUpserted(b.clone())).unwrap(), vec![endpoints_change(Modified, b)]);
    assert_eq!(off.apply(InputChange::EndpointsDeleted(id())).unwrap().len(), 1);
    assert_eq!(off.pruned(&slice_key), Some(PrunedObject::Slice(apiserver_slice)));
}

#[test]
fn ordered_policy_reacts_to_readiness_in_other_slices() {
    let mut view = PrunedView::new("n1", false);
    for change in [
        node("n1", &[("unit", "a")]),
        node("n2", &[("unit", "a")]),
        node("n3", &[("unit", "b")]),
        InputChange::ServiceUpserted(service("ns", "web", ordered_keys(r#"["unit","*"]"#))),
        InputChange::SliceUpserted(slice("ns", "web-1", Some("web"), &[ep("10.244.0.3", "n3")])),
        InputChange::SliceUpserted(slice("ns", "web-2", Some("web"), &[ep("10.244.0.2", "n2")])),
    ] {
        view.apply(change).expect("valid fixture");
    }
    assert_eq!(pruned_slice_ips(&view, "ns", "web-1"), Vec::<String>::new());
    // the only ready local endpoint goes not-ready: every slice of web falls back to "*"
    assert_eq!(
        changed(
            &mut view,
            InputChange::SliceUpserted(slice("ns", "web-2", Some("web"), &[not_ready("10.244.0.2", "n2")]))
        ),
        vec![(ObjectKey::slice("ns", "web-1"), Modified), (ObjectKey::slice("ns", "web-2"), Modified)]
    );
    assert_eq!(pruned_slice_ips(&view, "ns", "web-1"), vec!["10.244.0.3"]);
    // n3 joins unit a: the unit has a ready endpoint again and the fallback ends, but the
    // kept sets are the same (web-1: n3, web-2: n2), so nobody is told anything.
    assert_eq!(changed(&mut view, node("n3", &[("unit", "a")])), vec![]);
}

/// SuperEdge's "service autonomy": endpoints on nodes the local unit votes down leave the
/// served view whatever the policy, while the upstream slices still list them ready.
#[test]
fn nodes_voted_down_locally_are_dropped_from_every_service_and_come_back() {
    let mut view = populated();
    let down = |names: &[&str]| InputChange::NodesDown(names.iter().map(|n| n.to_string()).collect());
    // n1 carries web-1 (unit policy, local unit) and the web Endpoints; n3 carries plain-1 (no policy)
    assert_eq!(
        changed(&mut view, down(&["n1", "n3"])),
        vec![
            (ObjectKey::slice("ns", "plain-1"), Modified),
            (ObjectKey::slice("ns", "web-1"), Modified),
            (ObjectKey::endpoints("ns", "web"), Modified),
        ]
    );
    assert_eq!(pruned_slice_ips(&view, "ns", "plain-1"), Vec::<String>::new());
    assert_eq!(pruned_slice_ips(&view, "ns", "web-1"), Vec::<String>::new());
    assert_eq!(changed(&mut view, down(&["n1", "n3"])), vec![], "the same verdicts again change nothing");
    let explained = view.explain(&NamespacedName::new("ns", "plain"));
    let rows: Vec<(bool, crate::topology::explain::EndpointRule, &str)> =
        explained.objects.iter().flat_map(|o| &o.endpoints).map(|e| (e.kept, e.rule, e.reason.as_str())).collect();
    assert_eq!(
        rows,
        vec![(
            false,
            crate::topology::explain::EndpointRule::NodeDown,
            "dropped: node n3 was voted down by the local unit's edge-health"
        )]
    );
    // n3 comes back: only what runs on n3 changes
    assert_eq!(changed(&mut view, down(&["n1"])), vec![(ObjectKey::slice("ns", "plain-1"), Modified)]);
    assert_eq!(pruned_slice_ips(&view, "ns", "plain-1"), vec!["10.244.0.5"]);
    assert_eq!(
        changed(&mut view, down(&[])),
        vec![(ObjectKey::slice("ns", "web-1"), Modified), (ObjectKey::endpoints("ns", "web"), Modified)]
    );
    assert_eq!(view.full_rebuild(), populated().full_rebuild(), "lifting every verdict restores the view");
    // an ordered policy moves on when its unit's only ready endpoint is on a down node
    let mut ordered = PrunedView::new("n1", false);
    for change in [
        node("n1", &[("unit", "a")]),
        node("n2", &[("unit", "a")]),
        node("n3", &[("unit", "b")]),
        InputChange::ServiceUpserted(service("ns", "web", ordered_keys(r#"["unit","*"]"#))),
        InputChange::SliceUpserted(slice(
            "ns",
            "web-1",
            Some("web"),
            &[ep("10.244.0.3", "n3"), ep("10.244.0.2", "n2")],
        )),
    ] {
        ordered.apply(change).expect("valid fixture");
    }
    assert_eq!(pruned_slice_ips(&ordered, "ns", "web-1"), vec!["10.244.0.2"]);
    assert_eq!(changed(&mut ordered, down(&["n2"])), vec![(ObjectKey::slice("ns", "web-1"), Modified)]);
    assert_eq!(pruned_slice_ips(&ordered, "ns", "web-1"), vec!["10.244.0.3"], "falls back to \"*\", without n2");
}

#[test]
fn bad_input_is_an_error_or_a_reported_pass_through() {
    let mut view = PrunedView::new("n1", false);
    let mut nameless = slice("ns", "x", Some("web"), &[]);
    nameless.metadata.name = None;
    assert_eq!(
        view.apply(InputChange::SliceUpserted(nameless)),
        Err(ViewError::MissingNamespacedName { kind: ObjectKind::EndpointSlice })
    );
    let mut no_namespace = endpoints("ns", "x", &[]);
    no_namespace.metadata.namespace = Some(String::new());
    assert_eq!(
        view.apply(InputChange::EndpointsUpserted(no_namespace)),
        Err(ViewError::MissingNamespacedName { kind: ObjectKind::Endpoints })
    );
    let mut svc = service("ns", "x", any_keys("[]"));
    svc.metadata.name = None;
    assert_eq!(view.apply(InputChange::ServiceUpserted(svc)), Err(ViewError::ServiceWithoutName));

    view.apply(node("n1", &[("unit", "a")])).unwrap();
    view.apply(InputChange::ServiceUpserted(service("ns", "web", any_keys("unit")))).unwrap();
    view.apply(InputChange::SliceUpserted(slice("ns", "web-1", Some("web"), &[ep("10.244.0.3", "n3")]))).unwrap();
    assert_eq!(pruned_slice_ips(&view, "ns", "web-1"), vec!["10.244.0.3"], "malformed policy passes through");
    let errors: Vec<_> = view.policy_errors().collect();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].0, &NamespacedName::new("ns", "web"));
    assert!(matches!(errors[0].1, PolicyError::MalformedKeys { .. }));
    view.apply(InputChange::ServiceUpserted(service("ns", "web", any_keys(r#"["unit"]"#)))).unwrap();
    assert_eq!(view.policy_errors().count(), 0, "fixing the annotation clears the error");
    assert_eq!(pruned_slice_ips(&view, "ns", "web-1"), Vec::<String>::new());
}

// ---- property tests -------------------------------------------------------------------

const NODES: [&str; 5] = ["n0", "n1", "n2", "n3", "n4"];
pub(in crate::topology) const LOCAL: &str = "n0";

fn arb_labels() -> impl Strategy<Value = Labels> {
    prop::collection::btree_map(
        prop::sample::select(vec!["unit", "zone"]),
        prop::sample::select(vec!["a", "b", ""]),
        0..=2,
    )
    .prop_map(|m| m.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
}

fn arb_endpoint() -> impl Strategy<Value = (u8, Option<&'static str>, Option<bool>)> {
    (
        0u8..4,
        prop::option::weighted(0.85, prop::sample::select(vec!["n0", "n1", "n2", "n3", "n4", "ghost"])),
        prop::option::of(any::<bool>()),
    )
}

fn build_slice(name: &str, service: Option<&str>, eps: &[(u8, Option<&'static str>, Option<bool>)]) -> InputChange {
    let ips: Vec<String> = eps.iter().map(|(ip, _, _)| format!("10.244.0.{ip}")).collect();
    let eps: Vec<Ep<'_>> =
        eps.iter().zip(&ips).map(|((_, node, ready), ip)| Ep { ip, node: *node, ready: *ready }).collect();
    InputChange::SliceUpserted(slice("ns", name, service, &eps))
}

fn build_endpoints(name: &str, eps: &[(u8, Option<&'static str>, Option<bool>)]) -> InputChange {
    let ips: Vec<String> = eps.iter().map(|(ip, _, _)| format!("10.244.1.{ip}")).collect();
    let all: Vec<Ep<'_>> =
        eps.iter().zip(&ips).map(|((_, node, ready), ip)| Ep { ip, node: *node, ready: *ready }).collect();
    let (ready, not_ready): (Vec<Ep<'_>>, Vec<Ep<'_>>) = all.into_iter().partition(|e| e.ready != Some(false));
    let half = ready.len() / 2;
    InputChange::EndpointsUpserted(endpoints("ns", name, &[(&ready[..half], &not_ready), (&ready[half..], &[])]))
}

fn arb_policy() -> impl Strategy<Value = Vec<(&'static str, String)>> {
    prop_oneof![
        Just(vec![]),
        Just(any_keys(r#"["unit"]"#)),
        Just(any_keys(r#"["unit","zone"]"#)),
        Just(ordered_keys(r#"["unit","zone"]"#)),
        Just(ordered_keys(r#"["unit","*"]"#)),
        Just(ordered_keys(r#"["zone","unit","*"]"#)),
        Just(any_keys("not json")),
    ]
}

pub(in crate::topology) fn arb_change() -> impl Strategy<Value = InputChange> {
    let service_name = || prop::sample::select(vec!["s0", "s1", "s2"]);
    let slice_name = || prop::sample::select(vec!["x0", "x1", "x2", "x3", "s0"]);
    prop_oneof![
        4 => (slice_name(), prop::option::weighted(0.9, service_name()), prop::collection::vec(arb_endpoint(), 0..5))
            .prop_map(|(name, service, eps)| build_slice(name, service, &eps)),
        1 => slice_name().prop_map(|n| InputChange::SliceDeleted(NamespacedName::new("ns", n))),
        2 => (service_name(), prop::collection::vec(arb_endpoint(), 0..5)).prop_map(|(n, eps)| build_endpoints(n, &eps)),
        1 => service_name().prop_map(|n| InputChange::EndpointsDeleted(NamespacedName::new("ns", n))),
        2 => (service_name(), arb_policy()).prop_map(|(n, p)| InputChange::ServiceUpserted(service("ns", n, p))),
        1 => service_name().prop_map(|n| InputChange::ServiceDeleted(NamespacedName::new("ns", n))),
        4 => (prop::sample::select(NODES.to_vec()), arb_labels())
            .prop_map(|(n, labels)| InputChange::NodeUpserted { name: n.to_string(), labels }),
        1 => prop::sample::select(NODES.to_vec()).prop_map(|n| InputChange::NodeDeleted(n.to_string())),
        2 => prop::collection::btree_set(prop::sample::select(vec!["n0", "n1", "n2", "n3", "n4", "ghost"]), 0..3)
            .prop_map(|down| InputChange::NodesDown(down.into_iter().map(str::to_string).collect())),
        3 => arb_apiserver_change(),
    ]
}

/// Changes of `default/kubernetes`: its slices (by label; one named otherwise) and its
/// Endpoints, each announcing a local apiserver or not (a malformed one included).
fn arb_apiserver_change() -> impl Strategy<Value = InputChange> {
    let announcement = || {
        prop::sample::select(vec![
            None,
            Some(("169.254.0.1", "443")),
            Some(("169.254.0.2", "6443")),
            Some(("fe80::2", "6443")),
            Some(("169.254.0.3", "https")),
            Some(("10.0.0.9", "6443")),
        ])
    };
    let namespace = keys::KUBERNETES_SERVICE_NAMESPACE;
    let name = keys::KUBERNETES_SERVICE_NAME;
    let announce = |meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, a: Option<(&str, &str)>| {
        meta.annotations =
            a.map(|(ip, port)| labels(&[(keys::LOCAL_ENDPOINT_ANNOTATION, ip), (keys::LOCAL_PORT_ANNOTATION, port)]));
    };
    let slice_name = || prop::sample::select(vec!["kubernetes", "kubernetes-x8k2p"]);
    prop_oneof![
        3 => (slice_name(), announcement(), prop::collection::vec(arb_endpoint(), 0..3)).prop_map(move |(n, a, eps)| {
            let InputChange::SliceUpserted(mut s) = build_slice(n, Some(name), &eps) else { unreachable!() };
            s.metadata.namespace = Some(namespace.into());
            announce(&mut s.metadata, a);
            InputChange::SliceUpserted(s)
        }),
        1 => slice_name().prop_map(move |n| InputChange::SliceDeleted(NamespacedName::new(namespace, n))),
        3 => (announcement(), prop::collection::vec(arb_endpoint(), 0..3)).prop_map(move |(a, eps)| {
            let InputChange::EndpointsUpserted(mut e) = build_endpoints(name, &eps) else { unreachable!() };
            e.metadata.namespace = Some(namespace.into());
            announce(&mut e.metadata, a);
            InputChange::EndpointsUpserted(e)
        }),
        1 => Just(InputChange::EndpointsDeleted(NamespacedName::new(namespace, name))),
        1 => arb_policy().prop_map(move |p| InputChange::ServiceUpserted(service(namespace, name, p))),
    ]
}

fn diff(before: &BTreeMap<ObjectKey, PrunedObject>, after: &BTreeMap<ObjectKey, PrunedObject>) -> Vec<ViewChange> {
    let mut out = Vec::new();
    for key in before.keys().chain(after.keys()).collect::<std::collections::BTreeSet<_>>() {
        let kind = match (before.get(key), after.get(key)) {
            (None, Some(_)) => Added,
            (Some(_), None) => Deleted,
            (Some(a), Some(b)) if !a.same_form(b) => Modified,
            _ => continue,
        };
        out.push(ViewChange { key: key.clone(), kind, object: after.get(key).cloned() });
    }
    out
}

/// The node names of the raw objects, kept beside the view from the same changes, so the
/// view's node index can be checked against a brute-force scan.
fn track_nodes(raw: &mut BTreeMap<ObjectKey, Vec<String>>, change: &InputChange) {
    let key_of = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        NamespacedName::new(meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default())
    };
    match change {
        InputChange::SliceUpserted(s) => {
            let nodes = s.endpoints.iter().filter_map(|e| e.node_name.clone()).collect();
            raw.insert(ObjectKey { kind: ObjectKind::EndpointSlice, id: key_of(&s.metadata) }, nodes);
        }
        InputChange::SliceDeleted(id) => {
            raw.remove(&ObjectKey { kind: ObjectKind::EndpointSlice, id: id.clone() });
        }
        InputChange::EndpointsUpserted(e) => {
            let nodes = e
                .subsets
                .iter()
                .flatten()
                .flat_map(|s| s.addresses.iter().flatten().chain(s.not_ready_addresses.iter().flatten()))
                .filter_map(|a| a.node_name.clone())
                .collect();
            raw.insert(ObjectKey { kind: ObjectKind::Endpoints, id: key_of(&e.metadata) }, nodes);
        }
        InputChange::EndpointsDeleted(id) => {
            raw.remove(&ObjectKey { kind: ObjectKind::Endpoints, id: id.clone() });
        }
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// (b) For every change of a random sequence, the incremental result is exactly the
    /// diff of full recomputations before and after it, and the cached pruned forms equal
    /// the full recomputation.
    #[test]
    fn incremental_equals_full_rebuild(
        rewrite in any::<bool>(),
        changes in prop::collection::vec(arb_change(), 1..40),
    ) {
        let mut view = PrunedView::new(LOCAL, rewrite);
        let mut before = view.full_rebuild();
        let mut raw_nodes = BTreeMap::new();
        let mut down = std::collections::BTreeSet::new();
        for change in changes {
            track_nodes(&mut raw_nodes, &change);
            if let InputChange::NodesDown(now) = &change {
                down = now.clone();
            }
            let got = view.apply(change.clone()).expect("generated input is valid");
            let after = view.full_rebuild();
            prop_assert_eq!(&got, &diff(&before, &after), "change {:?}", change);
            for (key, want) in &after {
                prop_assert_eq!(view.pruned(key), Some(want.clone()));
                // nothing served runs on a node the local unit votes down
                let served_nodes: Vec<Option<String>> = match want {
                    PrunedObject::Slice(s) => s.endpoints.iter().map(|e| e.node_name.clone()).collect(),
                    PrunedObject::Endpoints(e) => e.subsets.iter().flatten()
                        .flat_map(|s| s.addresses.iter().flatten().chain(s.not_ready_addresses.iter().flatten()))
                        .map(|a| a.node_name.clone()).collect(),
                };
                let on_down = served_nodes.iter().flatten().find(|n| down.contains(*n));
                prop_assert!(on_down.is_none(), "{:?} serves an endpoint on down node {:?}", key, on_down);
            }
            for node in NODES.iter().chain(["ghost"].iter()) {
                let brute: Vec<ObjectKey> =
                    raw_nodes.iter().filter(|(_, nodes)| nodes.iter().any(|n| n == node)).map(|(k, _)| k.clone()).collect();
                prop_assert_eq!(view.objects_on_node(node), brute, "node {}", node);
            }
            before = after;
        }
    }
}
