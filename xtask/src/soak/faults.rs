//! Doing the schedule's faults to the local cluster, and the ground truth they leave
//! (which node lives, whose link is cut, which process a fault stopped, which unit each
//! node is in), which the checker judges the cluster against.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use fake_apiserver::{FakeApiServer, Fault as ApiServerFault};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::invariants::NodeTruth;
use super::schedule::{ApiFault, Fault, FaultKind, Signal};
use crate::local_cluster::cluster::Cluster;
use crate::local_cluster::layout::{SimNode, UNIT_LABEL_KEY};

/// Where a fault is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Start,
    /// Halfway (grid churn scales its grid).
    Middle,
    End,
}

/// Every fault's phases in time order: `(when, fault index, phase)`.
pub fn events(faults: &[Fault]) -> Vec<(Duration, usize, Phase)> {
    let mut out = Vec::new();
    for (index, fault) in faults.iter().enumerate() {
        out.push((fault.at, index, Phase::Start));
        if matches!(fault.kind, FaultKind::GridChurn { .. }) {
            out.push((fault.at + fault.lasts / 2, index, Phase::Middle));
        }
        out.push((fault.ends(), index, Phase::End));
    }
    // at one instant: ends first (what heals makes room), then starts, in schedule order
    out.sort_by_key(|(at, index, phase)| (*at, *phase != Phase::End, *index, *phase));
    out
}

/// What the soak knows, as the faults left it.
pub struct Truth {
    /// node -> its unit label's value.
    units: BTreeMap<String, String>,
    dead: BTreeSet<String>,
    /// node -> how many cuts hold its link down.
    cuts: BTreeMap<String, u32>,
    /// Processes a fault stopped (not those of dead nodes).
    stopped: BTreeSet<String>,
    /// What each running fault's end restores, by fault index: a unit cut's nodes (healed
    /// are the nodes it cut), a relabelled node's old unit.
    undo: BTreeMap<usize, Vec<String>>,
    /// Each running partition's two sides, by fault index.
    splits: BTreeMap<usize, (BTreeSet<String>, BTreeSet<String>)>,
}

impl Truth {
    pub fn of(nodes: &[SimNode]) -> Self {
        Self {
            units: nodes.iter().map(|n| (n.name.clone(), n.unit.clone())).collect(),
            dead: BTreeSet::new(),
            cuts: BTreeMap::new(),
            stopped: BTreeSet::new(),
            undo: BTreeMap::new(),
            splits: BTreeMap::new(),
        }
    }

    /// The nodes `node`'s site network does not reach (across a running partition).
    fn cut_from(&self, node: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for (one, other) in self.splits.values() {
            if one.contains(node) {
                out.extend(other.iter().cloned());
            }
            if other.contains(node) {
                out.extend(one.iter().cloned());
            }
        }
        out
    }

    /// Every pair of nodes a running partition separates.
    pub fn split_pairs(&self) -> Vec<(String, String)> {
        let mut pairs = BTreeSet::new();
        for (one, other) in self.splits.values() {
            for a in one {
                pairs.extend(other.iter().map(|b| (a.clone(), b.clone())));
            }
        }
        pairs.into_iter().collect()
    }

    pub fn nodes(&self) -> Vec<NodeTruth> {
        self.units
            .iter()
            .map(|(name, unit)| {
                let alive = !self.dead.contains(name);
                NodeTruth {
                    name: name.clone(),
                    unit: unit.clone(),
                    alive,
                    link_up: self.cuts.get(name).copied().unwrap_or(0) == 0,
                    watching: alive && !self.stopped.contains(&format!("edge-health-{name}")),
                    wrapper_running: alive && !self.stopped.contains(&format!("grid-wrapper-{name}")),
                    cut_from: self.cut_from(name),
                }
            })
            .collect()
    }

    /// The process is meant to run (no fault stopped it, its node lives).
    pub fn should_run(&self, process: &str) -> bool {
        !self.stopped.contains(process) && !self.dead.iter().any(|node| process.ends_with(&format!("-{node}")))
    }

    /// Sabotage (`--sabotage`): believe a live node dead, as an observer lied to.
    pub fn believe_dead(&mut self, node: &str) {
        self.dead.insert(node.to_string());
    }

    fn cut(&mut self, node: &str, up: bool) {
        let cuts = self.cuts.entry(node.to_string()).or_default();
        if up {
            *cuts = cuts.saturating_sub(1);
        } else {
            *cuts += 1;
        }
    }
}

