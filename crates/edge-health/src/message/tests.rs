use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use proptest::prelude::*;

use super::*;
use crate::ballot::Ballot;
use crate::liveness::{self, Nonce};
use crate::time::Period;

const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";
const OTHER_KEY: &[u8] = b"fedcba9876543210fedcba9876543210";
const STARTED: Timestamp = Timestamp::from_unix_millis(1_700_000_000_000);
const SKEW: Duration = Duration::from_secs(30);

fn key() -> HmacKey {
    HmacKey::new(KEY).unwrap()
}

fn at(offset_ms: u64) -> Timestamp {
    Timestamp::from_unix_millis(STARTED.as_unix_millis() + offset_ms)
}

/// A member's node key (the tests' members are named by one letter).
fn signing(name: &str) -> SigningKey {
    SigningKey::from_seed(&[name.as_bytes()[0]; 32])
}

/// The key each current member publishes: a, b and c are members.
fn members(name: &str) -> Option<PublicKey> {
    ["a", "b", "c"].contains(&name).then(|| signing(name).public_key())
}

/// Seals and signs `message` as its sender would.
fn seal(key: &HmacKey, message: &Message) -> Vec<u8> {
    seal_message(key, &signing(&message.sender), message)
}

fn verifier() -> Verifier {
    Verifier::new(key(), "b", SKEW, STARTED)
}

fn results(target: &str, healthy: bool) -> Payload {
    let signed =
        crate::node_key::SigningKey::from_seed(&[1; 32]).sign("edge-1", target, Ballot { period: Period(5), healthy });
    Payload::Results {
        ballots: BTreeMap::from([("edge-1".to_string(), BTreeMap::from([(target.to_string(), signed)]))]),
    }
}

fn message(sender: &str, timestamp: Timestamp, sequence: u64) -> Message {
    Message { sender: sender.into(), timestamp, sequence, recipient: None, payload: results("c", false) }
}

#[test]
fn a_valid_message_is_accepted_as_sent() {
    let mut signer = Signer::new(key(), "a", STARTED);
    let frame = signer.seal(&signing(signer.sender()), at(10), None, results("c", false));
    let opened = verifier().open(&frame, at(20), members).unwrap();
    assert_eq!(
        opened,
        Message {
            sender: "a".into(),
            timestamp: at(10),
            sequence: STARTED.as_unix_millis() * 1000,
            recipient: None,
            payload: results("c", false),
        }
    );
}

#[test]
fn every_payload_round_trips() {
    let mut signer = Signer::new(key(), "a", STARTED);
    let mut v = verifier();
    for (recipient, payload) in [
        (None, results("c", true)),
        (Some("b".to_string()), Payload::ProbeRequest { id: 7, target: "c".into(), nonce: Nonce([3; 16]) }),
        (Some("b".to_string()), Payload::ProbeAnswer { id: 7, target: "c".into(), reachable: false, proof: None }),
        (
            Some("b".to_string()),
            Payload::ProbeAnswer {
                id: 7,
                target: "c".into(),
                reachable: true,
                proof: Some(liveness::prove(&signing("c"), "c", "b", Nonce([3; 16]))),
            },
        ),
        (Some("b".to_string()), Payload::Challenge { checker: "b".into(), nonce: Nonce([4; 16]) }),
        (Some("b".to_string()), Payload::Proof { proof: liveness::prove(&signing("c"), "c", "b", Nonce([4; 16])) }),
        (None, Payload::Results { ballots: BTreeMap::new() }),
    ] {
        let frame = signer.seal(&signing(signer.sender()), at(0), recipient.clone(), payload.clone());
        let opened = v.open(&frame, at(0), members).unwrap();
        assert_eq!((opened.recipient, opened.payload), (recipient, payload));
    }
}

