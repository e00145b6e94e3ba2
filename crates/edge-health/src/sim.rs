//! A whole unit in one process: `n` members running the real protocol (membership,
//! selection, checks scored by the real [`CheckConfig`], indirect probes, sealed and
//! verified messages, vote tables, writer rule, annotation patches) over a simulated
//! network that loses each traversal with a fixed probability, on a simulated clock, from
//! a seed. Same seed, same run.
//!
//! It backs the tests that the protocol detects a dead member within three periods and
//! accuses nobody alive under loss, and the benchmark of units of 50 to 2,000 members.
//! Every member keeps its vote table (it is also what tells a member which ballots are
//! new to it and so are relayed, see [`crate::relay`]).
//!
//! One period: every live member probes its assigned peers (indirect probes included)
//! at the period's start; then the period's relay rounds run in turn, each member sending
//! the ballots it learned to its round's peers, and ballots received in a round are
//! passed on from the next round; at the end every member evaluates and the writers write.
//!
//! Attackers: [`Sim::corrupt`] hands a member to an attacker who holds everything that
//! node holds (the unit's frame key, its own signing key) and lies about its own checks,
//! relays nothing, and sends every other member, every relay round, the frames its
//! [`Attack`]s make. The Byzantine tests run on it.
//!
//! What is simplified: delivery is instantaneous or lost (no latency; indirect answers
//! either arrive before the deadline or never), clocks agree, every conclusion (indirect
//! ones included) is reached before the first relay round, and a probe attempt succeeds
//! when the target is alive and neither the request nor the response is lost.

use std::collections::{BTreeMap, BTreeSet};

use edgegrid_prober::Outcome;

use crate::ballot::{Ballot, BallotIgnored, ForgeryBudget, SignedBallot, check_signature};
use crate::config::{CheckConfig, CheckKind, CheckSpec, ProtocolConfig};
use crate::indirect::{Conclusion, DirectStep, IndirectProbes, should_help};
use crate::liveness::{self, LivenessProof, Nonce};
use crate::membership::{Labels, UnitMembership, UnitSource};
use crate::message::{HmacKey, Payload, Signer, Verifier};
use crate::node_key::{PublicKey, SigningKey};
use crate::relay::{BallotsByChecker, Relay, next_round, relays_received};
use crate::selection::{Schedule, splitmix64};
use crate::time::{Period, PeriodClock, Timestamp};
use crate::vote::{ObservedNode, Recorded, Verdict, VerdictChange, VoteTable, annotation_patch, writer_of};

/// The label key the simulated unit shares.
const UNIT_KEY: &str = "sim.edgegrid.io/unit";

#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Nodes running this daemon, named `edge-00000`, `edge-00001`, ...
    pub nodes: usize,
    /// Nodes of the same unit running SuperEdge's edge-health instead (a unit mid-migration),
    /// named `edge-0-superedge-000`, ... (before every other name, so the lowest-named
    /// node, the first writer candidate, is one of them). They publish no address and no
    /// key, never send or answer this daemon's messages, and are alive.
    pub superedge_nodes: usize,
    pub protocol: ProtocolConfig,
    pub checks: CheckConfig,
    /// Per attempt of sending one message (`--message-timeout`): with the checks' worst
    /// case, how often a lost liveness challenge is tried again.
    pub message_timeout: std::time::Duration,
    /// Probability that one network traversal (a probe request or response, a message) is lost.
    pub loss: f64,
    pub seed: u64,
    /// When the simulation starts (periods are numbered from the epoch).
    pub start: Timestamp,
}

impl SimConfig {
    /// The unit the tests and the benchmark simulate: the default protocol, one TCP check
    /// (kubelet's port, 1 s timeout, 2 retries), a fixed start.
    pub fn reference(nodes: usize, loss: f64, seed: u64) -> Result<Self, crate::config::ConfigError> {
        let check = CheckSpec {
            kind: CheckKind::Tcp { port: 10250 },
            timeout: std::time::Duration::from_secs(1),
            retries: 2,
            weight: 1.0,
        };
        Ok(Self {
            nodes,
            superedge_nodes: 0,
            protocol: ProtocolConfig::default(),
            checks: CheckConfig::new(vec![check], 1.0)?,
            // the daemon's default
            message_timeout: std::time::Duration::from_secs(1),
            loss,
            seed,
            start: Timestamp::from_unix_millis(1_700_000_000_000),
        })
    }
}

/// A write to a Node, as the apiserver received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    pub writer: String,
    pub node: String,
    /// What the write makes the Node say.
    pub verdict: Verdict,
}

