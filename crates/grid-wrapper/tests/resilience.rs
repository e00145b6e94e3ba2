//! fake apiserver -> grid-wrapper -> unmodified kube-rs clients, over HTTP on 127.0.0.1,
//! when things go wrong: many watchers and one that stops reading; and the upstream
//! going away while downstream clients stay connected to the wrapper, in the three ways
//! it can come back: with its history (a link outage: the watches resume), without it (a
//! restart that lost it: 410, relist), or rebuilt with versions older than the wrapper's
//! (`FakeApiServer::stop` then `start_with` on the same port, the cluster recreated as
//! it was changed meanwhile: "too large resource version", relist). Each ends with the
//! clients holding exactly what a wrapper started afresh on the final upstream serves.
//!
//! The wrapper reaches its upstream through a [`Link`] that the tests cut: it models a
//! node losing its cloud link, and it keeps the wrapper's watches from reopening on a
//! fake apiserver that is shutting down (whose graceful shutdown would wait for them).

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use edgegrid_testing::objects::*;
use fake_apiserver::{FakeApiServer, ServerConfig};
use futures::{StreamExt, TryStreamExt};
use grid_wrapper::metrics::KindLabel;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One EndpointSlice event as a client saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    r#type: String,
    name: String,
    ips: Vec<String>,
    rv: u64,
}

impl Seen {
    fn of(r#type: &str, slice: &EndpointSlice) -> Self {
        Self {
            r#type: r#type.into(),
            name: slice.metadata.name.clone().unwrap_or_default(),
            ips: value_ips(slice),
            rv: slice.metadata.resource_version.as_deref().and_then(|rv| rv.parse().ok()).unwrap_or_default(),
        }
    }

