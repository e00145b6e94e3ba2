//! The grid wrapper's serving costs at edge-cluster scale: 10k Services with one
//! EndpointSlice of 10 endpoints each over 2k nodes in 50 units, every other Service
//! topology-aware (`topologyKeys: ["zone1"]`), objects shaped as kube-controller-manager
//! and the kubelet write them.
//!
//! 1. latency from an upstream change to each downstream watcher's event line, at
//!    ~1k changes/s, with 1 and 100 watchers: in-process (`Wrapper::apply` ->
//!    `listwatch::watch_stream`) and, for context, over HTTP through `server::router`;
//! 2. a full list of the 10k slices over HTTP from a wrapper synced from the fake
//!    apiserver (by its own kube-rs watchers), and the same list from that fake apiserver;
//! 3. RSS of a wrapper holding the synced view, measured in fresh processes (this binary
//!    re-run with `--rss-child`), with a measured breakdown;
//! 4. upstream bytes per remote node status update, metadata-only watch vs full watch.
//!
//! `cargo bench -p grid-wrapper --bench wrapper` prints one table (about a minute on 2
//! cores). `WRAPPER_BENCH_QUICK=1` runs a small cluster and short phases as a smoke test
//! (its numbers are not comparable with the targets). Timings need an otherwise idle
//! machine (the header prints the load average); memory and byte counts do not.

use edgegrid_testing::bench_table::{Table, duration, met, percentile};
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use edgegrid_core::topology::{InputChange, PrunedView};
use fake_apiserver::FakeApiServer;
use futures::StreamExt;
use grid_wrapper::Wrapper;
use grid_wrapper::cache::{Input, Kind, Object, ViewSource};
use grid_wrapper::metrics::Metrics;
use http_body_util::BodyExt;
use listwatch::{Log, LogConfig, Shape, WatchOptions};
use serde_json::{Value, json};

mod fleet;

use fleet::*;

// ---------------------------------------------------------------------------------------
// Statistics and the table
// ---------------------------------------------------------------------------------------

fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / (1024.0 * 1024.0))
}

// ---------------------------------------------------------------------------------------
// 1. Upstream change -> downstream watch event
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Via {
    /// `Log::watch` + `listwatch::watch_stream`, as `server.rs` starts a watch, without HTTP.
    InProcess,
    /// A raw HTTP/1.1 watch against the wrapper's router served on 127.0.0.1.
    Http(SocketAddr),
}

struct Latency {
    /// Every (event, watcher) delivery.
    deliveries: Vec<Duration>,
    /// Per event, until the last watcher had it.
    last_watcher: Vec<Duration>,
    /// `Wrapper::apply` alone, per change.
    applying: Vec<Duration>,
    rate: f64,
}