/// What happened in one period.
#[derive(Clone, Debug, Default)]
pub struct PeriodStats {
    pub period: Period,
    /// Probe attempts made (direct and on behalf of others), retries included.
    pub probe_attempts: u64,
    /// Indirect probe requests sent.
    pub indirect_requests: u64,
    /// Frames put on the network (every attempt of every message).
    pub frames_sent: u64,
    /// Their bytes.
    pub bytes_sent: u64,
    /// Ballots carried by the relay frames put on the network (a ballot in a frame sent
    /// to three peers counts three times).
    pub ballots_sent: u64,
    /// Frames a verifier accepted.
    pub frames_accepted: u64,
    /// Frames a verifier refused, by reason.
    pub frames_rejected: BTreeMap<&'static str, u64>,
    /// Liveness proofs not believed: helpers' "reachable" answers without the target's
    /// proof over the checker's nonce, and direct proofs that do not verify.
    pub proofs_refused: u64,
    /// Received ballots a vote table refused, by reason.
    pub ballots_refused: BTreeMap<&'static str, u64>,
    /// Signature verifications the members made: every received ballot new to its
    /// receiver, and every bad one (copies of a held ballot and cheap refusals need none).
    /// The simulation itself verifies each distinct signature once for all members.
    pub signatures_verified: u64,
    /// Ballots cast (conclusions reached), and how many of them said unhealthy.
    pub ballots: u64,
    pub unhealthy_ballots: u64,
    /// Verdict changes, by observer.
    pub changes: Vec<(String, VerdictChange)>,
    pub writes: Vec<Write>,
}

/// What an attacker holding a member sends besides lying about its own checks (see
/// [`Sim::corrupt`]). Every forged ballot says the opposite of the truth about its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Attack {
    /// Attack (a): ballots in the name of every checker assigned to every target this
    /// period, signed with the attacker's own key (it has no other).
    Forge,
    /// Attack (b): to each receiver, ballots naming the receiver as their checker.
    ClaimReceivers,
    /// Attack (c): forged ballots for the next period, and its own (validly signed) for
    /// the next period and for one far ahead.
    Future,
    /// Every signed ballot it ever received, sent again every round (dead nodes' old
    /// "healthy" ones included).
    Replay,
    /// Asked to help, it answers every target "reachable", dead ones included, with a
    /// "proof" signed by the only key it has, its own (see [`crate::liveness`]).
    ReviveDead,
    /// Its own ballots, validly signed and lying, about every other member every period:
    /// a standby's ballot is taken from any member of the unit (see [`crate::vote`]), so
    /// this much a liar may send and have counted, one voice per target.
    Everyone,
}

impl Attack {
    pub const ALL: [Attack; 6] =
        [Attack::Forge, Attack::ClaimReceivers, Attack::Future, Attack::Replay, Attack::ReviveDead, Attack::Everyone];
}

struct Member {
    name: String,
    alive: bool,
    /// Runs this daemon. A member that does not (SuperEdge's daemon instead) never probes,
    /// relays, answers or evaluates, and is never probed or asked for help (it publishes no
    /// address): the daemon keeps such nodes out of its units, so this is only reached
    /// when membership would let them in.
    runs: bool,
    key: SigningKey,
    /// Set: an attacker holds this member.
    attacks: Option<BTreeSet<Attack>>,
    /// What an attacker captured: every signed ballot received.
    captured: BTreeMap<(String, String, Period), SignedBallot>,
    signer: Signer,
    verifier: Verifier,
    indirect: IndirectProbes,
    table: VoteTable,
    /// This member's copy of the unit's schedule (each computes the same one).
    schedule: Schedule,
    relay: Relay,
}

/// The simulated unit.
pub struct Sim {
    config: SimConfig,
    clock: PeriodClock,
    now: Timestamp,
    members: Vec<String>,
    /// The unit's nodes running SuperEdge's edge-health (see [`SimConfig::superedge_nodes`]).
    superedge: Vec<String>,
    nodes: Vec<Member>,
    index: BTreeMap<String, usize>,
    /// The shared schedule every member probes by (each computes the same one).
    schedule: Schedule,
    /// The apiserver's view of the annotation: node -> its `nodeunhealth` value, with a
    /// version.
    annotations: BTreeMap<String, (Option<String>, u64)>,
    /// The first period whose verdicts are written: a whole window after the start (as the
    /// daemon: an empty table must not write Undecided over the unit).
    warm_from: Period,
    /// The public keys the members publish on their Nodes, as every member sees them.
    published: BTreeMap<String, PublicKey>,
    /// Signatures verified this period: each distinct one is verified once for every
    /// member (each would get the same answer; the count per member is kept in the stats).
    verified: std::collections::HashMap<(String, String, SignedBallot, PublicKey), Result<(), BallotIgnored>>,
    rng: u64,
}

/// Why a simulation cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Period(#[from] crate::time::ZeroPeriod),
}

