use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use ring::rand::SystemRandom;
use ring::signature::{Ed25519KeyPair, KeyPair};
use serde_json::json;

use super::*;

fn key_pair() -> Ed25519KeyPair {
    let document = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).expect("a key");
    Ed25519KeyPair::from_pkcs8(document.as_ref()).expect("the key")
}

fn public(key: &Ed25519KeyPair) -> [u8; 32] {
    key.public_key().as_ref().try_into().expect("32 bytes")
}

fn voucher(keys: &[&Ed25519KeyPair]) -> Voucher {
    Voucher::new(VoucherConfig {
        keys: keys.iter().map(|k| public(k)).collect(),
        max_skew: Duration::from_secs(30),
        window: Duration::from_secs(10),
    })
}

const WALL: i64 = 1_790_000_000;

fn batch(sequence: u64, states: &[(&str, &[StateDigest])]) -> Batch {
    Batch::new("run-a", sequence, WALL, states.iter().map(|(s, d)| (s.to_string(), d.to_vec())))
}

fn element_of(n: u8) -> ElementDigest {
    sha256(&[n])
}

// ---- the set hash

#[test]
fn the_empty_set_hashes_to_the_digest_of_zero_lanes() {
    assert_eq!(SetHash::default().digest(), sha256(&[0u8; 2 * LANES]));
}

#[test]
fn an_elements_lanes_are_sha256_in_counter_mode_over_its_digest() {
    let element = element_of(7);
    let mut one = SetHash::default();
    one.add(&element);
    // the lanes, worked out independently: block b gives lanes 16b..16b+16, little-endian
    let mut lanes = Vec::new();
    for block in 0u8..64 {
        let mut input = b"edgegrid vouch lthash16 v1".to_vec();
        input.extend_from_slice(&element);
        input.push(block);
        let output = sha256(&input);
        lanes.extend(output.chunks(2).map(|pair| [pair[0], pair[1]]));
    }
    assert_eq!(one.digest(), sha256(&lanes.concat()));
}

#[test]
fn adding_then_removing_an_element_gives_the_set_back() {
    let mut set = SetHash::default();
    set.add(&element_of(1));
    let before = set.clone();
    set.add(&element_of(2));
    assert_ne!(set, before);
    set.remove(&element_of(2));
    assert_eq!(set, before);
}

#[test]
fn digests_are_written_and_read_as_64_hex_digits() {
    let digest = element_of(3);
    assert_eq!(hex(&digest).len(), 64);
    assert_eq!(parse_hex(&hex(&digest)), Some(digest));
    for bad in ["", "00", &"g".repeat(64), &"0".repeat(63), &"0".repeat(65), &"é".repeat(32)] {
        assert_eq!(parse_hex(bad), None, "{bad:?}");
    }
}

proptest! {
    /// Whatever the order of puts and deletes, the digest is that of the final set built
    /// directly (a follower and the signer reach a state by different histories).
    #[test]
    fn a_sets_digest_depends_only_on_what_it_holds(steps in prop::collection::vec((0u8..12, prop::option::of(0u8..6)), 0..60)) {
        let mut set = KeyedSet::default();
        let mut expected: BTreeMap<u8, u8> = BTreeMap::new();
        for (key, value) in steps {
            match value {
                Some(value) => {
                    set.put(key, element_of(value));
                    expected.insert(key, value);
                }
                None => {
                    set.delete(&key);
                    expected.remove(&key);
                }
            }
        }
        let mut direct = KeyedSet::default();
        for (key, value) in expected.iter().rev() {
            direct.put(*key, element_of(*value));
        }
        prop_assert_eq!(set.digest(), direct.digest());
        prop_assert_eq!(set.len(), expected.len());
    }

    /// Two different sets (as multisets of element digests) have different digests.
    #[test]
    fn different_sets_have_different_digests(a in prop::collection::btree_set(0u8..40, 0..8), b in prop::collection::btree_set(0u8..40, 0..8)) {
        let digest = |members: &std::collections::BTreeSet<u8>| {
            let mut set = KeyedSet::default();
            for m in members {
                set.put(*m, element_of(*m));
            }
            set.digest()
        };
        prop_assert_eq!(digest(&a) == digest(&b), a == b);
    }
}

