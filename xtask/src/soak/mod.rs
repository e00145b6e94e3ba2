//! `cargo xtask soak`: the whole system on the local cluster (the real binaries, the
//! stand-ins) under a schedule of faults drawn from one seed ([`schedule`]), checked every
//! second against the mission's promises ([`invariants`]) by an observer that knows the
//! truth: which node lives, which link is cut, which process was stopped. A violation is
//! printed with its invariant, subject, time, the faults before it and the command that
//! replays the run; the run ends with a table ([`report`]) and fails on any violation,
//! also when SIGTERM or Ctrl-C stops it early ([`run_failed`]).

mod faults;
mod grids;
mod invariants;
mod mirror;
mod observe;
mod report;
mod sabotage;
mod schedule;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use fake_apiserver::FakeApiServer;
use kube::ResourceExt;
use tokio::time::Instant;

use crate::local_cluster::cluster::{Cluster, GRID_CONTROLLER_TOKEN};
use crate::local_cluster::layout;
use faults::{Phase, Truth};
use invariants::{Bounds, Checker, ProcessObserved, Sample, Secs, Violation, WrapperObserved};
use mirror::Mirror;
use schedule::Fault;

const USAGE: &str = "usage: cargo xtask soak [--seed S] [--duration D] [--nodes N] [--units U] [--no-build]

Starts the embedded local cluster with N nodes in U units (N a multiple of U, 3 to 15
nodes a unit) and every component, each unit sharing one upstream (vouched by the unit
signer), then injects faults drawn from the seed: node deaths, node and unit cloud link
cuts, partitions inside a unit (iptables, as root), SIGKILL and SIGTERM of every
component (restarted after), the units' upstream leaders included, API server 503
bursts, slow answers, cut watches and restarts, relabels, grids created, scaled and
deleted. Every second an observer checks the six invariants; a violation is printed with
the seed that replays it. Exits 0 when none was broken. SIGTERM or Ctrl-C stops the run
early: it still prints its table, and exits 1 if a violation was recorded by then.

  --seed S       the schedule's seed (default: random, printed first)
  --duration D   how long the faults run, e.g. 90s, 30m (default 5m); the last 60 s are
                 quiet so the end checks see the healed system
  --nodes N      default 12
  --units U      default 3
  --no-build     do not run `cargo build` for the component binaries first
  --sabotage     check the checker: no faults, but at 40 s each invariant is broken on
                 purpose (see xtask/src/soak/sabotage.rs); the run must fail, naming all six";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SoakArgs {
    pub seed: u64,
    pub duration: Duration,
    pub nodes: u8,
    pub units: u8,
    pub build: bool,
    pub sabotage: bool,
}

impl SoakArgs {
    /// `None` when `--help` was asked for (and printed).
    pub fn parse(args: &[String]) -> Result<Option<Self>> {
        let mut out = Self {
            seed: random_seed()?,
            duration: Duration::from_secs(300),
            nodes: 12,
            units: 3,
            build: true,
            sabotage: false,
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--help" | "-h" => {
                    println!("{USAGE}");
                    return Ok(None);
                }
                "--seed" => out.seed = value()?.parse().context("--seed")?,
                "--duration" => out.duration = parse_duration(value()?).context("--duration")?,
                "--nodes" => out.nodes = value()?.parse().context("--nodes")?,
                "--units" => out.units = value()?.parse().context("--units")?,
                "--no-build" => out.build = false,
                "--sabotage" => out.sabotage = true,
                other => bail!("unknown argument {other:?}\n{USAGE}"),
            }
        }
        if !(1..=26).contains(&out.units)
            || !out.nodes.is_multiple_of(out.units)
            || !(3..=15).contains(&(out.nodes / out.units))
        {
            bail!("--nodes {} --units {}: give 1 to 26 units of 3 to 15 nodes each", out.nodes, out.units);
        }
        Ok(Some(out))
    }

    /// The command that replays this run.
    pub fn replay(&self) -> String {
        format!(
            "cargo xtask soak --seed {} --duration {}s --nodes {} --units {}{}",
            self.seed,
            self.duration.as_secs(),
            self.nodes,
            self.units,
            if self.sabotage { " --sabotage" } else { "" }
        )
    }
}

