//! The controller loop: caches Nodes, node Leases and Pods, runs the lifecycle logic every
//! monitor period, drains the NoExecute queues, and runs the taint manager, only while
//! leader. Every decision is the pure core's; this module and its children only read caches
//! (`caches`) and write (`writes`, `taint_manager`).

mod caches;
mod taint_manager;
mod writes;

pub use self::taint_manager::{pods_due_for_eviction, shard_of};
pub use self::writes::{mark_unknown_patch, swap_taints};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use controller_support::runtime::{ClientOptions, Retries};
use controller_support::{ReadinessGate, ShutdownSignal};
use edgegrid_core::unit::membership::UnitSource;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::Api;
use node_lifecycle::lifecycle::{Action, LifecycleConfig, MonitorCore, ZoneKey, ZoneState, condition_taint_actions};
use tokio::sync::watch;
use tokio::time::Instant;

use self::caches::{Caches, cached_node, snapshots, start_caches};
use self::taint_manager::taint_manager_pass;
use self::writes::{action_label, by_node, execute};
use crate::metrics::Metrics;
use crate::snapshot::node_snapshot;

#[derive(Clone, Debug)]
pub struct ControllerConfig {
    pub lifecycle: LifecycleConfig,
    /// How often the NoExecute queues are drained (kube-controller-manager: 100 ms).
    pub drain_period: Duration,
    /// How often the taint manager looks at pods on NoExecute-tainted nodes.
    pub taint_manager_period: Duration,
    /// Taint manager workers; nodes are sharded over them by name hash.
    pub taint_manager_shards: usize,
    /// How edge-health groups nodes into units (`--unit-label-key`; empty: SuperEdge's
    /// node units, read with the `edge-health-config` ConfigMap): the edge rule protects
    /// only the nodes edge-health watches (`edgegrid_core::unit::membership`).
    pub unit_source: UnitSource,
    /// Where the `edge-health-config` ConfigMap lives (read only for SuperEdge node units).
    pub edge_health_config_namespace: String,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            lifecycle: LifecycleConfig::default(),
            drain_period: Duration::from_millis(100),
            taint_manager_period: Duration::from_secs(1),
            taint_manager_shards: 8,
            unit_source: UnitSource::NodeUnits,
            edge_health_config_namespace: "kube-system".to_string(),
        }
    }
}

impl ControllerConfig {
    /// How long the API server keeps each of the view's watch requests open (then they are
    /// resumed): a quarter of the grace period, whole seconds, 1 to 290 s (kube's default).
    /// See [`read_timeout`](Self::read_timeout) for why.
    pub fn watch_timeout(&self) -> Duration {
        Duration::from_secs((self.lifecycle.grace_period / 4).as_secs().clamp(1, 290))
    }

    /// How long a response may send nothing before it fails: the watch timeout and half
    /// again (at least 2 s more). A healthy watch sends at least its end within the watch
    /// timeout, so a watch silent for this long hangs (a link dropping packets without a
    /// reset) and fails; its view is then not current (see `caches`) instead of old and
    /// trusted. So the view the controller judges from is never older than this unseen,
    /// well inside the grace period (kube-controller-manager's informers would wait out the
    /// 290 s watch timeout and the kernel's TCP timeouts).
    pub fn read_timeout(&self) -> Duration {
        let timeout = self.watch_timeout();
        timeout + (timeout / 2).max(Duration::from_secs(2))
    }

    /// The client the controller needs: refused requests reported at once (the watches must
    /// know when their view is not current; writes are decided again on the next pass), and
    /// [`read_timeout`](Self::read_timeout).
    pub fn client_options(&self) -> ClientOptions {
        ClientOptions { retries: Retries::Off, read_timeout: Some(self.read_timeout()) }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("node {0} is not in the cache")]
    NodeNotCached(String),
    #[error("kubernetes API: {0}")]
    Api(#[from] kube::Error),
}

impl Error {
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::NodeNotCached(_) => "node_not_cached",
            Self::Api(kube::Error::Api(s)) if s.code == 409 => "conflict",
            Self::Api(_) => "api",
        }
    }
}

