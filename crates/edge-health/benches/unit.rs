//! edge-health at unit scale: simulated units of 50, 500 and 2,000 members running the
//! real protocol in one process (`edge_health::sim`: real selection, checks scoring,
//! indirect probes, sealed and verified messages, relay rounds, vote tables, writer rule),
//! one table.
//!
//! Per period and per member: probe attempts (direct, retries, on behalf of others),
//! indirect requests, frames and bytes sent (every probe's liveness challenge and proof
//! included), the share of the period's ballots a member
//! holds at its end; CPU per period (wall time of one simulated period on one thread,
//! every member's work included, and divided by the members); periods until every live
//! member holds a killed member unhealthy; false accusations of live members without loss
//! and with 30% loss; the cost of one ballot signature and verification (Ed25519) and the
//! verifications per member per period (the simulation verifies each distinct signature
//! once for all its members, so its CPU excludes them: they are priced per member from the
//! measured verification cost). Every member is simulated in full (it must be: each relays), so
//! 2,000 members need about 8 GB and minutes per period, and run fewer periods.
//! `EDGE_HEALTH_BENCH_QUICK=1` runs small units as a smoke test;
//! `EDGE_HEALTH_BENCH_NODES=50,500` only the units of those sizes;
//! `EDGE_HEALTH_BENCH_COSTS_ONLY=1` the per-period costs alone (no detection or accusation
//! runs).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use edge_health::config::ProtocolConfig;
use edge_health::sim::{PeriodStats, Sim, SimConfig, false_accusations};
use edge_health::vote::Verdict;
use edgegrid_testing::bench_table::{Table, duration, load_average, met, percentile};

/// `k` of the reference protocol.
const K: usize = 3;

fn config(nodes: usize, loss: f64, seed: u64) -> SimConfig {
    SimConfig::reference(nodes, loss, seed).expect("valid reference")
}

/// How much to run at one size: every member of the unit is simulated in full, so a
/// simulated period of 2,000 members takes minutes on one thread and the largest unit
/// runs fewer periods.
struct Plan {
    nodes: usize,
    /// Periods measured after a warm-up period.
    periods: usize,
    kills: u64,
    /// Periods of the accusation runs (one without loss, one with 30%).
    accusation_periods: usize,
}

struct Row {
    nodes: usize,
    probes: f64,
    indirect: f64,
    frames: f64,
    bytes: f64,
    /// Of a period's ballots, the share each member holds at the period's end: mean, worst.
    coverage: (f64, f64),
    cpu: Vec<Duration>,
    detection: Vec<usize>,
    accused_clean: usize,
    accused_lossy: usize,
    /// Under 30% loss with every member alive: ballots saying unhealthy, of all ballots.
    false_ballots: (u64, u64),
    /// Signature verifications per member per period.
    verifications: f64,
}

/// Periods until every live member holds `node` unhealthy (None: not within `limit`).
fn detection(sim: &mut Sim, node: &str, limit: usize) -> Option<usize> {
    for i in 1..=limit {
        sim.run_period();
        let live: Vec<String> = sim.live().filter(|m| *m != node).map(String::from).collect();
        if live.iter().all(|o| sim.verdict(o, node) == Some(Verdict::Unhealthy)) {
            return Some(i);
        }
    }
    None
}

/// Live members accused in `periods` periods, and the ballots wrongly saying unhealthy
/// of all ballots (every member is alive).
fn accusations(nodes: usize, loss: f64, seed: u64, periods: usize) -> (usize, (u64, u64)) {
    if periods == 0 {
        return (0, (0, 0));
    }
    let mut sim = Sim::new(config(nodes, loss, seed)).expect("valid simulation");
    let history: Vec<PeriodStats> = (0..periods).map(|_| sim.run_period()).collect();
    let everyone: BTreeSet<String> = sim.members().iter().cloned().collect();
    let ballots = history.iter().fold((0, 0), |(u, b), s| (u + s.unhealthy_ballots, b + s.ballots));
    (false_accusations(&history, &everyone).len(), ballots)
}

