//! The cache fed objects directly: staging until the first full sync, exact served change
//! sets for each kind of input, relists (as the watch helper delivers them: the objects
//! listed, a delete for each one gone) and restores reduced to the real differences.

use listwatch::{ChangeKind, ListOptions, LogConfig, WatchOptions};
use serde_json::{Value, json};

use super::*;
use edgegrid_testing::objects::*;
use unit_link::stream::Stream;

const LOG: LogConfig = LogConfig { history_limit: 1000, watch_buffer: 1000 };

fn cache() -> Cache {
    Cache::new("n1", false, LOG, 100)
}

fn apply(cache: &mut Cache, inputs: impl IntoIterator<Item = Input>) -> Vec<(Kind, ChangeKind)> {
    inputs.into_iter().flat_map(|i| cache.apply(i).expect("valid input").served).collect()
}

/// Every stream listed with these objects, in the order a wrapper's watchers might.
fn full_sync(objects: Vec<Object>) -> Vec<Input> {
    let mut inputs: Vec<Input> = Stream::ALL.iter().map(|s| Input::Begin(*s)).collect();
    inputs.extend(objects.into_iter().map(Input::Upsert));
    inputs.extend(Stream::ALL.iter().map(|s| Input::Done(*s)));
    inputs
}

/// n1 (local) and n2 in unit a, n3 in unit b; `web` is unit-scoped with endpoints in
/// both units, `plain` has no annotation.
fn two_units() -> Vec<Object> {
    vec![
        Object::LocalNode(node_object("n1", &[("unit", "a")])),
        Object::remote_node("n1", &[("unit", "stale")]),
        Object::remote_node("n2", &[("unit", "a")]),
        Object::remote_node("n3", &[("unit", "b")]),
        service_object("web", Some(r#"["unit"]"#)).into(),
        service_object("plain", None).into(),
        slice_object("web-1", "web", &[("10.0.0.1", "n1"), ("10.0.0.3", "n3")]).into(),
        slice_object("web-2", "web", &[("10.0.0.2", "n2")]).into(),
        slice_object("plain-1", "plain", &[("10.0.0.5", "n3")]).into(),
        endpoints_object("web", &[("10.0.0.1", "n1"), ("10.0.0.2", "n2"), ("10.0.0.3", "n3")]).into(),
    ]
}

fn served(cache: &Cache, kind: Kind, name: &str) -> Option<Value> {
    cache.log().get(&kind, &("ns".into(), name.into())).map(|o| o.value())
}

fn served_ips(cache: &Cache, kind: Kind, name: &str) -> Vec<String> {
    served(cache, kind, name).map(|v| ips(&v)).unwrap_or_default()
}

fn synced() -> Cache {
    let mut cache = cache();
    apply(&mut cache, full_sync(two_units()));
    cache
}

#[test]
fn nothing_is_served_until_every_stream_has_listed() {
    let mut cache = cache();
    let mut inputs = full_sync(two_units());
    let last = inputs.pop().expect("inputs");
    assert_eq!(apply(&mut cache, inputs), vec![], "staged, not served");
    assert_eq!(cache.serving(), ViewSource::Nothing);
    assert_eq!(cache.log().len(&Kind::EndpointSlices), 0);
    let served = apply(&mut cache, [last]);
    assert_eq!(cache.serving(), ViewSource::Upstream);
    let mut kinds: Vec<Kind> = served
        .iter()
        .map(|(k, c)| {
            assert_eq!(*c, ChangeKind::Added);
            *k
        })
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        vec![
            Kind::Services,
            Kind::Services,
            Kind::EndpointSlices,
            Kind::EndpointSlices,
            Kind::EndpointSlices,
            Kind::Endpoints,
            Kind::Nodes
        ]
    );
}

#[test]
fn each_unit_sees_only_its_endpoints_and_unannotated_services_pass_whole() {
    let cache = synced();
    assert_eq!(served_ips(&cache, Kind::EndpointSlices, "web-1"), vec!["10.0.0.1"]);
    assert_eq!(served_ips(&cache, Kind::EndpointSlices, "web-2"), vec!["10.0.0.2"]);
    assert_eq!(served_ips(&cache, Kind::EndpointSlices, "plain-1"), vec!["10.0.0.5"]);
    assert_eq!(served_ips(&cache, Kind::Endpoints, "web"), vec!["10.0.0.1", "10.0.0.2"]);

    let mut other_unit = Cache::new("n3", false, LOG, 100);
    let mut objects = two_units();
    objects[0] = Object::LocalNode(node_object("n3", &[("unit", "b")]));
    apply(&mut other_unit, full_sync(objects));
    assert_eq!(served_ips(&other_unit, Kind::EndpointSlices, "web-1"), vec!["10.0.0.3"]);
    assert_eq!(served_ips(&other_unit, Kind::EndpointSlices, "web-2"), Vec::<String>::new(), "served empty");
    assert_eq!(served_ips(&other_unit, Kind::Endpoints, "web"), vec!["10.0.0.3"]);
    // only the local node is served as a Node
    assert_eq!(other_unit.log().len(&Kind::Nodes), 1);
    assert!(other_unit.log().get(&Kind::Nodes, &(String::new(), "n3".into())).is_some());
}

#[test]
fn served_objects_are_upstream_objects_without_managed_fields() {
    let mut cache = cache();
    let mut objects = two_units();
    let Object::Slice(slice) = &mut objects[8] else { panic!("fixture order") };
    slice.metadata.managed_fields = Some(vec![Default::default()]);
    apply(&mut cache, full_sync(objects));
    let value = served(&cache, Kind::EndpointSlices, "plain-1").expect("served");
    assert_eq!(value["metadata"].get("managedFields"), None);
    assert_eq!(value["apiVersion"], json!("discovery.k8s.io/v1"));
    assert_eq!(value["kind"], json!("EndpointSlice"));
    assert_eq!(value["metadata"]["labels"]["kubernetes.io/service-name"], json!("plain"));
}

#[test]
fn each_input_serves_exactly_the_objects_whose_pruned_form_changed() {
    use ChangeKind::*;
    use Kind::*;
    let mut cache = synced();
    // a remote node joins unit a: only the objects with endpoints on it
    assert_eq!(
        apply(&mut cache, [Input::Upsert(Object::remote_node("n3", &[("unit", "a")]))]),
        vec![(EndpointSlices, Modified), (Endpoints, Modified)]
    );
    assert_eq!(served_ips(&cache, EndpointSlices, "web-1"), vec!["10.0.0.1", "10.0.0.3"]);
    // a remote label change that changes nothing
    assert_eq!(apply(&mut cache, [Input::Upsert(Object::remote_node("n3", &[("unit", "a"), ("x", "y")]))]), vec![]);
    // the local node moves to unit b: every topology-aware object, and the Node itself
    assert_eq!(
        apply(&mut cache, [Input::Upsert(Object::LocalNode(node_object("n1", &[("unit", "b")])))]),
        vec![(EndpointSlices, Modified), (EndpointSlices, Modified), (Endpoints, Modified), (Nodes, Modified)]
    );
    assert_eq!(served_ips(&cache, EndpointSlices, "web-1"), vec!["10.0.0.1"], "n1 alone in unit b");
    assert_eq!(served_ips(&cache, EndpointSlices, "web-2"), Vec::<String>::new());
    // web stops being unit-scoped: its objects pass whole, and the Service changes
    assert_eq!(
        apply(&mut cache, [Input::Upsert(service_object("web", None).into())]),
        vec![(EndpointSlices, Modified), (EndpointSlices, Modified), (Endpoints, Modified), (Services, Modified)]
    );
    // a node is deleted while the policy passes everything: nothing to re-prune
    assert_eq!(apply(&mut cache, [Input::Delete(Stream::RemoteNodes, (String::new(), "n2".into()))]), vec![]);
    // the local node's labels never come from the metadata stream
    assert_eq!(apply(&mut cache, [Input::Upsert(Object::remote_node("n1", &[("unit", "a")]))]), vec![]);
}

#[test]
fn a_new_upstream_version_of_the_same_form_is_not_served_again() {
    let mut cache = synced();
    let mut web1 = slice_object("web-1", "web", &[("10.0.0.1", "n1"), ("10.0.0.9", "n3")]);
    web1.metadata.resource_version = Some("999".into());
    assert_eq!(apply(&mut cache, [Input::Upsert(web1.into())]), vec![], "only a pruned-away endpoint changed");
    let mut svc = service_object("plain", None);
    svc.metadata.resource_version = Some("1000".into());
    assert_eq!(apply(&mut cache, [Input::Upsert(svc.into())]), vec![]);
}

fn slice_names(cache: &Cache) -> Vec<String> {
    let listed = cache.log().list(&Kind::EndpointSlices, &ListOptions::default()).expect("list");
    listed.items.iter().map(|o| o.name().to_string()).collect()
}

/// A relist as the watch helper delivers it: every stream listed again, `plain-1` gone
/// (its delete sent before the list's end), `late-1` new.
#[test]
fn a_relist_serves_only_the_real_differences() {
    use ChangeKind::*;
    let mut cache = synced();
    let before = cache.log().current_rv();
    let mut objects = two_units();
    objects.retain(|o| !matches!(o, Object::Slice(s) if s.metadata.name.as_deref() == Some("plain-1")));
    objects.push(slice_object("late-1", "plain", &[("10.0.0.7", "n2")]).into());
    let mut relist = full_sync(objects);
    let done = relist.len() - Stream::ALL.len();
    relist.insert(done, Input::Delete(Stream::EndpointSlices, ("ns".into(), "plain-1".into())));
    let served = apply(&mut cache, relist);
    assert_eq!(served, vec![(Kind::EndpointSlices, Added), (Kind::EndpointSlices, Deleted)]);
    assert_eq!(cache.log().current_rv(), before + 2);
    assert_eq!(slice_names(&cache), vec!["late-1", "web-1", "web-2"]);
}

/// `Begin` and `Done` only mark a list: a list's end deletes nothing the list did not
/// report (the watch helper sends those deletes), whether or not it began, before the
/// first sync or after.
#[test]
fn a_done_alone_deletes_nothing() {
    let mut view = synced();
    let before = view.log().current_rv();
    let web1 = slice_object("web-1", "web", &[("10.0.0.1", "n1"), ("10.0.0.3", "n3")]);
    let relist =
        [Input::Begin(Stream::EndpointSlices), Input::Upsert(web1.into()), Input::Done(Stream::EndpointSlices)];
    assert_eq!(apply(&mut view, relist), vec![]);
    let empty_lists = Stream::ALL.into_iter().flat_map(|stream| [Input::Begin(stream), Input::Done(stream)]);
    assert_eq!(apply(&mut view, empty_lists.chain(Stream::ALL.map(Input::Done))), vec![]);
    assert_eq!(view.log().current_rv(), before);
    assert_eq!(slice_names(&view), vec!["plain-1", "web-1", "web-2"]);
    assert_eq!(view.log().len(&Kind::Nodes), 1);

    // staging: what was staged before a list is served at the first sync, unlisted or not
    let mut staging = cache();
    let first = [
        Input::Begin(Stream::Services),
        Input::Upsert(service_object("plain", None).into()),
        Input::Done(Stream::Services),
        Input::Begin(Stream::Services),
        Input::Done(Stream::Services),
    ];
    assert_eq!(apply(&mut staging, first), vec![]);
    let rest =
        Stream::ALL.into_iter().filter(|s| *s != Stream::Services).flat_map(|s| [Input::Begin(s), Input::Done(s)]);
    assert_eq!(apply(&mut staging, rest), vec![(Kind::Services, ChangeKind::Added)]);
    assert_eq!(staging.serving(), ViewSource::Upstream);
}

fn ids(ids: &[(&str, &str)]) -> Vec<ObjectId> {
    ids.iter().map(|(namespace, name)| (namespace.to_string(), name.to_string())).collect()
}

/// What each stream's watch starts from: the objects the cache serves or stages, and the
/// remote nodes topology knows (the local node's labels come from its own stream only).
#[test]
fn the_cache_tells_each_stream_what_it_holds() {
    let synced = synced();
    let want = Stream::ALL.map(|stream| match stream {
        Stream::Services => ids(&[("ns", "plain"), ("ns", "web")]),
        Stream::EndpointSlices => ids(&[("ns", "plain-1"), ("ns", "web-1"), ("ns", "web-2")]),
        Stream::Endpoints => ids(&[("ns", "web")]),
        Stream::RemoteNodes => ids(&[("", "n2"), ("", "n3")]),
        Stream::LocalNode => ids(&[("", "n1")]),
    });
    assert_eq!(Stream::ALL.map(|stream| synced.held(stream)), want);

    // restored, and partly staged: both
    let saved: Vec<(Kind, Value)> = synced.served_objects().map(|(k, o)| (k, o.value())).collect();
    let mut restored = cache();
    restored.restore(saved);
    apply(&mut restored, [Input::Upsert(slice_object("late-1", "plain", &[("10.0.0.7", "n2")]).into())]);
    assert_eq!(restored.serving(), ViewSource::Restored);
    let slices = ids(&[("ns", "late-1"), ("ns", "plain-1"), ("ns", "web-1"), ("ns", "web-2")]);
    assert_eq!(restored.held(Stream::EndpointSlices), slices);
    assert_eq!(restored.held(Stream::LocalNode), ids(&[("", "n1")]));
    assert_eq!(restored.held(Stream::RemoteNodes), ids(&[]), "a restored view has no topology");
}

#[test]
fn a_restored_view_is_served_until_the_first_sync_replaces_it_by_differences() {
    use ChangeKind::*;
    let saved: Vec<(Kind, Value)> = synced().served_objects().map(|(k, o)| (k, o.value())).collect();
    let mut cache = cache();
    assert_eq!(cache.restore(saved), 7);
    assert_eq!(cache.serving(), ViewSource::Restored);
    assert_eq!(served_ips(&cache, Kind::EndpointSlices, "web-1"), vec!["10.0.0.1"]);
    // upstream, meanwhile: plain-1 is gone and web-2 moved
    let mut objects = two_units();
    objects.retain(|o| !matches!(o, Object::Slice(s) if s.metadata.name.as_deref() == Some("plain-1")));
    objects.push(slice_object("web-2", "web", &[("10.0.0.8", "n2")]).into());
    let mut inputs = full_sync(objects);
    let last = inputs.pop().expect("inputs");
    assert_eq!(apply(&mut cache, inputs), vec![], "the restored view stays until every stream listed");
    assert_eq!(cache.serving(), ViewSource::Restored);
    let mut served = apply(&mut cache, [last]);
    served.sort_by_key(|(k, c)| (*k, format!("{c:?}")));
    assert_eq!(served, vec![(Kind::EndpointSlices, Deleted), (Kind::EndpointSlices, Modified)]);
    assert_eq!(cache.serving(), ViewSource::Upstream);
    assert_eq!(served_ips(&cache, Kind::EndpointSlices, "web-2"), vec!["10.0.0.8"]);
    assert_eq!(cache.restore(vec![]), 0, "never after a sync");
}

#[test]
fn unnamed_objects_are_refused_and_change_nothing() {
    let mut cache = synced();
    let before = cache.log().current_rv();
    let mut nameless = slice_object("x", "web", &[]);
    nameless.metadata.name = None;
    assert_eq!(
        cache.apply(Input::Upsert(nameless.into())),
        Err(CacheError::Unnamed { stream: Stream::EndpointSlices })
    );
    assert_eq!(cache.log().current_rv(), before);
}

#[test]
fn same_form_ignores_only_volatile_metadata() {
    let base = json!({"kind": "EndpointSlice", "metadata": {"name": "a", "resourceVersion": "1", "labels": {"x": "y"}},
        "endpoints": [{"addresses": ["10.0.0.1"]}]});
    let mut volatile = base.clone();
    volatile["metadata"]["resourceVersion"] = json!("2");
    volatile["metadata"]["generation"] = json!(4);
    volatile["metadata"]["annotations"] = json!({"endpoints.kubernetes.io/last-change-trigger-time": "t"});
    assert!(same_form(&base, &volatile));
    let mut label = base.clone();
    label["metadata"]["labels"]["x"] = json!("z");
    assert!(!same_form(&base, &label));
    let mut body = base.clone();
    body["endpoints"] = json!([]);
    assert!(!same_form(&base, &body));
    let mut extra = base.clone();
    extra["ports"] = json!([]);
    assert!(!same_form(&base, &extra));
}

// ---- the `default/kubernetes` rewrite ----------------------------------------------------

/// The apiserver's slice `kubernetes` and Endpoints as its reconciler writes them: no
/// annotation on the slice; `announce` puts `(ip, port)` on the Endpoints.
fn apiserver_objects(announce: Option<(&str, &str)>) -> (Object, Object) {
    let slice: k8s_openapi::api::discovery::v1::EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.100"], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
    }))
    .expect("valid slice");
    (slice.into(), apiserver_endpoints(announce))
}

