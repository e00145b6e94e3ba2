//! Client construction and signals, as Kubernetes components do them.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// How a controller binary reaches the API server and names itself.
#[derive(clap::Args, Clone, Debug)]
pub struct ClientFlags {
    /// Kubeconfig to use; in-cluster configuration (or KUBECONFIG) when absent.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Identity in the leader lease (defaults to the host name).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
}

impl ClientFlags {
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        client(self.kubeconfig.as_deref()).await
    }

    pub fn identity(&self, fallback: &str) -> String {
        identity(self.node_name.clone(), fallback)
    }
}

/// A client from `--kubeconfig`/`KUBECONFIG` when given, in-cluster configuration otherwise.
pub async fn client(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    match kubeconfig {
        Some(path) => {
            let kubeconfig =
                kube::config::Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
            Ok(kube::Client::try_from(kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?)?)
        }
        None => kube::Client::try_default().await.context("in-cluster configuration"),
    }
}

/// The identity to hold leases under: the flag/env value, else the host name.
pub fn identity(given: Option<String>, fallback: &str) -> String {
    given
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_string()))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| fallback.to_string())
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn terminated() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        result = tokio::signal::ctrl_c() => result?,
    }
    Ok(())
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`).
pub fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
}
