//! Service autonomy over HTTP: fake apiserver -> grid-wrapper <- a stand-in for the local
//! edge-health daemon's `GET /verdicts` (the core wire type), read by the wrapper's
//! `verdicts` follower; an unmodified kube-rs watch on the wrapper sees a node voted down
//! locally leave the served slices while the upstream slice still lists it ready, and come
//! back when it is voted up or the verdicts go stale.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use edgegrid_core::unit::local_verdicts::{LocalVerdicts, NodeVerdict, Verdict};
use futures::StreamExt;
use grid_wrapper::verdicts::VerdictsConfig;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, WatchParams};

type Shared = Arc<Mutex<Option<LocalVerdicts>>>;

/// Serves `verdicts` on `/verdicts` while it is `Some`, 503 otherwise.
async fn verdicts_server(verdicts: Shared) -> std::net::SocketAddr {
    let app = axum::Router::new().route(
        "/verdicts",
        axum::routing::get(move || {
            let verdicts = verdicts.clone();
            async move {
                match verdicts.lock().expect("lock").clone() {
                    Some(v) => Ok(axum::Json(v)),
                    None => Err(axum::http::StatusCode::SERVICE_UNAVAILABLE),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    addr
}

fn view(unhealthy: &[&str]) -> Option<LocalVerdicts> {
    let nodes = ["n1", "n2"]
        .into_iter()
        .map(|n| {
            let verdict = if unhealthy.contains(&n) { Verdict::Unhealthy } else { Verdict::Healthy };
            (n.to_string(), NodeVerdict { verdict, eligible: 1, healthy: 0, unhealthy: 0 })
        })
        .collect::<BTreeMap<_, _>>();
    Some(LocalVerdicts { node: "n1".into(), nodes, ..LocalVerdicts::default() })
}

#[tokio::test]
async fn a_node_voted_down_locally_leaves_the_served_slices_while_upstream_lists_it_ready() {
    let (server, upstream) = two_unit_cluster().await;
    let wrapper = RunningWrapper::start(&server.url(), config("n1")).await;
    let verdicts: Shared = Arc::new(Mutex::new(view(&[])));
    let addr = verdicts_server(verdicts.clone()).await;
    let config = VerdictsConfig {
        url: format!("http://{addr}/verdicts").parse().expect("uri"),
        interval: Duration::from_millis(50),
        stale_after: Duration::from_millis(600),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let follower = tokio::spawn(grid_wrapper::verdicts::run(wrapper.wrapper.clone(), config, async move {
        let _ = stopped.await;
    }));

    let served: Api<EndpointSlice> = Api::namespaced(wrapper.client.clone(), "ns");
    let list = served.list(&Default::default()).await.expect("list");
    let rv = list.metadata.resource_version.expect("list version");
    let mut events = served.watch(&WatchParams::default(), &rv).await.expect("watch").boxed();

    *verdicts.lock().expect("lock") = view(&["n2"]);
    assert_eq!(next_events(&mut events, 1).await, vec![event("MODIFIED", "web-2", &[])]);
    let upstream_slice = Api::<EndpointSlice>::namespaced(upstream.clone(), "ns").get("web-2").await.expect("upstream");
    assert_eq!(value_ips(&upstream_slice), vec!["10.0.0.2"], "upstream still lists it");
    assert_eq!(upstream_slice.endpoints[0].conditions.as_ref().and_then(|c| c.ready), Some(true));

    // voted up again
    *verdicts.lock().expect("lock") = view(&[]);
    assert_eq!(next_events(&mut events, 1).await, vec![event("MODIFIED", "web-2", &["10.0.0.2"])]);

    // n1 itself voted down: its endpoint leaves web-1 (pass-through plain-1 runs on n3, untouched)
    *verdicts.lock().expect("lock") = view(&["n1", "n2"]);
    let mut got = next_events(&mut events, 2).await;
    got.sort();
    assert_eq!(got, vec![event("MODIFIED", "web-1", &[]), event("MODIFIED", "web-2", &[])]);

    // the daemon goes away: the verdicts hold until stale, then every node is served again
    *verdicts.lock().expect("lock") = None;
    let mut got = next_events(&mut events, 2).await;
    got.sort();
    assert_eq!(got, vec![event("MODIFIED", "web-1", &["10.0.0.1"]), event("MODIFIED", "web-2", &["10.0.0.2"])]);
    let metrics = wrapper.wrapper.metrics();
    assert_eq!(metrics.nodes_down.get(), 0);

    let _ = stop.send(());
    within("the follower to stop", follower).await.expect("follower ends cleanly");
}
