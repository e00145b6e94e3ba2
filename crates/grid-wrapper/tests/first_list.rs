//! What an upstream's first list deletes, over HTTP on 127.0.0.1 (the fake apiserver as the
//! cloud, unmodified kube-rs clients on the wrapper): objects the wrapper held before its
//! watches started and the cloud no longer has. Its watch helper computes every relist's
//! deletes, told what the cache and the leader's log already hold
//! (`controller_support::watch::Watch::holding`):
//!
//! - a view restored from disk at a restart, whose first sync drops what is gone;
//! - a cache left by the previous plan's watches (the unit link switches plans: lead,
//!   follow, alone), whose next plan's first lists delete what went while none ran;
//! - a leader's log promoted from its standby's replica of the previous leader's log,
//!   which the first cloud lists rid of what the cloud lost meanwhile, for every follower.

mod common;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use controller_support::state_file::ClusterIdentity;
use edgegrid_core::vouch::BATCH_CONFIG_MAP;
use edgegrid_testing::objects::{node_object, service_object, slice_object};
use futures::StreamExt;
use grid_wrapper::Wrapper;
use grid_wrapper::cache::ViewSource;
use grid_wrapper::metrics::Metrics;
use grid_wrapper::persist::Saver;
use k8s_openapi::api::core::v1::Endpoints;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use listwatch::{ChangeKind, LogConfig};
use serde_json::{Value, json};
use unit_link::plan::{LocalNodeWatch, Plan};
use unit_link::upstream_log::{UpstreamInput, UpstreamKind, UpstreamLog};

const LOG: LogConfig = LogConfig { history_limit: 1000, watch_buffer: 1000 };

/// A wrapper of `n1` whose upstream the test runs, served on 127.0.0.1.
async fn n1_served(server: &fake_apiserver::FakeApiServer) -> RunningWrapper {
    let upstream = kube::Config::new(server.url().parse().expect("url"));
    let wrapper = Wrapper::new(&config("n1"), &upstream, Arc::new(Metrics::default())).expect("wrapper");
    RunningWrapper::serve(wrapper).await
}

/// Runs `plan` into `wrapper` until `stop` resolves.
fn run_plan(
    wrapper: &Arc<Wrapper>,
    plan: Plan,
    stop: impl Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(grid_wrapper::upstream::run_plan(wrapper.clone(), plan, stop))
}

/// What a client's watch of served slices sees.
type SliceEvents = futures::stream::BoxStream<'static, Result<WatchEvent<EndpointSlice>, kube::Error>>;

/// A watch of the served slices from the version of a list of them (which must be
/// `names`).
async fn watch_slices(client: &kube::Client, names: &[&str]) -> SliceEvents {
    let slices: Api<EndpointSlice> = Api::all(client.clone());
    let listed = slices.list(&ListParams::default()).await.expect("list");
    let listed_names: Vec<String> = listed.items.iter().filter_map(|s| s.metadata.name.clone()).collect();
    assert_eq!(listed_names, names);
    let rv = listed.metadata.resource_version.expect("a list version");
    slices.watch(&WatchParams::default(), &rv).await.expect("watch").boxed()
}

/// Deletes the upstream slice `plain-1` (what kube-proxy on n1 is served of it: `10.0.0.5`).
async fn delete_plain_1(cloud: &kube::Client) {
    let slices: Api<EndpointSlice> = Api::namespaced(cloud.clone(), "ns");
    slices.delete("plain-1", &Default::default()).await.expect("delete plain-1");
}

