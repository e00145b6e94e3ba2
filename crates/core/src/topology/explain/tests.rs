//! The explanation: exact output for every reason, and the property that on random views
//! the endpoints it marks kept are exactly those [`PrunedView::pruned`] serves.

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::keys;
use crate::topology::fixtures::*;
use crate::topology::view::tests::{LOCAL, arb_change};
use crate::topology::view::*;

// ---- agreement with the served view ---------------------------------------------------

/// An endpoint as a client of the pruned view sees it: addresses, node, ready.
type Row = (Vec<String>, Option<String>, bool);

fn served_rows(object: &PrunedObject) -> Vec<Row> {
    match object {
        PrunedObject::Slice(slice) => slice
            .endpoints
            .iter()
            .map(|e| {
                let ready = e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
                (e.addresses.clone(), e.node_name.clone(), ready)
            })
            .collect(),
        PrunedObject::Endpoints(endpoints) => endpoints
            .subsets
            .iter()
            .flatten()
            .flat_map(|s| {
                let ready = s.addresses.iter().flatten().map(|a| (vec![a.ip.clone()], a.node_name.clone(), true));
                let not_ready =
                    s.not_ready_addresses.iter().flatten().map(|a| (vec![a.ip.clone()], a.node_name.clone(), false));
                ready.chain(not_ready)
            })
            .collect(),
    }
}

/// The explanation of `service` lists exactly its cached objects, marks kept exactly the
/// endpoints the view serves (in order), never contradicts itself between `kept`, `rule`
/// and `reason`, and its ordered steps name the key its filter decided by.
fn check_agrees(view: &PrunedView, service: &NamespacedName, got: &TopologyExplanation) -> Result<(), String> {
    let mut want_objects: Vec<ObjectKey> =
        view.slices_of_service(service).into_iter().map(|name| ObjectKey::slice(&service.namespace, name)).collect();
    let endpoints_key = ObjectKey::endpoints(&service.namespace, &service.name);
    if view.pruned(&endpoints_key).is_some() {
        want_objects.push(endpoints_key);
    }
    let got_objects: Vec<ObjectKey> = got
        .objects
        .iter()
        .map(|o| match o.kind {
            ExplainedKind::EndpointSlice => ObjectKey::slice(&service.namespace, &o.name),
            ExplainedKind::Endpoints => ObjectKey::endpoints(&service.namespace, &o.name),
        })
        .collect();
    if got_objects != want_objects {
        return Err(format!("objects {got_objects:?}, want {want_objects:?}"));
    }
    for (object, key) in got.objects.iter().zip(&want_objects) {
        let served = view.pruned(key).ok_or_else(|| format!("{key:?} not served"))?;
        for e in &object.endpoints {
            let prefix = match (e.rule, e.kept) {
                (EndpointRule::LocalRewrite, false) => "rewritten: ",
                (EndpointRule::LocalRewrite, true) => return Err(format!("{key:?}: rewritten endpoint kept: {e:?}")),
                (_, true) => "kept: ",
                (_, false) => "dropped: ",
            };
            if !e.reason.starts_with(prefix) || (e.rule != EndpointRule::LocalRewrite && e.rule.keeps() != e.kept) {
                return Err(format!("{key:?}: kept/rule/reason disagree: {e:?}"));
            }
            if (object.local_rewrite.is_some()) != (e.rule == EndpointRule::LocalRewrite) {
                return Err(format!("{key:?}: rewrite rule without object rewrite or back: {e:?}"));
            }
        }
        let want_served: Vec<Row> = match &object.local_rewrite {
            Some(local) => vec![(vec![local.ip.clone()], None, true)],
            None => object
                .endpoints
                .iter()
                .filter(|e| e.kept)
                .map(|e| (e.addresses.clone(), e.node_name.clone(), e.ready))
                .collect(),
        };
        if served_rows(&served) != want_served {
            return Err(format!("{key:?}: served {:?}, explanation keeps {want_served:?}", served_rows(&served)));
        }
    }
    for filter in [&got.filter.endpoint_slices, &got.filter.endpoints] {
        check_filter(&got.policy, filter)?;
    }
    serde_json::to_value(got).map_err(|e| e.to_string())?;
    Ok(())
}

