//! A hash of a set that is updated one element at a time: LtHash16 (Lewi, Kim, Maykov,
//! Weis, "Securing Update Propagation with Homomorphic Hashing", 2019), the lattice hash
//! Facebook uses to check its configuration distribution.
//!
//! Each element is expanded to 1024 lanes of 16 bits; the set's hash is their lane-wise
//! sum modulo 2^16. Adding or removing an element is one addition or subtraction, so the
//! hash of a state never depends on the order or the relists that led to it, and the
//! cloud and a follower reach the same hash from different event histories. Why not a
//! 256-bit sum of SHA-256 digests: a sum that short falls to Wagner's generalised birthday
//! attack (a forger picks many elements to hit a target sum); 1024 x 16-bit lanes is the
//! paper's parameter set for over 200 bits of security.
//!
//! The expansion is SHA-256 in counter mode over the element's digest (64 blocks of 32
//! bytes), with a domain prefix: the paper's Blake2xb is an extendable-output function of
//! the same kind, and this workspace already has SHA-256.

use ring::digest::{Context, SHA256, digest};

/// Lanes of a set hash.
pub const LANES: usize = 1024;

/// What the expansion's blocks are prefixed with, so that its outputs are used for nothing
/// else.
const DOMAIN: &[u8] = b"edgegrid vouch lthash16 v1";

/// The SHA-256 digest of one element (its canonical bytes, see [`super::element`]).
pub type ElementDigest = [u8; 32];

/// The SHA-256 digest of a set hash: what the cloud signs and a follower compares.
pub type StateDigest = [u8; 32];

/// The hash of a set of elements; starts empty.
#[derive(Clone, PartialEq, Eq)]
pub struct SetHash {
    lanes: Box<[u16; LANES]>,
}

impl Default for SetHash {
    fn default() -> Self {
        Self { lanes: Box::new([0; LANES]) }
    }
}

impl std::fmt::Debug for SetHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SetHash({})", hex(&self.digest()))
    }
}

impl SetHash {
    /// Adds an element (a set holds each element once: the caller removes an object's old
    /// version before adding its new one).
    pub fn add(&mut self, element: &ElementDigest) {
        for (lane, value) in self.lanes.iter_mut().zip(expand(element)) {
            *lane = lane.wrapping_add(value);
        }
    }

    /// Removes an element added before.
    pub fn remove(&mut self, element: &ElementDigest) {
        for (lane, value) in self.lanes.iter_mut().zip(expand(element)) {
            *lane = lane.wrapping_sub(value);
        }
    }

    /// The state's digest: SHA-256 over the lanes, little-endian.
    pub fn digest(&self) -> StateDigest {
        let mut context = Context::new(&SHA256);
        for lane in self.lanes.iter() {
            context.update(&lane.to_le_bytes());
        }
        to_array(context.finish().as_ref())
    }
}

/// An element's 1024 lanes.
fn expand(element: &ElementDigest) -> impl Iterator<Item = u16> {
    // 64 blocks of 16 lanes
    (0u8..64).flat_map(move |block| {
        let mut context = Context::new(&SHA256);
        context.update(DOMAIN);
        context.update(element);
        context.update(&[block]);
        let output = to_array(context.finish().as_ref());
        (0..16).map(move |lane| u16::from_le_bytes([output[2 * lane], output[2 * lane + 1]]))
    })
}

/// SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    to_array(digest(&SHA256, bytes).as_ref())
}

fn to_array(bytes: &[u8]) -> [u8; 32] {
    let mut array = [0; 32];
    array.copy_from_slice(bytes);
    array
}

/// Lower-case hex, as digests are written in a batch.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A digest written by [`hex`]; `None` when it is not 64 hex digits.
pub fn parse_hex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut array = [0; 32];
    for (i, byte) in array.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(array)
}
