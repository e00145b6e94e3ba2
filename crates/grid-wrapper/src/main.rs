//! `grid-wrapper`: the per-node API server kube-proxy reads Services, EndpointSlices and
//! Endpoints from, pruned to the local node unit. Serves on `--bind-address` (default
//! 127.0.0.1:51006, SuperEdge's port) together with /healthz and /readyz; SIGTERM ends
//! every open watch (clients reconnect to the next process), saves the view when
//! `--cache-dir` is set, and exits 0.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use controller_support::tls::TlsFlags;
use controller_support::{Readiness, Runtime, RuntimeFlags, parse_duration};
use grid_wrapper::cache::Serving;
use grid_wrapper::metrics::Metrics;
use grid_wrapper::verdicts::VerdictsConfig;
use grid_wrapper::{Wrapper, WrapperConfig, persist};
use listwatch::{LogConfig, WatchConfig};

#[derive(Parser, Debug)]
#[command(version, about = "Serves kube-proxy the Services and endpoints of its node unit")]
struct Flags {
    #[command(flatten)]
    runtime: RuntimeFlags<51006, 51007, true>,
    /// Serve over HTTPS, optionally requiring client certificates (`--client-ca-file`),
    /// e.g. when clients reach the wrapper from outside the node.
    #[command(flatten)]
    tls: TlsFlags,
    /// Rewrite `default/kubernetes` Endpoints and EndpointSlices to the address in their
    /// `superedge.io/local-endpoint` and `superedge.io/local-port` annotations (SuperEdge's
    /// flag of the same name: an edge-local API server cache serves the node's pods).
    #[arg(long)]
    wrapper_in_cluster: bool,
    /// Changes kept so watchers can resume; older versions get 410 and relist.
    #[arg(long, default_value_t = grid_wrapper::DEFAULT_HISTORY)]
    history_size: usize,
    /// Changes buffered per watcher; a watcher further behind is cut off with 410.
    #[arg(long, default_value_t = grid_wrapper::DEFAULT_WATCH_BUFFER)]
    watch_buffer: usize,
    /// How often watchers that allow bookmarks get one.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    bookmark_interval: Duration,
    /// Persist the served view here, and serve it after a restart while the upstream is
    /// unreachable.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// The saved view's size bound; a larger view is not saved (the previous file stays).
    #[arg(long, default_value_t = 64 * 1024 * 1024)]
    cache_max_bytes: usize,
    /// How often a changed view is saved.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    cache_sync_period: Duration,
    /// Service autonomy: the local edge-health daemon's verdicts URL (e.g.
    /// `http://127.0.0.1:51005/verdicts`). Endpoints on nodes the local unit votes down are
    /// not served while the verdict stands. Off when not given.
    #[arg(long)]
    edge_health_url: Option<http::Uri>,
    /// How often the verdicts are read.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    edge_health_poll_interval: Duration,
    /// Verdicts not refreshed for this long are forgotten (every node served again).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    edge_health_stale_after: Duration,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let node_name = controller_support::runtime::node_name(flags.runtime.node_name.as_deref());
    let config = WrapperConfig {
        node_name,
        rewrite_local_apiserver: flags.wrapper_in_cluster,
        log: LogConfig { history_limit: flags.history_size, watch_buffer: flags.watch_buffer },
        watch: WatchConfig {
            bookmark_interval: flags.bookmark_interval,
            default_timeout: grid_wrapper::DEFAULT_WATCH_TIMEOUT,
        },
        cache_dir: flags.cache_dir.clone(),
    };
    let metrics = Arc::new(Metrics::default());
    let mut upstream = controller_support::runtime::config(flags.runtime.kubeconfig.clone()).await?;
    // kube's client would retry 429/503/504 itself for minutes, hiding an upstream outage
    // from the watchers (their backoff, metrics and relist decide instead)
    upstream.default_retry = false;
    let wrapper = Wrapper::new(&config, &upstream, metrics.clone())?;
    let restored_note = restore(&wrapper, &config);
    let runtime = Runtime::builder("grid-wrapper", &flags.runtime)
        .metrics(metrics.registry())
        .routes(wrapper.router())
        .metrics_routes(wrapper.debug_router())
        .tls(flags.tls.config()?)
        .build()
        .await?;
    tokio::spawn(follow_readiness(wrapper.clone(), runtime.readiness_handle(), restored_note));
    let client = kube::Client::try_from(upstream)?;
    let shutdown = runtime.shutdown_signal();
    let saver = Saver { dir: flags.cache_dir, limit: flags.cache_max_bytes, period: flags.cache_sync_period };
    if let Some(url) = flags.edge_health_url {
        let config = VerdictsConfig {
            url,
            interval: flags.edge_health_poll_interval,
            stale_after: flags.edge_health_stale_after,
        };
        tokio::spawn(grid_wrapper::verdicts::run(wrapper.clone(), config, shutdown.clone().signalled()));
    }
    runtime
        .run(async move {
            tokio::select! {
                () = grid_wrapper::upstream::run(wrapper.clone(), client, shutdown.clone().signalled()) => {}
                () = saver.run(&wrapper) => {}
            }
            wrapper.stop_watches();
            saver.save(&wrapper);
        })
        .await?;
    Ok(())
}

/// Restores the saved view, if any; returns the readiness note that says so.
fn restore(wrapper: &Wrapper, config: &WrapperConfig) -> Option<String> {
    let dir = config.cache_dir.as_ref()?;
    match persist::read(dir, wrapper.local_node()) {
        Ok(Some(saved)) => {
            let count = wrapper.restore(saved.objects);
            tracing::info!(objects = count, saved_at = %saved.saved_at, dir = %dir.display(),
                "serving the saved view until the upstream has synced");
            Some(format!(
                "serving the view saved at {} ({count} objects) from {}; the upstream API server has not synced",
                saved.saved_at,
                dir.display()
            ))
        }
        Ok(None) => None,
        Err(error) => {
            tracing::warn!(%error, "saved view not used");
            None
        }
    }
}

/// Ready once the upstream view is served; a restored view is served but not ready.
async fn follow_readiness(wrapper: Arc<Wrapper>, readiness: Readiness, restored_note: Option<String>) {
    let mut serving = wrapper.serving_changes();
    loop {
        let now = *serving.borrow_and_update();
        match now {
            Serving::Upstream => {
                readiness.set_note(None);
                readiness.set_ready(true);
            }
            Serving::Restored => readiness.set_note(restored_note.clone()),
            Serving::Nothing => readiness.set_note(Some("the upstream API server has not synced yet".into())),
        }
        if serving.changed().await.is_err() {
            return;
        }
    }
}

/// Saves the served view periodically when it changed.
struct Saver {
    dir: Option<PathBuf>,
    limit: usize,
    period: Duration,
}

impl Saver {
    async fn run(&self, wrapper: &Wrapper) {
        if self.dir.is_none() {
            return std::future::pending().await;
        }
        let mut saved_rv = 0;
        let mut ticker = tokio::time::interval(self.period);
        loop {
            ticker.tick().await;
            let rv = wrapper.lock().log().current_rv();
            if rv != saved_rv && self.save(wrapper) {
                saved_rv = rv;
            }
        }
    }

    fn save(&self, wrapper: &Wrapper) -> bool {
        let Some(dir) = &self.dir else { return false };
        let saved_at = jiff::Timestamp::now().to_string();
        let Some(contents) = persist::encode(&wrapper.lock(), &saved_at) else { return false };
        match persist::write(dir, &contents, self.limit) {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(%error, "served view not saved");
                false
            }
        }
    }
}
