use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use proptest::prelude::*;
use serde_json::Value;

use super::*;
use crate::ballot::{SignedBallot, check_signature};
use crate::message::{HmacKey, Message, Payload, Rejection, Verifier, seal_message};
use crate::node_key::{PublicKey, SigningKey};
use crate::time::Timestamp;

fn unit(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("n{i:02}")).collect()
}

fn schedule(members: &[String], k: usize, window: u64) -> Schedule {
    Schedule::new(members, k, window as usize + 2)
}

fn ballot(period: u64, healthy: bool) -> Ballot {
    Ballot { period: Period(period), healthy }
}

/// The checkers assigned to `target` in `period`, in ring order.
fn checkers(s: &mut Schedule, target: &str, period: u64) -> Vec<String> {
    s.assignment(Period(period)).checkers_of(target).into_iter().map(String::from).collect()
}

/// Records, for every checker of `target` in `period`, the ballot `vote(index)` gives.
fn cast(table: &mut VoteTable, s: &mut Schedule, target: &str, period: u64, vote: impl Fn(usize) -> Option<bool>) {
    for (i, checker) in checkers(s, target, period).iter().enumerate() {
        if let Some(healthy) = vote(i) {
            table.record(checker, target, ballot(period, healthy), Period(period), s).unwrap();
        }
    }
}

fn changes(list: &[VerdictChange]) -> Vec<(&str, Verdict, Verdict)> {
    list.iter().map(|c| (c.node.as_str(), c.from, c.to)).collect()
}

#[test]
fn a_strict_majority_of_eligible_checkers_decides() {
    let members = unit(10);
    let mut s = schedule(&members, 3, 1);
    let mut table = VoteTable::new(1, VoteRule::default());
    cast(&mut table, &mut s, "n04", 20, |i| Some(i == 0));
    let got = table.evaluate(Period(20), &mut s);
    let decided = got.iter().find(|c| c.node == "n04").unwrap();
    assert_eq!((decided.from, decided.to), (Verdict::Undecided, Verdict::Unhealthy));
    assert_eq!(decided.tally, Tally { eligible: 3, healthy: 1, unhealthy: 2 });
    assert_eq!(table.verdict("n04"), Verdict::Unhealthy);
    assert_eq!(table.verdict("n05"), Verdict::Undecided, "nobody spoke about n05");
}

#[test]
fn healthy_again_when_a_majority_says_so() {
    let members = unit(10);
    let mut s = schedule(&members, 3, 1);
    let mut table = VoteTable::new(1, VoteRule::default());
    cast(&mut table, &mut s, "n04", 20, |_| Some(false));
    table.evaluate(Period(20), &mut s);
    assert_eq!(table.verdict("n04"), Verdict::Unhealthy);
    cast(&mut table, &mut s, "n04", 21, |i| Some(i != 2));
    assert_eq!(changes(&table.evaluate(Period(21), &mut s)), vec![("n04", Verdict::Unhealthy, Verdict::Healthy)]);
}

#[test]
fn ties_decide_nothing_and_undo_a_verdict() {
    let members = unit(10);
    // k=2, one period: two eligible checkers, one each way
    let mut s = schedule(&members, 2, 1);
    let mut table = VoteTable::new(1, VoteRule::default());
    cast(&mut table, &mut s, "n04", 20, |i| Some(i == 0));
    assert_eq!(table.tally("n04", Period(20), &mut s), Tally { eligible: 2, healthy: 1, unhealthy: 1 });
    assert!(table.evaluate(Period(20), &mut s).is_empty());
    assert_eq!(table.verdict("n04"), Verdict::Undecided);

    // a decided node does not keep its verdict on a tie: a liar making one must not hold it
    cast(&mut table, &mut s, "n04", 21, |_| Some(false));
    table.evaluate(Period(21), &mut s);
    assert_eq!(table.verdict("n04"), Verdict::Unhealthy);
    cast(&mut table, &mut s, "n04", 22, |i| Some(i == 0));
    assert_eq!(changes(&table.evaluate(Period(22), &mut s)), vec![("n04", Verdict::Unhealthy, Verdict::Undecided)]);
}

#[test]
fn a_single_voice_decides_nothing() {
    let members = unit(10);
    let mut s = schedule(&members, 3, 1);
    let mut table = VoteTable::new(1, VoteRule::default());
    // one of three ballots arrived: one voice, however silent the others
    cast(&mut table, &mut s, "n04", 20, |i| (i == 0).then_some(false));
    assert_eq!(table.tally("n04", Period(20), &mut s), Tally { eligible: 3, healthy: 0, unhealthy: 1 });
    assert!(table.evaluate(Period(20), &mut s).is_empty());
    assert_eq!(table.verdict("n04"), Verdict::Undecided);

    // two of three, the third silent: counted are those who spoke
    cast(&mut table, &mut s, "n05", 21, |i| (i < 2).then_some(true));
    table.evaluate(Period(21), &mut s);
    assert_eq!(table.verdict("n05"), Verdict::Healthy);
    // back to one voice: Undecided again
    cast(&mut table, &mut s, "n05", 22, |i| (i == 0).then_some(true));
    assert_eq!(changes(&table.evaluate(Period(22), &mut s)), vec![("n05", Verdict::Healthy, Verdict::Undecided)]);
}

