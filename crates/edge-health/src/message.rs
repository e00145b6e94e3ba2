//! The messages members exchange, and their authentication.
//!
//! A frame on the wire is one JSON object, `{"body":{...},"mac":"<hex>","sig":"<base64>"}`,
//! where `mac` is HMAC-SHA256 over the exact bytes of `body` under the unit's shared key and
//! `sig` the sender's Ed25519 signature (its node key, published on its Node) over a
//! domain tag and the same bytes. The body names
//! its sender, the sender's wall-clock time and a sequence number, and carries either
//! check results keyed by checker and target node NAME (SuperEdge keyed them by IP and
//! looked them up by name, so they only matched where names were IPs) or an indirect
//! probe request/answer.
//!
//! A [`Verifier`] accepts a frame only if, in this order: it parses; its MAC is right
//! (compared in constant time, before any field of the body is trusted); the body parses;
//! the sender is a current member publishing a key; it is meant for this node; its
//! timestamp is within the allowed skew of now; its sequence number has not been seen from
//! that sender; and the sender's key verifies its signature. Only then does the sender's
//! replay state move. Each refusal has its own [`Rejection`], a metric label.
//!
//! Freshness without persisted state:
//! - a sender's sequence starts at its start time in microseconds since the epoch and
//!   counts up by one per message, so a restarted sender continues above every number it
//!   used before (it would have to send more than a million messages a second to catch
//!   up with the clock);
//! - a receiver remembers, per sender, the highest sequence accepted and which of the 64
//!   below it were seen, so messages sent concurrently and delivered out of order are
//!   still accepted once each, and anything older or repeated is a replay (memory: 16
//!   bytes per current member; departed members are forgotten);
//! - a receiver refuses messages stamped before it started: it cannot know which of those
//!   it accepted in its previous life;
//! - a receiver refuses a sequence ahead of the clock (plus the allowed skew): no honest
//!   sender has used it, and accepting it would make every later frame of that sender a
//!   replay.
//!
//! What the MAC cannot do: the key is shared by the unit, so it proves a frame comes from
//! some holder of the key, not from the node it names. It is a cheap pre-filter that keeps
//! strangers out; the frame's signature is what proves the sender, so a member holding the
//! shared key cannot speak in another member's name: not send its probe answers, nor push
//! its sequence ahead with one forged frame, which would make every real frame of it a
//! replay (muting it for the rest of its run). What makes a ballot true is still its
//! checker's own signature ([`crate::ballot`]), verified per ballot whoever relays it.
//!
//! There is no default key: [`HmacKey::new`] refuses keys shorter than
//! [`HmacKey::MIN_LEN`] bytes (SuperEdge shipped a hard-coded 16-character key). A
//! rotated key is used for sealing at once, and the key it replaces is still accepted for
//! a while ([`Verifier::rotate`]), so a unit whose nodes see the new Secret at different
//! times keeps talking.

use std::collections::HashMap;
use std::time::Duration;

use ring::hmac;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::liveness::{LivenessProof, Nonce};
use crate::node_key::{PublicKey, Signature, SigningKey};
use crate::relay::BallotsByChecker;
use crate::time::Timestamp;

/// The bytes a frame's signature covers start with this: a signature made for anything
/// else (a ballot) never verifies as a frame's, nor the other way round.
const FRAME_DOMAIN: &[u8] = b"edgegrid.io/edge-health frame v1\0";

/// Frames larger than this are refused unread: a results message about a few dozen nodes
/// is a few kilobytes.
pub const MAX_FRAME_BYTES: usize = 1 << 20;

/// How many sequence numbers below the highest accepted one are still accepted (once).
pub const REPLAY_WINDOW: u64 = 64;

/// The unit's HMAC-SHA256 key.
#[derive(Clone)]
pub struct HmacKey(hmac::Key);

/// Why a key cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the HMAC key is empty")]
    Empty,
    #[error("the HMAC key has {0} bytes; at least {min} are required", min = HmacKey::MIN_LEN)]
    TooShort(usize),
}

impl HmacKey {
    /// RFC 2104 discourages keys shorter than the hash output (32 bytes for SHA-256).
    pub const MIN_LEN: usize = 32;

    pub fn new(bytes: &[u8]) -> Result<Self, KeyError> {
        match bytes.len() {
            0 => Err(KeyError::Empty),
            n if n < Self::MIN_LEN => Err(KeyError::TooShort(n)),
            _ => Ok(Self(hmac::Key::new(hmac::HMAC_SHA256, bytes))),
        }
    }
}

impl std::fmt::Debug for HmacKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HmacKey(..)")
    }
}