impl Sim {
    pub fn new(config: SimConfig) -> Result<Self, SimError> {
        config.protocol.validate(&config.checks)?;
        let clock = PeriodClock::new(config.protocol.period)?;
        let names: Vec<String> = (0..config.nodes).map(|i| format!("edge-{i:05}")).collect();
        let superedge: Vec<String> = (0..config.superedge_nodes).map(|i| format!("edge-0-superedge-{i:03}")).collect();
        // every member derives the unit from node labels and published addresses, as the
        // daemon does
        let labels: Labels = [(UNIT_KEY.to_string(), "site-1".to_string())].into();
        let mut membership =
            UnitMembership::new(names.first().cloned().unwrap_or_default(), UnitSource::LabelKey(UNIT_KEY.into()));
        membership.replace_all_nodes(
            names
                .iter()
                .map(|n| (n.clone(), labels.clone(), true))
                .chain(superedge.iter().map(|n| (n.clone(), labels.clone(), false))),
        );
        let members = membership.units().first().map(|u| u.members.clone()).unwrap_or_default();
        let key = HmacKey::new(&splitmix64(config.seed).to_le_bytes().repeat(4)).expect("32-byte key");
        let keep = config.protocol.vote_window as usize + 2;
        let nodes: Vec<Member> = members
            .iter()
            .enumerate()
            .map(|(i, name)| Member {
                name: name.clone(),
                alive: true,
                runs: !superedge.contains(name),
                key: member_key(config.seed, i as u64),
                attacks: None,
                captured: BTreeMap::new(),
                signer: Signer::new(key.clone(), name.clone(), config.start),
                verifier: Verifier::new(key.clone(), name.clone(), config.protocol.max_clock_skew, config.start)
                    .with_budget(crate::message::FrameBudget::for_protocol(&config.protocol)),
                indirect: IndirectProbes::new(config.protocol.indirect_timeout, config.start.as_unix_millis()),
                table: VoteTable::new(config.protocol.vote_window, config.protocol.vote_rule),
                schedule: Schedule::new(&members, config.protocol.probes_per_period, keep),
                relay: Relay::new(config.protocol.relay_spread),
            })
            .collect();
        let index = members.iter().enumerate().map(|(i, n)| (n.clone(), i)).collect();
        let schedule = Schedule::new(&members, config.protocol.probes_per_period, keep);
        let annotations = members.iter().chain(&superedge).map(|n| (n.clone(), (None, 1))).collect();
        let published = nodes.iter().filter(|m| m.runs).map(|m| (m.name.clone(), m.key.public_key())).collect();
        // start at the beginning of the period after `start`
        let now = clock.start_of(clock.period_at(config.start).next());
        let warm_from = Period(clock.period_at(now).0 + config.protocol.vote_window);
        Ok(Self {
            warm_from,
            rng: splitmix64(config.seed ^ 0x5eed),
            config,
            clock,
            now,
            members,
            superedge,
            nodes,
            index,
            schedule,
            annotations,
            published,
            verified: std::collections::HashMap::new(),
        })
    }

    /// Hands `name` to an attacker (see [`Attack`]): from now on it lies about every check
    /// it makes, relays nothing and sends the frames of `attacks` to every other member.
    pub fn corrupt(&mut self, name: &str, attacks: impl IntoIterator<Item = Attack>) {
        if let Some(&i) = self.index.get(name) {
            self.nodes[i].attacks = Some(attacks.into_iter().collect());
        }
    }

    /// Re-images `name`: a new signing key, used at once. Its peers take ballots under it
    /// once [`Sim::publish_key`] has put it on the Node.
    pub fn new_key(&mut self, name: &str, seed: u64) {
        if let Some(&i) = self.index.get(name) {
            self.nodes[i].key = member_key(seed, i as u64);
        }
    }

    /// Publishes `name`'s current public key (the daemon patches its Node).
    pub fn publish_key(&mut self, name: &str) {
        if let Some(&i) = self.index.get(name) {
            self.published.insert(name.to_string(), self.nodes[i].key.public_key());
        }
    }

    pub fn members(&self) -> &[String] {
        &self.members
    }

    /// The unit's nodes running SuperEdge's edge-health (members or not).
    pub fn superedge(&self) -> &[String] {
        &self.superedge
    }

    /// Whether `name` runs this daemon (unknown names do not).
    fn runs(&self, name: &str) -> bool {
        self.index.get(name).is_some_and(|&i| self.nodes[i].runs)
    }

    /// The period the next [`Sim::run_period`] runs.
    pub fn next_period(&self) -> Period {
        self.clock.period_at(self.now)
    }