fn check_filter(policy: &PolicyExplanation, filter: &FilterExplanation) -> Result<(), String> {
    let fail = || Err(format!("inconsistent filter under {policy:?}: {filter:?}"));
    if (filter.decision == FilterDecision::SameValueFor) == filter.same_value_for.is_empty() {
        return fail();
    }
    let PolicyExplanation::Ordered { keys } = policy else {
        return if filter.ordered_steps.is_empty() { Ok(()) } else { fail() };
    };
    let step_keys: Vec<&String> = filter.ordered_steps.iter().map(|s| &s.key).collect();
    let deciding: Vec<&OrderedStep> =
        filter.ordered_steps.iter().filter(|s| matches!(s.outcome, StepOutcome::Won | StepOutcome::Fallback)).collect();
    let consistent = step_keys == keys.iter().collect::<Vec<_>>()
        && match (filter.decision, deciding.as_slice()) {
            (FilterDecision::All, [step]) => step.key == keys::TOPOLOGY_WILDCARD && step.outcome == StepOutcome::Won,
            (FilterDecision::SameValueFor, [step]) => {
                step.key != keys::TOPOLOGY_WILDCARD
                    && filter.same_value_for.len() == 1
                    && filter.same_value_for[0].0 == step.key
            }
            (FilterDecision::Nothing, []) => true,
            _ => false,
        };
    if consistent { Ok(()) } else { fail() }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// On random views (the change sequences of the view's own property test), after every
    /// change, the explanation of every Service agrees with what the view serves.
    #[test]
    fn explanation_agrees_with_the_served_view(
        rewrite in any::<bool>(),
        changes in prop::collection::vec(arb_change(), 1..40),
    ) {
        let mut view = PrunedView::new(LOCAL, rewrite);
        for change in changes {
            view.apply(change).expect("generated input is valid");
            let apiserver = (keys::KUBERNETES_SERVICE_NAMESPACE, keys::KUBERNETES_SERVICE_NAME);
            for (namespace, name) in [("ns", "s0"), ("ns", "s1"), ("ns", "s2"), ("ns", "x0"), apiserver] {
                let service = NamespacedName::new(namespace, name);
                let got = view.explain(&service);
                prop_assert_eq!(check_agrees(&view, &service, &got), Ok(()), "{:#?}", got);
            }
        }
    }
}

// ---- exact output ---------------------------------------------------------------------

/// n1 (the local node) and n2 in unit a, n3 and n4 in unit b; zones z1 (n1, n3) and z2
/// (n2, n4); n5 has no labels; "ghost" is never cached.
fn cluster() -> Vec<InputChange> {
    let node =
        |name: &str, pairs: &[(&str, &str)]| InputChange::NodeUpserted { name: name.into(), labels: labels(pairs) };
    vec![
        node("n1", &[("unit", "a"), ("zone", "z1")]),
        node("n2", &[("unit", "a"), ("zone", "z2")]),
        node("n3", &[("unit", "b"), ("zone", "z1")]),
        node("n4", &[("unit", "b"), ("zone", "z2")]),
        node("n5", &[]),
    ]
}

fn view_of(local: &str, rewrite: bool, changes: impl IntoIterator<Item = InputChange>) -> PrunedView {
    let mut view = PrunedView::new(local, rewrite);
    for change in changes {
        view.apply(change).expect("valid fixture");
    }
    view
}

/// The explanation of `namespace/name`, checked against the served view.
fn explain(view: &PrunedView, namespace: &str, name: &str) -> TopologyExplanation {
    let service = NamespacedName::new(namespace, name);
    let got = view.explain(&service);
    if let Err(e) = check_agrees(view, &service, &got) {
        panic!("{e}\n{got:#?}");
    }
    got
}

/// One line per endpoint: `object address reason`.
fn reasons(explanation: &TopologyExplanation) -> Vec<String> {
    explanation
        .objects
        .iter()
        .flat_map(|o| o.endpoints.iter().map(move |e| format!("{} {} {}", o.name, e.addresses.join(","), e.reason)))
        .collect()
}

