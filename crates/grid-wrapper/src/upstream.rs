//! The upstream side: one watch per stream (controller-support's [`Watch`]), through the
//! wrapper's own credentials, translated into cache [`Input`]s.
//!
//! Other nodes are watched metadata-only (their labels are all topology needs), so a large
//! cluster's node status churn costs each edge node a metadata object per update, not a
//! whole Node; the local node is watched whole, filtered by name, because kube-proxy reads
//! it. A failing watch keeps the last view served and retries with backoff; a relist
//! (after a 410, or after an upstream whose versions went back) reaches the cache as its
//! differences.

use std::future::Future;
use std::sync::Arc;

use controller_support::watch::{Index, Key, Watch};
use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};

use crate::Wrapper;
use crate::cache::{Input, Object, Stream};
use crate::metrics::StreamLabel;

/// Runs every upstream watch until `stop` resolves.
pub async fn run(wrapper: Arc<Wrapper>, client: Client, stop: impl Future<Output = ()>) {
    let local = wrapper.local_node().to_string();
    let feed = |stream| Feeds { wrapper: &wrapper, stream };
    // `Api<PartialObjectMeta<_>>` makes kube-rs ask for metadata only
    let remote_nodes = Watch::new(Api::<PartialObjectMeta<Node>>::all(client.clone()));
    let local_node = Watch::new(Api::<Node>::all(client.clone())).fields(&format!("metadata.name={local}"));
    let streams = futures::future::join5(
        Watch::new(Api::<Service>::all(client.clone())).run(feed(Stream::Services).of(Object::Service)),
        Watch::new(Api::<EndpointSlice>::all(client.clone())).run(feed(Stream::EndpointSlices).of(Object::Slice)),
        Watch::new(Api::<Endpoints>::all(client)).run(feed(Stream::Endpoints).of(Object::Endpoints)),
        remote_nodes.named("nodes (metadata)").run(feed(Stream::RemoteNodes).of(remote_node)),
        local_node.named("local node").run(feed(Stream::LocalNode).of(Object::LocalNode)),
    );
    tokio::select! {
        _ = streams => tracing::error!("upstream watches ended"),
        () = stop => {}
    }
}

/// One stream's watch into the cache, counted.
struct Feed<'a, K> {
    wrapper: &'a Wrapper,
    stream: Stream,
    object: fn(K) -> Object,
}

/// A stream's feed, before the object type is known.
struct Feeds<'a> {
    wrapper: &'a Wrapper,
    stream: Stream,
}

impl<'a> Feeds<'a> {
    fn of<K>(self, object: fn(K) -> Object) -> Feed<'a, K> {
        Feed { wrapper: self.wrapper, stream: self.stream, object }
    }
}

impl<K> Feed<'_, K> {
    fn input(&self, input: Input) {
        let label = StreamLabel { stream: self.stream.name() };
        let metrics = self.wrapper.metrics();
        metrics.upstream_synced.get_or_create(&label).set(1);
        metrics.upstream_events.get_or_create(&label).inc();
        self.wrapper.apply(input);
    }
}

impl<K: Resource> Index<K> for Feed<'_, K> {
    fn begin(&mut self) {
        self.input(Input::Begin(self.stream));
    }

    fn apply(&mut self, object: K) {
        self.input(Input::Upsert((self.object)(object)));
    }

    fn delete(&mut self, key: Key) {
        self.input(Input::Delete(self.stream, (key.namespace.unwrap_or_default(), key.name)));
    }

    fn done(&mut self) {
        self.input(Input::Done(self.stream));
    }

    fn failed(&mut self, _error: &watcher::Error) {
        let label = StreamLabel { stream: self.stream.name() };
        let metrics = self.wrapper.metrics();
        metrics.upstream_errors.get_or_create(&label).inc();
        metrics.upstream_synced.get_or_create(&label).set(0);
    }
}

fn remote_node(node: PartialObjectMeta<Node>) -> Object {
    Object::RemoteNode { name: node.name_any(), labels: node.labels().clone() }
}