#[test]
fn a_unit_of_two_decides_only_with_the_opt_in() {
    let members = unit(2);
    let mut s = schedule(&members, 3, 1);
    let mut table = VoteTable::new(1, VoteRule::default());
    table.record("n00", "n01", ballot(20, true), Period(20), &mut s).unwrap();
    assert!(table.evaluate(Period(20), &mut s).is_empty());
    assert_eq!(table.verdict("n01"), Verdict::Undecided);
    let mut opted = VoteTable::new(1, VoteRule { allow_units_of_two: true });
    opted.record("n00", "n01", ballot(20, true), Period(20), &mut s).unwrap();
    opted.evaluate(Period(20), &mut s);
    assert_eq!(opted.verdict("n01"), Verdict::Healthy);
}

#[test]
fn the_window_spans_several_periods() {
    let members = unit(20);
    let mut s = schedule(&members, 2, 3);
    let mut table = VoteTable::new(3, VoteRule::default());
    // two periods' worth of unhealthy ballots: 4 of up to 6 eligible
    cast(&mut table, &mut s, "n07", 30, |_| Some(false));
    cast(&mut table, &mut s, "n07", 31, |_| Some(false));
    let tally = table.tally("n07", Period(32), &mut s);
    let eligible: BTreeSet<String> = (30..=32).flat_map(|p| checkers(&mut s, "n07", p)).collect();
    assert_eq!(tally.eligible, eligible.len());
    let unhealthy: BTreeSet<String> = (30..=31).flat_map(|p| checkers(&mut s, "n07", p)).collect();
    assert_eq!(tally.unhealthy, unhealthy.len());
    assert_eq!(tally.decision(VoteRule::default(), 20), Verdict::Unhealthy);
}

#[test]
fn stale_ballots_expire() {
    let members = unit(10);
    let mut s = schedule(&members, 3, 2);
    let mut table = VoteTable::new(2, VoteRule::default());
    cast(&mut table, &mut s, "n04", 20, |_| Some(false));
    // at period 21 the ballots of period 20 are still fresh
    assert_eq!(table.tally("n04", Period(21), &mut s).unhealthy, 3);
    // at period 22 they are not, and evaluating drops them
    assert_eq!(table.tally("n04", Period(22), &mut s).unhealthy, 0);
    assert!(table.evaluate(Period(22), &mut s).is_empty());
    assert!(table.ballots.is_empty(), "expired ballots are dropped");
    // and a ballot that is already stale is refused at once
    let checker = checkers(&mut s, "n04", 20)[0].clone();
    assert_eq!(table.record(&checker, "n04", ballot(20, false), Period(22), &mut s), Err(BallotIgnored::Stale));
}

#[test]
fn one_checker_counts_once_latest_wins() {
    let members = unit(10);
    let mut s = schedule(&members, 3, 1);
    let mut table = VoteTable::new(1, VoteRule::default());
    let c = checkers(&mut s, "n04", 20);
    // the same checker repeating itself is still one voice
    let first = table.record(&c[0], "n04", ballot(20, false), Period(20), &mut s);
    assert_eq!(first, Ok(Recorded::New));
    for _ in 0..4 {
        // known: not relayed again
        assert_eq!(table.record(&c[0], "n04", ballot(20, false), Period(20), &mut s), Ok(Recorded::Known));
    }
    assert_eq!(table.tally("n04", Period(20), &mut s), Tally { eligible: 3, healthy: 0, unhealthy: 1 });
    assert!(table.evaluate(Period(20), &mut s).is_empty());
    // it changes its mind within the period: the later ballot replaces the earlier
    assert_eq!(table.record(&c[0], "n04", ballot(20, true), Period(20), &mut s), Ok(Recorded::New));
    assert_eq!(table.tally("n04", Period(20), &mut s), Tally { eligible: 3, healthy: 1, unhealthy: 0 });
    // an older ballot arriving late does not replace a newer one
    let mut w = VoteTable::new(2, VoteRule::default());
    let mut s2 = schedule(&members, 9, 2);
    w.record(&c[0], "n04", ballot(21, true), Period(21), &mut s2).unwrap();
    assert_eq!(w.record(&c[0], "n04", ballot(20, false), Period(21), &mut s2), Err(BallotIgnored::Superseded));
    assert_eq!(w.tally("n04", Period(21), &mut s2).healthy, 1);
}

/// Standbys are chosen by what each of them heard, so a ballot from any member counts, once
/// per checker; a ballot naming a stranger, as checker or target, is refused.
#[test]
fn any_members_ballot_counts_once_and_a_strangers_is_refused() {
    let members = unit(10);
    let mut s = schedule(&members, 3, 2);
    let mut table = VoteTable::new(1, VoteRule::default());
    let assigned = checkers(&mut s, "n04", 20);
    let outsiders: Vec<&String> = members.iter().filter(|m| !assigned.contains(m) && *m != "n04").collect();
    assert_eq!(outsiders.len(), 6);
    // two members not asked to check n04 accuse it, one of them twice, one assigned one does not
    for o in &outsiders[..2] {
        assert_eq!(table.record(o, "n04", ballot(20, false), Period(20), &mut s), Ok(Recorded::New));
    }
    assert_eq!(table.record(outsiders[0], "n04", ballot(20, false), Period(20), &mut s), Ok(Recorded::Known));
    table.record(&assigned[0], "n04", ballot(20, true), Period(20), &mut s).unwrap();
    assert_eq!(table.tally("n04", Period(20), &mut s), Tally { eligible: 5, healthy: 1, unhealthy: 2 });
    let got = table.evaluate(Period(20), &mut s);
    assert_eq!(changes(&got), vec![("n04", Verdict::Undecided, Verdict::Unhealthy)]);
    for (checker, target) in [("stranger", "n04"), ("n04", "stranger")] {
        assert_eq!(
            table.record(checker, target, ballot(20, false), Period(20), &mut s),
            Err(BallotIgnored::NotAMember)
        );
    }
    assert_eq!(table.ballots().count(), 3);
}

