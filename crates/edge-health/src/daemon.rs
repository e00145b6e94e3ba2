//! The `edge-health` binary's I/O shell around the pure core: flags ([`cli`]), the
//! state and decisions between I/O ([`state`]), one period's probes and messages
//! ([`round`]), the exchange and verdicts routes ([`server`]), the API server's Nodes and
//! ConfigMap ([`api`]), the on-disk peer cache ([`peer_cache`]), this node's own signing
//! key ([`signing_key`]), the token kubelet checks send ([`kubelet_credential`]), the
//! metrics ([`metrics`]), the wall clock ([`clock`]) and the paths other nodes call
//! ([`paths`]).
//!
//! Each of them uses only those below it: [`clock`] and [`paths`] at the bottom, then
//! [`metrics`]; [`kubelet_credential`], then [`cli`]; [`peer_cache`] and [`signing_key`];
//! [`state`]; [`round`]; [`server`] and [`api`]; this module, which wires them together,
//! on top.
//!
//! The period loop, on the wall clock through the core's [`PeriodClock`](crate::time::PeriodClock):
//! at each period boundary it evaluates the period that ended (verdicts, the served view,
//! the patches this node writes), writes those and re-asserts this node's address
//! annotation, and starts the new period's round (assignment -> checks -> indirect
//! probes). A round that overruns its period is abandoned. Beside it, the relay loop
//! runs the relay rounds, evenly spaced over each period (at the middle of each of the
//! period's `--relay-rounds` slices, as `crate::sim` does), each passing the ballots
//! learned since to a few peers.
//! With the API server unreachable everything but the writes goes on; the writer retries
//! each period from the Nodes it observes, so verdicts land once the link is back.

pub mod api;
pub mod cli;
pub mod clock;
pub mod kubelet_credential;
pub mod metrics;
pub mod paths;
pub mod peer_cache;
pub mod round;
pub mod server;
pub mod signing_key;
pub mod state;
#[cfg(test)]
mod test_support;

use std::path::Path;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use controller_support::runtime::Retries;
use controller_support::state_file::ClusterIdentity;
use controller_support::{LegacyFlags, Runtime};
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::Api;
use tower::layer::util::Identity;

use self::cli::Flags;
use self::clock::wall_clock;
use self::kubelet_credential::KubeletCredential;
use self::metrics::{Metrics, ResultLabel};
use self::peer_cache::PeerCacheMetrics;
use self::round::Transport;
use self::state::Daemon;
use crate::membership::UnitSource;
use crate::message::MAX_FRAME_BYTES;
use crate::relay;
use crate::time::Period;