// ---- the element

#[test]
fn an_element_leaves_out_the_version_and_managed_fields_and_nothing_else() {
    let object = json!({"metadata": {"name": "web-1", "namespace": "ns", "resourceVersion": "7",
                                     "managedFields": [{"manager": "kcm"}], "labels": {"a": "b"}},
                        "endpoints": [{"addresses": ["10.0.0.1"], "nodeName": "n1"}],
                        "addressType": "IPv4"});
    let base = element("endpointslices", &object);
    // another leader's version, no managed fields, other key order: the same element
    let same = json!({"addressType": "IPv4",
                      "endpoints": [{"nodeName": "n1", "addresses": ["10.0.0.1"]}],
                      "metadata": {"labels": {"a": "b"}, "namespace": "ns", "name": "web-1", "resourceVersion": "91"}});
    assert_eq!(element("endpointslices", &same), base);
    // any other change is another element
    let mut changed = object.clone();
    changed["endpoints"][0]["addresses"][0] = json!("10.6.6.6");
    assert_ne!(element("endpointslices", &changed), base);
    let mut relabelled = object.clone();
    relabelled["metadata"]["labels"]["a"] = json!("c");
    assert_ne!(element("endpointslices", &relabelled), base);
    // a field named like the left-out ones, deeper down, counts
    let mut deeper = object.clone();
    deeper["endpoints"][0]["resourceVersion"] = json!("1");
    assert_ne!(element("endpointslices", &deeper), base);
    // the same object in another stream is another element
    assert_ne!(element("services", &object), base);
}

#[test]
fn an_elements_canonical_json_escapes_as_json_does() {
    let a = json!({"metadata": {"name": "a\"b"}, "x": 1.5, "y": null, "z": [true, false]});
    let b = json!({"z": [true, false], "y": null, "x": 1.5, "metadata": {"name": "a\"b"}});
    assert_eq!(element("s", &a), element("s", &b));
    assert_ne!(
        element("s", &a),
        element("s", &json!({"metadata": {"name": "a\\b"}, "x": 1.5, "y": null, "z": [true, false]}))
    );
}

// ---- batches and the voucher

#[test]
fn a_signed_batch_vouches_for_its_states_for_the_window() {
    let signer = key_pair();
    let mut voucher = voucher(&[&signer]);
    let now = Instant::now();
    let (d1, d2) = (element_of(1), element_of(2));
    let signed = batch(1, &[("services", &[d1, d2])]).sign(&signer);
    assert_eq!(voucher.receive(&signed, now, WALL), Ok(1));
    assert!(voucher.vouches("services", &d1, now));
    assert!(voucher.vouches("services", &d2, now + Duration::from_secs(10)));
    assert!(!voucher.vouches("services", &d2, now + Duration::from_millis(10_001)), "expired after the window");
    assert!(!voucher.vouches("endpoints", &d1, now), "per stream");
    // a later batch naming a state again keeps it vouched for
    let later = now + Duration::from_secs(8);
    let again = Batch::new("run-a", 2, WALL + 8, [("services".to_string(), vec![d2])]);
    voucher.receive(&again.sign(&signer), later, WALL + 8).expect("taken");
    assert!(voucher.vouches("services", &d2, now + Duration::from_secs(15)));
    assert!(!voucher.vouches("services", &d1, now + Duration::from_secs(15)));
}