/// `90s`, `30m`, `1h`, or plain seconds.
fn parse_duration(text: &str) -> Result<Duration> {
    let (number, unit) = text.find(|c: char| !c.is_ascii_digit()).map_or((text, ""), |at| text.split_at(at));
    let number: u64 = number.parse().with_context(|| format!("{text:?} is not a duration"))?;
    let seconds = match unit {
        "" | "s" => number,
        "m" => number * 60,
        "h" => number * 3600,
        _ => bail!("{text:?}: a duration is a number with s, m or h"),
    };
    Ok(Duration::from_secs(seconds))
}

fn random_seed() -> Result<u64> {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)).context("reading /dev/urandom")?;
    // short enough to type back
    Ok(u64::from_le_bytes(bytes) % 1_000_000)
}

/// No fault starts before this, so protection is earned first.
const WARMUP: Duration = Duration::from_secs(20);
/// No fault lasts into the final minute: the end checks see the healed system.
const TAIL: Duration = Duration::from_secs(60);
/// How long the cluster may take to settle before the faults start.
const SETTLE: Duration = Duration::from_secs(120);

/// The local cluster's timing (1 s monitor period, 8 s grace, 2 s edge-health periods)
/// and how late each promise may be on 2 busy cores. A view may lag 65 s: after a cut
/// link heals (or an API fault ends), a wrapper's watches wait out kube-runtime's default
/// backoff before they list again, as client-go's reflector does: 0.8 s doubling to 30 s
/// plus up to 100% jitter (so up to 60 s), reset only after 2 quiet minutes.
const BOUNDS: Bounds = Bounds {
    earn: 30.0,
    dead_handled: 8.0 + 30.0,
    eviction: 300.0,
    view: 65.0,
    mirror: 15.0,
    converge: 45.0,
    rss_kib: 512 * 1024,
};

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// It ran its whole duration.
    Completed,
    /// SIGTERM or Ctrl-C stopped it early.
    Stopped,
}

/// Whether a run fails: on any failed check, however it ended (a signal must not turn a
/// recorded violation into a pass), and on faults the system had not converged after
/// only when it ran its whole duration (a stopped run cut their convergence short).
fn run_failed(failed_checks: u64, unconverged: usize, ending: Ending) -> bool {
    failed_checks > 0 || (ending == Ending::Completed && unconverged > 0)
}

/// `work`'s output, or `None` once SIGTERM or Ctrl-C stopped the run (at once when it
/// already has).
async fn unless_stopped<T>(
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        output = work => Some(output),
        Ok(_) = shutdown.wait_for(|stop| *stop) => None,
    }
}