#[test]
fn self_and_future_ballots_are_refused() {
    let members = unit(3);
    let mut s = schedule(&members, 2, 2);
    let mut table = VoteTable::new(2, VoteRule::default());
    assert_eq!(table.record("n01", "n01", ballot(20, false), Period(20), &mut s), Err(BallotIgnored::SelfBallot));
    assert_eq!(table.record("n01", "n02", ballot(22, false), Period(20), &mut s), Err(BallotIgnored::Future));
    // one period ahead is a clock slightly ahead: stored, counted once its period comes
    assert_eq!(table.record("n01", "n02", ballot(21, false), Period(20), &mut s), Ok(Recorded::New));
    assert_eq!(table.tally("n02", Period(20), &mut s).unhealthy, 0);
    assert_eq!(table.tally("n02", Period(21), &mut s).unhealthy, 1);
}

/// A checker that dies stops counting once its last ballots leave the window, not before:
/// what it saw while it lived still backs its targets' verdicts, so its death leaves none
/// of them with a single voice.
#[test]
fn a_dead_checkers_last_ballots_count_until_they_leave_the_window() {
    let members = unit(5);
    // a unit of five, everyone checking everyone, a window of two periods
    let mut s = schedule(&members, 5, 2);
    let mut table = VoteTable::new(2, VoteRule::default());
    let all = |table: &mut VoteTable, s: &mut Schedule, period: u64, alive: &[&str]| {
        for checker in alive {
            for target in members.iter().filter(|t| *t != checker) {
                let healthy = alive.contains(&target.as_str());
                table.record(checker, target, ballot(period, healthy), Period(period), s).unwrap();
            }
        }
    };
    all(&mut table, &mut s, 20, &["n00", "n01", "n02", "n03", "n04"]);
    table.evaluate(Period(20), &mut s);
    // n04 dies: the others accuse it; its healthy ballots of period 20 still count
    all(&mut table, &mut s, 21, &["n00", "n01", "n02", "n03"]);
    table.evaluate(Period(21), &mut s);
    assert_eq!(table.verdict("n04"), Verdict::Unhealthy);
    assert_eq!(table.tally("n01", Period(21), &mut s), Tally { eligible: 4, healthy: 4, unhealthy: 0 });
    // a period later they have left the window: n04 no longer counts, n01 is still Healthy
    all(&mut table, &mut s, 22, &["n00", "n01", "n02", "n03"]);
    table.evaluate(Period(22), &mut s);
    assert_eq!(table.tally("n01", Period(22), &mut s), Tally { eligible: 4, healthy: 3, unhealthy: 0 });
    assert_eq!((table.verdict("n01"), table.verdict("n04")), (Verdict::Healthy, Verdict::Unhealthy));
}

#[test]
fn departed_members_are_forgotten() {
    let members = unit(4);
    let mut s = schedule(&members, 3, 1);
    let mut table = VoteTable::new(1, VoteRule::default());
    cast(&mut table, &mut s, "n03", 20, |_| Some(false));
    table.evaluate(Period(20), &mut s);
    assert_eq!(table.verdict("n03"), Verdict::Unhealthy);
    let mut smaller = schedule(&members[..3], 3, 1);
    table.evaluate(Period(20), &mut smaller);
    assert_eq!(table.verdict("n03"), Verdict::Undecided);
    assert!(table.ballots.keys().all(|t| t != "n03"));
    assert!(table.ballots.values().all(|by| by.keys().all(|c| c != "n03")));
}

/// A frame that fails authentication never reaches the table, and neither does a replay;
/// the one message that does arrive from a real member is one voice, not a majority.
#[test]
fn one_forged_message_has_no_effect() {
    let members = unit(10);
    let mut s = schedule(&members, 3, 1);
    let mut table = VoteTable::new(1, VoteRule::default());
    let key = HmacKey::new(&[7; 32]).unwrap();
    let start = Timestamp::from_unix_millis(1_000_000);
    let assigned = checkers(&mut s, "n04", 20);
    // the receiver: a member that is neither the target nor one of its checkers
    let local = members.iter().find(|m| *m != "n04" && !assigned.contains(m)).unwrap();
    let mut verifier = Verifier::new(key.clone(), local.as_str(), Duration::from_secs(30), start);
    let sender_key = |n: &str| members.iter().any(|m| m == n).then(|| member_key(n).public_key());
    let accuse = |sender: &str, sequence| Message {
        sender: sender.to_string(),
        timestamp: start,
        sequence,
        recipient: None,
        payload: Payload::Results {
            ballots: BTreeMap::from([(
                sender.to_string(),
                BTreeMap::from([("n04".to_string(), member_key(sender).sign(sender, "n04", ballot(20, false)))]),
            )]),
        },
    };
    let deliver = |table: &mut VoteTable, s: &mut Schedule, verifier: &mut Verifier, frame: &[u8]| {
        let message = verifier.open(frame, start, sender_key)?;
        if let Payload::Results { ballots } = message.payload {
            for (checker, by_target) in ballots {
                for (target, b) in by_target {
                    let key = member_key(&checker).public_key();
                    let verify = || check_signature(Some(&key), &checker, &target, &b);
                    let _ = table.record_received(local, &checker, &target, &b, Period(20), s, verify);
                }
            }
        }
        Ok::<(), Rejection>(())
    };
    // forged: the attacker does not have the key, and signs as each assigned checker
    let forger = HmacKey::new(&[8; 32]).unwrap();
    for c in &assigned {
        let frame = seal_message(&forger, &member_key(c), &accuse(c, 1));
        assert_eq!(deliver(&mut table, &mut s, &mut verifier, &frame), Err(Rejection::BadMac));
    }
    assert!(table.evaluate(Period(20), &mut s).is_empty());
    assert_eq!(table.verdict("n04"), Verdict::Undecided);

    // one real checker's genuine accusation, replayed many times, is still one ballot
    let genuine = seal_message(&key, &member_key(&assigned[0]), &accuse(&assigned[0], 5));
    assert_eq!(deliver(&mut table, &mut s, &mut verifier, &genuine), Ok(()));
    for _ in 0..3 {
        assert_eq!(deliver(&mut table, &mut s, &mut verifier, &genuine), Err(Rejection::Replay));
    }
    assert_eq!(table.tally("n04", Period(20), &mut s).unhealthy, 1);
    assert!(table.evaluate(Period(20), &mut s).is_empty());
    assert_eq!(table.verdict("n04"), Verdict::Undecided);
}