/// A leader holding the signer's batches back and serving them late (each within the skew
/// allowance, so taken) gains nothing: a batch vouches for the window from its issue, so
/// one received 6 s after it was issued vouches for 4 s more, one received after its
/// window for nothing. (Counted from the receipt, a leader re-serving old batches one by one
/// kept a withheld change hidden for the skew allowance plus the window plus the patience.)
#[test]
fn a_batch_served_late_vouches_only_for_what_is_left_of_its_window() {
    let signer = key_pair();
    let mut voucher = voucher(&[&signer]);
    let now = Instant::now();
    let d = element_of(1);
    let issued_at =
        |sequence: u64, issued: i64| Batch::new("run-a", sequence, issued, [("services".to_string(), vec![d])]);
    // issued 6 s before it arrives
    assert_eq!(voucher.receive(&issued_at(1, WALL - 6).sign(&signer), now, WALL), Ok(1));
    assert!(voucher.vouches("services", &d, now + Duration::from_secs(4)));
    assert!(!voucher.vouches("services", &d, now + Duration::from_millis(4_001)), "10 s from its issue");
    // issued 25 s before it arrives (within the 30 s skew allowance: taken, but too old)
    let later = now + Duration::from_secs(5);
    assert_eq!(voucher.receive(&issued_at(2, WALL - 20).sign(&signer), later, WALL + 5), Ok(2));
    assert!(!voucher.vouches("services", &d, later), "a batch older than the window vouches for nothing");
    // a batch from the node's future (a clock behind the signer's) gets the whole window
    let ahead = now + Duration::from_secs(6);
    assert_eq!(voucher.receive(&issued_at(3, WALL + 9).sign(&signer), ahead, WALL + 6), Ok(3));
    assert!(voucher.vouches("services", &d, ahead + Duration::from_secs(10)));
    assert!(!voucher.vouches("services", &d, ahead + Duration::from_millis(10_001)));
}

#[test]
fn a_batch_not_signed_by_a_trusted_key_is_refused_and_changes_nothing() {
    let (signer, other, rotated) = (key_pair(), key_pair(), key_pair());
    let mut voucher = voucher(&[&signer, &rotated]);
    let now = Instant::now();
    let d = element_of(1);
    let good = batch(1, &[("services", &[d])]).sign(&signer);
    assert_eq!(
        voucher.receive(&batch(1, &[("services", &[d])]).sign(&other), now, WALL),
        Err(BatchError::BadSignature)
    );
    let tampered = SignedBatch { batch: good.batch.replace("\"sequence\":1", "\"sequence\":9"), ..good.clone() };
    assert_eq!(voucher.receive(&tampered, now, WALL), Err(BatchError::BadSignature));
    let unencoded = SignedBatch { signature: "not base64!".into(), ..good.clone() };
    assert_eq!(voucher.receive(&unencoded, now, WALL), Err(BatchError::SignatureEncoding));
    assert!(!voucher.vouches("services", &d, now));
    // nothing was taken: sequence 1 is still new; a rotated key is trusted too
    assert_eq!(voucher.receive(&good, now, WALL), Ok(1));
    assert_eq!(voucher.receive(&batch(2, &[]).sign(&rotated), now, WALL), Ok(2));
}

#[test]
fn a_signed_batch_that_is_no_batch_is_refused_whole() {
    let signer = key_pair();
    let mut voucher = voucher(&[&signer]);
    let now = Instant::now();
    let sign = |text: &str| SignedBatch {
        batch: text.to_string(),
        signature: base64::Engine::encode(&base64::engine::general_purpose::STANDARD, signer.sign(text.as_bytes())),
    };
    assert!(matches!(voucher.receive(&sign("{\"run\":1}"), now, WALL), Err(BatchError::Malformed(_))));
    let good = hex(&element_of(1));
    let text = format!(
        r#"{{"run":"r","sequence":1,"issued":{WALL},"states":{{"endpoints":["{good}"],"services":["{good}","xyz"]}}}}"#
    );
    assert_eq!(
        voucher.receive(&sign(&text), now, WALL),
        Err(BatchError::Digest { stream: "services".into(), digest: "xyz".into() })
    );
    assert!(!voucher.vouches("endpoints", &element_of(1), now), "none of a refused batch is taken");
}

