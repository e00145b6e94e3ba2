//! `edge-node-lifecycle`: flags, logging, client, leader election, then the controller.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use controller_support::flags::parse_duration;
use controller_support::leader::LeaderFlags;
use controller_support::probes::{self, Probes};
use controller_support::process::{self, ClientFlags};
use edge_node_lifecycle::controller::{self, ControllerConfig};
use edge_node_lifecycle::metrics::Metrics;
use node_lifecycle::lifecycle::LifecycleConfig;
use tokio::sync::watch;

#[derive(Parser, Debug)]
#[command(version, about = "Edge-aware node lifecycle controller (replaces kube-controller-manager's)")]
struct Flags {
    #[command(flatten)]
    client: ClientFlags,
    /// Address for /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:10258")]
    bind_address: SocketAddr,
    /// Address for /metrics (may equal --bind-address).
    #[arg(long, default_value = "0.0.0.0:10259")]
    metrics_bind_address: SocketAddr,
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    node_monitor_period: Duration,
    #[arg(long, default_value = "50s", value_parser = parse_duration)]
    node_monitor_grace_period: Duration,
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    node_startup_grace_period: Duration,
    #[arg(long, default_value_t = 0.55)]
    unhealthy_zone_threshold: f64,
    #[arg(long, default_value_t = 50)]
    large_cluster_size_threshold: usize,
    #[arg(long, default_value_t = 0.1)]
    node_eviction_rate: f64,
    #[arg(long, default_value_t = 0.01)]
    secondary_node_eviction_rate: f64,
    #[command(flatten)]
    leader: LeaderFlags,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    process::init_tracing();
    let flags = Flags::parse();
    if !(0.0..=1.0).contains(&flags.unhealthy_zone_threshold) {
        anyhow::bail!("--unhealthy-zone-threshold must be within [0, 1], got {}", flags.unhealthy_zone_threshold);
    }
    if flags.node_eviction_rate < 0.0 || flags.secondary_node_eviction_rate < 0.0 {
        anyhow::bail!("eviction rates must not be negative");
    }
    let client = flags.client.client().await?;
    let identity = flags.client.identity("edge-node-lifecycle");

    let metrics = Arc::new(Metrics::default());
    let probes = Probes::new(metrics.registry());
    let (shutdown_tx, shutdown) = watch::channel(false);
    let servers =
        probes::serve(probes.clone(), &[flags.bind_address, flags.metrics_bind_address], shutdown.clone()).await?;

    let (leader_rx, election) =
        flags.leader.start(client.clone(), "edge-node-lifecycle", identity.clone(), shutdown.clone());
    let mut leader_gauge = leader_rx.clone();
    let gauge_metrics = metrics.clone();
    tokio::spawn(async move {
        loop {
            gauge_metrics.leader.set(i64::from(*leader_gauge.borrow()));
            if leader_gauge.changed().await.is_err() {
                break;
            }
        }
    });
    let config = ControllerConfig {
        lifecycle: LifecycleConfig {
            monitor_period: flags.node_monitor_period,
            grace_period: flags.node_monitor_grace_period,
            startup_grace_period: flags.node_startup_grace_period,
            unhealthy_zone_threshold: flags.unhealthy_zone_threshold,
            large_cluster_threshold: flags.large_cluster_size_threshold,
            eviction_rate: flags.node_eviction_rate,
            secondary_eviction_rate: flags.secondary_node_eviction_rate,
        },
        ..Default::default()
    };
    let running =
        tokio::spawn(controller::run(client, config, metrics, leader_rx, probes.ready.clone(), shutdown.clone()));
    tracing::info!(%identity, "edge-node-lifecycle started");

    process::terminated().await?;
    tracing::info!("shutting down");
    shutdown_tx.send_replace(true);
    let _ = running.await;
    if let Some(election) = election {
        let _ = election.await;
    }
    for server in servers {
        let _ = server.await;
    }
    Ok(())
}