fn web_slice(eps: &[Ep<'_>]) -> InputChange {
    InputChange::SliceUpserted(slice("ns", "web-1", Some("web"), eps))
}

fn web_service(annotations: Vec<(&'static str, String)>) -> InputChange {
    InputChange::ServiceUpserted(service("ns", "web", annotations))
}

fn no_node(ip: &str) -> Ep<'_> {
    Ep { ip, node: None, ready: Some(true) }
}

#[test]
fn json_shape() {
    let view = view_of(
        "n1",
        false,
        cluster().into_iter().chain([
            web_service(any_keys(r#"["unit"]"#)),
            web_slice(&[ep("10.244.0.1", "n1"), ep("10.244.0.3", "n3")]),
            InputChange::EndpointsUpserted(endpoints(
                "ns",
                "web",
                &[(&[ep("10.244.1.1", "n1")], &[not_ready("10.244.1.3", "n3")])],
            )),
        ]),
    );
    let filter = json!({
        "decision": "sameValueFor",
        "sameValueFor": [["unit", "a"]],
        "reason": "any key (SuperEdge rule): keep endpoints on nodes with unit=a",
    });
    let kept = "kept: node n1 has unit=a like the local node";
    let dropped = "dropped: node n3 has unit=b, local node has unit=a";
    assert_eq!(
        serde_json::to_value(explain(&view, "ns", "web")).unwrap(),
        json!({
            "service": "ns/web",
            "serviceKnown": true,
            "localNode": "n1",
            "localNodeKnown": true,
            "localNodeValues": {"unit": "a"},
            "policy": {"mode": "anyKey", "keys": ["unit"]},
            "filter": {"endpointSlices": filter, "endpoints": filter},
            "objects": [
                {
                    "kind": "EndpointSlice",
                    "name": "web-1",
                    "endpoints": [
                        {"addresses": ["10.244.0.1"], "nodeName": "n1", "ready": true,
                         "kept": true, "rule": "sameValue", "reason": kept},
                        {"addresses": ["10.244.0.3"], "nodeName": "n3", "ready": true,
                         "kept": false, "rule": "differentValue", "reason": dropped},
                    ],
                },
                {
                    "kind": "Endpoints",
                    "name": "web",
                    "endpoints": [
                        {"addresses": ["10.244.1.1"], "nodeName": "n1", "ready": true, "subset": 0,
                         "kept": true, "rule": "sameValue", "reason": kept},
                        {"addresses": ["10.244.1.3"], "nodeName": "n3", "ready": false, "subset": 0,
                         "kept": false, "rule": "differentValue", "reason": dropped},
                    ],
                },
            ],
        })
    );
}

#[test]
fn any_key_endpoint_reasons() {
    let eps = [
        ep("10.244.0.1", "n1"),
        not_ready("10.244.0.2", "n2"),
        ep("10.244.0.3", "n3"),
        ep("10.244.0.5", "n5"),
        no_node("10.244.0.9"),
        ep("10.244.0.8", "ghost"),
    ];
    let view =
        view_of("n1", false, cluster().into_iter().chain([web_service(any_keys(r#"["unit"]"#)), web_slice(&eps)]));
    let got = explain(&view, "ns", "web");
    assert_eq!(
        reasons(&got),
        [
            "web-1 10.244.0.1 kept: node n1 has unit=a like the local node",
            "web-1 10.244.0.2 kept: node n2 has unit=a like the local node",
            "web-1 10.244.0.3 dropped: node n3 has unit=b, local node has unit=a",
            "web-1 10.244.0.5 dropped: node n5 has no unit, local node has unit=a",
            "web-1 10.244.0.9 dropped: endpoint has no nodeName",
            "web-1 10.244.0.8 dropped: node ghost is unknown (no labels cached)",
        ]
    );
    let rules: Vec<EndpointRule> = got.objects[0].endpoints.iter().map(|e| e.rule).collect();
    use EndpointRule::*;
    assert_eq!(rules, [SameValue, SameValue, DifferentValue, DifferentValue, NoNodeName, UnknownNode]);

    // several keys: any one shared value keeps; a key the local node lacks is reported
    let view = view_of(
        "n1",
        false,
        cluster().into_iter().chain([
            web_service(any_keys(r#"["unit","zone","rack"]"#)),
            web_slice(&[ep("10.244.0.3", "n3"), ep("10.244.0.4", "n4"), ep("10.244.0.5", "n5")]),
        ]),
    );
    let got = explain(&view, "ns", "web");
    assert_eq!(
        got.local_node_values,
        [("rack".to_string(), None), ("unit".to_string(), Some("a".to_string())), ("zone".into(), Some("z1".into()))]
            .into_iter()
            .collect()
    );
    assert_eq!(
        got.filter.endpoint_slices.reason,
        "any key (SuperEdge rule): keep endpoints on nodes with unit=a or zone=z1; local node lacks rack"
    );
    assert_eq!(
        reasons(&got),
        [
            "web-1 10.244.0.3 kept: node n3 has zone=z1 like the local node",
            "web-1 10.244.0.4 dropped: node n4 has unit=b and zone=z2, local node has unit=a and zone=z1",
            "web-1 10.244.0.5 dropped: node n5 has no unit and no zone, local node has unit=a and zone=z1",
        ]
    );
}

#[test]
fn pass_through_reasons() {
    let objects = || {
        [
            web_slice(&[ep("10.244.0.3", "n3"), no_node("10.244.0.9")]),
            InputChange::EndpointsUpserted(endpoints("ns", "web", &[(&[ep("10.244.1.8", "ghost")], &[])])),
        ]
    };
    type Case = (&'static str, Option<InputChange>, &'static str, &'static str, Option<&'static str>);
    let cases: [Case; 3] = [
        (
            "unknown Service",
            None,
            "pass-through: no cached Service object",
            "kept: pass-through (no cached Service object)",
            None,
        ),
        (
            "no topologyKeys",
            Some(web_service(vec![])),
            "pass-through: Service has no topologyKeys",
            "kept: pass-through (Service has no topologyKeys)",
            None,
        ),
        (
            "malformed annotation",
            Some(web_service(any_keys("unit"))),
            "pass-through: topology annotations unreadable (see policyError)",
            "kept: pass-through (topology annotations unreadable)",
            Some(
                r#"annotation topologyKeys must be a JSON list of strings, got "unit": expected value at line 1 column 1"#,
            ),
        ),
    ];
    for (name, svc, filter_reason, reason, error) in cases {
        let view = view_of("n1", false, cluster().into_iter().chain(svc.clone()).chain(objects()));
        let got = explain(&view, "ns", "web");
        assert_eq!(got.service_known, svc.is_some(), "{name}");
        assert_eq!(got.policy, PolicyExplanation::PassThrough, "{name}");
        assert_eq!(got.policy_error.as_deref(), error, "{name}");
        assert!(got.local_node_values.is_empty(), "{name}");
        for filter in [&got.filter.endpoint_slices, &got.filter.endpoints] {
            assert_eq!((filter.decision, filter.reason.as_str()), (FilterDecision::All, filter_reason), "{name}");
        }
        assert_eq!(
            reasons(&got),
            [
                format!("web-1 10.244.0.3 {reason}"),
                format!("web-1 10.244.0.9 {reason}"),
                format!("web 10.244.1.8 {reason}"),
            ],
            "{name}"
        );
        let json = serde_json::to_value(&got).unwrap();
        assert_eq!(json["policy"], json!({"mode": "passThrough"}), "{name}");
        assert_eq!(json.get("policyError").and_then(|e| e.as_str()), error, "{name}");
    }

    // a Service nothing is cached for at all
    let got = explain(&view_of("n1", false, []), "ns", "nothing");
    assert_eq!((got.service.as_str(), got.service_known, got.local_node_known), ("ns/nothing", false, false));
    assert!(got.objects.is_empty());
}

#[test]
fn local_node_unknown_or_lacking_every_key() {
    let eps = [ep("10.244.0.2", "n2"), no_node("10.244.0.9")];
    // n1 is never cached
    let unknown = view_of(
        "n1",
        false,
        cluster().into_iter().skip(1).chain([web_service(any_keys(r#"["unit"]"#)), web_slice(&eps)]),
    );
    let got = explain(&unknown, "ns", "web");
    assert!(!got.local_node_known);
    assert_eq!(got.local_node_values, [("unit".to_string(), None)].into_iter().collect());
    assert_eq!(
        (got.filter.endpoint_slices.decision, got.filter.endpoint_slices.reason.as_str()),
        (FilterDecision::Nothing, "local node n1 is unknown (no labels cached)")
    );
    assert_eq!(
        reasons(&got),
        [
            "web-1 10.244.0.2 dropped: local node n1 is unknown (no labels cached)",
            "web-1 10.244.0.9 dropped: local node n1 is unknown (no labels cached)",
        ]
    );
    assert!(got.objects[0].endpoints.iter().all(|e| e.rule == EndpointRule::LocalNodeUnknown));

    // n5 carries neither key
    let lacking = view_of(
        "n5",
        false,
        cluster().into_iter().chain([web_service(ordered_keys(r#"["unit","zone"]"#)), web_slice(&eps)]),
    );
    let got = explain(&lacking, "ns", "web");
    assert!(got.local_node_known);
    assert_eq!(got.filter.endpoint_slices.reason, "local node n5 lacks every key (unit, zone)");
    assert_eq!(
        got.filter.endpoint_slices.ordered_steps,
        [
            OrderedStep { key: "unit".into(), outcome: StepOutcome::Skipped, reason: "local node lacks unit".into() },
            OrderedStep { key: "zone".into(), outcome: StepOutcome::Skipped, reason: "local node lacks zone".into() },
        ]
    );
    assert_eq!(
        reasons(&got),
        [
            "web-1 10.244.0.2 dropped: local node n5 lacks every key (unit, zone)",
            "web-1 10.244.0.9 dropped: local node n5 lacks every key (unit, zone)",
        ]
    );
    assert!(got.objects[0].endpoints.iter().all(|e| e.rule == EndpointRule::LocalNodeLacksKeys));
}

#[test]
fn ordered_falls_back_to_the_second_key() {
    let view = view_of(
        "n1",
        false,
        cluster().into_iter().chain([
            web_service(ordered_keys(r#"["rack","unit","zone"]"#)),
            web_slice(&[not_ready("10.244.0.2", "n2"), ep("10.244.0.3", "n3"), ep("10.244.0.4", "n4")]),
        ]),
    );
    let got = explain(&view, "ns", "web");
    assert_eq!(got.policy, PolicyExplanation::Ordered { keys: vec!["rack".into(), "unit".into(), "zone".into()] });
    let filter = &got.filter.endpoint_slices;
    assert_eq!(filter.same_value_for, [("zone".to_string(), "z1".to_string())]);
    assert_eq!(
        filter.reason,
        r#"ordered key "zone" decided (zone=z1): the first key with a ready endpoint on a node sharing the local node's value"#
    );
    assert_eq!(
        filter.ordered_steps,
        [
            OrderedStep { key: "rack".into(), outcome: StepOutcome::Skipped, reason: "local node lacks rack".into() },
            OrderedStep {
                key: "unit".into(),
                outcome: StepOutcome::NoReadyEndpoint,
                reason: "no ready endpoint on a node with unit=a".into()
            },
            OrderedStep {
                key: "zone".into(),
                outcome: StepOutcome::Won,
                reason: "1 ready endpoint(s) on nodes with zone=z1".into()
            },
        ]
    );
    assert_eq!(
        reasons(&got),
        [
            "web-1 10.244.0.2 dropped: node n2 has zone=z2, local node has zone=z1",
            "web-1 10.244.0.3 kept: node n3 has zone=z1 like the local node",
            "web-1 10.244.0.4 dropped: node n4 has zone=z2, local node has zone=z1",
        ]
    );
}

#[test]
fn ordered_without_a_ready_match_or_wildcard_keeps_the_first_applicable_key() {
    let view = view_of(
        "n1",
        false,
        cluster().into_iter().chain([
            web_service(ordered_keys(r#"["unit","zone"]"#)),
            web_slice(&[not_ready("10.244.0.2", "n2"), not_ready("10.244.0.3", "n3"), ep("10.244.0.4", "n4")]),
        ]),
    );
    let got = explain(&view, "ns", "web");
    let filter = &got.filter.endpoint_slices;
    assert_eq!(
        filter.reason,
        r#"ordered key "unit" decided (unit=a) as a fallback: no key has a ready endpoint on a node sharing the local node's value and there is no "*", so the first key the local node carries applies and no traffic leaks to other values"#
    );
    assert_eq!(
        filter.ordered_steps.iter().map(|s| (s.outcome, s.reason.as_str())).collect::<Vec<_>>(),
        [
            (
                StepOutcome::Fallback,
                "no ready endpoint on a node with unit=a; applies as the first key the local node carries"
            ),
            (StepOutcome::NoReadyEndpoint, "no ready endpoint on a node with zone=z1"),
        ]
    );
    assert_eq!(
        reasons(&got),
        [
            "web-1 10.244.0.2 kept: node n2 has unit=a like the local node",
            "web-1 10.244.0.3 dropped: node n3 has unit=b, local node has unit=a",
            "web-1 10.244.0.4 dropped: node n4 has unit=b, local node has unit=a",
        ]
    );
}

#[test]
fn ordered_wildcard() {
    let eps = [not_ready("10.244.0.2", "n2"), ep("10.244.0.3", "n3"), no_node("10.244.0.9"), ep("10.244.0.8", "ghost")];
    let mut changes = cluster();
    changes.extend([web_service(ordered_keys(r#"["unit","*"]"#)), web_slice(&eps)]);
    let got = explain(&view_of("n1", false, changes.clone()), "ns", "web");
    let filter = &got.filter.endpoint_slices;
    assert_eq!(filter.decision, FilterDecision::All);
    assert_eq!(
        filter.reason,
        r#"ordered wildcard "*" reached: no earlier key has a ready endpoint on a node sharing the local node's value, so every endpoint is kept"#
    );
    assert_eq!(
        filter.ordered_steps.iter().map(|s| (s.key.as_str(), s.outcome, s.reason.as_str())).collect::<Vec<_>>(),
        [
            ("unit", StepOutcome::NoReadyEndpoint, "no ready endpoint on a node with unit=a"),
            ("*", StepOutcome::Won, "every endpoint, with or without a node"),
        ]
    );
    assert_eq!(
        reasons(&got),
        [
            r#"web-1 10.244.0.2 kept: ordered wildcard "*""#,
            r#"web-1 10.244.0.3 kept: ordered wildcard "*""#,
            r#"web-1 10.244.0.9 kept: ordered wildcard "*""#,
            r#"web-1 10.244.0.8 kept: ordered wildcard "*""#,
        ]
    );
    assert!(got.objects[0].endpoints.iter().all(|e| e.rule == EndpointRule::OrderedWildcard));

    // local node unknown: every label key is skipped and the wildcard keeps everything
    let got = explain(&view_of("n9", false, changes.clone()), "ns", "web");
    assert_eq!(
        got.filter.endpoint_slices.ordered_steps.iter().map(|s| (s.outcome, s.reason.as_str())).collect::<Vec<_>>(),
        [
            (StepOutcome::Skipped, "local node n9 is unknown (no labels cached)"),
            (StepOutcome::Won, "every endpoint, with or without a node")
        ]
    );
    assert_eq!(got.filter.endpoint_slices.decision, FilterDecision::All);

    // a ready endpoint in the local unit: the first key wins, the wildcard is not reached
    changes.push(web_slice(&[ep("10.244.0.2", "n2"), ep("10.244.0.3", "n3")]));
    let got = explain(&view_of("n1", false, changes), "ns", "web");
    assert_eq!(
        got.filter.endpoint_slices.ordered_steps.iter().map(|s| (s.outcome, s.reason.as_str())).collect::<Vec<_>>(),
        [
            (StepOutcome::Won, "1 ready endpoint(s) on nodes with unit=a"),
            (StepOutcome::NotReached, "an earlier key decided")
        ]
    );
    assert_eq!(
        reasons(&got),
        [
            "web-1 10.244.0.2 kept: node n2 has unit=a like the local node",
            "web-1 10.244.0.3 dropped: node n3 has unit=b, local node has unit=a",
        ]
    );
}

#[test]
fn ordered_decides_slices_and_endpoints_separately() {
    // the slices have a ready endpoint in unit a, the Endpoints object only a not-ready one
    let view = view_of(
        "n1",
        false,
        cluster().into_iter().chain([
            web_service(ordered_keys(r#"["unit","*"]"#)),
            web_slice(&[ep("10.244.0.2", "n2"), ep("10.244.0.3", "n3")]),
            InputChange::EndpointsUpserted(endpoints(
                "ns",
                "web",
                &[(&[ep("10.244.1.3", "n3")], &[not_ready("10.244.1.2", "n2")])],
            )),
        ]),
    );
    let got = explain(&view, "ns", "web");
    assert_eq!(got.filter.endpoint_slices.decision, FilterDecision::SameValueFor);
    assert_eq!(got.filter.endpoints.decision, FilterDecision::All);
    assert_eq!(
        reasons(&got),
        [
            "web-1 10.244.0.2 kept: node n2 has unit=a like the local node",
            "web-1 10.244.0.3 dropped: node n3 has unit=b, local node has unit=a",
            r#"web 10.244.1.3 kept: ordered wildcard "*""#,
            r#"web 10.244.1.2 kept: ordered wildcard "*""#,
        ]
    );
}

#[test]
fn endpoints_subsets_ready_and_not_ready() {
    let view = view_of(
        "n1",
        false,
        cluster().into_iter().chain([
            web_service(any_keys(r#"["unit"]"#)),
            InputChange::EndpointsUpserted(endpoints(
                "ns",
                "web",
                &[
                    (&[ep("10.244.1.1", "n1"), ep("10.244.1.3", "n3")], &[not_ready("10.244.1.2", "n2")]),
                    (&[ep("10.244.1.4", "n4")], &[not_ready("10.244.1.5", "n3")]),
                    (&[no_node("10.244.1.9")], &[]),
                ],
            )),
        ]),
    );
    let got = explain(&view, "ns", "web");
    assert_eq!(got.objects.len(), 1);
    assert_eq!((got.objects[0].kind, got.objects[0].name.as_str()), (ExplainedKind::Endpoints, "web"));
    let rows: Vec<_> = got.objects[0]
        .endpoints
        .iter()
        .map(|e| (e.subset, e.addresses.join(","), e.ready, e.kept, e.reason.as_str()))
        .collect();
    assert_eq!(
        rows,
        [
            (Some(0), "10.244.1.1".into(), true, true, "kept: node n1 has unit=a like the local node"),
            (Some(0), "10.244.1.3".into(), true, false, "dropped: node n3 has unit=b, local node has unit=a"),
            (Some(0), "10.244.1.2".into(), false, true, "kept: node n2 has unit=a like the local node"),
            (Some(1), "10.244.1.4".into(), true, false, "dropped: node n4 has unit=b, local node has unit=a"),
            (Some(1), "10.244.1.5".into(), false, false, "dropped: node n3 has unit=b, local node has unit=a"),
            (Some(2), "10.244.1.9".into(), true, false, "dropped: endpoint has no nodeName"),
        ]
    );
}

#[test]
fn local_apiserver_rewrite() {
    let announce = [(keys::LOCAL_ENDPOINT_ANNOTATION, "169.254.0.2"), (keys::LOCAL_PORT_ANNOTATION, "51003")];
    let annotations = Some(announce.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
    let mut apiserver = endpoints(
        keys::KUBERNETES_SERVICE_NAMESPACE,
        keys::KUBERNETES_SERVICE_NAME,
        &[(&[no_node("10.0.0.1"), no_node("10.0.0.2")], &[])],
    );
    apiserver.metadata.annotations = annotations.clone();
    let mut apiserver_slice = slice(
        keys::KUBERNETES_SERVICE_NAMESPACE,
        "kubernetes-x8k2p",
        Some(keys::KUBERNETES_SERVICE_NAME),
        &[no_node("10.0.0.1")],
    );
    apiserver_slice.metadata.annotations = annotations;
    let changes = || {
        cluster().into_iter().chain([
            // a topology policy on the apiserver Service does not stop the rewrite
            InputChange::ServiceUpserted(service(
                keys::KUBERNETES_SERVICE_NAMESPACE,
                keys::KUBERNETES_SERVICE_NAME,
                any_keys(r#"["unit"]"#),
            )),
            InputChange::EndpointsUpserted(apiserver.clone()),
            InputChange::SliceUpserted(apiserver_slice.clone()),
        ])
    };
    let got = explain(&view_of("n1", true, changes()), "default", "kubernetes");
    let rewritten = "rewritten: default/kubernetes local apiserver endpoint (served as 169.254.0.2 port 51003 instead)";
    assert_eq!(
        reasons(&got),
        [
            format!("kubernetes-x8k2p 10.0.0.1 {rewritten}"),
            format!("kubernetes 10.0.0.1 {rewritten}"),
            format!("kubernetes 10.0.0.2 {rewritten}"),
        ]
    );
    for object in &got.objects {
        assert_eq!(object.local_rewrite, Some(LocalRewrite { ip: "169.254.0.2".into(), port: 51003 }));
        assert!(object.endpoints.iter().all(|e| !e.kept && e.rule == EndpointRule::LocalRewrite));
    }
    assert_eq!(
        serde_json::to_value(&got).unwrap()["objects"][1]["localRewrite"],
        json!({"ip": "169.254.0.2", "port": 51003})
    );

    // out of cluster: no rewrite, the policy applies (the endpoints have no node)
    let got = explain(&view_of("n1", false, changes()), "default", "kubernetes");
    assert!(got.objects.iter().all(|o| o.local_rewrite.is_none()));
    assert!(reasons(&got).iter().all(|r| r.ends_with(" dropped: endpoint has no nodeName")), "{:?}", reasons(&got));
}