/// Does `phase` of `fault` (the `index`th) to the cluster; returns what was done, for the
/// violation reports. A SIGTERM-stopped process that does not exit 0 promptly is noted
/// in `stop_problems`.
pub async fn apply(
    cluster: &mut Cluster,
    server: &mut FakeApiServer,
    truth: &mut Truth,
    operator: &Operator,
    (index, fault, phase): (usize, &Fault, Phase),
    stop_problems: &mut Vec<(String, String)>,
) -> Result<String> {
    let what = match (&fault.kind, phase) {
        (FaultKind::NodeDeath { node }, Phase::Start) => {
            truth.dead.insert(node.clone());
            cluster.kill_node(node).await;
            format!("node {node} dies")
        }
        (FaultKind::NodeDeath { node }, _) => {
            truth.dead.remove(node);
            cluster.revive_node(node)?;
            format!("node {node} boots again")
        }
        (FaultKind::NodeLinkCut { node }, phase) => {
            let up = phase == Phase::End;
            truth.cut(node, up);
            cluster.set_node_link(node, truth.cuts[node] == 0);
            format!("node {node}'s cloud link {}", if up { "healed" } else { "cut" })
        }
        (FaultKind::UnitLinkCut { unit }, phase) => {
            let nodes = match phase {
                Phase::Start => {
                    let nodes: Vec<String> =
                        truth.units.iter().filter(|(_, u)| *u == unit).map(|(n, _)| n.clone()).collect();
                    truth.undo.insert(index, nodes.clone());
                    nodes
                }
                _ => truth.undo.remove(&index).unwrap_or_default(),
            };
            let up = phase == Phase::End;
            for node in &nodes {
                truth.cut(node, up);
                cluster.set_node_link(node, truth.cuts[node] == 0);
            }
            format!("unit {unit}'s cloud links {} ({})", if up { "healed" } else { "cut" }, nodes.join(", "))
        }
        (FaultKind::ProcessKill { component, signal }, Phase::Start) => {
            stop_for_a_fault(cluster, truth, component, *signal, stop_problems).await?
        }
        (FaultKind::ProcessKill { component, .. }, _) => {
            restart(cluster, truth, component).await?;
            format!("{component} restarted")
        }
        (FaultKind::UnitLeaderKill { unit, signal }, Phase::Start) => {
            let members: Vec<String> = truth.units.iter().filter(|(_, u)| *u == unit).map(|(n, _)| n.clone()).collect();
            let mut leader = None;
            for node in cluster.nodes.iter().filter(|n| members.contains(&n.name)) {
                if super::observe::leads_its_unit(node.addr(crate::local_cluster::layout::WRAPPER_ADMIN_PORT)).await {
                    leader = Some(format!("grid-wrapper-{}", node.name));
                    break;
                }
            }
            match leader.filter(|component| truth.should_run(component)) {
                Some(component) => {
                    truth.undo.insert(index, vec![component.clone()]);
                    let line = stop_for_a_fault(cluster, truth, &component, *signal, stop_problems).await?;
                    format!("{line} (it led unit {unit}'s upstream)")
                }
                None => format!("no running wrapper leads unit {unit}'s upstream: nothing stopped"),
            }
        }
        (FaultKind::UnitLeaderKill { unit, .. }, _) => {
            match truth.undo.remove(&index).and_then(|stopped| stopped.into_iter().next()) {
                Some(component) => {
                    restart(cluster, truth, &component).await?;
                    format!("{component} restarted")
                }
                None => format!("(unit {unit}'s leader kill stopped nothing)"),
            }
        }
        (FaultKind::Api(fault), Phase::Start) => match fault {
            ApiFault::Unavailable => {
                server.set_fault("*", ApiServerFault::Error(503));
                "the API server answers 503".to_string()
            }
            ApiFault::Slow(ms) => {
                server.set_fault("*", ApiServerFault::LatencyMs(*ms));
                format!("the API server answers {ms} ms late")
            }
            ApiFault::DropWatches => {
                server.drop_watches();
                "the API server cuts every watch".to_string()
            }
            ApiFault::Restart { .. } => {
                server.go_down().await;
                "the API server goes down".to_string()
            }
        },
        (FaultKind::Api(ApiFault::Restart { lose_history }), _) => {
            server.come_back(*lose_history).await.context("the API server coming back")?;
            format!("the API server is back{}", if *lose_history { " without its history" } else { "" })
        }
        // cut watches resume on their own: nothing to undo
        (FaultKind::Api(ApiFault::DropWatches), _) => "(the cut watches resume)".to_string(),
        (FaultKind::Api(_), _) => {
            server.clear_faults();
            "the API server is well again".to_string()
        }
        (FaultKind::Relabel { node, to }, phase) => {
            let unit = match phase {
                Phase::Start => {
                    let from = truth.units.get(node).cloned().context("a node")?;
                    truth.undo.insert(index, vec![from]);
                    to.clone()
                }
                _ => truth.undo.remove(&index).and_then(|v| v.into_iter().next()).context("its old unit")?,
            };
            operator.send(Write::Relabel { node: node.clone(), unit: unit.clone() });
            truth.units.insert(node.clone(), unit.clone());
            format!("node {node} moves to {unit}")
        }
        (FaultKind::GridChurn { name }, Phase::Start) => {
            operator.send(Write::CreateGrids(name.clone()));
            format!("grids {name} created (1 replica a unit)")
        }
        (FaultKind::GridChurn { name }, Phase::Middle) => {
            operator.send(Write::ScaleGrid(name.clone()));
            format!("DeploymentGrid {name} scaled to 2 a unit")
        }
        (FaultKind::GridChurn { name }, Phase::End) => {
            operator.send(Write::DeleteGrids(name.clone()));
            format!("grids {name} deleted")
        }
        (FaultKind::UnitPartition { unit, cut_off }, phase) => {
            let line = if phase == Phase::Start {
                let cut_off: BTreeSet<String> = cut_off.iter().cloned().collect();
                let rest: BTreeSet<String> = truth
                    .units
                    .iter()
                    .filter(|(node, u)| *u == unit && !cut_off.contains(*node))
                    .map(|(node, _)| node.clone())
                    .collect();
                let line = format!(
                    "unit {unit}'s site network split: {} | {}",
                    cut_off.iter().cloned().collect::<Vec<_>>().join(", "),
                    rest.iter().cloned().collect::<Vec<_>>().join(", ")
                );
                truth.splits.insert(index, (cut_off, rest));
                line
            } else {
                truth.splits.remove(&index);
                format!("unit {unit}'s site network healed")
            };
            cluster.set_partitions(&truth.split_pairs())?;
            line
        }
    };
    Ok(what)
}

