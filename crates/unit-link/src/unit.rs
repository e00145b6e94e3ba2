//! One upstream per unit: where this wrapper takes its upstream objects from (the cloud,
//! or the wrapper leading its unit) and whether it serves the unit's other wrappers.
//!
//! [`run`] re-decides with [`edgegrid_core::unit::upstream::choose`] whenever its inputs
//! change: the unit's members (the identities the local edge-health read), the nodes the
//! local edge-health votes down, and the members this wrapper failed to reach. The
//! upstream the wrapper runs for a choice ([`FedWrapper::run_plan`]) is replaced only when
//! the choice changes; the new one relists, and its watches (told what the cache, and a
//! promoted log, already hold) deliver the relist as differences, so the served view never
//! goes empty or partial across a change and no client sees an event twice. From one leader to another the follower's watches go on
//! instead ([`LeaderRoute`]): they resume on a standby leading from its replica of the
//! previous leader's log ([`crate::replication`]), and relist anywhere else.
//!
//! A followed leader is passed over (for `unreachable_for`) once its link has failed for
//! a moment (refused, reset, or silent beyond the client's read timeout: the leader's
//! bookmarks keep a healthy watch talking), or when it keeps answering "not ready" longer
//! than `not_ready_for` (a leader that lost the cloud before its first sync). A leader that
//! loses the cloud afterwards keeps serving its last view: the unit goes on working
//! offline as one wrapper does. The member next in line keeps a replica of the leader's
//! log meanwhile (the standby).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use edgegrid_core::unit::upstream::{Choice, UnitMember, choose};
use kube::Client;

use crate::link_health::{LinkFailure, LinkHealth};
use crate::metrics::{LinkMetrics, SourceLabel};
use crate::node_identity::{ExpectedServer, MemberKeys, NodeIdentity, client_config};
use crate::plan::{LocalNodeWatch, Plan};
use crate::replication::ReplicaSlot;
use crate::unit_client::LeaderRoute;
use crate::upstream_log::UpstreamLog;

/// The node's wrapper, as the unit link sees it: what the supervisor decides from (the
/// unit's members, the nodes voted down, the local node's unit), where it counts, and what
/// it hands each decided [`Plan`] to.
///
/// The seam between the link and the wrapper (`grid-wrapper`, which implements this): the
/// supervisor decides where the upstream objects come from, the wrapper runs the watches
/// that feed its cache. Called through this trait rather than by name, the link does not
/// depend on the wrapper's crate (which depends on the link), and no module of either calls
/// back into the other.
pub trait FedWrapper: Send + Sync + 'static {
    /// The local node's name.
    fn local_node(&self) -> &str;

    /// The members of the local node's unit that publish an identity (as the local
    /// edge-health reads them), and the unit (its label's value on the local Node).
    fn unit_members(&self) -> (Vec<UnitMember>, Option<String>);

    /// The nodes the local unit votes down now.
    fn nodes_down(&self) -> BTreeSet<String>;

    /// Forgets the local node's unit until its Node is read again (it was relabelled).
    fn forget_local_unit(&self);

    /// Where the link counts (registered by the wrapper with its own metrics).
    fn link_metrics(&self) -> &LinkMetrics;

    /// Runs every upstream watch of `plan` into the wrapper until the future is dropped
    /// (or every watch ends).
    fn run_plan(self: Arc<Self>, plan: Plan) -> impl Future<Output = ()> + Send + 'static;
}

/// How a wrapper shares its unit's upstream.
#[derive(Clone, Debug)]
pub struct UnitConfig {
    pub identity: NodeIdentity,
    /// The label whose value makes the unit (`--unit-label-key`).
    pub label_key: String,
    /// The port every wrapper of the unit serves the upstream on.
    pub port: u16,
    pub unreachable_for: Duration,
    pub not_ready_for: Duration,
    /// A follower's link timeouts (a leader silent this long is taken for dead).
    pub read_timeout: Duration,
    pub connect_timeout: Duration,
    /// Where a follower's connections to its leader come from: the address this wrapper
    /// serves its unit on when that is one address (so the site network, and a firewall on
    /// it, sees the member where it is known), else the kernel's choice.
    pub source: Option<std::net::IpAddr>,
    pub log: listwatch::LogConfig,
    /// Vouched sharing: followers check every stream against the unit signer's batches.
    pub vouch: Option<Arc<crate::vouched::Vouching>>,
}

