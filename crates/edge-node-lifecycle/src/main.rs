//! `edge-node-lifecycle`: the controller in the shared runtime, leader-elected on Lease
//! `kube-system/edge-node-lifecycle`. Standbys keep their caches warm (and are ready once
//! synced) but act only while leading; losing the Lease exits 1, SIGTERM exits 0.

use std::sync::Arc;

use clap::Parser;
use controller_support::Runtime;
use edge_node_lifecycle::cli::Flags;
use edge_node_lifecycle::controller;
use edge_node_lifecycle::metrics::Metrics;
use tower::layer::util::Identity;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let config = flags.controller_config()?;
    let metrics = Arc::new(Metrics::default());
    let runtime = Runtime::builder("edge-node-lifecycle", &flags.runtime)
        .metrics(&*metrics)
        .leader_election(&flags.leader)
        .build()
        .await?;
    let synced = runtime.readiness().gate("the caches have not synced yet");
    runtime.mark_ready();
    // failures reach the watches (which must know when their view is not current) and the
    // writes (decided again on the next pass) at once, not after minutes of kube's retries,
    // and a silent connection fails well inside the grace period
    let client = runtime.client_through(&Identity::new(), config.client_options())?;
    let work = controller::run(client, config, metrics, runtime.leadership(), synced, runtime.shutdown_signal());
    runtime.run(work).await?;
    Ok(())
}