/// Stops `component` with `signal` for a fault (the truth says so); what was done.
async fn stop_for_a_fault(
    cluster: &mut Cluster,
    truth: &mut Truth,
    component: &str,
    signal: Signal,
    stop_problems: &mut Vec<(String, String)>,
) -> Result<String> {
    truth.stopped.insert(component.to_string());
    stop(cluster, component, signal, stop_problems).await?;
    Ok(format!("{component} {}", if signal == Signal::Kill { "SIGKILLed" } else { "SIGTERMed" }))
}

/// Starts `component` again after a fault stopped it, unless its node is dead (it starts
/// with the node) or it runs already (a node that booted again started it, or a second
/// fault that stopped it ended first).
async fn restart(cluster: &mut Cluster, truth: &mut Truth, component: &str) -> Result<()> {
    truth.stopped.remove(component);
    if component == "grid-controller" {
        cluster.grid_controller.restart().await?;
    } else if truth.should_run(component) {
        let process = cluster.components.iter_mut().find(|c| c.name == component).context("a component")?;
        if process.pid().is_none() {
            process.restart()?;
        }
    }
    Ok(())
}

/// A write the soak makes as an operator would (not a fault: the churn a cluster lives
/// with).
#[derive(Debug)]
pub enum Write {
    CreateGrids(String),
    ScaleGrid(String),
    DeleteGrids(String),
    Relabel { node: String, unit: String },
}

