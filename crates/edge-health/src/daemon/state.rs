//! The daemon's state between its I/O, and every decision it takes, by calling the pure
//! core the way `crate::sim` does: node metadata feeds [`UnitMembership`] and one
//! [`VoteTable`] + [`Schedule`] per unit; frames in are opened by the [`Verifier`] and
//! their ballots recorded; the period's probe plan, indirect requests, results frame,
//! evaluation and Node patches come out as data for the I/O tasks to carry out.
//!
//! One lock, never held across an await: every method here and in the submodules (one idea
//! each) is synchronous, so no I/O can ever stall a decision, and the tasks interleave only
//! between whole steps.

mod exchange;
mod membership;
mod probing;
mod published;
mod verdicts;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use edgegrid_core::keys::{
    EDGE_HEALTH_ADDRESS_ANNOTATION, EDGE_HEALTH_PUBLIC_KEY_ANNOTATION, EDGE_HEALTH_UNHEALTHY_VIEW_ANNOTATION,
};
use edgegrid_core::unit::local_verdicts::LocalVerdicts;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::cli::Settings;
use super::metrics::Metrics;
use super::peer_cache;
use crate::ballot::{Ballot, SignedBallot};
use crate::indirect::IndirectProbes;
use crate::liveness::{LivenessProof, Nonce};
use crate::membership::{UnitId, UnitMembership};
use crate::message::{FrameBudget, HmacKey, KeyError, Payload, Rejection, Signer, Verifier};
use crate::node_key::{PublicKey, SigningKey};
use crate::relay::Relay;
use crate::selection::Schedule;
use crate::time::{Period, PeriodClock, Timestamp};
use crate::vote::{ObservedNode, VoteTable};

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
