//! `edge-health-admission`: the mutating webhook that keeps an unreachable-but-alive edge
//! node's pods and endpoints. Serves `/node-taint`, `/endpoint` and `/endpointslice` over
//! HTTPS on `--bind-address` (default `:8443`) with `/healthz` and `/readyz`. The
//! certificate comes either from files (`--tls-cert-file`, re-read when they change: a
//! rotated Secret needs no restart) or, with `--self-managed-certificates`, from a CA and
//! serving certificate the replicas issue and share in a Secret
//! ([`edge_health_admission::self_managed`], which lists the RBAC it needs). Ready once a
//! certificate is served and the node cache has listed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use controller_support::tls::TlsFlags;
use controller_support::unit_config::follow_edge_health_config;
use controller_support::{CertResolver, Readiness, Runtime, RuntimeFlags, ShutdownSignal, TlsConfig};
use edge_health_admission::metrics::Metrics;
use edge_health_admission::nodes::NodeCache;
use edge_health_admission::review::NodeVerdicts;
use edge_health_admission::self_managed::{Manager, SelfManagedFlags, pki};
use edge_health_admission::server::{MAX_BODY_BYTES, Webhook, router};
use edge_health_admission::taint_remover::{self, RemoverConfig};
use edgegrid_core::membership::UnitSource;
use edgegrid_core::protection::ProtectionLimit;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(version, about = "Keeps an unreachable-but-alive edge node's pods and endpoints")]
struct Flags {
    #[command(flatten)]
    runtime: RuntimeFlags<8443, 8080>,
    #[command(flatten)]
    tls: TlsFlags,
    #[command(flatten)]
    self_managed: SelfManagedFlags,
    /// Protect an Unknown node even when its unit voted it unhealthy (SuperEdge's flag).
    #[arg(long)]
    always_reachable: bool,
    /// The longest a node may stay Ready=Unknown and still be protected, from its Ready
    /// condition's lastTransitionTime (`30m`, `2h`); 0 = no limit, SuperEdge's behaviour.
    /// A node's `superedge.io/max-unreachable-protection` annotation may only shorten it.
    #[arg(long, default_value = "0", value_parser = ProtectionLimit::parse)]
    max_unreachable_protection: ProtectionLimit,
    /// The node label key edge-health groups units by (its own --unit-label-key); empty:
    /// SuperEdge's node units with the edge-health-config ConfigMap. Only nodes edge-health
    /// watches (with a peer of their unit running it) are protected.
    #[arg(long, default_value = "")]
    unit_label_key: String,
    /// Namespace of the edge-health-config ConfigMap (read only for SuperEdge node units).
    #[arg(long, default_value = "kube-system")]
    edge_health_config_namespace: String,
    /// How often to look for protected nodes carrying an unreachable NoExecute taint that
    /// got past the webhook (written while it was unavailable), to remove it; 0 turns that off.
    #[arg(long, default_value = "1s", value_parser = controller_support::parse_duration)]
    unreachable_taint_removal_period: Duration,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let self_managed = flags.self_managed.options();
    // self-managed: a placeholder nobody trusts until the Secret's certificate is served
    let (tls, resolver) = match &self_managed {
        Some(_) => {
            let placeholder = pki::placeholder()?;
            let resolver =
                Arc::new(CertResolver::from_pem(placeholder.cert_pem.as_bytes(), placeholder.key_pem.as_bytes())?);
            (TlsConfig::from_resolver(resolver.clone()), Some(resolver))
        }
        None => match flags.tls.config()? {
            Some(tls) => (tls, None),
            None => anyhow::bail!(
                "--tls-cert-file and --tls-private-key-file, or --self-managed-certificates, are required: the apiserver calls webhooks over HTTPS"
            ),
        },
    };
    let metrics = Arc::new(Metrics::default());
    let nodes = Arc::new(NodeCache::new(UnitSource::from_flag(&flags.unit_label_key)));
    let webhook = Arc::new(Webhook {
        nodes: nodes.clone(),
        metrics: metrics.clone(),
        max_unreachable_protection: flags.max_unreachable_protection,
        always_reachable: flags.always_reachable,
    });
    let runtime = Runtime::builder("edge-health-admission", &flags.runtime)
        .metrics(metrics.registry())
        .routes(router(webhook))
        .max_request_body_bytes(MAX_BODY_BYTES)
        .tls(Some(tls))
        .build()
        .await?;
    let client = runtime.client();
    let shutdown = runtime.shutdown_signal();
    let ready = Ready {
        readiness: runtime.readiness_handle(),
        certificate: Arc::new(AtomicBool::new(self_managed.is_none())),
        nodes: Arc::new(AtomicBool::new(false)),
        shutdown: shutdown.clone(),
        updating: Arc::default(),
    };
    ready.update();
    let certificates = match (self_managed, resolver) {
        (Some(options), Some(resolver)) => {
            let ready = ready.clone();
            let manager = Manager::new(client.clone(), options, resolver, metrics.clone(), move || {
                ready.certificate.store(true, Ordering::SeqCst);
                ready.update();
            });
            Some(manager)
        }
        _ => None,
    };
    runtime
        .run(async move {
            let certificates = async {
                match certificates {
                    Some(manager) => manager.run().await,
                    None => std::future::pending().await,
                }
            };
            let config_synced = Arc::new(AtomicBool::new(!nodes.reads_config_map()));
            let unit_config = {
                let (client, nodes, synced, ready) =
                    (client.clone(), nodes.clone(), config_synced.clone(), ready.clone());
                async move {
                    if !nodes.reads_config_map() {
                        return std::future::pending().await;
                    }
                    let watched = nodes.clone();
                    follow_edge_health_config(client, &flags.edge_health_config_namespace, synced.clone(), |check| {
                        watched.set_node_unit_check(check);
                        ready.nodes_ready_if(watched.synced() && synced.load(Ordering::SeqCst));
                    })
                    .await
                }
            };
            let remover = {
                let config = RemoverConfig {
                    period: flags.unreachable_taint_removal_period,
                    default: flags.max_unreachable_protection,
                    always_reachable: flags.always_reachable,
                };
                let (client, nodes, metrics) = (client.clone(), nodes.clone(), metrics.clone());
                async move {
                    if config.period.is_zero() {
                        return std::future::pending().await;
                    }
                    taint_remover::run(client, nodes, metrics, config).await
                }
            };
            tokio::select! {
                () = remover => {}
                () = follow_nodes(client, nodes, metrics, ready, config_synced) => {}
                () = unit_config => {}
                () = certificates => {}
                () = shutdown.signalled() => {}
            }
        })
        .await?;
    Ok(())
}

