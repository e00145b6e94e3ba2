//! `grid-controller`: flags, logging, client, leader election, then the three grid
//! controllers. Losing the leader lease stops the controllers and exits 1 (a restarted
//! pod rejoins as a standby); SIGTERM stops them and exits 0.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use clap::Parser;
use controller_support::leader::LeaderFlags;
use controller_support::probes::{self, Probes};
use controller_support::process::{self, ClientFlags};
use grid_controller::metrics::Metrics;
use tokio::sync::watch;

#[derive(Parser, Debug)]
#[command(version, about = "Reconciles ServiceGrid, DeploymentGrid and StatefulSetGrid")]
struct Flags {
    #[command(flatten)]
    client: ClientFlags,
    /// Address for /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8081")]
    bind_address: SocketAddr,
    /// Address for /metrics (may equal --bind-address).
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_bind_address: SocketAddr,
    #[command(flatten)]
    leader: LeaderFlags,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    process::init_tracing();
    let flags = Flags::parse();
    let client = flags.client.client().await?;
    let identity = flags.client.identity("grid-controller");
    let metrics = Arc::new(Metrics::default());
    let probes = Probes::new(metrics.registry());
    let (shutdown_tx, shutdown) = watch::channel(false);
    let servers =
        probes::serve(probes.clone(), &[flags.bind_address, flags.metrics_bind_address], shutdown.clone()).await?;

    let (mut leader_rx, election) =
        flags.leader.start(client.clone(), "grid-controller", identity.clone(), shutdown.clone());

    // standby until elected (or told to stop)
    let terminated = process::terminated();
    tokio::pin!(terminated);
    let elected = tokio::select! {
        result = leader_rx.wait_for(|leading| *leading) => result.is_ok(),
        _ = &mut terminated => false,
    };
    let mut lost_lease = false;
    if elected {
        tracing::info!(%identity, "leading: starting the grid controllers");
        probes.ready.store(true, Ordering::SeqCst);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let controllers = tokio::spawn(grid_controller::reconcile::run(client, metrics, async move {
            let _ = stop_rx.await;
        }));
        lost_lease = tokio::select! {
            _ = leader_rx.wait_for(|leading| !*leading) => true,
            _ = &mut terminated => false,
        };
        let _ = stop_tx.send(());
        let _ = controllers.await;
    }
    tracing::info!(lost_lease, "shutting down");
    shutdown_tx.send_replace(true);
    if let Some(election) = election {
        let _ = election.await;
    }
    for server in servers {
        let _ = server.await;
    }
    if lost_lease {
        anyhow::bail!("lost the leader lease");
    }
    Ok(())
}