/// What the unit server serves: the log while this wrapper leads, nothing otherwise (503).
pub type LeaderSlot = crate::upstream_log::LogSlot;

/// The shared state of a wrapper in a shared unit, between [`run`] and the unit server.
#[derive(Clone, Debug)]
pub struct Unit {
    pub config: UnitConfig,
    /// The members the unit server admits (their published keys).
    pub members: MemberKeys,
    pub slot: LeaderSlot,
}

impl Unit {
    pub fn new(config: UnitConfig) -> Self {
        Self { config, members: MemberKeys::default(), slot: LeaderSlot::default() }
    }
}

/// Why this node's identity could not be read.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("reading the node key file {path}")]
    Read {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the node key file {path} holds no node identity")]
    Invalid {
        path: std::path::PathBuf,
        #[source]
        source: crate::node_identity::NodeIdentityError,
    },
}

/// How often a wrapper waiting for its node's key file says so.
const KEY_FILE_LOG_EVERY: Duration = Duration::from_secs(60);

/// This node's identity from edge-health's key file, waiting for the file to appear (both
/// start together on a new node, and edge-health may be scheduled later).
pub async fn read_identity(node: &str, path: &std::path::Path) -> Result<NodeIdentity, IdentityError> {
    let mut last_said: Option<Instant> = None;
    let document = loop {
        match tokio::fs::read(path).await {
            Ok(document) => break document,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                if last_said.is_none_or(|at| at.elapsed() >= KEY_FILE_LOG_EVERY) {
                    tracing::info!(path = %path.display(), "waiting for edge-health to write the node key file: watching the cloud alone meanwhile");
                    last_said = Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(source) => return Err(IdentityError::Read { path: path.to_path_buf(), source }),
        }
    };
    NodeIdentity::from_pkcs8(node, &document)
        .map_err(|source| IdentityError::Invalid { path: path.to_path_buf(), source })
}

/// What a wrapper needs to join its unit once its node's key can be read: until then (and
/// for good if the key is unusable or the listener cannot bind) it watches the cloud alone.
pub struct Joining {
    pub key_file: std::path::PathBuf,
    pub unit_config: Box<dyn FnOnce(NodeIdentity) -> UnitConfig + Send>,
    /// The unit listener's address and how it serves.
    pub address: std::net::SocketAddr,
    pub serve: crate::unit_server::ServeConfig,
    pub limits: controller_support::server::ServerLimits,
    pub server_metrics: controller_support::server::ServerMetrics,
    pub tls_metrics: controller_support::tls::TlsMetrics,
    pub served: crate::unit_server::UnitServerMetrics,
    /// Turns true at shutdown: the listener stops and its watches end.
    pub stop: tokio::sync::watch::Receiver<bool>,
}

impl Joining {
    /// The unit, with its listener serving; never resolves when it cannot be joined (the
    /// reason is logged).
    pub async fn join(self, node: &str) -> Unit {
        let joined = async {
            let identity = read_identity(node, &self.key_file).await?;
            let unit = Unit::new((self.unit_config)(identity));
            let tls = crate::node_identity::server_config(&unit.config.identity, unit.members.clone())?;
            let routes = crate::unit_server::router(unit.slot.clone(), self.serve, self.served, self.stop.clone());
            crate::unit_server::listen(
                self.address,
                tls,
                routes,
                self.limits,
                self.server_metrics,
                self.tls_metrics,
                self.stop,
            )
            .await?;
            Ok::<_, JoinError>(unit)
        };
        match joined.await {
            Ok(unit) => unit,
            Err(error) => {
                tracing::error!(%error, "cannot join the unit: watching the cloud alone");
                std::future::pending().await
            }
        }
    }
}

/// Why a wrapper cannot join its unit.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error("the unit listener's TLS settings")]
    Tls(#[from] crate::node_identity::NodeIdentityError),
    #[error(transparent)]
    Listen(#[from] crate::unit_server::UnitServerError),
}

/// How long a leader's link must keep failing before the leader is passed over.
const FAIL_AFTER: Duration = Duration::from_millis(500);

/// How long a leader never reached, where nothing listens yet, may keep refusing
/// connections before it is passed over.
const FIRST_CONTACT: Duration = Duration::from_secs(5);

/// The longest a failing member is passed over.
const MAX_PASS_OVER: Duration = Duration::from_secs(600);

/// How often the inputs are looked at while nothing wakes the supervisor earlier.
const RECHECK: Duration = Duration::from_millis(100);

/// Feeds the wrapper from the cloud (`cloud`), alone when `unit` is `None`, or as its unit
/// decides, until `stop` resolves.
pub async fn run<W: FedWrapper>(wrapper: Arc<W>, cloud: Client, unit: Option<Unit>, stop: impl Future<Output = ()>) {
    let Some(unit) = unit else {
        wrapper.link_metrics().upstream_source.get_or_create(&SourceLabel { source: "cloud" }).set(1);
        tokio::select! {
            () = wrapper.run_plan(Plan::alone(cloud)) => {}
            () = stop => {}
        }
        return;
    };
    tokio::pin!(stop);
    let mut supervisor = Supervisor {
        wrapper,
        cloud,
        unit,
        unreachable: BTreeMap::new(),
        failures: BTreeMap::new(),
        reached: BTreeSet::new(),
        previous: None,
        relocating: false,
        standby: None,
        next_in_line: false,
        route: None,
        leader_link: None,
        keys_refused_until: None,
        keys_refusals: (0, 0),
        not_listening: BTreeMap::new(),
    };
    loop {
        let mut decided = supervisor.decide();
        let Some(plan) = supervisor.plan(&decided) else { continue };
        let health = plan.health.clone();
        let upstream = supervisor.wrapper.clone().run_plan(plan);
        tokio::pin!(upstream);
        loop {
            tokio::select! {
                () = &mut upstream => break,
                () = supervisor.until_changed(&decided, &health) => {}
                () = &mut stop => {
                    supervisor.step_down();
                    return;
                }
            }
            // another leader to follow: the same watches go on against it
            let next = supervisor.decide();
            if !supervisor.refollow(&decided, &next) {
                break;
            }
            health.reset();
            decided = next;
        }
        supervisor.step_down();
    }
}

/// One decision: the choice, and the unit it was made in (a relabel changes the unit a
/// leader watches the nodes of, though it still leads).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Decided {
    choice: Choice,
    unit: Option<String>,
}

struct Supervisor<W> {
    wrapper: Arc<W>,
    cloud: Client,
    unit: Unit,
    /// Members passed over, until when, and how many times in a row.
    unreachable: BTreeMap<String, Instant>,
    failures: BTreeMap<String, u32>,
    /// Members whose link worked at least once (a refused connection there is no start-up).
    reached: BTreeSet<String>,
    previous: Option<Decided>,
    /// The local node left the stream that named it (relabelled): its Node is read from
    /// the cloud by name until its unit is known again.
    relocating: bool,
    /// Next in line after the followed leader: the replica of its log kept meanwhile.
    standby: Option<Standby>,
    /// Whether the last decision found this wrapper next in line after the leader.
    next_in_line: bool,
    /// Following: where the watches' requests go.
    route: Option<LeaderRoute>,
    /// The link to the leader followed last (the standby replicates over it too).
    leader_link: Option<(String, Client)>,
    /// Vouched: no key of this wrapper verifies the signer's batches, the cloud's copy
    /// included: it watches the cloud alone until then, and tries a leader again after.
    keys_refused_until: Option<Instant>,
    /// Refusals of the keys in a row (the wait doubles), and the batches taken at the last
    /// one (a batch taken since ends the row).
    keys_refusals: (u32, u64),
    /// Members never reached whose unit port refused connections, how many times in a row
    /// (see [`Supervisor::refused_connections`]).
    not_listening: BTreeMap<String, u32>,
}

/// What the cloud's copy of the signer's batch says of a batch the leader served that no
/// trusted key verifies.
enum RefusedBatch {
    /// The cloud's copy verifies: the leader served a batch of its own making.
    Forged,
    /// The cloud's copy is refused too: this wrapper's keys are not the signer's.
    KeysRefused,
    /// The cloud could not be asked.
    Unknown,
}

/// How long the cloud is given to answer for the signer's batch.
const CLOUD_CHECK: Duration = Duration::from_secs(5);

/// After how many refused connections in a row a member never reached is said to refuse
/// them (the second: it had a whole pass-over to start).
const NOT_LISTENING_SAID_AFTER: u32 = 2;

/// A replica of the followed leader's log, kept while this wrapper is next in line.
struct Standby {
    leader: String,
    /// The unit the leader was followed in: a replica is led from in that unit only.
    unit: Option<String>,
    replica: ReplicaSlot,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Standby {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<W: FedWrapper> Supervisor<W> {
    fn decide(&mut self) -> Decided {
        let now = Instant::now();
        self.unreachable.retain(|_, until| *until > now);
        let (members, unit) = self.wrapper.unit_members();
        if self.relocating {
            if unit.is_none() {
                return Decided { choice: Choice::Alone, unit: None };
            }
            self.relocating = false;
        }
        let local = self.wrapper.local_node();
        self.unit
            .members
            .replace(members.iter().filter(|m| m.node != local).map(|m| (m.node.clone(), m.key)).collect());
        let mut unreachable: BTreeSet<String> = self.unreachable.keys().cloned().collect();
        let down = self.wrapper.nodes_down();
        let mut choice = choose(local, &members, &down, &unreachable);
        // vouched, a follower reads its Node with its unit's: alone until its unit is known
        if matches!(choice, Choice::Follow(_)) && unit.is_none() && self.unit.config.vouch.is_some() {
            choice = Choice::Alone;
        }
        // keys that verify none of the signer's batches: no leader can be checked
        if matches!(choice, Choice::Follow(_)) && self.keys_refused_until.is_some_and(|until| until > now) {
            choice = Choice::Alone;
        }
        // the members still refusing connections are still the unit's
        self.not_listening.retain(|node, _| members.iter().any(|m| m.node == *node));
        let said = self.not_listening.values().filter(|refused| **refused >= NOT_LISTENING_SAID_AFTER).count();
        self.wrapper.link_metrics().unit_members_not_listening.set(said as i64);
        // next in line: this wrapper would lead without the leader (decided here, from the
        // same inputs, rather than read again for the standby)
        self.next_in_line = match &choice {
            Choice::Follow(leader) => {
                unreachable.insert(leader.node.clone());
                choose(local, &members, &down, &unreachable) == Choice::Lead
            }
            Choice::Lead | Choice::Alone => false,
        };
        Decided { choice, unit }
    }

    /// The upstream to run for `decided`; `None` when it cannot be set up (the leader is
    /// then passed over and the next decision made at once).
    fn plan(&mut self, decided: &Decided) -> Option<Plan> {
        self.record(decided);
        let client = self.cloud.clone();
        let plan = match (&decided.choice, &decided.unit) {
            (Choice::Lead, Some(value)) => {
                let log = self.promoted(value).unwrap_or_else(|| UpstreamLog::new(self.unit.config.log));
                self.unit.slot.set(Some(log.clone()));
                let local_node =
                    LocalNodeWatch::Unit { label_key: self.unit.config.label_key.clone(), value: value.clone() };
                let vouch = self.unit.config.vouch.clone();
                Plan { client, local_node, log: Some(log), health: Arc::default(), from_leader: false, vouch }
            }
            (Choice::Follow(leader), unit) => {
                let route = LeaderRoute::default();
                route.set_leader(self.link_to(leader)?);
                let client = route.client();
                self.route = Some(route);
                let vouch = self.unit.config.vouch.clone();
                let local_node = match (unit, &vouch) {
                    (Some(value), Some(_)) => {
                        LocalNodeWatch::Unit { label_key: self.unit.config.label_key.clone(), value: value.clone() }
                    }
                    _ => LocalNodeWatch::ByName,
                };
                Plan { client, local_node, log: None, health: Arc::default(), from_leader: true, vouch }
            }
            _ => Plan::alone(client),
        };
        Some(plan)
    }

    /// Follows `next`'s leader with the watches that followed `decided`'s, when both
    /// follow (they resume on the new leader, see [`LeaderRoute`]); false when the plan
    /// must be made again.
    fn refollow(&mut self, decided: &Decided, next: &Decided) -> bool {
        let (Choice::Follow(_), Choice::Follow(leader)) = (&decided.choice, &next.choice) else { return false };
        // vouched, the local node is watched with its unit's Nodes: another unit, another watch
        if self.unit.config.vouch.is_some() && decided.unit != next.unit {
            return false;
        }
        let Some(route) = self.route.clone() else { return false };
        let Some(client) = self.link_to(leader) else { return false };
        route.set_leader(client);
        self.record(next);
        true
    }

    /// A client of `leader`; `None` (and the leader passed over) when it cannot be set up.
    fn link_to(&mut self, leader: &UnitMember) -> Option<Client> {
        match self.leader_client(leader) {
            Ok(client) => {
                self.leader_link = Some((leader.node.clone(), client.clone()));
                Some(client)
            }
            Err(error) => {
                tracing::warn!(leader = %leader.node, %error, "cannot set up the link to the unit leader");
                self.pass_over(&leader.node);
                None
            }
        }
    }

    /// The replica kept as standby, if there is one: the log this wrapper leads from, so
    /// that its followers resume where they were (its cloud watches start from what it
    /// holds, and their relist reaches the followers as differences).
    fn promoted(&mut self, unit: &str) -> Option<Arc<UpstreamLog>> {
        let standby = self.standby.take()?;
        self.wrapper.link_metrics().unit_standby.set(0);
        // a replica of another unit's leader (the unit changed as this one took over) is
        // not this unit's log
        // (only a synced replica is ever put in the slot)
        let replica = standby.replica.current().filter(|_| standby.unit.as_deref() == Some(unit))?;
        let rv = replica.read(|log| log.current_rv());
        replica.promote();
        tracing::info!(leader = %standby.leader, resource_version = rv, "leading from the replica of the previous leader's log");
        self.wrapper.link_metrics().unit_standby_promotions.inc();
        Some(replica)
    }

    /// Keeps a replica of `leader`'s log while this wrapper would lead without it (the
    /// next in line), and none otherwise.
    fn keep_standby(&mut self, leader: &UnitMember, unit: Option<&str>) {
        if !self.next_in_line {
            return self.drop_standby();
        }
        if self.standby.as_ref().is_some_and(|standby| standby.leader == leader.node && standby.unit.as_deref() == unit)
        {
            return;
        }
        // the standby's stream goes over the follower's own link to the leader
        let Some((_, client)) = self.leader_link.as_ref().filter(|(node, _)| *node == leader.node) else { return };
        tracing::info!(leader = %leader.node, "next in line: replicating the leader's log");
        let replica = ReplicaSlot::default();
        let task = tokio::spawn(crate::replication::replicate(client.clone(), self.unit.config.log, replica.clone()));
        let unit = unit.map(str::to_string);
        self.standby = Some(Standby { leader: leader.node.clone(), unit, replica, task });
        self.wrapper.link_metrics().unit_standby.set(1);
    }

    fn drop_standby(&mut self) {
        if self.standby.take().is_some() {
            self.wrapper.link_metrics().unit_standby.set(0);
        }
    }

    fn leader_client(&self, leader: &UnitMember) -> Result<Client, crate::unit_client::UnitClientError> {
        let expected = ExpectedServer { node: leader.node.clone(), key: leader.key };
        let tls = client_config(&self.unit.config.identity, expected)?;
        let host = if leader.host.contains(':') { format!("[{}]", leader.host) } else { leader.host.clone() };
        let url: http::Uri = format!("https://{host}:{}", self.unit.config.port).parse()?;
        let received = self.wrapper.link_metrics().upstream_bytes.clone();
        let (read_timeout, connect_timeout) = (self.unit.config.read_timeout, self.unit.config.connect_timeout);
        let link = crate::unit_client::LinkSettings { read_timeout, connect_timeout, source: self.unit.config.source };
        crate::unit_client::leader_client_counted(&url, tls, link, received)
    }

    /// Metrics and the log line of a new decision.
    fn record(&mut self, decided: &Decided) {
        if self.previous.as_ref() == Some(decided) {
            return;
        }
        let metrics = self.wrapper.link_metrics();
        let (source, leader) = match &decided.choice {
            Choice::Alone => ("cloud", None),
            Choice::Lead => ("cloud", Some(self.wrapper.local_node().to_string())),
            Choice::Follow(leader) => ("leader", Some(leader.node.clone())),
        };
        for other in ["cloud", "leader"] {
            metrics.upstream_source.get_or_create(&SourceLabel { source: other }).set(i64::from(other == source));
        }
        metrics.unit_leading.set(i64::from(decided.choice == Choice::Lead));
        if self.previous.is_some() {
            metrics.unit_leader_changes.inc();
        }
        tracing::info!(
            source,
            leader = leader.as_deref().unwrap_or(""),
            unit = decided.unit.as_deref().unwrap_or(""),
            "unit upstream chosen"
        );
        self.previous = Some(decided.clone());
    }

    /// Waits until the decision would change, or the followed leader fails.
    async fn until_changed(&mut self, decided: &Decided, health: &LinkHealth) {
        loop {
            tokio::time::sleep(RECHECK).await;
            if let Choice::Follow(leader) = &decided.choice
                && health.worked()
            {
                self.reached.insert(leader.node.clone());
                self.not_listening.remove(&leader.node);
                if health.failing().is_none() {
                    self.failures.remove(&leader.node);
                }
            }
            if let (Choice::Follow(leader), Some(vouching)) = (&decided.choice, self.unit.config.vouch.clone()) {
                if vouching.taken() > self.keys_refusals.1 {
                    self.keys_refusals = (0, vouching.taken());
                }
                // every member refuses the same batches when the keys are wrong: that is not
                // the leader's fault, and no other leader would do better
                if vouching.take_signature_refused() {
                    match self.refused_batch(&vouching).await {
                        RefusedBatch::Forged => {
                            tracing::warn!(leader = %leader.node, "the unit leader served a signer's batch the cloud does not hold: passing it over");
                            self.pass_over(&leader.node);
                            return;
                        }
                        RefusedBatch::KeysRefused => {
                            self.refuse_keys(vouching.taken());
                            return;
                        }
                        RefusedBatch::Unknown => {}
                    }
                }
            }
            if health.local_node_left() {
                tracing::info!("the local node left its unit's stream: reading it from the cloud by name");
                // a leader that does not serve this node (it moved, or that leader has not
                // seen it join yet) is not followed again before its pass-over ends
                if let Choice::Follow(leader) = &decided.choice {
                    self.pass_over(&leader.node);
                }
                self.relocating = true;
                self.wrapper.forget_local_unit();
                return;
            }
            if let Choice::Follow(leader) = &decided.choice
                && let Some((since, failure)) = health.failing()
            {
                // one failed connection is not a dead leader (a reset on the LAN, a
                // restart): it is passed over once its link has failed for a while, longer
                // while nothing ever listened there (the leader may still be starting, as
                // this one is; not once it was reached: then it is down); not longer for a
                // TLS refusal, which is no start-up state: a wrapper every member refuses (a
                // key it does not publish) must get through them all before their
                // pass-overs end, and then lead itself
                let patience = match failure {
                    LinkFailure::NotListening if !self.reached.contains(&leader.node) => FIRST_CONTACT,
                    // the gate held steps for its own patience already
                    LinkFailure::NotListening | LinkFailure::Unreachable | LinkFailure::Unvouched => FAIL_AFTER,
                    LinkFailure::NotReady => self.unit.config.not_ready_for,
                };
                let given_up = since.elapsed() >= patience;
                if given_up {
                    tracing::warn!(leader = %leader.node, ?failure, "passing over the unit leader");
                    if failure == LinkFailure::NotListening && !self.reached.contains(&leader.node) {
                        self.refused_connections(&leader.node);
                    }
                    self.pass_over(&leader.node);
                    return;
                }
            }
            let now = self.decide();
            match &decided.choice {
                Choice::Follow(leader) if now == *decided => self.keep_standby(leader, decided.unit.as_deref()),
                Choice::Follow(_) => {}
                Choice::Lead | Choice::Alone => self.drop_standby(),
            }
            if now != *decided {
                return;
            }
        }
    }

    /// Asks the cloud for the signer's batch after the leader served one that no trusted
    /// key verifies.
    async fn refused_batch(&self, vouching: &crate::vouched::Vouching) -> RefusedBatch {
        use k8s_openapi::api::core::v1::ConfigMap;
        let configmaps = kube::Api::<ConfigMap>::namespaced(self.cloud.clone(), vouching.namespace());
        let by_name = kube::api::ListParams::default()
            .fields(&format!("metadata.name={}", edgegrid_core::vouch::BATCH_CONFIG_MAP));
        let listed = match tokio::time::timeout(CLOUD_CHECK, configmaps.list(&by_name)).await {
            Ok(Ok(listed)) => listed,
            Ok(Err(error)) => {
                tracing::info!(%error, "the unit leader served a batch no trusted key verifies; the cloud's copy could not be read");
                return RefusedBatch::Unknown;
            }
            Err(_) => {
                tracing::info!(timeout = ?CLOUD_CHECK, "the unit leader served a batch no trusted key verifies; the cloud did not answer for its copy");
                return RefusedBatch::Unknown;
            }
        };
        match listed.items.first().map(|configmap| vouching.signed_by_a_trusted_key(configmap)) {
            Some(Err(error)) if error.is_signature() => RefusedBatch::KeysRefused,
            // the cloud's copy verifies, or the cloud has none: the leader made its own
            _ => RefusedBatch::Forged,
        }
    }

    /// Watches the cloud alone for a while: no key of this wrapper verifies the signer's
    /// batches. The wait doubles (from `unreachable_for`, up to [`MAX_PASS_OVER`]) while
    /// no batch is taken in between; then a leader is tried again.
    fn refuse_keys(&mut self, taken: u64) {
        let factor = 2u32.saturating_pow(self.keys_refusals.0);
        self.keys_refusals = (self.keys_refusals.0.saturating_add(1), taken);
        let wait = self.unit.config.unreachable_for.saturating_mul(factor).min(MAX_PASS_OVER);
        self.keys_refused_until = Some(Instant::now() + wait);
        self.wrapper.link_metrics().unit_vouch_keys_refused.set(1);
        tracing::error!(
            ?wait,
            "no key of --unit-vouch-keys verifies the unit signer's batches, the cloud's copy included: watching \
             the cloud alone (check the keys against `unit-signer --print-public-key`)"
        );
    }

    /// Counts a refused connection of `node`, a member never reached; from the
    /// [`NOT_LISTENING_SAID_AFTER`]th in a row it is said (once) and counted in
    /// `unit_members_not_listening`: the member is alive to edge-health (a member voted
    /// down is never followed), so its wrapper is down, not sharing, or serves another
    /// port than this one dials.
    fn refused_connections(&mut self, node: &str) {
        let refused = self.not_listening.entry(node.to_string()).or_default();
        *refused = refused.saturating_add(1);
        if *refused == NOT_LISTENING_SAID_AFTER {
            tracing::warn!(
                member = node,
                port = self.unit.config.port,
                "a unit member edge-health sees alive refuses connections on the unit port: its grid wrapper is \
                 down, does not share its unit's upstream, or serves another port (every member must use the same \
                 --unit-upstream-bind-address port)"
            );
        }
    }

    /// Passes `node` over for `unreachable_for`, doubled for each failure in a row (up to
    /// [`MAX_PASS_OVER`]): a member that keeps failing (down for long, or refusing this
    /// wrapper) is not tried again and again.
    fn pass_over(&mut self, node: &str) {
        let failures = self.failures.entry(node.to_string()).or_default();
        let factor = 2u32.saturating_pow(*failures);
        *failures = failures.saturating_add(1);
        let wait = self.unit.config.unreachable_for.saturating_mul(factor).min(MAX_PASS_OVER);
        self.unreachable.insert(node.to_string(), Instant::now() + wait);
    }

    /// Ends leading, if it did: followers' watches end and new requests get 503.
    fn step_down(&self) {
        if let Some(log) = self.unit.slot.current() {
            log.close();
        }
        self.unit.slot.set(None);
    }
}