#[test]
fn a_batch_replayed_or_older_than_the_last_is_refused() {
    let signer = key_pair();
    let mut voucher = voucher(&[&signer]);
    let now = Instant::now();
    voucher.receive(&batch(5, &[]).sign(&signer), now, WALL).expect("taken");
    for sequence in [5, 4] {
        let error = voucher.receive(&batch(sequence, &[("services", &[element_of(9)])]).sign(&signer), now, WALL);
        assert!(matches!(error, Err(BatchError::NotNewer { .. })), "{sequence}: {error:?}");
    }
    assert!(!voucher.vouches("services", &element_of(9), now));
    // another run (a restarted signer) is taken if issued after the last batch
    let same_second = Batch::new("run-b", 0, WALL, []).sign(&signer);
    assert!(matches!(voucher.receive(&same_second, now, WALL), Err(BatchError::NotNewer { .. })));
    assert_eq!(voucher.receive(&Batch::new("run-b", 0, WALL + 1, []).sign(&signer), now, WALL), Ok(0));
    // and the old run's batches, played in turns with the new one's, are not
    assert_eq!(voucher.receive(&batch(6, &[]).sign(&signer), now, WALL + 1).map_err(|e| e.reason()), Err("not_newer"));
}

proptest! {
    /// Why a follower keeps no record of its last batch across restarts: a restarted
    /// follower (a fresh voucher) fed any of the signer's batches by its leader, replayed,
    /// reordered, held back, never vouches for a state at a time its running self, which took
    /// every batch when it was issued, would not have. A batch vouches until its issue plus
    /// the window, whoever serves it and whenever, so the replays a remembered sequence would
    /// refuse can only repeat what was already vouched for at that time; what a leader can
    /// hide stays bounded by the window and the patience (see vouched sharing in docs/grid-wrapper.md).
    #[test]
    fn a_restarted_follower_vouches_for_nothing_its_running_self_would_not(
        batches in prop::collection::vec((1i64..6, prop::collection::btree_set(0u8..6, 0..4)), 1..12),
        restart in 0usize..12,
        served in prop::collection::vec((0usize..12, 0i64..8), 0..16),
    ) {
        let signer = key_pair();
        let start = Instant::now();
        let at = |wall: i64| start + Duration::from_secs(u64::try_from(wall - WALL).unwrap());
        // the signer's batches, issued `gap` seconds apart
        let mut issued = Vec::new();
        let mut wall = WALL;
        for (sequence, (gap, states)) in batches.iter().enumerate() {
            wall += gap;
            let digests: Vec<StateDigest> = states.iter().map(|n| element_of(*n)).collect();
            let batch = Batch::new("run-a", sequence as u64, wall, [("services".to_string(), digests)]);
            issued.push((wall, batch.sign(&signer)));
        }
        let mut running = voucher(&[&signer]);
        let mut taken = 0;
        let mut restarted = voucher(&[&signer]);
        let mut now = issued[restart.min(issued.len() - 1)].0;
        for (pick, wait) in served {
            now += wait;
            // the leader serves a batch issued by now (it has no later one)
            let Some((_, signed)) = issued.iter().filter(|(w, _)| *w <= now).nth(pick % issued.len()) else { continue };
            let _ = restarted.receive(signed, at(now), now);
            // the running follower took every batch as it was issued
            while let Some((w, signed)) = issued.get(taken).filter(|(w, _)| *w <= now) {
                running.receive(signed, at(*w), *w).expect("taken when issued");
                taken += 1;
            }
            for n in 0u8..6 {
                let digest = element_of(n);
                prop_assert!(
                    !restarted.vouches("services", &digest, at(now)) || running.vouches("services", &digest, at(now)),
                    "state {n} vouched at {} after a restart only", now - WALL
                );
            }
        }
    }
}

