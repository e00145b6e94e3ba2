//! One node monitor pass over 5k nodes in 50 zones (5% of them Unknown, half of those
//! voted unhealthy), plus a queue drain: the work the controller does every 5 s.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use edgegrid_core::protection::Timestamp;
use node_lifecycle::lifecycle::*;
use tokio::time::Instant;

fn nodes(heartbeat: &str) -> Vec<NodeSnapshot> {
    (0..5_000)
        .map(|i| NodeSnapshot {
            name: format!("node-{i:05}"),
            zone: ZoneKey { region: "r".into(), zone: format!("z{}", i % 50) },
            report: NodeReport {
                ready: Some(ReadyStatus::True),
                heartbeat: Some(if i % 20 == 0 { "stale".to_string() } else { heartbeat.to_string() }),
                lease_renew: None,
                ready_transition: None,
            },
            conditions: vec![("Ready".into(), "True".into()), ("MemoryPressure".into(), "False".into())],
            watched: true,
            voted_unhealthy: i % 40 == 0,
            protection_limit: Default::default(),
            taints: vec![],
            ..Default::default()
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let start = Instant::now();
    let mut core = MonitorCore::new(LifecycleConfig::default());
    let wall: Timestamp = "2026-11-21T10:00:00Z".parse().unwrap();
    core.monitor(&nodes("hb-0"), start, wall);
    let mut pass = 0u64;
    let mut group = c.benchmark_group("node_lifecycle");
    group.bench_function("monitor_pass_5k_nodes", |b| {
        b.iter(|| {
            pass += 1;
            // every node but the stale 5% heartbeats; a minute in, those are Unknown
            let snapshot = nodes(&format!("hb-{pass}"));
            let now = start + Duration::from_secs(60) + Duration::from_millis(pass);
            black_box(core.monitor(&snapshot, now, wall + Duration::from_secs(60)));
            black_box(core.drain(now))
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
