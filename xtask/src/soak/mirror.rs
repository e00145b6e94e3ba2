//! Invariant 4's client: on each node, what kube-proxy does with its grid wrapper (list
//! the EndpointSlices, then apply every watch event, resuming from the last version and
//! listing again only when told the version is gone), holding what it was sent. What it
//! holds is compared with a fresh list; an event that contradicts what it holds (an
//! ADDED of an object it has, a MODIFIED or DELETED of one it lacks, a MODIFIED that
//! changes nothing) is a lost or duplicated event, noted at once.

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
            WatchEvent::Error(_) => {}
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

/// Follows the wrapper at `addr` into `mirror` until `stop`.
pub async fn follow(addr: SocketAddr, mirror: Arc<Mutex<Mirror>>, mut stop: watch::Receiver<bool>) {
    let lock = |m: &Arc<Mutex<Mirror>>| m.lock().unwrap_or_else(|e| e.into_inner()).version.clone();
    let Ok(url) = format!("http://{addr}").parse() else { return };
    let Ok(client) = Client::try_from(kube::Config::new(url)) else { return };
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
                        Some(Ok(event)) => {
                            if mirror.lock().unwrap_or_else(|e| e.into_inner()).event(event) == Next::List {
                                list = true;
                                break;
                            }
                        }
                        // the stream ended or broke: resume from the last version
                        _ => break,
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
    }
}