    /// Stops a member: it no longer probes, answers, sends or evaluates.
    pub fn kill(&mut self, name: &str) {
        if let Some(&i) = self.index.get(name) {
            self.nodes[i].alive = false;
        }
    }

    pub fn revive(&mut self, name: &str) {
        if let Some(&i) = self.index.get(name) {
            self.nodes[i].alive = true;
        }
    }

    pub fn is_alive(&self, name: &str) -> bool {
        self.index.get(name).is_some_and(|&i| self.nodes[i].alive)
    }

    /// What `observer`'s table says about `target` (None: not a member).
    pub fn verdict(&self, observer: &str, target: &str) -> Option<Verdict> {
        let member = &self.nodes[*self.index.get(observer)?];
        Some(member.table.verdict(target))
    }

    /// How many ballots of `period` `member`'s table holds.
    pub fn known_ballots(&self, member: &str, period: Period) -> usize {
        self.index.get(member).map_or(0, |&i| self.nodes[i].table.ballots().filter(|b| b.2.period == period).count())
    }

    /// The live members.
    pub fn live(&self) -> impl Iterator<Item = &str> {
        self.nodes.iter().filter(|m| m.alive).map(|m| m.name.as_str())
    }

    /// Whether the apiserver's Node carries `nodeunhealth: "yes"`: voted unhealthy.
    pub fn annotated(&self, node: &str) -> bool {
        self.annotation(node) == Some(edgegrid_core::keys::NODE_UNHEALTH_YES)
    }

    /// The apiserver's Node's `nodeunhealth` value.
    pub fn annotation(&self, node: &str) -> Option<&str> {
        self.annotations.get(node).and_then(|(value, _)| value.as_deref())
    }

    /// Runs one period: probes (with indirect probes), relay rounds, evaluation, writes.
    pub fn run_period(&mut self) -> PeriodStats {
        let period = self.clock.period_at(self.now);
        let start = self.clock.start_of(period);
        let mut stats = PeriodStats { period, ..PeriodStats::default() };
        self.verified.clear();
        let assignment = self.schedule.assignment(period);

        // 1. direct probes at the start of the period, indirect ones right after
        let probed_at = start;
        let mut conclusions: Vec<(usize, Conclusion)> = Vec::new();
        for c in 0..self.nodes.len() {
            if !self.nodes[c].alive || !self.nodes[c].runs {
                continue;
            }
            let checker = self.nodes[c].name.clone();
            let targets: Vec<&str> = self.nodes[c].table.targets(&checker, period, &assignment);
            for target in targets {
                if !self.runs(target) {
                    continue; // no address published: not probed, as the daemon skips it
                }
                let t = self.index[target];
                // as the daemon: the target's proof over a fresh nonce, and its checks
                let reachable = self.prove_alive(c, t, probed_at, &mut stats) && self.check(t, &mut stats);
                let nonce = self.nonce();
                let helpers = {
                    let held = |h: &str| self.held_unhealthy(c, h) || !self.runs(h);
                    assignment.helpers(&checker, target, self.config.protocol.indirect_helpers, held)
                };
                match self.nodes[c].indirect.direct_result(target, period, reachable, nonce, &helpers, probed_at) {
                    DirectStep::Concluded(conclusion) => conclusions.push((c, conclusion)),
                    DirectStep::Ask(requests) => {
                        for request in requests {
                            stats.indirect_requests += 1;
                            if let Some(conclusion) = self.indirect_round_trip(c, &request, probed_at, &mut stats) {
                                conclusions.push((c, conclusion));
                            }
                        }
                    }
                }
            }
        }
        let deadline = probed_at.saturating_add(self.config.protocol.indirect_timeout);
        for (c, member) in self.nodes.iter_mut().enumerate() {
            conclusions.extend(member.indirect.expire(deadline).into_iter().map(|conclusion| (c, conclusion)));
        }
        for (c, conclusion) in conclusions {
            let member = &mut self.nodes[c];
            // an attacker lies about every check it makes
            let healthy = conclusion.healthy != member.attacks.is_some();
            stats.ballots += 1;
            stats.unhealthy_ballots += u64::from(!healthy);
            member.cast(&conclusion.target, Ballot { period: conclusion.period, healthy }, period);
        }

        // 2. the relay rounds, evenly spread over the period
        let window_start = Period(period.0.saturating_sub(self.config.protocol.vote_window - 1));
        let next = self.schedule.assignment(period.next());
        let mut at = start;
        loop {
            let (round_period, round, sent_at) = next_round(self.clock, self.config.protocol.relay_rounds, at);
            if round_period != period {
                break;
            }
            self.relay_round(&assignment, &next, round, sent_at, window_start, period, &mut stats);
            at = sent_at.saturating_add(std::time::Duration::from_millis(1));
        }

        // 3. evaluation at the end of the period, then writes
        for o in 0..self.nodes.len() {
            let member = &mut self.nodes[o];
            if !member.alive || !member.runs {
                continue;
            }
            let (table, schedule) = (&mut member.table, &mut member.schedule);
            for change in table.evaluate(period, schedule) {
                stats.changes.push((member.name.clone(), change));
            }
            if period < self.warm_from {
                continue;
            }
            for target in &self.members {
                if writer_of(&self.members, target, table) != Some(member.name.as_str()) {
                    continue;
                }
                let (value, version) = &self.annotations[target];
                let observed = ObservedNode {
                    name: target.clone(),
                    resource_version: version.to_string(),
                    has_annotations: true,
                    unhealth: value.clone(),
                };
                if let Some(patch) = annotation_patch(&observed, table.verdict(target)) {
                    let value = match patch.verdict {
                        Verdict::Healthy => None,
                        Verdict::Unhealthy => Some(edgegrid_core::keys::NODE_UNHEALTH_YES.to_string()),
                        Verdict::Undecided => Some(edgegrid_core::keys::NODE_UNHEALTH_UNDECIDED.to_string()),
                    };
                    self.annotations.insert(target.clone(), (value, version + 1));
                    stats.writes.push(Write {
                        writer: member.name.clone(),
                        node: target.clone(),
                        verdict: patch.verdict,
                    });
                }
            }
        }

        self.now = self.clock.start_of(period.next());
        stats
    }

