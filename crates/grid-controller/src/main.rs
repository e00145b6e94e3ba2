//! `grid-controller`: the three grid controllers in the shared runtime; with
//! `--leader-elect` (the chart's), leader-elected on Lease `kube-system/grid-controller`.
//! Losing the Lease stops them and exits 1 (a restarted pod rejoins as a standby); SIGTERM
//! stops them and exits 0.

use std::sync::Arc;

use clap::Parser;
use controller_support::{LeaderFlags, Runtime, RuntimeFlags, legacy_flags};
use grid_controller::metrics::Metrics;

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Reconciles ServiceGrid, DeploymentGrid and StatefulSetGrid",
    after_help = legacy_flags::HELP_NOTE,
    // SuperEdge's application-grid-controller elected no leader unless asked, and the
    // RBAC its manifest grants has no Leases: its one-replica Deployment must keep working
    // with our image. The chart, which runs two replicas, asks for the election.
    mut_arg("leader_elect", |arg| arg.default_value("false"))
)]
struct Flags {
    #[command(flatten)]
    runtime: RuntimeFlags<8081, 8080>,
    #[command(flatten)]
    leader: LeaderFlags,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // SuperEdge's Deployment arguments work too (translated, logged once built)
    let (flags, legacy) = legacy_flags::parse::<Flags>(&legacy_flags::GRID_CONTROLLER);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leader_election_is_off_unless_asked_for_as_in_superedge() {
        let elect =
            |args: &[&str]| Flags::try_parse_from([&["grid-controller"], args].concat()).map(|f| f.leader.leader_elect);
        assert_eq!(elect(&[]).ok(), Some(false));
        assert_eq!(elect(&["--leader-elect"]).ok(), Some(true));
        assert_eq!(elect(&["--leader-elect=true"]).ok(), Some(true));
        assert_eq!(elect(&["--leader-elect=false"]).ok(), Some(false));
    }
}
