//! The watch helper against the fake API server over HTTP, with an unmodified kube-rs
//! client: the first list, live changes, the relist after a 410 and after a "too large
//! resource version" (an API server that came back with older versions), each heard as
//! its differences; the first list of a watch seeded with what its index held; a
//! metadata-only, field-selected watch.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use controller_support::watch::{Index, Key, Watch};
use fake_apiserver::{FakeApiServer, Fault, ServerConfig};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PartialObjectMeta};
use kube::{Client, ResourceExt};
use serde_json::json;

/// What an index heard, in order, shared with the test; and how often its watch failed.
#[derive(Clone, Default)]
struct Heard(Arc<Mutex<Vec<String>>>, Arc<AtomicUsize>);

impl Heard {
    fn push(&self, line: String) {
        self.0.lock().unwrap().push(line);
    }

    /// Waits (10 s at most) until the index has heard `want` after the `from` first lines;
    /// returns where the next lines start.
    async fn until(&self, from: usize, want: &[&str]) -> usize {
        for _ in 0..1000 {
            {
                let heard = self.0.lock().unwrap();
                if heard.len() >= from + want.len() {
                    assert_eq!(heard[from..from + want.len()], *want, "all heard: {heard:?}");
                    assert_eq!(heard.len(), from + want.len(), "nothing more: {heard:?}");
                    return heard.len();
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("heard {:?}, waiting for {want:?} after line {from}", self.0.lock().unwrap());
    }
}

impl<K: kube::Resource> Index<K> for Heard {
    fn begin(&mut self) {
        self.push("begin".into());
    }
    fn apply(&mut self, object: K) {
        let labels: Vec<String> = object.labels().iter().map(|(k, v)| format!("{k}={v}")).collect();
        self.push(format!("apply {} {}", object.name_any(), labels.join(",")).trim_end().to_string());
    }
    fn delete(&mut self, key: Key) {
        self.push(format!("delete {}/{}", key.namespace.unwrap_or_default(), key.name));
    }
    fn done(&mut self) {
        self.push("done".into());
    }
    fn failed(&mut self, _: &kube::runtime::watcher::Error) {
        self.1.fetch_add(1, Ordering::SeqCst);
    }
}

fn client(server: &FakeApiServer) -> Client {
    Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap()
}

fn create(server: &FakeApiServer, name: &str, labels: serde_json::Value) {
    let rt = server.store().resolve("", "v1", "configmaps").unwrap();
    let map = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "labels": labels}, "data": {"v": "1"}});
    server.store().create(&rt, "default", map).unwrap();
}

