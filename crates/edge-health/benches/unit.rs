//! edge-health at unit scale: simulated units of 50, 500 and 2,000 members running the
//! real protocol in one process (`edge_health::sim`: real selection, checks scoring,
//! indirect probes, sealed and verified messages, vote tables, writer rule), one table.
//!
//! Per period and per member: probe attempts (direct, retries, on behalf of others),
//! indirect requests, frames sent; CPU per period (wall time of one simulated period on
//! one thread, every member's work included, divided by the members); periods until every
//! live observer holds a killed member unhealthy; false accusations of live members with
//! 30% loss. For 2,000 members only 50 members keep vote tables (`SimConfig::observers`),
//! so the CPU column understates a full unit by the other members' vote bookkeeping.
//! `EDGE_HEALTH_BENCH_QUICK=1` runs small units as a smoke test.

#[path = "../../../tests/src/bench_table.rs"]
mod bench_table;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bench_table::{Table, duration, load_average, met, percentile};
use edge_health::sim::{PeriodStats, Sim, SimConfig, false_accusations};
use edge_health::vote::Verdict;

/// `k` of the reference protocol.
const K: usize = 3;

/// The reference unit, with only 50 members keeping vote tables.
fn config(nodes: usize, loss: f64, seed: u64) -> SimConfig {
    SimConfig { observers: nodes.min(50), ..SimConfig::reference(nodes, loss, seed).expect("valid reference") }
}

struct Row {
    nodes: usize,
    probes: f64,
    indirect: f64,
    frames: f64,
    cpu: Vec<Duration>,
    detection: Vec<usize>,
    accused_clean: usize,
    accused_lossy: usize,
}

/// Periods until every live observer holds `node` unhealthy (None: not within `limit`).
fn detection(sim: &mut Sim, node: &str, limit: usize) -> Option<usize> {
    for i in 1..=limit {
        sim.run_period();
        let observers: Vec<String> = sim.observers().filter(|o| sim.is_alive(o)).map(String::from).collect();
        if observers.iter().all(|o| sim.verdict(o, node) == Some(Verdict::Unhealthy)) {
            return Some(i);
        }
    }
    None
}

fn accusations(nodes: usize, loss: f64, seed: u64, periods: usize) -> usize {
    let mut sim = Sim::new(config(nodes, loss, seed)).expect("valid simulation");
    let history: Vec<PeriodStats> = (0..periods).map(|_| sim.run_period()).collect();
    let everyone: BTreeSet<String> = sim.members().iter().cloned().collect();
    false_accusations(&history, &everyone).len()
}

fn measure(nodes: usize, periods: usize, kills: u64) -> Row {
    let mut sim = Sim::new(config(nodes, 0.0, 1)).expect("valid simulation");
    // fill the vote window first
    for _ in 0..3 {
        sim.run_period();
    }
    let (mut probes, mut indirect, mut frames, mut cpu) = (0u64, 0u64, 0u64, Vec::new());
    for _ in 0..periods {
        let started = Instant::now();
        let stats = sim.run_period();
        cpu.push(started.elapsed());
        probes += stats.probe_attempts;
        indirect += stats.indirect_requests;
        frames += stats.frames_sent;
    }
    cpu.sort();
    let per = |total: u64| total as f64 / (periods * nodes) as f64;
    let mut detection = Vec::new();
    for seed in 0..kills {
        let mut sim = Sim::new(config(nodes, 0.0, seed + 10)).expect("valid simulation");
        for _ in 0..3 {
            sim.run_period();
        }
        let victim = sim.members()[(seed as usize * 7 + nodes / 2) % nodes].clone();
        sim.kill(&victim);
        detection.push(detection_or_limit(&mut sim, &victim));
    }
    detection.sort();
    Row {
        nodes,
        probes: per(probes),
        indirect: per(indirect),
        frames: per(frames),
        cpu,
        detection,
        accused_clean: accusations(nodes, 0.0, 3, periods),
        accused_lossy: accusations(nodes, 0.3, 4, periods),
    }
}

const DETECTION_LIMIT: usize = 10;

fn detection_or_limit(sim: &mut Sim, node: &str) -> usize {
    detection(sim, node, DETECTION_LIMIT).unwrap_or(DETECTION_LIMIT + 1)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let quick = std::env::var("EDGE_HEALTH_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let (sizes, periods, kills): (&[usize], usize, u64) =
        if quick { (&[20, 100], 3, 2) } else { (&[50, 500, 2_000], 6, 3) };
    let started = Instant::now();
    let rows: Vec<Row> = sizes.iter().map(|&n| measure(n, periods, kills)).collect();
    let mut table = Table::new(["median / p50", "p99 / max", "ratio", "target", "result"]);
    let base = &rows[0];
    for row in &rows {
        let n = row.nodes;
        let assigned = (K.min(n - 1)) as f64;
        table.row(
            &n.to_string(),
            format!("{n} members: probe attempts per member per period (k = {K}; retries, helpers included)"),
            [&format!("{:.2}", row.probes), "-", &format!("{:.2}x k", row.probes / assigned), "", "-"],
        );
        let growth = row.probes / base.probes;
        table.row(
            &n.to_string(),
            format!("  probes per member vs {} members (O(n*k): constant)", base.nodes),
            ["-", "-", &format!("{growth:.2}x"), "<= 1.2x", met(growth <= 1.2)],
        );
        table.row(
            &n.to_string(),
            "  indirect requests per member per period (no failures)",
            [&format!("{:.3}", row.indirect), "-", "-", "", "-"],
        );
        let frame_growth = row.frames / base.frames;
        table.row(
            &n.to_string(),
            format!("  frames sent per member per period (results to every peer), vs {} members", base.nodes),
            [
                &format!("{:.0}", row.frames),
                "-",
                &format!("{frame_growth:.1}x"),
                "O(n*k) overall",
                met(frame_growth <= 1.2),
            ],
        );
        let p50 = percentile(&row.cpu, 0.5);
        let max = row.cpu.last().copied().unwrap_or_default();
        table.row(
            &n.to_string(),
            format!("  CPU per simulated period, whole unit, one thread ({} periods)", row.cpu.len()),
            [&duration(p50), &duration(max), "-", "", "-"],
        );
        table.row(
            &n.to_string(),
            "  CPU per member per period",
            [&duration(p50 / u32::try_from(n).unwrap_or(1)), "-", "-", "", "-"],
        );
        let median = row.detection[row.detection.len() / 2];
        let worst = row.detection.last().copied().unwrap_or_default();
        table.row(
            &n.to_string(),
            format!(
                "  periods to detect a killed member ({} kills; >{DETECTION_LIMIT} = not detected)",
                row.detection.len()
            ),
            [&median.to_string(), &worst.to_string(), "-", "<= 3", met(worst <= 3)],
        );
        table.row(
            &n.to_string(),
            format!("  live members accused in {periods} periods: no loss / 30% loss"),
            [
                &row.accused_clean.to_string(),
                &row.accused_lossy.to_string(),
                "-",
                "0",
                met(row.accused_clean + row.accused_lossy == 0),
            ],
        );
    }
    println!(
        "\nedge-health unit bench: simulated units, period 10 s, k = {K}, 3 indirect helpers, vote window 3; {} s; load average {}",
        started.elapsed().as_secs(),
        load_average().unwrap_or_else(|| "unknown".into())
    );
    table.print();
}
