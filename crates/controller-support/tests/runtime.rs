//! The runtime in-process against an API server over HTTP: leadership and its gauge with
//! and without election, a lost Lease ending the work at once with an error, the admin
//! server's readiness. (Signals are in `runtime_signals.rs`: they reach the whole process.)

mod common;

use std::time::Duration;

use common::{capture_logs, flags};
use controller_support::{Error, LeaderFlags, Runtime};
use edgegrid_testing::{KubeconfigFile, http_get};
use fake_apiserver::{FakeApiServer, Fault};
use k8s_openapi::api::coordination::v1::Lease;
use tokio::sync::oneshot;

fn leader_flags(elect: bool) -> LeaderFlags {
    LeaderFlags {
        leader_elect: elect,
        leader_elect_resource_namespace: "kube-system".into(),
        leader_elect_resource_name: None,
        leader_elect_lease_duration: Duration::from_secs(3),
        leader_elect_renew_deadline: Duration::from_secs(2),
        leader_elect_retry_period: Duration::from_millis(200),
    }
}

/// Sends on drop: tells a test when the work's future was dropped (aborted or done).
struct Dropped(Option<oneshot::Sender<()>>);

impl Drop for Dropped {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_stops_the_work_at_once_and_is_an_error() {
    capture_logs();
    let server = FakeApiServer::start().await.unwrap();
    let kubeconfig = KubeconfigFile::new(&server.url()).unwrap();
    let runtime = Runtime::builder("test-binary", &flags(&kubeconfig, Duration::from_secs(10)))
        .leader_election(&leader_flags(true));
    let runtime = runtime.build().await.unwrap();
    let admin = runtime.admin_addresses()[0];
    assert!(runtime.identity().is_some_and(|id| id.starts_with("node-1_")));
    runtime.mark_ready();
    let (started_tx, started) = oneshot::channel();
    let (dropped_tx, dropped) = oneshot::channel();
    let running = tokio::spawn(runtime.run_while_leading(move |_shutdown| async move {
        let _guard = Dropped(Some(dropped_tx));
        let _ = started_tx.send(());
        // work that would ignore shutdown: a lost Lease must not wait for it
        std::future::pending::<()>().await;
    }));
    tokio::time::timeout(Duration::from_secs(5), started).await.unwrap().unwrap();
    // the gauge follows leadership on a task of its own: it may lag the work's start
    let mut leader = None;
    for _ in 0..100 {
        leader = edgegrid_testing::metric(admin, "test_binary_leader").await;
        if leader.as_deref() == Some("1") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(leader.as_deref(), Some("1"));
    assert_eq!(http_get(admin, "/readyz").await, Some((200, "ok".into())));

    server.set_fault("leases", Fault::Error(500));
    let result = tokio::time::timeout(Duration::from_secs(8), running).await.unwrap().unwrap();
    assert!(matches!(result, Err(Error::LostLease)), "{result:?}");
    tokio::time::timeout(Duration::from_millis(100), dropped).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_election_the_process_leads_and_the_work_starts_at_once() {
    capture_logs();
    let server = FakeApiServer::start().await.unwrap();
    let kubeconfig = KubeconfigFile::new(&server.url()).unwrap();
    let runtime = Runtime::builder("test-binary", &flags(&kubeconfig, Duration::from_secs(10)))
        .leader_election(&leader_flags(false))
        .build()
        .await
        .unwrap();
    let admin = runtime.admin_addresses()[0];
    assert_eq!(runtime.identity(), None);
    assert!(*runtime.leadership().borrow());
    assert_eq!(
        http_get(admin, "/readyz").await,
        Some((503, "not ready: starting".into())),
        "ready is the binary's call"
    );
    let result = runtime
        .run_while_leading(move |_shutdown| async move {
            // leadership never flips, however long we wait
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert_eq!(edgegrid_testing::metric(admin, "test_binary_leader").await.as_deref(), Some("1"));
        })
        .await;
    // work that ends by itself is a failure of the process
    assert!(matches!(result, Err(Error::WorkEnded)), "{result:?}");
    assert_eq!(http_get(admin, "/healthz").await, None, "the admin server stopped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binary_that_does_not_elect_has_no_leader_gauge() {
    capture_logs();
    let server = FakeApiServer::start().await.unwrap();
    let kubeconfig = KubeconfigFile::new(&server.url()).unwrap();
    let runtime =
        Runtime::builder("per-node-proxy", &flags(&kubeconfig, Duration::from_secs(10))).build().await.unwrap();
    let admin = runtime.admin_addresses()[0];
    assert!(*runtime.leadership().borrow());
    runtime.mark_ready();
    assert_eq!(http_get(admin, "/readyz").await, Some((200, "ok".into())));
    let (_, exposition) = http_get(admin, "/metrics").await.unwrap();
    assert!(!exposition.contains("leader"), "{exposition}");
    assert!(no_leases(&server).await, "no Lease is touched");
}

async fn no_leases(server: &FakeApiServer) -> bool {
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let leases: kube::Api<Lease> = kube::Api::all(client);
    leases.list(&Default::default()).await.unwrap().items.is_empty()
}
