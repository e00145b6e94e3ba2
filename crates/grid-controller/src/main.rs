//! `grid-controller`: the three grid controllers in the shared runtime, leader-elected on
//! Lease `kube-system/grid-controller`. Losing the Lease stops them and exits 1 (a
//! restarted pod rejoins as a standby); SIGTERM stops them and exits 0.

use std::sync::Arc;

use clap::Parser;
use controller_support::{LeaderFlags, Runtime, RuntimeFlags};
use grid_controller::metrics::Metrics;

#[derive(Parser, Debug)]
#[command(version, about = "Reconciles ServiceGrid, DeploymentGrid and StatefulSetGrid")]
struct Flags {
    #[command(flatten)]
    runtime: RuntimeFlags<8081, 8080>,
    #[command(flatten)]
    leader: LeaderFlags,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let metrics = Arc::new(Metrics::default());
    let runtime = Runtime::builder("grid-controller", &flags.runtime)
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
