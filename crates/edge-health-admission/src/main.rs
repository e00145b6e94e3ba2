//! `edge-health-admission`: the mutating webhook that keeps an unreachable-but-alive edge
//! node's pods and endpoints. Serves `/node-taint`, `/endpoint` and `/endpointslice` over
//! HTTPS on `--bind-address` (default `:8443`) with `/healthz` and `/readyz`. The
//! certificate comes either from files (`--tls-cert-file`, re-read when they change: a
//! rotated Secret needs no restart) or, with `--self-managed-certificates`, from a CA and
//! serving certificate the replicas issue and share in a Secret
//! ([`edge_health_admission::self_managed`], which lists the RBAC it needs). Ready once a
//! certificate is served and the node cache has listed.

use std::sync::Arc;

use controller_support::{Runtime, legacy_flags};
use edge_health_admission::cli::Flags;
use edge_health_admission::cli::superedge::EDGE_HEALTH_ADMISSION;
use edge_health_admission::metrics::Metrics;
use edge_health_admission::self_managed::Manager;
use edge_health_admission::server::{MAX_BODY_BYTES, router};
use edge_health_admission::{nodes, taint_remover, verdict_writer};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // SuperEdge's Deployment arguments work too (translated, logged once built)
    let (flags, legacy) = legacy_flags::parse::<Flags>(&EDGE_HEALTH_ADMISSION);
    let (tls, resolver) = flags.serving_tls()?;
    let metrics = Arc::new(Metrics::default());
    let node_cache = Arc::new(flags.node_cache());
    let runtime = Runtime::builder("edge-health-admission", &flags.runtime)
        .legacy_flags(legacy)
        .metrics(&*metrics)
        .routes(router(Arc::new(flags.webhook(node_cache.clone(), metrics.clone()))))
        .max_request_body_bytes(MAX_BODY_BYTES)
        .tls(Some(tls))
        .build()
        .await?;
    let client = runtime.client();
    let shutdown = runtime.shutdown_signal();
    // ready once a certificate is served and the node cache (and, for node units, the
    // ConfigMap) has listed
    let listed = runtime.readiness().gate("the node cache has not listed yet");
    let certificates = match (flags.self_managed.options(), resolver) {
        (Some(options), Some(resolver)) => {
            let served = runtime.readiness().gate("no certificate of the Secret is served yet");
            Some(Manager::new(client.clone(), options, resolver, metrics.clone(), move || served.open()))
        }
        _ => None,
    };
    runtime.mark_ready();
    let remover = flags.remover();
    let verdict_period = flags.verdict_write_period;
    let config_namespace = flags.edge_rule.edge_health_config_namespace.clone();
    runtime
        .run(async move {
            let certificates = async {
                match certificates {
                    Some(manager) => manager.run().await,
                    None => std::future::pending().await,
                }
            };
            let remover = async {
                match remover.period.is_zero() {
                    true => std::future::pending().await,
                    false => taint_remover::run(client.clone(), node_cache.clone(), metrics.clone(), remover).await,
                }
            };
            let verdicts = async {
                match verdict_period.is_zero() {
                    true => std::future::pending().await,
                    false => {
                        verdict_writer::run(client.clone(), node_cache.clone(), metrics.clone(), verdict_period).await
                    }
                }
            };
            tokio::select! {
                () = remover => {}
                () = verdicts => {}
                () = nodes::follow(client.clone(), node_cache.clone(), metrics.clone(), listed, config_namespace) => {}
                () = certificates => {}
                () = shutdown.signalled() => {}
            }
        })
        .await?;
    Ok(())
}
