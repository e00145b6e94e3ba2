//! A follower's vouched streams ([`edgegrid_core::vouch`]): each stream from the leader
//! goes through a [`VouchGate`] that passes a step on to the cache only once the unit signer
//! vouched for the state after it (or a later one), as the signed batches the leader
//! serves ([`DigestsFeed`]) say. Steps held longer than the patience, or a served state
//! no batch vouched for within the patience (a leader withholding changes or batches),
//! mark the stream failing (`Unvouched`), and the supervisor passes the leader over: the
//! follower goes to the next member or the cloud, and its cache serves the last vouched
//! state meanwhile.
//!
//! The cache computes no relist deletes of its own: a list reaches it as the watch helper
//! delivers it, each object missing from the list deleted before the list's end. Those
//! deletes pass with the list (between its `begin` and `done`, once its end is vouched
//! for), also for the objects the cache held before the stream began (restored, or left
//! by the previous plan: the watch is seeded with them, `Watch::holding`), which the gate
//! never saw.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use controller_support::watch::{Index, Key, Watch};
use edgegrid_core::vouch::{
    BATCH_DATA_KEY, BatchError, ElementDigest, Op, SIGNATURE_DATA_KEY, SignedBatch, VouchGate, Voucher, VoucherConfig,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Resource;
use kube::runtime::watcher;
use tokio::sync::watch;

use crate::metrics::{LinkMetrics, ResultLabel};

/// How often held steps are looked at while no batch arrives.
const CHECK: Duration = Duration::from_millis(250);

/// What a wrapper checks its leader's streams with.
#[derive(Clone, Debug)]
pub struct VouchConfig {
    /// The namespace of the signer's ConfigMap.
    pub namespace: String,
    pub voucher: VoucherConfig,
    /// How long a step may wait for a batch vouching for it before the leader is given up.
    pub patience: Duration,
}

/// The voucher every stream of a follower checks against, kept across leaders.
#[derive(Debug)]
pub struct Vouching {
    namespace: String,
    patience: Duration,
    voucher: Mutex<Voucher>,
    /// Counts batches taken, for the streams waiting on one.
    taken: watch::Sender<u64>,
    /// A served batch was refused for its signature since the supervisor last looked: no
    /// trusted key signed it, which is the leader's doing (a forgery) or this wrapper's
    /// (keys that are not the signer's); the supervisor tells which by the cloud's copy.
    signature_refused: AtomicBool,
}

impl Vouching {
    pub fn new(config: VouchConfig) -> Self {
        Self {
            namespace: config.namespace,
            patience: config.patience,
            voucher: Mutex::new(Voucher::new(config.voucher)),
            taken: watch::Sender::new(0),
            signature_refused: AtomicBool::new(false),
        }
    }

    /// Whether a batch was refused for its signature since the last call.
    pub fn take_signature_refused(&self) -> bool {
        self.signature_refused.swap(false, Ordering::Relaxed)
    }

    /// What was left of the last batch's window when it was taken.
    fn last_window_left(&self) -> std::time::Duration {
        self.voucher.lock().unwrap_or_else(PoisonError::into_inner).last_window_left()
    }

    /// Batches taken so far.
    pub fn taken(&self) -> u64 {
        *self.taken.borrow()
    }

    /// Whether a trusted key signed the batch in `configmap` (the signer's ConfigMap).
    pub fn signed_by_a_trusted_key(&self, configmap: &ConfigMap) -> Result<(), BatchError> {
        self.voucher.lock().unwrap_or_else(PoisonError::into_inner).verify(&signed_batch(configmap))
    }

    /// The namespace of the signer's ConfigMap.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Takes the batch in `configmap`, if it verifies.
    fn receive(&self, configmap: &ConfigMap) -> Result<u64, BatchError> {
        let wall = jiff::Timestamp::now().as_second();
        let received = self.voucher.lock().unwrap_or_else(PoisonError::into_inner).receive(
            &signed_batch(configmap),
            Instant::now(),
            wall,
        );
        match &received {
            Ok(_) => self.taken.send_modify(|taken| *taken += 1),
            Err(error) if error.is_signature() => self.signature_refused.store(true, Ordering::Relaxed),
            Err(_) => {}
        }
        received
    }

    fn release<K: Ord + Clone, T>(&self, gate: &mut VouchGate<K, T>) -> Vec<Op<K, T>> {
        let voucher = self.voucher.lock().unwrap_or_else(PoisonError::into_inner);
        gate.release(&voucher, Instant::now())
    }
}

/// The signed batch the signer's ConfigMap holds (empty fields where it holds none).
fn signed_batch(configmap: &ConfigMap) -> SignedBatch {
    let data = configmap.data.as_ref();
    let field = |key: &str| data.and_then(|data| data.get(key)).cloned().unwrap_or_default();
    SignedBatch { batch: field(BATCH_DATA_KEY), signature: field(SIGNATURE_DATA_KEY) }
}

/// The signer's ConfigMap, as the leader serves it, into the voucher.
pub struct DigestsFeed<'a> {
    pub vouching: &'a Vouching,
    pub metrics: &'a LinkMetrics,
}

