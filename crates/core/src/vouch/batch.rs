//! The signer's batches: what the cloud vouches for, signed; and the follower's side that
//! verifies them and remembers, for a while, which states they vouched for.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::signature::{ED25519, Ed25519KeyPair, UnparsedPublicKey};
use serde::{Deserialize, Serialize};

use super::set_hash::{StateDigest, hex, parse_hex};

/// The most digests a batch carries per stream (the latest kept): a stream changing faster
/// than that leaves followers gaps, not a batch without bound; they wait for a later state.
pub const MAX_STATES_PER_STREAM: usize = 4096;

/// One batch, as signed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Batch {
    /// The signer's run (random at its start); sequences count within a run.
    pub run: String,
    pub sequence: u64,
    /// When it was signed: Unix seconds on the signer's clock.
    pub issued: i64,
    /// Per stream: the digests (hex) of the states it went through since the previous
    /// batch, the current one last. A stream the signer has not listed yet is absent.
    pub states: BTreeMap<String, Vec<String>>,
}

/// A batch as the ConfigMap carries it: the JSON exactly as signed, and the signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedBatch {
    pub batch: String,
    /// Ed25519 over `batch`'s bytes, base64.
    pub signature: String,
}

impl Batch {
    /// A batch of `states` per stream (each capped at [`MAX_STATES_PER_STREAM`], latest kept).
    pub fn new(
        run: &str,
        sequence: u64,
        issued: i64,
        states: impl IntoIterator<Item = (String, Vec<StateDigest>)>,
    ) -> Self {
        let states = states
            .into_iter()
            .map(|(stream, digests)| {
                let skip = digests.len().saturating_sub(MAX_STATES_PER_STREAM);
                (stream, digests[skip..].iter().map(|d| hex(d)).collect())
            })
            .collect();
        Self { run: run.to_string(), sequence, issued, states }
    }

    /// Signs the batch's JSON with the signer's key.
    pub fn sign(&self, key: &Ed25519KeyPair) -> SignedBatch {
        // a struct of strings, numbers and a string map always serialises
        let batch = serde_json::to_string(self).unwrap_or_default();
        let signature = STANDARD.encode(key.sign(batch.as_bytes()).as_ref());
        SignedBatch { batch, signature }
    }
}

/// Why a batch was not taken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("the batch's signature is not base64")]
    SignatureEncoding,
    #[error("no trusted signer key verifies the batch's signature")]
    BadSignature,
    #[error("the signed batch does not parse: {0}")]
    Malformed(String),
    #[error("stream {stream}: {digest:?} is not a digest (64 hex digits)")]
    Digest { stream: String, digest: String },
    #[error(
        "batch {sequence} of run {run} is not after the last one taken ({last_run}/{last_sequence}, issued {last_issued})"
    )]
    NotNewer { run: String, sequence: u64, last_run: String, last_sequence: u64, last_issued: i64 },
    #[error("the batch was issued at {issued}, {skew} s from this node's clock ({now}); at most {max} s are allowed")]
    Skewed { issued: i64, now: i64, skew: i64, max: u64 },
}

impl BatchError {
    /// A short label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::SignatureEncoding | Self::BadSignature => "signature",
            Self::Malformed(_) | Self::Digest { .. } => "malformed",
            Self::NotNewer { .. } => "not_newer",
            Self::Skewed { .. } => "skewed",
        }
    }

    /// Whether no trusted key signed the batch (rather than its content being refused).
    pub fn is_signature(&self) -> bool {
        matches!(self, Self::SignatureEncoding | Self::BadSignature)
    }
}

/// What a follower trusts.
#[derive(Clone, Debug)]
pub struct VoucherConfig {
    /// The signer's Ed25519 public keys (more than one while a key rotates).
    pub keys: Vec<[u8; 32]>,
    /// How far a batch's issue time may be from this node's clock.
    pub max_skew: Duration,
    /// How long a vouched digest stays good after the batch naming it was *issued*, by this
    /// node's clock (a batch received late vouches for what is left of its window; one older
    /// than the window for nothing).
    pub window: Duration,
}

/// The follower's side: verifies batches and remembers the digests they vouch for.
#[derive(Debug)]
pub struct Voucher {
    config: VoucherConfig,
    /// The last batch taken: (run, sequence, issued).
    last: Option<(String, u64, i64)>,
    /// Per stream, each vouched digest and until when (local time) a batch naming it
    /// vouches for it.
    vouched: BTreeMap<String, BTreeMap<StateDigest, Instant>>,
    /// What was left of the last batch's window when it was taken.
    last_left: Duration,
}

