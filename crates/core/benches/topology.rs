//! Incremental re-pruning vs a full rebuild (SuperEdge's strategy) at edge-cluster scale:
//! 10k EndpointSlices of 10 endpoints over 2k nodes in 50 units, 1k topology-aware
//! Services (10 slices each). Medians are in `target/criterion/topology/*/new/estimates.json`.

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use edgegrid_core::keys;
use edgegrid_core::topology::{InputChange, PrunedView};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

const NODES: usize = 2_000;
const UNITS: usize = 50;
const SERVICES: usize = 1_000;
const SLICES_PER_SERVICE: usize = 10;
const ENDPOINTS_PER_SLICE: usize = 10;

fn unit_labels(unit: usize) -> BTreeMap<String, String> {
    BTreeMap::from([("zone1".to_string(), format!("unit-{unit}"))])
}

/// A deterministic pseudo-random sequence (no RNG dependency, same cluster every run).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, bound: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % bound
    }
}

fn cluster() -> PrunedView {
    let mut view = PrunedView::new("node-0", false);
    let mut rng = Lcg(7);
    let mut apply = |change| {
        view.apply(change).expect("valid fixture");
    };
    for n in 0..NODES {
        apply(InputChange::NodeUpserted { name: format!("node-{n}"), labels: unit_labels(n % UNITS) });
    }
    for s in 0..SERVICES {
        let name = format!("svc-{s}");
        apply(InputChange::ServiceUpserted(Service {
            metadata: ObjectMeta {
                namespace: Some("default".into()),
                name: Some(name.clone()),
                annotations: Some(BTreeMap::from([(
                    keys::TOPOLOGY_KEYS_ANNOTATION.to_string(),
                    r#"["zone1"]"#.to_string(),
                )])),
                ..Default::default()
            },
            ..Default::default()
        }));
        for k in 0..SLICES_PER_SERVICE {
            let endpoints = (0..ENDPOINTS_PER_SLICE)
                .map(|e| Endpoint {
                    addresses: vec![format!("10.244.{}.{}", (s * SLICES_PER_SERVICE + k) % 250, e + 1)],
                    node_name: Some(format!("node-{}", rng.next(NODES))),
                    ..Default::default()
                })
                .collect();
            apply(InputChange::SliceUpserted(EndpointSlice {
                metadata: ObjectMeta {
                    namespace: Some("default".into()),
                    name: Some(format!("{name}-{k}")),
                    labels: Some(BTreeMap::from([(keys::SERVICE_NAME_LABEL.to_string(), name.clone())])),
                    ..Default::default()
                },
                address_type: "IPv4".into(),
                endpoints,
                ports: None,
            }));
        }
    }
    view
}

fn bench(c: &mut Criterion) {
    let mut view = cluster();
    let mut group = c.benchmark_group("topology");

    // (a) a remote node moves between units: only the slices with an endpoint on it
    let mut flip = false;
    group.bench_function("remote_node_label_change_incremental", |b| {
        b.iter(|| {
            flip = !flip;
            let labels = unit_labels(if flip { 1 } else { 2 });
            black_box(view.apply(InputChange::NodeUpserted { name: "node-1234".into(), labels }).expect("valid"))
        })
    });

    // the local node moves: every topology-aware slice is re-decided
    group.sample_size(20);
    let mut flip = false;
    group.bench_function("local_node_label_change_incremental", |b| {
        b.iter(|| {
            flip = !flip;
            let labels = unit_labels(if flip { 1 } else { 0 });
            black_box(view.apply(InputChange::NodeUpserted { name: "node-0".into(), labels }).expect("valid"))
        })
    });

    // (b) SuperEdge's strategy on any node/service change: re-prune every object
    group.bench_function("full_rebuild", |b| b.iter(|| black_box(view.full_rebuild())));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
