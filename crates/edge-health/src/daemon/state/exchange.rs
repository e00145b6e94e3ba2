//! The frames exchanged with peers: what an arriving one carries (ballots, probe requests and
//! answers, challenges and proofs), the frames this node seals (relay rounds, challenges,
//! answers, requests), and the HMAC key they are sealed and opened with.

use std::net::SocketAddr;

use super::{Cast, Daemon, OutgoingRequest, Received, RelayFrame};
use crate::ballot::{BallotIgnored, ForgeryBudget};
use crate::daemon::metrics::KindLabel;
use crate::indirect::should_help;
use crate::liveness::{self, LivenessProof, Nonce, ProofRefused};
use crate::message::{HmacKey, KeyError, Payload, Rejection};
use crate::time::{Period, Timestamp};
use crate::vote::Verdict;

impl Daemon {
    /// A new --hmac-key-file content; `Ok(true)` when the key changed. Frames are sealed
    /// with the new key at once; the old key is still accepted for
    /// --key-rotation-overlap (see [`Verifier::rotate`](crate::message::Verifier::rotate)).
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
}