/// The soak, on the started local cluster, until its duration is over or `shutdown` turns
/// true (SIGTERM or Ctrl-C); either way it ends with its table and verdict, once the
/// second it is in has been observed.
pub async fn run(
    cluster: &mut Cluster,
    server: &mut FakeApiServer,
    args: &SoakArgs,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    println!("soak seed {} ({}); replay: {}", args.seed, humantime(args.duration), args.replay());
    let Some(ready) = unless_stopped(&mut shutdown, crate::local_cluster::cluster::wait_ready(cluster)).await else {
        println!("stopped before the faults started: nothing was checked");
        return Ok(());
    };
    ready?;
    let layout = schedule::Layout {
        units: cluster.nodes.iter().fold(BTreeMap::new(), |mut units, n| {
            units.entry(n.unit.clone()).or_insert_with(Vec::new).push(n.name.clone());
            units
        }),
        cloud_components: vec!["edge-node-lifecycle".into(), "edge-health-admission".into(), "grid-controller".into()],
        node_components: vec!["edge-health".into(), "grid-wrapper".into()],
    };
    let mut faults =
        if args.sabotage { Vec::new() } else { schedule::draw(args.seed, args.duration, WARMUP, TAIL, &layout) };
    let partition = |f: &Fault| matches!(f.kind, schedule::FaultKind::UnitPartition { .. });
    if faults.iter().any(partition)
        && let Err(error) = cluster.enable_partitions()
    {
        if edgegrid_testing::tools::in_ci() {
            bail!("a partition inside a unit cannot be made here (CI is set, so the soak fails): {error:#}");
        }
        println!("  partitions inside a unit are left out: {error:#}");
        faults.retain(|f| !partition(f));
    }
    let fault_log_path = cluster.logs.join("soak-faults.log");
    let mut fault_log =
        std::fs::File::create(&fault_log_path).with_context(|| format!("creating {}", fault_log_path.display()))?;
    println!(
        "  {} faults drawn over {}; each is logged as it is done in {}",
        faults.len(),
        humantime(args.duration),
        fault_log_path.display()
    );
    faults::create_foreign_service(&cluster.client).await?;

    // a watching client per node's wrapper, for the whole run
    let (stop_mirrors, mirrors_stopped) = tokio::sync::watch::channel(false);
    let mut mirrors = BTreeMap::new();
    for node in &cluster.nodes {
        let mirror = Arc::new(Mutex::new(Mirror::default()));
        tokio::spawn(mirror::follow(node.addr(layout::WRAPPER_PORT), mirror.clone(), mirrors_stopped.clone()));
        mirrors.insert(node.name.clone(), mirror);
    }
    let mut run = Run {
        truth: Truth::of(&cluster.nodes),
        checker: Checker::new(BOUNDS),
        mirrors,
        logs: observe::LogScanner::default(),
        peak_rss: BTreeMap::new(),
        request_mark: server.requests().mark(),
        pod_nodes: BTreeMap::new(),
        stop_problems: Vec::new(),
        violations: Vec::new(),
        reported: 0,
        samples: (0, 0),
    };

    // settle: every view right and every grid converged before the clock starts
    let settle_by = Instant::now() + SETTLE;
    let start = Instant::now();
    loop {
        let settled = run.sample(cluster, server, 0.0, Duration::from_secs(3)).await
            && run.checker.converged()
            && unsettled(&cluster.client).await.is_ok_and(|problems| problems.is_empty());
        if settled {
            break;
        }
        if Instant::now() >= settle_by {
            bail!("the cluster did not settle within {SETTLE:?} (logs: {})", cluster.logs.display());
        }
        if unless_stopped(&mut shutdown, tokio::time::sleep(Duration::from_secs(1))).await.is_none() {
            println!("stopped before the faults started: nothing was checked");
            return Ok(());
        }
    }
    println!("  settled in {:.0} s; faults start", start.elapsed().as_secs_f64());
    // what settling broke is no promise: the promises start now
    run.checker = Checker::new(BOUNDS);
    run.violations.clear();

    let operator = faults::Operator::start(cluster.client.clone());
    let mut events = faults::events(&faults);
    events.reverse(); // popped from the end: earliest first
    let mut applied: Vec<(Secs, String)> = Vec::new();
    let mut waiting: Vec<(String, Secs)> = Vec::new();
    let mut converge_times: BTreeMap<String, Vec<Secs>> = BTreeMap::new();
    let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
    let clock = Instant::now();
    let end = args.duration.as_secs_f64();
    let mut sabotaged = false;
    let ending = loop {
        let now = clock.elapsed().as_secs_f64();
        while events.last().is_some_and(|(at, _, _)| at.as_secs_f64() <= now) {
            let Some((_, index, phase)) = events.pop() else { break };
            let fault: &Fault = &faults[index];
            let line = faults::apply(
                cluster,
                server,
                &mut run.truth,
                &operator,
                (index, fault, phase),
                &mut run.stop_problems,
            )
            .await?;
            use std::io::Write;
            writeln!(fault_log, "{now:>7.1} s  {line}")?;
            applied.push((now, line));
            if phase == Phase::Start {
                *counts.entry(fault.kind.label()).or_default() += 1;
            }
            if phase == Phase::End {
                waiting.push((fault.kind.label().to_string(), now));
            }
        }
        if args.sabotage && now >= sabotage::AT && !std::mem::replace(&mut sabotaged, true) {
            let mirror = run.mirrors.get("edge-a-1").context("edge-a-1's watching client")?.clone();
            let line = sabotage::commit(cluster, server, &mut run.truth, &mirror).await?;
            use std::io::Write;
            writeln!(fault_log, "{now:>7.1} s  {line}")?;
            applied.push((now, line));
        }
        // a sample never holds up the next fault (an API fault slows the observer too)
        let next_event = events.last().map_or(Duration::from_secs(3), |(at, _, _)| {
            at.saturating_sub(Duration::from_secs_f64(now)).max(Duration::from_millis(500))
        });
        let read = run.sample(cluster, server, now, next_event.min(Duration::from_secs(3))).await;
        if read && run.checker.converged() {
            for (kind, since) in waiting.drain(..) {
                converge_times.entry(kind).or_default().push(now - since);
            }
        }
        for violation in std::mem::take(&mut run.violations) {
            print_violation(&violation, &applied, args);
            run.reported += 1;
        }
        if now >= end {
            break Ending::Completed;
        }
        let next = clock + Duration::from_secs_f64(now.floor() + 1.0);
        if unless_stopped(&mut shutdown, tokio::time::sleep_until(next)).await.is_none() {
            println!("stopped by a signal at {now:.0} s of {end:.0} s");
            break Ending::Stopped;
        }
    };
    let _ = stop_mirrors.send(true);
    let unconverged: Vec<String> = waiting.iter().map(|(kind, at)| format!("{kind} (ended at {at:.0} s)")).collect();
    let table = report::Table {
        faults: counts.into_iter().map(|(k, n)| (k.to_string(), n)).collect(),
        checks: run.checker.checks.iter().map(|(i, c)| (i.name(), *c)).collect(),
        converge: converge_times,
        handled_after: run.checker.handled_after.clone(),
        unconverged: unconverged.clone(),
        peak_rss: run.peak_rss.clone(),
        samples: run.samples,
    };
    print!("{}", table.render());
    let failed: u64 = run.checker.checks.values().map(|(_, failed)| failed).sum();
    let writes_failed = operator.failed.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if !writes_failed.is_empty() {
        bail!("the soak's own writes failed: {}", writes_failed.join("; "));
    }
    if run_failed(failed, unconverged.len(), ending) {
        bail!(
            "{} invariant violation(s){}; replay: {}",
            run.reported,
            match ending {
                Ending::Completed if !unconverged.is_empty() => {
                    format!(", not converged after {}", unconverged.join(", "))
                }
                Ending::Completed => String::new(),
                Ending::Stopped => " before a signal stopped the run".to_string(),
            },
            args.replay()
        );
    }
    match ending {
        Ending::Completed => println!("No invariant was broken (seed {}).", args.seed),
        Ending::Stopped => println!("No invariant was broken until a signal stopped the run (seed {}).", args.seed),
    }
    Ok(())
}

