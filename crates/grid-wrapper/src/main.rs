//! `grid-wrapper`: the per-node API server kube-proxy reads Services, EndpointSlices and
//! Endpoints from, pruned to the local node unit. Serves on `--bind-address` (default
//! 127.0.0.1:51006, SuperEdge's port) together with /healthz and /readyz; SIGTERM ends
//! every open watch (clients reconnect to the next process), saves the view when
//! `--cache-dir` is set, and exits 0.

use std::sync::Arc;

use controller_support::state_file::ClusterIdentity;
use controller_support::{Runtime, legacy_flags, runtime};
use grid_wrapper::cli::Flags;
use grid_wrapper::metrics::Metrics;
use grid_wrapper::{NOT_SYNCED, Wrapper, follow_readiness};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // SuperEdge's DaemonSet arguments work too (translated, logged once built)
    let (flags, legacy) = legacy_flags::parse::<Flags>(&legacy_flags::GRID_WRAPPER);
    flags.check()?;
    let config = flags.wrapper_config();
    let metrics = Arc::new(Metrics::default());
    // an upstream outage must reach the watchers (their backoff, metrics and relist decide)
    let upstream = runtime::without_retries(runtime::config(flags.runtime.kubeconfig.clone()).await?);
    let wrapper = Wrapper::new(&config, &upstream, metrics.clone())?;
    // the saved view is the cluster's the client configuration names (see `persist`)
    let saver = flags.saver(ClusterIdentity::of(&upstream));
    let debug_readers = flags.debug_readers();
    let mut builder = Runtime::builder("grid-wrapper", &flags.runtime)
        .legacy_flags(legacy)
        .metrics(&*metrics)
        .routes(wrapper.router(&debug_readers))
        .metrics_routes(wrapper.debug_router(&debug_readers))
        .tls(flags.tls.config()?);
    // one upstream per unit: the unit's followers are served on their own listener
    let (unit_stop, unit_stopped) = tokio::sync::watch::channel(false);
    let unit = match flags.unit_listener() {
        None => None,
        Some((address, key_file)) => {
            let key_file = key_file.ok_or_else(|| anyhow::anyhow!("--unit-label-key needs --node-key-file"))?;
            let identity = grid_wrapper::unit::read_identity(&config.node_name, key_file).await?;
            let unit = grid_wrapper::unit::Unit::new(flags.unit_config(identity));
            let served = grid_wrapper::unit_server::UnitServerMetrics::default();
            let routes = grid_wrapper::unit_server::router(
                unit.slot.clone(),
                grid_wrapper::unit_server::UNIT_SERVE,
                served.clone(),
                unit_stopped,
            );
            let tls = controller_support::node_identity::server_config(&unit.config.identity, unit.members.clone())?;
            builder = builder.metrics(&served).peer_listener(address, tls, routes);
            Some(unit)
        }
    };
    let runtime = builder.build().await?;
    // once logging is set up (by the runtime), before the upstream is watched
    let restored_note = saver.restore(&wrapper);
    let synced = runtime.readiness().gate(NOT_SYNCED);
    tokio::spawn(follow_readiness(wrapper.clone(), synced, restored_note));
    runtime.mark_ready();
    let counted = grid_wrapper::unit_client::CountReceivedLayer::new(metrics.upstream_bytes.clone());
    let client = kube::client::ClientBuilder::try_from(upstream)?.with_layer(&counted).build();
    let shutdown = runtime.shutdown_signal();
    if let Some(config) = flags.verdicts() {
        tokio::spawn(grid_wrapper::verdicts::run(wrapper.clone(), config, shutdown.clone().signalled()));
    }
    runtime
        .run(async move {
            tokio::select! {
                () = grid_wrapper::unit::run(wrapper.clone(), client, unit, shutdown.clone().signalled()) => {}
                () = saver.run(&wrapper) => {}
            }
            wrapper.stop_watches();
            unit_stop.send_replace(true);
            saver.save(&wrapper);
        })
        .await?;
    Ok(())
}
