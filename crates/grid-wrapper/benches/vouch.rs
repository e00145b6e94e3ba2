//! What vouched sharing costs (see `edgegrid_core::vouch`): a follower's and the signer's
//! hashing of the benchmark cluster's EndpointSlices (10k, shaped as
//! kube-controller-manager writes them), the signed batch's size and check at fleet
//! scale, and the time a change takes to reach every follower of a unit of five
//! in-process wrappers on 1k slices, vouched (the signer in process, its period 1 s) or
//! not. Prints one table; medians. `WRAPPER_BENCH_QUICK=1` for a smoke run.

mod fleet;
mod unit_site;

use std::time::{Duration, Instant};

use edgegrid_core::vouch::{self, Batch, KeyedSet, Voucher, VoucherConfig, object_element, sha256};
use edgegrid_testing::bench_table::{self, Table, duration};
use fleet::{Scale, slice_object};
use ring::rand::SystemRandom;
use ring::signature::{Ed25519KeyPair, KeyPair};
use unit_signer::{UNIT_REFRESH, refreshes_in};
use unit_site::{members, publish, served_first, start, unit_members, visible_slice, write_change};

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    bench_table::percentile(&samples, 0.5)
}

fn timed(runs: usize, mut f: impl FnMut()) -> Duration {
    median(
        (0..runs)
            .map(|_| {
                let start = Instant::now();
                f();
                start.elapsed()
            })
            .collect(),
    )
}

fn main() {
    let scale = Scale::from_env();
    let slices: Vec<_> = (0..scale.services).map(|i| slice_object(i, &scale, None, 0)).collect();
    let stream = vouch::ENDPOINT_SLICES;
    let mut table = Table::new(["median", "per object", "", "", ""]);
    let mut batches = Table::new(["mean size", "sign", "sign and verify", "", ""]);
    let mut latency = Table::new(["not vouched", "vouched", "added", "", ""]);

    // a follower's (and the signer's) first list: every slice's element, into the set
    let list = timed(scale.list_runs, || {
        let mut set = KeyedSet::default();
        for (i, slice) in slices.iter().enumerate() {
            set.put(i, object_element(stream, slice));
        }
        std::hint::black_box(set.digest());
    });
    let per = list / u32::try_from(slices.len()).unwrap_or(u32::MAX);
    let what = format!("a list of {} slices hashed (element, set, state digest)", slices.len());
    table.row("1", what, [&duration(list), &duration(per), "", "", ""]);

    // one change: the new version's element, the old one out, the new one in, the digest
    let mut set = KeyedSet::default();
    for (i, slice) in slices.iter().enumerate() {
        set.put(i, object_element(stream, slice));
    }
    let changes: Vec<_> = (0..1_000).map(|n| slice_object(n % slices.len(), &scale, Some((n, 0)), 1)).collect();
    let mut n = 0;
    let change = timed(changes.len(), || {
        set.put(n % slices.len(), object_element(stream, &changes[n]));
        std::hint::black_box(set.digest());
        n += 1;
    });
    table.row("2", "one change hashed (per follower, and once at the signer)", [&duration(change), "", "", "", ""]);

    // the batch: four cluster streams (20 slice and Endpoints changes a second), and the
    // units' Nodes: each unit's unchanged state in one batch of `UNIT_REFRESH`, in turns
    let key = Ed25519KeyPair::from_pkcs8(Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).expect("a key").as_ref())
        .expect("the key");
    let public: [u8; 32] = key.public_key().as_ref().try_into().expect("32 bytes");
    let batch = |units: u32, sequence: u64| {
        let mut states: Vec<(String, Vec<[u8; 32]>)> = vec![
            (vouch::SERVICES.into(), vec![sha256(b"s")]),
            (vouch::ENDPOINT_SLICES.into(), (0..21u32).map(|i| sha256(&i.to_le_bytes())).collect()),
            (vouch::ENDPOINTS.into(), (0..21u32).map(|i| sha256(&(i + 100).to_le_bytes())).collect()),
            (vouch::NODE_METADATA.into(), vec![sha256(b"m")]),
        ];
        states.extend(
            (0..units)
                .map(|u| format!("unit-{u}"))
                .filter(|unit| refreshes_in(unit, sequence))
                .map(|unit| (vouch::unit_nodes(&unit), vec![sha256(unit.as_bytes())])),
        );
        Batch::new("run", sequence, 1_790_000_000, states)
    };
    for units in [50u32, 200, 1_000] {
        let rounds = UNIT_REFRESH * 4;
        let bytes: usize = (0..rounds)
            .map(|sequence| {
                let signed = batch(units, sequence).sign(&key);
                signed.batch.len() + signed.signature.len()
            })
            .sum();
        let mean = bytes as f64 / rounds as f64;
        let mut sequence = 0;
        let sign = timed(scale.list_runs, || {
            std::hint::black_box(batch(units, sequence).sign(&key));
            sequence += 1;
        });
        let mut voucher = Voucher::new(VoucherConfig {
            keys: vec![public],
            max_skew: Duration::from_secs(30),
            window: Duration::from_secs(10),
        });
        let check = timed(scale.list_runs, || {
            let signed = batch(units, sequence).sign(&key);
            sequence += 1;
            voucher.receive(&signed, Instant::now(), 1_790_000_000).expect("taken");
        });
        batches.row(
            "3",
            format!("a batch, {units} units, 20 slice changes/s"),
            [&format!("{:.1} KiB", mean / 1024.0), &duration(sign), &duration(check), "", ""],
        );
    }
    // a change's way to every follower, vouched or not
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let small = Scale { services: scale.services / 10, nodes: scale.nodes / 10, units: scale.units / 10, ..scale };
    let unchecked = runtime.block_on(change_latency(&small, false));
    let vouched = runtime.block_on(change_latency(&small, true));
    for (what, q) in [("median", 0.5), ("p90", 0.9)] {
        let (a, b) = (bench_table::percentile(&unchecked, q), bench_table::percentile(&vouched, q));
        latency.row(
            "4",
            format!("a change to every follower of 5 ({} slices, {} changes), {what}", small.services, vouched.len()),
            [&duration(a), &duration(b), &format!("+{}", duration(b.saturating_sub(a))), "", ""],
        );
    }
    println!(
        "vouched sharing's costs, {} slices of {} endpoints (load average {})",
        slices.len(),
        scale.endpoints_per_slice,
        bench_table::load_average().unwrap_or_else(|| "unknown".into())
    );
    table.print();
    batches.print();
    latency.print();
}