#[test]
fn the_writer_is_the_lowest_named_member_not_held_unhealthy() {
    let members = unit(5);
    let mut s = schedule(&members, 4, 1);
    let mut table = VoteTable::new(1, VoteRule::default());
    assert_eq!(writer_of(&members, "n03", &table), Some("n00"), "undecided members may write");
    assert_eq!(writer_of(&members, "n00", &table), Some("n01"), "never the target itself");
    cast(&mut table, &mut s, "n00", 20, |_| Some(false));
    table.evaluate(Period(20), &mut s);
    assert_eq!(writer_of(&members, "n03", &table), Some("n01"), "n00 is held unhealthy");
    assert_eq!(writer_of(&members, "n00", &table), Some("n01"));
    assert_eq!(writer_of(&members[..1], "n00", &table), None);
}

fn node(rv: &str, annotations: Option<&[(&str, &str)]>) -> Node {
    let mut node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "n04", "resourceVersion": rv, "labels": {"zone": "z1"}},
    }))
    .unwrap();
    node.metadata.annotations = annotations.map(|a| a.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
    node
}

/// Applies a patch as the apiserver would, returning the patched Node.
fn apply(node: &Node, patch: &AnnotationPatch) -> Result<Node, json_patch::PatchError> {
    let mut value: Value = serde_json::to_value(node).unwrap();
    json_patch::patch(&mut value, &patch.patch)?;
    Ok(serde_json::from_value(value).unwrap())
}

fn annotations(node: &Node) -> Option<Vec<(String, String)>> {
    node.metadata.annotations.as_ref().map(|a| a.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

#[test]
fn patches_are_minimal_and_conditional() {
    type Case = (&'static str, Node, Verdict, Option<Option<Vec<(&'static str, &'static str)>>>);
    let cases: Vec<Case> = vec![
        ("mark, no annotations yet", node("7", None), Verdict::Unhealthy, Some(Some(vec![("nodeunhealth", "yes")]))),
        (
            "mark, other annotations kept",
            node("7", Some(&[("a", "1")])),
            Verdict::Unhealthy,
            Some(Some(vec![("a", "1"), ("nodeunhealth", "yes")])),
        ),
        ("already marked", node("7", Some(&[("nodeunhealth", "yes")])), Verdict::Unhealthy, None),
        // SuperEdge's readers: the annotation's presence is the vote, whatever its value
        ("another value already reads unhealthy", node("7", Some(&[("nodeunhealth", "no")])), Verdict::Unhealthy, None),
        ("an empty value already reads unhealthy", node("7", Some(&[("nodeunhealth", "")])), Verdict::Unhealthy, None),
        ("\"true\" already reads unhealthy", node("7", Some(&[("nodeunhealth", "true")])), Verdict::Unhealthy, None),
        (
            "clear",
            node("7", Some(&[("a", "1"), ("nodeunhealth", "yes")])),
            Verdict::Healthy,
            Some(Some(vec![("a", "1")])),
        ),
        ("already clear", node("7", Some(&[("a", "1")])), Verdict::Healthy, None),
        ("no annotations, healthy", node("7", None), Verdict::Healthy, None),
        (
            "clear another value",
            node("7", Some(&[("a", "1"), ("nodeunhealth", "no")])),
            Verdict::Healthy,
            Some(Some(vec![("a", "1")])),
        ),
        ("clear an empty value", node("7", Some(&[("nodeunhealth", "")])), Verdict::Healthy, Some(Some(vec![]))),
        ("clear \"true\"", node("7", Some(&[("nodeunhealth", "true")])), Verdict::Healthy, Some(Some(vec![]))),
        ("undecided leaves another value", node("7", Some(&[("nodeunhealth", "no")])), Verdict::Undecided, None),
        ("undecided is written", node("7", None), Verdict::Undecided, Some(Some(vec![("nodeunhealth", "undecided")]))),
        (
            "undecided replaces yes",
            node("7", Some(&[("a", "1"), ("nodeunhealth", "yes")])),
            Verdict::Undecided,
            Some(Some(vec![("a", "1"), ("nodeunhealth", "undecided")])),
        ),
        ("already undecided", node("7", Some(&[("nodeunhealth", "undecided")])), Verdict::Undecided, None),
        (
            "unhealthy replaces undecided",
            node("7", Some(&[("nodeunhealth", "undecided")])),
            Verdict::Unhealthy,
            Some(Some(vec![("nodeunhealth", "yes")])),
        ),
        ("clear undecided", node("7", Some(&[("nodeunhealth", "undecided")])), Verdict::Healthy, Some(Some(vec![]))),
    ];
    for (name, before, verdict, want) in cases {
        let observed = ObservedNode::from_meta(&before.metadata);
        let patch = annotation_patch(&observed, verdict);
        match want {
            None => assert_eq!(patch, None, "{name}"),
            Some(want) => {
                let patch = patch.unwrap_or_else(|| panic!("{name}: no patch"));
                assert_eq!(patch.node, "n04");
                assert_eq!(patch.verdict, verdict, "{name}");
                assert_eq!(patch.patch.0.len(), 2, "{name}: a precondition and one change");
                let after = apply(&before, &patch).unwrap_or_else(|e| panic!("{name}: {e}"));
                let want = want.map(|a| a.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
                assert_eq!(annotations(&after), want, "{name}");
                // nothing but the annotation changed
                let mut expected = before.clone();
                expected.metadata.annotations = after.metadata.annotations.clone();
                assert_eq!(after, expected, "{name}");
                // the same patch on a newer version of the Node fails its precondition
                let mut newer = before.clone();
                newer.metadata.resource_version = Some("8".into());
                assert!(apply(&newer, &patch).is_err(), "{name}: precondition");
            }
        }
    }
}

#[test]
fn the_patch_is_plain_json_patch() {
    let observed = ObservedNode::from_meta(&node("7", Some(&[])).metadata);
    let patch = annotation_patch(&observed, Verdict::Unhealthy).unwrap();
    assert_eq!(
        serde_json::to_value(&patch.patch).unwrap(),
        serde_json::json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
            {"op": "add", "path": "/metadata/annotations/nodeunhealth", "value": "yes"},
        ])
    );
    let bare = ObservedNode::from_meta(&node("7", None).metadata);
    assert_eq!(
        serde_json::to_value(&annotation_patch(&bare, Verdict::Unhealthy).unwrap().patch).unwrap(),
        serde_json::json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
            {"op": "add", "path": "/metadata/annotations", "value": {"nodeunhealth": "yes"}},
        ])
    );
    let other_value = ObservedNode::from_meta(&node("7", Some(&[("nodeunhealth", "no")])).metadata);
    assert_eq!(
        serde_json::to_value(&annotation_patch(&other_value, Verdict::Healthy).unwrap().patch).unwrap(),
        serde_json::json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
            {"op": "remove", "path": "/metadata/annotations/nodeunhealth"},
        ])
    );
}