    /// What a test expects of it (the version is only checked for order).
    fn what(&self) -> (String, String, Vec<String>) {
        (self.r#type.clone(), self.name.clone(), self.ips.clone())
    }
}

fn expect(r#type: &str, name: &str, ips: &[&str]) -> (String, String, Vec<String>) {
    (r#type.into(), name.into(), ips.iter().map(|s| s.to_string()).collect())
}

fn assert_versions_increase(events: &[Seen], who: &str) {
    for pair in events.windows(2) {
        assert!(pair[0].rv < pair[1].rv, "{who}: resourceVersions not strictly increasing: {pair:?}");
    }
}

/// What one downstream watcher has received so far; `Err` once its stream failed.
type Received = Arc<Mutex<Result<Vec<Seen>, String>>>;

/// Follows a raw kube-rs watch (bookmarks skipped) into `received`.
fn follow_watch(
    mut events: impl futures::Stream<Item = Result<WatchEvent<EndpointSlice>, kube::Error>> + Unpin + Send + 'static,
) -> (Received, tokio::task::JoinHandle<()>) {
    let received: Received = Arc::new(Mutex::new(Ok(Vec::new())));
    let task = tokio::spawn({
        let received = received.clone();
        async move {
            loop {
                let seen = match events.try_next().await {
                    Ok(Some(WatchEvent::Added(s))) => Seen::of("ADDED", &s),
                    Ok(Some(WatchEvent::Modified(s))) => Seen::of("MODIFIED", &s),
                    Ok(Some(WatchEvent::Deleted(s))) => Seen::of("DELETED", &s),
                    Ok(Some(WatchEvent::Bookmark(_))) => continue,
                    Ok(Some(WatchEvent::Error(status))) => {
                        *received.lock().unwrap() = Err(format!("ERROR event {status:?}"));
                        return;
                    }
                    Ok(None) => {
                        *received.lock().unwrap() = Err("the watch ended".into());
                        return;
                    }
                    Err(error) => {
                        *received.lock().unwrap() = Err(format!("watch failed: {error}"));
                        return;
                    }
                };
                if let Ok(events) = received.lock().unwrap().as_mut() {
                    events.push(seen);
                }
            }
        }
    });
    (received, task)
}

fn received(of: &Received) -> Vec<Seen> {
    of.lock().unwrap().clone().unwrap_or_else(|e| panic!("a downstream watcher failed: {e}"))
}

/// The large slice `bulk-1` in its `version`: one endpoint, whose address changes with
/// every version, and a large `last-applied-configuration` annotation (as `kubectl apply`
/// leaves on objects), so each version is a served change of `BULK_BYTES` or more.
fn bulk_slice(version: usize) -> EndpointSlice {
    let ip = format!("10.2.{}.{}", version / 250, version % 250);
    let mut slice = slice_object("bulk-1", "bulk", &[(&ip, "n2")]);
    slice.metadata.namespace = Some("bulk".into());
    let applied = format!("{version:08}").repeat(BULK_BYTES / 8);
    slice.metadata.annotations = Some([(LAST_APPLIED.to_string(), applied)].into());
    slice
}

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
const BULK_BYTES: usize = 64 * 1024;

/// The slice a cycle of rounds adds and removes, and its address on n2.
fn extra_slice(cycle: usize) -> (String, String) {
    (format!("web-x{cycle}"), format!("10.1.{}.{}", cycle / 200, cycle % 200))
}

/// Bytes a peer that never reads can leave buffered between the wrapper's watch stream
/// and itself: its own receive buffer, the wrapper's socket send buffer (which Linux
/// grows up to `tcp_wmem`'s maximum) and a generous allowance for the HTTP server's
/// write buffer.
fn stalled_capacity(receive_buffer: usize) -> usize {
    let send_max = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem")
        .ok()
        .and_then(|s| s.split_whitespace().nth(2).and_then(|m| m.parse().ok()))
        .unwrap_or(16 << 20);
    receive_buffer + send_max + (1 << 20)
}

/// Lines a watch holds besides the socket: the stream's channel (64 lines in
/// `listwatch::watch_stream`), the line its sender is blocked on, the live feed
/// (`watch_buffer` changes) and the change that overflows it, plus a margin.
const STALLED_LINES: usize = 64 + 1 + WATCH_BUFFER + 1 + 26;
const WATCH_BUFFER: usize = 8;
/// Filler changes per round. A round then commits at most 4 + 3 changes (a relabel of n3
/// serves web-1, web-x and Endpoints `web`), and a fast watcher that has received the
/// previous round's last slice event has at most one change left before it (Endpoints
/// `web`, if committed after that slice): 8 at most, which `WATCH_BUFFER` holds, so the
/// 50 cannot lag however their tasks are scheduled.
const FILLER_PER_ROUND: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_watchers_get_every_event_in_order_while_a_stalled_one_is_cut_off_with_410() {
    let (server, upstream) = two_unit_cluster().await;
    create_namespace(&upstream, "bulk").await;
    let mut bulk_service = service_object("bulk", None);
    bulk_service.metadata.namespace = Some("bulk".into());
    Api::namespaced(upstream.clone(), "bulk")
        .create(&Default::default(), &bulk_service)
        .await
        .expect("create bulk service");
    let mut version = 0;
    Api::namespaced(upstream.clone(), "bulk").create(&Default::default(), &bulk_slice(version)).await.expect("bulk");
    let filler_size = serde_json::to_vec(&bulk_slice(0)).expect("serialisable").len();

    let mut small_buffer = config("n1");
    small_buffer.log.watch_buffer = WATCH_BUFFER;
    let wrapper = RunningWrapper::start(&server.url(), small_buffer).await;
    let all: Api<EndpointSlice> = Api::all(wrapper.client.clone());
    let in_ns: Api<EndpointSlice> = Api::namespaced(wrapper.client.clone(), "ns");
    let list = all.list(&ListParams::default()).await.expect("list");
    let rv = list.metadata.resource_version.clone().expect("list version");
    let mut model: BTreeMap<String, Vec<String>> = slice_ips(&list.items).into_iter().collect();

    // 50 watchers of namespace `ns` (the large filler slices live in `bulk`, so 50 clients
    // do not each parse megabytes of them; their watches still take every change of the
    // wrapper's log off the shared live feed, filler included)
    let mut watchers = Vec::new();
    for _ in 0..50 {
        let events = in_ns.watch(&WatchParams::default(), &rv).await.expect("watch").boxed();
        watchers.push(follow_watch(events));
    }
    // and one cluster-wide watcher that never reads, with a receive buffer as small as
    // the kernel allows
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let receive_buffer = socket.recv_buffer_size().expect("SO_RCVBUF") as usize;
    let mut stalled = socket.connect(wrapper.addr).await.expect("connect");
    let request = format!(
        "GET /apis/discovery.k8s.io/v1/endpointslices?watch=true&resourceVersion={rv} HTTP/1.0\r\nHost: {}\r\n\r\n",
        wrapper.addr
    );
    stalled.write_all(request.as_bytes()).await.expect("send the watch request");
    let gauge = wrapper.wrapper.metrics().watchers.get_or_create(&KindLabel { kind: "endpointslices" }).clone();
    eventually("51 open EndpointSlice watches", || {
        let open = gauge.get();
        async move { (open == 51).then_some(()) }
    })
    .await;

    let fillers = stalled_capacity(receive_buffer).div_ceil(filler_size) + STALLED_LINES;
    let rounds = fillers.div_ceil(FILLER_PER_ROUND).next_multiple_of(4);
    let bulk: Api<EndpointSlice> = Api::namespaced(upstream.clone(), "bulk");
    let upstream_ns: Api<EndpointSlice> = Api::namespaced(upstream.clone(), "ns");
    let mut expected = Vec::new();
    for round in 0..rounds {
        for _ in 0..FILLER_PER_ROUND {
            version += 1;
            let next = bulk_slice(version);
            let patch = json!({"metadata": {"annotations": next.metadata.annotations}, "endpoints": next.endpoints});
            bulk.patch("bulk-1", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch bulk-1");
        }
        // a cycle of four: n3 joins unit a, a slice with an endpoint there appears, n3
        // leaves, the slice goes
        let (extra, extra_ip) = extra_slice(round - round % 4);
        match round % 4 {
            0 => {
                relabel(&upstream, "n3", "a").await;
                expected.push(expect("MODIFIED", "web-1", &["10.0.0.1", "10.0.0.3"]));
            }
            1 => {
                let slice = slice_object(&extra, "web", &[(&extra_ip, "n2"), ("10.0.0.9", "n3")]);
                upstream_ns.create(&Default::default(), &slice).await.expect("create slice");
                expected.push(expect("ADDED", &extra, &[&extra_ip, "10.0.0.9"]));
            }
            2 => {
                relabel(&upstream, "n3", "b").await;
                expected.push(expect("MODIFIED", "web-1", &["10.0.0.1"]));
                expected.push(expect("MODIFIED", &extra, &[&extra_ip]));
            }
            _ => {
                upstream_ns.delete(&extra, &DeleteParams::default()).await.expect("delete slice");
                expected.push(expect("DELETED", &extra, &[&extra_ip]));
            }
        }
        // every fast watcher has taken this round's changes before the next round
        let want = expected.len();
        for (received_by, _) in &watchers {
            eventually("a watcher to receive the round's events", || {
                let count = received(received_by).len();
                async move { (count >= want).then_some(()) }
            })
            .await;
        }
    }
    // a whole number of cycles: only the large slice differs from the first list
    model.insert("bulk-1".into(), value_ips(&bulk_slice(version)));

    // the 50: exactly the changes, in order, with increasing versions, and still open
    for (i, (received_by, task)) in watchers.iter().enumerate() {
        let events = received(received_by);
        assert_eq!(events.iter().map(Seen::what).collect::<Vec<_>>(), expected, "watcher {i}");
        assert_versions_increase(&events, &format!("watcher {i}"));
        assert!(!task.is_finished(), "watcher {i} ended");
    }
    let first = received(&watchers[0].0);
    for (i, (received_by, _)) in watchers.iter().enumerate() {
        assert_eq!(received(received_by), first, "watcher {i} saw other versions than watcher 0");
    }

    // the stalled watcher reads at last: what fitted in the buffers, in order, then 410
    let mut raw = Vec::new();
    within("the stalled watch to end", stalled.read_to_end(&mut raw)).await.expect("read");
    let response = RawResponse::parse(&raw);
    assert_eq!(response.status, 200);
    let lines: Vec<Value> = response.body.lines().map(json).collect();
    let (last, events) = lines.split_last().expect("at least the ERROR event");
    assert_eq!(last["type"], "ERROR", "the stalled watch ended without an ERROR event");
    assert_eq!((last["object"]["code"].as_u64(), last["object"]["reason"].as_str()), (Some(410), Some("Expired")));
    let events: Vec<(Seen, String)> = events
        .iter()
        .map(|line| {
            let slice: EndpointSlice = serde_json::from_value(line["object"].clone()).expect("an EndpointSlice");
            let namespace = slice.metadata.namespace.clone().unwrap_or_default();
            (Seen::of(line["type"].as_str().expect("type"), &slice), namespace)
        })
        .collect();
    let seen: Vec<Seen> = events.iter().map(|(s, _)| s.clone()).collect();
    assert_versions_increase(&seen, "the stalled watcher");
    let in_ns_seen: Vec<Seen> = events.iter().filter(|(_, ns)| ns == "ns").map(|(s, _)| s.clone()).collect();
    assert_eq!(in_ns_seen, first[..in_ns_seen.len()], "the stalled watcher's events are a prefix of everyone's");
    assert!(seen.len() < fillers + expected.len(), "the stalled watcher got every event: it was never cut off");

    // and relisting from there gives the current state
    assert_eq!(listed_slices(&wrapper.client).await, model.into_iter().collect::<Vec<_>>());
    drop(server);
}

/// What one downstream node sees through the wrapper: the served slices as a kube-rs
/// reflector holds them and as a raw watch from the first list builds them, event by
/// event, each event checked against the state it applies to.
struct Downstream {
    reader: reflector::Store<EndpointSlice>,
    reflector: tokio::task::JoinHandle<()>,
    initial: Vec<(String, Vec<String>)>,
    watch: Received,
    watch_task: tokio::task::JoinHandle<()>,
}

impl Downstream {
    async fn connect(wrapper: &RunningWrapper) -> Self {
        let slices: Api<EndpointSlice> = Api::all(wrapper.client.clone());
        let (reader, writer) = reflector::store();
        let stream = reflector(writer, watcher(slices.clone(), watcher::Config::default())).default_backoff();
        let reflector = tokio::spawn(stream.for_each(|_| futures::future::ready(())));
        within("the reflector to sync", reader.wait_until_ready()).await.expect("reflector alive");
        let list = slices.list(&ListParams::default()).await.expect("list");
        let rv = list.metadata.resource_version.clone().expect("list version");
        let events = slices.watch(&WatchParams::default(), &rv).await.expect("watch").boxed();
        let (watch, watch_task) = follow_watch(events);
        Self { reader, reflector, initial: slice_ips(&list.items), watch, watch_task }
    }

    fn reflected(&self) -> Vec<(String, Vec<String>)> {
        let state: Vec<EndpointSlice> = self.reader.state().iter().map(|s| (**s).clone()).collect();
        slice_ips(&state)
    }

    /// The first list with every watch event applied; panics on an event that does not
    /// fit the state (ADDED for a present object, MODIFIED or DELETED for an absent one).
    fn watched(&self) -> Vec<(String, Vec<String>)> {
        let mut state: BTreeMap<String, Vec<String>> = self.initial.iter().cloned().collect();
        for event in received(&self.watch) {
            let present = state.contains_key(&event.name);
            match (event.r#type.as_str(), present) {
                ("ADDED", false) | ("MODIFIED", true) => {
                    state.insert(event.name, event.ips);
                }
                ("DELETED", true) => {
                    state.remove(&event.name);
                }
                _ => panic!("{event:?} does not fit the watched state {state:?}"),
            }
        }
        state.into_iter().collect()
    }

    /// Both views equal `want`, eventually; the raw watch is the one opened at the start.
    async fn until_both_show(&self, want: &[(String, Vec<String>)]) {
        eventually("the downstream views to converge", || async {
            (self.reflected() == want && self.watched() == want).then_some(())
        })
        .await;
        assert!(!self.reflector.is_finished() && !self.watch_task.is_finished(), "a downstream client stopped");
    }
}

/// Everything a wrapper serves but the local Node, comparable across wrappers: slices and
/// Endpoints by addresses, Services by name.
async fn served_state(client: &kube::Client) -> (Vec<(String, Vec<String>)>, Vec<(String, Vec<String>)>, Vec<String>) {
    let endpoints: Api<k8s_openapi::api::core::v1::Endpoints> = Api::all(client.clone());
    let mut endpoints: Vec<(String, Vec<String>)> = endpoints
        .list(&ListParams::default())
        .await
        .expect("list endpoints")
        .items
        .iter()
        .map(|e| (e.metadata.name.clone().unwrap_or_default(), value_ips(e)))
        .collect();
    endpoints.sort();
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::all(client.clone());
    let mut services: Vec<String> = services
        .list(&ListParams::default())
        .await
        .expect("list services")
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    services.sort();
    (listed_slices(client).await, endpoints, services)
}

/// The wrapper noticed that `stream`'s upstream watch failed.
async fn until_upstream_errors(wrapper: &RunningWrapper, stream: &'static str) {
    let errors =
        wrapper.wrapper.metrics().upstream_errors.get_or_create(&unit_link::metrics::StreamLabel { stream }).clone();
    eventually(&format!("the wrapper to see its upstream {stream} fail"), || {
        let failed = errors.get() > 0;
        async move { failed.then_some(()) }
    })
    .await;
}

/// While the upstream is unusable: lists are answered from the cache, the open watches
/// stay open, and a new watch is served (it gets a bookmark).
async fn serves_through_the_outage(
    wrapper: &RunningWrapper,
    downstream: &Downstream,
    before: &[(String, Vec<String>)],
) {
    assert_eq!(listed_slices(&wrapper.client).await, before, "a list during the outage");
    let slices: Api<EndpointSlice> = Api::all(wrapper.client.clone());
    let rv = slices.list(&ListParams::default()).await.expect("list").metadata.resource_version.expect("rv");
    let mut fresh = slices.watch(&WatchParams::default(), &rv).await.expect("watch during the outage").boxed();
    match within("a bookmark during the outage", fresh.try_next()).await {
        Ok(Some(WatchEvent::Bookmark(_))) => {}
        other => panic!("expected a BOOKMARK on a watch opened during the outage, got {other:?}"),
    }
    // (still open, and showing the last view: `until_both_show` checks both)
    downstream.until_both_show(before).await;
}

/// The wrapper under test ends with exactly what a wrapper started afresh on the final
/// upstream serves, and that is `want`; its downstream clients too.
async fn converges_like_a_fresh_wrapper(
    upstream_url: &str,
    wrapper: &RunningWrapper,
    downstream: &Downstream,
    want: &[(String, Vec<String>)],
) {
    downstream.until_both_show(want).await;
    let fresh = RunningWrapper::start(upstream_url, config(wrapper.wrapper.local_node())).await;
    let fresh_state = served_state(&fresh.client).await;
    assert_eq!(fresh_state.0, want, "a fresh wrapper on the final upstream");
    // every stream catches up on its own (each has its own retry backoff)
    let mut last = None;
    let caught_up = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            let state = served_state(&wrapper.client).await;
            if state == fresh_state {
                return;
            }
            last = Some(state);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(caught_up.is_ok(), "the wrapper that rode it out serves {last:?}, a fresh one {fresh_state:?}");
}

/// The network between a node and its API server: a TCP relay on a port of its own that
/// can be cut (every connection closed, nothing listening) and restored on the same port.
struct Link {
    port: u16,
    upstream: std::net::SocketAddr,
    relay: Option<tokio::task::JoinHandle<()>>,
}

impl Link {
    async fn up(port: u16, upstream: std::net::SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.expect("bind the link's port");
        let port = listener.local_addr().expect("bound").port();
        let relay = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((mut downstream, _)) = listener.accept().await {
                connections.spawn(async move {
                    if let Ok(mut upstream) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut downstream, &mut upstream).await;
                    }
                });
            }
        });
        Self { port, upstream, relay: Some(relay) }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Cuts the link: the listener and every relayed connection are gone when this returns.
    async fn cut(&mut self) {
        if let Some(relay) = self.relay.take() {
            relay.abort();
            let _ = relay.await;
        }
    }

