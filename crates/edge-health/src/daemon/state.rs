//! The daemon's state between its I/O, and every decision it takes, by calling the pure
//! core the way `crate::sim` does: node metadata feeds [`UnitMembership`] and one
//! [`VoteTable`] + [`Schedule`] per unit; frames in are opened by the [`Verifier`] and
//! their ballots recorded; the period's probe plan, indirect requests, results frame,
//! evaluation and Node patches come out as data for the I/O tasks to carry out.
//!
//! One lock, never held across an await: every method here is synchronous, so no I/O can
//! ever stall a decision, and the tasks interleave only between whole steps.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use edgegrid_core::health::{LocalVerdicts, NodeVerdict, PeerIdentity};
use edgegrid_core::keys::{
    EDGE_HEALTH_ADDRESS_ANNOTATION, EDGE_HEALTH_PUBLIC_KEY_ANNOTATION, EDGE_HEALTH_UNHEALTHY_VIEW_ANNOTATION,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::cli::{Settings, VerdictWriter};
use super::metrics::{BallotLabels, KindLabel, Metrics, VerdictLabel};
use super::peer_cache::{self, PeerCache};
use crate::ballot::{ForgeryBudget, PublicKey, SignedBallot, SigningKey, check_signature};
use crate::indirect::{Basis, Conclusion, DirectStep, IndirectProbes, should_help};
use crate::liveness::{self, LivenessProof, Nonce, ProofRefused};
use crate::membership::{Labels, MembershipChange, NodeUnitCheck, UnitId, UnitMembership};
use crate::message::{Ballot, FrameBudget, HmacKey, KeyError, Payload, Rejection, Signer, Verifier};
use crate::relay::{Relay, relays_received};
use crate::selection::Schedule;
use crate::time::{Period, PeriodClock, Timestamp};
use crate::vote::{
    AnnotationPatch, BallotIgnored, ObservedNode, Recorded, Verdict, VoteTable, annotation_patch, writer_of,
};

/// The wall clock as the core's [`Timestamp`].
pub fn wall_clock() -> Timestamp {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Timestamp::from_unix_millis(u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX))
}

/// One assigned peer to probe this period.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedProbe {
    pub target: String,
    /// The peer's published exchange address. `None`: it does not parse, so the peer is not
    /// probed (no ballot: undecided). A node publishing none at all is no member (see
    /// [`crate::membership`]).
    pub address: Option<SocketAddr>,
}

/// An indirect probe request to send to `helper`, sealed per attempt by
/// [`Daemon::seal_request`] (a resent frame would be refused as a replay when only the
/// answer to the first was lost).
#[derive(Clone, Debug)]
pub struct OutgoingRequest {
    pub helper: String,
    pub address: SocketAddr,
    pub id: u64,
    pub target: String,
    /// The checker's challenge the helper passes on to the target.
    pub nonce: Nonce,
}

/// One relay round's frame for one unit, and the peers it goes to.
#[derive(Clone, Debug)]
pub struct RelayFrame {
    pub frame: Vec<u8>,
    /// Name and address.
    pub peers: Vec<(String, SocketAddr)>,
}

/// What to do after a direct probe.
#[derive(Debug)]
pub enum AfterDirect {
    Concluded,
    /// Send these and feed the answers to [`Daemon::take_answer`] until one settles the
    /// probe or the deadline passes ([`Daemon::expire`]).
    Ask(Vec<OutgoingRequest>),
}

/// What an incoming frame was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Received {
    Rejected(Rejection),
    Results,
    /// An indirect probe answer; `settled`: it concluded its probe.
    Answer {
        settled: bool,
    },
    /// A peer asks this node to probe `target` (its exchange address `address`) and answer
    /// under `id`, with the target's proof over the requester's `nonce`.
    Help {
        requester: String,
        id: u64,
        target: String,
        address: SocketAddr,
        nonce: Nonce,
    },
    /// A peer's challenge, answered: the sealed proof frame to reply with.
    Challenged(Vec<u8>),
    /// A peer's proof, for a challenge this node sent (see [`Daemon::take_proof`]).
    Proof {
        from: String,
        proof: LivenessProof,
    },
    /// A probe request for a node this one does not check, or cannot reach (no address).
    Declined,
}

/// Whether this node's address and public-key annotations say what they should.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressState {
    /// The local Node is not known (yet).
    NoNode,
    Published,
    /// Missing or different: patch them.
    Stale,
}

