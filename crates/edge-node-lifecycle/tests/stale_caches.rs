//! End to end on the fake apiserver: the controller's own view of Nodes and Leases goes
//! stale (its watches fail and cannot resume, as after an API server restart that lost its
//! history) while the kubelets keep renewing and its writes still go through. The soak
//! (seed 303) found that it then judged every node from frozen Leases: past the grace
//! period all looked silent, every zone fully disrupted, and it marked live nodes Unknown
//! and lifted the dead node's NoExecute taint. It must not judge from a view it knows is
//! stale: nothing changes until the view is back. Nor may it count the time it was blind
//! against nodes whose kubelets were cut off with it (an API server outage): they renew
//! only some time after the API server is back. And a view whose connection hangs without
//! a word (a path dropping packets, no reset) must be known stale within a bound well
//! inside the grace period, not trusted for kube's 290 s watch timeout.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use edgegrid_testing::link::Link;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::watcher;
use serde_json::json;

const LIVE: [&str; 3] = ["edge-0", "edge-1", "edge-2"];
const DEAD: &str = "edge-3";

/// A client whose reads of Nodes and Leases (lists and watches) fail with 503 while `cut`
/// is set; every other request (its writes included) goes through to `client`.
fn client_with_cuttable_view(client: kube::Client, cut: Arc<AtomicBool>) -> kube::Client {
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let (client, cut) = (client.clone(), cut.clone());
        async move {
            let path = request.uri().path();
            let view = path.ends_with("/nodes") || path.ends_with("/leases");
            if request.method() == http::Method::GET && view && cut.load(Ordering::SeqCst) {
                let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "message": "cut for the test", "reason": "ServiceUnavailable", "code": 503});
                let body = kube::client::Body::from(serde_json::to_vec(&status).unwrap());
                return Ok(http::Response::builder().status(503).body(body).unwrap());
            }
            client.send(request).await
        }
    });
    kube::Client::new(service, "default")
}

/// How the controller reaches the API server.
enum ViewPath {
    /// Its reads of Nodes and Leases refused while `cut` ([`client_with_cuttable_view`]).
    Refusable,
    /// Through a [`Link`] that can freeze, with the client the binary builds
    /// (`ControllerConfig::client_options`).
    Freezable,
}

