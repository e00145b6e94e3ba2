//! `fake-apiserver serve --port PORT --kubeconfig-out PATH`: serves on 127.0.0.1 and
//! writes a kubeconfig pointing at it, so kubectl and the project's binaries can be run
//! against it. SIGTERM or Ctrl-C stops it cleanly (exit 0).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use fake_apiserver::{FakeApiServer, ServerConfig};

#[derive(Parser)]
#[command(version, about = "An in-repo Kubernetes API server for tests and the local cluster")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the API on 127.0.0.1.
    Serve {
        /// Port to listen on (0 picks a free one; the kubeconfig tells which).
        #[arg(long, default_value_t = 6443)]
        port: u16,
        /// Where to write a kubeconfig for this server.
        #[arg(long)]
        kubeconfig_out: Option<PathBuf>,
        /// Changes kept for watch resumption (older resourceVersions get 410).
        #[arg(long, default_value_t = 10_000)]
        history: usize,
        /// Interval between watch bookmarks, in milliseconds.
        #[arg(long, default_value_t = 5_000)]
        bookmark_interval_ms: u64,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let Command::Serve { port, kubeconfig_out, history, bookmark_interval_ms } = Cli::parse().command;
    let config = ServerConfig {
        history_limit: history,
        bookmark_interval: Duration::from_millis(bookmark_interval_ms.max(1)),
        ..Default::default()
    };
    let server = FakeApiServer::start_with(port, config).await.with_context(|| format!("binding 127.0.0.1:{port}"))?;
    if let Some(path) = &kubeconfig_out {
        // write-then-rename so a reader never sees half a file
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, server.kubeconfig()).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    }
    tracing::info!(url = %server.url(), "serving");
    shutdown_signal().await?;
    tracing::info!("shutting down");
    server.stop().await;
    Ok(())
}

async fn shutdown_signal() -> anyhow::Result<()> {
    let mut term =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).context("SIGTERM handler")?;
    tokio::select! {
        _ = term.recv() => {}
        result = tokio::signal::ctrl_c() => result.context("Ctrl-C handler")?,
    }
    Ok(())
}