/// A node restarted from its saved view while the cloud lost a slice: the restored view is
/// served until the first sync, which deletes the slice (one DELETED on kube-proxy's
/// watch, nothing else) and keeps the rest.
#[tokio::test]
async fn a_restored_object_gone_upstream_is_deleted_by_the_first_sync() {
    let (server, cloud) = two_unit_cluster().await;
    let dir = std::env::temp_dir().join(format!("grid-wrapper-first-list-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cluster = ClusterIdentity::of(&kube::Config::new(server.url().parse().expect("url")));
    let saver = Saver { dir: Some(dir.clone()), limit: 1 << 20, period: Duration::from_secs(60), cluster };
    let before = RunningWrapper::start(&server.url(), config("n1")).await;
    assert!(saver.save(&before.wrapper), "the view is saved");
    drop(before);

    delete_plain_1(&cloud).await;
    let after = n1_served(&server).await;
    assert!(saver.restore(&after.wrapper).is_some(), "the saved view is restored");
    after.until_serving(ViewSource::Restored).await;
    let mut events = watch_slices(&after.client, &["plain-1", "web-1", "web-2"]).await;
    let _upstream = run_plan(&after.wrapper, Plan::alone(cloud.clone()), std::future::pending());
    after.until_serving(ViewSource::Upstream).await;
    assert_eq!(next_events(&mut events, 1).await, vec![event("DELETED", "plain-1", &["10.0.0.5"])]);
    no_more_events(&mut events).await;
    assert_eq!(listed_slices(&after.client).await, named_ips(&[("web-1", &["10.0.0.1"]), ("web-2", &["10.0.0.2"])]));
    std::fs::remove_dir_all(&dir).ok();
}

/// The unit link ends a plan and starts another over the same cache (here alone twice, as
/// after a leader given up): what the cloud deleted while no watch ran is deleted by the
/// next plan's first lists (the slice `plain-1` and the Endpoints `web`), and nothing else
/// changes.
#[tokio::test]
async fn a_new_plans_first_list_deletes_what_went_while_no_watch_ran() {
    let (server, cloud) = two_unit_cluster().await;
    let running = n1_served(&server).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let first = run_plan(&running.wrapper, Plan::alone(cloud.clone()), async move {
        let _ = stopped.await;
    });
    running.until_serving(ViewSource::Upstream).await;
    let _ = stop.send(());
    within("the first plan to end", first).await.expect("the plan ran");

    delete_plain_1(&cloud).await;
    let endpoints: Api<Endpoints> = Api::namespaced(cloud.clone(), "ns");
    endpoints.delete("web", &Default::default()).await.expect("delete the Endpoints web");
    let mut events = watch_slices(&running.client, &["plain-1", "web-1", "web-2"]).await;
    let _next = run_plan(&running.wrapper, Plan::alone(cloud.clone()), std::future::pending());
    assert_eq!(next_events(&mut events, 1).await, vec![event("DELETED", "plain-1", &["10.0.0.5"])]);
    no_more_events(&mut events).await;
    assert_eq!(listed_slices(&running.client).await, named_ips(&[("web-1", &["10.0.0.1"]), ("web-2", &["10.0.0.2"])]));
    let served: Api<Endpoints> = Api::all(running.client.clone());
    eventually("the Endpoints web deleted", || async {
        served.list(&ListParams::default()).await.ok()?.items.is_empty().then_some(())
    })
    .await;
}

fn value_of<T: serde::Serialize>(object: &T) -> Value {
    serde_json::to_value(object).expect("an object")
}

/// The names of the objects of `kind` in `log`, sorted.
fn names(log: &UpstreamLog, kind: UpstreamKind) -> Vec<String> {
    log.held(kind).into_iter().map(|(_, name)| name).collect()
}

/// A wrapper leading its unit from the replica of the previous leader's log, promoted: the
/// cloud watches start from what the log holds, so their first lists delete from it (and
/// so from every follower's view) what the cloud lost since: a Service and its slice, a
/// node and the unit member it was, the signer's batches of a leader that vouched; and
/// nothing the cloud still has.
#[tokio::test]
async fn a_promoted_log_is_rid_of_what_the_cloud_lost_by_the_first_lists() {
    let (server, cloud) = two_unit_cluster().await;
    // the previous leader's log, fed by its cloud watches before it died
    let previous = UpstreamLog::new(LOG);
    let node = |name: &str| value_of(&node_object(name, &[("unit", "a")]));
    let batches = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": BATCH_CONFIG_MAP, "namespace": "edgegrid"}, "data": {}});
    let lists: [(UpstreamKind, Vec<Value>); 6] = [
        (
            UpstreamKind::Services,
            vec![value_of(&service_object("web", Some(r#"["unit"]"#))), value_of(&service_object("gone", None))],
        ),
        (UpstreamKind::EndpointSlices, vec![value_of(&slice_object("gone-1", "gone", &[("10.0.0.9", "n9")]))]),
        (UpstreamKind::Endpoints, vec![]),
        (UpstreamKind::NodeMetadata, vec![node("n1"), node("n9")]),
        (UpstreamKind::UnitNodes, vec![node("n1"), node("n9")]),
        (UpstreamKind::Digests, vec![batches]),
    ];
    for (kind, objects) in lists {
        previous.apply(UpstreamInput::Begin(kind)).expect("begin");
        for object in objects {
            previous.apply(UpstreamInput::Upsert(kind, object)).expect("upsert");
        }
        previous.apply(UpstreamInput::Done(kind)).expect("done");
    }
    // its standby's replica, which the standby leads from
    let (rv, objects, _) = previous.snapshot();
    let log = UpstreamLog::replica(LOG, previous.term(), rv);
    for (kind, object) in objects {
        log.restore(kind, object.value()).expect("restored");
    }
    log.replica_synced();
    log.promote();
    let (_, _, mut changes) = log.snapshot();

    let running = n1_served(&server).await;
    let local_node = LocalNodeWatch::Unit { label_key: "unit".into(), value: "a".into() };
    let plan = Plan {
        client: cloud.clone(),
        local_node,
        log: Some(log.clone()),
        health: Arc::default(),
        from_leader: false,
        vouch: None,
    };
    let _leading = run_plan(&running.wrapper, plan, std::future::pending());
    let cloud_has: [(UpstreamKind, &[&str]); 6] = [
        (UpstreamKind::Services, &["plain", "web"]),
        (UpstreamKind::EndpointSlices, &["plain-1", "web-1", "web-2"]),
        (UpstreamKind::Endpoints, &["web"]),
        (UpstreamKind::NodeMetadata, &["n1", "n2", "n3"]),
        (UpstreamKind::UnitNodes, &["n1", "n2"]),
        (UpstreamKind::Digests, &[]),
    ];
    eventually("the log holding what the cloud has", || async {
        cloud_has.iter().all(|(kind, want)| names(&log, *kind) == *want).then_some(())
    })
    .await;
    running.until_serving(ViewSource::Upstream).await;
    let mut deleted = Vec::new();
    while let Ok(change) = changes.try_recv() {
        if change.kind == ChangeKind::Deleted {
            deleted.push((change.key, change.id.1.clone()));
        }
    }
    deleted.sort();
    let gone = [
        (UpstreamKind::Services, "gone"),
        (UpstreamKind::EndpointSlices, "gone-1"),
        (UpstreamKind::NodeMetadata, "n9"),
        (UpstreamKind::UnitNodes, "n9"),
        (UpstreamKind::Digests, BATCH_CONFIG_MAP),
    ];
    assert_eq!(deleted, gone.map(|(kind, name)| (kind, name.to_string())));
    // the wrapper's own view is the cloud's
    assert_eq!(
        listed_slices(&running.client).await,
        named_ips(&[("plain-1", &["10.0.0.5"]), ("web-1", &["10.0.0.1"]), ("web-2", &["10.0.0.2"])])
    );
}
