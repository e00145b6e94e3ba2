//! What sharing one upstream per unit and kube-proxy's own encoding save, on the cluster of
//! the `wrapper` bench (10k Services with one EndpointSlice of 10 endpoints each over 2k
//! nodes in 50 units).
//!
//! 3. kube-proxy's list of the 10k slices from a wrapper: bytes on the wire and the client's
//!    decode CPU, protobuf (decoded with k8s-pb's generated messages, as client-go decodes
//!    with its own) vs JSON (decoded into k8s-openapi's types, as client-go decodes JSON
//!    into its structs); and the wrapper's time to serve each, the first protobuf list
//!    (which encodes every slice once) apart.
//!
//! `cargo bench -p grid-wrapper --bench unit_upstream` prints one table;
//! `WRAPPER_BENCH_QUICK=1` runs a small cluster as a smoke test. Timings need an otherwise
//! idle machine (the header prints the load average); byte counts do not.

#[path = "../../../tests/src/bench_table.rs"]
mod bench_table;
mod fleet;

use std::time::{Duration, Instant};

use bench_table::{Table, duration, met};
use bytes::Bytes;
use fleet::*;
use http_body_util::BodyExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use prost::Message as _;

/// What kube-proxy sends (`../shared/design/kube-proxy-protocol.md`).
const KUBE_PROXY_ACCEPT: &str = "application/vnd.kubernetes.protobuf, */*";
const JSON_ACCEPT: &str = "application/json";
const SLICES: &str = "/apis/discovery.k8s.io/v1/endpointslices?labelSelector=%21service.kubernetes.io%2Fheadless";

fn median(sorted: &[Duration]) -> Duration {
    bench_table::percentile(sorted, 0.5)
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
    let addr = serve(wrapper.router(&grid_wrapper::server::debug_readers(Vec::new())), false).await;
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
        bench_table::load_average().unwrap_or_else(|| "unknown".into()),
    );
    let encodings = runtime.block_on(encodings(&scale));
    let mut table = Table::new(["protobuf", "JSON", "JSON / protobuf", "target", "result"]);
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
