//! The upstream side: one watch per stream (controller-support's [`Watch`]), through the
//! wrapper's own credentials, translated into cache [`Input`]s.
//!
//! Other nodes are watched metadata-only (their labels are all topology needs), so a large
//! cluster's node status churn costs each edge node a metadata object per update, not a
//! whole Node; the local node is watched whole, filtered by name, because kube-proxy reads
//! it. A failing watch keeps the last view served and retries with backoff; a relist
//! (after a 410, or after an upstream whose versions went back) reaches the cache as its
//! differences.
//!
//! The upstream is the cloud API server, or the wrapper leading the unit ([`Plan`], chosen
//! by [`crate::unit`]): the same watches either way. Leading, every object also goes to
//! the [`UpstreamLog`] the followers read, and the local node is watched with the whole
//! unit's nodes, which the followers read theirs from.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use controller_support::watch::{Index, Key, Watch};
use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use crate::Wrapper;
use crate::cache::{Input, Object, Stream};
use crate::metrics::StreamLabel;
use crate::upstream_log::{UpstreamInput, UpstreamKind, UpstreamLog};

/// Where a wrapper's upstream objects come from and where they go besides its cache.
pub struct Plan {
    /// The cloud API server, or the unit leader's wrapper.
    pub client: Client,
    pub local_node: LocalNodeWatch,
    /// Leading the unit: the unpruned objects, for the followers.
    pub log: Option<Arc<UpstreamLog>>,
    /// Told of every stream's failures and successes.
    pub health: Arc<LinkHealth>,
}

impl Plan {
    /// Alone on `client`, as a wrapper outside any shared unit.
    pub fn alone(client: Client) -> Self {
        Self { client, local_node: LocalNodeWatch::ByName, log: None, health: Arc::default() }
    }
}

/// How the local node is watched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LocalNodeWatch {
    /// By name (`fieldSelector=metadata.name=<node>`).
    ByName,
    /// With the whole unit's nodes (`labelSelector=<key>=<value>`), which the leader serves
    /// its followers: one watch for the unit instead of one per node.
    Unit { label_key: String, value: String },
}

/// Runs every upstream watch against `client` until `stop` resolves.
pub async fn run(wrapper: Arc<Wrapper>, client: Client, stop: impl Future<Output = ()>) {
    run_plan(wrapper, Plan::alone(client), stop).await;
}

/// Runs every upstream watch of `plan` until `stop` resolves.
pub async fn run_plan(wrapper: Arc<Wrapper>, plan: Plan, stop: impl Future<Output = ()>) {
    let local = wrapper.local_node().to_string();
    let client = plan.client;
    let feed = |stream, log_kind| Feeds {
        wrapper: &wrapper,
        stream,
        log: plan.log.clone().map(|log| (log, log_kind)),
        health: &plan.health,
    };
    // `Api<PartialObjectMeta<_>>` makes kube-rs ask for metadata only
    let remote_nodes = Watch::new(Api::<PartialObjectMeta<Node>>::all(client.clone()));
    let local_node = async {
        match &plan.local_node {
            LocalNodeWatch::ByName => {
                let watch = Watch::new(Api::<Node>::all(client.clone())).fields(&format!("metadata.name={local}"));
                watch
                    .named("local node")
                    .run(feed(Stream::LocalNode, UpstreamKind::UnitNodes).of(Object::LocalNode))
                    .await;
            }
            LocalNodeWatch::Unit { label_key, value } => {
                let watch = Watch::new(Api::<Node>::all(client.clone())).labels(&format!("{label_key}={value}"));
                let nodes = UnitNodes {
                    local: &local,
                    feed: feed(Stream::LocalNode, UpstreamKind::UnitNodes).of(Object::LocalNode),
                };
                watch.named("unit nodes").run(nodes).await;
            }
        }
    };
    let streams = futures::future::join5(
        Watch::new(Api::<Service>::all(client.clone()))
            .run(feed(Stream::Services, UpstreamKind::Services).of(Object::Service)),
        Watch::new(Api::<EndpointSlice>::all(client.clone()))
            .run(feed(Stream::EndpointSlices, UpstreamKind::EndpointSlices).of(Object::Slice)),
        Watch::new(Api::<Endpoints>::all(client.clone()))
            .run(feed(Stream::Endpoints, UpstreamKind::Endpoints).of(Object::Endpoints)),
        remote_nodes
            .named("nodes (metadata)")
            .run(feed(Stream::RemoteNodes, UpstreamKind::NodeMetadata).of(remote_node)),
        local_node,
    );
    tokio::select! {
        _ = streams => tracing::error!("upstream watches ended"),
        () = stop => {}
    }
}

/// How the upstream link fares, for the unit supervisor: since when every attempt failed,
/// and how.
#[derive(Debug, Default)]
pub struct LinkHealth {
    failing: Mutex<Option<(Instant, LinkFailure)>>,
    /// Whether anything came through the link yet.
    worked: std::sync::atomic::AtomicBool,
}

/// Why a stream failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkFailure {
    /// The upstream answered 503: a leader still syncing (or one that stepped down).
    NotReady,
    /// Anything else: refused, reset, timed out, or an error answer.
    Unreachable,
}