    /// Runs every configured check of one peer; true when its score reaches the line.
    fn check(&mut self, target: usize, stats: &mut PeriodStats) -> bool {
        let alive = self.nodes[target].alive;
        let attempts: Vec<u32> = self.config.checks.checks().iter().map(|c| c.attempts()).collect();
        let mut outcomes = Vec::with_capacity(attempts.len());
        for attempts in attempts {
            let mut ok = false;
            for _ in 0..attempts {
                stats.probe_attempts += 1;
                // request and response must both get through
                if alive && !self.lost() && !self.lost() {
                    ok = true;
                    break;
                }
            }
            outcomes.push(if ok { Outcome::Success } else { Outcome::Failure });
        }
        self.config.checks.passes(&outcomes)
    }

    /// A liveness challenge (`daemon::round::prove_alive`): member `via` (the checker, or a
    /// helper asked by it) challenges `t` for its proof over `checker`'s `nonce`, the
    /// challenge and the proof each a sealed frame; a lost exchange (a timeout) is tried
    /// again, freshly sealed, while the checks may still run (no token: the checks run
    /// alongside, as in `daemon::round::prove_alive`). The proof `t` signed, when one came
    /// back to `via`.
    fn challenge(
        &mut self,
        via: usize,
        t: usize,
        checker: &str,
        nonce: Nonce,
        now: Timestamp,
        stats: &mut PeriodStats,
    ) -> Option<LivenessProof> {
        let target = self.nodes[t].name.clone();
        let in_checks = self.config.checks.worst_case().as_millis() / self.config.message_timeout.as_millis().max(1);
        let attempts = in_checks.max(1);
        for _ in 0..attempts {
            let challenge = Payload::Challenge { checker: checker.to_string(), nonce };
            let frame = self.nodes[via].seal(now, Some(target.clone()), challenge);
            stats.frames_sent += 1;
            stats.bytes_sent += frame.len() as u64;
            if self.lost() || !self.nodes[t].alive || !self.nodes[t].runs {
                continue;
            }
            let Payload::Challenge { checker: asker, nonce: asked } = self.open(t, &frame, now, stats)?.payload else {
                return None;
            };
            let proof = liveness::prove(&self.nodes[t].key, &target, &asker, asked);
            let asked_by = self.nodes[via].name.clone();
            let answer = self.nodes[t].seal(now, Some(asked_by), Payload::Proof { proof });
            stats.frames_sent += 1;
            stats.bytes_sent += answer.len() as u64;
            if self.lost() {
                continue;
            }
            let Payload::Proof { proof } = self.open(via, &answer, now, stats)?.payload else { return None };
            return Some(proof);
        }
        None
    }

    /// The direct probe's proof: [`Self::challenge`] with a fresh nonce, verified against
    /// the target's published key.
    fn prove_alive(&mut self, c: usize, t: usize, now: Timestamp, stats: &mut PeriodStats) -> bool {
        let (checker, target) = (self.nodes[c].name.clone(), self.nodes[t].name.clone());
        let nonce = self.nonce();
        let Some(proof) = self.challenge(c, t, &checker, nonce, now, stats) else { return false };
        let proven = liveness::verify(Some(&proof), &target, &checker, &nonce, self.published.get(&target));
        stats.proofs_refused += u64::from(proven.is_err());
        proven.is_ok()
    }

