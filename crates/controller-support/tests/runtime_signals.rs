//! SIGTERM to the runtime in-process (alone in this test binary, as a signal reaches every
//! runtime of the process): work that ignores shutdown is abandoned at the grace period,
//! and a second signal abandons it at once; both exits are clean.

mod common;

use std::time::{Duration, Instant};

use common::{capture_logs, flags};
use controller_support::Runtime;
use edgegrid_testing::KubeconfigFile;
use fake_apiserver::FakeApiServer;

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