/// n members with the same view: exactly one of them writes each change.
#[test]
fn agreeing_members_make_one_write() {
    let members = unit(8);
    let mut s = schedule(&members, 3, 1);
    let mut table = VoteTable::new(1, VoteRule::default());
    for target in &members {
        let healthy = target != "n00" && target != "n05";
        cast(&mut table, &mut s, target, 20, |_| Some(healthy));
    }
    table.evaluate(Period(20), &mut s);
    let observed = |name: &str| ObservedNode {
        name: name.into(),
        resource_version: "1".into(),
        has_annotations: false,
        unhealth: None,
    };
    let mut writes = Vec::new();
    for local in &members {
        // every member holds an identical table
        for target in &members {
            if writer_of(&members, target, &table) == Some(local.as_str())
                && let Some(patch) = annotation_patch(&observed(target), table.verdict(target))
            {
                writes.push((local.clone(), patch.node));
            }
        }
    }
    assert_eq!(writes, vec![("n01".to_string(), "n00".to_string()), ("n01".to_string(), "n05".to_string())]);
}

/// A straightforward model of the rule, to compare the table with.
fn model(
    members: &[String],
    k: usize,
    window: u64,
    now: u64,
    ballots: &[(usize, usize, u64, bool)],
) -> BTreeMap<String, Verdict> {
    let start = now.saturating_sub(window - 1);
    // latest ballot per (checker, target); later entries win ties
    let mut latest: BTreeMap<(usize, usize), (u64, bool)> = BTreeMap::new();
    for &(c, t, p, h) in ballots {
        if c == t || p < start || p > now {
            continue;
        }
        let entry = latest.entry((c, t)).or_insert((p, h));
        if p >= entry.0 {
            *entry = (p, h);
        }
    }
    let assignments: Vec<Assignment> = (start..=now).map(|p| Assignment::new(members, k, Period(p))).collect();
    members
        .iter()
        .enumerate()
        .map(|(t, target)| {
            let mut eligible: BTreeSet<usize> = (0..members.len())
                .filter(|&c| assignments.iter().any(|a| a.is_assigned(&members[c], target)))
                .collect();
            let (mut healthy, mut unhealthy) = (0, 0);
            for (&(c, tt), &(_, h)) in &latest {
                if tt == t {
                    eligible.insert(c);
                    if h {
                        healthy += 1;
                    } else {
                        unhealthy += 1;
                    }
                }
            }
            (
                target.clone(),
                Tally { eligible: eligible.len(), healthy, unhealthy }.decision(VoteRule::default(), members.len()),
            )
        })
        .collect()
}

use crate::selection::Assignment;

/// Two wrong ballots of a target's first three (a lossy link at a daemon's start) do not
/// condemn it: Unhealthy only once a whole window of its ballots has been evaluated, at
/// the table's start and for a member that joins later; Healthy at once.
#[test]
fn nobody_is_condemned_before_a_full_window() {
    let members = unit(4);
    let mut s = schedule(&members, 3, 3);
    let mut table = VoteTable::new(3, VoteRule::default());
    let mut verdicts = Vec::new();
    for now in 0..4u64 {
        for checker in &members[1..] {
            let _ = table.record(checker, "n00", ballot(now, checker == "n03"), Period(now), &mut s);
        }
        table.evaluate(Period(now), &mut s);
        verdicts.push(table.verdict("n00"));
    }
    use Verdict::{Undecided, Unhealthy};
    assert_eq!(verdicts, [Undecided, Undecided, Unhealthy, Unhealthy]);
    // a member joining a running table: its own window first; the others decide at once
    let joined = unit(5);
    let mut s = schedule(&joined, 4, 3);
    let mut verdicts = Vec::new();
    for now in 4..7u64 {
        for checker in joined.iter().filter(|c| *c != "n04") {
            let _ = table.record(checker, "n04", ballot(now, false), Period(now), &mut s);
        }
        for checker in joined.iter().filter(|c| *c != "n01") {
            let _ = table.record(checker, "n01", ballot(now, true), Period(now), &mut s);
        }
        table.evaluate(Period(now), &mut s);
        verdicts.push((table.verdict("n04"), table.verdict("n01")));
    }
    use Verdict::Healthy;
    assert_eq!(verdicts, [(Undecided, Healthy), (Undecided, Healthy), (Unhealthy, Healthy)]);
}