impl Index<ConfigMap> for DigestsFeed<'_> {
    fn apply(&mut self, configmap: ConfigMap) {
        let result = match self.vouching.receive(&configmap) {
            Ok(_) if self.vouching.last_window_left().is_zero() => {
                self.metrics.unit_vouch_keys_refused.set(0);
                tracing::warn!(
                    "the unit leader served a signer's batch older than --unit-vouch-window by this node's clock: \
                     it vouches for nothing (a leader holding batches back, or this clock ahead of the signer's)"
                );
                "too_old"
            }
            Ok(_) => {
                self.metrics.unit_vouch_keys_refused.set(0);
                "taken"
            }
            // the same batch again (a relist): no news
            Err(BatchError::NotNewer { .. }) => "again",
            Err(error) => {
                tracing::warn!(%error, "the unit leader served a batch that is refused");
                error.reason()
            }
        };
        self.metrics.unit_vouch_batches.get_or_create(&ResultLabel { result }).inc();
    }

    fn delete(&mut self, _key: Key) {}
}

/// A stream's gate and the feed it passes steps on to.
struct Gated<K, I> {
    gate: VouchGate<Key, K>,
    inner: I,
}

impl<K, I: Index<K>> Gated<K, I> {
    /// Passes on what the batches vouch for now (a scan of every held step).
    fn pass(&mut self, vouching: &Vouching) {
        let released = vouching.release(&mut self.gate);
        self.pass_on(released);
    }

    /// Passes on the newest step if its state is vouched for (one check).
    fn pass_newest(&mut self, vouching: &Vouching) {
        let released = {
            let voucher = vouching.voucher.lock().unwrap_or_else(PoisonError::into_inner);
            self.gate.release_newest(&voucher, Instant::now())
        };
        self.pass_on(released);
    }

    fn pass_on(&mut self, released: Vec<Op<Key, K>>) {
        for op in released {
            match op {
                Op::Begin => self.inner.begin(),
                Op::Apply(_, _, object) => self.inner.apply(object),
                Op::Delete(key) => self.inner.delete(key),
                Op::Done => self.inner.done(),
            }
        }
    }
}

/// The watch's side: each step into the gate, and on if it is vouched for already.
struct Taking<'a, K, I> {
    gated: &'a Mutex<Gated<K, I>>,
    vouching: &'a Vouching,
    stream: &'a str,
    element: fn(&str, &K) -> ElementDigest,
}

impl<K, I: Index<K>> Taking<'_, K, I> {
    fn take(&self, op: Op<Key, K>) {
        let mut gated = self.gated.lock().unwrap_or_else(PoisonError::into_inner);
        gated.gate.take(op, Instant::now());
        gated.pass_newest(self.vouching);
    }
}

impl<K: Resource, I: Index<K>> Index<K> for Taking<'_, K, I> {
    fn begin(&mut self) {
        self.take(Op::Begin);
    }
    fn apply(&mut self, object: K) {
        let element = (self.element)(self.stream, &object);
        self.take(Op::Apply(Key::of(&object), element, object));
    }
    fn delete(&mut self, key: Key) {
        self.take(Op::Delete(key));
    }
    fn done(&mut self) {
        self.take(Op::Done);
    }
    fn failed(&mut self, error: &watcher::Error) {
        self.gated.lock().unwrap_or_else(PoisonError::into_inner).inner.failed(error);
    }
}

/// How the gate on a stream fares, told to the link's health every check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vouched {
    /// Nothing held past the patience, and the state served is still vouched for.
    Yes,
    /// For this long: a step held without a batch vouching for it, or the state served no
    /// longer vouched for (the leader withholds the signer's batches, or the stream's
    /// changes), or more steps held than [`MAX_HELD`].
    No(Duration),
}

/// The most steps a gate holds before its leader is given up (a leader streaming what
/// is never vouched for must not grow a follower's memory without bound).
pub const MAX_HELD: usize = 500_000;

/// Runs `watch` into `inner` through a gate on `stream` (its name in the batches), until
/// the watch ends. Every check tells `report` how the stream fares; waits are counted
/// from `since_leader()` ago at most (a new leader gets a whole patience).
pub async fn run<K, I>(
    watch: Watch<K>,
    stream: String,
    element: fn(&str, &K) -> ElementDigest,
    inner: I,
    vouching: &Vouching,
    since_leader: impl Fn() -> Option<Duration>,
    report: impl Fn(Vouched),
) where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
    I: Index<K>,
{
    let gated = Mutex::new(Gated { gate: VouchGate::new(stream.clone()), inner });
    let taking = watch.run(Taking { gated: &gated, vouching, stream: &stream, element });
    let releasing = async {
        let mut taken = vouching.taken.subscribe();
        let mut ticks = tokio::time::interval(CHECK);
        // since when the state served has not been vouched for
        let mut stale_since: Option<Instant> = None;
        loop {
            tokio::select! {
                _ = taken.changed() => {}
                _ = ticks.tick() => {}
            }
            let now = Instant::now();
            let (held, too_many, fresh) = {
                let mut gated = gated.lock().unwrap_or_else(PoisonError::into_inner);
                gated.pass(vouching);
                let voucher = vouching.voucher.lock().unwrap_or_else(PoisonError::into_inner);
                let fresh = gated.gate.passed().is_none_or(|passed| voucher.vouches(&stream, passed, now));
                (gated.gate.held_since(), gated.gate.held() > MAX_HELD, fresh)
            };
            stale_since = if fresh { None } else { Some(stale_since.unwrap_or(now)) };
            let waited = [held, stale_since].into_iter().flatten().map(|since| now - since).max();
            let waited = match (waited, since_leader()) {
                (Some(waited), Some(leader)) => Some(waited.min(leader)),
                (waited, _) => waited,
            };
            match waited {
                Some(waited) if waited >= vouching.patience || too_many => report(Vouched::No(waited)),
                _ => report(Vouched::Yes),
            }
        }
    };
    tokio::select! {
        () = taking => {}
        () = releasing => {}
    }
}
