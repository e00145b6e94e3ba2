//! The wire side of list and watch: list bodies concatenated from stored bytes, and
//! watch streams of newline-delimited events (ADDED/MODIFIED/DELETED, BOOKMARK, ERROR).
//!
//! No HTTP framework here: callers put the bytes into their own responses. A watch
//! stream never drops an event silently: a watcher that falls behind the live feed gets
//! a 410 ERROR event and is closed, so its client relists.

use std::future::Future;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::Stream;
use serde_json::json;
use tokio::sync::{broadcast, mpsc};

use crate::error::Error;
use crate::log::{Change, ChangeKind, ListPage, ResourceKey, WatchStart};
use crate::object::{StoredObject, encode};
use crate::options::WatchOptions;
use crate::protobuf::{self, envelope, envelope::watch_frame};
use crate::representation::{Encoding, Representation};
use crate::selectors::{FieldSelector, LabelSelector};

/// The annotation on the bookmark that ends a streaming list's initial events (the
/// protocol's own key: the one definition, core holds only edgegrid's and Kubernetes' object keys).
pub const INITIAL_EVENTS_END_ANNOTATION: &str = "k8s.io/initial-events-end";

/// Timing of watch streams.
#[derive(Clone, Copy, Debug)]
pub struct WatchConfig {
    /// How often watchers that allow bookmarks get one.
    pub bookmark_interval: Duration,
    /// `timeoutSeconds` used when a watch gives none.
    pub default_timeout: Duration,
}

/// How much of a list body is copied together before it is handed to the connection:
/// large enough that a chunk is one write, small enough to stay in cache and to let the
/// first bytes leave before the last item is copied (a 10k-slice list is ~20 MiB).
const LIST_CHUNK: usize = 256 * 1024;

/// The body of a list response, contiguous: the envelope around the page's stored bytes.
pub fn list_body(page: &ListPage, representation: &Representation) -> Bytes {
    let mut body = BytesMut::new();
    for chunk in ListBody::new(page.clone(), representation.clone()) {
        body.put_slice(&chunk);
    }
    body.freeze()
}

/// The body of a list response as chunks of about [`LIST_CHUNK`] bytes, for servers to
/// stream: the page holds its items (no lock is needed while it is sent) and no
/// contiguous copy of a whole large list is ever made.
pub struct ListBody {
    items: Items,
    /// The envelope's head, until it is sent.
    head: Option<Bytes>,
    first: bool,
    done: bool,
}

/// What a list's items are written from.
enum Items {
    /// Stored objects, encoded (usually: their stored bytes taken) as each chunk fills.
    Json(std::vec::IntoIter<std::sync::Arc<StoredObject>>, Representation),
    /// Protobuf messages, all encoded before the head, which carries their total length.
    Protobuf(std::vec::IntoIter<Bytes>),
}

impl ListBody {
    pub fn new(page: ListPage, representation: Representation) -> Self {
        let mut metadata = json!({"resourceVersion": page.rv.to_string()});
        if let Some(token) = &page.continue_token {
            metadata["continue"] = json!(token);
            metadata["remainingItemCount"] = json!(page.remaining);
        }
        let (kind, api_version) = representation.shape.list_type(&representation.served);
        match representation.encoding {
            Encoding::Json => {
                let head = json!({"kind": kind, "apiVersion": api_version, "metadata": metadata}).to_string();
                // `{"kind":...,"metadata":{...}` + `,"items":[` ... `]}`
                let mut opening = BytesMut::with_capacity(head.len() + 10);
                opening.put_slice(&head.as_bytes()[..head.len() - 1]);
                opening.put_slice(b",\"items\":[");
                let items = Items::Json(page.items.into_iter(), representation);
                Self { items, head: Some(opening.freeze()), first: true, done: false }
            }
            Encoding::Protobuf => {
                let items: Vec<Bytes> = page.items.iter().map(|item| item.encoded_as(&representation)).collect();
                let list_meta = protobuf::encode::list_meta(&metadata);
                let raw_len = envelope::list_raw_len(list_meta.len(), items.iter().map(Bytes::len));
                let mut head = envelope::head(&api_version, &kind, raw_len);
                envelope::put_list_meta(&mut head, &list_meta);
                Self { items: Items::Protobuf(items.into_iter()), head: Some(head.freeze()), first: true, done: false }
            }
        }
    }
}