proptest! {
    /// From a fresh table (nobody held unhealthy yet), one evaluation decides exactly what
    /// the model says.
    #[test]
    fn one_evaluation_matches_the_model(
        n in 2usize..12,
        k in 1usize..5,
        window in 1u64..4,
        ballots in proptest::collection::vec((0usize..12, 0usize..12, 0u64..6, any::<bool>()), 0..120),
    ) {
        let members = unit(n);
        let now = 5;
        let ballots: Vec<_> = ballots.into_iter().filter(|(c, t, _, _)| *c < n && *t < n).collect();
        let mut s = schedule(&members, k, window);
        let mut table = VoteTable::new(window, VoteRule::default());
        for &(c, t, p, h) in &ballots {
            let _ = table.record(&members[c], &members[t], ballot(p, h), Period(now), &mut s);
        }
        table.evaluate(Period(now), &mut s);
        for (target, want) in model(&members, k, window, now, &ballots) {
            // a fresh table's first evaluation: nobody is condemned before a full window
            let want = if want == Verdict::Unhealthy && window > 1 { Verdict::Undecided } else { want };
            prop_assert_eq!(table.verdict(&target), want, "{}", target);
        }
    }

    /// Ballots naming a checker or a target outside the unit (a member of another unit, a
    /// name made up) never change any verdict.
    #[test]
    fn strangers_ballots_change_nothing(
        n in 3usize..14,
        k in 1usize..4,
        window in 1u64..4,
        honest in proptest::collection::vec((0usize..14, 0usize..14, 0u64..8, any::<bool>()), 0..80),
        junk in proptest::collection::vec((0usize..20, 0usize..20, 0u64..8, any::<bool>()), 0..80),
    ) {
        let members = unit(n);
        let name = |i: usize| if i < n { members[i].clone() } else { format!("x{i:02}") };
        let mut s = schedule(&members, k, window);
        let mut clean = VoteTable::new(window, VoteRule::default());
        let mut dirty = VoteTable::new(window, VoteRule::default());
        let mut honest: Vec<_> = honest.into_iter().filter(|(c, t, _, _)| *c < n && *t < n).collect();
        honest.sort_by_key(|b| b.2);
        let junk: Vec<_> = junk.into_iter().filter(|&(c, t, _, _)| c >= n || t >= n).collect();
        for now in 0..8u64 {
            for &(c, t, p, h) in honest.iter().filter(|b| b.2 == now) {
                let _ = clean.record(&members[c], &members[t], ballot(p, h), Period(now), &mut s);
                let _ = dirty.record(&members[c], &members[t], ballot(p, h), Period(now), &mut s);
            }
            for &(c, t, p, h) in junk.iter().filter(|b| b.2 == now) {
                let refused = dirty.record(&name(c), &name(t), ballot(p, h), Period(now), &mut s);
                prop_assert!(refused.is_err());
            }
            let (a, b) = (clean.evaluate(Period(now), &mut s), dirty.evaluate(Period(now), &mut s));
            prop_assert_eq!(a, b);
        }
    }

    /// Every verdict is backed by two agreeing ballots and a strict majority of those counted;
    /// every return to Undecided by the lack of one.
    #[test]
    fn every_change_has_a_strict_majority(
        n in 2usize..12,
        k in 1usize..4,
        window in 1u64..4,
        ballots in proptest::collection::vec((0usize..12, 0usize..12, 0u64..10, any::<bool>()), 0..150),
    ) {
        let members = unit(n);
        let mut s = schedule(&members, k, window);
        let mut table = VoteTable::new(window, VoteRule::default());
        let ballots: Vec<_> = ballots.into_iter().filter(|(c, t, _, _)| *c < n && *t < n).collect();
        for now in 0..10u64 {
            for &(c, t, p, h) in ballots.iter().filter(|b| b.2 == now) {
                let _ = table.record(&members[c], &members[t], ballot(p, h), Period(now), &mut s);
            }
            for change in table.evaluate(Period(now), &mut s) {
                let (counted, tally) = (change.tally.healthy + change.tally.unhealthy, change.tally);
                let votes = match change.to {
                    Verdict::Unhealthy => tally.unhealthy,
                    Verdict::Healthy => tally.healthy,
                    Verdict::Undecided => {
                        // no side has two agreeing and a strict majority, except an unhealthy
                        // one before the node's first full window (the table starts at 0)
                        let full = now + 1 >= window;
                        prop_assert!(tally.healthy < 2 || 2 * tally.healthy <= counted, "{:?}", change);
                        prop_assert!(
                            !full || tally.unhealthy < 2 || 2 * tally.unhealthy <= counted,
                            "{:?}",
                            change
                        );
                        continue;
                    }
                };
                prop_assert!(votes >= 2 && 2 * votes > counted, "{:?}", change);
                prop_assert!(counted <= tally.eligible);
            }
        }
    }
}