#[test]
fn a_batch_issued_too_far_from_the_nodes_clock_is_refused() {
    let signer = key_pair();
    let mut voucher = voucher(&[&signer]);
    let now = Instant::now();
    let at = |issued: i64, sequence: u64| Batch::new("r", sequence, issued, []).sign(&signer);
    assert_eq!(
        voucher.receive(&at(WALL - 31, 1), now, WALL),
        Err(BatchError::Skewed { issued: WALL - 31, now: WALL, skew: 31, max: 30 })
    );
    assert!(matches!(voucher.receive(&at(WALL + 31, 1), now, WALL), Err(BatchError::Skewed { .. })));
    assert_eq!(voucher.receive(&at(WALL - 30, 1), now, WALL), Ok(1));
    assert_eq!(voucher.receive(&at(WALL + 30, 2), now, WALL), Ok(2));
}

#[test]
fn a_batch_keeps_the_latest_states_of_a_stream_that_changed_too_often() {
    let digests: Vec<StateDigest> = (0..MAX_STATES_PER_STREAM + 3).map(|i: usize| sha256(&i.to_le_bytes())).collect();
    let batch = Batch::new("r", 1, WALL, [("s".to_string(), digests.clone())]);
    let kept = &batch.states["s"];
    assert_eq!(kept.len(), MAX_STATES_PER_STREAM);
    assert_eq!(kept.first(), Some(&hex(&digests[3])));
    assert_eq!(kept.last(), Some(&hex(&digests[MAX_STATES_PER_STREAM + 2])));
}

// ---- recorder and gate

type Step = Op<String, u8>;

fn apply(key: &str, value: u8) -> Step {
    Op::Apply(key.to_string(), element_of(value), value)
}

fn delete(key: &str) -> Step {
    Op::Delete(key.to_string())
}

/// The signer's batch after `steps`.
fn recorded(
    recorder: &mut StateRecorder<String>,
    steps: &[Step],
    sequence: u64,
    signer: &Ed25519KeyPair,
) -> SignedBatch {
    for step in steps {
        recorder.step(step);
    }
    let states = recorder.take_states().map(|s| ("slices".to_string(), s));
    Batch::new("run-a", sequence, WALL, states).sign(signer)
}

#[test]
fn a_recorder_vouches_for_nothing_before_its_first_list_and_for_the_current_state_after() {
    let mut recorder = StateRecorder::default();
    recorder.step(&Op::<String, u8>::Begin);
    recorder.step(&apply("a", 1));
    assert_eq!(recorder.take_states(), None);
    recorder.step(&Op::<String, u8>::Done);
    let mut listed = KeyedSet::default();
    listed.put("a".to_string(), element_of(1));
    assert_eq!(recorder.take_states(), Some(vec![listed.digest()]));
    // nothing changed: the current state again
    assert_eq!(recorder.take_states(), Some(vec![listed.digest()]));
    recorder.step(&apply("b", 2));
    recorder.step(&apply("b", 2));
    recorder.step(&delete("b"));
    let mut with_b = listed.clone();
    with_b.put("b".to_string(), element_of(2));
    // each state once in a row (the same version twice is one state), the current last
    assert_eq!(recorder.take_states(), Some(vec![with_b.digest(), listed.digest()]));
    // a stream refreshed in turns: its unchanged state only when its turn comes
    assert_eq!(recorder.take_states_refreshing(false), Some(vec![]));
    assert_eq!(recorder.take_states_refreshing(true), Some(vec![listed.digest()]));
    recorder.step(&apply("b", 2));
    assert_eq!(recorder.take_states_refreshing(false), Some(vec![with_b.digest()]), "a change goes out at once");
    recorder.step(&delete("b"));
    assert_eq!(recorder.take_states(), Some(vec![listed.digest()]));
    // a relist under way: the last whole state is the current one
    recorder.step(&Op::<String, u8>::Begin);
    recorder.step(&apply("c", 3));
    assert_eq!(recorder.take_states(), Some(vec![]));
    assert_eq!(recorder.len(), 2);
}