/// Starts `watchers` watches of EndpointSlices after the current version; each returns
/// the instants at which its first `events` event lines arrived.
async fn start_watchers(
    wrapper: &Arc<Wrapper>,
    via: Via,
    watchers: usize,
    events: usize,
) -> Vec<tokio::task::JoinHandle<Vec<Instant>>> {
    let rv = wrapper.lock().log().current_rv();
    let mut handles = Vec::with_capacity(watchers);
    for _ in 0..watchers {
        match via {
            Via::InProcess => {
                let opts = WatchOptions { resource_version: Some(rv), ..Default::default() };
                let start = wrapper.lock().log().watch(&Kind::EndpointSlices, &opts);
                let lines = listwatch::watch_stream(
                    start,
                    opts,
                    listwatch::Representation::json(Kind::EndpointSlices.served(), Shape::Full),
                    watch_config(),
                    std::future::pending(),
                );
                handles.push(tokio::spawn(async move {
                    let mut lines = std::pin::pin!(lines);
                    let mut arrived = Vec::with_capacity(events);
                    while arrived.len() < events {
                        let line = lines.next().await.expect("watch open");
                        arrived.push(Instant::now());
                        assert!(line.starts_with(br#"{"type":"MODIFIED""#), "one MODIFIED line per change");
                    }
                    arrived
                }));
            }
            Via::Http(addr) => {
                let mut connection = connect(addr).await;
                let path = format!("/apis/discovery.k8s.io/v1/endpointslices?watch=true&resourceVersion={rv}");
                // the watch is subscribed once the response head is here
                let response = get(&mut connection, &path, "application/json").await;
                handles.push(tokio::spawn(async move {
                    let _connection = connection;
                    let mut body = response.into_body();
                    let mut arrived = Vec::with_capacity(events);
                    while arrived.len() < events {
                        let frame = body.frame().await.expect("watch open").expect("frame");
                        let now = Instant::now();
                        let data = frame.data_ref().map(Bytes::as_ref).unwrap_or_default();
                        arrived.extend(data.iter().filter(|b| **b == b'\n').map(|_| now));
                    }
                    arrived
                }));
            }
        }
    }
    handles
}

/// Feeds `scale.events` slice changes at ~1k/s from a runtime task (as the upstream
/// watchers do) and times each watcher's event line. Every change moves the first
/// endpoint of one slice to a new pod on the local node, so each is exactly one MODIFIED.
async fn latency(wrapper: &Arc<Wrapper>, scale: &Scale, via: Via, watchers: usize, next_change: &mut usize) -> Latency {
    let first = *next_change;
    *next_change += scale.events;
    let changes: Vec<Input> = (first..first + scale.events)
        .map(|c| {
            let slice = c.wrapping_mul(7_919) % scale.services;
            let pod = (1_000_000 + c, LOCAL_NODE);
            Input::Upsert(Object::Slice(slice_object(slice, scale, Some(pod), c as u64 + 1)))
        })
        .collect();
    let handles = start_watchers(wrapper, via, watchers, scale.events).await;
    let producer = tokio::spawn({
        let wrapper = wrapper.clone();
        async move {
            let mut ticker = tokio::time::interval(Duration::from_nanos(1_000_000_000 / RATE_PER_SECOND));
            let mut sent = Vec::with_capacity(changes.len());
            let began = Instant::now();
            let mut applying = Vec::with_capacity(changes.len());
            for change in changes {
                ticker.tick().await;
                let at = Instant::now();
                sent.push(at);
                wrapper.apply(change);
                applying.push(at.elapsed());
            }
            (sent, applying, began.elapsed())
        }
    });
    let (sent, mut applying, elapsed) = producer.await.expect("producer");
    applying.sort();
    let mut arrivals = Vec::with_capacity(watchers);
    for handle in handles {
        let arrived = tokio::time::timeout(Duration::from_secs(60), handle)
            .await
            .expect("every watcher gets every event within a minute")
            .expect("watcher task");
        arrivals.push(arrived);
    }
    let mut deliveries = Vec::with_capacity(watchers * sent.len());
    let mut last_watcher = Vec::with_capacity(sent.len());
    for (event, sent_at) in sent.iter().enumerate() {
        let mut last = Duration::ZERO;
        for arrived in &arrivals {
            let latency = arrived[event].saturating_duration_since(*sent_at);
            last = last.max(latency);
            deliveries.push(latency);
        }
        last_watcher.push(last);
    }
    deliveries.sort();
    last_watcher.sort();
    Latency { deliveries, last_watcher, applying, rate: sent.len() as f64 / elapsed.as_secs_f64() }
}

// ---------------------------------------------------------------------------------------
// 2. Lists: the wrapper synced from the fake apiserver vs that fake apiserver
// ---------------------------------------------------------------------------------------

struct Lists {
    wrapper: Vec<Duration>,
    upstream: Vec<Duration>,
    wrapper_bytes: usize,
    upstream_bytes: usize,
    /// Endpoints in the wrapper's and the upstream's list.
    endpoints: (usize, usize),
    /// In-process: `Log::list` (snapshot) and `ListBody` (the streamed chunks: envelope + copy).
    snapshot: Vec<Duration>,
    body: Vec<Duration>,
    sync: Duration,
}

async fn timed_list(connection: &mut Connection, path: &str) -> (Duration, Bytes) {
    let started = Instant::now();
    let body = get(connection, path, "application/json").await.into_body().collect().await.expect("body").to_bytes();
    (started.elapsed(), body)
}

fn count_list(body: &[u8]) -> (usize, usize) {
    let list: Value = serde_json::from_slice(body).expect("list is JSON");
    let items = list["items"].as_array().expect("items");
    (items.len(), items.iter().map(|s| s["endpoints"].as_array().map_or(0, Vec::len)).sum())
}

async fn lists(scale: &Scale) -> Lists {
    let server = FakeApiServer::start().await.expect("bind 127.0.0.1");
    populate(&server, scale);
    let upstream = kube::Config::new(server.url().parse().expect("url"));
    let wrapper = Wrapper::new(&wrapper_config(), &upstream, Arc::new(Metrics::default())).expect("wrapper");
    let addr =
        serve(grid_wrapper::server::router(wrapper.clone(), &grid_wrapper::server::debug_readers(Vec::new())), false)
            .await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let client = kube::Client::try_from(upstream).expect("upstream client");
    let started = Instant::now();
    let upstream_task = tokio::spawn(grid_wrapper::upstream::run(wrapper.clone(), client, async move {
        let _ = stopped.await;
    }));
    let mut serving = wrapper.serving_changes();
    tokio::time::timeout(Duration::from_secs(120), serving.wait_for(|s| *s == ViewSource::Upstream))
        .await
        .expect("the wrapper syncs within 2 minutes")
        .expect("wrapper alive");
    let sync = started.elapsed();

    let path = "/apis/discovery.k8s.io/v1/endpointslices";
    let mut to_wrapper = connect(addr).await;
    let mut to_upstream = connect(server.addr()).await;
    let (_, wrapper_body) = timed_list(&mut to_wrapper, path).await;
    let (_, upstream_body) = timed_list(&mut to_upstream, path).await;
    let (wrapper_items, wrapper_endpoints) = count_list(&wrapper_body);
    let (upstream_items, upstream_endpoints) = count_list(&upstream_body);
    assert_eq!((wrapper_items, upstream_items), (scale.services, scale.services), "every slice listed by both");
    let (mut wrapper_times, mut upstream_times) = (Vec::new(), Vec::new());
    let (mut snapshot, mut body) = (Vec::new(), Vec::new());
    for _ in 0..scale.list_runs {
        wrapper_times.push(timed_list(&mut to_wrapper, path).await.0);
        upstream_times.push(timed_list(&mut to_upstream, path).await.0);
        let cache = wrapper.lock();
        let started = Instant::now();
        let page = cache.log().list(&Kind::EndpointSlices, &Default::default()).expect("list");
        let listed = Instant::now();
        drop(cache);
        let built: usize =
            listwatch::ListBody::new(page, listwatch::Representation::json(Kind::EndpointSlices.served(), Shape::Full))
                .map(|chunk| chunk.len())
                .sum();
        body.push(listed.elapsed());
        snapshot.push(listed - started);
        assert_eq!(built, wrapper_body.len());
    }
    let _ = stop.send(());
    let _ = upstream_task.await;
    wrapper.stop_watches();
    for times in [&mut wrapper_times, &mut upstream_times, &mut snapshot, &mut body] {
        times.sort();
    }
    Lists {
        wrapper: wrapper_times,
        upstream: upstream_times,
        wrapper_bytes: wrapper_body.len(),
        upstream_bytes: upstream_body.len(),
        endpoints: (wrapper_endpoints, upstream_endpoints),
        snapshot,
        body,
        sync,
    }
}

// ---------------------------------------------------------------------------------------
// 3. RSS, each part in a fresh process
// ---------------------------------------------------------------------------------------

const RSS_CHILD: &str = "--rss-child";

/// `VmRSS` of this process, in bytes.
fn rss_now() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The served objects, one `kind-index<TAB>json` line each, for the log-only children.
fn dump(wrapper: &Wrapper, path: &Path) -> (usize, usize) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).expect("create dump"));
    let (mut objects, mut encoded) = (0, 0);
    for (kind, object) in wrapper.lock().served_objects() {
        let index = Kind::ALL.iter().position(|k| *k == kind).expect("a served kind");
        write!(out, "{index}\t").expect("write dump");
        out.write_all(object.json()).expect("write dump");
        out.write_all(b"\n").expect("write dump");
        objects += 1;
        encoded += object.json().len();
    }
    out.flush().expect("flush dump");
    (objects, encoded)
}

