//! A hot standby for the unit's leader: the member next in line keeps a replica of the
//! leader's [`UpstreamLog`] (same objects, same resourceVersions, same term), so that
//! when the leader dies it leads at once from that replica, and its followers' watches
//! resume where they were instead of relisting the whole cluster from it.
//!
//! The leader streams its log on `GET /unit/v1/log` (members only: the unit listener's
//! TLS admits nothing else) as JSON lines, in the log's own order, which is the one order
//! every follower saw the changes in:
//!
//! ```text
//! {"type":"SNAPSHOT","term":"<term>","resourceVersion":"<rv>"}    the log's state at rv:
//! {"type":"OBJECT","kind":"endpointslices","object":{...}}        each object, as stored
//! {"type":"SYNCED"}                                               end of the snapshot
//! {"type":"CHANGE","kind":"services","change":"MODIFIED","resourceVersion":"<rv>","object":{...}}
//! {"type":"TICK"}                                                 every second, when idle
//! ```
//!
//! A standby that falls behind (the leader's watch buffer overflows) is cut off and takes
//! a new snapshot. The replica is always a prefix of its leader's log; once promoted it
//! takes the leader's versions only up to its last one (`UpstreamLog::promote`): a
//! follower that saw more of the old leader gets 410 and relists, one behind resumes.
//! Objects are sent as the leader stored them (its JSON bytes, never re-encoded).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use listwatch::{ChangeKind, LogConfig, StoredObject};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;

use crate::upstream_log::{UpstreamKind, UpstreamLog, UpstreamLogError};

/// The path the leader serves its log on.
pub const PATH: &str = "/unit/v1/log";

/// How often an idle stream says it is alive (the standby's read timeout is longer).
pub const TICK: Duration = Duration::from_secs(1);

/// One line of the stream.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Record {
    Snapshot {
        term: String,
        #[serde(rename = "resourceVersion")]
        resource_version: String,
    },
    Object {
        kind: String,
        object: Value,
    },
    Synced,
    Change {
        kind: String,
        change: String,
        #[serde(rename = "resourceVersion")]
        resource_version: String,
        object: Value,
    },
    Tick,
}