fn member_key(name: &str) -> SigningKey {
    let mut seed = [0; 32];
    seed[..name.len()].copy_from_slice(name.as_bytes());
    SigningKey::from_seed(&seed)
}

/// What a received ballot needs besides being assigned and fresh: its checker's signature,
/// and not to claim to be the receiver's own. Copies of a ballot already held are taken as
/// known without a verification (they change nothing, whatever their signature).
#[test]
fn a_received_ballot_is_taken_only_with_its_checkers_signature() {
    let members = unit(6);
    let mut s = schedule(&members, 3, 1);
    let mut table = VoteTable::new(2, VoteRule::default());
    let assigned = checkers(&mut s, "n04", 20);
    let (checker, other) = (assigned[0].as_str(), assigned[1].as_str());
    let local = members.iter().find(|m| *m != "n04" && !assigned.contains(m)).unwrap().as_str();
    let key = member_key(checker).public_key();
    let genuine = member_key(checker).sign(checker, "n04", ballot(20, false));
    let forged = member_key(other).sign(checker, "n04", ballot(20, false));
    let mut receive = |table: &mut VoteTable, checker: &str, b: &SignedBallot, key: Option<&PublicKey>| {
        table.record_received(local, checker, "n04", b, Period(20), &mut s, || check_signature(key, checker, "n04", b))
    };
    assert_eq!(receive(&mut table, checker, &forged, Some(&key)), Err(BallotIgnored::BadSignature));
    assert_eq!(receive(&mut table, checker, &genuine, None), Err(BallotIgnored::NoPublicKey));
    assert_eq!(table.ballots().count(), 0, "nothing refused was stored");
    assert_eq!(receive(&mut table, checker, &genuine, Some(&key)), Ok(Recorded::New));
    assert_eq!(receive(&mut table, checker, &forged, Some(&key)), Ok(Recorded::Known), "a copy changes nothing");
    let flipped = member_key(other).sign(checker, "n04", ballot(20, true));
    assert_eq!(receive(&mut table, checker, &flipped, Some(&key)), Err(BallotIgnored::BadSignature));
    assert_eq!(table.ballots().collect::<Vec<_>>(), vec![("n04", checker, ballot(20, false))]);
    // the receiver's own, even validly signed by it, comes only from itself
    let own = member_key(local).sign(local, "n04", ballot(20, true));
    let own_key = member_key(local).public_key();
    assert_eq!(receive(&mut table, local, &own, Some(&own_key)), Err(BallotIgnored::OwnBallot));
    // cheap refusals come before the signature: none of these is verified
    let ahead = member_key(checker).sign(checker, "n04", ballot(22, false));
    assert_eq!(receive(&mut table, checker, &ahead, Some(&key)), Err(BallotIgnored::Future));
    let by_stranger = member_key("x99").sign("x99", "n04", ballot(20, false));
    let refused = table.record_received(other, "x99", "n04", &by_stranger, Period(20), &mut s, || {
        panic!("a stranger's ballot is refused before its signature is verified")
    });
    assert_eq!(refused, Err(BallotIgnored::NotAMember));
}

/// One run of a unit's vote over `periods` periods, `k` checkers per target: honest members
/// check their targets as the daemon does ([`VoteTable::targets`], standbys included, from
/// what they heard: every ballot) and ballot the truth while they live (a member dead from
/// period `d` casts nothing from `d` on); the liar (if any) ballots `lie(period, target)`
/// about every other member. Returns, per evaluated period, the verdicts of an observer
/// that hears every ballot.
fn liar_run(
    n: usize,
    k: usize,
    window: u64,
    liar: Option<usize>,
    deaths: &[(usize, u64)],
    lie: impl Fn(u64, usize) -> Option<bool>,
    periods: u64,
) -> Vec<(u64, BTreeMap<usize, Verdict>)> {
    let members = unit(n);
    let mut s = schedule(&members, k, window);
    let dead_at = |i: usize| deaths.iter().find(|(d, _)| *d == i).map(|(_, at)| *at);
    let alive = |i: usize, p: u64| dead_at(i).is_none_or(|at| p < at);
    let mut table = VoteTable::new(window, VoteRule::default());
    let mut out = Vec::new();
    for p in 0..periods {
        let assignment = s.assignment(Period(p));
        let mut cast = Vec::new();
        for checker in (0..n).filter(|&c| alive(c, p)) {
            if Some(checker) == liar {
                let lies = (0..n).filter(|&t| t != checker).filter_map(|t| Some((t, lie(p, t)?)));
                cast.extend(lies.map(|(t, healthy)| (checker, t, healthy)));
                continue;
            }
            for target in table.targets(&members[checker], Period(p), &assignment) {
                let t = members.iter().position(|m| m == target).unwrap();
                cast.push((checker, t, alive(t, p)));
            }
        }
        for (checker, target, healthy) in cast {
            let _ = table.record(&members[checker], &members[target], ballot(p, healthy), Period(p), &mut s);
        }
        table.evaluate(Period(p), &mut s);
        out.push((p, (0..n).map(|i| (i, table.verdict(&members[i]))).collect()));
    }
    out
}

/// Unit size, checkers per target, window, the liar, the deaths (member, period) and the
/// liar's stances.
type LiarUnit = (usize, usize, u64, Option<usize>, Vec<(usize, u64)>, Vec<u8>);

