//! End to end on the fake apiserver: the controller's own view of Nodes and Leases goes
//! stale (its watches fail and cannot resume, as after an API server restart that lost its
//! history) while the kubelets keep renewing and its writes still go through. The soak
//! (seed 303) found that it then judged every node from frozen Leases: past the grace
//! period all looked silent, every zone fully disrupted, and it marked live nodes Unknown
//! and lifted the dead node's NoExecute taint. It must not judge from a view it knows is
//! stale: nothing changes until the view is back.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_view_of_nodes_and_leases_changes_nothing() {
    let (server, client) = start_server().await;
    for name in LIVE.iter().chain([&DEAD]) {
        create_node(&client, name, "site-a").await;
    }
    let alive = Arc::new(Mutex::new(LIVE.iter().map(|s| s.to_string()).collect::<HashSet<_>>()));
    let kubelets = kubelets(client.clone(), alive);
    let nodes: Api<Node> = Api::all(client.clone());

    let cut = Arc::new(AtomicBool::new(false));
    let controller = RunningController::start(
        &client_with_cuttable_view(client.clone(), cut.clone()),
        fast_config(Duration::from_millis(500), 10.0),
    );
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
            let expected_taints: &[&str] =
                if name == DEAD { &[UNREACHABLE_NO_EXECUTE, UNREACHABLE_NO_SCHEDULE] } else { &[] };
            let expected_ready = if name == DEAD { "Unknown" } else { "True" };
            let mut sorted = taints.clone();
            sorted.sort();
            let mut expected: Vec<String> = expected_taints.iter().map(|t| t.to_string()).collect();
            expected.sort();
            if ready.as_deref() != Some(expected_ready) || sorted != expected {
                changes.lock().unwrap().push(format!("{name}: Ready {ready:?}, taints {taints:?}"));
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;

    // the view goes stale for three grace periods: open watches end and cannot resume
    cut.store(true, Ordering::SeqCst);
    server.drop_watches();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let exposition = controller_support::metrics::exposition("edge-node-lifecycle", &*controller.metrics);
    assert!(exposition.contains("edge_node_lifecycle_view_current 0"), "{exposition}");
    cut.store(false, Ordering::SeqCst);
    // back: several monitor passes, drains and taint-manager passes on the fresh view
    tokio::time::sleep(Duration::from_secs(4)).await;
    let exposition = controller_support::metrics::exposition("edge-node-lifecycle", &*controller.metrics);
    assert!(exposition.contains("edge_node_lifecycle_view_current 1"), "{exposition}");

    assert_eq!(*changes.lock().unwrap(), Vec::<String>::new(), "nodes changed by a controller judging a stale view");
    let dead = nodes.get(DEAD).await.unwrap();
    assert!(taint_keys(&dead).contains(&UNREACHABLE_NO_EXECUTE.to_string()), "{:?}", taint_keys(&dead));
    for name in LIVE {
        let node = nodes.get(name).await.unwrap();
        assert_eq!(ready_condition(&node).map(|(status, _)| status).as_deref(), Some("True"), "{name}");
        assert_eq!(taint_keys(&node), Vec::<String>::new(), "{name}");
    }

    controller.stop().await;
    kubelets.abort();
    recorder.abort();
}
