//! End to end on the fake apiserver: in the middle of a site disconnect, while the
//! controller is tainting the site's dead nodes NoExecute at the configured rate, the
//! controller process is restarted, or leadership moves to another instance and back.
//! Whoever acts next resumes from what the API says: the taints (and `timeAdded`)
//! already there stay, the Unknown conditions are not rewritten, and the remaining nodes
//! are tainted, and their pods evicted, at the rate, with no burst at the change.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use edge_node_lifecycle::controller::ControllerConfig;
use fake_apiserver::FakeApiServer;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod};
use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio::time::Instant;

const SITE: [&str; 5] = ["edge-0", "edge-1", "edge-2", "edge-3", "edge-4"];
const CLOUD: [&str; 2] = ["cloud-0", "cloud-1"];
/// `--node-eviction-rate`: one node every 2 s.
const RATE: f64 = 0.5;
const INTERVAL: Duration = Duration::from_secs(2);
/// What watch latency and the 200 ms taint manager period may take off an interval.
const SLACK: Duration = Duration::from_millis(500);

fn config() -> ControllerConfig {
    fast_config(Duration::from_millis(300), RATE)
}

/// What a watch on nodes saw: when each node's unreachable NoExecute taint first
/// appeared (with its `timeAdded`), and every taint that went away.
#[derive(Default)]
struct TaintLog {
    no_execute: BTreeMap<String, (Instant, Option<String>)>,
    removed: Vec<(String, String)>,
    last: BTreeMap<String, Vec<String>>,
}

impl TaintLog {
    fn observe(&mut self, node: &Node) {
        let name = node.name_any();
        let now = taint_keys(node);
        for gone in self.last.get(&name).into_iter().flatten().filter(|t| !now.contains(t)) {
            self.removed.push((name.clone(), gone.clone()));
        }
        if now.iter().any(|t| t == UNREACHABLE_NO_EXECUTE) && !self.no_execute.contains_key(&name) {
            self.no_execute.insert(name.clone(), (Instant::now(), no_execute_time_added(node)));
        }
        self.last.insert(name, now);
    }
}

fn no_execute_time_added(node: &Node) -> Option<String> {
    let taints = node.spec.as_ref()?.taints.as_ref()?;
    let taint = taints.iter().find(|t| t.key == "node.kubernetes.io/unreachable" && t.effect == "NoExecute")?;
    taint.time_added.as_ref().map(|t| t.0.to_string())
}

fn assert_spaced(what: &str, mut times: Vec<Instant>) {
    times.sort();
    for pair in times.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(gap >= INTERVAL - SLACK, "{what} faster than {RATE} nodes/s: {gap:?} apart");
    }
}

/// Two cloud nodes and a site of five, one pod without tolerations on each, kubelets
/// renewing every Lease, and watches recording NoExecute taints and pod deletions.
struct Site {
    server: FakeApiServer,
    client: Client,
    nodes: Api<Node>,
    pods: Api<Pod>,
    alive: Arc<Mutex<HashSet<String>>>,
    taints: Arc<Mutex<TaintLog>>,
    evicted: Arc<Mutex<BTreeMap<String, Instant>>>,
    tasks: Vec<JoinHandle<()>>,
}

/// What the API said about the site at some moment.
struct SiteState {
    conditions: Vec<Option<Vec<NodeCondition>>>,
    no_execute: BTreeMap<String, Option<String>>,
    request_mark: u64,
}

impl Site {
    async fn start() -> Self {
        let (server, client) = start_server().await;
        for (names, zone) in [(&SITE[..], "site-a"), (&CLOUD[..], "cloud")] {
            for name in names {
                create_node(&client, name, zone).await;
                create_pod(&client, &format!("{name}-intolerant"), name, json!([])).await;
            }
        }
        let alive = Arc::new(Mutex::new(SITE.iter().chain(CLOUD.iter()).map(|s| s.to_string()).collect()));
        let nodes: Api<Node> = Api::all(client.clone());
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let taints: Arc<Mutex<TaintLog>> = Arc::default();
        let evicted: Arc<Mutex<BTreeMap<String, Instant>>> = Arc::default();
        let tasks = vec![
            kubelets(client.clone(), alive.clone()),
            watch_events(nodes.clone(), {
                let taints = taints.clone();
                move |event| {
                    if let watcher::Event::Apply(node) | watcher::Event::InitApply(node) = event {
                        taints.lock().unwrap().observe(&node);
                    }
                }
            }),
            watch_events(pods.clone(), {
                let evicted = evicted.clone();
                move |event| {
                    if let watcher::Event::Delete(pod) = event {
                        evicted.lock().unwrap().insert(pod.name_any(), Instant::now());
                    }
                }
            }),
        ];
        Self { server, client, nodes, pods, alive, taints, evicted, tasks }
    }

