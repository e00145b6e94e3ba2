//! 10k probe workers against local targets (TCP connect, HTTP GET) on this machine:
//! CPU per 1k probes/s and scheduling jitter (p50/p99 of |interval - period|). Prints a
//! table; not a pass/fail test.
//!
//! `cargo bench -p edgegrid-prober --bench probe_workers` (`WORKERS`, `PERIOD_SECS`,
//! `RUN_SECS` override the defaults 10000, 5, 20).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use edgegrid_prober::*;
use futures::future::BoxFuture;
use tokio::time::Instant;

/// Forwards to the network prober, recording when each target was probed.
struct Recording {
    inner: NetworkProber,
    times: Mutex<HashMap<String, Vec<Instant>>>,
}

impl Prober for Recording {
    fn probe<'a>(
        &'a self,
        target: &'a ProbeTarget,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<ProbeReport, ProberError>> {
        let key = match target {
            ProbeTarget::Http(h) => h.path.clone(),
            ProbeTarget::Tcp { host, .. } => host.clone(),
            other => format!("{other:?}"),
        };
        self.times.lock().unwrap().entry(key).or_default().push(Instant::now());
        self.inner.probe(target, timeout)
    }
}

/// User+system CPU seconds of this process so far.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or_default().split_whitespace().collect();
    // fields after the command: state is [0]; utime is [11], stime [12] (clock ticks, 100/s)
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// `per_worker_keys`: whether targets tell workers apart (only then is jitter measurable).
async fn run(
    kind: &str,
    workers: u64,
    period: Duration,
    run_for: Duration,
    per_worker_keys: bool,
    target: impl Fn(u64) -> ProbeTarget,
) -> String {
    let prober = Arc::new(Recording { inner: NetworkProber, times: Mutex::default() });
    let manager = ProbeManager::new(prober.clone(), 1024);
    let cpu_before = cpu_seconds();
    let started = Instant::now();
    for w in 0..workers {
        let thresholds = Thresholds { period, timeout: Duration::from_secs(1), ..Default::default() };
        manager.add(
            format!("w{w}"),
            WorkerSpec { target: target(w), role: ProbeRole::Readiness, thresholds },
            Some("id".into()),
        );
    }
    tokio::time::sleep(run_for).await;
    manager.shutdown().await;
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu_before;
    let times = prober.times.lock().unwrap();
    let probes: usize = times.values().map(Vec::len).sum();
    let mut deviations: Vec<Duration> =
        times.values().flat_map(|t| t.windows(2).map(|w| (w[1] - w[0]).abs_diff(period))).collect();
    deviations.sort();
    let rate = probes as f64 / elapsed;
    let healthy = manager.results().values().filter(|o| **o == Outcome::Success).count();
    let (p50, p99) = if per_worker_keys {
        (format!("{:.2?}", percentile(&deviations, 0.5)), format!("{:.2?}", percentile(&deviations, 0.99)))
    } else {
        ("n/a".to_string(), "n/a".to_string())
    };
    format!(
        "| {kind:<5} | {workers:>7} | {:>4.1}s | {probes:>8} | {rate:>9.0} | {:>7.3} | {p50:>9} | {p99:>9} | {healthy} |",
        period.as_secs_f64(),
        (cpu / elapsed) / (rate / 1000.0),
    )
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` / `cargo test --benches` discovery
    }
    let workers = env("WORKERS", 10_000);
    let period = Duration::from_secs(env("PERIOD_SECS", 5));
    let run_for = Duration::from_secs(env("RUN_SECS", 20));
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tcp_port = tcp.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((socket, _)) = tcp.accept().await {
                drop(socket);
            }
        });
        let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http_port = http.local_addr().unwrap().port();
        tokio::spawn(async move {
            let app = axum::Router::new().fallback(|| async { "ok" });
            axum::serve(http, app).await.unwrap();
        });
        println!("| probe | workers | period | probes   | probes/s  | CPU cores per 1k probes/s | jitter p50 | jitter p99 | healthy at end |");
        println!("|---|---|---|---|---|---|---|---|---|");
        let tcp_row = run("tcp", workers, period, run_for, false, |_| ProbeTarget::Tcp { host: "127.0.0.1".into(), port: tcp_port }).await;
        println!("{tcp_row}");
        let http_row = run("http", workers, period, run_for, true, |w| {
            ProbeTarget::Http(HttpProbe {
                https: false,
                host: "127.0.0.1".into(),
                port: http_port,
                path: format!("/w/{w}"),
                headers: vec![],
                bearer_token: None,
                tls: TlsVerification::InsecureSkipVerify,
                extra_success_statuses: vec![],
            })
        })
        .await;
        println!("{http_row}");
    });
}
