//! One watch feeding one index, as every binary follows the API server (kubert's
//! index/watch split): the binary's [`Index`] only hears what exists and what is gone; this
//! module owns the list, the watch, retries with backoff, and the relists.
//!
//! A relist (the first list, a watch that could not resume after a 410, an API server
//! whose versions went back) is turned into differences: the index hears `begin`, an
//! `apply` for every listed object, a `delete` for every object it held that the list no
//! longer has, then `done`. So an index never keeps relist bookkeeping of its own: `begin`
//! and `done` only mark where a list starts and ends.
//!
//! An index may hold objects this watch never reported: restored from disk, inherited
//! from another process, or left by an earlier watch of the same collection (a binary that
//! starts a new watch over the index it keeps). [`Watch::holding`] tells the watch their
//! keys, and its first list deletes those the API server no longer has, as any relist
//! deletes what the watch itself applied. Keys it seeds that the list has are applied as
//! listed, and never deleted.
//!
//! kube-rs relists after a 410 but resumes the same version forever when the API server
//! answers "too large resource version" (an API server rebuilt, or restored from an etcd
//! backup, with older versions): the view would stay frozen at the old cluster. This
//! watch starts over with a list then, as client-go does.
//!
//! Metadata-only watches are `Watch<PartialObjectMeta<K>>` (kube-rs asks for metadata
//! only); field- and label-selected ones are [`Watch::fields`] and [`Watch::labels`].
//!
//! A failed watch retries with kube-runtime's default backoff (client-go's reflector's:
//! 0.8 s doubling to 30 s, with jitter, reset by any event). Watches of one API server that serve one view together
//! join a [`RetryGroup`]: the first of them to hear from the server again wakes the others
//! from their backoff. Why: each watch backs off on its own, so after a cut link heals (or
//! a burst of 503s ends) one may resume at once and another sleep out up to a minute, and
//! a view built from both (the wrapper prunes slices by their Service) mixes new objects of
//! one with stale ones of the other that long: the soak saw a wrapper serve new Services'
//! slices unpruned for 67 s while their Services watch slept.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::time::Duration;

use std::sync::Arc;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff, Event, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

/// How long to wait before relisting a watch whose API server no longer knows its version
/// (the API server's own `retryAfterSeconds` for that error).
const RELIST_DELAY: Duration = Duration::from_secs(1);

/// Names an object of a watch.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    pub name: String,
}

impl Key {
    pub fn of<K: Resource>(object: &K) -> Self {
        Self { namespace: object.meta().namespace.clone(), name: object.name_any() }
    }
}

/// What a binary keeps of one watched collection, fed by [`Watch::run`].
pub trait Index<K> {
    /// A list begins: the objects applied until [`done`](Self::done) are all there are.
    fn begin(&mut self) {}
    /// `object` exists as given (new, changed, or listed again).
    fn apply(&mut self, object: K);
    /// The object is gone: deleted while watched, or missing from a relist.
    fn delete(&mut self, key: Key);
    /// A list is complete: every object the API server holds has been applied and every
    /// other one deleted. The index is in sync from the first `done` on.
    fn done(&mut self) {}
    /// The watch failed and is retried with backoff; the index keeps what it has.
    fn failed(&mut self, _error: &watcher::Error) {}
}

impl<K, I: Index<K> + ?Sized> Index<K> for &mut I {
    fn begin(&mut self) {
        (**self).begin();
    }
    fn apply(&mut self, object: K) {
        (**self).apply(object);
    }
    fn delete(&mut self, key: Key) {
        (**self).delete(key);
    }
    fn done(&mut self) {
        (**self).done();
    }
    fn failed(&mut self, error: &watcher::Error) {
        (**self).failed(error);
    }
}

/// Watches of one API server that retry together (see the module documentation). Clones
/// are the same group.
#[derive(Clone, Debug, Default)]
pub struct RetryGroup {
    /// Bumped whenever a member hears from the server after a failure.
    heard: Arc<tokio::sync::watch::Sender<u64>>,
}