impl Voucher {
    pub fn new(config: VoucherConfig) -> Self {
        Self { config, last: None, vouched: BTreeMap::new(), last_left: Duration::ZERO }
    }

    /// Whether a trusted key signed `signed` (nothing else about the batch is checked, and
    /// nothing is taken).
    pub fn verify(&self, signed: &SignedBatch) -> Result<(), BatchError> {
        let signature = STANDARD.decode(signed.signature.trim()).map_err(|_| BatchError::SignatureEncoding)?;
        let trusted = self
            .config
            .keys
            .iter()
            .any(|key| UnparsedPublicKey::new(&ED25519, key).verify(signed.batch.as_bytes(), &signature).is_ok());
        if trusted { Ok(()) } else { Err(BatchError::BadSignature) }
    }

    /// Verifies `signed` and takes the digests it vouches for, at local time `now` (`wall`:
    /// this node's clock in Unix seconds). Returns the batch's sequence. A batch that is
    /// not signed by a trusted key, is not newer than the last one taken (a replay), or
    /// was issued too far from this node's clock (an old one kept back) is refused and
    /// changes nothing.
    pub fn receive(&mut self, signed: &SignedBatch, now: Instant, wall: i64) -> Result<u64, BatchError> {
        self.verify(signed)?;
        let batch: Batch = serde_json::from_str(&signed.batch).map_err(|e| BatchError::Malformed(e.to_string()))?;
        let skew = batch.issued.saturating_sub(wall).saturating_abs();
        if skew.unsigned_abs() > self.config.max_skew.as_secs() {
            return Err(BatchError::Skewed {
                issued: batch.issued,
                now: wall,
                skew,
                max: self.config.max_skew.as_secs(),
            });
        }
        if let Some((last_run, last_sequence, last_issued)) = &self.last {
            // within a run the sequence goes forward; another run (the signer restarted, or
            // another replica took over) must be issued after the last batch, so that
            // batches of two runs cannot be played in turns
            let newer =
                if *last_run == batch.run { batch.sequence > *last_sequence } else { batch.issued > *last_issued };
            if !newer {
                return Err(BatchError::NotNewer {
                    run: batch.run,
                    sequence: batch.sequence,
                    last_run: last_run.clone(),
                    last_sequence: *last_sequence,
                    last_issued: *last_issued,
                });
            }
        }
        let mut parsed = Vec::with_capacity(batch.states.len());
        for (stream, digests) in &batch.states {
            let mut stream_digests = Vec::with_capacity(digests.len());
            for digest in digests {
                let Some(parsed) = parse_hex(digest) else {
                    return Err(BatchError::Digest { stream: stream.clone(), digest: digest.clone() });
                };
                stream_digests.push(parsed);
            }
            parsed.push((stream.clone(), stream_digests));
        }
        self.expire(now);
        // good for the window from the batch's issue: a leader that holds batches back (up
        // to the skew allowance) cannot stretch an old state's vouching by serving them late
        let age = Duration::from_secs(u64::try_from(wall.saturating_sub(batch.issued)).unwrap_or(0));
        let left = self.config.window.saturating_sub(age);
        self.last_left = left;
        // (taken all the same: its sequence moves the replay bound forward)
        let parsed = if left.is_zero() { Vec::new() } else { parsed };
        let until = now + left;
        for (stream, digests) in parsed {
            let vouched = self.vouched.entry(stream).or_default();
            for digest in digests {
                let good = vouched.entry(digest).or_insert(until);
                *good = (*good).max(until);
            }
        }
        self.last = Some((batch.run, batch.sequence, batch.issued));
        Ok(batch.sequence)
    }

    /// Whether a batch issued within the window before `now` (by this node's clock)
    /// vouched for `digest` of `stream`.
    pub fn vouches(&self, stream: &str, digest: &StateDigest, now: Instant) -> bool {
        self.vouched.get(stream).and_then(|vouched| vouched.get(digest)).is_some_and(|until| now <= *until)
    }

    /// What was left of the last batch's window when it was taken (by this node's clock):
    /// zero when it came too late to vouch for anything (a leader holding batches back, or
    /// this node's clock ahead of the signer's by more than the window).
    pub fn last_window_left(&self) -> Duration {
        self.last_left
    }

    /// Forgets digests no batch vouches for any more.
    fn expire(&mut self, now: Instant) {
        for vouched in self.vouched.values_mut() {
            vouched.retain(|_, until| now <= *until);
        }
        self.vouched.retain(|_, vouched| !vouched.is_empty());
    }
}
