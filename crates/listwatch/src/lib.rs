//! The Kubernetes list/watch protocol over an in-memory change log, shared by every
//! server in this project that serves list/watch (the fake API server; the per-node
//! grid wrapper).
//!
//! It owns: the resourceVersion counter and bounded change history ([`Log`]), consistent
//! list snapshots with `limit`/`continue`, label and field selectors, and the watch
//! protocol (resume from a version, 410 `Expired`, bookmarks, streaming lists ending with
//! the `k8s.io/initial-events-end` bookmark, `timeoutSeconds`, a watcher that cannot keep
//! up closed with 410), with its own `Status` errors ([`Error`]). Objects are encoded once
//! per version; lists and watchers share those bytes.
//!
//! It must never know its users: resource types are an opaque key chosen by the caller,
//! what a write means (validation, admission, defaults, garbage collection) stays with
//! the caller, and no HTTP framework is linked: callers parse their query into
//! [`ListOptions`]/[`WatchOptions`] and put the returned bytes into their responses.

mod error;
mod log;
mod object;
mod options;
mod protobuf;
mod protocol;
mod representation;
mod selectors;
mod served_type;

pub use error::{Error, status};
pub use log::{Change, ChangeKind, ListPage, Log, LogConfig, ObjectId, ResourceKey, WatchStart};
pub use object::StoredObject;
pub use options::{ListOptions, WatchOptions, is_watch};
pub use protobuf::{PROTOBUF, PROTOBUF_WATCH};
pub use protocol::{
    INITIAL_EVENTS_END_ANNOTATION, ListBody, WatchConfig, error_event, event_line, list_body, object_body, watch_stream,
};
pub use representation::{Encoding, Representation, Shape};
pub use selectors::{FieldSelector, LabelSelector, Selectable};
pub use served_type::ServedType;

#[cfg(test)]
mod tests;
