//! The upstream side: one watch per stream (controller-support's [`Watch`]), through the
//! wrapper's own credentials, translated into cache [`Input`]s.
//!
//! Other nodes are watched metadata-only (their labels are all topology needs), so a large
//! cluster's node status churn costs each edge node a metadata object per update, not a
//! whole Node; the local node is watched whole, filtered by name, because kube-proxy reads
//! it. A failing watch keeps the last view served and retries with backoff; a relist
//! (after a 410, or after an upstream whose versions went back) reaches the cache as its
//! differences, which the watch helper computes: the cache and the log take a list's
//! begin and end as markers only.
//!
//! Each plan starts new watches over a cache (and, leading from a promoted replica, a
//! log) that already holds objects: restored from disk, left by the previous plan's
//! watches, inherited from the previous leader. Each watch starts from what its indexes
//! hold ([`Watch::holding`]), so that its first list deletes what is gone upstream.
//!
//! The upstream is the cloud API server, or the wrapper leading the unit ([`Plan`], chosen
//! by the unit link's supervisor, `unit_link::unit`, which hands each plan to the wrapper
//! through [`FedWrapper`]): the same watches either way. Leading, every object also goes to
//! the [`UpstreamLog`] the followers read, and the local node is watched with the whole
//! unit's nodes, which the followers read theirs from.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;

use controller_support::watch::{Index, Key, RetryGroup, Watch};
use edgegrid_core::unit::upstream::UnitMember;
use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use listwatch::ObjectId;
use unit_link::link_health::LinkHealth;
use unit_link::metrics::{LinkMetrics, StreamLabel};
use unit_link::plan::{LocalNodeWatch, Plan};
use unit_link::stream::Stream;
use unit_link::unit::FedWrapper;
use unit_link::upstream_log::{UpstreamInput, UpstreamKind, UpstreamLog};
use unit_link::vouched::{DigestsFeed, Vouched, Vouching};

use edgegrid_core::vouch::{self, BATCH_CONFIG_MAP, ElementDigest, metadata_element, object_element};
use k8s_openapi::api::core::v1::ConfigMap;

use crate::Wrapper;
use crate::cache::{Input, Object};

/// The wrapper the unit link feeds: the link's supervisor reads the unit from it and hands
/// it each plan it decides, which [`run_plan`] runs.
impl FedWrapper for Wrapper {
    fn local_node(&self) -> &str {
        Wrapper::local_node(self)
    }

    fn unit_members(&self) -> (Vec<UnitMember>, Option<String>) {
        Wrapper::unit_members(self)
    }

    fn nodes_down(&self) -> BTreeSet<String> {
        Wrapper::nodes_down(self)
    }

    fn forget_local_unit(&self) {
        Wrapper::forget_local_unit(self);
    }

    fn link_metrics(&self) -> &LinkMetrics {
        &self.metrics().link
    }

    fn run_plan(self: Arc<Self>, plan: Plan) -> impl Future<Output = ()> + Send + 'static {
        run_plan(self, plan, std::future::pending())
    }
}

/// Runs every upstream watch against `client` until `stop` resolves.
pub async fn run(wrapper: Arc<Wrapper>, client: Client, stop: impl Future<Output = ()>) {
    run_plan(wrapper, Plan::alone(client), stop).await;
}