impl LinkHealth {
    /// Since when the link has failed, and the latest failure's kind; `None` while working.
    pub fn failing(&self) -> Option<(Instant, LinkFailure)> {
        *self.failing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn failed(&self, failure: LinkFailure) {
        let mut failing = self.failing.lock().unwrap_or_else(PoisonError::into_inner);
        let since = failing.map_or_else(Instant::now, |(since, _)| since);
        *failing = Some((since, failure));
    }

    /// Whether anything came through the link yet.
    pub fn worked(&self) -> bool {
        self.worked.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn working(&self) {
        self.worked.store(true, std::sync::atomic::Ordering::Relaxed);
        *self.failing.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

fn classify(error: &watcher::Error) -> LinkFailure {
    let response = match error {
        watcher::Error::InitialListFailed(kube::Error::Api(response))
        | watcher::Error::WatchStartFailed(kube::Error::Api(response))
        | watcher::Error::WatchFailed(kube::Error::Api(response)) => Some(response.code),
        watcher::Error::WatchError(response) => Some(response.code),
        _ => None,
    };
    if response == Some(503) { LinkFailure::NotReady } else { LinkFailure::Unreachable }
}

/// The unit's nodes, whole: every one to the log, the local one to the cache.
struct UnitNodes<'a> {
    local: &'a str,
    feed: Feed<'a, Node>,
}

impl Index<Node> for UnitNodes<'_> {
    fn begin(&mut self) {
        Index::begin(&mut self.feed);
    }

    fn apply(&mut self, node: Node) {
        if node.name_any() == self.local {
            Index::apply(&mut self.feed, node);
        } else {
            self.feed.to_log(&node);
        }
    }

    fn delete(&mut self, key: Key) {
        Index::delete(&mut self.feed, key);
    }

    fn done(&mut self) {
        Index::done(&mut self.feed);
    }

    fn failed(&mut self, error: &watcher::Error) {
        Index::failed(&mut self.feed, error);
    }
}

/// One stream's watch into the cache (and, leading, the log), counted.
struct Feed<'a, K> {
    wrapper: &'a Wrapper,
    stream: Stream,
    log: Option<(Arc<UpstreamLog>, UpstreamKind)>,
    health: &'a LinkHealth,
    object: fn(K) -> Object,
}

/// A stream's feed, before the object type is known.
struct Feeds<'a> {
    wrapper: &'a Wrapper,
    stream: Stream,
    log: Option<(Arc<UpstreamLog>, UpstreamKind)>,
    health: &'a LinkHealth,
}

impl<'a> Feeds<'a> {
    fn of<K>(self, object: fn(K) -> Object) -> Feed<'a, K> {
        Feed { wrapper: self.wrapper, stream: self.stream, log: self.log, health: self.health, object }
    }
}

impl<K: Resource + serde::Serialize> Feed<'_, K> {
    fn input(&self, input: Input) {
        let label = StreamLabel { stream: self.stream.name() };
        let metrics = self.wrapper.metrics();
        metrics.upstream_synced.get_or_create(&label).set(1);
        metrics.upstream_events.get_or_create(&label).inc();
        self.health.working();
        self.wrapper.apply(input);
    }

    fn log(&self, input: impl FnOnce(UpstreamKind) -> UpstreamInput) {
        if let Some((log, kind)) = &self.log
            && let Err(error) = log.apply(input(*kind))
        {
            tracing::warn!(%error, kind = kind.name(), "upstream object not served to the unit");
        }
    }

    /// The object as the leader serves it: whole, but metadata alone for node metadata.
    fn to_log(&self, object: &K) {
        self.log(|kind| {
            let value = match kind {
                UpstreamKind::NodeMetadata => json!({"apiVersion": "v1", "kind": "Node", "metadata": object.meta()}),
                _ => serde_json::to_value(object).unwrap_or_default(),
            };
            UpstreamInput::Upsert(kind, value)
        });
    }
}

impl<K: Resource + serde::Serialize> Index<K> for Feed<'_, K> {
    fn begin(&mut self) {
        self.log(UpstreamInput::Begin);
        self.input(Input::Begin(self.stream));
    }

    fn apply(&mut self, object: K) {
        self.to_log(&object);
        self.input(Input::Upsert((self.object)(object)));
    }

    fn delete(&mut self, key: Key) {
        let id = (key.namespace.unwrap_or_default(), key.name);
        self.log(|kind| UpstreamInput::Delete(kind, id.clone()));
        self.input(Input::Delete(self.stream, id));
    }

    fn done(&mut self) {
        self.log(UpstreamInput::Done);
        self.input(Input::Done(self.stream));
    }

    fn failed(&mut self, error: &watcher::Error) {
        let label = StreamLabel { stream: self.stream.name() };
        let metrics = self.wrapper.metrics();
        metrics.upstream_errors.get_or_create(&label).inc();
        metrics.upstream_synced.get_or_create(&label).set(0);
        self.health.failed(classify(error));
    }
}

fn remote_node(node: PartialObjectMeta<Node>) -> Object {
    let annotation = |key: &str| node.annotations().get(key).map(String::as_str);
    let member = edgegrid_core::unit_upstream::UnitMember::from_annotations(
        &node.name_any(),
        annotation(edgegrid_core::keys::EDGE_HEALTH_PUBLIC_KEY_ANNOTATION),
        annotation(edgegrid_core::keys::EDGE_HEALTH_ADDRESS_ANNOTATION),
    );
    Object::RemoteNode { name: node.name_any(), labels: node.labels().clone(), member }
}