/// The wire format is what daemons of different versions speak to each other.
#[test]
fn wire_format_is_pinned() {
    let message = Message {
        sender: "edge-1".into(),
        timestamp: Timestamp::from_unix_millis(1_700_000_000_123),
        sequence: 42,
        recipient: None,
        payload: Payload::Results {
            ballots: BTreeMap::from([(
                "edge-3".to_string(),
                BTreeMap::from([(
                    "edge-2".to_string(),
                    crate::ballot::SignedBallot {
                        period: Period(170_000_000),
                        healthy: false,
                        signature: crate::node_key::Signature([7; 64]),
                    },
                )]),
            )]),
        },
    };
    let frame = String::from_utf8(seal(&key(), &message)).unwrap();
    let sig = "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBw==";
    let body = format!(
        r#"{{"sender":"edge-1","timestamp":1700000000123,"sequence":42,"payload":{{"results":{{"ballots":{{"edge-3":{{"edge-2":{{"p":170000000,"h":false,"s":"{sig}"}}}}}}}}}}}}"#
    );
    let mac = hex(hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, KEY), body.as_bytes()).as_ref());
    // Ed25519 is deterministic: the sender's signature over the domain tag and the body
    let signed = [b"edgegrid.io/edge-health frame v1\0".as_slice(), body.as_bytes()].concat();
    let frame_sig = STANDARD.encode(signing("edge-1").sign_bytes(&signed).0);
    assert_eq!(frame, format!(r#"{{"body":{body},"mac":"{mac}","sig":"{frame_sig}"}}"#));
    let request = Message {
        recipient: Some("edge-3".into()),
        payload: Payload::ProbeRequest { id: 9, target: "edge-2".into(), nonce: Nonce([0xab; 16]) },
        ..message.clone()
    };
    let frame = String::from_utf8(seal(&key(), &request)).unwrap();
    let nonce = "ab".repeat(16);
    let want =
        format!(r#""recipient":"edge-3","payload":{{"probeRequest":{{"id":9,"target":"edge-2","nonce":"{nonce}"}}}}"#);
    assert!(frame.contains(&want), "{frame}");
    let challenge = Message {
        recipient: Some("edge-2".into()),
        payload: Payload::Challenge { checker: "edge-3".into(), nonce: Nonce([0xab; 16]) },
        ..message.clone()
    };
    let frame = String::from_utf8(seal(&key(), &challenge)).unwrap();
    let want = format!(r#""payload":{{"challenge":{{"checker":"edge-3","nonce":"{nonce}"}}}}"#);
    assert!(frame.contains(&want), "{frame}");
    let proof = liveness::prove(&signing("edge-2"), "edge-2", "edge-3", Nonce([0xab; 16]));
    let sig = STANDARD.encode(proof.signature.0);
    let answer = Message {
        recipient: Some("edge-3".into()),
        payload: Payload::ProbeAnswer { id: 9, target: "edge-2".into(), reachable: true, proof: Some(proof) },
        ..message
    };
    let frame = String::from_utf8(seal(&key(), &answer)).unwrap();
    let want = format!(
        r#""payload":{{"probeAnswer":{{"id":9,"target":"edge-2","reachable":true,"proof":{{"target":"edge-2","checker":"edge-3","nonce":"{nonce}","sig":"{sig}"}}}}}}"#
    );
    assert!(frame.contains(&want), "{frame}");
}

#[test]
fn keys_must_be_supplied_and_long_enough() {
    assert_eq!(HmacKey::new(b"").err(), Some(KeyError::Empty));
    // SuperEdge's built-in default key was 16 characters
    assert_eq!(HmacKey::new(b"hSZbJsKAVmWTxRPi").err(), Some(KeyError::TooShort(16)));
    assert_eq!(HmacKey::new(&KEY[..31]).err(), Some(KeyError::TooShort(31)));
    assert!(HmacKey::new(KEY).is_ok());
    assert_eq!(format!("{:?}", key()), "HmacKey(..)", "the key never reaches a log");
}

#[test]
fn bad_macs_are_rejected() {
    let good = seal(&key(), &message("a", at(0), 1));
    let text = String::from_utf8(good.clone()).unwrap();

    // the body changed in transit: "h":false -> true
    let tampered = text.replace(r#""h":false"#, r#""h":true "#);
    assert_ne!(tampered, text);
    assert_eq!(verifier().open(tampered.as_bytes(), at(0), members), Err(Rejection::BadMac));

    // whitespace is part of what is signed
    let spaced = text.replacen(r#"{"sender""#, r#"{ "sender""#, 1);
    assert_eq!(verifier().open(spaced.as_bytes(), at(0), members), Err(Rejection::BadMac));

    // signed under another key
    let forged = seal(&HmacKey::new(OTHER_KEY).unwrap(), &message("a", at(0), 1));
    assert_eq!(verifier().open(&forged, at(0), members), Err(Rejection::BadMac));

    // a MAC of the right shape but wrong, one truncated, one empty
    let mac_start = text.rfind(r#""mac":""#).unwrap() + 7;
    let mut flipped = text.clone().into_bytes();
    flipped[mac_start] = if flipped[mac_start] == b'0' { b'1' } else { b'0' };
    assert_eq!(verifier().open(&flipped, at(0), members), Err(Rejection::BadMac));
    let sig_field = &text[text.rfind(r#"","sig":"#).unwrap()..];
    let truncated = format!("{}{sig_field}", &text[..mac_start + 62]);
    assert_eq!(verifier().open(truncated.as_bytes(), at(0), members), Err(Rejection::BadMac));
    let empty = format!("{}{sig_field}", &text[..mac_start]);
    assert_eq!(verifier().open(empty.as_bytes(), at(0), members), Err(Rejection::BadMac));

    // and after all that, the genuine frame is still accepted: rejections change nothing
    assert!(verifier().open(&good, at(0), members).is_ok());
}

#[test]
fn malformed_frames_are_rejected() {
    let signed_garbage = |body: &str| {
        let mac = hex(hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, KEY), body.as_bytes()).as_ref());
        format!(r#"{{"body":{body},"mac":"{mac}"}}"#).into_bytes()
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("not JSON", b"hello".to_vec()),
        ("empty", Vec::new()),
        ("no mac", br#"{"body":{}}"#.to_vec()),
        ("extra field", br#"{"body":{},"mac":"00","x":1}"#.to_vec()),
        ("mac not hex", br#"{"body":{},"mac":"zz"}"#.to_vec()),
        ("mac odd length", br#"{"body":{},"mac":"abc"}"#.to_vec()),
        ("too large", vec![b' '; MAX_FRAME_BYTES + 1]),
        // a correct MAC over something that is not a message
        ("signed non-message", signed_garbage(r#"{"hello":1}"#)),
        (
            "signed message with an unknown field",
            signed_garbage(
                r#"{"sender":"a","timestamp":1,"sequence":1,"payload":{"results":{"ballots":{}}},"extra":1}"#,
            ),
        ),
        (
            "signed message with an unknown payload kind",
            signed_garbage(r#"{"sender":"a","timestamp":1,"sequence":1,"payload":{"vote":{}}}"#),
        ),
    ];
    for (name, frame) in cases {
        assert_eq!(verifier().open(&frame, at(0), members), Err(Rejection::Malformed), "{name}");
    }
}

#[test]
fn unknown_senders_are_rejected() {
    let mut v = verifier();
    // a node of another unit holding the same key
    let stranger = seal(&key(), &message("z", at(0), 1));
    assert_eq!(v.open(&stranger, at(0), members), Err(Rejection::UnknownSender));
    // a frame claiming to come from the receiver itself
    let own = seal(&key(), &message("b", at(0), 1));
    assert_eq!(v.open(&own, at(0), members), Err(Rejection::UnknownSender));
    // a former member
    let former = seal(&key(), &message("a", at(0), 1));
    assert_eq!(v.open(&former, at(0), |n| (n == "c").then(|| signing(n).public_key())), Err(Rejection::UnknownSender));
    assert_eq!(v.remembered_senders(), 0, "rejected senders leave no state");
}

#[test]
fn messages_for_another_node_are_rejected() {
    let mut signer = Signer::new(key(), "a", STARTED);
    let frame = signer.seal(
        &signing(signer.sender()),
        at(0),
        Some("c".into()),
        Payload::ProbeAnswer { id: 1, target: "c".into(), reachable: false, proof: None },
    );
    assert_eq!(verifier().open(&frame, at(0), members), Err(Rejection::Misdirected));
}

#[test]
fn timestamps_outside_the_skew_are_rejected() {
    let now = at(60_000);
    let cases = [
        ("just inside, past", now.saturating_sub(SKEW), true),
        ("just outside, past", now.saturating_sub(SKEW + Duration::from_millis(1)), false),
        ("just inside, future", now.saturating_add(SKEW), true),
        ("just outside, future", now.saturating_add(SKEW + Duration::from_millis(1)), false),
        ("an hour old", Timestamp::from_unix_millis(now.as_unix_millis() - 3_600_000), false),
    ];
    for (name, timestamp, accepted) in cases {
        let frame = seal(&key(), &message("a", timestamp, 1));
        let got = verifier().open(&frame, now, members);
        if accepted {
            assert!(got.is_ok(), "{name}: {got:?}");
        } else {
            assert_eq!(got, Err(Rejection::Skew), "{name}");
        }
    }
}

#[test]
fn replays_are_rejected() {
    let mut v = verifier();
    let first = seal(&key(), &message("a", at(0), 100));
    assert!(v.open(&first, at(0), members).is_ok());
    assert_eq!(v.open(&first, at(1), members), Err(Rejection::Replay), "the same frame again");

    // a later frame, then an earlier one delivered late: accepted once
    let later = seal(&key(), &message("a", at(2), 103));
    let late = seal(&key(), &message("a", at(1), 101));
    assert!(v.open(&later, at(2), members).is_ok());
    assert!(v.open(&late, at(3), members).is_ok(), "reordered, not replayed");
    assert_eq!(v.open(&late, at(3), members), Err(Rejection::Replay));

    // the same sequence under a new timestamp (re-signed by a key holder) is still a replay
    let resigned = seal(&key(), &message("a", at(5), 103));
    assert_eq!(v.open(&resigned, at(5), members), Err(Rejection::Replay));

    // beyond the window: too old to tell, refused
    let far = seal(&key(), &message("a", at(6), 103 + REPLAY_WINDOW + 1));
    assert!(v.open(&far, at(6), members).is_ok());
    let ancient = seal(&key(), &message("a", at(6), 102));
    assert_eq!(v.open(&ancient, at(6), members), Err(Rejection::Replay));

    // each sender has its own numbering
    let other = seal(&key(), &message("c", at(7), 1));
    assert!(v.open(&other, at(7), members).is_ok());
}

#[test]
fn a_rotated_key_overlaps_with_the_one_it_replaces_then_the_old_one_is_refused() {
    let mut v = verifier();
    let other = HmacKey::new(OTHER_KEY).unwrap();
    let mut new_sender = Signer::new(key(), "a", STARTED);
    let before = new_sender.seal(&signing(new_sender.sender()), at(1), None, results("c", true));
    assert!(v.open(&before, at(1), members).is_ok());
    // the receiver gets the new key: the old one is accepted until +60 s
    v.rotate(other.clone(), at(60_000));
    new_sender.rotate(other.clone());
    let under_new = new_sender.seal(&signing(new_sender.sender()), at(2), None, results("c", true));
    assert!(v.open(&under_new, at(2), members).is_ok(), "the new key");
    let under_old = seal(&key(), &message("c", at(3), 7));
    assert!(v.open(&under_old, at(3), members).is_ok(), "a node still on the old key, within the overlap");
    // the replay window survived the rotation: the first frame is still a replay, and a
    // frame under the old key is not a way around it
    assert_eq!(v.open(&before, at(4), members), Err(Rejection::Replay));
    let late = seal(&key(), &message("c", at(60_000), 8));
    assert!(v.open(&late, at(60_000), members).is_ok(), "the overlap's last moment");
    let too_late = seal(&key(), &message("c", at(60_001), 9));
    assert_eq!(v.open(&too_late, at(60_001), members), Err(Rejection::BadMac), "after the overlap");
    let neither = seal(&HmacKey::new(&[9; 32]).unwrap(), &message("c", at(4), 10));
    assert_eq!(v.open(&neither, at(4), members), Err(Rejection::BadMac), "a key never used");
    // a second rotation replaces the previous key: only the one just replaced overlaps
    v.rotate(HmacKey::new(&[5; 32]).unwrap(), at(120_000));
    let two_back = seal(&key(), &message("c", at(61_000), 11));
    assert_eq!(v.open(&two_back, at(61_000), members), Err(Rejection::BadMac));
    let one_back = seal(&other, &message("c", at(61_000), 12));
    assert!(v.open(&one_back, at(61_000), members).is_ok());
    // the sender's sequence went on across its rotation
    let next = new_sender.message(at(5), None, results("c", true));
    assert_eq!(next.sequence, STARTED.as_unix_millis() * 1000 + 2);
}

#[test]
fn messages_from_before_the_receiver_started_are_replays() {
    // the receiver restarted and forgot what it accepted: it cannot tell a replay
    let frame = seal(&key(), &message("a", Timestamp::from_unix_millis(STARTED.as_unix_millis() - 1), 1));
    assert_eq!(verifier().open(&frame, at(0), members), Err(Rejection::Replay));
}

#[test]
fn a_restarted_sender_continues_above_its_old_sequence() {
    let mut v = verifier();
    let mut before = Signer::new(key(), "a", at(0));
    for _ in 0..1000 {
        assert!(
            v.open(&before.seal(&signing(before.sender()), at(0), None, results("c", true)), at(0), members).is_ok()
        );
    }
    let mut after = Signer::new(key(), "a", at(1));
    assert!(v.open(&after.seal(&signing(after.sender()), at(1), None, results("c", true)), at(1), members).is_ok());
}

#[test]
fn departed_senders_are_forgotten() {
    let mut v = verifier();
    for (sender, seq) in [("a", 1), ("c", 1)] {
        assert!(v.open(&seal(&key(), &message(sender, at(0), seq)), at(0), members).is_ok());
    }
    assert_eq!(v.remembered_senders(), 2);
    v.retain_senders(|n| n == "c");
    assert_eq!(v.remembered_senders(), 1);
}

#[test]
fn rejection_labels_are_distinct() {
    let labels: BTreeSet<&str> = Rejection::ALL.iter().map(|r| r.metric_label()).collect();
    assert_eq!(labels.len(), Rejection::ALL.len());
}

proptest! {
    /// Any change to any byte of a sealed frame is refused, never accepted as something else.
    #[test]
    fn any_corruption_is_rejected(index in any::<prop::sample::Index>(), flip in 1u8..=255) {
        let mut frame = seal(&key(), &message("a", at(0), 1));
        let i = index.index(frame.len());
        frame[i] ^= flip;
        let got = verifier().open(&frame, at(0), members);
        prop_assert!(matches!(got, Err(Rejection::BadMac | Rejection::Malformed | Rejection::BadSignature)), "{:?}", got);
    }

    /// The verifier accepts each sequence number at most once, and accepts exactly those
    /// that are new and within [`REPLAY_WINDOW`] of the highest accepted so far.
    #[test]
    fn replay_window_matches_a_model(sequences in proptest::collection::vec(0u64..200, 1..300)) {
        let mut v = verifier();
        let mut seen: BTreeSet<u64> = BTreeSet::new();
        for seq in sequences {
            let frame = seal(&key(), &message("a", at(0), seq));
            let highest = seen.last().copied();
            let want = !seen.contains(&seq) && highest.is_none_or(|h| seq + REPLAY_WINDOW >= h);
            let got = v.open(&frame, at(0), members);
            prop_assert_eq!(got.is_ok(), want, "seq {} highest {:?}", seq, highest);
            if want {
                seen.insert(seq);
            } else {
                prop_assert_eq!(got, Err(Rejection::Replay));
            }
        }
    }
}

/// Attack (d) of issue 24: a holder of the unit key sends a frame in another member's name
/// with the largest sequence; the member's real frames must still be accepted.
#[test]
fn a_sequence_ahead_of_the_clock_cannot_silence_its_sender() {
    let mut receiver = verifier();
    let forged = seal(&key(), &message("a", at(10), u64::MAX));
    assert_eq!(receiver.open(&forged, at(20), members), Err(Rejection::FutureSequence));
    // just past what the clock and the allowed skew allow: refused too
    let horizon = at(20).saturating_add(SKEW).as_unix_millis() * 1000;
    let ahead = seal(&key(), &message("a", at(10), horizon + 1));
    assert_eq!(receiver.open(&ahead, at(20), members), Err(Rejection::FutureSequence));
    // the real sender, started with the receiver, is heard
    let mut signer = Signer::new(key(), "a", STARTED);
    let real = signer.seal(&signing(signer.sender()), at(15), None, results("c", false));
    assert!(receiver.open(&real, at(20), members).is_ok(), "the forged frames left no trace");
    // a sender whose clock runs ahead within the skew is heard as well
    let mut early = Signer::new(key(), "c", at(20).saturating_add(SKEW));
    let frame = early.seal(&signing(early.sender()), at(20).saturating_add(SKEW), None, results("a", true));
    assert!(receiver.open(&frame, at(20), members).is_ok());
}

/// Attack 2 of issue 35: a member holding the unit key seals a frame in another member's
/// name with a sequence just inside the clock's horizon (now in microseconds): accepted, it
/// would make every real frame of that member (its start time in microseconds plus its
/// count) a replay for the rest of its run. Its signature is not the named member's, so it
/// is refused and the member's replay state does not move.
#[test]
fn a_frame_in_another_members_name_cannot_mute_it() {
    let mut receiver = verifier();
    let mut real = Signer::new(key(), "a", STARTED);
    assert!(receiver.open(&real.seal(&signing("a"), at(10), None, results("c", false)), at(10), members).is_ok());
    // "c" holds the unit key and its own node key, and writes in "a"'s name
    let muting = message("a", at(20), at(20).as_unix_millis() * 1000);
    let forged = seal_message(&key(), &signing("c"), &muting);
    assert_eq!(receiver.open(&forged, at(20), members), Err(Rejection::BadSignature));
    // "a"'s next real frame is heard
    let next = real.seal(&signing("a"), at(30), None, results("c", true));
    assert!(receiver.open(&next, at(30), members).is_ok(), "the forged frame moved a's sequence");
    // signed by "a" but under the key "a" no longer publishes (re-imaged): refused, no trace
    let stale =
        seal_message(&key(), &SigningKey::from_seed(&[7; 32]), &message("a", at(40), at(40).as_unix_millis() * 1000));
    assert_eq!(receiver.open(&stale, at(40), members), Err(Rejection::BadSignature));
    assert!(receiver.open(&real.seal(&signing("a"), at(50), None, results("c", true)), at(50), members).is_ok());
}

/// A member flooding this node with frames it signed has at most the budget taken (the
/// rest refused before their signature is checked), gets it back as time passes, and
/// another member forging frames in its name spends none of it.
#[test]
fn a_flooding_sender_is_held_to_its_budget_and_forgers_cannot_spend_anyones() {
    let budget = FrameBudget { per_second: 10.0, burst: 5.0 };
    let mut receiver = verifier().with_budget(budget);
    let mut flooder = Signer::new(key(), "a", STARTED);
    let mut send = |receiver: &mut Verifier, offset: u64| {
        let frame = flooder.seal(&signing("a"), at(offset), None, results("c", false));
        receiver.open(&frame, at(offset), members)
    };
    for _ in 0..5 {
        assert!(send(&mut receiver, 0).is_ok());
    }
    assert_eq!(send(&mut receiver, 0), Err(Rejection::OverBudget), "the burst is spent");
    // 10 a second: one more after 100 ms
    assert!(send(&mut receiver, 100).is_ok());
    assert_eq!(send(&mut receiver, 100), Err(Rejection::OverBudget));
    // "c" forges frames in "a"'s name: refused, a's budget untouched
    let mut other = verifier().with_budget(budget);
    for sequence in 0..20 {
        let forged =
            seal_message(&key(), &signing("c"), &message("a", at(0), at(0).as_unix_millis() * 1000 + sequence));
        assert_eq!(other.open(&forged, at(0), members), Err(Rejection::BadSignature));
    }
    let mut real = Signer::new(key(), "a", STARTED);
    for _ in 0..5 {
        assert!(other.open(&real.seal(&signing("a"), at(0), None, results("c", true)), at(0), members).is_ok());
    }
}

/// The budget holds every frame an honest member sends a receiver at the protocol's most:
/// twice that, per period.
#[test]
fn the_budget_is_twice_an_honest_members_most() {
    let protocol = crate::config::ProtocolConfig {
        period: Duration::from_secs(10),
        probes_per_period: 3,
        indirect_helpers: 3,
        indirect_timeout: Duration::from_secs(2),
        vote_window: 3,
        max_clock_skew: SKEW,
        send_retries: 1,
        relay_rounds: 8,
        relay_fanout: 3,
        relay_spread: 2,
        vote_rule: Default::default(),
    };
    // (8 relay rounds + 3 requests + 3 answers + 4 challenges + 4 proofs) x 2 attempts =
    // 44 a period at most
    assert_eq!(FrameBudget::for_protocol(&protocol), FrameBudget { per_second: 8.8, burst: 88.0 });
}