fn apiserver_endpoints(announce: Option<(&str, &str)>) -> Object {
    let annotations = announce
        .map_or(json!({}), |(ip, port)| json!({"superedge.io/local-endpoint": ip, "superedge.io/local-port": port}));
    let endpoints: k8s_openapi::api::core::v1::Endpoints = serde_json::from_value(json!({
        "metadata": {"name": "kubernetes", "namespace": "default", "annotations": annotations},
        "subsets": [{"addresses": [{"ip": "10.0.0.100"}], "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}],
    }))
    .expect("valid endpoints");
    endpoints.into()
}

/// A cache synced with `two_units` and the apiserver's objects.
fn synced_with_apiserver(in_cluster: bool, announce: Option<(&str, &str)>) -> Cache {
    let mut cache = Cache::new("n1", in_cluster, LOG, 100);
    let (slice, endpoints) = apiserver_objects(announce);
    let mut objects = two_units();
    objects.extend([slice, endpoints]);
    apply(&mut cache, full_sync(objects));
    cache
}

/// The watch events (type, name, object) a watcher of `kind` started at `rv` receives.
fn events_since(cache: &Cache, kind: Kind, rv: u64) -> Vec<(ChangeKind, String, Value)> {
    let opts = WatchOptions { resource_version: Some(rv), ..Default::default() };
    let start = cache.log().watch(&kind, &opts).expect("watch");
    start.backlog.iter().map(|c| (c.kind, c.id.1.clone(), c.object.value())).collect()
}

fn apiserver_id() -> (String, String) {
    ("default".into(), "kubernetes".into())
}

/// The slice `kubernetes` as served: upstream's, at `rv`.
fn upstream_apiserver_slice(rv: u64) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"kubernetes.io/service-name": "kubernetes"},
            "resourceVersion": rv.to_string()},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.100"], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
    })
}