/// The signer, a follower's voucher and gate on one stream, and the time.
struct Follower {
    signer: Ed25519KeyPair,
    voucher: Voucher,
    recorder: StateRecorder<String>,
    gate: VouchGate<String, u8>,
    t0: Instant,
    sequence: u64,
}

impl Follower {
    fn new() -> Self {
        let signer = key_pair();
        let voucher = voucher(&[&signer]);
        Self {
            signer,
            voucher,
            recorder: StateRecorder::default(),
            gate: VouchGate::new("slices"),
            t0: Instant::now(),
            sequence: 0,
        }
    }

    /// The cloud lists `objects`, the signer vouches for it and the gate passes the list.
    fn listed(objects: &[(&str, u8)]) -> Self {
        let mut follower = Self::new();
        let list: Vec<Step> =
            [Op::Begin].into_iter().chain(objects.iter().map(|(k, v)| apply(k, *v))).chain([Op::Done]).collect();
        follower.take(&list, Duration::ZERO);
        follower.vouch(&list, Duration::ZERO);
        assert_eq!(follower.release(Duration::ZERO), list);
        follower
    }

    /// The leader's steps reach the gate `after` t0.
    fn take(&mut self, steps: &[Step], after: Duration) {
        for step in steps {
            self.gate.take(step.clone(), self.t0 + after);
        }
    }

    /// The cloud's steps reach the signer, whose batch the voucher takes `after` t0.
    fn vouch(&mut self, steps: &[Step], after: Duration) {
        self.sequence += 1;
        let batch = recorded(&mut self.recorder, steps, self.sequence, &self.signer);
        self.voucher.receive(&batch, self.t0 + after, WALL).expect("taken");
    }

    fn release(&mut self, after: Duration) -> Vec<Step> {
        self.gate.release(&self.voucher, self.t0 + after)
    }
}

const NOW: Duration = Duration::ZERO;

#[test]
fn a_gate_passes_what_the_cloud_vouched_for_and_holds_the_rest() {
    let mut follower = Follower::new();
    let list = [Op::Begin, apply("a", 1), apply("b", 2), Op::Done];
    follower.take(&list, NOW);
    assert_eq!(follower.release(NOW), vec![], "nothing vouched yet");
    assert_eq!(follower.gate.held_since(), Some(follower.t0));
    follower.vouch(&list, NOW);
    assert_eq!(follower.release(NOW), list.to_vec());
    assert_eq!((follower.gate.held(), follower.gate.held_since()), (0, None));

    // the leader is ahead of the signer: held until a batch names the state
    let t1 = Duration::from_millis(300);
    follower.take(&[apply("a", 3), delete("b")], t1);
    assert_eq!(follower.release(t1), vec![]);
    assert_eq!(follower.gate.held_since(), Some(follower.t0 + t1));
    // the signer saw the first change only: that much passes
    follower.vouch(&[apply("a", 3)], t1);
    assert_eq!(follower.release(t1), vec![apply("a", 3)]);
    follower.vouch(&[delete("b")], t1);
    assert_eq!(follower.release(t1), vec![delete("b")]);
}

#[test]
fn a_forged_object_is_never_passed_nor_anything_after_it() {
    let mut follower = Follower::listed(&[("a", 1)]);
    // the cloud changes a to 2; the leader serves a forged 66 instead, then the real b
    let t1 = Duration::from_secs(1);
    follower.take(&[apply("a", 66), apply("b", 5)], t1);
    for steps in [vec![apply("a", 2)], vec![apply("b", 5)], vec![]] {
        follower.vouch(&steps, t1);
        assert_eq!(follower.release(t1), vec![], "the forged state and every state built on it");
    }
    assert_eq!(follower.gate.held_since(), Some(follower.t0 + t1));
}