fn each_dumped(path: &Path, mut take: impl FnMut(Kind, Value)) {
    let file = std::io::BufReader::new(std::fs::File::open(path).expect("open dump"));
    for line in file.lines() {
        let line = line.expect("read dump");
        let (index, object) = line.split_once('\t').expect("kind<TAB>json");
        let kind = Kind::ALL[index.parse::<usize>().expect("kind index")];
        take(kind, serde_json::from_str(object).expect("dumped JSON"));
    }
}

/// One measurement in this (fresh) process; prints one JSON line.
fn rss_child(mode: &str, dump_path: &Path) {
    let scale = Scale::from_env();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let _entered = runtime.enter();
    let report = match mode {
        // the wrapper fed the whole cluster as one synced view
        "wrapper" => {
            let wrapper = offline_wrapper();
            let before = rss_now();
            let mut upstream_json = 0;
            each_upstream_input(&scale, |input, size| {
                upstream_json += size;
                wrapper.apply(input);
            });
            let after = rss_now();
            assert_eq!(wrapper.serving(), ViewSource::Upstream);
            let (objects, encoded) = dump(&wrapper, dump_path);
            // then every slice changes once: the history fills with replaced versions
            for i in 0..scale.services {
                let pod = (2_000_000 + i, endpoint_node(i, 0, &scale));
                wrapper.apply(Input::Upsert(Object::Slice(slice_object(i, &scale, Some(pod), 1))));
            }
            let updated = rss_now();
            json!({"before": before, "after": after, "updated": updated, "upstream_json": upstream_json,
                   "objects": objects, "encoded": encoded})
        }
        // the topology view alone, fed what the cache feeds it
        "view" => {
            let local = node_name(LOCAL_NODE);
            let mut view = PrunedView::new(local.clone(), false);
            let before = rss_now();
            each_upstream_input(&scale, |input, _| {
                let change = match input {
                    Input::Upsert(Object::LocalNode(node)) => {
                        let labels = node.metadata.labels.clone().unwrap_or_default();
                        InputChange::NodeUpserted { name: local.clone(), labels }
                    }
                    Input::Upsert(Object::RemoteNode { name, labels }) if name != local => {
                        InputChange::NodeUpserted { name, labels }
                    }
                    Input::Upsert(Object::Service(service)) => InputChange::ServiceUpserted(service),
                    Input::Upsert(Object::Slice(slice)) => InputChange::SliceUpserted(slice),
                    _ => return,
                };
                view.apply(change).expect("valid input");
            });
            let after = rss_now();
            assert_eq!(view.pruned_slices().count(), scale.services);
            json!({"before": before, "after": after})
        }
        // a list/watch log holding the served objects (encoded bytes + identity)
        "log" => {
            let config = LogConfig {
                history_limit: grid_wrapper::DEFAULT_HISTORY,
                watch_buffer: grid_wrapper::DEFAULT_WATCH_BUFFER,
            };
            let mut log: Log<Kind> = Log::continuing(config, 1 << 40);
            let before = rss_now();
            each_dumped(dump_path, |kind, object| {
                let id = (
                    object["metadata"]["namespace"].as_str().unwrap_or_default().to_string(),
                    object["metadata"]["name"].as_str().unwrap_or_default().to_string(),
                );
                log.upsert(kind, id, object).expect("stored");
            });
            json!({"before": before, "after": rss_now()})
        }
        // the served objects as serde_json::Values only
        "values" => {
            let mut values = Vec::new();
            let before = rss_now();
            each_dumped(dump_path, |_, object| values.push(object));
            json!({"before": before, "after": rss_now(), "values": values.len()})
        }
        other => panic!("unknown {RSS_CHILD} mode {other}"),
    };
    println!("{report}");
}

