//! The grid wrapper: a per-node API server between kube-proxy (or any client-go program)
//! and the cluster's API server, serving Services, EndpointSlices and core Endpoints
//! pruned to the local node unit by each Service's `topologyKeys`, with real list/watch
//! semantics for any number of clients, and passing everything else through.
//!
//! [`cache`] decides (fed objects, no I/O), [`upstream`] feeds it from kube-rs watchers,
//! [`server`] serves it over HTTP with the shared `listwatch` protocol, [`proxy`] passes
//! the rest through, [`persist`] keeps the served view across a reboot without the cloud,
//! [`verdicts`] drops the endpoints of nodes the local unit votes down.
//!
//! One upstream per unit is the `unit-link` crate's: it decides whether the upstream is the
//! cloud or the unit's leader, and carries the objects between the unit's wrappers. This
//! crate supplies what it feeds: [`Wrapper`] implements `unit_link::unit::FedWrapper`
//! ([`upstream`] runs each plan the link decides), and [`cli`] makes its configuration
//! from the flags.

pub mod cache;
pub mod cli;
pub mod metrics;
pub mod persist;
pub mod proxy;
pub mod server;
pub mod upstream;
pub mod verdicts;

use std::collections::BTreeSet;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use controller_support::ReadinessGate;
use edgegrid_core::unit::upstream::UnitMember;
use listwatch::{LogConfig, WatchConfig};
use tokio::sync::watch;

use crate::cache::{Cache, Input, Kind, ViewSource};
use crate::metrics::{EventLabels, KindLabel, Metrics};
use crate::proxy::Proxy;

/// What a wrapper serves and how.
#[derive(Clone, Debug)]
pub struct WrapperConfig {
    pub node_name: String,
    /// Rewrite `default/kubernetes` to its annotated local address (SuperEdge's
    /// `--wrapper-in-cluster`).
    pub rewrite_local_apiserver: bool,
    pub log: LogConfig,
    pub watch: WatchConfig,
    /// Where the served view is persisted, if anywhere.
    pub cache_dir: Option<PathBuf>,
    /// The label whose value makes a node unit, when the unit shares one upstream.
    pub unit_label_key: Option<String>,
}

/// One wrapper: its cache, metrics and upstream pass-through, shared by the upstream
/// watchers and the HTTP server.
pub struct Wrapper {
    local_node: String,
    cache: Mutex<Cache>,
    metrics: Arc<Metrics>,
    proxy: Proxy,
    watch: WatchConfig,
    /// Set to end every open downstream watch (shutdown).
    stop_watches: watch::Sender<bool>,
    /// What the cache serves, for readiness.
    serving: watch::Sender<ViewSource>,
    /// The nodes the local unit votes down (the last verdicts taken).
    nodes_down: Mutex<BTreeSet<String>>,
    /// The local unit's members publishing an identity, as the local edge-health read them.
    unit_peers: Mutex<Vec<UnitMember>>,
}