/// Runs every upstream watch of `plan` until `stop` resolves.
pub async fn run_plan(wrapper: Arc<Wrapper>, plan: Plan, stop: impl Future<Output = ()>) {
    let local = wrapper.local_node().to_string();
    let client = plan.client.clone();
    let local_deletes_are_real = plan.local_node == LocalNodeWatch::ByName && !plan.from_leader;
    // the view joins every stream: they retry together (see `RetryGroup`)
    let group = RetryGroup::new();
    let feed = |stream, log_kind| Feeds {
        wrapper: &wrapper,
        stream,
        log: plan.log.clone().map(|log| (log, log_kind)),
        health: &plan.health,
        local_deletes_are_real,
    };
    // following with vouching, each stream passes through a gate (see `vouched`)
    let gates = plan.vouch.as_deref().filter(|_| plan.from_leader);
    let health = &plan.health;
    // what each stream's indexes hold now, for its watch's first list to delete what is gone
    let held = |stream, log_kind| held_keys(&wrapper, plan.log.as_deref(), stream, log_kind);
    let local_node = async {
        match &plan.local_node {
            LocalNodeWatch::ByName => {
                // a watch of the local node alone can list nothing else
                let local_held =
                    held(Stream::LocalNode, UpstreamKind::UnitNodes).into_iter().filter(|k| k.name == local);
                let watch = Watch::new(Api::<Node>::all(client.clone()))
                    .retrying_with(&group)
                    .fields(&format!("metadata.name={local}"))
                    .holding(local_held);
                watch
                    .named("local node")
                    .run(feed(Stream::LocalNode, UpstreamKind::UnitNodes).of(Object::LocalNode))
                    .await;
            }
            LocalNodeWatch::Unit { label_key, value } => {
                let watch = Watch::new(Api::<Node>::all(client.clone()))
                    .retrying_with(&group)
                    .labels(&format!("{label_key}={value}"))
                    .holding(held(Stream::LocalNode, UpstreamKind::UnitNodes));
                let nodes = UnitNodes {
                    local: &local,
                    feed: feed(Stream::LocalNode, UpstreamKind::UnitNodes).of(Object::LocalNode),
                };
                let gate = gates.map(|vouching| (vouching, vouch::unit_nodes(value)));
                checked(watch.named("unit nodes"), nodes, gate, object_element, health, Stream::LocalNode).await;
            }
        }
    };
    let gate = |stream: &str| gates.map(|vouching| (vouching, stream.to_string()));
    let streams = futures::future::join5(
        checked(
            Watch::new(Api::<Service>::all(client.clone()))
                .retrying_with(&group)
                .holding(held(Stream::Services, UpstreamKind::Services)),
            feed(Stream::Services, UpstreamKind::Services).of(Object::Service),
            gate(vouch::SERVICES),
            object_element,
            health,
            Stream::Services,
        ),
        checked(
            Watch::new(Api::<EndpointSlice>::all(client.clone()))
                .retrying_with(&group)
                .holding(held(Stream::EndpointSlices, UpstreamKind::EndpointSlices)),
            feed(Stream::EndpointSlices, UpstreamKind::EndpointSlices).of(Object::Slice),
            gate(vouch::ENDPOINT_SLICES),
            object_element,
            health,
            Stream::EndpointSlices,
        ),
        checked(
            Watch::new(Api::<Endpoints>::all(client.clone()))
                .retrying_with(&group)
                .holding(held(Stream::Endpoints, UpstreamKind::Endpoints)),
            feed(Stream::Endpoints, UpstreamKind::Endpoints).of(Object::Endpoints),
            gate(vouch::ENDPOINTS),
            object_element,
            health,
            Stream::Endpoints,
        ),
        // `Api<PartialObjectMeta<_>>` makes kube-rs ask for metadata only
        checked(
            Watch::new(Api::<PartialObjectMeta<Node>>::all(client.clone()))
                .retrying_with(&group)
                .holding(held(Stream::RemoteNodes, UpstreamKind::NodeMetadata))
                .named("nodes (metadata)"),
            feed(Stream::RemoteNodes, UpstreamKind::NodeMetadata).of(remote_node),
            gate(vouch::NODE_METADATA),
            |stream, node: &PartialObjectMeta<Node>| metadata_element(stream, &node.metadata),
            health,
            Stream::RemoteNodes,
        ),
        local_node,
    );
    let digests = digests(&wrapper, &client, &plan, &group);
    tokio::select! {
        _ = futures::future::join(streams, digests) => tracing::error!("upstream watches ended"),
        () = stop => {}
    }
}

/// What the indexes a stream's watch feeds hold now, as the watch names them: the cache's
/// objects of `stream` and, leading, the log's of `log_kind`.
fn held_keys(wrapper: &Wrapper, log: Option<&UpstreamLog>, stream: Stream, log_kind: UpstreamKind) -> BTreeSet<Key> {
    let mut ids: BTreeSet<ObjectId> = wrapper.lock().held(stream).into_iter().collect();
    if let Some(log) = log {
        ids.extend(log.held(log_kind));
    }
    ids.into_iter().map(key).collect()
}