fn delete(server: &FakeApiServer, name: &str) {
    let rt = server.store().resolve("", "v1", "configmaps").unwrap();
    server.store().delete(&rt, "default", name, &Default::default()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relists_are_heard_as_their_differences() {
    let server = FakeApiServer::start().await.unwrap();
    for name in ["a", "b", "c"] {
        create(&server, name, json!({}));
    }
    let heard = Heard::default();
    let watch = Watch::new(Api::<ConfigMap>::namespaced(client(&server), "default"));
    let watching = tokio::spawn({
        let mut index = heard.clone();
        async move { watch.run(&mut index).await }
    });
    let at = heard.until(0, &["begin", "apply a", "apply b", "apply c", "done"]).await;

    // while watched
    delete(&server, "c");
    create(&server, "e", json!({}));
    let at = heard.until(at, &["delete default/c", "apply e"]).await;

    // the watch cannot resume (410): changes it missed arrive as the relist's differences
    let mark = server.requests().mark();
    server.set_fault("configmaps", Fault::Error(503));
    server.drop_watches();
    // the old stream is closed once the watcher's reconnection has been refused
    for _ in 0..500 {
        if server.requests().since(mark).iter().any(|r| r.status == 503) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(server.requests().since(mark).iter().any(|r| r.status == 503), "the watcher reconnected");
    delete(&server, "b");
    create(&server, "d", json!({}));
    server.compact_history();
    server.clear_faults();
    let at = heard.until(at, &["begin", "apply a", "apply d", "apply e", "delete default/b", "done"]).await;

    // an API server back with older versions than the watch resumes from: kube-rs alone
    // would retry that version forever
    let address = server.addr();
    // reconnections fail fast while it stops (one reopened would hold the stop for minutes)
    server.set_fault("configmaps", Fault::Error(503));
    server.drop_watches();
    server.stop().await;
    let server = FakeApiServer::start_at(address, ServerConfig::default()).await.unwrap();
    create(&server, "x", json!({}));
    heard.until(at, &["begin", "apply x", "delete default/a", "delete default/d", "delete default/e", "done"]).await;
    // the watch resumed from its old version first, was told it is too new, and listed
    let requests: Vec<(bool, String)> = server
        .requests()
        .since(0)
        .into_iter()
        .map(|r| (r.query.contains("watch=true"), r.query.split("resourceVersion=").nth(1).unwrap_or("").to_string()))
        .collect();
    assert!(requests.len() >= 2 && requests[0].0 && !requests[1].0, "a watch, then a list: {requests:?}");
    assert!(requests[0].1.parse::<u64>().unwrap() > 5, "resumed from the old server's version: {requests:?}");
    watching.abort();
}

/// A watch told what its index holds already (objects restored, inherited, or left by an
/// earlier watch): its first list deletes those the API server lacks, and not those it
/// has, which are the watch's own from then on; a watch told nothing deletes nothing at
/// its first list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_list_deletes_what_the_index_held_that_the_server_lacks() {
    let server = FakeApiServer::start().await.unwrap();
    for name in ["a", "b"] {
        create(&server, name, json!({}));
    }
    let key = |name: &str| Key { namespace: Some("default".into()), name: name.into() };
    let api = Api::<ConfigMap>::namespaced(client(&server), "default");
    let (holding, fresh) = (Heard::default(), Heard::default());
    let watches = [
        (Watch::new(api.clone()).holding([key("gone"), key("a"), key("also-gone")]), holding.clone()),
        (Watch::new(api), fresh.clone()),
    ]
    .map(|(watch, heard)| {
        tokio::spawn({
            let mut index = heard;
            async move { watch.run(&mut index).await }
        })
    });
    let listed = ["begin", "apply a", "apply b", "delete default/also-gone", "delete default/gone", "done"];
    let at = holding.until(0, &listed).await;
    fresh.until(0, &["begin", "apply a", "apply b", "done"]).await;

    // a seeded key the list had is deleted when the server deletes it, like any other
    delete(&server, "a");
    holding.until(at, &["delete default/a"]).await;
    for watch in watches {
        watch.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metadata_only_watch_selects_by_field() {
    let server = FakeApiServer::start().await.unwrap();
    create(&server, "a", json!({"unit": "a"}));
    create(&server, "b", json!({"unit": "b"}));
    let heard = Heard::default();
    let api = Api::<PartialObjectMeta<ConfigMap>>::namespaced(client(&server), "default");
    let watch = Watch::new(api).fields("metadata.name=a");
    let watching = tokio::spawn({
        let mut index = heard.clone();
        async move { watch.run(&mut index).await }
    });
    let at = heard.until(0, &["begin", "apply a unit=a", "done"]).await;
    delete(&server, "b");
    delete(&server, "a");
    heard.until(at, &["delete default/a"]).await;
    let requests = server.requests().since(0);
    assert!(requests.iter().all(|r| r.query.contains("fieldSelector=metadata.name%3Da")), "{requests:?}");
    watching.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_relisting_after_failure_starts_over_with_a_list_where_another_resumes() {
    let server = FakeApiServer::start().await.unwrap();
    create(&server, "a", json!({}));
    let (relisting, resuming) = (Heard::default(), Heard::default());
    // failures reach the watch at once, not after kube's client retried the 503s for minutes
    let config = controller_support::runtime::without_retries(kube::Config::new(server.url().parse().unwrap()));
    let api = Api::<ConfigMap>::namespaced(Client::try_from(config).unwrap(), "default");
    let watches =
        [(Watch::new(api.clone()).relisting_after_failure(), relisting.clone()), (Watch::new(api), resuming.clone())]
            .map(|(watch, heard)| {
                tokio::spawn({
                    let mut index = heard;
                    async move { watch.run(&mut index).await }
                })
            });
    let relisted_at = relisting.until(0, &["begin", "apply a", "done"]).await;
    let resumed_at = resuming.until(0, &["begin", "apply a", "done"]).await;

    // both fail; the server keeps its history, so a watch can resume where it was
    server.set_fault("configmaps", Fault::Error(503));
    server.drop_watches();
    for _ in 0..500 {
        if relisting.1.load(Ordering::SeqCst) > 0 && resuming.1.load(Ordering::SeqCst) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(relisting.1.load(Ordering::SeqCst) > 0 && resuming.1.load(Ordering::SeqCst) > 0, "both failed");
    server.clear_faults();
    let relisted_at = relisting.until(relisted_at, &["begin", "apply a", "done"]).await;
    create(&server, "b", json!({}));
    relisting.until(relisted_at, &["apply b"]).await;
    // the other heard nothing of the failure: it resumed and only hears the change
    resuming.until(resumed_at, &["apply b"]).await;
    for watch in watches {
        watch.abort();
    }
}
