//! How the upstream link fares, told by the wrapper's watches and read by the unit
//! supervisor (`unit`) to decide when a followed leader is passed over: per
//! stream, since when every attempt failed and how, whether a vouching gate holds what the
//! signer did not vouch for, and whether the local node left the stream that names it.
//! What a failed watch says of the link is decided here too ([`LinkHealth::watch_failed`]):
//! an answer a healthy upstream gives as well (410, 504) is no failure, nor is what a
//! previous leader left in flight.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use kube::runtime::watcher;

use crate::stream::Stream;

/// How the upstream link fares, for the unit supervisor: per stream, since when every
/// attempt failed and how (one stream delivering must not hide another that fails), and
/// whether the local node left the stream that names it (see `Plan::local_node`).
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
    pub fn unvouched(&self, stream: Stream) -> bool {
        let mut unvouched = self.unvouched.lock().unwrap_or_else(PoisonError::into_inner);
        let new = !unvouched.contains_key(&stream);
        unvouched.entry(stream).or_insert_with(Instant::now);
        new
    }

    /// A gate passes what it gets again.
    pub fn vouched(&self, stream: Stream) {
        self.unvouched.lock().unwrap_or_else(PoisonError::into_inner).remove(&stream);
    }

    /// How long ago the link was reset to another leader (`None`: never).
    pub fn since_reset(&self) -> Option<std::time::Duration> {
        self.reset_at.lock().unwrap_or_else(PoisonError::into_inner).map(|at| at.elapsed())
    }

    fn failed(&self, stream: Stream, failure: LinkFailure) {
        let mut failing = self.failing.lock().unwrap_or_else(PoisonError::into_inner);
        let since = failing.get(&stream).map_or_else(Instant::now, |(since, _)| *since);
        failing.insert(stream, (since, failure));
    }

    /// Takes what a failed watch of `stream` says of the link: a failure, an answer a
    /// healthy upstream gives too (the link works), or nothing (a previous leader's).
    pub fn watch_failed(&self, stream: Stream, error: &watcher::Error) {
        match classify(error) {
            WatchErrorClass::Failed(failure) => self.failed(stream, failure),
            WatchErrorClass::Answered => self.working(stream),
            WatchErrorClass::LeftOver => {}
        }
    }

    /// Whether anything came through the link yet.
    pub fn worked(&self) -> bool {
        self.worked.load(Ordering::Relaxed)
    }

    /// Something came through `stream`: it works.
    pub fn working(&self, stream: Stream) {
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

    /// The local node left the stream that names it (it was relabelled, not deleted): the
    /// supervisor re-decides where to watch it from.
    pub fn note_local_node_left(&self) {
        self.local_node_left.store(true, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Service;
    use kube::api::Api;

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