/// The watch's key of an object the cache or the log keys `(namespace, name)`: their
/// namespace is empty for a cluster-scoped object, which a watch names without one.
fn key((namespace, name): ObjectId) -> Key {
    Key { namespace: (!namespace.is_empty()).then_some(namespace), name }
}

/// Runs `watch` into `index`, through a gate when `gate` names the voucher and the
/// stream's name in the batches.
async fn checked<K, I>(
    watch: Watch<K>,
    index: I,
    gate: Option<(&Vouching, String)>,
    element: fn(&str, &K) -> ElementDigest,
    health: &LinkHealth,
    stream: Stream,
) where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
    I: Index<K>,
{
    match gate {
        Some((vouching, name)) => {
            let report = |vouched| match vouched {
                Vouched::Yes => health.vouched(stream),
                Vouched::No(waited) => {
                    if health.unvouched(stream) {
                        tracing::warn!(
                            stream = stream.name(),
                            ?waited,
                            "the unit leader's stream is not vouched for by the signer"
                        );
                    }
                }
            };
            unit_link::vouched::run(watch, name, element, index, vouching, || health.since_reset(), report).await;
        }
        None => watch.run(index).await,
    }
}

/// The unit signer's ConfigMap: leading, from the cloud into the log (an empty kind when
/// nothing is vouched for, so that the log syncs); following with vouching, from the
/// leader into the voucher.
async fn digests(wrapper: &Wrapper, client: &Client, plan: &Plan, group: &RetryGroup) {
    let selector = format!("metadata.name={BATCH_CONFIG_MAP}");
    match (&plan.log, plan.vouch.as_deref()) {
        (Some(log), Some(vouching)) => {
            let configmaps = Api::<ConfigMap>::namespaced(client.clone(), vouching.namespace());
            // the log's only feed of the kind: whatever it holds (inherited) this watch can list
            let held = log.held(UpstreamKind::Digests).into_iter().map(key);
            Watch::new(configmaps)
                .retrying_with(group)
                .fields(&selector)
                .holding(held)
                .named("unit digests")
                .run(LogOnly { log, kind: UpstreamKind::Digests })
                .await;
        }
        (Some(log), None) => {
            // an empty list, as a watch would deliver it: the batches a log inherited from
            // a leader that vouched are gone
            let kind = UpstreamKind::Digests;
            let gone = log.held(kind).into_iter().map(|id| UpstreamInput::Delete(kind, id));
            let list = std::iter::once(UpstreamInput::Begin(kind)).chain(gone).chain([UpstreamInput::Done(kind)]);
            for input in list {
                if let Err(error) = log.apply(input) {
                    tracing::warn!(%error, "the unit log refused its empty digests");
                }
            }
            std::future::pending().await
        }
        (None, Some(vouching)) if plan.from_leader => {
            let configmaps = Api::<ConfigMap>::namespaced(client.clone(), vouching.namespace());
            let feed = DigestsFeed { vouching, metrics: &wrapper.metrics().link };
            Watch::new(configmaps).retrying_with(group).fields(&selector).named("unit digests").run(feed).await;
        }
        (None, _) => std::future::pending().await,
    }
}

/// A kind the leader only passes on to its followers.
struct LogOnly<'a> {
    log: &'a UpstreamLog,
    kind: UpstreamKind,
}

impl LogOnly<'_> {
    fn log(&self, input: UpstreamInput) {
        if let Err(error) = self.log.apply(input) {
            tracing::warn!(%error, kind = self.kind.name(), "upstream object not served to the unit");
        }
    }
}

impl<K: Resource + serde::Serialize> Index<K> for LogOnly<'_> {
    fn begin(&mut self) {
        self.log(UpstreamInput::Begin(self.kind));
    }
    fn apply(&mut self, object: K) {
        self.log(UpstreamInput::Upsert(self.kind, serde_json::to_value(&object).unwrap_or_default()));
    }
    fn delete(&mut self, key: Key) {
        self.log(UpstreamInput::Delete(self.kind, (key.namespace.unwrap_or_default(), key.name)));
    }
    fn done(&mut self) {
        self.log(UpstreamInput::Done(self.kind));
    }
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
    /// Whether a delete of the local node means it is gone (the cloud, by name).
    local_deletes_are_real: bool,
    /// The local node stream only: whether the list in progress had the local node.
    listed_local: bool,
    object: fn(K) -> Object,
}