#[test]
fn a_forgery_taken_back_before_a_vouched_state_is_never_passed_on() {
    let mut follower = Follower::listed(&[("a", 1)]);
    // a forged endpoint slips in and out again between two vouched states
    follower.take(&[apply("evil", 66), apply("a", 66), apply("a", 2), delete("evil")], NOW);
    follower.vouch(&[apply("a", 2)], NOW);
    // only the vouched state's differences: the forged versions never reach the cache
    // (nor a delete of the forged object, which the cache never held)
    assert_eq!(follower.release(NOW), vec![apply("a", 2)]);
}

#[test]
fn a_delete_of_an_object_the_stream_does_not_hold_is_dropped() {
    let mut follower = Follower::listed(&[("n1", 1)]);
    // a leader's delete of a key the stream never held (say, the Node under another
    // namespace, which the cache would take for n1) changes no state: it is not passed on
    follower.take(&[delete("x/n1")], NOW);
    assert_eq!((follower.gate.held(), follower.release(NOW)), (0, vec![]));
    // a forged delete of a real object changes the state, which no batch vouches for
    follower.take(&[delete("n1")], NOW);
    assert_eq!(follower.release(NOW), vec![]);
    assert_eq!(follower.gate.held(), 1);
}

/// A list/watch told what its index held before the stream (restored, inherited, left by
/// an earlier stream) deletes at its first list what the list lacks: keys the gate never
/// took. Such a delete passes with the list's end once that is vouched for (never halfway
/// through the list), in the list's place; outside a list one is still dropped.
#[test]
fn a_lists_delete_of_what_the_index_held_before_passes_with_its_vouched_end() {
    let mut follower = Follower::new();
    let list = [Op::Begin, apply("a", 1), delete("restored"), Op::Done];
    follower.take(&list[..3], NOW);
    assert_eq!(follower.release(NOW), vec![], "no state halfway through a list");
    follower.take(&list[3..], NOW);
    assert_eq!(follower.release(NOW), vec![], "nothing vouched yet");
    follower.vouch(&[Op::Begin, apply("a", 1), Op::Done], NOW);
    assert_eq!(follower.release(NOW), list.to_vec());
    follower.take(&[delete("restored")], NOW);
    assert_eq!((follower.gate.held(), follower.release(NOW)), (0, vec![]));
}

#[test]
fn the_newest_step_is_checked_alone_and_a_batch_checks_them_all() {
    let mut follower = Follower::listed(&[("a", 1)]);
    follower.take(&[apply("a", 2)], NOW);
    follower.vouch(&[apply("a", 2)], NOW);
    follower.take(&[apply("a", 3)], NOW);
    // the newest (a=3) is not vouched for: the newest check passes nothing, a scan does
    let at = follower.t0;
    assert_eq!(follower.gate.release_newest(&follower.voucher, at), vec![]);
    assert_eq!(follower.release(NOW), vec![apply("a", 2)]);
    assert_eq!(follower.gate.passed(), Some(&recorded_digest(&[("a", 2)])));
    // and a newest state that is vouched for passes with one check
    follower.take(&[apply("a", 4)], NOW);
    follower.vouch(&[apply("a", 3), apply("a", 4)], NOW);
    assert_eq!(follower.gate.release_newest(&follower.voucher, at), vec![apply("a", 4)]);
}

fn recorded_digest(objects: &[(&str, u8)]) -> StateDigest {
    let mut set = KeyedSet::default();
    for (key, value) in objects {
        set.put(key.to_string(), element_of(*value));
    }
    set.digest()
}