/// A message body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Message {
    pub sender: String,
    /// The sender's clock when it sealed the message.
    pub timestamp: Timestamp,
    pub sequence: u64,
    /// `None`: for every member (results). `Some`: for that node only (indirect probes),
    /// so a frame captured on its way to one node means nothing to another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipient: Option<String>,
    pub payload: Payload,
}

/// Externally tagged (`{"results":{...}}`): the kind comes first and the body is read in
/// one pass, without buffering (an internally tagged enum is read twice).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum Payload {
    /// Signed ballots by checker and target node name: the sender's own and those it
    /// relays (see [`crate::relay`], [`crate::ballot`]).
    Results { ballots: BallotsByChecker },
    /// "Probe `target` for me": an indirect probe (see [`crate::indirect`]), with the
    /// asking checker's challenge for the target.
    ProbeRequest { id: u64, target: String, nonce: Nonce },
    /// The answer to a [`Payload::ProbeRequest`]: "reachable" counts only with the
    /// target's proof over the asker's nonce (see [`crate::liveness`]).
    ProbeAnswer {
        id: u64,
        target: String,
        reachable: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        proof: Option<LivenessProof>,
    },
    /// "Prove you are alive to `checker`": sent to the target by the checker itself, or by
    /// a helper on the checker's behalf. Answered in the reply with a [`Payload::Proof`].
    Challenge { checker: String, nonce: Nonce },
    /// The target's answer to a [`Payload::Challenge`].
    Proof { proof: LivenessProof },
}

#[derive(Serialize)]
struct FrameOut<'a> {
    body: &'a RawValue,
    mac: String,
    sig: Signature,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FrameIn<'a> {
    #[serde(borrow)]
    body: &'a RawValue,
    mac: &'a str,
    sig: Signature,
}

/// What a frame's signature covers: the domain tag, then the body's exact bytes.
fn signed_frame_bytes(body: &[u8]) -> Vec<u8> {
    [FRAME_DOMAIN, body].concat()
}

/// Seals the local node's messages.
#[derive(Debug)]
pub struct Signer {
    key: HmacKey,
    sender: String,
    next_sequence: u64,
}

impl Signer {
    /// `started`: now, when the daemon starts (see the module comment on sequences).
    pub fn new(key: HmacKey, sender: impl Into<String>, started: Timestamp) -> Self {
        Self { key, sender: sender.into(), next_sequence: started.as_unix_millis().saturating_mul(1000) }
    }

    pub fn sender(&self) -> &str {
        &self.sender
    }

    /// Seals with `key` from now on; the sequence goes on (receivers keep their replay
    /// windows across a rotation).
    pub fn rotate(&mut self, key: HmacKey) {
        self.key = key;
    }

    /// The message as it will be sent, with the next sequence number.
    pub fn message(&mut self, now: Timestamp, recipient: Option<String>, payload: Payload) -> Message {
        let sequence = self.next_sequence;
        self.next_sequence = self.next_sequence.saturating_add(1);
        Message { sender: self.sender.clone(), timestamp: now, sequence, recipient, payload }
    }

    /// Builds, numbers, seals and signs (with `signing`, this node's key) a message; the
    /// frame is sent as is to every recipient.
    pub fn seal(
        &mut self,
        signing: &SigningKey,
        now: Timestamp,
        recipient: Option<String>,
        payload: Payload,
    ) -> Vec<u8> {
        let message = self.message(now, recipient, payload);
        seal_message(&self.key, signing, &message)
    }
}

/// Seals and signs an already built message (tests use it to forge, replay and tamper).
pub fn seal_message(key: &HmacKey, signing: &SigningKey, message: &Message) -> Vec<u8> {
    let body = serde_json::to_string(message).expect("a message always serialises");
    let mac = hex(hmac::sign(&key.0, body.as_bytes()).as_ref());
    let sig = signing.sign_bytes(&signed_frame_bytes(body.as_bytes()));
    let body = RawValue::from_string(body).expect("serde_json output is valid JSON");
    serde_json::to_vec(&FrameOut { body: &body, mac, sig }).expect("a frame always serialises")
}

/// Why a frame was refused. Each is a metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Rejection {
    #[error("malformed frame or message")]
    Malformed,
    #[error("MAC does not match")]
    BadMac,
    #[error("sender is not a current member publishing a key")]
    UnknownSender,
    #[error("the signature is not the sender's")]
    BadSignature,
    #[error("the sender sent more frames than any honest member does")]
    OverBudget,
    #[error("message is meant for another node")]
    Misdirected,
    #[error("timestamp outside the allowed clock skew")]
    Skew,
    #[error("sequence number already seen, too old, or sent before this receiver started")]
    Replay,
    #[error("sequence number ahead of the sender's clock: no honest sender has used it yet")]
    FutureSequence,
}