/// Makes the soak's writes in order, in a task of its own that rides out the API faults
/// the soak injects, so the schedule (which ends those faults) never waits on them.
pub struct Operator {
    queue: tokio::sync::mpsc::UnboundedSender<Write>,
    /// Writes that failed for good.
    pub failed: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Operator {
    pub fn start(client: Client) -> Self {
        let (queue, mut writes) = tokio::sync::mpsc::unbounded_channel::<Write>();
        let failed = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let failures = failed.clone();
        tokio::spawn(async move {
            while let Some(write) = writes.recv().await {
                if let Err(error) = operate(&client, &write).await {
                    failures.lock().unwrap_or_else(|e| e.into_inner()).push(format!("{write:?}: {error:#}"));
                }
            }
        });
        Self { queue, failed }
    }

    pub fn send(&self, write: Write) {
        let _ = self.queue.send(write);
    }
}

async fn operate(client: &Client, write: &Write) -> Result<()> {
    let deployment_grids: Api<edgegrid_core::crd::DeploymentGrid> = Api::namespaced(client.clone(), "default");
    let service_grids: Api<edgegrid_core::crd::ServiceGrid> = Api::namespaced(client.clone(), "default");
    match write {
        Write::CreateGrids(name) => create_grids(client, name).await,
        Write::ScaleGrid(name) => {
            let scale = json!({"spec": {"template": {"replicas": 2}}});
            let (params, patch) = (PatchParams::default(), Patch::Merge(&scale));
            retrying(|| deployment_grids.patch(name, &params, &patch)).await.map(drop)
        }
        Write::DeleteGrids(name) => {
            let params = DeleteParams::default();
            retrying(|| deployment_grids.delete(name, &params)).await?;
            retrying(|| service_grids.delete(name, &params)).await.map(drop)
        }
        Write::Relabel { node, unit } => relabel(client, node, unit).await,
    }
}

/// Stops `component` with `signal`: SIGTERM waits up to 10 s for an exit with 0.
async fn stop(
    cluster: &mut Cluster,
    component: &str,
    signal: Signal,
    stop_problems: &mut Vec<(String, String)>,
) -> Result<()> {
    if component == "grid-controller" {
        match signal {
            Signal::Kill => cluster.grid_controller.abort().await,
            Signal::Term => {
                if let Err(error) = cluster.grid_controller.stop().await {
                    stop_problems.push((component.to_string(), format!("{error:#}")));
                }
            }
        }
        return Ok(());
    }
    let process = cluster.components.iter_mut().find(|c| c.name == component).context("a component")?;
    match signal {
        Signal::Kill => process.kill().await,
        Signal::Term => match process.stop(Duration::from_secs(10)).await {
            Ok(status) if status.success() => {}
            // before its handler is installed a process dies of SIGTERM, as any does
            // (a kubelet stopping a container that is starting sees exit 143)
            Ok(status) if unix_signal(&status) == Some(15) && process.started.elapsed() < JUST_STARTED => {}
            Ok(status) => stop_problems.push((component.to_string(), format!("exited {status} after SIGTERM"))),
            Err(error) => stop_problems.push((component.to_string(), format!("{error:#}"))),
        },
    }
    Ok(())
}

/// How long after its start a process may still die of SIGTERM instead of handling it.
const JUST_STARTED: Duration = Duration::from_secs(3);

fn unix_signal(status: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

/// The soak's own writes ride out the API faults it injects: tried every 500 ms for 20 s.
async fn retrying<T, F, Fut>(mut call: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut tries = 0;
    loop {
        match call().await {
            Ok(value) => return Ok(value),
            Err(error) if tries < 40 => {
                tracing::debug!(error = %error, "soak write, retrying");
                tries += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(error) => bail!("a soak write failed 40 times: {error}"),
        }
    }
}

async fn relabel(client: &Client, node: &str, unit: &str) -> Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let labels = json!({"metadata": {"labels": {UNIT_LABEL_KEY: unit}}});
    let (params, patch) = (PatchParams::default(), Patch::Merge(&labels));
    retrying(|| api.patch(node, &params, &patch)).await?;
    Ok(())
}

/// A DeploymentGrid and a ServiceGrid `name`: one replica of an echo server a unit,
/// reached through a unit-kept Service.
async fn create_grids(client: &Client, name: &str) -> Result<()> {
    let deployment_grid: edgegrid_core::crd::DeploymentGrid = serde_json::from_value(json!({
        "apiVersion": "superedge.io/v1", "kind": "DeploymentGrid",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"gridUniqKey": UNIT_LABEL_KEY, "template": {
            "replicas": 1,
            "selector": {"matchLabels": {"appGrid": name}},
            "template": {"metadata": {"labels": {"appGrid": name}}, "spec": {"containers": [{
                "name": "echo", "image": "superedge/echoserver:2.2", "ports": [{"containerPort": 8080}]}]}}}},
    }))?;
    let service_grid: edgegrid_core::crd::ServiceGrid = serde_json::from_value(json!({
        "apiVersion": "superedge.io/v1", "kind": "ServiceGrid",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"gridUniqKey": UNIT_LABEL_KEY, "template": {
            "selector": {"appGrid": name}, "ports": [{"protocol": "TCP", "port": 80, "targetPort": 8080}]}},
    }))?;
    let post = PostParams::default();
    let deployments: Api<edgegrid_core::crd::DeploymentGrid> = Api::namespaced(client.clone(), "default");
    retrying(|| deployments.create(&post, &deployment_grid)).await?;
    let services: Api<edgegrid_core::crd::ServiceGrid> = Api::namespaced(client.clone(), "default");
    retrying(|| services.create(&post, &service_grid)).await?;
    Ok(())
}