/// Four nodes of one zone, `edge-3` dead, voted unhealthy and tainted NoExecute; a
/// controller reading through a view that can be cut or frozen; and a record of every
/// change to a node from then on that is not what it should be.
struct Site {
    server: fake_apiserver::FakeApiServer,
    nodes: Api<Node>,
    /// Whose kubelets renew their Leases.
    alive: Arc<Mutex<HashSet<String>>>,
    cut: Arc<AtomicBool>,
    link: Option<Link>,
    controller: RunningController,
    changes: Arc<Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

async fn site(grace: Duration, path: ViewPath) -> Site {
    let (server, client) = start_server().await;
    for name in LIVE.iter().chain([&DEAD]) {
        create_node(&client, name, "site-a").await;
    }
    let alive = Arc::new(Mutex::new(LIVE.iter().map(|s| s.to_string()).collect::<HashSet<_>>()));
    let kubelets = kubelets(client.clone(), alive.clone());
    let nodes: Api<Node> = Api::all(client.clone());

    let cut = Arc::new(AtomicBool::new(false));
    let mut config = fast_config(Duration::from_millis(500), 10.0);
    config.lifecycle.grace_period = grace;
    let (controller_client, link) = match path {
        ViewPath::Refusable => (client_with_cuttable_view(client.clone(), cut.clone()), None),
        ViewPath::Freezable => {
            let link = Link::to(server.addr()).await.expect("a link");
            let url = format!("http://{}", link.address).parse().unwrap();
            let client = kube::Client::try_from(config.client_options().apply(kube::Config::new(url))).unwrap();
            (client, Some(link))
        }
    };
    let controller = RunningController::start(&controller_client, config);
    vote_unhealthy(&client, DEAD).await;
    wait_for("the dead node tainted NoExecute", Duration::from_secs(20), || {
        let nodes = nodes.clone();
        async move { taint_keys(&nodes.get(DEAD).await.unwrap()).contains(&UNREACHABLE_NO_EXECUTE.to_string()) }
    })
    .await;

    // from here on, every change the controller makes to a node is a violation
    let changes: Arc<Mutex<Vec<String>>> = Arc::default();
    let recorder = {
        let changes = changes.clone();
        watch_events(nodes.clone(), move |event| {
            let watcher::Event::Apply(node) = event else { return };
            let name = node.name_any();
            let ready = ready_condition(&node).map(|(status, _)| status);
            let taints = taint_keys(&node);
            let (expected_ready, expected_taints): (&str, &[&str]) = if name == DEAD {
                ("Unknown", &[UNREACHABLE_NO_EXECUTE, UNREACHABLE_NO_SCHEDULE])
            } else {
                ("True", &[])
            };
            let same_taints = taints.len() == expected_taints.len()
                && expected_taints.iter().all(|t| taints.iter().any(|have| have == t));
            if ready.as_deref() != Some(expected_ready) || !same_taints {
                changes.lock().unwrap().push(format!("{name}: Ready {ready:?}, taints {taints:?}"));
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    Site { server, nodes, alive, cut, link, controller, changes, tasks: vec![kubelets, recorder] }
}

impl Site {
    /// The controller's reads of Nodes and Leases refused, and its open watches ended.
    fn blind(&self, blind: bool) {
        self.cut.store(blind, Ordering::SeqCst);
        if blind {
            self.server.drop_watches();
        }
    }

    /// The controller's link to the API server drops everything silently (or stops).
    fn freeze(&self, frozen: bool) {
        self.link.as_ref().expect("a freezable view").set_frozen(frozen);
    }

    fn view_current(&self) -> bool {
        let exposition = controller_support::metrics::exposition("edge-node-lifecycle", &*self.controller.metrics);
        match edgegrid_testing::sample(&exposition, "edge_node_lifecycle_view_current") {
            Some("1") => true,
            Some("0") => false,
            other => panic!("edge_node_lifecycle_view_current is {other:?}: {exposition}"),
        }
    }

    /// Waits until the view is current again (its watches back off up to some seconds
    /// after failing for a while).
    async fn wait_until_current(&self) {
        wait_for("the view current again", Duration::from_secs(40), || {
            let current = self.view_current();
            async move { current }
        })
        .await;
    }

    /// Nothing changed: the dead node keeps its taint, the live ones are Ready, untainted.
    async fn assert_unchanged(self) {
        assert_eq!(
            *self.changes.lock().unwrap(),
            Vec::<String>::new(),
            "nodes changed by a controller judging a stale view"
        );
        let dead = self.nodes.get(DEAD).await.unwrap();
        assert!(taint_keys(&dead).contains(&UNREACHABLE_NO_EXECUTE.to_string()), "{:?}", taint_keys(&dead));
        for name in LIVE {
            let node = self.nodes.get(name).await.unwrap();
            assert_eq!(ready_condition(&node).map(|(status, _)| status).as_deref(), Some("True"), "{name}");
            assert_eq!(taint_keys(&node), Vec::<String>::new(), "{name}");
        }
        self.controller.stop().await;
        for task in self.tasks {
            task.abort();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_view_of_nodes_and_leases_changes_nothing() {
    let site = site(Duration::from_secs(2), ViewPath::Refusable).await;
    // the view goes stale for three grace periods while the kubelets renew
    site.blind(true);
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(!site.view_current());
    site.blind(false);
    site.wait_until_current().await;
    // back: several monitor passes, drains and taint-manager passes on the fresh view
    tokio::time::sleep(Duration::from_secs(3)).await;
    site.assert_unchanged().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_time_blind_does_not_count_against_nodes_cut_off_with_the_controller() {
    let site = site(Duration::from_secs(5), ViewPath::Refusable).await;
    // an API server outage: no kubelet renewing, and the controller blind, for more than
    // two grace periods; the kubelets' last renewals were seen before it went blind
    // (else the first look after it would take them for fresh ones)
    site.alive.lock().unwrap().clear();
    tokio::time::sleep(Duration::from_secs(1)).await;
    site.blind(true);
    tokio::time::sleep(Duration::from_secs(12)).await;
    site.blind(false);
    site.wait_until_current().await;
    // the kubelets renew some time after the API server is back (their own backoff)
    tokio::time::sleep(Duration::from_millis(500)).await;
    site.alive.lock().unwrap().extend(LIVE.iter().map(|s| s.to_string()));
    tokio::time::sleep(Duration::from_secs(6)).await;
    site.assert_unchanged().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_whose_connection_hangs_silently_is_not_trusted() {
    // grace 6 s: each watch request ends after 1 s, a response silent for 3 s fails
    let site = site(Duration::from_secs(6), ViewPath::Freezable).await;
    // the link drops everything, without closing a connection, for 2.5 grace periods
    // while the kubelets renew: a controller trusting its open watches would see every
    // Lease frozen and judge (its writes landing once the link is back)
    site.freeze(true);
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert!(!site.view_current(), "a view silent for 15 s still taken for current");
    site.freeze(false);
    site.wait_until_current().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    site.assert_unchanged().await;
}
