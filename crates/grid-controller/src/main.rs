//! `grid-controller`: the three grid controllers in the shared runtime; with
//! `--leader-elect` (the chart's), leader-elected on Lease `kube-system/grid-controller`.
//! Losing the Lease stops them and exits 1 (a restarted pod rejoins as a standby); SIGTERM
//! stops them and exits 0.

mod cli;

use std::sync::Arc;

use controller_support::{Runtime, legacy_flags};
use grid_controller::metrics::Metrics;

use crate::cli::Flags;
use crate::cli::superedge::GRID_CONTROLLER;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // SuperEdge's Deployment arguments work too (translated, logged once built)
    let (flags, legacy) = legacy_flags::parse::<Flags>(&GRID_CONTROLLER);
    let metrics = Arc::new(Metrics::default());
    let runtime = Runtime::builder("grid-controller", &flags.runtime)
        .legacy_flags(legacy)
        .metrics(&*metrics)
        .leader_election(&flags.leader)
        .build()
        .await?;
    // nothing to warm up before leading: a standby is ready as soon as it serves
    runtime.mark_ready();
    let client = runtime.client();
    runtime
        .run_while_leading(move |shutdown| grid_controller::reconcile::run(client, metrics, shutdown.signalled()))
        .await?;
    Ok(())
}