/// A stream's feed, before the object type is known.
struct Feeds<'a> {
    wrapper: &'a Wrapper,
    stream: Stream,
    log: Option<(Arc<UpstreamLog>, UpstreamKind)>,
    health: &'a LinkHealth,
    local_deletes_are_real: bool,
}

impl<'a> Feeds<'a> {
    fn of<K>(self, object: fn(K) -> Object) -> Feed<'a, K> {
        let Self { wrapper, stream, log, health, local_deletes_are_real } = self;
        Feed { wrapper, stream, log, health, local_deletes_are_real, listed_local: false, object }
    }
}

impl<K: Resource + serde::Serialize> Feed<'_, K> {
    fn input(&self, input: Input) {
        let label = StreamLabel { stream: self.stream.name() };
        let metrics = self.wrapper.metrics();
        metrics.upstream_synced.get_or_create(&label).set(1);
        metrics.upstream_events.get_or_create(&label).inc();
        // a list beginning says nothing of the link (it is announced before its request);
        // what came through it does
        if !matches!(input, Input::Begin(_)) {
            self.health.working(self.stream);
        }
        self.wrapper.apply(input);
    }

    fn log(&self, input: impl FnOnce(UpstreamKind) -> UpstreamInput) {
        if let Some((log, kind)) = &self.log
            && let Err(error) = log.apply(input(*kind))
        {
            tracing::warn!(%error, kind = kind.name(), "upstream object not served to the unit");
        }
    }

    /// The object into the leader's log (which stores each kind in the form it serves).
    fn to_log(&self, object: &K) {
        self.log(|kind| UpstreamInput::Upsert(kind, serde_json::to_value(object).unwrap_or_default()));
    }
}

impl<K: Resource + serde::Serialize> Index<K> for Feed<'_, K> {
    fn begin(&mut self) {
        self.listed_local = false;
        self.log(UpstreamInput::Begin);
        self.input(Input::Begin(self.stream));
    }

    fn apply(&mut self, object: K) {
        // the local node stream hands on the local node only (`UnitNodes`)
        self.listed_local = true;
        self.to_log(&object);
        self.input(Input::Upsert((self.object)(object)));
    }

    fn delete(&mut self, key: Key) {
        let id = (key.namespace.unwrap_or_default(), key.name);
        self.log(|kind| UpstreamInput::Delete(kind, id.clone()));
        // The local node gone from a stream scoped by unit (leading) or served by a leader
        // (whose unit it left) was relabelled, not deleted: kube-proxy must not see its Node
        // go; the supervisor re-decides where to watch it from.
        if self.stream == Stream::LocalNode && !self.local_deletes_are_real && id.1 == self.wrapper.local_node() {
            self.health.note_local_node_left();
            return;
        }
        self.input(Input::Delete(self.stream, id));
    }

    fn done(&mut self) {
        self.log(UpstreamInput::Done);
        // A list of a stream scoped by unit (leading) or served by a leader that lacks the
        // local node: it was relabelled (as for a delete, above, which the watch helper
        // sent too if the cache held the node). Its end is not passed on: the stream has
        // not listed the local node, and a first sync must never serve kube-proxy a view
        // without its own Node; the supervisor reads it from elsewhere.
        if self.stream == Stream::LocalNode && !self.local_deletes_are_real && !self.listed_local {
            self.health.note_local_node_left();
            return;
        }
        self.input(Input::Done(self.stream));
    }

    fn failed(&mut self, error: &watcher::Error) {
        let label = StreamLabel { stream: self.stream.name() };
        let metrics = self.wrapper.metrics();
        metrics.upstream_errors.get_or_create(&label).inc();
        metrics.upstream_synced.get_or_create(&label).set(0);
        self.health.watch_failed(self.stream, error);
    }
}

fn remote_node(node: PartialObjectMeta<Node>) -> Object {
    Object::RemoteNode { name: node.name_any(), labels: node.labels().clone() }
}