fn run_child(mode: &str, dump_path: &Path) -> Value {
    let exe = std::env::current_exe().expect("this bench binary");
    let output = std::process::Command::new(exe).arg(RSS_CHILD).arg(mode).arg(dump_path).output().expect("spawn");
    assert!(output.status.success(), "{mode} child failed: {}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8(output.stdout).expect("utf-8");
    serde_json::from_str(stdout.lines().last().expect("one report line")).expect("report is JSON")
}

struct Rss {
    delta: f64,
    updated_delta: f64,
    upstream_json: f64,
    encoded: f64,
    objects: u64,
    view: f64,
    log: f64,
    values: f64,
}

fn rss() -> Rss {
    let dump_path = std::env::temp_dir().join(format!("grid-wrapper-bench-{}.jsonl", std::process::id()));
    let delta = |report: &Value| report["after"].as_f64().unwrap_or(0.0) - report["before"].as_f64().unwrap_or(0.0);
    let wrapper = run_child("wrapper", &dump_path);
    let view = run_child("view", &dump_path);
    let log = run_child("log", &dump_path);
    let values = run_child("values", &dump_path);
    let _ = std::fs::remove_file(PathBuf::from(&dump_path));
    Rss {
        delta: delta(&wrapper),
        updated_delta: wrapper["updated"].as_f64().unwrap_or(0.0) - wrapper["before"].as_f64().unwrap_or(0.0),
        upstream_json: wrapper["upstream_json"].as_f64().unwrap_or(0.0),
        encoded: wrapper["encoded"].as_f64().unwrap_or(0.0),
        objects: wrapper["objects"].as_u64().unwrap_or(0),
        view: delta(&view),
        log: delta(&log),
        values: delta(&values),
    }
}

// ---------------------------------------------------------------------------------------
// 4. Upstream bytes per remote node status update
// ---------------------------------------------------------------------------------------

struct NodeBytes {
    full: usize,
    metadata: usize,
    full_managed: usize,
    metadata_managed: usize,
}

/// Bytes of the event line each watch (full, metadata-only) gets for one kubelet status
/// report (new `lastHeartbeatTime`s), before and after the node carries managedFields.
async fn node_bytes(scale: &Scale) -> NodeBytes {
    let server = FakeApiServer::start().await.expect("bind 127.0.0.1");
    let store = server.store();
    let nodes = store.resolve("", "v1", "nodes").expect("nodes");
    let n = 1;
    let name = node_name(n);
    store.create(&nodes, "", node_value(n, scale, 0)).expect("node");
    let mut heartbeat = 0;
    let mut measure = async || {
        let path = format!("/api/v1/nodes?watch=true&resourceVersion={}", store.current_rv());
        let mut full_connection = connect(server.addr()).await;
        let mut metadata_connection = connect(server.addr()).await;
        let full = get(&mut full_connection, &path, "application/json").await.into_body();
        let metadata = get(&mut metadata_connection, &path, METADATA_ACCEPT).await.into_body();
        heartbeat += 10;
        let mut reported = store.get(&nodes, "", &name).expect("node");
        reported["status"]["conditions"] = node_conditions(heartbeat);
        store.update(&nodes, "", &name, reported, true).expect("status update");
        let full_line = first_line(full).await;
        let metadata_line = first_line(metadata).await;
        let event: Value = serde_json::from_slice(&metadata_line).expect("event");
        assert_eq!(event["object"]["kind"], "PartialObjectMetadata");
        (full_line.len(), metadata_line.len())
    };
    let (full, metadata) = measure().await;
    let mut managed = store.get(&nodes, "", &name).expect("node");
    managed["metadata"]["managedFields"] = node_managed_fields(&managed);
    store.update(&nodes, "", &name, managed, false).expect("managedFields");
    let (full_managed, metadata_managed) = measure().await;
    NodeBytes { full, metadata, full_managed, metadata_managed }
}

// ---------------------------------------------------------------------------------------

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == RSS_CHILD) {
        let mode = args.get(at + 1).expect("mode");
        let path = args.get(at + 2).expect("dump path");
        rss_child(mode, Path::new(path));
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(bench());
}

