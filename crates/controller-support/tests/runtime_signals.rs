//! SIGTERM to the runtime in-process (alone in this test binary, as a signal reaches every
//! runtime of the process): work that ignores shutdown is abandoned at the grace period,
//! and a second signal abandons it at once; both exits are clean.

use std::time::{Duration, Instant};

use controller_support::testing::KubeconfigFile;
use controller_support::{BindAddress, LogFormat, Runtime, RuntimeFlags};
use fake_apiserver::FakeApiServer;

/// Logs into the test's captured output (the runtime then keeps this subscriber).
fn capture_logs() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
}

fn flags(kubeconfig: &KubeconfigFile, grace: Duration) -> RuntimeFlags<0, 0> {
    let local = BindAddress::Socket("127.0.0.1:0".parse().unwrap());
    RuntimeFlags {
        kubeconfig: Some(kubeconfig.path().to_path_buf()),
        bind_address: local,
        metrics_bind_address: local,
        log_format: LogFormat::Text,
        node_name: None,
        shutdown_grace_period: grace,
    }
}

fn sigterm_to_self() {
    let sent = std::process::Command::new("kill").args(["-TERM", &std::process::id().to_string()]).status().unwrap();
    assert!(sent.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_that_ignores_shutdown_is_abandoned_and_the_exit_is_clean() {
    capture_logs();
    let server = FakeApiServer::start().await.unwrap();
    let kubeconfig = KubeconfigFile::new(&server.url()).unwrap();

    let runtime = Runtime::builder("stuck", &flags(&kubeconfig, Duration::from_secs(1))).build().await.unwrap();
    let running = tokio::spawn(runtime.run(std::future::pending::<()>()));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let signalled = Instant::now();
    sigterm_to_self();
    let result = tokio::time::timeout(Duration::from_secs(5), running).await.expect("bounded").unwrap();
    assert!(result.is_ok(), "{result:?}");
    let took = signalled.elapsed();
    assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(3), "{took:?}");

    let runtime = Runtime::builder("stuck", &flags(&kubeconfig, Duration::from_secs(60))).build().await.unwrap();
    let running = tokio::spawn(runtime.run(std::future::pending::<()>()));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let signalled = Instant::now();
    sigterm_to_self();
    tokio::time::sleep(Duration::from_millis(300)).await;
    sigterm_to_self();
    let result = tokio::time::timeout(Duration::from_secs(5), running).await.expect("bounded").unwrap();
    assert!(result.is_ok(), "{result:?}");
    assert!(signalled.elapsed() < Duration::from_secs(3), "{:?}", signalled.elapsed());
}