/// What keeps the cluster from its settled start: workloads with replicas not ready, nodes
/// not Ready or not yet vouched for by their unit, no ready endpoint behind the example's
/// Service.
async fn unsettled(client: &kube::Client) -> Result<Vec<String>> {
    use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
    use k8s_openapi::api::core::v1::Node;
    let all = kube::api::ListParams::default();
    let deployments = kube::Api::<Deployment>::all(client.clone()).list(&all).await?.items;
    let sets = kube::Api::<StatefulSet>::all(client.clone()).list(&all).await?.items;
    let mut problems = crate::local_cluster::workloads::unsettled(&deployments, &sets);
    for node in kube::Api::<Node>::all(client.clone()).list(&all).await?.items {
        let reading = edgegrid_core::protection::NodeReading::of_node(&node);
        if reading.ready.and_then(|c| c.status) != Some("True") || reading.voted_unhealthy() {
            problems.push(format!("{}: not Ready, or not vouched for", node.name_any()));
        }
    }
    Ok(problems)
}

fn humantime(duration: Duration) -> String {
    let seconds = duration.as_secs();
    if seconds.is_multiple_of(60) { format!("{} min", seconds / 60) } else { format!("{seconds} s") }
}

fn print_violation(violation: &Violation, applied: &[(Secs, String)], args: &SoakArgs) {
    println!(
        "VIOLATION of invariant {} at {:.0} s: {}: {}",
        violation.invariant.name(),
        violation.at,
        violation.subject,
        violation.detail
    );
    let recent: Vec<String> =
        applied.iter().rev().take(5).rev().map(|(at, line)| format!("      {at:>6.1} s  {line}")).collect();
    if !recent.is_empty() {
        println!("   the last faults:\n{}", recent.join("\n"));
    }
    println!("   replay: {}", args.replay());
}

