//! What sharing one upstream per unit and kube-proxy's own encoding save, on the cluster of
//! the `wrapper` bench (10k Services with one EndpointSlice of 10 endpoints each over 2k
//! nodes in 50 units).
//!
//! 1. a unit of N in-process wrappers (each with its own loopback address, identity and
//!    unit listener, as on a site) against the fake apiserver, under a steady rate of
//!    endpoint changes: the watches the API server holds and the bytes it sends the unit,
//!    each wrapper on its own (not shared) vs one upstream per unit (shared);
//! 2. the leader killed under that load: time until every follower serves a change made
//!    right after, lists served meanwhile that were empty or short, and changed slices
//!    whose final state a follower does not serve once the load stops (lost events);
//! 3. kube-proxy's list of the 10k slices from a wrapper: bytes on the wire and the client's
//!    decode CPU, protobuf (decoded with k8s-pb's generated messages, as client-go decodes
//!    with its own) vs JSON (decoded into k8s-openapi's types, as client-go decodes JSON
//!    into its structs); and the wrapper's time to serve each, the first protobuf list
//!    (which encodes every slice once) apart.
//!
//! `cargo bench -p grid-wrapper --bench unit_upstream` prints one table (a unit of 50 on the
//! full cluster, about 10 minutes; a unit of 500 on a tenth of it, as 500 in-process
//! wrappers each holding the full cluster's view would need about 40 GB);
//! `WRAPPER_BENCH_QUICK=1` runs small units as a smoke test; `UNIT_BENCH_FAILOVER_ONLY=<slices>`
//! only the leader killed in the unit of 50 on that many slices; `UNIT_BENCH_LARGE_ONLY=1` only
//! the unit of 500. Timings need an otherwise
//! idle machine (the header prints the load average); byte counts do not.

mod fleet;
mod unit_site;

use std::time::{Duration, Instant};

use edgegrid_testing::link::Link;
use fake_apiserver::FakeApiServer;
use grid_wrapper::cache::{Kind, ViewSource};
use unit_link::metrics::SourceLabel;

use bytes::Bytes;
use edgegrid_testing::bench_table::{Table, duration, met};
use fleet::*;
use http_body_util::BodyExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use prost::Message as _;
use unit_site::*;

/// Set to a number of slices: only the leader-killed measurement of the unit of 50, on
/// that many slices (no not-shared phase, no unit of 500, no encodings).
const FAILOVER_ONLY_ENV: &str = "UNIT_BENCH_FAILOVER_ONLY";
/// Set: only the unit of 500 (not shared, then shared).
const LARGE_ONLY_ENV: &str = "UNIT_BENCH_LARGE_ONLY";

/// What kube-proxy sends (`../shared/design/kube-proxy-protocol.md`).
const KUBE_PROXY_ACCEPT: &str = "application/vnd.kubernetes.protobuf, */*";
const JSON_ACCEPT: &str = "application/json";
const SLICES: &str = "/apis/discovery.k8s.io/v1/endpointslices?labelSelector=%21service.kubernetes.io%2Fheadless";

fn median(sorted: &[Duration]) -> Duration {
    edgegrid_testing::bench_table::percentile(sorted, 0.5)
}

fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// Runs `f` `runs` times; its durations, sorted.
fn timed<T>(runs: usize, mut f: impl FnMut() -> T) -> Vec<Duration> {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let started = Instant::now();
            std::hint::black_box(f());
            started.elapsed()
        })
        .collect();
    times.sort();
    times
}

/// client-go's JSON path: the body into typed objects.
fn decode_json(body: &[u8]) -> usize {
    let list: k8s_openapi::List<EndpointSlice> = serde_json::from_slice(body).expect("an EndpointSliceList");
    list.items.len()
}