/// Runs until `shutdown` fires. Acts only while `leader` is true; opens `synced` once
/// every cache has synced.
pub async fn run(
    client: Client,
    config: ControllerConfig,
    metrics: Arc<Metrics>,
    leader: watch::Receiver<bool>,
    synced: ReadinessGate,
    shutdown: ShutdownSignal,
) {
    let mut shutdown = shutdown.receiver();
    let (caches, drivers) = start_caches(&client, &config);
    tokio::select! {
        _ = async {
            caches.nodes.wait_until_listed().await;
            caches.leases.wait_until_listed().await;
            caches.pods.wait_until_listed().await;
            while !caches.config_synced.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        } => {}
        _ = shutdown.changed() => return,
    }
    synced.open();
    metrics.view_current.set(1);
    tracing::info!("caches synced");

    // One core per leadership term, built when it starts: a core kept from an earlier
    // term would judge with what it saw before another instance led, and its queues would
    // have refilled their buckets meanwhile. A new core resumes from what the API says now
    // (see `node_lifecycle::lifecycle::MonitorCore`), exactly as a restarted process does.
    let mut term: Option<MonitorCore> = None;
    let mut ticker = tokio::time::interval(config.drain_period);
    let mut next_monitor = Instant::now();
    let mut next_taint_manager = Instant::now();
    let nodes_api: Api<Node> = Api::all(client.clone());
    let mut view = ViewState::default();
    let mut zone_states: BTreeMap<ZoneKey, ZoneState> = BTreeMap::new();
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.changed() => break,
        }
        let judging = view.judge(caches.view_current(), &metrics);
        if !*leader.borrow() {
            term = None;
            continue;
        }
        // nothing is judged, drained or evicted from a view that is not current (see
        // `caches`): decisions wait until it is, and the time spent blind does not count
        // against any node's grace period (a dead node written Unknown stays so; a live
        // one cut off with the controller, as in an API server outage, is not judged on
        // the renewals it could not make)
        match judging {
            Judging::No => continue,
            Judging::Again { blind } => {
                if let Some(core) = term.as_mut() {
                    core.discount_blind(blind);
                }
            }
            Judging::Yes => {}
        }
        let now = Instant::now();
        let core = term.get_or_insert_with(|| {
            next_monitor = now;
            next_taint_manager = now;
            MonitorCore::new(config.lifecycle.clone())
        });
        let mut actions = Vec::new();
        if now >= next_monitor {
            next_monitor = now + config.lifecycle.monitor_period;
            caches.membership.lock().expect("membership lock").changed.clear();
            let snapshots = snapshots(&caches);
            actions.extend(core.monitor(&snapshots, now, jiff::Timestamp::now()));
            metrics.monitor_passes.inc();
            for (zone, state) in core.zone_states() {
                metrics.set_zone_state(&zone.region, &zone.zone, state);
                if zone_states.insert(zone.clone(), state) != Some(state) {
                    tracing::info!(region = %zone.region, zone = %zone.zone, ?state, "zone state");
                }
            }
        } else {
            actions.extend(changed_nodes_taints(&caches));
        }
        actions.extend(core.drain(now));
        for (node, batch) in by_node(actions) {
            let outcome = execute(&client, &nodes_api, &caches, &node, &batch).await;
            for action in &batch {
                match &outcome {
                    Ok(()) => {
                        log_no_execute_change(action);
                        metrics.action(action_label(action));
                    }
                    Err(e) => {
                        tracing::warn!(?action, error = %e, "action failed (retried on a later pass)");
                        metrics.error(e.metric_label());
                        core.action_failed(action);
                    }
                }
            }
            if outcome.is_err() {
                // decided again from the next snapshot
                caches.membership.lock().expect("membership lock").changed.insert(node);
            }
        }
        // the writes above took time: a view that went stale meanwhile evicts nothing
        if now >= next_taint_manager && caches.view_current() {
            next_taint_manager = now + config.taint_manager_period;
            taint_manager_pass(&client, &caches, core, &metrics, config.taint_manager_shards).await;
        }
    }
    for driver in drivers {
        driver.abort();
    }
}

