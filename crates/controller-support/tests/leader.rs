//! Leader election against an API server over HTTP: clock skew between holder and
//! standby, transient and hanging API errors, release on shutdown.

use std::time::Duration;

use controller_support::leader::{self, LeaderConfig};
use fake_apiserver::{FakeApiServer, Fault};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

const LEASE: &str = "test-controller";

struct Candidate {
    leading: watch::Receiver<bool>,
    stop: watch::Sender<bool>,
    election: JoinHandle<()>,
}

fn config(identity: &str) -> LeaderConfig {
    LeaderConfig {
        namespace: "kube-system".into(),
        name: LEASE.into(),
        identity: identity.into(),
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(200),
    }
}

fn stand(client: &Client, identity: &str) -> Candidate {
    let (leading_tx, leading) = watch::channel(false);
    let (stop, stopped) = watch::channel(false);
    let election = tokio::spawn(leader::run(client.clone(), config(identity), leading_tx, stopped));
    Candidate { leading, stop, election }
}

async fn server() -> (FakeApiServer, Client) {
    let server = FakeApiServer::start().await.unwrap();
    let client = Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    (server, client)
}

async fn held_by(client: &Client, holder: &str, renew_time: &str) {
    let lease = Lease {
        metadata: ObjectMeta { name: Some(LEASE.into()), ..Default::default() },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(3),
            renew_time: Some(MicroTime(renew_time.parse().unwrap())),
            acquire_time: Some(MicroTime(renew_time.parse().unwrap())),
            lease_transitions: Some(0),
            ..Default::default()
        }),
    };
    Api::<Lease>::namespaced(client.clone(), "kube-system").create(&PostParams::default(), &lease).await.unwrap();
}

async fn holder(client: &Client) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), "kube-system").get(LEASE).await.unwrap().spec.unwrap().holder_identity
}

/// Waits for `leading` to become `wanted`; returns how long it took.
async fn until_leading(candidate: &mut Candidate, wanted: bool, limit: Duration) -> Duration {
    let start = Instant::now();
    tokio::time::timeout(limit, candidate.leading.wait_for(|leading| *leading == wanted))
        .await
        .unwrap_or_else(|_| panic!("leading did not become {wanted} within {limit:?}"))
        .unwrap();
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_clock_is_behind_is_not_deposed_before_the_lease_runs_out_here() {
    let (_server, client) = server().await;
    // a dead holder whose renewTime reads an hour ago by our clock
    held_by(&client, "other_1", "2020-01-01T00:00:00Z").await;
    let mut me = stand(&client, "me_1");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!*me.leading.borrow(), "took over before 3 s had passed since we saw the lease");
    assert_eq!(holder(&client).await.as_deref(), Some("other_1"));
    until_leading(&mut me, true, Duration::from_secs(3)).await;
    assert_eq!(holder(&client).await.as_deref(), Some("me_1"));
    me.stop.send_replace(true);
    me.election.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holder_whose_clock_is_ahead_is_taken_over_after_the_lease_duration() {
    let (_server, client) = server().await;
    held_by(&client, "other_1", "2099-01-01T00:00:00Z").await;
    let mut me = stand(&client, "me_1");
    let waited = until_leading(&mut me, true, Duration::from_secs(6)).await;
    assert!(waited >= Duration::from_millis(2900), "{waited:?}");
    me.stop.send_replace(true);
    me.election.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_renew_errors_do_not_drop_leadership_before_the_renew_deadline() {
    let (server, client) = server().await;
    let mut me = stand(&client, "me_1");
    until_leading(&mut me, true, Duration::from_secs(5)).await;

    // 1.2 s of 500s (several failed renewals) is shorter than the 2 s renew deadline
    server.set_fault("leases", Fault::Error(500));
    let outage = tokio::time::timeout(Duration::from_millis(1200), me.leading.wait_for(|leading| !*leading));
    assert!(outage.await.is_err(), "stepped down on a transient error");
    server.clear_faults();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(*me.leading.borrow());

    // errors that outlast the deadline end leadership: not before it, soon after it
    server.set_fault("leases", Fault::Error(500));
    let stepped_down = until_leading(&mut me, false, Duration::from_secs(4)).await;
    assert!(stepped_down >= Duration::from_millis(1500), "{stepped_down:?}");
    server.clear_faults();
    until_leading(&mut me, true, Duration::from_secs(5)).await;
    me.stop.send_replace(true);
    me.election.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_api_server_ends_leadership_at_the_deadline_and_does_not_hold_up_shutdown() {
    let (server, client) = server().await;
    let mut me = stand(&client, "me_1");
    until_leading(&mut me, true, Duration::from_secs(5)).await;
    server.set_fault("leases", Fault::Hang);
    let stepped_down = until_leading(&mut me, false, Duration::from_secs(4)).await;
    assert!(stepped_down <= Duration::from_millis(2500), "{stepped_down:?}");

    let stopping = Instant::now();
    me.stop.send_replace(true);
    tokio::time::timeout(Duration::from_secs(4), me.election).await.expect("election stopped").unwrap();
    assert!(stopping.elapsed() < Duration::from_secs(3), "{:?}", stopping.elapsed());
    server.clear_faults();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_the_lease_to_a_standby_at_once() {
    let (_server, client) = server().await;
    let mut first = stand(&client, "first_1");
    until_leading(&mut first, true, Duration::from_secs(5)).await;
    let mut second = stand(&client, "second_2");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!*second.leading.borrow(), "two leaders");

    first.stop.send_replace(true);
    first.election.await.unwrap();
    assert!(!*first.leading.borrow());
    // well before the 3 s lease duration: the release freed it
    let took_over = until_leading(&mut second, true, Duration::from_secs(2)).await;
    assert!(took_over < Duration::from_secs(1), "{took_over:?}");
    let lease = Api::<Lease>::namespaced(client.clone(), "kube-system").get(LEASE).await.unwrap().spec.unwrap();
    assert_eq!(lease.holder_identity.as_deref(), Some("second_2"));
    assert_eq!(lease.lease_transitions, Some(1));
    second.stop.send_replace(true);
    second.election.await.unwrap();
    assert_eq!(holder(&client).await, None);
}