    /// The site loses its cloud link; once the controller has marked it Unknown, its
    /// peers vote every node unhealthy (they died): stock handling at the rate follows.
    async fn disconnect_and_vote(&self) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        self.alive.lock().unwrap().retain(|n| n.starts_with("cloud"));
        wait_for("site nodes marked Unknown", Duration::from_secs(15), || async {
            let mut unknown = 0;
            for name in SITE {
                let ready = ready_condition(&self.nodes.get(name).await.unwrap());
                unknown += usize::from(ready == Some(("Unknown".into(), Some("NodeStatusUnknown".into()))));
            }
            unknown == SITE.len()
        })
        .await;
        for name in SITE {
            vote_unhealthy(&self.client, name).await;
        }
    }

    fn tainted(&self) -> usize {
        self.taints.lock().unwrap().no_execute.len()
    }

    async fn wait_tainted(&self, count: usize) {
        wait_for(&format!("{count} site nodes tainted NoExecute"), Duration::from_secs(20), || async {
            self.tainted() >= count
        })
        .await;
    }

    async fn state(&self) -> SiteState {
        let mut conditions = Vec::new();
        let mut no_execute = BTreeMap::new();
        for name in SITE {
            let node = self.nodes.get(name).await.unwrap();
            if taint_keys(&node).iter().any(|t| t == UNREACHABLE_NO_EXECUTE) {
                no_execute.insert(name.to_string(), no_execute_time_added(&node));
            }
            conditions.push(node.status.and_then(|s| s.conditions));
        }
        SiteState { conditions, no_execute, request_mark: self.server.requests().mark() }
    }

    async fn wait_all_tainted_and_evicted(&self) {
        wait_for("every site node tainted and its pod evicted", Duration::from_secs(30), || async {
            let left = self.pods.list(&ListParams::default()).await.unwrap().items.len();
            self.tainted() == SITE.len() && left == CLOUD.len()
        })
        .await;
        // a few more passes for the controller to (wrongly) act
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    /// No burst: the NoExecute taints, and the evictions they cause, stay an interval
    /// apart throughout, as if one controller had run without a break. And whoever acted
    /// after `before` took the site as it found it: no taint was ever removed (no Unknown
    /// node got a fresh grace period), the NoExecute taints already there kept their
    /// `timeAdded` (pods' tolerationSeconds kept counting), the Unknown conditions were
    /// not rewritten, no pod status was written again, and the only node writes were the
    /// missing NoExecute taints.
    async fn assert_resumed_from(&self, before: &SiteState) {
        let (tainted_at, removed): (Vec<Instant>, Vec<(String, String)>) = {
            let log = self.taints.lock().unwrap();
            (log.no_execute.values().map(|(at, _)| *at).collect(), log.removed.clone())
        };
        assert_spaced("NoExecute taints", tainted_at);
        let evicted = self.evicted.lock().unwrap().clone();
        assert_spaced("evictions", evicted.values().copied().collect());
        assert_eq!(evicted.keys().cloned().collect::<Vec<_>>(), SITE.map(|n| format!("{n}-intolerant")));
        assert_eq!(removed, Vec::<(String, String)>::new());

        let after = self.state().await;
        assert_eq!(after.conditions, before.conditions);
        assert!(!before.no_execute.is_empty() && before.no_execute.len() < SITE.len());
        for (name, added) in &before.no_execute {
            assert!(added.is_some(), "{name}: the controller sets timeAdded");
            assert_eq!(&after.no_execute[name], added, "{name}");
        }
        let writes: Vec<String> = self
            .server
            .requests()
            .since(before.request_mark)
            .into_iter()
            .filter(|r| r.is_write() && (r.path.starts_with("/api/v1/nodes") || r.path.ends_with("/status")))
            .map(|r| format!("{} {} {}", r.method, r.path, r.status))
            .collect();
        let mut sorted = writes.clone();
        sorted.sort();
        let expected: Vec<String> = SITE
            .iter()
            .filter(|n| !before.no_execute.contains_key(**n))
            .map(|n| format!("PATCH /api/v1/nodes/{n} 200"))
            .collect();
        assert_eq!(sorted, expected, "node and status writes after the change, in order: {writes:?}");
        for name in SITE {
            let node = self.nodes.get(name).await.unwrap();
            assert_eq!(taint_keys(&node), [UNREACHABLE_NO_SCHEDULE, UNREACHABLE_NO_EXECUTE], "{name}");
        }
        for name in CLOUD {
            assert_eq!(taint_keys(&self.nodes.get(name).await.unwrap()), Vec::<String>::new(), "{name}");
        }
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_mid_disconnect_resumes_at_the_rate() {
    let site = Site::start().await;
    let first = RunningController::start(&site.client, config());
    site.disconnect_and_vote().await;
    site.wait_tainted(2).await;

    // restart: the old process stops (as on SIGTERM), a new one starts at once
    first.stop().await;
    let before = site.state().await;
    let second = RunningController::start(&site.client, config());
    site.wait_all_tainted_and_evicted().await;
    second.stop().await;
    site.assert_resumed_from(&before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_moving_away_and_back_resumes_at_the_rate() {
    let site = Site::start().await;
    let a = RunningController::start_with(&site.client, config(), true);
    let b = RunningController::start_with(&site.client, config(), false);
    site.disconnect_and_vote().await;
    site.wait_tainted(2).await;

    // a loses the Lease to b, which taints one more node, then a leads again: a must not
    // act on what it knew from its earlier term (its queue's bucket has refilled since)
    a.set_leader(false);
    let before = site.state().await;
    b.set_leader(true);
    site.wait_tainted(3).await;
    b.set_leader(false);
    a.set_leader(true);
    site.wait_all_tainted_and_evicted().await;
    a.stop().await;
    b.stop().await;
    site.assert_resumed_from(&before).await;
}
