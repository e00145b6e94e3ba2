//! A follower's vouched streams ([`edgegrid_core::vouch`]): each stream from the leader
//! goes through a [`Gate`] that passes a step on to the cache only once the unit signer
//! vouched for the state after it (or a later one), as the signed batches the leader
//! serves ([`DigestsFeed`]) say. Steps held longer than the patience mark the stream
//! failing (`Unvouched`), and the supervisor passes the leader over: the follower goes to
//! the next member or the cloud, and its cache serves the last vouched state meanwhile.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use controller_support::watch::{Index, Key, Watch};
use edgegrid_core::vouch::{
    BATCH_DATA_KEY, BatchError, ElementDigest, Gate, Op, SIGNATURE_DATA_KEY, SignedBatch, Voucher, VoucherConfig,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Resource;
use kube::runtime::watcher;
use tokio::sync::watch;

use crate::metrics::{Metrics, ResultLabel};

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
}

impl Vouching {
    pub fn new(config: VouchConfig) -> Self {
        Self {
            namespace: config.namespace,
            patience: config.patience,
            voucher: Mutex::new(Voucher::new(config.voucher)),
            taken: watch::Sender::new(0),
        }
    }

    /// The namespace of the signer's ConfigMap.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Takes the batch in `configmap`, if it verifies.
    fn receive(&self, configmap: &ConfigMap) -> Result<u64, BatchError> {
        let data = configmap.data.as_ref();
        let field = |key: &str| data.and_then(|data| data.get(key)).cloned().unwrap_or_default();
        let signed = SignedBatch { batch: field(BATCH_DATA_KEY), signature: field(SIGNATURE_DATA_KEY) };
        let wall = jiff::Timestamp::now().as_second();
        let sequence =
            self.voucher.lock().unwrap_or_else(PoisonError::into_inner).receive(&signed, Instant::now(), wall)?;
        self.taken.send_modify(|taken| *taken += 1);
        Ok(sequence)
    }

    fn release<K: Ord + Clone, T>(&self, gate: &mut Gate<K, T>) -> Vec<Op<K, T>> {
        let voucher = self.voucher.lock().unwrap_or_else(PoisonError::into_inner);
        gate.release(&voucher, Instant::now())
    }
}

/// The signer's ConfigMap, as the leader serves it, into the voucher.
pub struct DigestsFeed<'a> {
    pub vouching: &'a Vouching,
    pub metrics: &'a Metrics,
}

impl Index<ConfigMap> for DigestsFeed<'_> {
    fn apply(&mut self, configmap: ConfigMap) {
        let result = match self.vouching.receive(&configmap) {
            Ok(_) => "taken",
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
    gate: Gate<Key, K>,
    inner: I,
}

impl<K, I: Index<K>> Gated<K, I> {
    fn pass(&mut self, vouching: &Vouching) {
        for op in vouching.release(&mut self.gate) {
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
    element: fn(&str, &K) -> ElementDigest,
}

impl<K, I: Index<K>> Taking<'_, K, I> {
    fn take(&self, op: Op<Key, K>) {
        let mut gated = self.gated.lock().unwrap_or_else(PoisonError::into_inner);
        gated.gate.take(op, Instant::now());
        gated.pass(self.vouching);
    }
}

impl<K: Resource, I: Index<K>> Index<K> for Taking<'_, K, I> {
    fn begin(&mut self) {
        self.take(Op::Begin);
    }
    fn apply(&mut self, object: K) {
        let gated = self.gated.lock().unwrap_or_else(PoisonError::into_inner);
        let element = (self.element)(gated.gate.stream(), &object);
        drop(gated);
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

/// Runs `watch` into `inner` through a gate on `stream` (its name in the batches), until
/// the watch ends. `unvouched` is called while a step has been held past the patience.
pub async fn run<K, I>(
    watch: Watch<K>,
    stream: String,
    element: fn(&str, &K) -> ElementDigest,
    inner: I,
    vouching: &Vouching,
    unvouched: impl Fn(Duration),
) where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
    I: Index<K>,
{
    let gated = Mutex::new(Gated { gate: Gate::new(stream), inner });
    let taking = watch.run(Taking { gated: &gated, vouching, element });
    let releasing = async {
        let mut taken = vouching.taken.subscribe();
        let mut ticks = tokio::time::interval(CHECK);
        loop {
            tokio::select! {
                _ = taken.changed() => {}
                _ = ticks.tick() => {}
            }
            let held = {
                let mut gated = gated.lock().unwrap_or_else(PoisonError::into_inner);
                gated.pass(vouching);
                gated.gate.held_since().map(|since| since.elapsed())
            };
            if let Some(held) = held.filter(|held| *held >= vouching.patience) {
                unvouched(held);
            }
        }
    };
    tokio::select! {
        () = taking => {}
        () = releasing => {}
    }
}