/// A ballot as it reaches [`Daemon::record`].
#[derive(Clone, Copy, Debug)]
enum Cast<'a> {
    /// This node's own: trusted, signed here when it is passed on.
    Own(Ballot),
    /// Another member's: taken only with its checker's signature.
    Received(&'a SignedBallot),
}

#[derive(Clone, Debug)]
struct NodeRecord {
    /// What the peer cache keeps of it.
    cached: ObjectMeta,
    observed: ObservedNode,
    /// The annotation's raw value.
    address_annotation: Option<String>,
    /// The annotation, when it is a valid `ip:port`.
    address: Option<SocketAddr>,
    /// The public-key annotation's raw value.
    key_annotation: Option<String>,
    /// The key the node's ballots are verified against (when the annotation is valid).
    public_key: Option<PublicKey>,
    /// The view annotation's raw value (`--verdict-writer=cloud`).
    view_annotation: Option<String>,
}

impl NodeRecord {
    fn from_meta(meta: &ObjectMeta) -> Self {
        let annotation = |key: &str| meta.annotations.as_ref().and_then(|a| a.get(key)).cloned();
        let address_annotation = annotation(EDGE_HEALTH_ADDRESS_ANNOTATION);
        let address = address_annotation.as_deref().and_then(|a| a.parse().ok());
        let key_annotation = annotation(EDGE_HEALTH_PUBLIC_KEY_ANNOTATION);
        let public_key = key_annotation.as_deref().and_then(PublicKey::from_annotation);
        let view_annotation = annotation(EDGE_HEALTH_UNHEALTHY_VIEW_ANNOTATION);
        Self {
            cached: peer_cache::trimmed(meta),
            observed: ObservedNode::from_meta(meta),
            address_annotation,
            address,
            key_annotation,
            public_key,
            view_annotation,
        }
    }
}

struct UnitVote {
    table: VoteTable,
    schedule: Schedule,
    /// The ballots this node passes on to the unit's members.
    relay: Relay,
}

struct Crypto {
    key: Vec<u8>,
    signer: Signer,
    verifier: Verifier,
    /// This node's own key: it signs the ballots it casts.
    signing: SigningKey,
}

struct State {
    membership: UnitMembership,
    units: BTreeMap<UnitId, UnitVote>,
    nodes: BTreeMap<String, NodeRecord>,
    crypto: Crypto,
    indirect: IndirectProbes,
    /// Per node: when the first ballot against its standing verdict was recorded (for
    /// the vote latency).
    dissent: BTreeMap<String, Timestamp>,
    view: LocalVerdicts,
    /// The `edge-health-config` data last applied (for the peer cache).
    node_unit_config: Option<BTreeMap<String, String>>,
    /// Counts changes to the Nodes or the ConfigMap (the peer cache is rewritten when it moves).
    generation: u64,
    /// The first period whose evaluation may be written or published: a whole vote window
    /// after the start. Before it the table holds too few ballots, and every verdict it
    /// reached would read Undecided: written, it would withdraw the whole unit's
    /// protection at every restart. The last view published before the restart stays.
    warm_from: Period,
    /// The last period evaluated.
    evaluated: Option<Period>,
}

/// The daemon's state; shared by its tasks and its HTTP handlers.
pub struct Daemon {
    settings: Settings,
    clock: PeriodClock,
    metrics: Arc<Metrics>,
    state: Mutex<State>,
}

