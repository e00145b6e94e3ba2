//! The runtime every edgegrid binary runs in (as kubert is linkerd's): common flags,
//! logging, the API client, the admin server (`/healthz`, `/readyz`, `/metrics`, next to
//! the binary's own API if it serves one), optional Lease leader election and shutdown
//! on SIGTERM with a bounded drain, so each binary's `main.rs` only parses its own flags,
//! builds its context and hands its work over. The `--bind-address` listener can serve
//! HTTPS ([`tls`]: certificates re-read without a restart, optional client certificates).
//!
//! A binary:
//!
//! ```text
//! let runtime = Runtime::builder("grid-controller", &flags.runtime)
//!     .metrics(&metrics)
//!     .leader_election(&flags.leader)
//!     .build()
//!     .await?;
//! runtime.mark_ready();
//! let client = runtime.client();
//! runtime.run_while_leading(move |shutdown| run(client, shutdown.signalled())).await?;
//! ```

pub mod admin;
pub mod flags;
pub mod leader;
pub mod legacy_flags;
pub mod logging;
pub mod metrics;
pub mod node_local;
pub mod runtime;
pub mod server;
pub mod state_file;
pub mod tls;
pub mod watch;

pub use admin::{Readiness, ReadinessGate};
pub use flags::{BindAddress, parse_duration};
pub use leader::LeaderFlags;
pub use legacy_flags::LegacyFlags;
pub use logging::LogFormat;
pub use node_local::{Cidr, NodeLocal};
pub use runtime::{Runtime, RuntimeFlags, ShutdownSignal};
pub use server::{ServerFlags, ServerLimits};
pub use tls::{CertResolver, TlsConfig, TlsFlags};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading kubeconfig from {from}")]
    Kubeconfig {
        from: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("no kubeconfig given (--kubeconfig, KUBECONFIG) and no in-cluster configuration")]
    InCluster(#[source] kube::config::InClusterError),
    #[error("building the API client")]
    Client(#[source] kube::Error),
    #[error("binding {address}")]
    Bind {
        address: BindAddress,
        #[source]
        source: std::io::Error,
    },
    #[error("installing signal handlers")]
    Signals(#[source] std::io::Error),
    #[error("setting up logging")]
    Logging(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("invalid leader election flags: {0}")]
    LeaderElectionFlags(String),
    #[error("lost the leader lease")]
    LostLease,
    #[error("the work stopped on its own")]
    WorkEnded,
    #[error("setting up TLS")]
    Tls(#[from] tls::TlsError),
}