/// The slice `kubernetes` rewritten to the local apiserver `ip:port` (SuperEdge's
/// `genLocalEndpointSliceV1`: one address, port `https`/TCP), at `rv`.
fn local_apiserver_slice(address_type: &str, ip: &str, port: u16, rv: u64) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"kubernetes.io/service-name": "kubernetes"},
            "resourceVersion": rv.to_string()},
        "addressType": address_type,
        "endpoints": [{"addresses": [ip], "conditions": {"ready": true, "serving": true, "terminating": false}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    })
}

#[test]
fn the_apiserver_slice_follows_the_endpoints_annotations_with_a_watch_event_each() {
    use ChangeKind::*;
    let mut cache = synced_with_apiserver(true, None);
    let served_slice = |cache: &Cache| cache.log().get(&Kind::EndpointSlices, &apiserver_id()).map(|o| o.value());
    let rv = cache.log().current_rv();
    let slice_rv = served_slice(&cache).expect("served")["metadata"]["resourceVersion"].clone();
    assert_eq!(
        served_slice(&cache),
        Some(upstream_apiserver_slice(slice_rv.as_str().expect("rv").parse().expect("rv"))),
        "nothing announced: served as upstream"
    );

    // added: the slice did not change upstream, yet kube-proxy is told
    let served = apply(&mut cache, [Input::Upsert(apiserver_endpoints(Some(("169.254.0.2", "51003"))))]);
    assert_eq!(served, vec![(Kind::EndpointSlices, Modified), (Kind::Endpoints, Modified)]);
    let added = local_apiserver_slice("IPv4", "169.254.0.2", 51003, rv + 1);
    assert_eq!(events_since(&cache, Kind::EndpointSlices, rv), vec![(Modified, "kubernetes".into(), added.clone())]);
    assert_eq!(served_slice(&cache), Some(added));
    let endpoints = cache.log().get(&Kind::Endpoints, &apiserver_id()).expect("served").value();
    assert_eq!(
        endpoints["subsets"],
        json!([{"addresses": [{"ip": "169.254.0.2"}], "ports": [{"name": "https", "port": 51003, "protocol": "TCP"}]}])
    );

    // changed
    let rv = cache.log().current_rv();
    let served = apply(&mut cache, [Input::Upsert(apiserver_endpoints(Some(("fe80::2", "6443"))))]);
    assert_eq!(served, vec![(Kind::EndpointSlices, Modified), (Kind::Endpoints, Modified)]);
    let changed = local_apiserver_slice("IPv6", "fe80::2", 6443, rv + 1);
    assert_eq!(events_since(&cache, Kind::EndpointSlices, rv), vec![(Modified, "kubernetes".into(), changed)]);

    // the same announcement again (a resync, or another field changed): no event
    let rv = cache.log().current_rv();
    assert_eq!(apply(&mut cache, [Input::Upsert(apiserver_endpoints(Some(("fe80::2", "6443"))))]), vec![]);
    assert_eq!(cache.log().current_rv(), rv);

    // removed: back to the upstream slice
    let served = apply(&mut cache, [Input::Upsert(apiserver_endpoints(None))]);
    assert_eq!(served, vec![(Kind::EndpointSlices, Modified), (Kind::Endpoints, Modified)]);
    assert_eq!(
        events_since(&cache, Kind::EndpointSlices, rv),
        vec![(Modified, "kubernetes".into(), upstream_apiserver_slice(rv + 1))]
    );

    // announced, then the Endpoints deleted: the slice goes back too
    apply(&mut cache, [Input::Upsert(apiserver_endpoints(Some(("169.254.0.2", "51003"))))]);
    let rv = cache.log().current_rv();
    let served = apply(&mut cache, [Input::Delete(Stream::Endpoints, apiserver_id())]);
    assert_eq!(served, vec![(Kind::EndpointSlices, Modified), (Kind::Endpoints, Deleted)]);
    assert_eq!(
        events_since(&cache, Kind::EndpointSlices, rv),
        vec![(Modified, "kubernetes".into(), upstream_apiserver_slice(rv + 1))]
    );
}