/// A Service nobody's grid owns, over the example's pods in every unit: the grid
/// controller must never write it, and every wrapper serves all its endpoints.
pub async fn create_foreign_service(client: &Client) -> Result<()> {
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "foreign-svc", "namespace": "default"},
        "spec": {"selector": {"appGrid": "echo"}, "ports": [{"protocol": "TCP", "port": 80, "targetPort": 8080}]},
    }))?;
    Api::<Service>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &service)
        .await
        .context("creating the foreign Service")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(at: u64, lasts: u64, kind: FaultKind) -> Fault {
        Fault { at: Duration::from_secs(at), lasts: Duration::from_secs(lasts), kind }
    }

    #[test]
    fn phases_come_in_time_order_ends_first_and_churn_scales_halfway() {
        let faults = [
            fault(10, 20, FaultKind::GridChurn { name: "soak-1".into() }),
            fault(15, 0, FaultKind::Api(ApiFault::DropWatches)),
            fault(20, 10, FaultKind::NodeLinkCut { node: "n1".into() }),
            fault(5, 25, FaultKind::NodeDeath { node: "n2".into() }),
        ];
        let secs = |s| Duration::from_secs(s);
        assert_eq!(
            events(&faults),
            [
                (secs(5), 3, Phase::Start),
                (secs(10), 0, Phase::Start),
                (secs(15), 1, Phase::End),
                (secs(15), 1, Phase::Start),
                (secs(20), 0, Phase::Middle),
                (secs(20), 2, Phase::Start),
                (secs(30), 0, Phase::End),
                (secs(30), 2, Phase::End),
                (secs(30), 3, Phase::End),
            ]
        );
    }

    #[test]
    fn the_truth_follows_deaths_cuts_and_stops() {
        let nodes = crate::local_cluster::layout::nodes(0, 1, 3);
        let mut truth = Truth::of(&nodes);
        truth.dead.insert("edge-a-0".into());
        truth.cut("edge-a-1", false);
        truth.cut("edge-a-1", false);
        truth.cut("edge-a-1", true);
        truth.stopped.insert("grid-wrapper-edge-a-2".into());
        let view: Vec<(String, bool, bool, bool, bool)> =
            truth.nodes().into_iter().map(|n| (n.name, n.alive, n.link_up, n.watching, n.wrapper_running)).collect();
        assert_eq!(
            view,
            [
                ("edge-a-0".to_string(), false, true, false, false),
                ("edge-a-1".to_string(), true, false, true, true),
                ("edge-a-2".to_string(), true, true, true, false),
            ]
        );
        assert!(!truth.should_run("edge-health-edge-a-0"), "its node is dead");
        assert!(!truth.should_run("grid-wrapper-edge-a-2"), "a fault stopped it");
        assert!(truth.should_run("edge-health-edge-a-2"));
    }

    #[test]
    fn a_partition_cuts_each_side_from_the_other_and_no_one_from_its_own() {
        let nodes = crate::local_cluster::layout::nodes(0, 2, 3);
        let mut truth = Truth::of(&nodes);
        let side = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<BTreeSet<String>>();
        truth.splits.insert(4, (side(&["edge-a-0"]), side(&["edge-a-1", "edge-a-2"])));
        let cut: Vec<(String, Vec<String>)> =
            truth.nodes().into_iter().map(|n| (n.name, n.cut_from.into_iter().collect())).collect();
        let strings = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(
            cut,
            [
                ("edge-a-0".to_string(), strings(&["edge-a-1", "edge-a-2"])),
                ("edge-a-1".to_string(), strings(&["edge-a-0"])),
                ("edge-a-2".to_string(), strings(&["edge-a-0"])),
                ("edge-b-0".to_string(), vec![]),
                ("edge-b-1".to_string(), vec![]),
                ("edge-b-2".to_string(), vec![]),
            ]
        );
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(truth.split_pairs(), [pair("edge-a-0", "edge-a-1"), pair("edge-a-0", "edge-a-2")]);
        truth.splits.remove(&4);
        assert!(truth.split_pairs().is_empty() && truth.nodes().iter().all(|n| n.cut_from.is_empty()));
    }
}