fn liar_unit() -> impl Strategy<Value = LiarUnit> {
    (2usize..=9, 1u64..=3)
        .prop_flat_map(|(n, window)| {
            (
                Just(n),
                3..=n.max(3),
                Just(window),
                proptest::option::of(0..n),
                proptest::collection::vec((0..n, 2u64..8), 0..=n.saturating_sub(3)),
                proptest::collection::vec(0u8..3, 12 * n),
            )
        })
        .prop_map(|(n, k, window, liar, deaths, lies)| {
            // distinct dead members, never the liar, at most n-3 of them
            let mut seen = BTreeSet::new();
            let deaths: Vec<(usize, u64)> =
                deaths.into_iter().filter(|(d, _)| Some(*d) != liar && seen.insert(*d)).collect();
            (n, k, window, liar, deaths, lies)
        })
}

proptest! {
    /// The daemon's vote with one liar (any ballot about anyone, or none, per period and
    /// target) and up to n-3 members dying at random periods, in units of 2 to 9 with 3 to
    /// n checkers per target: at no evaluation is a live honest member Unhealthy or a dead
    /// one Healthy, and a live honest member with at least two live honest peers is Healthy
    /// at every evaluation from the first window on, deaths included, when every member
    /// checks every other (k >= n-1); with fewer checkers, at every evaluation whose window
    /// holds a period in which nobody died (standbys replace the checkers that died before
    /// a period; one that dies during it leaves a hole in that period's ballots only). So a
    /// member that dies never leaves its unit's survivors unprotected when the window is
    /// longer than one period and members do not die in every period of a window.
    #[test]
    fn one_liar_and_deaths_at_the_daemon((n, k, window, liar, deaths, lies) in liar_unit()) {
        let lie = |p: u64, t: usize| match lies[(p as usize * n + t) % lies.len()] {
            0 => Some(true),
            1 => Some(false),
            _ => None,
        };
        let dead_at = |i: usize| deaths.iter().find(|(d, _)| *d == i).map(|(_, at)| *at);
        for (p, verdicts) in liar_run(n, k, window, liar, &deaths, lie, 12) {
            let alive = |i: usize| dead_at(i).is_none_or(|at| p < at);
            let live_honest = (0..n).filter(|&i| Some(i) != liar && alive(i)).count();
            let quiet_period = (p.saturating_sub(window - 1)..=p).any(|q| deaths.iter().all(|(_, at)| *at != q));
            for (&i, &verdict) in &verdicts {
                if Some(i) == liar {
                    continue;
                }
                if alive(i) {
                    prop_assert_ne!(verdict, Verdict::Unhealthy, "live n{} condemned at {}", i, p);
                    if live_honest > 2 && p + 1 >= window && (k + 1 >= n || quiet_period) {
                        prop_assert_eq!(verdict, Verdict::Healthy, "live n{} unprotected at {}", i, p);
                    }
                } else if deaths.iter().all(|(_, at)| *at > p || *at + window - 1 <= p) {
                    // once the last ballots of every member dead by now have left the
                    // window (until then a member that died with it may still count, with
                    // the healthy ballot it cast the period before)
                    prop_assert_ne!(verdict, Verdict::Healthy, "dead n{} protected at {}", i, p);
                }
            }
        }
    }
}

/// Silence as the standbys see it: a member is silent once a period passed without a ballot
/// of it, and only where the table has listened for two periods (a fresh table, or a member
/// that just joined, is silent about nobody: its start must not make everyone check
/// everyone).
#[test]
fn a_member_is_silent_a_period_after_its_last_ballot_once_the_table_listened() {
    let members = unit(6);
    let mut s = schedule(&members, 2, 3);
    let mut table = VoteTable::new(3, VoteRule::default());
    let speak = |table: &mut VoteTable, s: &mut Schedule, p: u64, who: &[&str]| {
        for checker in who {
            let target = if *checker == "n00" { "n01" } else { "n00" };
            table.record(checker, target, ballot(p, true), Period(p), s).unwrap();
        }
    };
    let silent = |table: &VoteTable, p: u64| -> Vec<&str> {
        members.iter().map(String::as_str).filter(|m| table.silent(m, Period(p))).collect()
    };
    assert_eq!(silent(&table, 10), Vec::<&str>::new(), "a table that never evaluated listened to nobody");
    let everyone: Vec<&str> = members.iter().map(String::as_str).collect();
    speak(&mut table, &mut s, 10, &everyone[..5]);
    table.evaluate(Period(10), &mut s);
    assert_eq!(silent(&table, 11), Vec::<&str>::new(), "listened for one period only");
    speak(&mut table, &mut s, 11, &everyone[..4]);
    table.evaluate(Period(11), &mut s);
    // n05 never spoke, n04 not in period 11
    assert_eq!(silent(&table, 12), vec!["n04", "n05"]);
    speak(&mut table, &mut s, 12, &everyone[1..]);
    table.evaluate(Period(12), &mut s);
    assert_eq!(silent(&table, 13), vec!["n00"], "one ballot of the period before is enough");
    // the standby walk: with n00 silent, whoever has it among its first k walks one further
    let assignment = s.assignment(Period(13));
    for checker in &members {
        let assigned = assignment.targets_of(checker);
        let planned = table.targets(checker, Period(13), &assignment);
        let extra = usize::from(assigned.contains(&"n00") && *checker != "n00");
        assert_eq!(planned.len(), assigned.len() + extra, "{checker}: {planned:?} vs {assigned:?}");
        assert_eq!(&planned[..assigned.len()], &assigned[..]);
    }
    // a member joining in period 13: silent only after a whole period without its ballots
    let joined = unit(7);
    let mut s7 = schedule(&joined, 2, 3);
    table.evaluate(Period(13), &mut s7);
    assert!(!table.silent("n06", Period(14)));
    table.evaluate(Period(14), &mut s7);
    assert!(table.silent("n06", Period(15)));
}