impl Iterator for ListBody {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        let mut chunk = BytesMut::with_capacity(LIST_CHUNK);
        if let Some(head) = self.head.take() {
            chunk.put_slice(&head);
        }
        while chunk.len() < LIST_CHUNK {
            match &mut self.items {
                Items::Json(items, representation) => {
                    let Some(item) = items.next() else {
                        chunk.put_slice(b"]}");
                        self.done = true;
                        break;
                    };
                    if !std::mem::take(&mut self.first) {
                        chunk.put_u8(b',');
                    }
                    chunk.put_slice(&item.encoded_as(representation));
                }
                Items::Protobuf(items) => {
                    let Some(item) = items.next() else {
                        chunk.put_slice(envelope::tail());
                        self.done = true;
                        break;
                    };
                    envelope::put_list_item(&mut chunk, &item);
                }
            }
        }
        Some(chunk.freeze())
    }
}

/// The body of a single object's GET.
pub fn object_body(object: &StoredObject, representation: &Representation) -> Bytes {
    object.enveloped_as(representation)
}

/// One watch event line around an already encoded object.
pub fn event_line(kind: &str, object: &[u8]) -> Bytes {
    let mut line = BytesMut::with_capacity(object.len() + kind.len() + 24);
    line.put_slice(b"{\"type\":\"");
    line.put_slice(kind.as_bytes());
    line.put_slice(b"\",\"object\":");
    line.put_slice(object);
    line.put_slice(b"}\n");
    line.freeze()
}

/// The ERROR event carrying `error`'s Status.
pub fn error_event(error: &Error, encoding: Encoding) -> Bytes {
    match encoding {
        Encoding::Json => event_line("ERROR", &encode(&error.status())),
        Encoding::Protobuf => envelope::watch_frame("ERROR", &protobuf::status(&error.status())),
    }
}

/// One watch event of `object` (as a GET carries it: in protobuf, its envelope) in the
/// representation's encoding.
fn event(kind: &str, object: &Bytes, encoding: Encoding) -> Bytes {
    match encoding {
        Encoding::Json => event_line(kind, object),
        Encoding::Protobuf => watch_frame(kind, object),
    }
}

/// How one watcher sees the stream.
struct WatchFilter {
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    representation: Representation,
}

impl WatchFilter {
    fn matches(&self, object: &StoredObject) -> bool {
        let in_namespace = self.namespace.as_ref().is_none_or(|ns| object.namespace() == ns);
        in_namespace && self.labels.matches(object) && self.fields.matches(object)
    }

    fn line(&self, kind: &str, object: &StoredObject) -> Bytes {
        event(kind, &object.enveloped_as(&self.representation), self.representation.encoding)
    }

    /// The event this watcher gets for a change: objects entering the selector are
    /// ADDED, leaving it DELETED (previous content, the change's version), as the real
    /// watch cache does.
    fn event_for<K>(&self, change: &Change<K>) -> Option<Bytes> {
        let now = self.matches(&change.object);
        let before = change.old.as_ref().is_some_and(|o| self.matches(o));
        match (change.kind, before, now) {
            (ChangeKind::Added, _, true) => Some(self.line("ADDED", &change.object)),
            (ChangeKind::Deleted, true, _) => Some(self.line("DELETED", &change.object)),
            (ChangeKind::Modified, true, true) => Some(self.line("MODIFIED", &change.object)),
            (ChangeKind::Modified, false, true) => Some(self.line("ADDED", &change.object)),
            (ChangeKind::Modified, true, false) => change.departed().map(|last| self.line("DELETED", last)),
            _ => None,
        }
    }

    fn bookmark(&self, rv: u64, initial_events_end: bool) -> Bytes {
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({INITIAL_EVENTS_END_ANNOTATION: "true"});
        }
        let object = self.representation.shape.present(self.representation.served.stamp(json!({"metadata": metadata})));
        let served = &self.representation.served;
        let encoded = match self.representation.encoding {
            Encoding::Json => encode(&object),
            Encoding::Protobuf => {
                envelope::object(&served.api_version, &served.kind, &protobuf::message(served, &object))
            }
        };
        event("BOOKMARK", &encoded, self.representation.encoding)
    }
}