/// client-go's protobuf path: the `k8s\0` envelope, then the list message.
fn decode_protobuf(body: &[u8]) -> usize {
    let envelope = body.strip_prefix(b"k8s\0").expect("the protobuf envelope");
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(envelope).expect("runtime.Unknown");
    let list = k8s_pb::api::discovery::v1::EndpointSliceList::decode(unknown.raw.as_deref().unwrap_or_default())
        .expect("an EndpointSliceList");
    list.items.len()
}

struct Encodings {
    json_bytes: usize,
    protobuf_bytes: usize,
    json_decode: Vec<Duration>,
    protobuf_decode: Vec<Duration>,
    json_serve: Vec<Duration>,
    protobuf_serve: Vec<Duration>,
    first_protobuf_serve: Duration,
    items: usize,
}

async fn list(connection: &mut Connection, accept: &str) -> (Duration, Bytes, String) {
    let started = Instant::now();
    let response = get(connection, SLICES, accept).await;
    let content_type = response.headers()["content-type"].to_str().unwrap_or_default().to_string();
    let body = response.into_body().collect().await.expect("body").to_bytes();
    (started.elapsed(), body, content_type)
}

async fn encodings(scale: &Scale) -> Encodings {
    let wrapper = offline_wrapper();
    each_upstream_input(scale, |input, _| wrapper.apply(input));
    let addr =
        serve(grid_wrapper::server::router(wrapper.clone(), &grid_wrapper::server::debug_readers(Vec::new())), false)
            .await;
    let mut connection = connect(addr).await;
    let (first_protobuf_serve, protobuf_body, content_type) = list(&mut connection, KUBE_PROXY_ACCEPT).await;
    assert_eq!(content_type, "application/vnd.kubernetes.protobuf");
    let (_, json_body, content_type) = list(&mut connection, JSON_ACCEPT).await;
    assert_eq!(content_type, "application/json");
    let items = decode_json(&json_body);
    assert_eq!(decode_protobuf(&protobuf_body), items, "the same slices either way");
    let (mut json_serve, mut protobuf_serve) = (Vec::new(), Vec::new());
    for _ in 0..scale.list_runs {
        json_serve.push(list(&mut connection, JSON_ACCEPT).await.0);
        protobuf_serve.push(list(&mut connection, KUBE_PROXY_ACCEPT).await.0);
    }
    json_serve.sort();
    protobuf_serve.sort();
    Encodings {
        json_bytes: json_body.len(),
        protobuf_bytes: protobuf_body.len(),
        json_decode: timed(scale.list_runs, || decode_json(&json_body)),
        protobuf_decode: timed(scale.list_runs, || decode_protobuf(&protobuf_body)),
        json_serve,
        protobuf_serve,
        first_protobuf_serve,
        items,
    }
}

// ---------------------------------------------------------------------------------------
// 1-2. One upstream per unit
// ---------------------------------------------------------------------------------------

/// The unit members' label value: a unit of its own beside the cluster's 50.
/// Endpoint changes per second during the measured window.
const CHANGES_PER_SECOND: u64 = 20;
const WINDOW: Duration = Duration::from_secs(10);

/// How many slices the changes cycle through; the next visible one is the failover's marker.
fn cycle(scale: &Scale) -> usize {
    (scale.services / 4).min(100)
}

struct Sharing {
    members: usize,
    slices: usize,
    /// (watches the API server holds, bytes it sent during the window), not shared then shared.
    alone: (usize, u64),
    shared: (usize, u64),
    sync: (Duration, Duration),
    failover: Option<Failover>,
}

struct Failover {
    every_follower_served: Duration,
    lists_checked: usize,
    empty_or_short_lists: usize,
    /// Final states not served `STALE_AFTER` the load stopped.
    lost: usize,
    /// When every follower served every final state (`None`: not within 3 minutes).
    all_served: Option<Duration>,
    changes: usize,
}