fn measure(plan: &Plan) -> Row {
    let nodes = plan.nodes;
    let mut sim = Sim::new(config(nodes, 0.0, 1)).expect("valid simulation");
    sim.run_period();
    let (mut probes, mut indirect, mut frames, mut bytes, mut cpu) = (0u64, 0u64, 0u64, 0u64, Vec::new());
    let mut verified = 0u64;
    let (mut coverage_sum, mut coverage_worst, mut samples) = (0.0, 1.0f64, 0usize);
    for _ in 0..plan.periods {
        let started = Instant::now();
        let stats = sim.run_period();
        cpu.push(started.elapsed());
        probes += stats.probe_attempts;
        indirect += stats.indirect_requests;
        frames += stats.frames_sent;
        bytes += stats.bytes_sent;
        verified += stats.signatures_verified;
        for member in sim.members() {
            let share = sim.known_ballots(member, stats.period) as f64 / stats.ballots.max(1) as f64;
            coverage_sum += share;
            coverage_worst = coverage_worst.min(share);
            samples += 1;
        }
    }
    // one simulated unit in memory at a time: 2,000 members take about 8 GB
    drop(sim);
    cpu.sort();
    let per = |total: u64| total as f64 / (plan.periods * nodes) as f64;
    let mut detection = Vec::new();
    for seed in 0..plan.kills {
        let mut sim = Sim::new(config(nodes, 0.0, seed + 10)).expect("valid simulation");
        sim.run_period();
        let victim = sim.members()[(seed as usize * 7 + nodes / 2) % nodes].clone();
        sim.kill(&victim);
        detection.push(detection_or_limit(&mut sim, &victim));
        eprintln!("{nodes} members: victim {victim} detected after {:?} periods", detection.last());
    }
    detection.sort();
    let (accused_clean, _) = accusations(nodes, 0.0, 3, plan.accusation_periods);
    let (accused_lossy, false_ballots) = accusations(nodes, 0.3, 4, plan.accusation_periods);
    Row {
        nodes,
        probes: per(probes),
        indirect: per(indirect),
        frames: per(frames),
        bytes: per(bytes),
        coverage: (coverage_sum / samples.max(1) as f64, coverage_worst),
        cpu,
        detection,
        accused_clean,
        accused_lossy,
        false_ballots,
        verifications: per(verified),
    }
}

/// Median time of one Ed25519 ballot signature and one verification (batches of 1,000).
fn signature_costs() -> (Vec<Duration>, Vec<Duration>) {
    use edge_health::ballot::Ballot;
    use edge_health::node_key::SigningKey;
    use edge_health::time::Period;
    let key = SigningKey::from_seed(&[3; 32]);
    let public = key.public_key();
    let (mut sign, mut verify) = (Vec::new(), Vec::new());
    for batch in 0..20u64 {
        let started = Instant::now();
        let signed: Vec<_> = (0..1_000u64)
            .map(|i| key.sign("edge-00001", "edge-00002", Ballot { period: Period(batch * 1_000 + i), healthy: true }))
            .collect();
        sign.push(started.elapsed() / 1_000);
        let started = Instant::now();
        assert!(signed.iter().all(|b| public.verifies("edge-00001", "edge-00002", b)));
        verify.push(started.elapsed() / 1_000);
    }
    sign.sort();
    verify.sort();
    (sign, verify)
}

const DETECTION_LIMIT: usize = 5;