impl Rejection {
    pub const ALL: [Rejection; 9] = [
        Rejection::Malformed,
        Rejection::BadMac,
        Rejection::UnknownSender,
        Rejection::BadSignature,
        Rejection::OverBudget,
        Rejection::Misdirected,
        Rejection::Skew,
        Rejection::Replay,
        Rejection::FutureSequence,
    ];

    pub fn metric_label(self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::BadMac => "bad_mac",
            Self::UnknownSender => "unknown_sender",
            Self::BadSignature => "bad_signature",
            Self::OverBudget => "over_budget",
            Self::Misdirected => "misdirected",
            Self::Skew => "skew",
            Self::Replay => "replay",
            Self::FutureSequence => "future_sequence",
        }
    }
}

/// Per sender: the highest sequence accepted and a bitmap of the 64 below it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ReplayWindow {
    highest: u64,
    /// Bit `i` set: `highest - 1 - i` was accepted.
    below: u64,
}

impl ReplayWindow {
    fn admits(&self, sequence: u64) -> bool {
        if sequence > self.highest {
            return true;
        }
        let back = self.highest - sequence;
        (1..=REPLAY_WINDOW).contains(&back) && self.below & (1 << (back - 1)) == 0
    }

    fn accept(&mut self, sequence: u64) {
        if sequence > self.highest {
            let shift = sequence - self.highest;
            // the old highest becomes bit shift-1
            self.below = if shift > REPLAY_WINDOW { 0 } else { ((self.below << 1) | 1) << (shift - 1) };
            self.highest = sequence;
        } else {
            self.below |= 1 << (self.highest - sequence - 1);
        }
    }
}

/// How many frames a sender may have accepted: `per_second` on average, `burst` at once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FrameBudget {
    pub per_second: f64,
    pub burst: f64,
}

impl FrameBudget {
    /// Twice what an honest member sends one receiver at most: per period, one results
    /// frame a relay round; for each of its `k` probes, an indirect request and an answer;
    /// challenges to the receiver and proofs answering the receiver's challenges, one for
    /// its own probe of it and one for each of the receiver's `k` checkers it helps (so
    /// `2k + 2`); each sent up to `1 + send_retries` times.
    pub fn for_protocol(protocol: &crate::config::ProtocolConfig) -> Self {
        let attempts = 1.0 + f64::from(protocol.send_retries);
        let k = protocol.probes_per_period as f64;
        let per_period = attempts * (f64::from(protocol.relay_rounds) + 2.0 * k + 2.0 * k + 2.0);
        let burst = 2.0 * per_period;
        Self { per_second: burst / protocol.period.as_secs_f64().max(0.001), burst }
    }
}

/// A sender's budget left (a token bucket) and when it was last filled.
#[derive(Clone, Copy, Debug)]
struct Budget {
    tokens: f64,
    at: Timestamp,
}

/// Checks incoming frames for the local node.
#[derive(Debug)]
pub struct Verifier {
    key: HmacKey,
    /// The key before the last rotation, still accepted until the time given.
    previous: Option<(HmacKey, Timestamp)>,
    local: String,
    max_skew: Duration,
    started: Timestamp,
    windows: HashMap<String, ReplayWindow>,
    /// Frames a sender may have accepted, spent only by frames it signed (another member
    /// cannot spend it); `None`: no bound.
    budget: Option<FrameBudget>,
    budgets: HashMap<String, Budget>,
}

impl Verifier {
    /// `started`: now, when the daemon starts; `max_skew`: the largest clock difference
    /// (plus transit time) tolerated between sender and receiver.
    pub fn new(key: HmacKey, local: impl Into<String>, max_skew: Duration, started: Timestamp) -> Self {
        Self {
            key,
            previous: None,
            local: local.into(),
            max_skew,
            started,
            windows: HashMap::new(),
            budget: None,
            budgets: HashMap::new(),
        }
    }

