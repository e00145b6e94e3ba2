//! Invariant 4's client: on each node, what kube-proxy does with its grid wrapper (list
//! the EndpointSlices, then apply every watch event, resuming from the last version and
//! listing again only when told the version is gone), holding what it was sent. What it
//! holds is compared with a fresh list; an event that contradicts what it holds (an
//! ADDED of an object it has, a MODIFIED or DELETED of one it lacks, a MODIFIED that
//! changes nothing) is a lost or duplicated event, noted at once.
//!
//! Its client has kube's retry layer off (as the components' watch clients do): with it, a
//! 503 the wrapper answers while it has not synced is retried inside the one request,
//! with a backoff growing past 10 s, and the client sat on what an earlier wrapper process
//! had sent long after the new one served (the soak's first 30-minute run reported that
//! as a broken invariant 4; `a_503_is_answered_at_once_not_retried_within_the_request`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::{Client, ResourceExt};
use tokio::sync::watch;

use super::invariants::Endpoints;
use crate::local_cluster::views::{KUBE_PROXY_SELECTOR, served_endpoints};

/// What the watching client holds.
#[derive(Debug, Default)]
pub struct Mirror {
    /// `namespace/name` -> the slice; `None` before the first list.
    items: Option<BTreeMap<String, EndpointSlice>>,
    version: String,
    anomalies: Vec<String>,
    /// The sabotage's lost event: the next ADDED is not applied.
    lose_next_added: bool,
}

/// What to do after an event.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    Watch,
    /// The version is gone (410): list again.
    List,
    /// The wrapper cannot resume from the version: list again after a pause.
    ListAfterPause,
}

fn key(slice: &EndpointSlice) -> String {
    format!("{}/{}", slice.namespace().unwrap_or_default(), slice.name_any())
}

impl Mirror {
    /// Sabotage (`--sabotage`): lose the next ADDED event, as a wrapper that drops one.
    pub fn lose_next_added(&mut self) {
        self.lose_next_added = true;
    }

    pub fn listed(&mut self, items: Vec<EndpointSlice>, version: String) {
        self.items = Some(items.into_iter().map(|s| (key(&s), s)).collect());
        self.version = version;
    }

    pub fn event(&mut self, event: WatchEvent<EndpointSlice>) -> Next {
        let Some(items) = self.items.as_mut() else { return Next::List };
        match event {
            WatchEvent::Added(slice) if self.lose_next_added => {
                self.lose_next_added = false;
                self.version = slice.resource_version().unwrap_or_default();
            }
            WatchEvent::Added(slice) => {
                let key = key(&slice);
                self.version = slice.resource_version().unwrap_or_default();
                if items.insert(key.clone(), slice).is_some() {
                    self.anomalies.push(format!("ADDED of {key}, which it held"));
                }
            }
            WatchEvent::Modified(slice) => {
                let key = key(&slice);
                let version = slice.resource_version();
                self.version = version.clone().unwrap_or_default();
                match items.insert(key.clone(), slice) {
                    None => self.anomalies.push(format!("MODIFIED of {key}, which it never had")),
                    Some(held) if held.resource_version() == version => {
                        self.anomalies.push(format!("MODIFIED of {key} at the version it held ({version:?})"))
                    }
                    Some(_) => {}
                }
            }
            WatchEvent::Deleted(slice) => {
                let key = key(&slice);
                self.version = slice.resource_version().unwrap_or_default();
                if items.remove(&key).is_none() {
                    self.anomalies.push(format!("DELETED of {key}, which it never had"));
                }
            }
            WatchEvent::Bookmark(bookmark) => self.version = bookmark.metadata.resource_version,
            WatchEvent::Error(status) if status.code == 410 => return Next::List,
            // any other error in the stream (a version from the future: 504) cannot be
            // resumed from either
            WatchEvent::Error(_) => return Next::ListAfterPause,
        }
        Next::Watch
    }

    /// What it holds, as kube-proxy routes it; `None` before its first list.
    pub fn served(&self) -> Option<Endpoints> {
        self.items.as_ref().map(|items| served_endpoints(&items.values().cloned().collect::<Vec<_>>()))
    }

    /// The anomalies since the last call.
    pub fn take_anomalies(&mut self) -> Vec<String> {
        std::mem::take(&mut self.anomalies)
    }
}

/// A client of the wrapper at `addr` whose every request is answered once: no retries.
pub fn wrapper_client(addr: SocketAddr) -> anyhow::Result<Client> {
    let mut config = kube::Config::new(format!("http://{addr}").parse()?);
    config.default_retry = false;
    Ok(Client::try_from(config)?)
}

/// Applies `event` to `mirror` (the lock is not held past this call).
fn apply(mirror: &Mutex<Mirror>, event: WatchEvent<EndpointSlice>) -> Next {
    mirror.lock().unwrap_or_else(|e| e.into_inner()).event(event)
}