fn detection_or_limit(sim: &mut Sim, node: &str) -> usize {
    detection(sim, node, DETECTION_LIMIT).unwrap_or(DETECTION_LIMIT + 1)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let quick = std::env::var("EDGE_HEALTH_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let plans: Vec<Plan> = if quick {
        vec![
            Plan { nodes: 20, periods: 3, kills: 2, accusation_periods: 4 },
            Plan { nodes: 100, periods: 3, kills: 2, accusation_periods: 4 },
        ]
    } else {
        vec![
            Plan { nodes: 50, periods: 6, kills: 3, accusation_periods: 6 },
            Plan { nodes: 500, periods: 4, kills: 3, accusation_periods: 5 },
            Plan { nodes: 2_000, periods: 1, kills: 1, accusation_periods: 2 },
        ]
    };
    // EDGE_HEALTH_BENCH_NODES=2000: only the units of these sizes (comma-separated)
    let only: Option<Vec<usize>> = std::env::var("EDGE_HEALTH_BENCH_NODES")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect());
    // EDGE_HEALTH_BENCH_COSTS_ONLY=1: the period costs alone (no kills, no accusation runs),
    // for the largest unit, whose simulated periods take minutes each
    let costs_only = std::env::var("EDGE_HEALTH_BENCH_COSTS_ONLY").is_ok_and(|v| !v.is_empty() && v != "0");
    let plans: Vec<Plan> = plans
        .into_iter()
        .filter(|p| only.as_ref().is_none_or(|o| o.contains(&p.nodes)))
        .map(|p| if costs_only { Plan { kills: 0, accusation_periods: 0, ..p } } else { p })
        .collect();
    let started = Instant::now();
    let rows: Vec<Row> = plans
        .iter()
        .map(|plan| {
            let row = measure(plan);
            // partial results survive a run stopped before the largest unit ends
            eprintln!(
                "{} members: {:.2} probes, {:.1} frames, {:.1} KiB per member per period; coverage {:.2}% (worst {:.2}%); CPU {:?}; detection {:?}; accused {} / {}",
                row.nodes,
                row.probes,
                row.frames,
                row.bytes / 1024.0,
                row.coverage.0 * 100.0,
                row.coverage.1 * 100.0,
                row.cpu,
                row.detection,
                row.accused_clean,
                row.accused_lossy
            );
            row
        })
        .collect();
    let mut table = Table::new(["median / p50", "p99 / max", "ratio", "target", "result"]);
    let (sign, verify) = signature_costs();
    table.row(
        "all",
        "one ballot signature (Ed25519, ring), batches of 1,000",
        [&duration(percentile(&sign, 0.5)), &duration(*sign.last().unwrap()), "-", "", "-"],
    );
    table.row(
        "all",
        "one ballot verification",
        [&duration(percentile(&verify, 0.5)), &duration(*verify.last().unwrap()), "-", "", "-"],
    );
    let verify_cost = percentile(&verify, 0.5);
    let base = &rows[0];
    for (i, row) in rows.iter().enumerate() {
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
        let protocol = ProtocolConfig::default();
        // relay frames, and a liveness challenge and its proof per probe (no loss: one each)
        let bound = f64::from(protocol.relay_rounds) * protocol.relay_fanout as f64 + 2.0 * assigned;
        table.row(
            &n.to_string(),
            format!(
                "  frames sent per member per period, vs {} members (relay rounds x fanout, 2 per probe: at most)",
                base.nodes
            ),
            [
                &format!("{:.1}", row.frames),
                "-",
                &format!("{:.2}x", row.frames / base.frames),
                &format!("<= {bound} whatever n"),
                met(row.frames <= bound),
            ],
        );
        table.row(
            &n.to_string(),
            "  bytes sent per member per period (every member learns all n*k ballots: O(n))",
            [&format!("{:.1} KiB", row.bytes / 1024.0), "-", &format!("{:.1}x", row.bytes / base.bytes), "", "-"],
        );
        table.row(
            &n.to_string(),
            "  a period's ballots a member holds at its end: mean / worst member",
            [&format!("{:.2}%", row.coverage.0 * 100.0), &format!("{:.2}%", row.coverage.1 * 100.0), "-", "", "-"],
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
            "  CPU per member per period (simulated work, verifications excluded: next row)",
            [&duration(p50 / u32::try_from(n).unwrap_or(1)), "-", "-", "", "-"],
        );
        let share = verify_cost.as_secs_f64() * row.verifications / ProtocolConfig::default().period.as_secs_f64();
        table.row(
            &n.to_string(),
            "  signature verifications per member per period (ballots new to it); their CPU share of a 10 s period",
            [&format!("{:.0}", row.verifications), "-", &format!("{:.3}% CPU", share * 100.0), "", "-"],
        );
        if row.detection.is_empty() {
            continue;
        }
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
            format!("  live members accused in {} periods: no loss / 30% loss", plans[i].accusation_periods),
            [
                &row.accused_clean.to_string(),
                &row.accused_lossy.to_string(),
                "-",
                "0",
                met(row.accused_clean + row.accused_lossy == 0),
            ],
        );
        let (wrong, cast) = row.false_ballots;
        table.row(
            &n.to_string(),
            "  ballots wrongly saying unhealthy, 30% loss (a vote needs a majority of them)",
            [
                &format!("{:.2}%", 100.0 * wrong as f64 / cast.max(1) as f64),
                "-",
                &format!("{wrong} of {cast}"),
                "",
                "-",
            ],
        );
    }
    println!(
        "\nedge-health unit bench: simulated units (every member in full), period 10 s, k = {K}, 3 indirect helpers, vote window 3, relay 8 rounds x 3 peers, spread 2; {} s; load average {}",
        started.elapsed().as_secs(),
        load_average().unwrap_or_else(|| "unknown".into())
    );
    table.print();
}