impl RetryGroup {
    pub fn new() -> Self {
        Self::default()
    }
}

/// One watch's retries: its backoff, and its group's wake-ups.
struct Retry<B> {
    backoff: B,
    /// The group, and the last wake-up this watch has seen.
    group: Option<(RetryGroup, tokio::sync::watch::Receiver<u64>)>,
    failing: bool,
}

impl<B: Backoff> Retry<B> {
    fn new(backoff: B, group: Option<RetryGroup>) -> Self {
        let group = group.map(|group| {
            let seen = group.heard.subscribe();
            (group, seen)
        });
        Self { backoff, group, failing: false }
    }

    /// The watch goes on: the backoff starts over (on every event, as kube-runtime's
    /// backoff does, `Init` included: so a list that keeps failing is retried about every
    /// second, which the unit link's fallback to the cloud counts on).
    fn went_on(&mut self) {
        self.backoff.reset();
    }

    /// The server answered: [`Self::went_on`], and after a failure the group's sleeping
    /// watches are woken.
    fn succeeded(&mut self) {
        self.went_on();
        if std::mem::take(&mut self.failing)
            && let Some((group, _)) = &self.group
        {
            group.heard.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// The watch failed: waits out the backoff, or less if another watch of the group
    /// hears from the server meanwhile.
    async fn failed(&mut self) {
        self.failing = true;
        let delay = self.backoff.next().unwrap_or(Duration::from_secs(30));
        let woken = async {
            match &mut self.group {
                Some((_, seen)) => {
                    // only what happens from now on: a wake-up before this failure (its
                    // own recovery included) came before the attempt that just failed
                    seen.borrow_and_update();
                    if seen.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = woken => {}
        }
    }
}

/// A list and watch of one collection; see the module documentation.
pub struct Watch<K: Resource> {
    api: Api<K>,
    config: watcher::Config,
    name: String,
    group: Option<RetryGroup>,
    relist_after_failure: bool,
    /// What the index holds before the first list ([`Watch::holding`]).
    held: BTreeSet<Key>,
}

impl<K> Watch<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Default,
{
    /// Every object `api` reaches; named in logs by its plural.
    pub fn new(api: Api<K>) -> Self {
        let name = K::plural(&K::DynamicType::default()).into_owned();
        Self {
            api,
            config: watcher::Config::default(),
            name,
            group: None,
            relist_after_failure: false,
            held: BTreeSet::new(),
        }
    }

    /// Only objects matching the field selector (e.g. `metadata.name=n1`: RBAC may grant
    /// just that object).
    pub fn fields(mut self, selector: &str) -> Self {
        self.config = self.config.fields(selector);
        self
    }

    /// Only objects matching the label selector.
    pub fn labels(mut self, selector: &str) -> Self {
        self.config = self.config.labels(selector);
        self
    }

    /// Retries together with the other watches of `group`.
    pub fn retrying_with(mut self, group: &RetryGroup) -> Self {
        self.group = Some(group.clone());
        self
    }

    /// After a failure, starts over with a list (once the backoff is waited out) rather than
    /// resuming from the last version seen, so every failure is followed by `begin` ...
    /// `done`. For an index that must know when it is current again: a resumed watch says
    /// nothing until the next change, which for a quiet collection may never come. Its
    /// backoff grows with failures in a row (to 30 s) until the server answers.
    pub fn relisting_after_failure(mut self) -> Self {
        self.relist_after_failure = true;
        self
    }

    /// The index already holds the objects `keys` names (restored, inherited, or left by an
    /// earlier watch): the first list deletes those it lacks, as a relist deletes what the
    /// watch applied (see the module documentation). Only keys of objects this watch can
    /// list: one its selectors leave out would be deleted by the first list.
    pub fn holding(mut self, keys: impl IntoIterator<Item = Key>) -> Self {
        self.held.extend(keys);
        self
    }

    /// Asks the API server to end each watch request after `timeout` (whole seconds, at
    /// least 1; kube's default is 290 s), after which it is resumed. With a client read
    /// timeout above it ([`crate::runtime::ClientOptions`]), a healthy watch always sends
    /// something within the read timeout, so a silent one is a failed one: the index hears
    /// `failed` instead of keeping a view that stopped moving without a word.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        let seconds = u32::try_from(timeout.as_secs()).unwrap_or(u32::MAX).max(1);
        self.config = self.config.timeout(seconds);
        self
    }

    /// The name logs give the watch (default: the resource's plural).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Feeds `index` until the watch ends (kube-rs retries forever, so in practice until
    /// the future is dropped). Pass `&mut index` to keep it.
    pub async fn run(mut self, mut index: impl Index<K>) {
        let mut feed = Feed { held: std::mem::take(&mut self.held), listed: None };
        let mut retry = Retry::new(DefaultBackoff::default(), self.group.clone());
        loop {
            let mut events = std::pin::pin!(watcher(self.api.clone(), self.config.clone()));
            let relist_after = loop {
                let Some(event) = events.next().await else { break None };
                match event {
                    Ok(event) => {
                        // `Init` comes before the list is asked for: not a word from the server.
                        // A watch relisting after failure starts over with one after each
                        // failure: reset there, a list that keeps failing would be retried
                        // every second for as long as the API server is away
                        if matches!(event, Event::Init) {
                            if !self.relist_after_failure {
                                retry.went_on();
                            }
                        } else {
                            retry.succeeded();
                        }
                        feed.event(event, &mut index);
                    }
                    Err(error) => {
                        tracing::warn!(watch = %self.name, %error, "watch failed; keeping what it saw, retrying");
                        index.failed(&error);
                        if version_unknown_upstream(&error) {
                            break Some(RELIST_DELAY);
                        }
                        retry.failed().await;
                        if self.relist_after_failure {
                            break Some(Duration::ZERO);
                        }
                    }
                }
            };
            let Some(delay) = relist_after else { return };
            tokio::time::sleep(delay).await;
        }
    }
}

/// Follows one named object (`metadata.name=<name>`: RBAC may grant just that one) and
/// calls `on_change` with what it is now: after every change and deletion, and after every
/// (re)list (one that finds none: `None`), which is applied at its end as one change.
/// `synced` is called after every complete (re)list, before `on_change` hears of it. Runs
/// until the future is dropped.
pub async fn follow_object<K>(api: Api<K>, name: &str, on_change: impl FnMut(Option<&K>), synced: impl FnMut())
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Default,
{
    Watch::new(api).follow(name, on_change, synced).await
}

impl<K> Watch<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Default,
{
    /// [`follow_object`] with this watch's settings (e.g. its [`timeout`](Self::timeout)).
    pub async fn follow(self, name: &str, on_change: impl FnMut(Option<&K>), synced: impl FnMut()) {
        let feed = ObjectFeed { listing: None, on_change, synced };
        self.fields(&format!("metadata.name={name}")).named(name).run(feed).await
    }
}

/// [`follow_object`]'s index: what a list in progress found, told at its end.
struct ObjectFeed<K, C, S> {
    /// While a list is in progress: the object it found, if any.
    listing: Option<Option<K>>,
    on_change: C,
    synced: S,
}

impl<K, C: FnMut(Option<&K>), S: FnMut()> Index<K> for ObjectFeed<K, C, S> {
    fn begin(&mut self) {
        self.listing = Some(None);
    }

    fn apply(&mut self, object: K) {
        match self.listing.as_mut() {
            Some(listed) => *listed = Some(object),
            None => (self.on_change)(Some(&object)),
        }
    }

    fn delete(&mut self, _: Key) {
        // in a list, absence is what `done` reports
        if self.listing.is_none() {
            (self.on_change)(None);
        }
    }

    fn done(&mut self) {
        let listed = self.listing.take().flatten();
        (self.synced)();
        (self.on_change)(listed.as_ref());
    }
}

/// The keys the index holds (seeded by [`Watch::holding`], then as the watch reports), and
/// those the list in progress has found.
#[derive(Default)]
struct Feed {
    held: BTreeSet<Key>,
    listed: Option<BTreeSet<Key>>,
}

impl Feed {
    fn event<K: Resource>(&mut self, event: Event<K>, index: &mut impl Index<K>) {
        match event {
            Event::Init => {
                self.listed = Some(BTreeSet::new());
                index.begin();
            }
            Event::InitApply(object) => {
                let key = Key::of(&object);
                self.listed.get_or_insert_default().insert(key.clone());
                self.held.insert(key);
                index.apply(object);
            }
            Event::Apply(object) => {
                self.held.insert(Key::of(&object));
                index.apply(object);
            }
            Event::Delete(object) => {
                let key = Key::of(&object);
                self.held.remove(&key);
                index.delete(key);
            }
            Event::InitDone => {
                let listed = self.listed.take().unwrap_or_default();
                let held = std::mem::replace(&mut self.held, listed);
                for gone in held.difference(&self.held) {
                    index.delete(gone.clone());
                }
                index.done();
            }
        }
    }
}

/// Whether the API server says the version a watch resumes from is newer than anything it
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
    use k8s_openapi::api::core::v1::ConfigMap;
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
    fn only_a_too_large_resource_version_makes_a_watch_relist() {
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

    /// The same delay every time.
    struct Fixed(Duration);

    impl Iterator for Fixed {
        type Item = Duration;
        fn next(&mut self) -> Option<Duration> {
            Some(self.0)
        }
    }

    impl Backoff for Fixed {
        fn reset(&mut self) {}
    }

    const LONG: Duration = Duration::from_secs(60);

    /// Three failed watches: two of a group (services, slices), one alone. The slices
    /// watch hears from the server after 2 s: the services watch retries then, not after
    /// its 60 s; the lone one sleeps its 60 s. Without the group, every watch sleeps out
    /// its own backoff.
    #[tokio::test(start_paused = true)]
    async fn a_watch_hearing_from_the_server_wakes_its_group_from_their_backoff() {
        let group = RetryGroup::new();
        let mut services = Retry::new(Fixed(LONG), Some(group.clone()));
        let mut slices = Retry::new(Fixed(Duration::from_secs(2)), Some(group.clone()));
        let mut alone = Retry::new(Fixed(LONG), None);
        let start = tokio::time::Instant::now();
        let (services_retried, alone_retried, ()) = tokio::join!(
            async {
                services.failed().await;
                start.elapsed()
            },
            async {
                alone.failed().await;
                start.elapsed()
            },
            async {
                slices.failed().await;
                slices.succeeded();
            },
        );
        assert_eq!((services_retried, alone_retried), (Duration::from_secs(2), LONG));
    }

    /// Only a recovery wakes the group: a success of a watch that was not failing (every
    /// event of a healthy watch) does not, and a watch is not woken by its own recovery
    /// when it fails again.
    #[tokio::test(start_paused = true)]
    async fn only_a_recovery_wakes_the_group_and_never_the_recovered_watch_itself() {
        let group = RetryGroup::new();
        let mut services = Retry::new(Fixed(LONG), Some(group.clone()));
        let mut slices = Retry::new(Fixed(Duration::from_secs(2)), Some(group.clone()));
        let start = tokio::time::Instant::now();
        let (services_retried, ()) = tokio::join!(
            async {
                services.failed().await;
                start.elapsed()
            },
            async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                slices.succeeded();
            },
        );
        assert_eq!(services_retried, LONG);

        let mut slices = Retry::new(Fixed(Duration::from_secs(2)), Some(group.clone()));
        slices.failed().await;
        slices.succeeded();
        let start = tokio::time::Instant::now();
        slices.failed().await;
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }

    /// What an index heard, in order.
    #[derive(Default)]
    struct Heard(Vec<String>);

    impl Index<ConfigMap> for Heard {
        fn begin(&mut self) {
            self.0.push("begin".into());
        }
        fn apply(&mut self, object: ConfigMap) {
            self.0.push(format!("apply {}", object.name_any()));
        }
        fn delete(&mut self, key: Key) {
            self.0.push(format!("delete {}", key.name));
        }
        fn done(&mut self) {
            self.0.push("done".into());
        }
    }

    fn map(name: &str) -> ConfigMap {
        let mut map = ConfigMap::default();
        map.metadata.name = Some(name.into());
        map.metadata.namespace = Some("ns".into());
        map
    }

    #[test]
    fn a_relist_is_heard_as_its_differences() {
        let (mut feed, mut heard) = (Feed::default(), Heard::default());
        let events = [
            Event::Init,
            Event::InitApply(map("a")),
            Event::InitApply(map("b")),
            Event::InitDone,
            Event::Apply(map("c")),
            Event::Delete(map("a")),
            // a relist: b is gone, d is new, c listed again
            Event::Init,
            Event::InitApply(map("c")),
            Event::InitApply(map("d")),
            Event::InitDone,
            // an empty relist takes everything
            Event::Init,
            Event::InitDone,
        ];
        for event in events {
            feed.event(event, &mut heard);
        }
        assert_eq!(
            heard.0,
            [
                "begin", "apply a", "apply b", "done", "apply c", "delete a", "begin", "apply c", "apply d",
                "delete b", "done", "begin", "delete c", "delete d", "done"
            ]
        );
        assert!(feed.held.is_empty());
    }

    /// Seeded with what the index held before it, the first list deletes the keys it
    /// lacks and only those; a key seeded and listed is the watch's own from then on.
    #[test]
    fn a_first_list_deletes_the_seeded_keys_it_lacks() {
        let key = |name: &str| Key { namespace: Some("ns".into()), name: name.into() };
        let mut feed = Feed { held: BTreeSet::from([key("a"), key("restored")]), listed: None };
        let mut heard = Heard::default();
        let events = [
            Event::Init,
            Event::InitApply(map("a")),
            Event::InitApply(map("b")),
            Event::InitDone,
            Event::Delete(map("a")),
        ];
        for event in events {
            feed.event(event, &mut heard);
        }
        assert_eq!(heard.0, ["begin", "apply a", "apply b", "delete restored", "done", "delete a"]);
        assert_eq!(feed.held, BTreeSet::from([key("b")]));
    }

    #[test]
    fn a_followed_object_is_told_after_each_change_and_a_relist_once_at_its_end() {
        let heard = std::cell::RefCell::new(Vec::<String>::new());
        let mut object = ObjectFeed {
            listing: None,
            on_change: |map: Option<&ConfigMap>| {
                heard
                    .borrow_mut()
                    .push(map.map_or("none".into(), |m| format!("is {}", m.metadata.name.clone().unwrap_or_default())))
            },
            synced: || heard.borrow_mut().push("synced".into()),
        };
        let mut feed = Feed::default();
        let events = [
            Event::Init,
            Event::InitApply(map("edge-health-config")),
            Event::InitDone,
            Event::Apply(map("edge-health-config")),
            Event::Delete(map("edge-health-config")),
            // a relist that finds it again, then one that finds none
            Event::Init,
            Event::InitApply(map("edge-health-config")),
            Event::InitDone,
            Event::Init,
            Event::InitDone,
        ];
        for event in events {
            feed.event(event, &mut object);
        }
        assert_eq!(
            heard.take(),
            [
                "synced",
                "is edge-health-config",
                "is edge-health-config",
                "none",
                "synced",
                "is edge-health-config",
                "synced",
                "none"
            ]
        );
    }
}
