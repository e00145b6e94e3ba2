//! `grid-wrapper`: the per-node API server kube-proxy reads Services, EndpointSlices and
//! Endpoints from, pruned to the local node unit. Serves on `--bind-address` (default
//! 127.0.0.1:51006, SuperEdge's port) together with /healthz and /readyz; SIGTERM ends
//! every open watch (clients reconnect to the next process), saves the view when
//! `--cache-dir` is set, and exits 0.

use std::sync::Arc;

use controller_support::state_file::ClusterIdentity;
use controller_support::{Runtime, legacy_flags, runtime};
use grid_wrapper::cli::Flags;
use grid_wrapper::cli::superedge::GRID_WRAPPER;
use grid_wrapper::metrics::Metrics;
use grid_wrapper::{NOT_SYNCED, Wrapper, follow_readiness};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // SuperEdge's DaemonSet arguments work too (translated, logged once built)
    let (flags, legacy) = legacy_flags::parse::<Flags>(&GRID_WRAPPER);
    flags.check()?;
    let config = flags.wrapper_config();
    let metrics = Arc::new(Metrics::default());
    let mut builder = Runtime::builder("grid-wrapper", &flags.runtime);
    // what the proxy passes requests to: the configuration the runtime builds its clients
    // from, read once, before the runtime serves the proxy's routes
    let upstream = builder.load_config().await?;
    let wrapper = Wrapper::new(&config, &upstream, metrics.clone())?;
    // the saved view is the cluster's the client configuration names (see `persist`)
    let saver = flags.saver(ClusterIdentity::of(&upstream));
    let debug_readers = flags.debug_readers();
    let unit_served = unit_link::unit_server::UnitServerMetrics::default();
    let runtime = builder
        .legacy_flags(legacy)
        .metrics(&*metrics)
        .metrics(&unit_served)
        .routes(grid_wrapper::server::router(wrapper.clone(), &debug_readers))
        .metrics_routes(grid_wrapper::server::debug_router(wrapper.clone(), &debug_readers))
        .tls(flags.tls.config()?)
        .build()
        .await?;
    // one upstream per unit: joined once edge-health's key can be read, alone until then
    let (unit_stop, unit_stopped) = tokio::sync::watch::channel(false);
    let joining = flags.joining(unit_served, &runtime, unit_stopped);
    // once logging is set up (by the runtime), before the upstream is watched
    let restored_note = saver.restore(&wrapper);
    let synced = runtime.readiness().gate(NOT_SYNCED);
    tokio::spawn(follow_readiness(wrapper.clone(), synced, restored_note));
    runtime.mark_ready();
    let counted = unit_link::unit_client::CountReceivedLayer::new(metrics.link.upstream_bytes.clone());
    // an upstream outage must reach the watchers (their backoff, metrics and relist decide)
    let client = runtime.client_through(&counted, runtime::Retries::Off)?;
    let shutdown = runtime.shutdown_signal();
    if let Some(config) = flags.verdicts() {
        tokio::spawn(grid_wrapper::verdicts::run(wrapper.clone(), config, shutdown.clone().signalled()));
    }
    runtime
        .run(async move {
            let upstream = async {
                let Some(joining) = joining else {
                    return unit_link::unit::run(wrapper.clone(), client, None, shutdown.clone().signalled()).await;
                };
                tokio::select! {
                    unit = joining.join(wrapper.local_node()) => {
                        unit_link::unit::run(wrapper.clone(), client, Some(unit), shutdown.clone().signalled()).await;
                    }
                    () = unit_link::unit::run(wrapper.clone(), client.clone(), None, shutdown.clone().signalled()) => {}
                }
            };
            tokio::select! {
                () = upstream => {}
                () = saver.run(&wrapper) => {}
            }
            wrapper.stop_watches();
            unit_stop.send_replace(true);
            saver.save(&wrapper);
        })
        .await?;
    Ok(())
}
