//! The running local cluster, as the acts and the soak drive it: its nodes, their cloud
//! links and partitions, the component processes and the in-process grid controller, and
//! the wait until every component is ready. Below the run command (`super`), which starts
//! it and may hand it to the soak, so the soak needs nothing of the command.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kube::Client;

use super::kubeconfig::kubeconfig_with_token;
use super::kubelet::Kubelet;
use super::layout::SimNode;
use super::partition::Partitions;
use super::processes::Component;
use super::site_link::SiteLink;

/// The in-process parts' log, in the run's log directory.
pub const IN_PROCESS_LOG: &str = "local-cluster.log";

/// How long the acts wait (the lifecycle controller runs with a 1 s monitor period and an
/// 8 s grace period, edge-health with 2 s periods).
pub struct Timing {
    pub settle_within: Duration,
    pub unknown_within: Duration,
    pub settle: Duration,
    pub death_within: Duration,
}

/// The running local cluster.
pub struct Cluster {
    pub client: Client,
    pub nodes: Vec<SimNode>,
    pub timing: Timing,
    /// The log directory: `<component>.log` and [`IN_PROCESS_LOG`].
    pub logs: PathBuf,
    pub(super) kubelets: Vec<Kubelet>,
    /// Each node's cloud link, by node name.
    pub(super) links: Vec<(String, SiteLink)>,
    pub components: Vec<Component>,
    /// The grid controller, running in-process.
    pub grid_controller: GridController,
    /// The run's slot (its nodes' addresses are `127.<100 + slot>.*`).
    pub slot: u8,
    /// Partitions of the site network, once [`Self::enable_partitions`] made their chain.
    pub(super) partitions: Option<Partitions>,
}

impl Cluster {
    /// Cuts (`up` false) or heals every cloud link of `unit`'s nodes.
    pub fn set_unit_link(&self, unit: &str, up: bool) {
        for node in self.nodes.iter().filter(|n| n.unit == unit) {
            self.set_node_link(&node.name, up);
        }
    }

    /// Makes the run's firewall chain for [`Self::set_partitions`]; the error says why it
    /// cannot be made here.
    pub fn enable_partitions(&mut self) -> Result<()> {
        if self.partitions.is_none() {
            self.partitions = Some(Partitions::new(self.slot)?);
        }
        Ok(())
    }

    /// Splits the site network between each pair of nodes of `pairs` (and heals every
    /// other pair).
    pub fn set_partitions(&self, pairs: &[(String, String)]) -> Result<()> {
        let partitions = self.partitions.as_ref().context("partitions were not enabled")?;
        let ip = |name: &String| self.nodes.iter().find(|n| n.name == *name).map(|n| n.ip).context("a node");
        let cuts = pairs.iter().map(|(a, b)| Ok((ip(a)?, ip(b)?))).collect::<Result<Vec<_>>>()?;
        partitions.set(&cuts)
    }

    pub fn set_node_link(&self, node: &str, up: bool) {
        for (_, link) in self.links.iter().filter(|(n, _)| n == node) {
            link.set_up(up);
        }
    }

    /// The processes of node `name` (its edge-health daemon and grid wrapper).
    pub fn node_components(&mut self, name: &str) -> impl Iterator<Item = &mut Component> {
        let suffix = format!("-{name}");
        self.components.iter_mut().filter(move |c| c.name.ends_with(&suffix))
    }

    /// The node dies: its kubelet stops, its per-node components are killed.
    pub async fn kill_node(&mut self, name: &str) {
        for kubelet in self.kubelets.iter().filter(|k| k.node.name == name) {
            kubelet.kill();
        }
        for component in self.node_components(name) {
            component.kill().await;
        }
    }

    /// The node boots again: its kubelet acts, its components start.
    pub fn revive_node(&mut self, name: &str) -> Result<()> {
        for kubelet in self.kubelets.iter().filter(|k| k.node.name == name) {
            kubelet.revive();
        }
        for component in self.node_components(name) {
            component.restart()?;
        }
        Ok(())
    }
}

/// The grid controller run in-process (as the run command has always run it), which the
/// soak stops and starts again as it kills and restarts the binaries.
pub struct GridController {
    server: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl GridController {
    /// Starts it against `server` with its own token, so its requests are checked against
    /// its RBAC like the binaries'.
    pub async fn start(server: &str) -> Result<Self> {
        let mut controller = Self { server: server.to_string(), stop: None, task: None };
        controller.restart().await?;
        Ok(controller)
    }

    /// Starts it again (after [`GridController::stop`] or [`GridController::abort`]).
    pub async fn restart(&mut self) -> Result<()> {
        let kubeconfig =
            kube::config::Kubeconfig::from_yaml(&kubeconfig_with_token(&self.server, Some(GRID_CONTROLLER_TOKEN)))?;
        let client = Client::try_from(kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?)?;
        let metrics = std::sync::Arc::new(grid_controller::metrics::Metrics::default());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        self.task = Some(tokio::spawn(grid_controller::reconcile::run(client, metrics, async move {
            let _ = stopped.await;
        })));
        self.stop = Some(stop);
        Ok(())
    }

    /// Stops it as SIGTERM would: it finishes and returns.
    pub async fn stop(&mut self) -> Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await.context("the grid controller"),
            None => Ok(()),
        }
    }

    /// Stops it as SIGKILL would: mid-flight.
    pub async fn abort(&mut self) {
        self.stop = None;
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }

    /// How it stopped, when it did without being asked to.
    pub fn exited(&self) -> Option<String> {
        self.task.as_ref().filter(|t| t.is_finished()).map(|_| "returned".to_string())
    }
}

/// The in-process grid controller's bearer token (`<binary>/<name>`, as the binaries').
pub const GRID_CONTROLLER_TOKEN: &str = "grid-controller/in-process";

/// Waits until every component is ready, at most 60 s (then names those that are not, and
/// their logs).
pub(crate) async fn wait_ready(cluster: &mut Cluster) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let total = cluster.components.len();
    let mut shown = usize::MAX;
    loop {
        let mut waiting = Vec::new();
        for component in &mut cluster.components {
            if !component.ready().await? {
                waiting.push(component.name.clone());
            }
        }
        if waiting.len() != shown {
            println!("  components ready: {}/{total}", total - waiting.len());
            shown = waiting.len();
        }
        if waiting.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            let logs: Vec<String> = cluster
                .components
                .iter()
                .filter(|c| waiting.contains(&c.name))
                .map(|c| format!("{} (read {})", c.name, c.log.display()))
                .collect();
            bail!("not ready after 60 s: {}", logs.join(", "));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