#[test]
fn a_relist_passes_as_the_vouched_state_whole() {
    let mut follower = Follower::listed(&[("a", 1), ("b", 2)]);
    // a change, then a relist from another leader (b gone, c new), as the list/watch
    // delivers it: every listed object applied, the missing one deleted
    follower.take(&[apply("a", 3), Op::Begin, apply("c", 4), apply("a", 3), delete("b"), Op::Done], NOW);
    follower.vouch(&[apply("a", 3), delete("b"), apply("c", 4)], NOW);
    assert_eq!(follower.release(NOW), vec![Op::Begin, apply("a", 3), delete("b"), apply("c", 4), Op::Done]);
}

#[test]
fn a_relist_of_the_state_passed_last_passes_without_a_new_batch() {
    let list = [Op::Begin, apply("a", 1), Op::Done];
    let mut follower = Follower::listed(&[("a", 1)]);
    // long after (the digest expired), another leader lists the same state: it passes
    let later = Duration::from_secs(60);
    follower.take(&list, later);
    assert_eq!(follower.release(later), list.to_vec());
    // but a state other than the one passed still needs a batch
    follower.take(&[apply("a", 2)], later);
    assert_eq!(follower.release(later), vec![]);
}

#[test]
fn a_state_vouched_for_too_long_ago_passes_nothing() {
    let mut follower = Follower::new();
    let list = [Op::Begin, apply("a", 1), Op::Done];
    follower.vouch(&list, NOW);
    // a leader serving, late, a state the cloud left long ago
    let late = Duration::from_secs(11);
    follower.take(&list, late);
    assert_eq!(follower.release(late), vec![]);
}

proptest! {
    /// Whatever the cloud's changes and however the leader splits them into batches,
    /// relists included, an honest leader's stream passes whole once the signer has
    /// vouched for its last state, and the gate's released steps rebuild that state.
    #[test]
    fn an_honest_leaders_stream_passes_and_rebuilds_the_vouched_state(
        changes in prop::collection::vec((0u8..6, prop::option::of(0u8..4)), 1..40),
        relist_at in prop::option::of(0usize..40),
    ) {
        let signer = key_pair();
        let mut voucher = voucher(&[&signer]);
        let mut recorder = StateRecorder::default();
        let mut gate = VouchGate::new("slices");
        let now = Instant::now();
        let mut truth: BTreeMap<String, u8> = BTreeMap::new();
        let mut steps = vec![Op::Begin, Op::Done];
        for (i, (key, value)) in changes.iter().enumerate() {
            let key = format!("k{key}");
            match value {
                Some(value) => {
                    truth.insert(key.clone(), *value);
                    steps.push(apply(&key, *value));
                }
                None => {
                    truth.remove(&key);
                    steps.push(delete(&key));
                }
            }
            if relist_at == Some(i) {
                // the leader relists: everything it holds, as the list/watch delivers it
                steps.push(Op::Begin);
                steps.extend(truth.iter().map(|(k, v)| apply(k, *v)));
                steps.push(Op::Done);
            }
        }
        // the signer saw the changes one by one
        let mut signer_steps = vec![Op::Begin, Op::Done];
        signer_steps.extend(steps.iter().filter(|s| matches!(s, Op::Apply(..) | Op::Delete(_))).cloned());
        voucher.receive(&recorded(&mut recorder, &signer_steps, 1, &signer), now, WALL).expect("taken");
        // what the cache does with the released steps: each apply and delete (a list's
        // Begin and Done only mark it: the list/watch sends a delete for what it lacks)
        let mut served: BTreeMap<String, u8> = BTreeMap::new();
        for step in steps {
            gate.take(step, now);
            for released in gate.release(&voucher, now) {
                match released {
                    Op::Apply(key, _, value) => { served.insert(key, value); }
                    Op::Delete(key) => { served.remove(&key); }
                    Op::Begin | Op::Done => {}
                }
            }
        }
        prop_assert_eq!(gate.held(), 0);
        prop_assert_eq!(served, truth);
    }
}