fn object_line(kind: UpstreamKind, object: &StoredObject) -> Bytes {
    let mut line = BytesMut::with_capacity(object.json().len() + 48);
    line.extend_from_slice(format!(r#"{{"type":"OBJECT","kind":"{}","object":"#, kind.name()).as_bytes());
    line.extend_from_slice(object.json());
    line.extend_from_slice(b"}\n");
    line.freeze()
}

fn change_line(change: &listwatch::Change<UpstreamKind>) -> Bytes {
    let mut line = BytesMut::with_capacity(change.object.json().len() + 96);
    let head = format!(
        r#"{{"type":"CHANGE","kind":"{}","change":"{}","resourceVersion":"{}","object":"#,
        change.key.name(),
        change.kind.name(),
        change.rv
    );
    line.extend_from_slice(head.as_bytes());
    line.extend_from_slice(change.object.json());
    line.extend_from_slice(b"}\n");
    line.freeze()
}

/// The leader's side: `log` as a stream of lines (see the module), until the standby falls
/// behind, the log is closed, or `stop` resolves.
pub fn stream(
    log: Arc<UpstreamLog>,
    tick: Duration,
    stop: impl Future<Output = ()> + Send + 'static,
) -> impl Stream<Item = Bytes> + Send + 'static {
    let (rv, objects, live) = log.snapshot();
    let head = format!(r#"{{"type":"SNAPSHOT","term":"{}","resourceVersion":"{rv}"}}"#, log.term()) + "\n";
    let snapshot = futures::stream::iter(
        std::iter::once(Bytes::from(head))
            .chain(objects.into_iter().map(|(kind, object)| object_line(kind, &object)))
            .chain(std::iter::once(Bytes::from_static(b"{\"type\":\"SYNCED\"}\n"))),
    );
    let closed = log.closed();
    let ended = Box::pin(async move {
        tokio::select! {
            () = stop => {}
            () = closed => {}
        }
    });
    let changes = futures::stream::unfold((live, ended), move |(mut live, mut ended)| async move {
        tokio::select! {
            () = &mut ended => None,
            received = tokio::time::timeout(tick, live.recv()) => match received {
                Err(_idle) => Some((Bytes::from_static(b"{\"type\":\"TICK\"}\n"), (live, ended))),
                Ok(Ok(change)) => Some((change_line(&change), (live, ended))),
                Ok(Err(RecvError::Lagged(missed))) => {
                    tracing::info!(missed, "the unit's standby fell behind the leader's log: it takes a new snapshot");
                    None
                }
                Ok(Err(RecvError::Closed)) => None,
            },
        }
    });
    snapshot.chain(changes)
}

/// Why a line could not be taken: the stream is then given up and taken again.
#[derive(Debug, thiserror::Error)]
pub enum ReplicationError {
    #[error("a line of the leader's log is not a record")]
    Malformed(#[from] serde_json::Error),
    #[error("the leader's log names the unknown kind {0:?}")]
    UnknownKind(String),
    #[error("the leader's log has the malformed {what} {value:?}")]
    BadNumber { what: &'static str, value: String },
    #[error("the leader's log names the unknown change {0:?}")]
    UnknownChange(String),
    #[error("the leader's log sent {0} before its snapshot")]
    OutOfOrder(&'static str),
    #[error(transparent)]
    NotStored(#[from] UpstreamLogError),
}

/// The standby's side, without I/O: lines in, the latest synced replica out.
#[derive(Debug)]
pub struct Replicating {
    config: LogConfig,
    /// The snapshot being received.
    building: Option<Arc<UpstreamLog>>,
    /// The replica kept up to date (the last snapshot that completed), for the supervisor.
    replica: ReplicaSlot,
    /// The replica changes go to: the one whose snapshot completed on this stream.
    following: Option<Arc<UpstreamLog>>,
}

/// Where the standby keeps its replica for the supervisor.
pub type ReplicaSlot = crate::upstream_log::LogSlot;

fn number(what: &'static str, value: &str) -> Result<u64, ReplicationError> {
    value.parse().map_err(|_| ReplicationError::BadNumber { what, value: value.to_string() })
}

fn kind(name: &str) -> Result<UpstreamKind, ReplicationError> {
    UpstreamKind::from_name(name).ok_or_else(|| ReplicationError::UnknownKind(name.to_string()))
}

impl Replicating {
    pub fn new(config: LogConfig, replica: ReplicaSlot) -> Self {
        Self { config, building: None, replica, following: None }
    }

    /// A new stream begins: nothing goes to the replica until its snapshot completes.
    pub fn restart(&mut self) {
        self.building = None;
        self.following = None;
    }

    /// Takes one line of the stream.
    pub fn take(&mut self, line: &[u8]) -> Result<(), ReplicationError> {
        match serde_json::from_slice(line)? {
            Record::Snapshot { term, resource_version } => {
                let (term, rv) = (number("term", &term)?, number("resourceVersion", &resource_version)?);
                self.building = Some(UpstreamLog::replica(self.config, term, rv));
                self.following = None;
            }
            Record::Object { kind: name, object } => {
                let building = self.building.as_ref().ok_or(ReplicationError::OutOfOrder("an object"))?;
                building.restore(kind(&name)?, object)?;
            }
            Record::Synced => {
                let replica = self.building.take().ok_or(ReplicationError::OutOfOrder("its end"))?;
                replica.replica_synced();
                self.replica.set(Some(replica.clone()));
                self.following = Some(replica);
            }
            Record::Change { kind: name, change, resource_version, object } => {
                let replica = self.following.as_ref().ok_or(ReplicationError::OutOfOrder("a change"))?;
                let Some(change) = ChangeKind::from_name(&change) else {
                    return Err(ReplicationError::UnknownChange(change));
                };
                replica.replay(kind(&name)?, change, object, number("resourceVersion", &resource_version)?)?;
            }
            Record::Tick => {}
        }
        Ok(())
    }
}

/// Splits a byte stream into lines (a line may span chunks, a chunk hold many lines).
#[derive(Debug, Default)]
pub struct Lines {
    pending: BytesMut,
    /// How much of `pending` is known to hold no newline (a long line is scanned once).
    scanned: usize,
}

impl Lines {
    /// The complete lines `chunk` ends, without their newlines.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Bytes> {
        self.pending.extend_from_slice(chunk);
        let mut lines = Vec::new();
        while let Some(at) = self.pending[self.scanned..].iter().position(|b| *b == b'\n') {
            let end = self.scanned + at;
            let line = self.pending.split_to(end + 1).freeze();
            lines.push(line.slice(..end));
            self.scanned = 0;
        }
        self.scanned = self.pending.len();
        lines
    }
}

/// How long the standby waits before asking again after its stream ended, doubled for
/// each stream in a row that ended before its snapshot completed (a leader still syncing,
/// or one answering what this one cannot take), up to [`MAX_RETRY`].
const RETRY: Duration = Duration::from_secs(1);
const MAX_RETRY: Duration = Duration::from_secs(60);

/// The standby's side: keeps `replica` a replica of the log of the leader `client` talks
/// to, until dropped.
pub async fn replicate(client: kube::Client, config: LogConfig, replica: ReplicaSlot) {
    let mut replicating = Replicating::new(config, replica);
    let mut retry = RETRY;
    loop {
        replicating.restart();
        let ended = follow(&client, &mut replicating).await;
        retry = if replicating.following.is_some() { RETRY } else { (retry * 2).min(MAX_RETRY) };
        if let Err(error) = ended {
            tracing::info!(%error, retry_in = ?retry, "the leader's log stream ended: asking again");
        }
        tokio::time::sleep(retry).await;
    }
}

/// Why one stream ended.
#[derive(Debug, thiserror::Error)]
enum StreamEnded {
    #[error("requesting the leader's log")]
    Request(#[from] kube::Error),
    #[error("the leader answered {0}")]
    Status(http::StatusCode),
    #[error("reading the leader's log")]
    Read(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error(transparent)]
    Replication(#[from] ReplicationError),
    #[error("the leader ended its log")]
    End,
}

async fn follow(client: &kube::Client, replicating: &mut Replicating) -> Result<(), StreamEnded> {
    use http_body_util::BodyExt as _;
    let request =
        http::Request::get(PATH).body(kube::client::Body::empty()).map_err(|e| StreamEnded::Read(e.into()))?;
    let response = client.send(request).await?;
    if !response.status().is_success() {
        return Err(StreamEnded::Status(response.status()));
    }
    let mut body = response.into_body().into_data_stream();
    let mut lines = Lines::default();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| StreamEnded::Read(e.into()))?;
        for line in lines.push(&chunk) {
            replicating.take(&line)?;
        }
    }
    Err(StreamEnded::End)
}

#[cfg(test)]
mod tests;