async fn bench() {
    let scale = Scale::from_env();
    let mut table = Table::new(["median / p50", "p99", "ratio", "target", "result"]);
    let started = Instant::now();
    // timings are only comparable on an otherwise idle machine: say how busy it was
    let load = edgegrid_testing::bench_table::load_average;
    let load_at_start = load().unwrap_or_default();

    // 1. latency
    let wrapper = offline_wrapper();
    each_upstream_input(&scale, |input, _| wrapper.apply(input));
    assert_eq!(wrapper.serving(), ViewSource::Upstream);
    // steady state: the change history is full of replaced versions, memory stops growing
    for c in 0..grid_wrapper::DEFAULT_HISTORY.min(scale.services) {
        let pod = (3_000_000 + c, endpoint_node(c, 0, &scale));
        wrapper.apply(Input::Upsert(Object::Slice(slice_object(c, &scale, Some(pod), 1))));
    }
    let as_served =
        serve(grid_wrapper::server::router(wrapper.clone(), &grid_wrapper::server::debug_readers(Vec::new())), false)
            .await;
    let nodelay =
        serve(grid_wrapper::server::router(wrapper.clone(), &grid_wrapper::server::debug_readers(Vec::new())), true)
            .await;
    let mut next_change = 0;
    let phases = [
        ("in-process", Via::InProcess, 1, Some(Duration::from_millis(1))),
        ("in-process", Via::InProcess, 100, Some(Duration::from_millis(5))),
        ("HTTP as the binary serves (Nagle on)", Via::Http(as_served), 1, None),
        ("HTTP as the binary serves (Nagle on)", Via::Http(as_served), 100, None),
        ("HTTP with TCP_NODELAY", Via::Http(nodelay), 1, None),
        ("HTTP with TCP_NODELAY", Via::Http(nodelay), 100, None),
    ];
    for (path, via, watchers, target) in phases {
        let measured = latency(&wrapper, &scale, via, watchers, &mut next_change).await;
        let p99 = percentile(&measured.deliveries, 0.99);
        let what = format!(
            "change -> event line, {path}, {watchers} watcher{} ({} changes at {:.0}/s, {} deliveries)",
            if watchers == 1 { "" } else { "s" },
            scale.events,
            measured.rate,
            measured.deliveries.len()
        );
        let (target_text, result) = match target {
            Some(t) => (format!("p99 < {}", duration(t)), met(p99 < t)),
            None => ("(context)".to_string(), "-"),
        };
        table.row(
            "1",
            what,
            [&duration(percentile(&measured.deliveries, 0.5)), &duration(p99), "-", &target_text, result],
        );
        if matches!(via, Via::InProcess) {
            table.row(
                "1",
                "  of which Wrapper::apply (view, encode, same-form check, commit, publish)",
                [
                    &duration(percentile(&measured.applying, 0.5)),
                    &duration(percentile(&measured.applying, 0.99)),
                    "-",
                    "",
                    "-",
                ],
            );
        }
        if watchers > 1 {
            table.row(
                "1",
                format!("  same, until the last of the {watchers} watchers has it"),
                [
                    &duration(percentile(&measured.last_watcher, 0.5)),
                    &duration(percentile(&measured.last_watcher, 0.99)),
                    "-",
                    "",
                    "-",
                ],
            );
        }
    }
    wrapper.stop_watches();
    drop(wrapper);

    // 2. lists
    let lists = lists(&scale).await;
    let median = |times: &[Duration]| percentile(times, 0.5);
    let (wrapper_list, upstream_list) = (median(&lists.wrapper), median(&lists.upstream));
    let n = scale.services;
    table.row(
        "2",
        format!(
            "list {n} slices from the wrapper, HTTP ({}, {} endpoints), median of {}",
            mib(lists.wrapper_bytes as f64),
            lists.endpoints.0,
            lists.wrapper.len()
        ),
        [&duration(wrapper_list), "-", "-", "", "-"],
    );
    table.row(
        "2",
        format!(
            "list {n} slices from the fake apiserver, HTTP ({}, {} endpoints), median of {}",
            mib(lists.upstream_bytes as f64),
            lists.endpoints.1,
            lists.upstream.len()
        ),
        [&duration(upstream_list), "-", "-", "", "-"],
    );
    let vs_fake = upstream_list.as_secs_f64() / wrapper_list.as_secs_f64();
    table.row("2", "  fake apiserver / wrapper", ["-", "-", &format!("{vs_fake:.2}x"), ">= 10x", met(vs_fake >= 10.0)]);
    let vs_real = REAL_APISERVER_LIST.as_secs_f64() / wrapper_list.as_secs_f64();
    table.row(
        "2",
        "  real kube-apiserver (220 ms, quoted) / wrapper",
        ["-", "-", &format!("{vs_real:.1}x"), ">= 10x", met(vs_real >= 10.0)],
    );
    table.row(
        "2",
        "  of which (in-process) Log::list: snapshot of the slices",
        [&duration(median(&lists.snapshot)), "-", "-", "", "-"],
    );
    table.row(
        "2",
        "  of which (in-process) listwatch::ListBody: the streamed chunks",
        [&duration(median(&lists.body)), "-", "-", "", "-"],
    );
    table.row(
        "2",
        "  wrapper's first sync from the fake apiserver (kube-rs watchers, HTTP)",
        [&duration(lists.sync), "-", "-", "", "-"],
    );

    // 3. memory
    let rss = rss();
    let json = rss.upstream_json;
    let share = |bytes: f64| format!("{:.2}x", bytes / json);
    table.row(
        "3",
        format!("RSS of the synced wrapper ({} served objects) vs their upstream JSON ({})", rss.objects, mib(json)),
        [&mib(rss.delta), "-", &share(rss.delta), "<= 2x", met(rss.delta <= 2.0 * json)],
    );
    table.row(
        "3",
        format!("  same after {} slice updates (the history holds replaced versions)", scale.services),
        [&mib(rss.updated_delta), "-", &share(rss.updated_delta), "", "-"],
    );
    table.row(
        "3",
        "  topology view alone (LZ4-compressed upstream slices, policies, indexes)",
        [&mib(rss.view), "-", &share(rss.view), "", "-"],
    );
    table.row("3", "  list/watch log alone (served objects)", [&mib(rss.log), "-", &share(rss.log), "", "-"]);
    table.row("3", "    of which encoded JSON bytes (exact)", [&mib(rss.encoded), "-", &share(rss.encoded), "", "-"]);
    let log_rest = rss.log - rss.encoded;
    table.row(
        "3",
        "    of which identity (names, labels), maps, Arcs, history (remainder)",
        [&mib(log_rest), "-", &share(log_rest), "", "-"],
    );
    table.row(
        "3",
        "  for comparison: the served objects as serde_json::Values (not kept)",
        [&mib(rss.values), "-", &share(rss.values), "", "-"],
    );
    let rest = rss.delta - rss.view - rss.log;
    table.row(
        "3",
        "  wrapper - (view + log), each measured alone: staging, node sets, allocator",
        [&mib(rest), "-", &share(rest), "", "-"],
    );

    // 4. node status update bytes
    let bytes = node_bytes(&scale).await;
    let ratio = |full: usize, metadata: usize| format!("{:.1}x", full as f64 / metadata as f64);
    table.row(
        "4",
        "node status update event, full watch (as the fake apiserver stores nodes)",
        [&format!("{} B", bytes.full), "-", "-", "", "-"],
    );
    table.row(
        "4",
        "  metadata-only watch (PartialObjectMetadata)",
        [&format!("{} B", bytes.metadata), "-", &ratio(bytes.full, bytes.metadata), "", "-"],
    );
    table.row(
        "4",
        "same, node with kubelet-like managedFields (as a real apiserver sends): full",
        [&format!("{} B", bytes.full_managed), "-", "-", "", "-"],
    );
    table.row(
        "4",
        "  metadata-only",
        [&format!("{} B", bytes.metadata_managed), "-", &ratio(bytes.full_managed, bytes.metadata_managed), "", "-"],
    );
    let per_second = scale.nodes as f64 / 300.0;
    table.row(
        "4",
        format!(
            "  per wrapper, {} nodes each reporting status every 5 min (with managedFields): full -> metadata-only",
            scale.nodes
        ),
        [
            &format!(
                "{:.1} -> {:.1} KB/s",
                per_second * bytes.full_managed as f64 / 1e3,
                per_second * bytes.metadata_managed as f64 / 1e3
            ),
            "-",
            "-",
            "",
            "-",
        ],
    );

    println!();
    println!(
        "grid-wrapper bench{}: {} Services ({} topology-aware) with one EndpointSlice of {} endpoints each, {} nodes in {} units; local node {}; {:.0} s; load average {} at start, {} at end",
        if scale.quick { " (QUICK: smoke only, not comparable with the targets)" } else { "" },
        scale.services,
        scale.services.div_ceil(2),
        scale.endpoints_per_slice,
        scale.nodes,
        scale.units,
        node_name(LOCAL_NODE),
        started.elapsed().as_secs_f64(),
        load_at_start,
        load().unwrap_or_default()
    );
    table.print();
}