    /// Sends one indirect request and, if it and the answer get through, feeds the answer;
    /// a failed round trip is tried again, freshly sealed, up to `send_retries` times (as
    /// the daemon does within the indirect timeout).
    fn indirect_round_trip(
        &mut self,
        c: usize,
        request: &crate::indirect::ProbeRequest,
        now: Timestamp,
        stats: &mut PeriodStats,
    ) -> Option<Conclusion> {
        let h = self.index[&request.helper];
        for _ in 0..=self.config.protocol.send_retries {
            let frame = self.nodes[c].seal(
                now,
                Some(request.helper.clone()),
                Payload::ProbeRequest { id: request.id, target: request.target.clone(), nonce: request.nonce },
            );
            stats.frames_sent += 1;
            stats.bytes_sent += frame.len() as u64;
            if self.lost() || !self.nodes[h].alive || !self.nodes[h].runs {
                continue;
            }
            let opened = self.open(h, &frame, now, stats)?;
            let Payload::ProbeRequest { id, target, nonce } = opened.payload else { return None };
            let helper_name = self.nodes[h].name.clone();
            if !should_help(&target, |n| n != helper_name && self.index.contains_key(n)) {
                return None; // declined: asking again changes nothing
            }
            let t = self.index[&target];
            let revives = self.nodes[h].attacks.as_ref().is_some_and(|a| a.contains(&Attack::ReviveDead));
            // a lying helper "proves" with the only key it has, its own
            let proof = if revives {
                Some(liveness::prove(&self.nodes[h].key, &target, &opened.sender, nonce))
            } else {
                // the helper's challenge to the target carries the asker's nonce; it relays
                // the proof when its checks pass too
                let proof = self.challenge(h, t, &opened.sender, nonce, now, stats);
                proof.filter(|_| self.check(t, stats))
            };
            let reachable = proof.is_some();
            let answer = self.nodes[h].seal(
                now,
                Some(opened.sender.clone()),
                Payload::ProbeAnswer { id, target, reachable, proof },
            );
            stats.frames_sent += 1;
            stats.bytes_sent += answer.len() as u64;
            if self.lost() {
                continue;
            }
            let opened = self.open(c, &answer, now, stats)?;
            let Payload::ProbeAnswer { id, target, reachable, proof } = opened.payload else { return None };
            let proven = reachable
                && self.nodes[c].indirect.challenge(id).is_some_and(|(asked, nonce)| {
                    asked == target
                        && liveness::verify(
                            proof.as_ref(),
                            &target,
                            &self.nodes[c].name,
                            &nonce,
                            self.published.get(&target),
                        )
                        .is_ok()
                });
            stats.proofs_refused += u64::from(reachable && !proven);
            return self.nodes[c].indirect.answer(&opened.sender, id, &target, proven);
        }
        None
    }

    fn open(
        &mut self,
        receiver: usize,
        frame: &[u8],
        now: Timestamp,
        stats: &mut PeriodStats,
    ) -> Option<crate::message::Message> {
        let (members, published) = (&self.index, &self.published);
        let sender_key = |n: &str| members.contains_key(n).then(|| published.get(n).copied()).flatten();
        match self.nodes[receiver].verifier.open(frame, now, sender_key) {
            Ok(message) => {
                stats.frames_accepted += 1;
                Some(message)
            }
            Err(rejection) => {
                *stats.frames_rejected.entry(rejection.metric_label()).or_default() += 1;
                None
            }
        }
    }

    /// One results message with its retries: delivered when any attempt gets through.
    fn send(&mut self, stats: &mut PeriodStats) -> Attempts {
        let mut sent = 0;
        for _ in 0..=self.config.protocol.send_retries {
            stats.frames_sent += 1;
            sent += 1;
            if !self.lost() {
                return Attempts { sent, delivered: true };
            }
        }
        Attempts { sent, delivered: false }
    }

    fn held_unhealthy(&self, member: usize, node: &str) -> bool {
        self.nodes[member].table.verdict(node) == Verdict::Unhealthy
    }