/// The events of one watch, from its start (or the error that prevented it, sent as an
/// ERROR event) until `timeoutSeconds`, `stop`, a lagging feed, or the client going away.
/// Runs on its own task, so the stream can be handed to any HTTP body.
pub fn watch_stream<K: ResourceKey>(
    start: Result<WatchStart<K>, Error>,
    opts: WatchOptions,
    representation: Representation,
    config: WatchConfig,
    stop: impl Future<Output = ()> + Send + 'static,
) -> impl Stream<Item = Bytes> + Send + 'static {
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let timeout = opts.timeout.unwrap_or(config.default_timeout);
    let encoding = representation.encoding;
    let filter = WatchFilter { namespace: opts.namespace, labels: opts.labels, fields: opts.fields, representation };
    let flags = (opts.send_initial_events, opts.allow_bookmarks);
    tokio::spawn(async move {
        let start = match start {
            Ok(start) => start,
            Err(e) => {
                let _ = tx.send(error_event(&e, encoding)).await;
                return;
            }
        };
        tokio::select! {
            () = run(start, filter, flags, config.bookmark_interval, timeout, &tx) => {}
            () = stop => {}
        }
    });
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) })
}

/// Why a watch ended early: the client is gone.
struct Gone;

async fn send(tx: &mpsc::Sender<Bytes>, line: Bytes) -> Result<(), Gone> {
    tx.send(line).await.map_err(|_| Gone)
}

async fn run<K: ResourceKey>(
    start: WatchStart<K>,
    filter: WatchFilter,
    (send_initial, bookmarks): (bool, bool),
    bookmark_interval: Duration,
    timeout: Duration,
    tx: &mpsc::Sender<Bytes>,
) {
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    tokio::select! {
        _ = stream_events(start, &filter, send_initial, bookmarks, bookmark_interval, tx) => {}
        () = &mut deadline => {}
        () = tx.closed() => {}
    }
}

async fn stream_events<K: ResourceKey>(
    start: WatchStart<K>,
    filter: &WatchFilter,
    send_initial: bool,
    bookmarks: bool,
    bookmark_interval: Duration,
    tx: &mpsc::Sender<Bytes>,
) -> Result<(), Gone> {
    let mut last = start.start_rv;
    for object in start.initial.iter().filter(|o| filter.matches(o)) {
        send(tx, filter.line("ADDED", object)).await?;
    }
    if send_initial {
        send(tx, filter.bookmark(last, true)).await?;
    }
    for change in &start.backlog {
        last = change.rv;
        if let Some(line) = filter.event_for(change) {
            send(tx, line).await?;
        }
    }
    let mut live = start.live;
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + bookmark_interval, bookmark_interval);
    loop {
        tokio::select! {
            received = live.recv() => match received {
                Ok(change) if change.rv <= last => {}
                Ok(change) => {
                    last = change.rv;
                    if change.key != start.key {
                        continue;
                    }
                    if let Some(line) = filter.event_for(&change) {
                        send(tx, line).await?;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    // Never drop events silently: cut the watcher off so it relists.
                    let expired = Error::Expired { requested: last, oldest: last + missed };
                    return send(tx, error_event(&expired, filter.representation.encoding)).await;
                }
                Err(broadcast::error::RecvError::Closed) => return Ok(()),
            },
            _ = ticker.tick(), if bookmarks => send(tx, filter.bookmark(last, false)).await?,
        }
    }
}

/// Shared by tests: the objects a watch stream's lines carry, by event type.
#[cfg(test)]
pub(crate) fn parse_lines(lines: &[Bytes]) -> Vec<(String, serde_json::Value)> {
    lines
        .iter()
        .filter_map(|l| serde_json::from_slice::<serde_json::Value>(l).ok())
        .map(|v| (v["type"].as_str().unwrap_or_default().to_string(), v["object"].clone()))
        .collect()
}