/// Runs the unit of `count`, not shared and then shared, and (`failover`) kills the leader.
async fn sharing(scale: &Scale, count: usize, failover: bool, phases: &[bool]) -> Sharing {
    let members = members(count);
    let mut result = Sharing {
        members: count,
        slices: scale.services,
        alone: (0, 0),
        shared: (0, 0),
        sync: Default::default(),
        failover: None,
    };
    for &shared in phases {
        let server = FakeApiServer::start().await.expect("bind 127.0.0.1");
        populate(&server, scale);
        publish(&server, &members);
        let link = Link::to(server.addr()).await.expect("a link");
        let unit_port = edgegrid_testing::free_port();
        let started = Instant::now();
        let mut running = Vec::new();
        let peers = unit_members(&members);
        for member in &members {
            running.push(start(member, &peers, link.address, shared, unit_port, 8 * count as u32 + 64, None).await);
        }
        // synced, and (shared) every follower on the leader
        loop {
            let synced = running.iter().all(|r| r.wrapper.serving() == ViewSource::Upstream);
            let settled = !shared
                || running.iter().skip(1).all(|r| {
                    r.wrapper.metrics().link.upstream_source.get_or_create(&SourceLabel { source: "leader" }).get() == 1
                });
            if synced && settled {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(600), "the unit syncs within 10 minutes");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let sync = started.elapsed();
        // the window: a steady rate of endpoint changes, then the watches held
        let (bytes_before, mark) = (link.received(), server.requests().mark());
        let mut pod = 5_000_000;
        let window = Instant::now();
        let mut changes = 0;
        while window.elapsed() < WINDOW {
            write_change(&server, scale, visible_slice(changes % cycle(scale)), pod);
            pod += 1;
            changes += 1;
            tokio::time::sleep(Duration::from_millis(1000 / CHANGES_PER_SECOND)).await;
        }
        // every member serves the last change before the bytes are read
        let last = pod_ip(pod - 1);
        let last_slice = visible_slice((changes - 1) % cycle(scale));
        while !running.iter().all(|r| served_first(&r.wrapper, last_slice).as_deref() == Some(last.as_str())) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let bytes = link.received() - bytes_before;
        let _ = mark;
        let mark = server.requests().mark();
        server.drop_watches();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let watches = server.requests().since(mark).iter().filter(|r| r.query.contains("watch=true")).count();
        if shared {
            result.shared = (watches, bytes);
            result.sync.1 = sync;
            if failover {
                result.failover = Some(kill_the_leader(&server, scale, &mut running, pod).await);
            }
        } else {
            result.alone = (watches, bytes);
            result.sync.0 = sync;
        }
        for r in running {
            r.kill();
        }
    }
    result
}

/// Kills the leader (the first member) while changes keep coming; measures the followers.
async fn kill_the_leader(
    server: &FakeApiServer,
    scale: &Scale,
    running: &mut Vec<Running>,
    mut pod: usize,
) -> Failover {
    let expected = running[1].wrapper.lock().log().len(&Kind::EndpointSlices);
    running.remove(0).kill();
    let killed = Instant::now();
    // the marker, right after the kill, in a slice of its own
    let marker_slice = visible_slice(cycle(scale));
    write_change(server, scale, marker_slice, 9_000_000);
    let marker = pod_ip(9_000_000);
    let (mut lists, mut short, mut changes) = (0, 0, 1);
    let mut changed: std::collections::BTreeMap<usize, usize> = [(marker_slice, 9_000_000)].into();
    let mut last_change = Instant::now();
    let every_follower_served = loop {
        for r in running.iter() {
            lists += 1;
            if r.wrapper.lock().log().len(&Kind::EndpointSlices) < expected {
                short += 1;
            }
        }
        if running.iter().all(|r| served_first(&r.wrapper, marker_slice).as_deref() == Some(marker.as_str())) {
            break killed.elapsed();
        }
        if last_change.elapsed() >= Duration::from_millis(1000 / CHANGES_PER_SECOND) {
            let slice = visible_slice(changes % cycle(scale));
            write_change(server, scale, slice, pod);
            changed.insert(slice, pod);
            pod += 1;
            changes += 1;
            last_change = Instant::now();
        }
        assert!(killed.elapsed() < Duration::from_secs(120), "the followers recover within 2 minutes");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    // the load stops; what every follower serves 30 s later, and (to tell a lag from a
    // loss) when every final state is served, waiting up to 3 minutes
    let settle = Instant::now();
    let stale = |running: &[Running]| -> Vec<(usize, usize)> {
        running
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let stale = changed
                    .iter()
                    .filter(|(slice, pod)| served_first(&r.wrapper, **slice) != Some(pod_ip(**pod)))
                    .count();
                (i, stale)
            })
            .filter(|(_, stale)| *stale > 0)
            .collect()
    };
    let mut lost = None;
    let all_served = loop {
        let now = stale(running);
        if now.is_empty() {
            break Some(settle.elapsed());
        }
        if lost.is_none() && settle.elapsed() > STALE_AFTER {
            lost = Some(now.iter().map(|(_, n)| n).sum());
            for (i, n) in &now {
                let r = &running[*i];
                let source =
                    r.wrapper.metrics().link.upstream_source.get_or_create(&SourceLabel { source: "leader" }).get();
                println!(
                    "  {} stale {}s after: {n} slices, following a leader: {}, serving {:?}",
                    r.wrapper.local_node(),
                    STALE_AFTER.as_secs(),
                    source == 1,
                    r.wrapper.serving(),
                );
            }
        }
        if settle.elapsed() > Duration::from_secs(180) {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    Failover {
        every_follower_served,
        lists_checked: lists,
        empty_or_short_lists: short,
        lost: lost.unwrap_or(0),
        all_served,
        changes,
    }
}

/// How long after the load stops a follower's stale final state counts as lost.
const STALE_AFTER: Duration = Duration::from_secs(30);

fn main() {
    let scale = Scale::from_env();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    println!(
        "unit upstream and protobuf: {} nodes in {} units, {} Services / EndpointSlices of {} endpoints{}; load average {}",
        scale.nodes,
        scale.units,
        scale.services,
        scale.endpoints_per_slice,
        if scale.quick { " (QUICK: not comparable with the targets)" } else { "" },
        edgegrid_testing::bench_table::load_average().unwrap_or_else(|| "unknown".into()),
    );
    let mut table = Table::new(["shared / protobuf", "not shared / JSON", "ratio", "target", "result"]);
    let small = Scale { nodes: scale.nodes / 10, units: scale.units / 10, services: scale.services / 10, ..scale };
    let all_units =
        if scale.quick { [(5, small, true), (20, small, false)] } else { [(50, scale, true), (500, small, false)] };
    let units = all_units;
    // only the failover of the unit of 50, on this many slices (the shared phase alone)
    let failover_only: Option<usize> = std::env::var(FAILOVER_ONLY_ENV).ok().and_then(|v| v.parse().ok());
    let large_only = std::env::var(LARGE_ONLY_ENV).is_ok_and(|v| !v.is_empty() && v != "0");
    let units = match failover_only {
        Some(services) => vec![(50, Scale { services, ..scale }, true)],
        None if large_only => units[1..].to_vec(),
        None => units.to_vec(),
    };
    let phases: &[bool] = if failover_only.is_some() { &[true] } else { &[false, true] };
    for &(count, unit_scale, failover) in &units {
        let measured = runtime.block_on(sharing(&unit_scale, count, failover, phases));
        let id = if count == all_units[0].0 { "1a" } else { "1b" };
        let watch_ratio = measured.alone.0 as f64 / measured.shared.0.max(1) as f64;
        let unit_size = measured.members as f64;
        let within = |ratio: f64| (ratio / unit_size - 1.0).abs() <= 0.10;
        if failover_only.is_some() {
            table.row(
                "2",
                format!("unit of {} wrappers, {} slices: start to every wrapper following", count, measured.slices),
                [&duration(measured.sync.1), "", "", "", ""],
            );
        }
        if failover_only.is_none() {
            table.row(
                id,
                format!("unit of {} wrappers, {} slices: API server watches held", measured.members, measured.slices),
                [
                    &measured.shared.0.to_string(),
                    &measured.alone.0.to_string(),
                    &format!("{watch_ratio:.1}x"),
                    &format!("{unit_size:.0}x +-10%"),
                    met(within(watch_ratio)),
                ],
            );
            let byte_ratio = measured.alone.1 as f64 / measured.shared.1.max(1) as f64;
            table.row(
                id,
                format!(
                    "  bytes the API server sent the unit in {}s at {CHANGES_PER_SECOND} changes/s",
                    WINDOW.as_secs()
                ),
                [
                    &mib(measured.shared.1 as usize),
                    &mib(measured.alone.1 as usize),
                    &format!("{byte_ratio:.1}x"),
                    &format!("{unit_size:.0}x +-10%"),
                    met(within(byte_ratio)),
                ],
            );
            table.row(
                id,
                "  start to every wrapper synced (shared: and following)",
                [&duration(measured.sync.1), &duration(measured.sync.0), "", "", ""],
            );
        }
        if let Some(failover) = measured.failover {
            table.row(
                "2",
                format!("leader killed (unit of {}): every follower serves a change again", measured.members),
                [
                    &duration(failover.every_follower_served),
                    "",
                    "",
                    "< 2 s",
                    met(failover.every_follower_served < Duration::from_secs(2)),
                ],
            );
            table.row(
                "2",
                format!(
                    "  changes lost of {} (final state not served {} s after the load)",
                    failover.changes,
                    STALE_AFTER.as_secs()
                ),
                [&failover.lost.to_string(), "", "", "0", met(failover.lost == 0)],
            );
            table.row(
                "2",
                "  every final state served, after the load stopped",
                [&failover.all_served.map_or_else(|| "> 3 min".into(), duration), "", "", "", ""],
            );
            table.row(
                "2",
                format!("  empty or short lists of {} checked", failover.lists_checked),
                [&failover.empty_or_short_lists.to_string(), "", "", "0", met(failover.empty_or_short_lists == 0)],
            );
        }
    }
    if failover_only.is_some() || large_only {
        table.print();
        return;
    }
    let encodings = runtime.block_on(encodings(&scale));
    let size_ratio = encodings.json_bytes as f64 / encodings.protobuf_bytes as f64;
    table.row(
        "3a",
        format!("kube-proxy's list of {} slices: bytes", encodings.items),
        [
            &mib(encodings.protobuf_bytes),
            &mib(encodings.json_bytes),
            &format!("{size_ratio:.2}x"),
            ">= 2x",
            met(size_ratio >= 2.0),
        ],
    );
    let (protobuf, json) = (median(&encodings.protobuf_decode), median(&encodings.json_decode));
    table.row(
        "3b",
        format!("  client decode CPU, median of {}", encodings.json_decode.len()),
        [&duration(protobuf), &duration(json), &format!("{:.2}x", json.as_secs_f64() / protobuf.as_secs_f64()), "", ""],
    );
    let (protobuf, json) = (median(&encodings.protobuf_serve), median(&encodings.json_serve));
    table.row(
        "3c",
        format!("  wrapper serves it over HTTP, median of {}", encodings.json_serve.len()),
        [&duration(protobuf), &duration(json), &format!("{:.2}x", json.as_secs_f64() / protobuf.as_secs_f64()), "", ""],
    );
    table.row(
        "3d",
        "  the first protobuf list (encodes each slice once)",
        [&duration(encodings.first_protobuf_serve), "-", "", "", ""],
    );
    table.print();
}