    /// One relay round: every live member with something to pass on seals one frame and
    /// sends it to the round's peers; what a member learns from a round it passes on from
    /// the next (deliveries are applied after every member has sent).
    #[allow(clippy::too_many_arguments)]
    fn relay_round(
        &mut self,
        assignment: &crate::selection::Assignment,
        next: &crate::selection::Assignment,
        round: u32,
        sent_at: Timestamp,
        window_start: Period,
        period: Period,
        stats: &mut PeriodStats,
    ) {
        let fanout = self.config.protocol.relay_fanout;
        let relays = relays_received(self.members.len(), fanout);
        let mut deliveries: Vec<(usize, std::rc::Rc<Vec<u8>>)> = Vec::new();
        for s in 0..self.nodes.len() {
            if !self.nodes[s].alive || !self.nodes[s].runs {
                continue;
            }
            if self.nodes[s].attacks.is_some() {
                // its own (lying) ballots still go out: withholding them helps no attack
                let own = self.nodes[s].relay.round(window_start).and_then(|mut ballots| {
                    let name = &self.nodes[s].name;
                    ballots.remove(name).map(|own| BallotsByChecker::from([(name.clone(), own)]))
                });
                let mut frames = self.attack_frames(s, assignment, next, period);
                if let Some(own) = own {
                    frames.extend((0..self.nodes.len()).filter(|&r| r != s).map(|r| (r, own.clone())));
                }
                for (r, ballots) in frames {
                    let frame = self.nodes[s].seal(sent_at, None, Payload::Results { ballots });
                    stats.frames_sent += 1;
                    stats.bytes_sent += frame.len() as u64;
                    if self.nodes[r].alive && self.nodes[r].runs {
                        deliveries.push((r, std::rc::Rc::new(frame)));
                    }
                }
                continue;
            }
            let Some(ballots) = self.nodes[s].relay.round(window_start) else { continue };
            let carried: u64 = ballots.values().map(|b| b.len() as u64).sum();
            let frame = std::rc::Rc::new(self.nodes[s].seal(sent_at, None, Payload::Results { ballots }));
            let peers: Vec<usize> = {
                let held = |h: &str| self.held_unhealthy(s, h) || !self.runs(h);
                assignment
                    .relay_peers(&self.nodes[s].name, round, fanout, held)
                    .iter()
                    .map(|p| self.index[*p])
                    .collect()
            };
            for r in peers {
                let attempts = self.send(stats);
                stats.bytes_sent += attempts.sent * frame.len() as u64;
                stats.ballots_sent += attempts.sent * carried;
                if attempts.delivered && self.nodes[r].alive {
                    deliveries.push((r, frame.clone()));
                }
            }
        }
        for (r, frame) in deliveries {
            let Some(message) = self.open(r, &frame, sent_at, stats) else { continue };
            let Payload::Results { ballots } = message.payload else { continue };
            let published = &self.published;
            let verified = &mut self.verified;
            let member = &mut self.nodes[r];
            let mut budget = ForgeryBudget::per_frame();
            'frame: for (checker, by_target) in ballots {
                for (target, signed) in by_target {
                    let key = published.get(&checker);
                    let mut checked = false;
                    let verify = || {
                        checked = true;
                        let key = key.ok_or(BallotIgnored::NoPublicKey)?;
                        *verified
                            .entry((checker.clone(), target.clone(), signed, *key))
                            .or_insert_with(|| check_signature(Some(key), &checker, &target, &signed))
                    };
                    let result = member.receive(&checker, &target, &signed, period, relays, verify);
                    if checked {
                        stats.signatures_verified += 1;
                    }
                    if let Err(refused) = result {
                        *stats.ballots_refused.entry(refused.metric_label()).or_default() += 1;
                    }
                    if !budget.goes_on(result) {
                        break 'frame;
                    }
                }
            }
        }
    }

    /// The frames the attacker holding member `a` sends this round: `(receiver, ballots)`.
    fn attack_frames(
        &self,
        a: usize,
        assignment: &crate::selection::Assignment,
        next: &crate::selection::Assignment,
        period: Period,
    ) -> Vec<(usize, BallotsByChecker)> {
        let attacker = &self.nodes[a];
        let attacks = attacker.attacks.clone().unwrap_or_default();
        let lie = |target: &str, period: Period| Ballot { period, healthy: !self.is_alive(target) };
        // one frame per attack (and receiver): each is judged on its own
        let mut to_all: Vec<BallotsByChecker> = Vec::new();
        let forge = |checker: &str, target: &str, ballot: Ballot, to: &mut BallotsByChecker| {
            let signed = attacker.key.sign(checker, target, ballot);
            to.entry(checker.to_string()).or_default().insert(target.to_string(), signed);
        };
        for attack in &attacks {
            match attack {
                Attack::Forge => {
                    let mut ballots = BallotsByChecker::new();
                    for target in &self.members {
                        for checker in assignment.checkers_of(target) {
                            forge(checker, target, lie(target, period), &mut ballots);
                        }
                    }
                    to_all.push(ballots);
                }
                Attack::Future => {
                    let (mut forged, mut own) = (BallotsByChecker::new(), BallotsByChecker::new());
                    for target in &self.members {
                        for checker in next.checkers_of(target) {
                            forge(checker, target, lie(target, period.next()), &mut forged);
                        }
                        if *target != attacker.name {
                            forge(&attacker.name, target, lie(target, Period(period.0 + 5)), &mut own);
                        }
                    }
                    to_all.extend([forged, own]);
                }
                Attack::Replay => {
                    let mut ballots = BallotsByChecker::new();
                    for ((checker, target, _), signed) in &attacker.captured {
                        ballots.entry(checker.clone()).or_default().insert(target.clone(), *signed);
                    }
                    to_all.push(ballots);
                }
                Attack::Everyone => {
                    let mut ballots = BallotsByChecker::new();
                    for target in self.members.iter().filter(|t| **t != attacker.name) {
                        forge(&attacker.name, target, lie(target, period), &mut ballots);
                    }
                    to_all.push(ballots);
                }
                Attack::ClaimReceivers | Attack::ReviveDead => {}
            }
        }
        let mut frames = Vec::new();
        for r in (0..self.nodes.len()).filter(|&r| r != a) {
            frames.extend(to_all.iter().filter(|b| !b.is_empty()).map(|b| (r, b.clone())));
            if attacks.contains(&Attack::ClaimReceivers) {
                let receiver = &self.nodes[r].name;
                let mut ballots = BallotsByChecker::new();
                for target in assignment.targets_of(receiver) {
                    forge(receiver, target, lie(target, period), &mut ballots);
                }
                frames.push((r, ballots));
            }
        }
        frames
    }

    /// A checker's challenge: drawn from the seeded generator (the simulation replays).
    fn nonce(&mut self) -> Nonce {
        self.rng = self.rng.wrapping_add(1);
        let (a, b) = (splitmix64(self.rng), splitmix64(self.rng ^ 0x9e37_79b9_7f4a_7c15));
        let mut bytes = [0; 16];
        bytes[..8].copy_from_slice(&a.to_le_bytes());
        bytes[8..].copy_from_slice(&b.to_le_bytes());
        Nonce(bytes)
    }

    fn lost(&mut self) -> bool {
        self.rng = self.rng.wrapping_add(1);
        let x = splitmix64(self.rng);
        // 53 random bits as a fraction in [0, 1)
        ((x >> 11) as f64 / (1u64 << 53) as f64) < self.config.loss
    }
}