/// Follows the wrapper at `addr` into `mirror` until `stop`.
pub async fn follow(addr: SocketAddr, mirror: Arc<Mutex<Mirror>>, mut stop: watch::Receiver<bool>) {
    let lock = |m: &Arc<Mutex<Mirror>>| m.lock().unwrap_or_else(|e| e.into_inner()).version.clone();
    let Ok(client) = wrapper_client(addr) else { return };
    let api: Api<EndpointSlice> = Api::all(client);
    let mut list = true;
    while !*stop.borrow() {
        let pause = async {
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        if list {
            match api.list(&ListParams::default().labels(KUBE_PROXY_SELECTOR)).await {
                Ok(listed) => {
                    let version = listed.metadata.resource_version.clone().unwrap_or_default();
                    mirror.lock().unwrap_or_else(|e| e.into_inner()).listed(listed.items, version);
                    list = false;
                }
                Err(_) => {
                    tokio::select! { () = pause => {}, _ = stop.changed() => {} }
                    continue;
                }
            }
        }
        let version = lock(&mirror);
        let params = WatchParams::default().labels(KUBE_PROXY_SELECTOR).timeout(60);
        match api.watch(&params, &version).await {
            Ok(events) => {
                let mut events = events.boxed();
                loop {
                    let event = tokio::select! {
                        event = events.next() => event,
                        _ = stop.changed() => return,
                    };
                    match event {
                        Some(Ok(event)) => match apply(&mirror, event) {
                            Next::Watch => {}
                            Next::List => {
                                list = true;
                                break;
                            }
                            Next::ListAfterPause => {
                                list = true;
                                tokio::time::sleep(Duration::from_millis(500)).await;
                                break;
                            }
                        },
                        // the stream ended: resume from the last version
                        None => break,
                        // it broke: resume from the last version after a pause
                        Some(Err(_)) => {
                            tokio::time::sleep(Duration::from_millis(500)).await;
                            break;
                        }
                    }
                }
            }
            Err(kube::Error::Api(status)) if status.code == 410 => list = true,
            Err(_) => tokio::select! { () = pause => {}, _ = stop.changed() => {} },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(name: &str, version: &str, pod: &str) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "resourceVersion": version,
                "labels": {"kubernetes.io/service-name": "echo-svc"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"], "nodeName": "n1", "targetRef": {"kind": "Pod", "name": pod},
                "conditions": {"ready": true}}],
        }))
        .expect("slice")
    }

    #[test]
    fn every_event_applied_once_holds_the_list_and_a_contradiction_is_noted() {
        let mut mirror = Mirror::default();
        assert_eq!(mirror.served(), None);
        assert_eq!(mirror.event(WatchEvent::Added(slice("a", "1", "p1"))), Next::List, "no event before a list");
        mirror.listed(vec![slice("a", "1", "p1")], "1".into());
        assert_eq!(mirror.event(WatchEvent::Added(slice("b", "2", "p2"))), Next::Watch);
        assert_eq!(mirror.event(WatchEvent::Modified(slice("a", "3", "p3"))), Next::Watch);
        assert_eq!(mirror.event(WatchEvent::Deleted(slice("b", "4", "p2"))), Next::Watch);
        assert_eq!(
            mirror.served(),
            Some(BTreeMap::from([("default/echo-svc".to_string(), vec!["p3@n1".to_string()])]))
        );
        assert_eq!(mirror.version, "4");
        assert_eq!(mirror.take_anomalies(), Vec::<String>::new());
        // a duplicated ADDED, a MODIFIED repeating the held version, a DELETED of nothing
        mirror.event(WatchEvent::Added(slice("a", "5", "p3")));
        mirror.event(WatchEvent::Modified(slice("a", "5", "p3")));
        mirror.event(WatchEvent::Deleted(slice("c", "6", "p9")));
        mirror.event(WatchEvent::Modified(slice("d", "7", "p9")));
        assert_eq!(
            mirror.take_anomalies(),
            [
                "ADDED of default/a, which it held",
                "MODIFIED of default/a at the version it held (Some(\"5\"))",
                "DELETED of default/c, which it never had",
                "MODIFIED of default/d, which it never had",
            ]
        );
        let gone = kube::core::Status::failure("too old", "Expired").with_code(410);
        assert_eq!(mirror.event(WatchEvent::Error(Box::new(gone))), Next::List);
        let future = kube::core::Status::failure("Too large resource version", "Timeout").with_code(504);
        assert_eq!(mirror.event(WatchEvent::Error(Box::new(future))), Next::ListAfterPause);
    }

    /// A wrapper that has not synced answers 503 with `Retry-After: 1`: the watching
    /// client must hear it at once (and try again on its own terms), not have kube's retry
    /// layer repeat the request with a backoff that outlasts the wrapper's sync.
    #[tokio::test]
    async fn a_503_is_answered_at_once_not_retried_within_the_request() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let requests = Arc::new(AtomicUsize::new(0));
        let counted = requests.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let counted = counted.clone();
                tokio::spawn(async move {
                    let mut buffer = [0u8; 4096];
                    let mut request = Vec::new();
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buffer[..n]),
                        }
                    }
                    counted.fetch_add(1, Ordering::SeqCst);
                    let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"not synced","reason":"ServiceUnavailable","code":503}"#;
                    let response = format!(
                        "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(response.as_bytes()).await;
                });
            }
        });
        let api: Api<EndpointSlice> = Api::all(wrapper_client(addr).expect("client"));
        let answer = tokio::time::timeout(Duration::from_secs(3), api.watch(&WatchParams::default(), "5")).await;
        match answer {
            Ok(Err(kube::Error::Api(status))) => assert_eq!(status.code, 503),
            Ok(other) => panic!("expected the 503, got {:?}", other.map(|_| "a stream")),
            Err(_) => panic!("the watch request was still being retried after 3 s"),
        }
        assert_eq!(requests.load(Ordering::SeqCst), 1, "one request, answered once");
    }
}