    async fn restore(&mut self) {
        *self = Self::up(self.port, self.upstream).await;
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        if let Some(relay) = &self.relay {
            relay.abort();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_restart_that_loses_history_is_caught_up_by_relisting() {
    let (server, upstream) = two_unit_cluster().await;
    let mut link = Link::up(0, server.addr()).await;
    let wrapper = RunningWrapper::start(&link.url(), config("n1")).await;
    let downstream = Downstream::connect(&wrapper).await;
    let before = named_ips(&[("plain-1", &["10.0.0.5"]), ("web-1", &["10.0.0.1"]), ("web-2", &["10.0.0.2"])]);
    assert_eq!(downstream.reflected(), before);
    let slices: Api<EndpointSlice> = Api::namespaced(upstream.clone(), "ns");

    // a change the wrapper may or may not see before the link goes down
    relabel(&upstream, "n2", "b").await;
    link.cut().await;
    for stream in unit_link::stream::Stream::ALL {
        until_upstream_errors(&wrapper, stream.name()).await;
    }
    // (web-2's endpoint on n2 left the unit if that change made it through)
    let mid = listed_slices(&wrapper.client).await;
    let seen_relabel = named_ips(&[("plain-1", &["10.0.0.5"]), ("web-1", &["10.0.0.1"]), ("web-2", &[])]);
    assert!(mid == before || mid == seen_relabel, "{mid:?}");
    serves_through_the_outage(&wrapper, &downstream, &mid).await;

    // changes while the node cannot see them; then the API server restarts and loses its
    // history, so no watch can resume past them (the link is down while it restarts:
    // `FakeApiServer::restart` waits for open requests, and a watch the wrapper reopened
    // in the meantime would hold it for minutes)
    slices.delete("web-2", &DeleteParams::default()).await.expect("delete web-2");
    relabel(&upstream, "n3", "a").await;
    let web3 = slice_object("web-3", "web", &[("10.0.0.7", "n1"), ("10.0.0.8", "n3")]);
    slices.create(&Default::default(), &web3).await.expect("create web-3");
    let server = server.restart(true).await.expect("restart on the same port");
    // and after it is back
    let web1 = slice_object("web-1", "web", &[("10.0.0.1", "n1"), ("10.0.0.3", "n3"), ("10.0.0.4", "n2")]);
    slices.replace("web-1", &Default::default(), &web1).await.expect("replace web-1");
    let mark = server.requests().mark();
    link.restore().await;

    // n2 is in unit b, n3 in unit a
    let want = named_ips(&[
        ("plain-1", &["10.0.0.5"]),
        ("web-1", &["10.0.0.1", "10.0.0.3"]),
        ("web-3", &["10.0.0.7", "10.0.0.8"]),
    ]);
    downstream.until_both_show(&want).await;
    // the wrapper had to relist: resuming its versions was refused
    let lists = server.requests().since(mark).into_iter().filter(|r| !r.query.contains("watch=true")).count();
    assert!(lists >= 1, "no relist after the history was lost");
    converges_like_a_fresh_wrapper(&link.url(), &wrapper, &downstream, &want).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_out_of_reach_for_a_while_is_caught_up_from_its_history_on_return() {
    let (server, upstream) = two_unit_cluster().await;
    let mut link = Link::up(0, server.addr()).await;
    let wrapper = RunningWrapper::start(&link.url(), config("n1")).await;
    let downstream = Downstream::connect(&wrapper).await;
    let before = named_ips(&[("plain-1", &["10.0.0.5"]), ("web-1", &["10.0.0.1"]), ("web-2", &["10.0.0.2"])]);
    assert_eq!(downstream.reflected(), before);

    link.cut().await;
    for stream in unit_link::stream::Stream::ALL {
        until_upstream_errors(&wrapper, stream.name()).await;
    }
    serves_through_the_outage(&wrapper, &downstream, &before).await;

    // the cluster changes while the node cannot see it: the local node moves to unit b,
    // a slice goes, another comes
    relabel(&upstream, "n1", "b").await;
    let slices: Api<EndpointSlice> = Api::namespaced(upstream.clone(), "ns");
    slices.delete("plain-1", &DeleteParams::default()).await.expect("delete plain-1");
    slices
        .create(&Default::default(), &slice_object("web-3", "web", &[("10.0.0.7", "n3"), ("10.0.0.8", "n2")]))
        .await
        .expect("create web-3");
    assert_eq!(listed_slices(&wrapper.client).await, before, "still the last view while out of reach");

    let mark = server.requests().mark();
    link.restore().await;
    // n1's own endpoint stays (it shares its own unit), n3's joins, n2's leave
    let want = named_ips(&[("web-1", &["10.0.0.1", "10.0.0.3"]), ("web-2", &[]), ("web-3", &["10.0.0.7"])]);
    downstream.until_both_show(&want).await;
    // caught up by resuming its five watches where they were, not by relisting
    let requests = eventually("the five upstream watches to resume", || async {
        let requests = server.requests().since(mark);
        (requests.len() >= 5).then_some(requests)
    })
    .await;
    assert!(requests.iter().all(|r| r.query.contains("watch=true&")), "{requests:#?}");
    converges_like_a_fresh_wrapper(&link.url(), &wrapper, &downstream, &want).await;
}

/// The objects of [`two_unit_cluster`] after the changes made while its API server was
/// down: n3 moved to unit a, web-1 gained an endpoint on n2, web-2 is gone.
async fn changed_two_unit_cluster(client: &kube::Client) {
    create_namespace(client, "ns").await;
    for (name, unit) in [("n1", "a"), ("n2", "a"), ("n3", "a")] {
        create_node(client, node_object(name, &[("unit", unit)])).await;
    }
    create_namespaced(client, service_object("web", Some(r#"["unit"]"#))).await;
    create_namespaced(client, service_object("plain", None)).await;
    let web1 = [("10.0.0.1", "n1"), ("10.0.0.3", "n3"), ("10.0.0.4", "n2")];
    create_namespaced(client, slice_object("web-1", "web", &web1)).await;
    create_namespaced(client, slice_object("plain-1", "plain", &[("10.0.0.5", "n3")])).await;
    create_namespaced(client, endpoints_object("web", &[("10.0.0.1", "n1"), ("10.0.0.3", "n3")])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_rebuilt_on_its_port_with_older_versions_is_relisted() {
    let (server, upstream) = two_unit_cluster().await;
    // the old control plane's history is longer than the rebuilt one's will be
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(upstream.clone(), "default");
    let history: k8s_openapi::api::core::v1::ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "history"}})).expect("configmap");
    configmaps.create(&Default::default(), &history).await.expect("create configmap");
    for i in 0..20 {
        let patch = json!({"data": {"i": i.to_string()}});
        configmaps.patch("history", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch");
    }
    // the node reaches its API server through a link: `FakeApiServer::stop` waits for open
    // requests, and a watch the wrapper reopens in the meantime would hold it for minutes
    let mut link = Link::up(0, server.addr()).await;
    let wrapper = RunningWrapper::start(&link.url(), config("n1")).await;
    let downstream = Downstream::connect(&wrapper).await;
    let before = named_ips(&[("plain-1", &["10.0.0.5"]), ("web-1", &["10.0.0.1"]), ("web-2", &["10.0.0.2"])]);
    assert_eq!(downstream.reflected(), before);
    let old_version = server.store().current_rv();

    // down: nothing answers, then the server itself is gone
    link.cut().await;
    let port = server.addr().port();
    server.stop().await;
    for stream in unit_link::stream::Stream::ALL {
        until_upstream_errors(&wrapper, stream.name()).await;
    }
    serves_through_the_outage(&wrapper, &downstream, &before).await;

    // back on the same port, rebuilt (its store starts empty, so its versions start again
    // from 1) with the cluster as it was changed meanwhile
    let server = FakeApiServer::start_with(port, ServerConfig::default()).await.expect("the same port again");
    changed_two_unit_cluster(&client_for(&server.url())).await;
    assert!(server.store().current_rv() < old_version, "the rebuilt upstream's versions are older");
    link.restore().await;

    let want = named_ips(&[("plain-1", &["10.0.0.5"]), ("web-1", &["10.0.0.1", "10.0.0.3", "10.0.0.4"])]);
    converges_like_a_fresh_wrapper(&server.url(), &wrapper, &downstream, &want).await;
}