/// What sending one message took.
struct Attempts {
    sent: u64,
    delivered: bool,
}

impl Member {
    /// Seals and signs one message of this member's.
    fn seal(&mut self, now: Timestamp, recipient: Option<String>, payload: Payload) -> Vec<u8> {
        self.signer.seal(&self.key, now, recipient, payload)
    }

    /// Records and signs one of its own ballots; a new one is passed on in the next rounds.
    fn cast(&mut self, target: &str, ballot: Ballot, now: Period) {
        let horizon = now.0.saturating_sub(2 * self.table.window());
        self.captured.retain(|(_, _, period), _| period.0 >= horizon);
        if let Ok(Recorded::New) = self.table.record(&self.name, target, ballot, now, &mut self.schedule) {
            let signed = self.key.sign(&self.name, target, ballot);
            self.relay.learned(&self.name.clone(), target, signed);
        }
    }

    /// Records a received ballot when it is true; a new one is passed on in the next
    /// rounds when [`relays_received`] says so, signature unchanged.
    fn receive(
        &mut self,
        checker: &str,
        target: &str,
        signed: &SignedBallot,
        now: Period,
        relays: bool,
        verify: impl FnOnce() -> Result<(), BallotIgnored>,
    ) -> Result<Recorded, BallotIgnored> {
        let schedule = &mut self.schedule;
        let result = self.table.record_received(&self.name, checker, target, signed, now, schedule, verify);
        if self.attacks.is_some() {
            self.captured.insert((checker.to_string(), target.to_string(), signed.period), *signed);
        }
        if result == Ok(Recorded::New) && relays {
            self.relay.learned(checker, target, *signed);
        }
        result
    }
}

/// A member's signing key, from the run's seed.
fn member_key(seed: u64, member: u64) -> SigningKey {
    let mut bytes = [0; 32];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&splitmix64(seed ^ member.wrapping_mul(0x9e37_79b9) ^ i as u64).to_le_bytes());
    }
    SigningKey::from_seed(&bytes)
}

/// Every time an observer came to hold one of `innocent` unhealthy: `(period, observer, node)`.
pub fn false_accusations(history: &[PeriodStats], innocent: &BTreeSet<String>) -> Vec<(Period, String, String)> {
    history
        .iter()
        .flat_map(|s| s.changes.iter().map(move |(o, c)| (s.period, o, c)))
        .filter(|(_, _, c)| c.to == Verdict::Unhealthy && innocent.contains(&c.node))
        .map(|(p, o, c)| (p, o.clone(), c.node.clone()))
        .collect()
}

#[cfg(test)]
mod tests;