impl Ready {
    /// The node cache (and, for node units, the ConfigMap) has listed.
    fn nodes_ready_if(&self, synced: bool) {
        if synced && !self.nodes.load(Ordering::SeqCst) {
            self.nodes.store(true, Ordering::SeqCst);
            self.update();
        }
    }
}

/// `/readyz`: ready once a certificate is served and the node cache has listed.
#[derive(Clone)]
struct Ready {
    readiness: Readiness,
    certificate: Arc<AtomicBool>,
    nodes: Arc<AtomicBool>,
    shutdown: ShutdownSignal,
    /// One update at a time: two interleaved could leave the older answer standing.
    updating: Arc<Mutex<()>>,
}

impl Ready {
    fn update(&self) {
        let _one_at_a_time = self.updating.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // once shutting down, the runtime's "not ready: shutting down" stands
        if self.shutdown.is_signalled() {
            return;
        }
        let mut waiting = Vec::new();
        if !self.certificate.load(Ordering::SeqCst) {
            waiting.push("no certificate of the Secret is served yet");
        }
        if !self.nodes.load(Ordering::SeqCst) {
            waiting.push("the node cache has not listed yet");
        }
        if waiting.is_empty() {
            if !self.readiness.is_ready() {
                self.readiness.set_note(None);
                self.readiness.set_ready(true);
            }
        } else {
            self.readiness.set_ready(false);
            self.readiness.set_note(Some(waiting.join("; ")));
        }
    }
}

/// Feeds the node cache until the watch ends; ready once it has listed.
async fn follow_nodes(
    client: kube::Client,
    nodes: Arc<NodeCache>,
    metrics: Arc<Metrics>,
    ready: Ready,
    config_synced: Arc<AtomicBool>,
) {
    let mut events = std::pin::pin!(watcher(Api::<Node>::all(client), watcher::Config::default()).default_backoff());
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => {
                nodes.apply(event);
                metrics.cached_nodes.set(i64::try_from(nodes.len()).unwrap_or(i64::MAX));
                ready.nodes_ready_if(nodes.synced() && config_synced.load(Ordering::SeqCst));
            }
            Err(error) => tracing::warn!(%error, "node watch failed; retrying with backoff"),
        }
    }
}
