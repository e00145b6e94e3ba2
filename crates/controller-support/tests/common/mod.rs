//! What the in-process runtime tests share.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::time::Duration;

use controller_support::{BindAddress, LogFormat, RuntimeFlags};
use edgegrid_testing::KubeconfigFile;

/// Logs into the test's captured output (the runtime then keeps this subscriber).
pub fn capture_logs() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
}

/// Runtime flags for node `node-1`, admin servers on ephemeral loopback ports.
pub fn flags(kubeconfig: &KubeconfigFile, shutdown_grace_period: Duration) -> RuntimeFlags<0, 0> {
    let local = BindAddress::Socket(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    RuntimeFlags {
        kubeconfig: Some(kubeconfig.path().to_path_buf()),
        bind_address: local,
        metrics_bind_address: local,
        log_format: LogFormat::Text,
        node_name: Some("node-1".into()),
        shutdown_grace_period,
        server: Default::default(),
    }
}