impl Daemon {
    /// `key`: the contents of --hmac-key-file; `signing`: this node's own key (see
    /// [`crate::ballot`]); `now`: the start (see [`Signer::new`]).
    pub fn new(
        settings: Settings,
        metrics: Arc<Metrics>,
        key: &[u8],
        signing: SigningKey,
        now: Timestamp,
    ) -> Result<Self, KeyError> {
        let clock = PeriodClock::new(settings.protocol.period).expect("validated: the period is at least 1ms");
        let crypto = Crypto::new(key, signing, &settings, now)?;
        let local = settings.node_name.clone();
        let state = State {
            membership: UnitMembership::new(local.clone(), settings.unit_source.clone()),
            units: BTreeMap::new(),
            nodes: BTreeMap::new(),
            crypto,
            indirect: IndirectProbes::new(settings.protocol.indirect_timeout, now.as_unix_millis()),
            dissent: BTreeMap::new(),
            view: LocalVerdicts { node: local, ..LocalVerdicts::default() },
            node_unit_config: None,
            generation: 0,
            // the start's period is partial: the window counts from the next one
            warm_from: Period(clock.period_at(now).0.saturating_add(settings.protocol.vote_window)),
            evaluated: None,
        };
        Ok(Self { settings, clock, metrics, state: Mutex::new(state) })
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn clock(&self) -> PeriodClock {
        self.clock
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    fn local(&self) -> &str {
        &self.settings.node_name
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    // ---- inputs from the API ----

    /// A Node was added or its metadata changed (also: the answer to this daemon's patch).
    pub fn apply_node(&self, meta: &ObjectMeta) {
        let Some(name) = meta.name.as_deref() else { return };
        let mut st = self.lock();
        st.generation += 1;
        st.nodes.insert(name.to_string(), NodeRecord::from_meta(meta));
        let change = st.membership.apply_node(name, &labels(meta), runs_edge_health(meta));
        self.membership_changed(&mut st, change);
    }

    pub fn delete_node(&self, name: &str) {
        let mut st = self.lock();
        st.generation += 1;
        st.nodes.remove(name);
        let change = st.membership.delete(name);
        self.membership_changed(&mut st, change);
    }

    /// A (re)list: these are all the Nodes there are.
    pub fn replace_nodes(&self, metas: &[ObjectMeta]) {
        let mut st = self.lock();
        st.generation += 1;
        st.nodes = metas.iter().filter_map(|meta| Some((meta.name.clone()?, NodeRecord::from_meta(meta)))).collect();
        let change = st.membership.replace_all_nodes(
            metas.iter().filter_map(|meta| Some((meta.name.clone()?, labels(meta), runs_edge_health(meta)))),
        );
        self.membership_changed(&mut st, change);
    }

    /// The `edge-health-config` ConfigMap's data (`None`: there is none).
    pub fn set_node_unit_config(&self, data: Option<&BTreeMap<String, String>>) {
        let mut st = self.lock();
        st.generation += 1;
        st.node_unit_config = data.cloned();
        let change = st.membership.set_node_unit_check(NodeUnitCheck::from_config_map(data));
        self.membership_changed(&mut st, change);
    }

    /// What the peer cache should hold now, and the generation it is of.
    pub fn peer_cache(&self) -> (u64, PeerCache) {
        let st = self.lock();
        let nodes = st.nodes.values().map(|record| record.cached.clone()).collect();
        (st.generation, PeerCache { nodes, node_unit_config: st.node_unit_config.clone() })
    }

    /// Starts from a peer cache (before the API server has answered).
    pub fn restore(&self, cache: &PeerCache) {
        if matches!(self.settings.unit_source, crate::membership::UnitSource::NodeUnits) {
            self.set_node_unit_config(cache.node_unit_config.as_ref());
        }
        self.replace_nodes(&cache.nodes);
    }

    fn membership_changed(&self, st: &mut State, change: MembershipChange) {
        if change.is_empty() {
            return;
        }
        let State { membership, units, crypto, .. } = st;
        if change.units_changed {
            let k = self.settings.protocol.probes_per_period;
            let keep = usize::try_from(self.settings.protocol.vote_window).unwrap_or(usize::MAX).saturating_add(2);
            let mut previous = std::mem::take(units);
            for unit in membership.units() {
                let vote = match previous.remove(&unit.id) {
                    Some(vote) if vote.schedule.members() == unit.members.as_slice() => vote,
                    // the table forgets departed members at its next evaluation
                    Some(vote) => UnitVote { schedule: Schedule::new(&unit.members, k, keep), ..vote },
                    None => UnitVote {
                        table: VoteTable::new(self.settings.protocol.vote_window, self.settings.protocol.vote_rule),
                        schedule: Schedule::new(&unit.members, k, keep),
                        relay: Relay::new(self.settings.protocol.relay_spread),
                    },
                };
                units.insert(unit.id.clone(), vote);
            }
        }
        if !change.left.is_empty() {
            crypto.verifier.retain_senders(|n| membership.is_peer(n));
        }
        self.metrics.peers.set(i64::try_from(membership.peers().len()).unwrap_or(i64::MAX));
        tracing::info!(joined = ?change.joined, left = ?change.left, units = ?membership.units().iter().map(|u| &u.id).collect::<Vec<_>>(),
            peers = membership.peers().len(), "unit membership changed");
    }

    /// A new --hmac-key-file content; `Ok(true)` when the key changed. Frames are sealed
    /// with the new key at once; the old key is still accepted for
    /// --key-rotation-overlap (see [`Verifier::rotate`]).
    pub fn reload_key(&self, key: &[u8], now: Timestamp) -> Result<bool, KeyError> {
        let mut st = self.lock();
        if st.crypto.key == key {
            return Ok(false);
        }
        let hmac = HmacKey::new(key)?;
        let crypto = &mut st.crypto;
        crypto.key = key.to_vec();
        crypto.signer.rotate(hmac.clone());
        crypto.verifier.rotate(hmac, now.saturating_add(self.settings.key_rotation_overlap));
        Ok(true)
    }

    // ---- the exchange ----

    /// Opens one frame a peer sent.
    pub fn receive(&self, frame: &[u8], now: Timestamp) -> Received {
        let mut st = self.lock();
        let st = &mut *st;
        let (membership, nodes) = (&st.membership, &st.nodes);
        let sender_key =
            |n: &str| membership.is_peer(n).then(|| nodes.get(n).and_then(|node| node.public_key)).flatten();
        let opened = st.crypto.verifier.open(frame, now, sender_key);
        let message = match opened {
            Ok(message) => message,
            Err(rejection) => {
                self.metrics.rejected(rejection);
                return Received::Rejected(rejection);
            }
        };
        match message.payload {
            Payload::Results { ballots } => {
                self.accepted("results");
                let mut budget = ForgeryBudget::per_frame();
                'frame: for (checker, by_target) in &ballots {
                    for (target, signed) in by_target {
                        let outcome = self.record(st, checker, target, Cast::Received(signed), now);
                        if let Err(refused) = outcome {
                            self.metrics.ballot_refused(refused);
                            if refused == BallotIgnored::BadSignature {
                                tracing::debug!(sender = %message.sender, %checker, %target, "ballot with a bad signature");
                            }
                        }
                        if !budget.goes_on(outcome) {
                            self.metrics.frames_dropped_for_forgeries.inc();
                            tracing::warn!(sender = %message.sender, "a frame carried forged ballots: the rest of it is dropped");
                            break 'frame;
                        }
                    }
                }
                Received::Results
            }
            Payload::ProbeRequest { id, target, nonce } => {
                self.accepted("probe_request");
                let address = st.nodes.get(&target).and_then(|n| n.address);
                match address {
                    Some(address) if should_help(&target, |n| st.membership.is_peer(n)) => {
                        Received::Help { requester: message.sender, id, target, address, nonce }
                    }
                    _ => Received::Declined,
                }
            }
            Payload::ProbeAnswer { id, target, reachable, proof } => {
                self.accepted("probe_answer");
                // "reachable" counts only with the target's proof over this probe's nonce
                let proven = reachable && {
                    let local = self.local();
                    let checked = match st.indirect.challenge(id) {
                        Some((asked, nonce)) if asked == target => {
                            let key = st.nodes.get(&target).and_then(|n| n.public_key);
                            liveness::verify(proof.as_ref(), &target, local, &nonce, key.as_ref())
                        }
                        // not an outstanding probe: indirect.answer ignores it anyway
                        _ => Err(ProofRefused::OtherChallenge),
                    };
                    self.metrics.proof(checked);
                    if let Err(refused) = checked {
                        tracing::info!(helper = %message.sender, target_node = %target, reason = refused.metric_label(),
                            "a helper's \"reachable\" without the target's proof: not believed");
                    }
                    checked.is_ok()
                };
                let conclusion = st.indirect.answer(&message.sender, id, &target, proven);
                let settled = conclusion.is_some();
                if let Some(conclusion) = conclusion {
                    self.conclude_locked(st, conclusion, now);
                }
                Received::Answer { settled }
            }
            Payload::Challenge { checker, nonce } => {
                self.accepted("challenge");
                // for a peer, asked by that peer or by a helper of the same unit
                if checker != message.sender && !st.membership.is_peer(&checker) {
                    return Received::Declined;
                }
                let proof = liveness::prove(&st.crypto.signing, self.local(), &checker, nonce);
                Received::Challenged(st.crypto.seal(now, Some(message.sender), Payload::Proof { proof }))
            }
            Payload::Proof { proof } => {
                self.accepted("proof");
                Received::Proof { from: message.sender, proof }
            }
        }
    }

    /// The reply `frame` to a challenge this node sent `target` (itself, or as a helper for
    /// `checker`): the target's proof over `nonce`, verified against the key it publishes.
    pub fn take_proof(
        &self,
        frame: &[u8],
        target: &str,
        checker: &str,
        nonce: &Nonce,
        now: Timestamp,
    ) -> Result<LivenessProof, ProofRefused> {
        let checked = match self.receive(frame, now) {
            Received::Proof { from, proof } if from == target => {
                let key = self.lock().nodes.get(target).and_then(|n| n.public_key);
                liveness::verify(Some(&proof), target, checker, nonce, key.as_ref()).map(|()| proof)
            }
            // refused by the verifier (an impostor without the target's frame key or its
            // node key), or not a proof from the target
            Received::Rejected(Rejection::BadSignature) => Err(ProofRefused::BadSignature),
            _ => Err(ProofRefused::Missing),
        };
        self.metrics.proof(checked.as_ref().map(|_| ()).map_err(|e| *e));
        checked
    }

    /// A fresh frame challenging `target` to prove it is alive to `checker` (this node, or
    /// the peer it helps).
    pub fn seal_challenge(&self, target: &str, checker: &str, nonce: Nonce, now: Timestamp) -> Vec<u8> {
        let payload = Payload::Challenge { checker: checker.to_string(), nonce };
        self.lock().crypto.seal(now, Some(target.to_string()), payload)
    }

    fn accepted(&self, kind: &'static str) {
        self.metrics.messages_accepted.get_or_create(&KindLabel { kind }).inc();
    }

    /// Seals the answer to a probe request this node ran: reachable only with the target's
    /// proof for the requester.
    pub fn seal_answer(
        &self,
        requester: &str,
        id: u64,
        target: &str,
        proof: Option<LivenessProof>,
        now: Timestamp,
    ) -> Vec<u8> {
        let payload = Payload::ProbeAnswer { id, target: target.to_string(), reachable: proof.is_some(), proof };
        self.lock().crypto.seal(now, Some(requester.to_string()), payload)
    }

    /// A fresh frame (its own sequence number) for one attempt of an indirect probe request.
    pub fn seal_request(&self, request: &OutgoingRequest, now: Timestamp) -> Vec<u8> {
        let payload = Payload::ProbeRequest { id: request.id, target: request.target.clone(), nonce: request.nonce };
        self.lock().crypto.seal(now, Some(request.helper.clone()), payload)
    }

    /// A helper's reply to this node's probe request (a sealed answer, verified like any
    /// frame). Returns whether it settled the probe.
    pub fn take_answer(&self, frame: &[u8], now: Timestamp) -> bool {
        matches!(self.receive(frame, now), Received::Answer { settled: true })
    }

    // ---- one period ----

    /// The peers this node probes in `period`: in every unit, its assigned targets and
    /// those it stands by for (see [`VoteTable::targets`]).
    pub fn plan(&self, period: Period) -> Vec<PlannedProbe> {
        let mut st = self.lock();
        let st = &mut *st;
        let mut targets: BTreeMap<String, Option<SocketAddr>> = BTreeMap::new();
        for vote in st.units.values_mut() {
            let assignment = vote.schedule.assignment(period);
            for target in vote.table.targets(self.local(), period, &assignment) {
                targets.insert(target.to_string(), st.nodes.get(target).and_then(|n| n.address));
            }
        }
        targets.into_iter().map(|(target, address)| PlannedProbe { target, address }).collect()
    }

    /// The direct probe of `target` for `period` (challenged with `nonce`) ended: concludes,
    /// or returns the indirect requests to send (to helpers with an address, not held
    /// unhealthy), which pass the same nonce on.
    pub fn direct_result(
        &self,
        target: &str,
        period: Period,
        reachable: bool,
        nonce: Nonce,
        now: Timestamp,
    ) -> AfterDirect {
        let mut st = self.lock();
        let st = &mut *st;
        let local = self.local();
        let assignment = st.units.values_mut().find_map(|vote| {
            let assignment = vote.schedule.assignment(period);
            (assignment.contains(local) && assignment.contains(target)).then_some(assignment)
        });
        let helpers: Vec<String> = match &assignment {
            Some(assignment) => {
                let (units, nodes) = (&st.units, &st.nodes);
                let excluded = |h: &str| {
                    units.values().any(|v| v.table.verdict(h) == Verdict::Unhealthy)
                        || nodes.get(h).and_then(|n| n.address).is_none()
                };
                let count = self.settings.protocol.indirect_helpers;
                assignment.helpers(local, target, count, excluded).into_iter().map(str::to_string).collect()
            }
            None => Vec::new(),
        };
        let helpers: Vec<&str> = helpers.iter().map(String::as_str).collect();
        match st.indirect.direct_result(target, period, reachable, nonce, &helpers, now) {
            DirectStep::Concluded(conclusion) => {
                self.conclude_locked(st, conclusion, now);
                AfterDirect::Concluded
            }
            DirectStep::Ask(requests) => AfterDirect::Ask(
                requests
                    .into_iter()
                    .filter_map(|request| {
                        let address = st.nodes.get(&request.helper)?.address?;
                        Some(OutgoingRequest {
                            helper: request.helper,
                            address,
                            id: request.id,
                            target: request.target,
                            nonce: request.nonce,
                        })
                    })
                    .collect(),
            ),
        }
    }

    /// Concludes (unhealthy) every indirect probe whose deadline has passed.
    pub fn expire(&self, now: Timestamp) {
        let mut st = self.lock();
        for conclusion in st.indirect.expire(now) {
            self.conclude_locked(&mut st, conclusion, now);
        }
    }

    fn conclude_locked(&self, st: &mut State, conclusion: Conclusion, now: Timestamp) {
        let basis = match &conclusion.basis {
            Basis::Direct => "direct",
            Basis::Helper(_) => "helper",
            Basis::AllHelpersFailed => "all_helpers_failed",
            Basis::Deadline => "deadline",
            Basis::NoHelpers => "no_helpers",
        };
        let verdict = if conclusion.healthy { "healthy" } else { "unhealthy" };
        self.metrics.ballots.get_or_create(&BallotLabels { verdict, basis }).inc();
        if !conclusion.healthy {
            tracing::info!(target_node = %conclusion.target, period = conclusion.period.0, basis = ?conclusion.basis,
                "peer unreachable");
        }
        let ballot = Ballot { period: conclusion.period, healthy: conclusion.healthy };
        let local = self.local().to_string();
        // an own ballot no unit table takes (a membership change raced the probe) is dropped
        let _ = self.record(st, &local, &conclusion.target, Cast::Own(ballot), now);
    }

    /// Records one checker's ballot in every unit table holding both, passes it on when it
    /// is new (see [`crate::relay`]; own ballots signed here, received ones with their
    /// signature unchanged), and notes when it goes against the standing verdict. `Err`:
    /// no table took it, and why the last one refused it.
    fn record(
        &self,
        st: &mut State,
        checker: &str,
        target: &str,
        cast: Cast<'_>,
        now: Timestamp,
    ) -> Result<(), BallotIgnored> {
        let period = self.clock.period_at(now);
        let local = self.local();
        let key = st.nodes.get(checker).and_then(|n| n.public_key);
        let (ballot, mut signed) = match cast {
            Cast::Own(ballot) => (ballot, None),
            Cast::Received(signed) => (signed.ballot(), Some(*signed)),
        };
        let mut outcome = Err(BallotIgnored::NotAMember);
        for vote in st.units.values_mut() {
            let members = vote.schedule.members();
            if members.binary_search_by(|m| m.as_str().cmp(checker)).is_err()
                || members.binary_search_by(|m| m.as_str().cmp(target)).is_err()
            {
                continue;
            }
            let own = matches!(cast, Cast::Own(_));
            let relays = own || relays_received(members.len(), self.settings.protocol.relay_fanout);
            let recorded = match &cast {
                Cast::Own(ballot) => vote.table.record(checker, target, *ballot, period, &mut vote.schedule),
                Cast::Received(signed) => {
                    let verify = || check_signature(key.as_ref(), checker, target, signed);
                    vote.table.record_received(local, checker, target, signed, period, &mut vote.schedule, verify)
                }
            };
            if recorded == Ok(Recorded::New) && relays {
                let signed = *signed.get_or_insert_with(|| st.crypto.signing.sign(checker, target, ballot));
                vote.relay.learned(checker, target, signed);
            }
            match recorded {
                Ok(_) => outcome = Ok(()),
                Err(refused) if outcome.is_err() => outcome = Err(refused),
                Err(_) => {}
            }
            if recorded.is_ok() {
                let against = match vote.table.verdict(target) {
                    Verdict::Undecided => true,
                    Verdict::Healthy => !ballot.healthy,
                    Verdict::Unhealthy => ballot.healthy,
                };
                if against {
                    st.dissent.entry(target.to_string()).or_insert(now);
                }
            }
        }
        outcome
    }

    /// Relay round `round` of the current period: per unit with ballots to pass on, the
    /// sealed frame and the round's peers (with an address, not held unhealthy).
    pub fn relay_round(&self, round: u32, now: Timestamp) -> Vec<RelayFrame> {
        let mut st = self.lock();
        let st = &mut *st;
        let period = self.clock.period_at(now);
        let window = self.settings.protocol.vote_window;
        let window_start = Period(period.0.saturating_sub(window.saturating_sub(1)));
        let fanout = self.settings.protocol.relay_fanout;
        let mut frames = Vec::new();
        let held_unhealthy: std::collections::BTreeSet<String> = st
            .units
            .values()
            .flat_map(|v| v.table.verdicts(v.schedule.members()))
            .filter(|(_, verdict)| *verdict == Verdict::Unhealthy)
            .map(|(node, _)| node.to_string())
            .collect();
        let mut sends: Vec<(crate::relay::BallotsByChecker, Vec<(String, SocketAddr)>)> = Vec::new();
        for vote in st.units.values_mut() {
            let Some(ballots) = vote.relay.round(window_start) else { continue };
            let assignment = vote.schedule.assignment(period);
            let excluded =
                |peer: &str| held_unhealthy.contains(peer) || st.nodes.get(peer).and_then(|n| n.address).is_none();
            let peers: Vec<(String, SocketAddr)> = assignment
                .relay_peers(self.local(), round, fanout, excluded)
                .into_iter()
                .filter_map(|peer| Some((peer.to_string(), st.nodes.get(peer)?.address?)))
                .collect();
            sends.push((ballots, peers));
        }
        for (ballots, peers) in sends {
            if peers.is_empty() {
                continue;
            }
            let frame = st.crypto.seal(now, None, Payload::Results { ballots });
            frames.push(RelayFrame { frame, peers });
        }
        frames
    }

    /// Ends `period`: evaluates every unit's table, refreshes the served view and returns
    /// the patches this node is the writer of (the Nodes it observes differ from the
    /// verdicts; retried every period until the Node says what the verdict does).
    pub fn evaluate(&self, period: Period, now: Timestamp) -> Vec<AnnotationPatch> {
        let mut st = self.lock();
        st.evaluated = Some(period);
        let warm = period >= st.warm_from;
        let State { membership, units, nodes, dissent, view, .. } = &mut *st;
        for (unit, vote) in units.iter_mut() {
            for change in vote.table.evaluate(period, &mut vote.schedule) {
                let to = change.to.as_str();
                self.metrics.verdict_changes.get_or_create(&VerdictLabel { verdict: to }).inc();
                let latency = dissent.remove(&change.node).map(|since| now.distance(since));
                if let Some(latency) = latency {
                    self.metrics.vote_latency.observe(latency.as_secs_f64());
                }
                tracing::info!(node = %change.node, from = change.from.as_str(), to, unit = ?unit,
                    eligible = change.tally.eligible, healthy = change.tally.healthy,
                    unhealthy = change.tally.unhealthy, latency = ?latency, "verdict changed");
            }
        }
        // dissent that has not changed a verdict within a window (and a period) is noise
        let horizon = self
            .clock
            .length()
            .saturating_mul(u32::try_from(self.settings.protocol.vote_window.saturating_add(1)).unwrap_or(u32::MAX));
        dissent.retain(|_, since| now.distance(*since) <= horizon);

        let mut served = BTreeMap::new();
        let local = self.settings.node_name.as_str();
        let mut writes = Vec::new();
        for unit in membership.units() {
            let Some(vote) = units.get_mut(&unit.id) else { continue };
            for member in &unit.members {
                if !served.contains_key(member) {
                    let tally = vote.table.tally(member, period, &mut vote.schedule);
                    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
                    served.insert(
                        member.clone(),
                        NodeVerdict {
                            verdict: vote.table.verdict(member),
                            eligible: count(tally.eligible),
                            healthy: count(tally.healthy),
                            unhealthy: count(tally.unhealthy),
                        },
                    );
                }
                if self.settings.verdict_writer == VerdictWriter::Cloud
                    || !warm
                    || membership.home_unit(member).as_ref() != Some(&unit.id)
                    || writer_of(&unit.members, member, &vote.table) != Some(local)
                {
                    continue;
                }
                if let Some(patch) =
                    nodes.get(member).and_then(|n| annotation_patch(&n.observed, vote.table.verdict(member)))
                {
                    writes.push(patch);
                }
            }
        }
        for verdict in [Verdict::Undecided, Verdict::Healthy, Verdict::Unhealthy] {
            let count = served.values().filter(|v| v.verdict == verdict).count();
            self.metrics
                .verdicts
                .get_or_create(&VerdictLabel { verdict: verdict.as_str() })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
        view.identities = served
            .keys()
            .filter_map(|member| {
                let node = nodes.get(member)?;
                // only identities this daemon would verify ballots with
                node.public_key?;
                node.address?;
                Some((
                    member.clone(),
                    PeerIdentity {
                        public_key: node.key_annotation.clone()?,
                        address: node.address_annotation.clone()?,
                    },
                ))
            })
            .collect();
        view.nodes = served;
        writes
    }

    /// What `GET /verdicts` serves.
    pub fn view(&self) -> LocalVerdicts {
        self.lock().view.clone()
    }

    /// Whether this node's Node carries `address` in its address annotation and this
    /// node's public key in its key annotation.
    pub fn address_state(&self, address: &str) -> AddressState {
        let st = self.lock();
        let key = st.crypto.signing.public_key().to_annotation();
        match st.nodes.get(self.local()) {
            None => AddressState::NoNode,
            Some(node)
                if node.address_annotation.as_deref() == Some(address)
                    && node.key_annotation.as_deref() == Some(key.as_str()) =>
            {
                AddressState::Published
            }
            Some(_) => AddressState::Stale,
        }
    }

    /// With `--verdict-writer=cloud`: the view annotation this node's Node should carry
    /// (the members of its units it holds Unhealthy and Undecided, and which members those
    /// are: see `edgegrid_core::unit_verdict::View`), when it does not carry it yet. Nothing
    /// before a whole window has been evaluated since the start.
    pub fn view_to_publish(&self) -> Option<String> {
        if self.settings.verdict_writer != VerdictWriter::Cloud {
            return None;
        }
        let st = self.lock();
        if st.evaluated.is_none_or(|period| period < st.warm_from) {
            return None;
        }
        let held = |verdict: Verdict| -> BTreeSet<String> {
            st.view.nodes.iter().filter(|(_, v)| v.verdict == verdict).map(|(n, _)| n.clone()).collect()
        };
        let members = st.view.nodes.keys().map(String::as_str).chain([self.local()]);
        let wanted = edgegrid_core::unit_verdict::View {
            members: edgegrid_core::unit_verdict::members_version(members),
            unhealthy: held(Verdict::Unhealthy),
            undecided: held(Verdict::Undecided),
        }
        .format();
        let node = st.nodes.get(self.local())?;
        (node.view_annotation.as_deref() != Some(wanted.as_str())).then_some(wanted)
    }

    /// This node's public key as its annotation carries it.
    pub fn public_key_annotation(&self) -> String {
        self.lock().crypto.signing.public_key().to_annotation()
    }
}

impl Crypto {
    /// Seals and signs one message of this node's.
    fn seal(&mut self, now: Timestamp, recipient: Option<String>, payload: Payload) -> Vec<u8> {
        self.signer.seal(&self.signing, now, recipient, payload)
    }

    fn new(key: &[u8], signing: SigningKey, settings: &Settings, now: Timestamp) -> Result<Self, KeyError> {
        let hmac = HmacKey::new(key)?;
        let local = settings.node_name.clone();
        Ok(Self {
            key: key.to_vec(),
            signer: Signer::new(hmac.clone(), local.clone(), now),
            verifier: Verifier::new(hmac, local, settings.protocol.max_clock_skew, now)
                .with_budget(FrameBudget::for_protocol(&settings.protocol)),
            signing,
        })
    }
}

fn labels(meta: &ObjectMeta) -> Labels {
    meta.labels.clone().unwrap_or_default()
}

/// Whether the Node publishes this daemon's address: only then is it a member (see
/// [`crate::membership`]).
fn runs_edge_health(meta: &ObjectMeta) -> bool {
    crate::membership::runs_edge_health(meta.annotations.as_ref())
}
