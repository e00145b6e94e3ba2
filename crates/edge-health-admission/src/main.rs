//! `edge-health-admission`: the mutating webhook that keeps an unreachable-but-alive edge
//! node's pods and endpoints. Serves `/node-taint`, `/endpoint` and `/endpointslice` over
//! HTTPS on `--bind-address` (default `:8443`) with `/healthz` and `/readyz`; the
//! certificate files are re-read when they change (a rotated Secret needs no restart).
//! Ready once serving and the node cache has listed.

use std::sync::Arc;

use clap::Parser;
use controller_support::tls::TlsFlags;
use controller_support::{Readiness, Runtime, RuntimeFlags};
use edge_health_admission::metrics::Metrics;
use edge_health_admission::nodes::NodeCache;
use edge_health_admission::review::NodeVerdicts;
use edge_health_admission::server::{Webhook, router};
use edgegrid_core::protection::ProtectionLimit;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};

#[derive(Parser, Debug)]
#[command(version, about = "Keeps an unreachable-but-alive edge node's pods and endpoints")]
struct Flags {
    #[command(flatten)]
    runtime: RuntimeFlags<8443, 8080>,
    #[command(flatten)]
    tls: TlsFlags,
    /// Protect an Unknown node even when its unit voted it unhealthy (SuperEdge's flag).
    #[arg(long)]
    always_reachable: bool,
    /// The longest a node may stay Ready=Unknown and still be protected, from its Ready
    /// condition's lastTransitionTime (`30m`, `2h`); 0 = no limit, SuperEdge's behaviour.
    /// A node's `superedge.io/max-unreachable-protection` annotation overrides it.
    #[arg(long, default_value = "0", value_parser = ProtectionLimit::parse)]
    max_unreachable_protection: ProtectionLimit,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let Some(tls) = flags.tls.config()? else {
        anyhow::bail!(
            "--tls-cert-file and --tls-private-key-file are required: the apiserver calls webhooks over HTTPS"
        );
    };
    let metrics = Arc::new(Metrics::default());
    let nodes = Arc::new(NodeCache::default());
    let webhook = Arc::new(Webhook {
        nodes: nodes.clone(),
        metrics: metrics.clone(),
        max_unreachable_protection: flags.max_unreachable_protection,
        always_reachable: flags.always_reachable,
    });
    let runtime = Runtime::builder("edge-health-admission", &flags.runtime)
        .metrics(metrics.registry())
        .routes(router(webhook))
        .tls(Some(tls))
        .build()
        .await?;
    let readiness = runtime.readiness_handle();
    readiness.set_note(Some("the node cache has not listed yet".into()));
    let client = runtime.client();
    let shutdown = runtime.shutdown_signal();
    runtime
        .run(async move {
            tokio::select! {
                () = follow_nodes(client, nodes, metrics, readiness) => {}
                () = shutdown.signalled() => {}
            }
        })
        .await?;
    Ok(())
}

/// Feeds the node cache until the watch ends; ready once it has listed.
async fn follow_nodes(client: kube::Client, nodes: Arc<NodeCache>, metrics: Arc<Metrics>, readiness: Readiness) {
    let mut events = std::pin::pin!(watcher(Api::<Node>::all(client), watcher::Config::default()).default_backoff());
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => {
                nodes.apply(event);
                metrics.cached_nodes.set(i64::try_from(nodes.len()).unwrap_or(i64::MAX));
                if !readiness.is_ready() && nodes.synced() {
                    readiness.set_note(None);
                    readiness.set_ready(true);
                }
            }
            Err(error) => tracing::warn!(%error, "node watch failed; retrying with backoff"),
        }
    }
}
