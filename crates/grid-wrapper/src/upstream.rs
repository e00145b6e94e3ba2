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

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use controller_support::watch::{Index, Key, RetryGroup, Watch};
use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};

use edgegrid_core::vouch::{self, BATCH_CONFIG_MAP, ElementDigest, metadata_element, object_element};
use k8s_openapi::api::core::v1::ConfigMap;

use crate::Wrapper;
use crate::cache::{Input, Object, Stream};
use crate::metrics::StreamLabel;
use crate::upstream_log::{UpstreamInput, UpstreamKind, UpstreamLog};
use crate::vouched::{Vouched, Vouching};

/// Where a wrapper's upstream objects come from and where they go besides its cache.
pub struct Plan {
    /// The cloud API server, or the unit leader's wrapper.
    pub client: Client,
    pub local_node: LocalNodeWatch,
    /// Leading the unit: the unpruned objects, for the followers.
    pub log: Option<Arc<UpstreamLog>>,
    /// Told of every stream's failures and successes.
    pub health: Arc<LinkHealth>,
    /// Whether `client` is the unit leader's wrapper (not the cloud).
    pub from_leader: bool,
    /// Vouched sharing: leading, the signer's ConfigMap goes to the log; following, every
    /// stream is checked against it.
    pub vouch: Option<Arc<Vouching>>,
}