/// How often a view that stays not current is warned of again (an outage ends in seconds;
/// a view refused for minutes, say by an RBAC change, needs an operator).
const STALE_WARNING_PERIOD: Duration = Duration::from_secs(60);

/// Whether the loop judges, logged when it changes (and again while it stays not current).
#[derive(Default)]
struct ViewState {
    /// Since when the view has not been current, and when that was last warned of.
    stale_since: Option<(Instant, Instant)>,
}

/// What the loop does on a tick, by the view.
enum Judging {
    Yes,
    /// The view is not current: nothing.
    No,
    /// The view is current again after being blind this long.
    Again {
        blind: Duration,
    },
}

impl ViewState {
    /// Whether to judge now, given whether the view is current.
    fn judge(&mut self, current: bool, metrics: &Metrics) -> Judging {
        match (current, self.stale_since) {
            (false, None) => {
                tracing::warn!(
                    "the view of Nodes and Leases is not current (a watch failed or is relisting): judging nothing until it is"
                );
                let now = Instant::now();
                self.stale_since = Some((now, now));
                metrics.view_current.set(0);
                Judging::No
            }
            (false, Some((since, warned))) => {
                if warned.elapsed() >= STALE_WARNING_PERIOD {
                    tracing::warn!(stale_for = ?since.elapsed(), "the view of Nodes and Leases is still not current: judging nothing");
                    self.stale_since = Some((since, Instant::now()));
                }
                Judging::No
            }
            (true, Some((since, _))) => {
                let blind = since.elapsed();
                tracing::info!(
                    stale_for = ?blind,
                    "the view of Nodes and Leases is current again: judging resumes (the time blind not counted against any node)"
                );
                self.stale_since = None;
                metrics.view_current.set(1);
                Judging::Again { blind }
            }
            (true, None) => Judging::Yes,
        }
    }
}

/// kube-controller-manager logs every NoExecute taint it adds or removes; so does this.
fn log_no_execute_change(action: &Action) {
    match action {
        Action::AddTaint { node, taint } if taint.effect() == edgegrid_core::keys::TAINT_EFFECT_NO_EXECUTE => {
            tracing::info!(%node, ?taint, "tainted NoExecute");
        }
        Action::RemoveTaint { node, taint } if taint.effect() == edgegrid_core::keys::TAINT_EFFECT_NO_EXECUTE => {
            tracing::info!(%node, ?taint, "NoExecute taint removed");
        }
        _ => {}
    }
}

/// kube-controller-manager's NoSchedule pass for the nodes that changed since the last
/// look (it runs on every node event; between monitor passes, so does this).
fn changed_nodes_taints(caches: &Caches) -> Vec<Action> {
    let changed = std::mem::take(&mut caches.membership.lock().expect("membership lock").changed);
    changed
        .iter()
        .filter_map(|name| cached_node(caches, name).ok())
        // condition taints do not depend on the edge rule: no watched answer needed
        .flat_map(|node| condition_taint_actions(&node_snapshot(&node, None, false)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_grace(seconds: u64) -> ControllerConfig {
        let mut config = ControllerConfig::default();
        config.lifecycle.grace_period = Duration::from_secs(seconds);
        config
    }

    #[test]
    fn a_silent_view_fails_well_inside_the_grace_period() {
        // (grace, watch timeout, read timeout), seconds
        for (grace, watch, read) in [(50, 12, 18), (40, 10, 15), (6, 1, 3), (2, 1, 3), (3600, 290, 435)] {
            let config = with_grace(grace);
            assert_eq!(config.watch_timeout(), Duration::from_secs(watch), "grace {grace} s");
            assert_eq!(config.read_timeout(), Duration::from_secs(read), "grace {grace} s");
            assert_eq!(
                config.client_options(),
                ClientOptions { retries: Retries::Off, read_timeout: Some(Duration::from_secs(read)) }
            );
        }
        // a watch that ends on time is never taken for a silent one
        for grace in 1..=2000 {
            let config = with_grace(grace);
            assert!(config.read_timeout() >= config.watch_timeout() + Duration::from_secs(2), "grace {grace} s");
            if grace >= 6 {
                assert!(config.read_timeout() < config.lifecycle.grace_period, "grace {grace} s");
            }
        }
    }
}
