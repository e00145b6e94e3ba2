//! The upstream side: one kube-rs watcher per stream, through the wrapper's own
//! credentials, translated into cache [`Input`]s.
//!
//! Other nodes are watched metadata-only (their labels are all topology needs), so a large
//! cluster's node status churn costs each edge node a metadata object per update, not a
//! whole Node; the local node is watched whole, filtered by name, because kube-proxy reads
//! it. A failing watch keeps the last view served and retries with backoff; kube-rs relists
//! after a 410, and the cache turns that relist into exactly the differences.

use std::future::Future;
use std::sync::Arc;

use futures::{Stream as FuturesStream, StreamExt};
use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Client, ResourceExt};

use crate::Wrapper;
use crate::cache::{Input, Object, Stream};
use crate::metrics::StreamLabel;

/// Runs every upstream watch until `stop` resolves.
pub async fn run(wrapper: Arc<Wrapper>, client: Client, stop: impl Future<Output = ()>) {
    let local = wrapper.local_node().to_string();
    let by_name = watcher::Config::default().fields(&format!("metadata.name={local}"));
    let all = watcher::Config::default;
    let streams = futures::future::join5(
        follow(&wrapper, Stream::Services, watcher(Api::<Service>::all(client.clone()), all()), Object::Service),
        follow(
            &wrapper,
            Stream::EndpointSlices,
            watcher(Api::<EndpointSlice>::all(client.clone()), all()),
            Object::Slice,
        ),
        follow(&wrapper, Stream::Endpoints, watcher(Api::<Endpoints>::all(client.clone()), all()), Object::Endpoints),
        follow(
            &wrapper,
            Stream::RemoteNodes,
            // `Api<PartialObjectMeta<_>>` makes kube-rs ask for metadata only
            watcher(Api::<PartialObjectMeta<Node>>::all(client.clone()), all()),
            remote_node,
        ),
        follow(&wrapper, Stream::LocalNode, watcher(Api::<Node>::all(client), by_name), Object::LocalNode),
    );
    tokio::select! {
        _ = streams => tracing::error!("upstream watches ended"),
        () = stop => {}
    }
}

fn remote_node(node: PartialObjectMeta<Node>) -> Object {
    Object::RemoteNode { name: node.name_any(), labels: node.labels().clone() }
}

async fn follow<K, S>(wrapper: &Wrapper, stream: Stream, events: S, object: fn(K) -> Object)
where
    S: FuturesStream<Item = Result<Event<K>, watcher::Error>> + Send,
{
    let label = StreamLabel { stream: stream.name() };
    let metrics = wrapper.metrics();
    let mut events = std::pin::pin!(events.default_backoff());
    while let Some(event) = events.next().await {
        let input = match event {
            Ok(Event::Init) => Input::Begin(stream),
            Ok(Event::InitApply(o) | Event::Apply(o)) => Input::Upsert(object(o)),
            Ok(Event::Delete(o)) => Input::Delete(object(o)),
            Ok(Event::InitDone) => Input::Done(stream),
            Err(error) => {
                metrics.upstream_errors.get_or_create(&label).inc();
                metrics.upstream_synced.get_or_create(&label).set(0);
                tracing::warn!(stream = stream.name(), %error, "upstream watch failed; serving the last view, retrying");
                continue;
            }
        };
        metrics.upstream_synced.get_or_create(&label).set(1);
        metrics.upstream_events.get_or_create(&label).inc();
        wrapper.apply(input);
    }
}
