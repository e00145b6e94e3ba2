//! What vouched sharing costs (see `edgegrid_core::vouch`): a follower's and the signer's
//! hashing of the benchmark cluster's EndpointSlices (10k, shaped as
//! kube-controller-manager writes them), and the signed batch's size and check at fleet
//! scale. Prints one table; medians. `WRAPPER_BENCH_QUICK=1` for a smoke run.

#[path = "../../../tests/src/bench_table.rs"]
#[allow(dead_code, reason = "the table's helpers this bench does not use")]
mod bench_table;
mod fleet;

use std::time::{Duration, Instant};

use bench_table::{Table, duration};
use edgegrid_core::vouch::{Batch, KeyedSet, Voucher, VoucherConfig, sha256};
use fleet::{Scale, slice_object};
use grid_wrapper::signer::{UNIT_REFRESH, refreshes_in};
use grid_wrapper::vouching::{self, object_element};
use ring::rand::SystemRandom;
use ring::signature::{Ed25519KeyPair, KeyPair};

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
    let stream = vouching::ENDPOINT_SLICES;
    let mut table = Table::new(["median, or size", "per object", "sign", "sign and verify", ""]);

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
            (vouching::SERVICES.into(), vec![sha256(b"s")]),
            (vouching::ENDPOINT_SLICES.into(), (0..21u32).map(|i| sha256(&i.to_le_bytes())).collect()),
            (vouching::ENDPOINTS.into(), (0..21u32).map(|i| sha256(&(i + 100).to_le_bytes())).collect()),
            (vouching::NODE_METADATA.into(), vec![sha256(b"m")]),
        ];
        states.extend(
            (0..units)
                .map(|u| format!("unit-{u}"))
                .filter(|unit| refreshes_in(unit, sequence))
                .map(|unit| (vouching::unit_nodes(&unit), vec![sha256(unit.as_bytes())])),
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
        table.row(
            "3",
            format!("a batch, {units} units, 20 slice changes/s: mean bytes; sign; sign and verify"),
            [&format!("{:.1} KiB", mean / 1024.0), "", &duration(sign), &duration(check), ""],
        );
    }
    println!(
        "vouched sharing's costs, {} slices of {} endpoints (load average {})",
        slices.len(),
        scale.endpoints_per_slice,
        bench_table::load_average().unwrap_or_else(|| "unknown".into())
    );
    table.print();
}