/// Runs the daemon until SIGTERM. Every configuration error (flags, the key file) is
/// reported before anything starts; `legacy` (SuperEdge's flags given) is logged once
/// logging is set up.
pub async fn run(flags: Flags, legacy: LegacyFlags) -> anyhow::Result<()> {
    let node_name = controller_support::runtime::node_name(flags.runtime.node_name.as_deref());
    let settings = flags.settings(node_name).context("invalid configuration")?;
    let key_file = settings.key_file.clone();
    let key = read_key(&key_file)?;
    let (signing, signing_origin) = signing_key::load_or_generate(&settings.signing_key_file)?;
    let metrics = Arc::new(Metrics::default());
    let daemon = Daemon::new(settings, metrics.clone(), &key, signing, wall_clock())
        .with_context(|| format!("--hmac-key-file {}", key_file.display()))?;
    let daemon = Arc::new(daemon);
    let verdicts_readers = server::verdicts_readers(flags.verdicts_allowed_from.clone());
    let peer_cache_metrics = PeerCacheMetrics::default();
    let runtime = Runtime::builder("edge-health", &flags.runtime)
        .legacy_flags(legacy)
        .metrics(&*metrics)
        .metrics(&peer_cache_metrics)
        .routes(server::router_with_verdicts_readers(daemon.clone(), &verdicts_readers))
        // larger frames than a peer may send reach the verifier, which refuses them as
        // malformed (counted); beyond twice that the listener answers 413
        .max_request_body_bytes(MAX_FRAME_BYTES * 2)
        .build()
        .await?;
    // the cache is the cluster's the client configuration names (see `peer_cache`)
    let cluster = ClusterIdentity::of(runtime.config());
    if let Some(path) = &daemon.settings().peer_cache_file
        && let Some(cache) = peer_cache::restorable(path, &cluster, &peer_cache_metrics)
    {
        daemon.restore(&cache);
        tracing::info!(path = %path.display(), nodes = cache.nodes.len(), "peers restored from the peer cache");
    }
    let bound = *runtime.admin_addresses().first().context("--bind-address is not served")?;
    let advertised = daemon.settings().advertised(bound).to_string();
    let settings = daemon.settings();
    tracing::info!(node = %settings.node_name, %advertised, units = ?settings.unit_source,
        period = ?settings.protocol.period, probes_per_period = settings.protocol.probes_per_period,
        checks = settings.checks.checks().len(), "edge-health starting");
    signing_origin.log(&settings.signing_key_file, &daemon.public_key_annotation());

    let client = runtime.client();
    // writes: a refusal is counted and retried next period from the then observed Node
    let writer = runtime.client_through(&Identity::new(), Retries::Off)?;
    let shutdown = runtime.shutdown_signal();
    let node_units = matches!(settings.unit_source, UnitSource::NodeUnits);
    // ready once the Nodes (and, in node-units mode, the ConfigMap) have listed; the key
    // was loaded before the server started
    let nodes_listed = runtime.readiness().gate("the node watch has not listed yet");
    let config_listed = node_units.then(|| runtime.readiness().gate("the edge-health-config watch has not listed yet"));
    runtime.mark_ready();
    runtime
        .run(async move {
            let nodes = api::follow_nodes(client.clone(), daemon.clone(), move || nodes_listed.open());
            let config = async {
                match config_listed {
                    Some(listed) => {
                        let namespace = daemon.settings().namespace.clone();
                        api::follow_config(client.clone(), daemon.clone(), namespace, move || listed.open()).await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            // the token kubelet checks send, when it is asked for (never this pod's own)
            let kubelet_check_token = async {
                match &daemon.settings().kubelet_credential {
                    KubeletCredential::Requested(token) => {
                        let api = Api::<ServiceAccount>::namespaced(client.clone(), token.namespace());
                        kubelet_credential::keep_requested(api, token.clone(), daemon.metrics()).await;
                    }
                    _ => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = nodes => tracing::error!("node watch ended"),
                () = config => tracing::error!("edge-health-config watch ended"),
                () = periods(daemon.clone(), Api::all(writer), advertised, cluster) => {}
                () = relays(daemon.clone()) => {}
                () = reload_key(daemon.clone()) => {}
                () = kubelet_check_token => {}
                () = shutdown.signalled() => {}
            }
        })
        .await?;
    Ok(())
}

fn read_key(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading --hmac-key-file {}", path.display()))
}

/// The period loop (see the module comment).
async fn periods(daemon: Arc<Daemon>, nodes: Api<Node>, advertised: String, cluster: ClusterIdentity) {
    let clock = daemon.clock();
    let transport = Transport::of(daemon.settings());
    // the API's share of a period; the round runs alongside
    let api_limit = clock.length().mul_f64(0.75);
    let mut round: Option<AbortOnDrop> = None;
    let mut cached = daemon.peer_cache().0;
    loop {
        let now = wall_clock();
        let period = clock.period_at(now);
        if let Some(previous) = round.take()
            && !previous.0.is_finished()
        {
            tracing::warn!(period = period.0 - 1, "the round did not finish within its period: abandoned");
        }
        let writes = daemon.evaluate(Period(period.0.saturating_sub(1)), now);
        if let Some(path) = &daemon.settings().peer_cache_file {
            let (generation, cache) = daemon.peer_cache();
            if generation != cached {
                match peer_cache::store(path, &cluster, &cache) {
                    Ok(()) => cached = generation,
                    Err(error) => tracing::warn!(%error, "peer cache not written"),
                }
            }
        }
        round = Some(AbortOnDrop(tokio::spawn(round::run(daemon.clone(), transport.clone(), period))));
        let writes = writes.into_iter().map(|patch| api::write_verdict(&nodes, &daemon, patch, api_limit));
        tokio::join!(
            api::publish_address(&nodes, &daemon, &advertised, api_limit),
            api::publish_view(&nodes, &daemon, api_limit),
            futures::future::join_all(writes)
        );
        let next = clock.start_of(period.next()).as_unix_millis();
        let wait = next.saturating_sub(wall_clock().as_unix_millis());
        tokio::time::sleep(Duration::from_millis(wait)).await;
    }
}

/// The relay loop (see the module comment). A round's sends run in their own task, so a
/// slow peer never delays the next round; each send is bounded by --message-timeout and
/// --send-retries.
async fn relays(daemon: Arc<Daemon>) {
    let clock = daemon.clock();
    let transport = Transport::of(daemon.settings());
    let rounds = daemon.settings().protocol.relay_rounds;
    let mut after = wall_clock();
    loop {
        let (_, round, at) = relay::next_round(clock, rounds, after);
        tokio::time::sleep(Duration::from_millis(at.as_unix_millis().saturating_sub(wall_clock().as_unix_millis())))
            .await;
        let (daemon, transport) = (daemon.clone(), transport.clone());
        tokio::spawn(async move { round::relay(&daemon, &transport, round).await });
        after = at.saturating_add(Duration::from_millis(1));
    }
}

/// Aborts its task when dropped (a round never outlives the loop that started it).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Re-reads --hmac-key-file; a new valid key replaces the old one, an invalid one is
/// reported once and the old key kept.
async fn reload_key(daemon: Arc<Daemon>) {
    let path = daemon.settings().key_file.clone();
    let mut ticks = tokio::time::interval(daemon.settings().key_reload_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    let mut refused: Option<Vec<u8>> = None;
    let mut unreadable = false;
    loop {
        ticks.tick().await;
        let key = match std::fs::read(&path) {
            Ok(key) => key,
            Err(error) => {
                if !unreadable {
                    tracing::warn!(path = %path.display(), %error, "--hmac-key-file unreadable: keeping the key in use");
                    daemon.metrics().key_reloads.get_or_create(&ResultLabel { result: "unreadable" }).inc();
                }
                unreadable = true;
                continue;
            }
        };
        unreadable = false;
        if refused.as_ref() == Some(&key) {
            continue;
        }
        match daemon.reload_key(&key, wall_clock()) {
            Ok(false) => refused = None,
            Ok(true) => {
                refused = None;
                tracing::info!(path = %path.display(), "new HMAC key in use");
                daemon.metrics().key_reloads.get_or_create(&ResultLabel { result: "loaded" }).inc();
            }
            Err(error) => {
                tracing::error!(path = %path.display(), %error, "new --hmac-key-file content refused: keeping the key in use");
                daemon.metrics().key_reloads.get_or_create(&ResultLabel { result: "invalid" }).inc();
                refused = Some(key);
            }
        }
    }
}
