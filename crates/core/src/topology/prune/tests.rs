//! Table tests for every branch of pure pruning, SuperEdge defects included.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Endpoints;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::*;
use crate::keys;
use crate::topology::fixtures::*;
use crate::topology::local_endpoint::LocalEndpoint;
use crate::topology::policy::TopologyPolicy;

/// n1..n4 form units a/b across zones z1/z2; n5 has no labels; "ghost" is unknown.
fn cluster() -> BTreeMap<String, Labels> {
    BTreeMap::from([
        ("n1".to_string(), labels(&[("unit", "a"), ("zone", "z1")])),
        ("n2".to_string(), labels(&[("unit", "a"), ("zone", "z2")])),
        ("n3".to_string(), labels(&[("unit", "b"), ("zone", "z1")])),
        ("n4".to_string(), labels(&[("unit", "b"), ("zone", "z2")])),
        ("n5".to_string(), labels(&[])),
        ("n6".to_string(), labels(&[("unit", ""), ("zone", "z3")])),
        ("n7".to_string(), labels(&[("unit", ""), ("zone", "z3")])),
    ])
}

fn policy(annotations: Vec<(&'static str, String)>) -> TopologyPolicy {
    let map: BTreeMap<String, String> = annotations.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    TopologyPolicy::from_annotations(Some(&map)).expect("valid policy in test table")
}

fn no_node(ip: &str) -> Ep<'_> {
    Ep { ip, node: None, ready: Some(true) }
}

struct Case {
    name: &'static str,
    policy: TopologyPolicy,
    local: Option<&'static str>,
    slices: Vec<Vec<Ep<'static>>>,
    want: Vec<Vec<&'static str>>,
}

fn run(case: Case) {
    let nodes = cluster();
    let ctx =
        PruneContext { local: case.local.and_then(|l| nodes.get(l)), nodes: &nodes, rewrite_local_apiserver: false };
    let slices: Vec<_> =
        case.slices.iter().enumerate().map(|(i, eps)| slice("ns", &format!("svc-{i}"), Some("svc"), eps)).collect();
    let refs: Vec<_> = slices.iter().collect();
    let pruned = prune_service_slices(&case.policy, &refs, None, ctx);
    let got: Vec<Vec<String>> = pruned.iter().map(slice_ips).collect();
    let want: Vec<Vec<String>> = case.want.iter().map(|w| w.iter().map(|s| s.to_string()).collect()).collect();
    assert_eq!(got, want, "case: {}", case.name);
    for (before, after) in slices.iter().zip(&pruned) {
        assert_eq!(before.metadata, after.metadata, "case {}: metadata kept", case.name);
        assert_eq!(before.ports, after.ports, "case {}: ports kept", case.name);
        assert_eq!(before.address_type, after.address_type, "case {}", case.name);
    }
}