#[test]
fn the_apiserver_slice_is_rewritten_from_the_first_sync_when_the_endpoints_announce() {
    let cache = synced_with_apiserver(true, Some(("169.254.0.2", "51003")));
    let served = cache.log().get(&Kind::EndpointSlices, &apiserver_id()).expect("served");
    let rv = served.resource_version();
    assert_eq!(served.value(), local_apiserver_slice("IPv4", "169.254.0.2", 51003, rv));
}

#[test]
fn out_of_cluster_the_endpoints_annotations_change_nothing_but_the_endpoints() {
    use ChangeKind::*;
    let mut cache = synced_with_apiserver(false, None);
    let before = cache.log().get(&Kind::EndpointSlices, &apiserver_id()).expect("served").value();
    let rv = cache.log().current_rv();
    for announce in [Some(("169.254.0.2", "51003")), Some(("fe80::2", "6443")), None] {
        let served = apply(&mut cache, [Input::Upsert(apiserver_endpoints(announce))]);
        assert_eq!(served, vec![(Kind::Endpoints, Modified)], "{announce:?}");
    }
    assert_eq!(events_since(&cache, Kind::EndpointSlices, rv), vec![]);
    assert_eq!(cache.log().get(&Kind::EndpointSlices, &apiserver_id()).expect("served").value(), before);
    let endpoints = cache.log().get(&Kind::Endpoints, &apiserver_id()).expect("served").value();
    assert_eq!(endpoints["subsets"][0]["addresses"], json!([{"ip": "10.0.0.100"}]), "never rewritten");
}