impl Plan {
    /// Alone on `client`, as a wrapper outside any shared unit.
    pub fn alone(client: Client) -> Self {
        Self {
            client,
            local_node: LocalNodeWatch::ByName,
            log: None,
            health: Arc::default(),
            from_leader: false,
            vouch: None,
        }
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
    let local_node = async {
        match &plan.local_node {
            LocalNodeWatch::ByName => {
                let watch = Watch::new(Api::<Node>::all(client.clone()))
                    .retrying_with(&group)
                    .fields(&format!("metadata.name={local}"));
                watch
                    .named("local node")
                    .run(feed(Stream::LocalNode, UpstreamKind::UnitNodes).of(Object::LocalNode))
                    .await;
            }
            LocalNodeWatch::Unit { label_key, value } => {
                let watch = Watch::new(Api::<Node>::all(client.clone()))
                    .retrying_with(&group)
                    .labels(&format!("{label_key}={value}"));
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
            Watch::new(Api::<Service>::all(client.clone())).retrying_with(&group),
            feed(Stream::Services, UpstreamKind::Services).of(Object::Service),
            gate(vouch::SERVICES),
            object_element,
            health,
            Stream::Services,
        ),
        checked(
            Watch::new(Api::<EndpointSlice>::all(client.clone())).retrying_with(&group),
            feed(Stream::EndpointSlices, UpstreamKind::EndpointSlices).of(Object::Slice),
            gate(vouch::ENDPOINT_SLICES),
            object_element,
            health,
            Stream::EndpointSlices,
        ),
        checked(
            Watch::new(Api::<Endpoints>::all(client.clone())).retrying_with(&group),
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
            crate::vouched::run(watch, name, element, index, vouching, || health.since_reset(), report).await;
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
            Watch::new(configmaps)
                .retrying_with(group)
                .fields(&selector)
                .named("unit digests")
                .run(LogOnly { log, kind: UpstreamKind::Digests })
                .await;
        }
        (Some(log), None) => {
            for input in [UpstreamInput::Begin(UpstreamKind::Digests), UpstreamInput::Done(UpstreamKind::Digests)] {
                if let Err(error) = log.apply(input) {
                    tracing::warn!(%error, "the unit log refused its empty digests");
                }
            }
            std::future::pending().await
        }
        (None, Some(vouching)) if plan.from_leader => {
            let configmaps = Api::<ConfigMap>::namespaced(client.clone(), vouching.namespace());
            let feed = crate::vouched::DigestsFeed { vouching, metrics: wrapper.metrics() };
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

/// How the upstream link fares, for the unit supervisor: per stream, since when every
/// attempt failed and how (one stream delivering must not hide another that fails), and
/// whether the local node left the stream that names it (see [`Plan::local_node`]).
#[derive(Debug, Default)]
pub struct LinkHealth {
    failing: Mutex<BTreeMap<Stream, (Instant, LinkFailure)>>,
    /// Streams whose gate holds what the signer did not vouch for, since when: apart from
    /// `failing`, which an answer (a 410 relist) clears; only the gate clears these.
    unvouched: Mutex<BTreeMap<Stream, Instant>>,
    /// When the link was last [`reset`](Self::reset) to another leader.
    reset_at: Mutex<Option<Instant>>,
    /// Whether anything came through the link yet.
    worked: AtomicBool,
    /// The local node left a unit-scoped or leader-served stream: its unit changed.
    local_node_left: AtomicBool,
}

/// Why a stream failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkFailure {
    /// The upstream answered 503: a leader still syncing (or one that stepped down).
    NotReady,
    /// Nothing listens on its port (the connection was refused): a leader that may still
    /// be starting.
    NotListening,
    /// Anything else: reset, timed out, refused by TLS (a key that is not the member's, on
    /// either side), or an error answer.
    Unreachable,
    /// What the leader sends was not vouched for by the unit signer within the patience
    /// (see [`crate::vouched`]): a leader serving what the cloud does not hold, or
    /// withholding the signer's batches.
    Unvouched,
}

impl LinkHealth {
    /// The stream failing longest: since when, and its latest failure's kind; `None` while
    /// every stream works.
    pub fn failing(&self) -> Option<(Instant, LinkFailure)> {
        let failing = self.failing.lock().unwrap_or_else(PoisonError::into_inner);
        let unvouched = self.unvouched.lock().unwrap_or_else(PoisonError::into_inner);
        let unvouched = unvouched.values().map(|since| (*since, LinkFailure::Unvouched));
        failing.values().copied().chain(unvouched).min_by_key(|(since, _)| *since)
    }

    /// A gate holds what the signer did not vouch for; true when it was not so already.
    fn unvouched(&self, stream: Stream) -> bool {
        let mut unvouched = self.unvouched.lock().unwrap_or_else(PoisonError::into_inner);
        let new = !unvouched.contains_key(&stream);
        unvouched.entry(stream).or_insert_with(Instant::now);
        new
    }

    /// A gate passes what it gets again.
    fn vouched(&self, stream: Stream) {
        self.unvouched.lock().unwrap_or_else(PoisonError::into_inner).remove(&stream);
    }

    /// How long ago the link was reset to another leader (`None`: never).
    fn since_reset(&self) -> Option<std::time::Duration> {
        self.reset_at.lock().unwrap_or_else(PoisonError::into_inner).map(|at| at.elapsed())
    }

    fn failed(&self, stream: Stream, failure: LinkFailure) {
        let mut failing = self.failing.lock().unwrap_or_else(PoisonError::into_inner);
        let since = failing.get(&stream).map_or_else(Instant::now, |(since, _)| *since);
        failing.insert(stream, (since, failure));
    }

    /// Whether anything came through the link yet.
    pub fn worked(&self) -> bool {
        self.worked.load(Ordering::Relaxed)
    }

    fn working(&self, stream: Stream) {
        self.worked.store(true, Ordering::Relaxed);
        self.failing.lock().unwrap_or_else(PoisonError::into_inner).remove(&stream);
    }

    /// Forgets every failure and success (the link now goes to another leader).
    pub fn reset(&self) {
        self.failing.lock().unwrap_or_else(PoisonError::into_inner).clear();
        self.unvouched.lock().unwrap_or_else(PoisonError::into_inner).clear();
        *self.reset_at.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        self.worked.store(false, Ordering::Relaxed);
    }

    /// Whether the local node left the stream that names it since the plan started.
    pub fn local_node_left(&self) -> bool {
        self.local_node_left.load(Ordering::Relaxed)
    }
}

/// What a failed watch says of the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WatchErrorClass {
    /// The link failed.
    Failed(LinkFailure),
    /// The upstream answered what a healthy one says too (410: resume too old, relist;
    /// 504: a version from another upstream's clock, relist): the watch relists, and the
    /// link works.
    Answered,
    /// What a previous leader left in flight
    /// ([`LeaderChanged`](crate::unit_client::LeaderChanged)): nothing of the current one.
    LeftOver,
}

fn classify(error: &watcher::Error) -> WatchErrorClass {
    let response = match error {
        watcher::Error::InitialListFailed(kube::Error::Api(response))
        | watcher::Error::WatchStartFailed(kube::Error::Api(response))
        | watcher::Error::WatchFailed(kube::Error::Api(response)) => Some(response.code),
        watcher::Error::WatchError(response) => Some(response.code),
        _ => None,
    };
    let refused = |e: &(dyn std::error::Error + 'static)| {
        e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
    };
    let left_over = |e: &(dyn std::error::Error + 'static)| e.is::<crate::unit_client::LeaderChanged>();
    match response {
        Some(410 | 504) => WatchErrorClass::Answered,
        Some(503) => WatchErrorClass::Failed(LinkFailure::NotReady),
        Some(_) => WatchErrorClass::Failed(LinkFailure::Unreachable),
        None if caused_by(error, &left_over) => WatchErrorClass::LeftOver,
        None if caused_by(error, &refused) => WatchErrorClass::Failed(LinkFailure::NotListening),
        None => WatchErrorClass::Failed(LinkFailure::Unreachable),
    }
}

/// Whether `error`, or an error it was caused by, is one `what` recognises.
fn caused_by(
    error: &(dyn std::error::Error + 'static),
    what: &dyn Fn(&(dyn std::error::Error + 'static)) -> bool,
) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if what(error) {
            return true;
        }
        // an io::Error's `source()` skips the error it wraps
        if let Some(wrapped) = error.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref())
            && caused_by(wrapped, what)
        {
            return true;
        }
        next = error.source();
    }
    false
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
            self.health.local_node_left.store(true, Ordering::Relaxed);
            return;
        }
        self.input(Input::Delete(self.stream, id));
    }

    fn done(&mut self) {
        self.log(UpstreamInput::Done);
        // A list of a stream scoped by unit (leading) or served by a leader that lacks the
        // local node: it was relabelled (as for a delete, above). Completing the list would
        // make the cache delete the node it did not list.
        if self.stream == Stream::LocalNode && !self.local_deletes_are_real && !self.listed_local {
            self.health.local_node_left.store(true, Ordering::Relaxed);
            return;
        }
        self.input(Input::Done(self.stream));
    }

    fn failed(&mut self, error: &watcher::Error) {
        let label = StreamLabel { stream: self.stream.name() };
        let metrics = self.wrapper.metrics();
        metrics.upstream_errors.get_or_create(&label).inc();
        metrics.upstream_synced.get_or_create(&label).set(0);
        match classify(error) {
            WatchErrorClass::Failed(failure) => self.health.failed(self.stream, failure),
            WatchErrorClass::Answered => self.health.working(self.stream),
            WatchErrorClass::LeftOver => {}
        }
    }
}

fn remote_node(node: PartialObjectMeta<Node>) -> Object {
    Object::RemoteNode { name: node.name_any(), labels: node.labels().clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list from `address` through a follower's client of its leader, as the watches
    /// make it.
    async fn list_error(address: std::net::SocketAddr) -> watcher::Error {
        use crate::node_identity::{ExpectedServer, NodeIdentity, client_config};
        let key = |node: &str| {
            let document = ring::signature::Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new())
                .expect("generating a key");
            NodeIdentity::from_pkcs8(node, document.as_ref()).expect("a node identity")
        };
        let (follower, leader) = (key("follower"), key("leader"));
        let expected = ExpectedServer { node: "leader".into(), key: leader.public_key() };
        let tls = client_config(&follower, expected).expect("TLS settings");
        let url = format!("https://{address}").parse().expect("a URL");
        let timeout = std::time::Duration::from_secs(5);
        let client = crate::unit_client::leader_client(&url, tls, timeout, timeout).expect("a client");
        let error = Api::<Service>::all(client).list(&Default::default()).await.expect_err("no leader there");
        watcher::Error::InitialListFailed(error)
    }

    /// What a previous leader left in flight (ended by the follower's route) is not the
    /// current leader's failure, however it is wrapped.
    #[test]
    fn what_a_previous_leader_left_in_flight_is_no_failure() {
        use crate::unit_client::LeaderChanged;
        let direct = watcher::Error::InitialListFailed(kube::Error::Service(Box::new(LeaderChanged)));
        let in_io = watcher::Error::WatchFailed(kube::Error::Service(Box::new(std::io::Error::other(LeaderChanged))));
        assert_eq!((classify(&direct), classify(&in_io)), (WatchErrorClass::LeftOver, WatchErrorClass::LeftOver));
        let other = watcher::Error::WatchFailed(kube::Error::Service(Box::new(std::io::Error::other("reset"))));
        assert_eq!(classify(&other), WatchErrorClass::Failed(LinkFailure::Unreachable));
    }

    #[tokio::test]
    async fn a_refused_connection_is_told_from_a_link_that_fails_otherwise() {
        // a port nothing listens on: bound, then closed
        let closed = std::net::SocketAddr::from(([127, 0, 0, 1], edgegrid_testing::free_port()));
        assert_eq!(classify(&list_error(closed).await), WatchErrorClass::Failed(LinkFailure::NotListening));

        // a listener that takes connections and closes them unanswered (as a leader refusing
        // the follower's key does, after the handshake)
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let closer = tokio::spawn(async move {
            while let Ok((connection, _)) = listener.accept().await {
                drop(connection);
            }
        });
        assert_eq!(classify(&list_error(address).await), WatchErrorClass::Failed(LinkFailure::Unreachable));
        closer.abort();
    }
}