impl Wrapper {
    pub fn new(
        config: &WrapperConfig,
        upstream: &kube::Config,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<Self>, proxy::ProxyError> {
        let cache = Cache::new(
            config.node_name.clone(),
            config.rewrite_local_apiserver,
            config.log,
            unit_link::api_status::first_resource_version(),
        )
        .with_unit_label_key(config.unit_label_key.clone());
        Ok(Arc::new(Self {
            local_node: config.node_name.clone(),
            cache: Mutex::new(cache),
            metrics,
            proxy: Proxy::new(upstream)?,
            watch: config.watch,
            stop_watches: watch::channel(false).0,
            serving: watch::channel(ViewSource::Nothing).0,
            nodes_down: Mutex::default(),
            unit_peers: Mutex::default(),
        }))
    }

    pub fn local_node(&self) -> &str {
        &self.local_node
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub(crate) fn proxy(&self) -> &Proxy {
        &self.proxy
    }

    pub(crate) fn watch_config(&self) -> WatchConfig {
        self.watch
    }

    /// The cache; hold it briefly (every request and upstream event takes it).
    pub fn lock(&self) -> MutexGuard<'_, Cache> {
        // a panic while holding it leaves a consistent cache: every mutation is one call
        self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn serving(&self) -> ViewSource {
        self.lock().serving()
    }

    /// Follows what the cache serves (nothing, a restored view, the upstream's).
    pub fn serving_changes(&self) -> watch::Receiver<ViewSource> {
        self.serving.subscribe()
    }

    /// Serves a view saved by an earlier process until the upstream has synced; returns
    /// how many objects were restored.
    pub fn restore(&self, objects: Vec<(Kind, serde_json::Value)>) -> usize {
        let (restored, serving) = {
            let mut cache = self.lock();
            (cache.restore(objects), cache.serving())
        };
        self.serving.send_if_modified(|s| std::mem::replace(s, serving) != serving);
        self.metrics.serving_restored.set(i64::from(serving == ViewSource::Restored));
        restored
    }

    /// The members of the local node's unit that publish an identity (from the local
    /// edge-health, see [`verdicts`]), and the unit (its label's value on the local Node).
    pub fn unit_members(&self) -> (Vec<UnitMember>, Option<String>) {
        let peers = self.unit_peers.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
        (peers, self.lock().local_unit().map(str::to_string))
    }

    /// Forgets the local node's unit until its Node is read again (it was relabelled).
    pub fn forget_local_unit(&self) {
        self.lock().forget_local_unit();
    }

    /// The unit's members as the local edge-health reads them now (empty when it cannot be
    /// read: the wrapper then takes its upstream from the cloud alone).
    pub fn set_unit_peers(&self, peers: Vec<UnitMember>) {
        *self.unit_peers.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = peers;
    }

    /// The nodes the local unit votes down now.
    pub fn nodes_down(&self) -> BTreeSet<String> {
        self.nodes_down.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Takes one upstream input and records what it did.
    pub fn apply(&self, input: Input) {
        if let Input::NodesDown(down) = &input {
            *self.nodes_down.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = down.clone();
        }
        let started = Instant::now();
        let (result, sizes, serving) = {
            let mut cache = self.lock();
            let result = cache.apply(input);
            let sizes = Kind::ALL.map(|kind| (kind, cache.log().len(&kind)));
            (result, sizes, cache.serving())
        };
        let outcome = match result {
            Ok(outcome) => outcome,
            Err(error) => {
                self.metrics.rejected_inputs.inc();
                tracing::warn!(%error, "upstream object not taken");
                return;
            }
        };
        if outcome.through_view {
            self.metrics.reprune_duration.observe(started.elapsed().as_secs_f64());
        }
        self.metrics.repruned_objects.inc_by(outcome.repruned as u64);
        for (kind, change) in outcome.served {
            self.metrics.served_events.get_or_create(&EventLabels { kind: kind.plural(), r#type: change.name() }).inc();
        }
        for (kind, size) in sizes {
            self.metrics.cached_objects.get_or_create(&KindLabel { kind: kind.plural() }).set(size as i64);
        }
        self.metrics.serving_restored.set(i64::from(serving == ViewSource::Restored));
        self.serving.send_if_modified(|s| std::mem::replace(s, serving) != serving);
    }

    /// Ends every open downstream watch (clients reconnect to the next process).
    pub fn stop_watches(&self) {
        self.stop_watches.send_replace(true);
    }

    pub(crate) fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut stopped = self.stop_watches.subscribe();
        async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        }
    }
}

/// Defaults a Kubernetes operator would pick for one edge node.
pub const DEFAULT_HISTORY: usize = 10_000;
pub const DEFAULT_WATCH_BUFFER: usize = 10_000;
pub const DEFAULT_BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);
pub const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

/// What `/readyz` waits for until the upstream view is served.
pub const NOT_SYNCED: &str = "the upstream API server has not synced yet";

/// Ready once the upstream view is served; a restored view is served but not ready.
pub async fn follow_readiness(wrapper: Arc<Wrapper>, upstream_synced: ReadinessGate, restored_note: Option<String>) {
    let mut serving = wrapper.serving_changes();
    loop {
        let now = *serving.borrow_and_update();
        match now {
            ViewSource::Upstream => upstream_synced.open(),
            ViewSource::Restored => {
                let note = restored_note.clone().unwrap_or_else(|| "serving a restored view".into());
                upstream_synced.close_waiting_for(note);
            }
            ViewSource::Nothing => upstream_synced.close_waiting_for(NOT_SYNCED),
        }
        if serving.changed().await.is_err() {
            return;
        }
    }
}