/// The time each of `CHANGES` changes (one every half second) takes to be served by every
/// follower of a unit of five, sorted.
async fn change_latency(scale: &Scale, vouched: bool) -> Vec<Duration> {
    const CHANGES: usize = 20;
    let members = members(5);
    let server = fake_apiserver::FakeApiServer::start().await.expect("bind 127.0.0.1");
    fleet::populate(&server, scale);
    publish(&server, &members);
    let store = server.store();
    let namespaces = store.resolve("", "v1", "namespaces").expect("namespaces");
    store.create(&namespaces, "", serde_json::json!({"metadata": {"name": "edgegrid"}})).expect("namespace");
    let cloud = kube::Client::try_from(kube::Config::new(server.url().parse().expect("url"))).expect("client");
    let key = Ed25519KeyPair::from_pkcs8(Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).expect("a key").as_ref())
        .expect("the key");
    let public: [u8; 32] = key.public_key().as_ref().try_into().expect("32 bytes");
    let signer = tokio::spawn(unit_signer::run(
        cloud,
        std::sync::Arc::new(key),
        unit_signer::SignerConfig {
            namespace: "edgegrid".into(),
            unit_label_key: fleet::UNIT_LABEL.into(),
            period: Duration::from_secs(1),
        },
        unit_signer::SignerMetrics::default(),
        std::future::pending(),
    ));
    let vouching = || {
        std::sync::Arc::new(unit_link::vouched::Vouching::new(unit_link::vouched::VouchConfig {
            namespace: "edgegrid".into(),
            voucher: VoucherConfig {
                keys: vec![public],
                max_skew: Duration::from_secs(30),
                window: Duration::from_secs(10),
            },
            patience: Duration::from_secs(5),
        }))
    };
    let peers = unit_members(&members);
    let port = edgegrid_testing::free_port();
    let mut running = Vec::new();
    for member in &members {
        running.push(start(member, &peers, server.addr(), true, port, 256, vouched.then(vouching)).await);
    }
    let started = Instant::now();
    loop {
        let following = running.iter().skip(1).all(|r| {
            let metrics = &r.wrapper.metrics().link;
            let leader = metrics.upstream_source.get_or_create(&unit_link::metrics::SourceLabel { source: "leader" });
            let taken = metrics.unit_vouch_batches.get_or_create(&unit_link::metrics::ResultLabel { result: "taken" });
            leader.get() == 1 && (!vouched || taken.get() > 0)
        });
        let synced = running.iter().all(|r| r.wrapper.serving() == grid_wrapper::cache::ViewSource::Upstream);
        if following && synced {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "the unit follows its leader within 2 minutes");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut latencies = Vec::new();
    for change in 0..CHANGES {
        let (slice, pod) = (visible_slice(change), 7_000_000 + change);
        let address = fleet::pod_ip(pod);
        write_change(&server, scale, slice, pod);
        let written = Instant::now();
        while !running[1..].iter().all(|r| served_first(&r.wrapper, slice).as_deref() == Some(address.as_str())) {
            assert!(written.elapsed() < Duration::from_secs(30), "a change reaches the followers within 30 s");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        latencies.push(written.elapsed());
        // not in step with the signer's period: the changes meet its batches at every phase
        tokio::time::sleep(Duration::from_millis(250 + (change as u64 * 373) % 1_000)).await;
    }
    for r in running {
        r.kill();
    }
    signer.abort();
    latencies.sort();
    latencies
}