/// The soak's running state besides the cluster.
struct Run {
    truth: Truth,
    checker: Checker,
    mirrors: BTreeMap<String, Arc<Mutex<Mirror>>>,
    logs: observe::LogScanner,
    peak_rss: BTreeMap<String, u64>,
    request_mark: u64,
    /// Where each pod was last seen bound.
    pod_nodes: BTreeMap<String, String>,
    /// How SIGTERM-stopped processes exited, when not with 0 promptly.
    stop_problems: Vec<(String, String)>,
    /// Found by the last sample, not yet printed; how many were printed.
    violations: Vec<Violation>,
    reported: usize,
    /// Samples taken, and skipped because the API server did not answer the observer.
    samples: (u64, u64),
}

impl Run {
    /// Reads the cluster at `at` (the cloud within `patience`) and checks what it read;
    /// false when the API server did not answer the observer in time (no sample).
    async fn sample(&mut self, cluster: &mut Cluster, server: &FakeApiServer, at: Secs, patience: Duration) -> bool {
        self.samples.0 += 1;
        let cloud = match tokio::time::timeout(patience, observe::cloud(&cluster.client)).await {
            Ok(Ok(cloud)) => cloud,
            _ => {
                self.samples.1 += 1;
                return false;
            }
        };
        let requests = server.requests().since(self.request_mark);
        self.request_mark = requests.last().map_or(self.request_mark, |r| r.seq + 1);
        let evictions = grids::evictions(&requests, &self.pod_nodes);
        self.pod_nodes.extend(observe::pod_nodes(&cloud.pods));
        let foreign_writes = grids::foreign_writes(&requests, GRID_CONTROLLER_TOKEN, &grids::writable(&cloud.listed));
        let truth = self.truth.nodes();

        // each running wrapper's list, all at once (a hung one costs its 3 s once)
        let serving: Vec<(String, std::net::SocketAddr)> = cluster
            .nodes
            .iter()
            .filter(|n| truth.iter().any(|t| t.name == n.name && t.alive && t.wrapper_running))
            .map(|n| (n.name.clone(), n.addr(layout::WRAPPER_PORT)))
            .collect();
        let lists = futures::future::join_all(serving.iter().map(|(_, addr)| observe::wrapper_list(*addr))).await;
        let mut wrappers = BTreeMap::new();
        for ((name, _), listed) in serving.into_iter().zip(lists) {
            let (served, mirror_anomalies) = match self.mirrors.get(&name) {
                Some(mirror) => {
                    let mut mirror = mirror.lock().unwrap_or_else(|e| e.into_inner());
                    (mirror.served(), mirror.take_anomalies())
                }
                None => (None, Vec::new()),
            };
            let (listed, listed_slices) = match listed {
                Some((endpoints, slices)) => (Some(endpoints), slices),
                None => (None, 0),
            };
            wrappers.insert(name, WrapperObserved { listed, listed_slices, mirror: served, mirror_anomalies });
        }

        let mut processes = Vec::new();
        let stop_problems: BTreeMap<String, String> = self.stop_problems.drain(..).collect();
        for component in &mut cluster.components {
            let exited = component.exited().map(|status| status.to_string());
            let rss = component.pid().map_or(0, observe::rss_of);
            let peak = self.peak_rss.entry(component.name.clone()).or_default();
            *peak = (*peak).max(rss);
            processes.push(ProcessObserved {
                name: component.name.clone(),
                exited_unasked: exited,
                panicked: self.logs.panic_since_last(&component.log),
                stop_problem: stop_problems.get(&component.name).cloned(),
                rss_kib: rss,
            });
        }
        let in_process = "xtask (API server, grid controller, stand-ins)";
        let rss = observe::rss_of(std::process::id());
        let peak = self.peak_rss.entry(in_process.to_string()).or_default();
        *peak = (*peak).max(rss);
        let controller_exited =
            if self.truth.should_run("grid-controller") { cluster.grid_controller.exited() } else { None };
        processes.push(ProcessObserved {
            name: "grid-controller".into(),
            exited_unasked: controller_exited,
            panicked: self.logs.panic_since_last(&cluster.logs.join(crate::local_cluster::cluster::IN_PROCESS_LOG)),
            stop_problem: stop_problems.get("grid-controller").cloned(),
            // shares the xtask process: its memory is in that row of the table
            rss_kib: 0,
        });

        let sample = Sample {
            at,
            webhook_running: self.truth.should_run("edge-health-admission"),
            truth,
            nodes: cloud.listed.nodes.iter().map(|n| (n.name_any(), observe::node_observed(n, &cloud.pods))).collect(),
            unit_services: observe::unit_services(&cloud.listed.services),
            cloud: cloud.endpoints,
            wrappers,
            evictions,
            grid_problems: grids::problems(&cloud.listed),
            foreign_writes,
            processes,
        };
        self.violations.extend(self.checker.check(&sample));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Option<SoakArgs>> {
        SoakArgs::parse(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn flags_are_read_and_a_layout_that_protects_nobody_is_refused() {
        let args = parse(&["--seed", "42", "--duration", "30m", "--nodes", "20", "--units", "4", "--no-build"])
            .expect("ok")
            .expect("a run");
        assert_eq!(
            args,
            SoakArgs {
                seed: 42,
                duration: Duration::from_secs(1800),
                nodes: 20,
                units: 4,
                build: false,
                sabotage: false
            }
        );
        assert_eq!(args.replay(), "cargo xtask soak --seed 42 --duration 1800s --nodes 20 --units 4");
        let defaults = parse(&[]).expect("ok").expect("a run");
        assert_eq!((defaults.duration, defaults.nodes, defaults.units), (Duration::from_secs(300), 12, 3));
        assert!(parse(&["--help"]).expect("help").is_none());
        for bad in [&["--nodes", "10", "--units", "3"][..], &["--nodes", "4", "--units", "2"], &["--units", "0"]] {
            let error = parse(bad).expect_err("refused").to_string();
            assert!(error.contains("give 1 to 26 units of 3 to 15 nodes each"), "{bad:?}: {error}");
        }
        assert!(parse(&["--bogus"]).is_err());
        assert_eq!(parse_duration("90s").expect("90s"), Duration::from_secs(90));
        assert_eq!(parse_duration("2h").expect("2h"), Duration::from_secs(7200));
        assert_eq!(parse_duration("45").expect("45"), Duration::from_secs(45));
        assert!(parse_duration("5 min").is_err() && parse_duration("m").is_err());
    }

    #[test]
    fn a_run_stopped_by_a_signal_fails_on_a_recorded_violation_and_only_then() {
        assert!(!run_failed(0, 0, Ending::Completed));
        assert!(run_failed(1, 0, Ending::Completed));
        assert!(run_failed(0, 1, Ending::Completed), "a completed run must have converged");
        assert!(run_failed(3, 0, Ending::Stopped), "a signal does not turn a violation into a pass");
        assert!(run_failed(1, 2, Ending::Stopped));
        assert!(!run_failed(0, 0, Ending::Stopped));
        assert!(!run_failed(0, 2, Ending::Stopped), "faults cut short by the signal are no violation");
    }
}
