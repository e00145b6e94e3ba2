//! The upstream side: one kube-rs watcher per stream, through the wrapper's own
//! credentials, translated into cache [`Input`]s.
//!
//! Other nodes are watched metadata-only (their labels are all topology needs), so a large
//! cluster's node status churn costs each edge node a metadata object per update, not a
//! whole Node; the local node is watched whole, filtered by name, because kube-proxy reads
//! it. A failing watch keeps the last view served and retries with backoff; kube-rs relists
//! after a 410, this module after a "too large resource version" (an upstream whose
//! versions went back), and the cache turns a relist into exactly the differences.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

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
    let (services, slices, endpoints) = (
        Api::<Service>::all(client.clone()),
        Api::<EndpointSlice>::all(client.clone()),
        Api::<Endpoints>::all(client.clone()),
    );
    // `Api<PartialObjectMeta<_>>` makes kube-rs ask for metadata only
    let (remote_nodes, local_node) = (Api::<PartialObjectMeta<Node>>::all(client.clone()), Api::<Node>::all(client));
    let streams = futures::future::join5(
        follow(&wrapper, Stream::Services, || watcher(services.clone(), all()), Object::Service),
        follow(&wrapper, Stream::EndpointSlices, || watcher(slices.clone(), all()), Object::Slice),
        follow(&wrapper, Stream::Endpoints, || watcher(endpoints.clone(), all()), Object::Endpoints),
        follow(&wrapper, Stream::RemoteNodes, || watcher(remote_nodes.clone(), all()), remote_node),
        follow(&wrapper, Stream::LocalNode, || watcher(local_node.clone(), by_name.clone()), Object::LocalNode),
    );
    tokio::select! {
        _ = streams => tracing::error!("upstream watches ended"),
        () = stop => {}
    }
}

fn remote_node(node: PartialObjectMeta<Node>) -> Object {
    Object::RemoteNode { name: node.name_any(), labels: node.labels().clone() }
}

/// How long to wait before relisting a stream whose upstream no longer knows its version
/// (the apiserver's own `retryAfterSeconds` for that error).
const RELIST_DELAY: Duration = Duration::from_secs(1);

async fn follow<K, S>(wrapper: &Wrapper, stream: Stream, watch: impl Fn() -> S, object: fn(K) -> Object)
where
    S: FuturesStream<Item = Result<Event<K>, watcher::Error>> + Send,
{
    let label = StreamLabel { stream: stream.name() };
    let metrics = wrapper.metrics();
    loop {
        let mut events = std::pin::pin!(watch().default_backoff());
        let relist = loop {
            let Some(event) = events.next().await else { break false };
            let input = match event {
                Ok(Event::Init) => Input::Begin(stream),
                Ok(Event::InitApply(o) | Event::Apply(o)) => Input::Upsert(object(o)),
                Ok(Event::Delete(o)) => Input::Delete(object(o)),
                Ok(Event::InitDone) => Input::Done(stream),
                Err(error) => {
                    metrics.upstream_errors.get_or_create(&label).inc();
                    metrics.upstream_synced.get_or_create(&label).set(0);
                    tracing::warn!(stream = stream.name(), %error, "upstream watch failed; serving the last view, retrying");
                    if version_unknown_upstream(&error) {
                        break true;
                    }
                    continue;
                }
            };
            metrics.upstream_synced.get_or_create(&label).set(1);
            metrics.upstream_events.get_or_create(&label).inc();
            wrapper.apply(input);
        };
        if !relist {
            return;
        }
        // kube-rs relists only after a 410 and otherwise retries the same version forever:
        // an upstream rebuilt or restored with older versions (a fresh store, an etcd
        // backup) would leave the view frozen at the old cluster. Start the stream over
        // with a list, as client-go does; the cache serves the relist as the differences.
        tokio::time::sleep(RELIST_DELAY).await;
    }
}

/// Whether the upstream says the version a watch resumes from is newer than anything it
/// has: `504 Timeout`, "Too large resource version" (cause `ResourceVersionTooLarge`), as
/// an ERROR event or as the response to the watch request.
fn version_unknown_upstream(error: &watcher::Error) -> bool {
    let status = match error {
        watcher::Error::WatchError(status) => status.as_ref(),
        watcher::Error::WatchStartFailed(kube::Error::Api(status)) => status.as_ref(),
        _ => return false,
    };
    let too_large_cause =
        status.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.reason == "ResourceVersionTooLarge"));
    status.code == 504 && (too_large_cause || status.message.contains("Too large resource version"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;
    use kube::core::response::{StatusCause, StatusDetails};

    fn status(code: u16, reason: &str, message: &str, cause: Option<&str>) -> Box<Status> {
        let mut status = Status::failure(message, reason).with_code(code);
        if let Some(cause) = cause {
            let cause = StatusCause { reason: cause.into(), message: String::new(), field: String::new() };
            let details = StatusDetails {
                name: String::new(),
                group: String::new(),
                kind: String::new(),
                uid: String::new(),
                causes: vec![cause],
                retry_after_seconds: 1,
            };
            status = status.with_details(details);
        }
        status.boxed()
    }

    #[test]
    fn only_a_too_large_resource_version_makes_a_stream_relist() {
        // as listwatch (and so the fake apiserver) words it, and as kube-apiserver does
        let listwatch = status(504, "Timeout", "Timeout: Too large resource version: 35, current: 13", None);
        let apiserver = status(504, "Timeout", "Too large resource version", Some("ResourceVersionTooLarge"));
        assert!(version_unknown_upstream(&watcher::Error::WatchError(listwatch.clone())));
        assert!(version_unknown_upstream(&watcher::Error::WatchError(apiserver)));
        assert!(version_unknown_upstream(&watcher::Error::WatchStartFailed(kube::Error::Api(listwatch))));
        for other in [
            status(504, "Timeout", "request timed out", None),
            status(410, "Expired", "too old resource version: 1 (5)", None),
            status(500, "InternalError", "Too large resource version", None),
        ] {
            assert!(!version_unknown_upstream(&watcher::Error::WatchError(other.clone())), "{other:?}");
        }
        assert!(!version_unknown_upstream(&watcher::Error::NoResourceVersion));
    }
}