    /// Bounds the frames each sender may have accepted: the rest are refused before their
    /// signature is checked, so a member flooding this node costs it no more verifications
    /// than an honest member's frames do.
    pub fn with_budget(mut self, budget: FrameBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// The sender's budget filled up to `now`, if there is a bound.
    fn budget_at(&self, sender: &str, now: Timestamp) -> Option<Budget> {
        let limit = self.budget?;
        let Some(budget) = self.budgets.get(sender) else { return Some(Budget { tokens: limit.burst, at: now }) };
        let elapsed = now.as_unix_millis().saturating_sub(budget.at.as_unix_millis()) as f64 / 1000.0;
        let at = if now > budget.at { now } else { budget.at };
        Some(Budget { tokens: (budget.tokens + elapsed * limit.per_second).min(limit.burst), at })
    }

    /// A new unit key: frames under it are accepted from now on, and frames under the key
    /// it replaces until `accept_previous_until`. Kubelets update a Secret's files on
    /// each node at its own time (a minute or more apart), so without the overlap nodes
    /// that already have the new key and nodes that do not yet refuse each other. The
    /// replay windows are kept: sequence numbers do not start over with a key.
    pub fn rotate(&mut self, key: HmacKey, accept_previous_until: Timestamp) {
        let previous = std::mem::replace(&mut self.key, key);
        self.previous = Some((previous, accept_previous_until));
    }

    /// Verifies one frame. `sender_key` gives the key a current peer publishes (`None`:
    /// not a peer, or no key yet). Only an accepted frame changes the verifier's state.
    pub fn open(
        &mut self,
        frame: &[u8],
        now: Timestamp,
        sender_key: impl Fn(&str) -> Option<PublicKey>,
    ) -> Result<Message, Rejection> {
        if frame.len() > MAX_FRAME_BYTES {
            return Err(Rejection::Malformed);
        }
        let frame: FrameIn<'_> = serde_json::from_slice(frame).map_err(|_| Rejection::Malformed)?;
        let mac = unhex(frame.mac).ok_or(Rejection::Malformed)?;
        // ring's verify compares in constant time
        let body = frame.body.get().as_bytes();
        let current = hmac::verify(&self.key.0, body, &mac);
        if current.is_err() {
            let previous = self.previous.as_ref().filter(|(_, until)| now <= *until);
            previous
                .ok_or(Rejection::BadMac)
                .and_then(|(key, _)| hmac::verify(&key.0, body, &mac).map_err(|_| Rejection::BadMac))?;
        }
        let message: Message = serde_json::from_str(frame.body.get()).map_err(|_| Rejection::Malformed)?;
        if message.sender == self.local {
            return Err(Rejection::UnknownSender);
        }
        let key = sender_key(&message.sender).ok_or(Rejection::UnknownSender)?;
        if message.recipient.as_deref().is_some_and(|r| r != self.local) {
            return Err(Rejection::Misdirected);
        }
        if message.timestamp.distance(now) > self.max_skew {
            return Err(Rejection::Skew);
        }
        if message.timestamp < self.started {
            return Err(Rejection::Replay);
        }
        // a sequence is its sender's start time in microseconds plus the messages it sent
        // since, so an honest one never runs ahead of the clock (plus the allowed skew); one
        // that does would raise the replay window past every real frame the sender will
        // send, silencing it
        let horizon = now.saturating_add(self.max_skew).as_unix_millis().saturating_mul(1000);
        if message.sequence > horizon {
            return Err(Rejection::FutureSequence);
        }
        let window = self.windows.get(&message.sender);
        if window.is_some_and(|window| !window.admits(message.sequence)) {
            return Err(Rejection::Replay);
        }
        let budget = self.budget_at(&message.sender, now);
        if budget.is_some_and(|budget| budget.tokens < 1.0) {
            return Err(Rejection::OverBudget);
        }
        // last (it costs a verification), and before the replay state and the budget move:
        // a frame in another member's name, sealed with the shared key, must not push its
        // sequence nor spend its budget
        if !key.verifies_bytes(&signed_frame_bytes(body), &frame.sig) {
            return Err(Rejection::BadSignature);
        }
        if let Some(budget) = budget {
            self.budgets.insert(message.sender.clone(), Budget { tokens: budget.tokens - 1.0, ..budget });
        }
        match self.windows.get_mut(&message.sender) {
            Some(window) => window.accept(message.sequence),
            None => {
                self.windows.insert(message.sender.clone(), ReplayWindow { highest: message.sequence, below: 0 });
            }
        }
        Ok(message)
    }

    /// Forgets senders that are no longer members (membership changes), bounding memory.
    pub fn retain_senders(&mut self, is_member: impl Fn(&str) -> bool) {
        self.windows.retain(|sender, _| is_member(sender));
        self.budgets.retain(|sender, _| is_member(sender));
    }

    /// How many senders are remembered.
    pub fn remembered_senders(&self) -> usize {
        self.windows.len()
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    text.as_bytes().chunks(2).map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?)).collect()
}

#[cfg(test)]
mod tests;