#[test]
fn any_key_mode_table() {
    let one = |eps: Vec<Ep<'static>>, want: Vec<&'static str>, name, keys: &str, local| Case {
        name,
        policy: policy(any_keys(keys)),
        local,
        slices: vec![eps],
        want: vec![want],
    };
    let all = || vec![ep("10.244.0.1", "n1"), ep("10.244.0.2", "n2"), ep("10.244.0.3", "n3"), ep("10.244.0.4", "n4")];
    for case in [
        one(all(), vec!["10.244.0.1", "10.244.0.2"], "same unit kept", r#"["unit"]"#, Some("n1")),
        one(all(), vec!["10.244.0.3", "10.244.0.4"], "other local node, other unit", r#"["unit"]"#, Some("n4")),
        one(
            all(),
            vec!["10.244.0.1", "10.244.0.2", "10.244.0.3"],
            "any key matches: unit OR zone",
            r#"["unit","zone"]"#,
            Some("n1"),
        ),
        one(all(), vec![], "local node lacks every key", r#"["unit"]"#, Some("n5")),
        one(all(), vec![], "local node unknown", r#"["unit"]"#, None),
        one(
            all(),
            vec!["10.244.0.1", "10.244.0.2"],
            "key the local node lacks is skipped",
            r#"["rack","unit"]"#,
            Some("n1"),
        ),
        one(
            vec![ep("10.244.0.1", "n1"), no_node("10.244.0.9"), ep("10.244.0.8", "ghost")],
            vec!["10.244.0.1"],
            "no nodeName and unknown node dropped",
            r#"["unit"]"#,
            Some("n1"),
        ),
        one(
            vec![not_ready("10.244.0.1", "n1"), ep("10.244.0.2", "n2"), not_ready("10.244.0.3", "n3")],
            vec!["10.244.0.1", "10.244.0.2"],
            "not-ready endpoints pruned alike, never promoted",
            r#"["unit"]"#,
            Some("n1"),
        ),
        one(
            vec![Ep { ip: "10.244.0.1", node: Some("n1"), ready: None }, ep("10.244.0.3", "n3")],
            vec!["10.244.0.1"],
            "unset ready condition",
            r#"["unit"]"#,
            Some("n1"),
        ),
        one(all(), vec![], "endpoint nodes lack the key", r#"["rack"]"#, Some("n1")),
        one(
            vec![ep("10.244.0.6", "n6"), ep("10.244.0.7", "n7"), ep("10.244.0.5", "n5")],
            vec!["10.244.0.6", "10.244.0.7"],
            "empty label values are equal values, absent is not",
            r#"["unit"]"#,
            Some("n6"),
        ),
        one(all(), vec![], "wildcard is an ordinary (absent) key in any mode", r#"["*"]"#, Some("n1")),
        one(vec![], vec![], "empty slice", r#"["unit"]"#, Some("n1")),
    ] {
        run(case);
    }
}

#[test]
fn pass_through_keeps_everything_even_without_nodes() {
    run(Case {
        name: "pass through",
        policy: TopologyPolicy::PassThrough,
        local: None,
        slices: vec![vec![ep("10.244.0.3", "n3"), no_node("10.244.0.9"), ep("10.244.0.8", "ghost")]],
        want: vec![vec!["10.244.0.3", "10.244.0.9", "10.244.0.8"]],
    });
}

#[test]
fn ordered_mode_table() {
    let terminating = Ep { ip: "10.244.0.1", node: Some("n1"), ready: Some(false) };
    let cases = [
        Case {
            name: "first key with a ready endpoint wins",
            policy: policy(ordered_keys(r#"["unit","zone","*"]"#)),
            local: Some("n1"),
            slices: vec![vec![ep("10.244.0.1", "n1"), ep("10.244.0.2", "n2"), ep("10.244.0.3", "n3")]],
            want: vec![vec!["10.244.0.1", "10.244.0.2"]],
        },
        Case {
            name: "first key only not ready: second key wins",
            policy: policy(ordered_keys(r#"["unit","zone","*"]"#)),
            local: Some("n1"),
            slices: vec![vec![not_ready("10.244.0.2", "n2"), ep("10.244.0.3", "n3"), ep("10.244.0.4", "n4")]],
            want: vec![vec!["10.244.0.3"]],
        },
        Case {
            name: "terminating (ready=false) does not count as ready",
            policy: policy(ordered_keys(r#"["unit","*"]"#)),
            local: Some("n1"),
            slices: vec![vec![terminating, ep("10.244.0.4", "n4")]],
            want: vec![vec!["10.244.0.1", "10.244.0.4"]],
        },
        Case {
            name: "wildcard reached keeps all, nodeless and unknown included",
            policy: policy(ordered_keys(r#"["unit","*"]"#)),
            local: Some("n1"),
            slices: vec![vec![ep("10.244.0.3", "n3"), no_node("10.244.0.9"), ep("10.244.0.8", "ghost")]],
            want: vec![vec!["10.244.0.3", "10.244.0.9", "10.244.0.8"]],
        },
        Case {
            name: "no key wins, no wildcard: first applicable key still applies (no leak)",
            policy: policy(ordered_keys(r#"["unit","zone"]"#)),
            local: Some("n1"),
            slices: vec![vec![not_ready("10.244.0.2", "n2"), not_ready("10.244.0.3", "n3"), ep("10.244.0.4", "n4")]],
            want: vec![vec!["10.244.0.2"]],
        },
        Case {
            name: "local lacks first key: it is skipped",
            policy: policy(ordered_keys(r#"["rack","unit"]"#)),
            local: Some("n1"),
            slices: vec![vec![ep("10.244.0.2", "n2"), ep("10.244.0.3", "n3")]],
            want: vec![vec!["10.244.0.2"]],
        },
        Case {
            name: "local unknown without wildcard: nothing",
            policy: policy(ordered_keys(r#"["unit","zone"]"#)),
            local: None,
            slices: vec![vec![ep("10.244.0.2", "n2")]],
            want: vec![vec![]],
        },
        Case {
            name: "local unknown with wildcard: everything",
            policy: policy(ordered_keys(r#"["unit","*"]"#)),
            local: None,
            slices: vec![vec![ep("10.244.0.2", "n2"), no_node("10.244.0.9")]],
            want: vec![vec!["10.244.0.2", "10.244.0.9"]],
        },
        Case {
            name: "decision spans the Service's slices: a ready local endpoint in another slice wins",
            policy: policy(ordered_keys(r#"["unit","*"]"#)),
            local: Some("n1"),
            slices: vec![
                vec![ep("10.244.0.3", "n3"), ep("10.244.0.4", "n4")],
                vec![ep("10.244.0.2", "n2"), ep("10.244.0.5", "n3")],
            ],
            want: vec![vec![], vec!["10.244.0.2"]],
        },
        Case {
            name: "decision spans slices: no ready local anywhere, all slices fall back together",
            policy: policy(ordered_keys(r#"["unit","*"]"#)),
            local: Some("n1"),
            slices: vec![vec![ep("10.244.0.3", "n3")], vec![not_ready("10.244.0.2", "n2")]],
            want: vec![vec!["10.244.0.3"], vec!["10.244.0.2"]],
        },
    ];
    for case in cases {
        run(case);
    }
}

#[test]
fn core_endpoints_prune_ready_and_not_ready_addresses() {
    let nodes = cluster();
    let ctx = PruneContext { local: nodes.get("n1"), nodes: &nodes, rewrite_local_apiserver: false };
    let source = endpoints(
        "ns",
        "svc",
        &[
            (&[ep("10.244.0.1", "n1"), ep("10.244.0.3", "n3")], &[not_ready("10.244.0.2", "n2")]),
            (&[ep("10.244.0.4", "n4")], &[not_ready("10.244.0.5", "n3")]),
            (&[], &[]),
            (&[Ep { ip: "10.244.0.9", node: None, ready: Some(true) }, ep("10.244.0.6", "n2")], &[]),
        ],
    );
    let pruned = prune_endpoints(&policy(any_keys(r#"["unit"]"#)), &source, ctx);
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        endpoints_ips(&pruned),
        vec![
            (s(&["10.244.0.1"]), s(&["10.244.0.2"])),
            // the second subset lost every address and is gone; the already-empty one stays
            (s(&[]), s(&[])),
            (s(&["10.244.0.6"]), s(&[])),
        ]
    );
    assert_eq!(pruned.metadata, source.metadata);
    assert_eq!(pruned.subsets.as_ref().unwrap()[0].ports, source.subsets.as_ref().unwrap()[0].ports);

    // ordered over core Endpoints: unit a has only a not-ready address (n2), zone z1 has
    // n3 ready, so zone wins and unit a's not-ready address goes
    let ordered_source = endpoints(
        "ns",
        "svc",
        &[(&[ep("10.244.0.3", "n3"), ep("10.244.0.4", "n4")], &[not_ready("10.244.0.2", "n2")])],
    );
    let pruned = prune_endpoints(&policy(ordered_keys(r#"["unit","zone"]"#)), &ordered_source, ctx);
    assert_eq!(endpoints_ips(&pruned), vec![(s(&["10.244.0.3"]), s(&[]))]);

    let untouched = prune_endpoints(&TopologyPolicy::PassThrough, &source, ctx);
    assert_eq!(untouched, source);
}

fn with_annotations<T>(
    mut obj: T,
    meta: impl Fn(&mut T) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    pairs: &[(&str, &str)],
) -> T {
    meta(&mut obj).annotations = Some(labels(pairs));
    obj
}

#[test]
fn kubernetes_endpoints_rewritten_to_the_local_cache() {
    let nodes = cluster();
    let on = PruneContext { local: nodes.get("n1"), nodes: &nodes, rewrite_local_apiserver: true };
    let off = PruneContext { rewrite_local_apiserver: false, ..on };
    let announce = [(keys::LOCAL_ENDPOINT_ANNOTATION, "169.254.0.2"), (keys::LOCAL_PORT_ANNOTATION, "51003")];
    let apiserver = endpoints(
        keys::KUBERNETES_SERVICE_NAMESPACE,
        keys::KUBERNETES_SERVICE_NAME,
        &[(&[Ep { ip: "10.244.9.1", node: None, ready: None }], &[])],
    );
    let announced = with_annotations(apiserver.clone(), |e| &mut e.metadata, &announce);

    let rewritten = prune_endpoints(&TopologyPolicy::PassThrough, &announced, on);
    let want = k8s_openapi::api::core::v1::Endpoints {
        metadata: announced.metadata.clone(),
        subsets: Some(vec![k8s_openapi::api::core::v1::EndpointSubset {
            addresses: Some(vec![address("169.254.0.2", None)]),
            not_ready_addresses: None,
            ports: Some(vec![k8s_openapi::api::core::v1::EndpointPort {
                name: Some(keys::KUBERNETES_SERVICE_PORT_NAME.into()),
                port: 51003,
                protocol: Some("TCP".into()),
                app_protocol: None,
            }]),
        }]),
    };
    assert_eq!(rewritten, want);
    // the rewrite wins over a topology policy: the local cache is local by definition
    assert_eq!(prune_endpoints(&policy(any_keys(r#"["unit"]"#)), &announced, on), want);

    assert_eq!(prune_endpoints(&TopologyPolicy::PassThrough, &announced, off), announced, "out of cluster: no rewrite");
    assert_eq!(prune_endpoints(&TopologyPolicy::PassThrough, &apiserver, on), apiserver, "no annotations: no rewrite");
    for bad in [
        [(keys::LOCAL_ENDPOINT_ANNOTATION, "not-an-ip"), (keys::LOCAL_PORT_ANNOTATION, "51003")],
        [(keys::LOCAL_ENDPOINT_ANNOTATION, "169.254.0.2"), (keys::LOCAL_PORT_ANNOTATION, "70000")],
        [(keys::LOCAL_ENDPOINT_ANNOTATION, "169.254.0.2"), (keys::LOCAL_PORT_ANNOTATION, "0")],
        [(keys::LOCAL_ENDPOINT_ANNOTATION, "169.254.0.2"), (keys::LOCAL_PORT_ANNOTATION, "https")],
        // routable addresses: the traffic (and tokens) would leave the node
        [(keys::LOCAL_ENDPOINT_ANNOTATION, "10.0.0.9"), (keys::LOCAL_PORT_ANNOTATION, "6443")],
        [(keys::LOCAL_ENDPOINT_ANNOTATION, "203.0.113.7"), (keys::LOCAL_PORT_ANNOTATION, "443")],
        [(keys::LOCAL_ENDPOINT_ANNOTATION, "fd00::2"), (keys::LOCAL_PORT_ANNOTATION, "6443")],
        [(keys::LOCAL_ENDPOINT_ANNOTATION, "2001:db8::1"), (keys::LOCAL_PORT_ANNOTATION, "6443")],
    ] {
        let obj = with_annotations(apiserver.clone(), |e| &mut e.metadata, &bad);
        assert_eq!(prune_endpoints(&TopologyPolicy::PassThrough, &obj, on), obj, "{bad:?}");
    }
    let elsewhere =
        with_annotations(endpoints("kube-system", keys::KUBERNETES_SERVICE_NAME, &[]), |e| &mut e.metadata, &announce);
    assert_eq!(prune_endpoints(&TopologyPolicy::PassThrough, &elsewhere, on), elsewhere, "only default/kubernetes");
}

#[test]
fn kubernetes_slice_rewritten_by_label_not_name() {
    let nodes = cluster();
    let on = PruneContext { local: nodes.get("n1"), nodes: &nodes, rewrite_local_apiserver: true };
    let announce = [(keys::LOCAL_ENDPOINT_ANNOTATION, "fe80::2"), (keys::LOCAL_PORT_ANNOTATION, "6443")];
    let apiserver = with_annotations(
        slice(
            keys::KUBERNETES_SERVICE_NAMESPACE,
            "kubernetes-x8k2p",
            Some(keys::KUBERNETES_SERVICE_NAME),
            &[Ep { ip: "10.244.9.1", node: None, ready: None }],
        ),
        |s| &mut s.metadata,
        &announce,
    );
    let rewritten = &prune_service_slices(&TopologyPolicy::PassThrough, &[&apiserver], None, on)[0];
    assert_eq!(rewritten.metadata, apiserver.metadata);
    assert_eq!(rewritten.address_type, "IPv6");
    assert_eq!(slice_ips(rewritten), vec!["fe80::2".to_string()]);
    assert_eq!(
        rewritten.endpoints[0].conditions,
        Some(k8s_openapi::api::discovery::v1::EndpointConditions {
            ready: Some(true),
            serving: Some(true),
            terminating: Some(false)
        })
    );
    let port = &rewritten.ports.as_ref().unwrap()[0];
    assert_eq!(
        (port.name.as_deref(), port.port, port.protocol.as_deref()),
        (Some(keys::KUBERNETES_SERVICE_PORT_NAME), Some(6443), Some("TCP"))
    );

    // named after the apiserver Service but belonging to another Service: not the apiserver's slice
    let impostor = with_annotations(
        slice(
            keys::KUBERNETES_SERVICE_NAMESPACE,
            keys::KUBERNETES_SERVICE_NAME,
            Some("web"),
            &[ep("10.244.0.3", "n3")],
        ),
        |s| &mut s.metadata,
        &announce,
    );
    assert_eq!(prune_service_slices(&TopologyPolicy::PassThrough, &[&impostor], None, on)[0], impostor);
}

/// Where a slice of `default/kubernetes` takes its local-apiserver announcement from: its
/// own valid one, else the Endpoints `default/kubernetes`'s; nothing for other slices.
#[test]
fn kubernetes_slice_announcement_precedence_table() {
    let at = |ip: &str, port: i32| Some(LocalEndpoint { ip: ip.parse().unwrap(), port });
    let announce = |ip: &'static str, port: &'static str| {
        vec![(keys::LOCAL_ENDPOINT_ANNOTATION, ip), (keys::LOCAL_PORT_ANNOTATION, port)]
    };
    let apiserver_slice = |pairs: &[(&str, &str)]| {
        let s = slice(
            keys::KUBERNETES_SERVICE_NAMESPACE,
            keys::KUBERNETES_SERVICE_NAME,
            Some(keys::KUBERNETES_SERVICE_NAME),
            &[no_node("10.0.0.1")],
        );
        if pairs.is_empty() { s } else { with_annotations(s, |s| &mut s.metadata, pairs) }
    };
    let apiserver_endpoints = |namespace: &str, pairs: &[(&str, &str)]| {
        let e = endpoints(namespace, keys::KUBERNETES_SERVICE_NAME, &[(&[no_node("10.0.0.1")], &[])]);
        if pairs.is_empty() { e } else { with_annotations(e, |e| &mut e.metadata, pairs) }
    };
    let own = announce("169.254.0.1", "443");
    let theirs = announce("169.254.0.2", "51003");
    let bad_port = announce("169.254.0.3", "https");
    let only_ip = vec![(keys::LOCAL_ENDPOINT_ANNOTATION, "169.254.0.4")];
    let default = keys::KUBERNETES_SERVICE_NAMESPACE;
    #[rustfmt::skip]
    let cases: Vec<(&str, EndpointSlice, Option<Endpoints>, Option<LocalEndpoint>)> = vec![
        ("neither announces", apiserver_slice(&[]), Some(apiserver_endpoints(default, &[])), None),
        ("no Endpoints cached", apiserver_slice(&[]), None, None),
        ("only the slice", apiserver_slice(&own), Some(apiserver_endpoints(default, &[])), at("169.254.0.1", 443)),
        ("only the Endpoints", apiserver_slice(&[]), Some(apiserver_endpoints(default, &theirs)), at("169.254.0.2", 51003)),
        ("both: the slice's wins", apiserver_slice(&own), Some(apiserver_endpoints(default, &theirs)), at("169.254.0.1", 443)),
        ("malformed on the slice: the Endpoints'", apiserver_slice(&bad_port), Some(apiserver_endpoints(default, &theirs)), at("169.254.0.2", 51003)),
        ("half an announcement on the slice: the Endpoints'", apiserver_slice(&only_ip), Some(apiserver_endpoints(default, &theirs)), at("169.254.0.2", 51003)),
        ("malformed on the Endpoints", apiserver_slice(&[]), Some(apiserver_endpoints(default, &bad_port)), None),
        ("Endpoints of another namespace", apiserver_slice(&[]), Some(apiserver_endpoints("kube-system", &theirs)), None),
    ];
    for (name, s, e, want) in cases {
        assert_eq!(LocalEndpoint::for_slice(&s, e.as_ref()), want, "{name}");
    }
    // a slice of another Service never follows the apiserver's Endpoints, whatever its name
    let impostor = slice(keys::KUBERNETES_SERVICE_NAMESPACE, keys::KUBERNETES_SERVICE_NAME, Some("web"), &[]);
    assert_eq!(LocalEndpoint::for_slice(&impostor, Some(&apiserver_endpoints(default, &theirs))), None);
    let elsewhere = slice("kube-system", "kubernetes", Some(keys::KUBERNETES_SERVICE_NAME), &[]);
    assert_eq!(LocalEndpoint::for_slice(&elsewhere, Some(&apiserver_endpoints(default, &theirs))), None);
}

/// The slice `kubernetes` as the apiserver's reconciler writes it (no annotations) is
/// served as the local address the Endpoints announce: SuperEdge's `genLocalEndpointSliceV1`
/// object (one address, port "https"/TCP), with explicit ready conditions and the address
/// type of the announced IP.
#[test]
fn kubernetes_slice_rewritten_from_the_endpoints_announcement() {
    let nodes = cluster();
    let on = PruneContext { local: nodes.get("n1"), nodes: &nodes, rewrite_local_apiserver: true };
    let off = PruneContext { rewrite_local_apiserver: false, ..on };
    let announce = [(keys::LOCAL_ENDPOINT_ANNOTATION, "169.254.0.2"), (keys::LOCAL_PORT_ANNOTATION, "51003")];
    let apiserver_slice = slice(
        keys::KUBERNETES_SERVICE_NAMESPACE,
        keys::KUBERNETES_SERVICE_NAME,
        Some(keys::KUBERNETES_SERVICE_NAME),
        &[no_node("10.0.0.1"), no_node("10.0.0.2")],
    );
    let announced = with_annotations(
        endpoints(
            keys::KUBERNETES_SERVICE_NAMESPACE,
            keys::KUBERNETES_SERVICE_NAME,
            &[(&[no_node("10.0.0.1"), no_node("10.0.0.2")], &[])],
        ),
        |e| &mut e.metadata,
        &announce,
    );
    let want = EndpointSlice {
        metadata: apiserver_slice.metadata.clone(),
        address_type: "IPv4".into(),
        endpoints: vec![k8s_openapi::api::discovery::v1::Endpoint {
            addresses: vec!["169.254.0.2".into()],
            conditions: Some(k8s_openapi::api::discovery::v1::EndpointConditions {
                ready: Some(true),
                serving: Some(true),
                terminating: Some(false),
            }),
            ..Default::default()
        }],
        ports: Some(vec![k8s_openapi::api::discovery::v1::EndpointPort {
            name: Some("https".into()),
            port: Some(51003),
            protocol: Some("TCP".into()),
            app_protocol: None,
        }]),
    };
    let pruned = |ctx, e: Option<&Endpoints>| {
        prune_service_slices(&TopologyPolicy::PassThrough, &[&apiserver_slice], e, ctx).remove(0)
    };
    assert_eq!(pruned(on, Some(&announced)), want);
    assert_eq!(pruned(off, Some(&announced)), apiserver_slice, "out of cluster: no rewrite");
    assert_eq!(pruned(on, None), apiserver_slice, "no Endpoints: no rewrite");
    let filter = EndpointFilter::All;
    assert_eq!(
        slice_selection(&apiserver_slice, Some(&announced), &filter, on),
        Selection::LocalRewrite(LocalEndpoint { ip: "169.254.0.2".parse().unwrap(), port: 51003 })
    );
}

mod never_adds {
    //! (a) Pruning never adds an endpoint and never changes a kept one: the pruned list is
    //! an order-preserving subsequence of the original, and everything else is untouched.

    use proptest::prelude::*;

    use super::*;

    fn arb_labels() -> impl Strategy<Value = Labels> {
        prop::collection::btree_map(
            prop::sample::select(vec!["unit", "zone", "rack"]),
            prop::sample::select(vec!["a", "b", ""]),
            0..=3,
        )
        .prop_map(|m| m.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    fn arb_policy() -> impl Strategy<Value = TopologyPolicy> {
        let key = || prop::sample::select(vec!["unit", "zone", "rack", "*"]).prop_map(str::to_string);
        prop::collection::vec(key(), 0..4).prop_flat_map(|keys| {
            let json = serde_json::to_string(&keys).expect("strings serialise");
            let any = vec![(keys::TOPOLOGY_KEYS_ANNOTATION, json.clone())];
            let mut ordered = any.clone();
            ordered.push((keys::TOPOLOGY_MODE_ANNOTATION, "ordered".to_string()));
            prop_oneof![Just(any), Just(ordered)].prop_filter_map("wildcard not last", |a| {
                let map: BTreeMap<String, String> = a.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
                TopologyPolicy::from_annotations(Some(&map)).ok()
            })
        })
    }

    fn arb_eps() -> impl Strategy<Value = Vec<(u8, Option<String>, Option<bool>)>> {
        prop::collection::vec(
            (
                any::<u8>(),
                prop::option::weighted(
                    0.9,
                    prop::sample::select(vec!["n0", "n1", "n2", "n3", "ghost"]).prop_map(str::to_string),
                ),
                prop::option::of(any::<bool>()),
            ),
            0..8,
        )
    }

    fn is_subsequence<T: PartialEq>(small: &[T], big: &[T]) -> bool {
        let mut it = big.iter();
        small.iter().all(|x| it.any(|y| y == x))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn pruning_only_removes(
            nodes in prop::collection::btree_map(prop::sample::select(vec!["n0", "n1", "n2", "n3"]).prop_map(str::to_string), arb_labels(), 0..4),
            local in prop::sample::select(vec!["n0", "n1", "nobody"]),
            policy in arb_policy(),
            slice_eps in prop::collection::vec(arb_eps(), 1..4),
            endpoint_eps in arb_eps(),
        ) {
            let ctx = PruneContext { local: nodes.get(local), nodes: &nodes, rewrite_local_apiserver: false };
            let ips: Vec<Vec<String>> = slice_eps.iter().map(|eps| eps.iter().map(|(ip, _, _)| format!("10.244.0.{ip}")).collect()).collect();
            let slices: Vec<_> = slice_eps.iter().zip(&ips).enumerate().map(|(i, (eps, ips))| {
                let eps: Vec<Ep<'_>> = eps.iter().zip(ips).map(|((_, n, r), ip)| Ep { ip, node: n.as_deref(), ready: *r }).collect();
                slice("ns", &format!("s{i}"), Some("svc"), &eps)
            }).collect();
            let refs: Vec<_> = slices.iter().collect();
            for (before, after) in slices.iter().zip(prune_service_slices(&policy, &refs, None, ctx)) {
                prop_assert!(is_subsequence(&after.endpoints, &before.endpoints));
                prop_assert_eq!(&after.metadata, &before.metadata);
                prop_assert_eq!(&after.ports, &before.ports);
                prop_assert_eq!(&after.address_type, &before.address_type);
            }

            let ep_ips: Vec<String> = endpoint_eps.iter().map(|(ip, _, _)| format!("10.244.1.{ip}")).collect();
            let all: Vec<Ep<'_>> = endpoint_eps.iter().zip(&ep_ips).map(|((_, n, r), ip)| Ep { ip, node: n.as_deref(), ready: *r }).collect();
            let (ready, not_ready): (Vec<_>, Vec<_>) = all.into_iter().partition(|e| e.ready != Some(false));
            let source = endpoints("ns", "svc", &[(&ready, &not_ready), (&not_ready, &ready)]);
            let pruned = prune_endpoints(&policy, &source, ctx);
            prop_assert_eq!(&pruned.metadata, &source.metadata);
            // subsets are only ever dropped whole (when emptied), never reordered or edited
            let source_subsets = source.subsets.clone().unwrap_or_default();
            let mut remaining = source_subsets.iter();
            for subset in pruned.subsets.iter().flatten() {
                let original = remaining.find(|s| s.ports == subset.ports && {
                    let ok = |a: &Option<Vec<k8s_openapi::api::core::v1::EndpointAddress>>, b: &Option<Vec<k8s_openapi::api::core::v1::EndpointAddress>>| {
                        is_subsequence(a.as_deref().unwrap_or_default(), b.as_deref().unwrap_or_default())
                    };
                    ok(&subset.addresses, &s.addresses) && ok(&subset.not_ready_addresses, &s.not_ready_addresses)
                });
                prop_assert!(original.is_some(), "pruned subset {:?} is not a pruning of the source", subset);
            }
        }
    }
}

#[test]
fn only_node_local_addresses_are_local_endpoints() {
    use crate::topology::local_endpoint::is_node_local;
    for local in ["127.0.0.1", "127.10.0.2", "169.254.20.11", "169.254.0.2", "::1", "fe80::2"] {
        assert!(is_node_local(local.parse().unwrap()), "{local}");
    }
    for routable in ["10.0.0.9", "192.168.1.1", "203.0.113.7", "0.0.0.0", "fd00::2", "2001:db8::1", "::"] {
        assert!(!is_node_local(routable.parse().unwrap()), "{routable}");
    }
}
