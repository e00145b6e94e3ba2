use proptest::prelude::*;

use super::*;

fn unit(name: &str) -> BTreeSet<UnitId> {
    BTreeSet::from([UnitId::LabelValue(name.into())])
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// A view over `members` holding `unhealthy` Unhealthy, `undecided` Undecided.
fn view(members: &[&str], unhealthy: &[&str], undecided: &[&str]) -> String {
    View { members: members_version(members.iter().copied()), unhealthy: names(unhealthy), undecided: names(undecided) }
        .format()
}

fn voter(name: &str, view: Option<String>, condemned: bool) -> Voter {
    Voter { name: name.into(), units: unit("a"), view, condemned, fresh: true }
}

fn judge(voters: &[Voter]) -> BTreeMap<String, Verdict> {
    verdicts(voters, &mut ViewBook::default(), VoteRule::default())
}

const FIVE: [&str; 5] = ["n0", "n1", "n2", "n3", "n4"];

#[test]
fn the_rule_wants_two_agreeing_and_a_strict_majority_of_those_counted() {
    let rule = VoteRule::default();
    // (healthy, unhealthy) -> verdict, in a unit of 5
    let table = [
        ((0, 0), Verdict::Undecided),
        ((1, 0), Verdict::Undecided),
        ((0, 1), Verdict::Undecided),
        ((1, 1), Verdict::Undecided),
        ((2, 0), Verdict::Healthy),
        ((0, 2), Verdict::Unhealthy),
        ((2, 1), Verdict::Healthy),
        ((1, 2), Verdict::Unhealthy),
        ((2, 2), Verdict::Undecided),
        ((3, 2), Verdict::Healthy),
        ((2, 3), Verdict::Unhealthy),
        ((4, 0), Verdict::Healthy),
    ];
    for ((healthy, unhealthy), want) in table {
        assert_eq!(rule.decide(healthy, unhealthy, 5), want, "{healthy} healthy, {unhealthy} unhealthy");
    }
    // a unit of two: its one peer decides only with the operator's opt-in
    assert_eq!(rule.decide(1, 0, 2), Verdict::Undecided);
    assert_eq!(rule.decide(0, 1, 2), Verdict::Undecided);
    let opted = VoteRule { allow_units_of_two: true };
    assert_eq!(opted.decide(1, 0, 2), Verdict::Healthy);
    assert_eq!(opted.decide(0, 1, 2), Verdict::Unhealthy);
    assert_eq!(opted.decide(1, 0, 3), Verdict::Undecided, "the opt-in is for units of exactly two");
}

#[test]
fn views_round_trip_through_the_annotation() {
    let written = view(&["n2", "n1", "n3"], &["n3", "n1"], &["n2"]);
    assert_eq!(written, format!("members={};unhealthy=n1,n3;undecided=n2", members_version(["n1", "n2", "n3"])));
    let read = View::parse(&written).unwrap();
    assert_eq!(read.unhealthy, names(&["n1", "n3"]));
    assert_eq!(read.undecided, names(&["n2"]));
    assert_eq!(View::parse("members=ab;unhealthy= x,,y ;extra=1").unwrap().unhealthy, names(&["x", "y"]));
    // an earlier daemon's plain list, or no membership: not readable
    for bad in ["n1,n2", "", "unhealthy=n1", "members=;unhealthy=n1"] {
        assert_eq!(View::parse(bad), Err(InvalidView { value: bad.into() }), "{bad:?}");
    }
    // the version names the set, not its order or repetitions
    assert_eq!(members_version(["b", "a", "b"]), members_version(["a", "b"]));
    assert_ne!(members_version(["a", "b"]), members_version(["a", "b", "c"]));
    assert_eq!(members_version(["a"]).len(), 16);
}

#[test]
fn a_strict_majority_of_at_least_two_counted_voters_decides() {
    let holds = |held: &[&str]| Some(view(&FIVE, held, &[]));
    // n4's voters are the other 4; 3 hold it unhealthy
    let voters = [
        voter("n0", holds(&["n4"]), false),
        voter("n1", holds(&["n4"]), false),
        voter("n2", holds(&["n4"]), false),
        voter("n3", holds(&[]), false),
        voter("n4", holds(&[]), false),
    ];
    let got = judge(&voters);
    assert_eq!(got["n4"], Verdict::Unhealthy);
    assert_eq!(got["n0"], Verdict::Healthy, "4 of 4 clear n0");
    // 2 against 2: a tie decides nothing, and now means stock handling
    let tie = [
        voter("n0", holds(&["n4"]), false),
        voter("n1", holds(&["n4"]), false),
        voter("n2", holds(&[]), false),
        voter("n3", holds(&[]), false),
        voter("n4", holds(&[]), false),
    ];
    assert_eq!(judge(&tie)["n4"], Verdict::Undecided);
    // members publishing nothing do not count: 2 of 2 counted decide
    let quiet = [
        voter("n0", holds(&["n4"]), false),
        voter("n1", holds(&["n4"]), false),
        voter("n2", None, false),
        voter("n3", None, false),
        voter("n4", None, false),
    ];
    assert_eq!(judge(&quiet)["n4"], Verdict::Unhealthy);
    assert_eq!(judge(&quiet)["n0"], Verdict::Undecided, "one clearing voice is not enough");
    // a condemned member no longer votes; an undecided one does
    let dead = [
        voter("n0", holds(&["n4"]), false),
        voter("n1", holds(&["n4"]), false),
        voter("n2", holds(&[]), false),
        voter("n3", holds(&[]), true),
        voter("n4", holds(&[]), false),
    ];
    assert_eq!(judge(&dead)["n4"], Verdict::Unhealthy, "2 of 3 counted");
    // a voter undecided about the target is silent on it
    let unsure = [
        voter("n0", Some(view(&FIVE, &[], &["n4"])), false),
        voter("n1", Some(view(&FIVE, &[], &["n4"])), false),
        voter("n2", holds(&["n4"]), false),
        voter("n3", holds(&[]), false),
        voter("n4", holds(&[]), false),
    ];
    assert_eq!(judge(&unsure)["n4"], Verdict::Undecided, "1 against 1");
}

#[test]
fn a_view_speaks_only_of_the_members_it_knew() {
    // n4 just joined: the others' views were written for n0..n3
    let four = ["n0", "n1", "n2", "n3"];
    let voters: Vec<Voter> = FIVE
        .iter()
        .map(|n| voter(n, Some(if *n == "n4" { view(&FIVE, &[], &[]) } else { view(&four, &[], &[]) }), false))
        .collect();
    let mut book = ViewBook::default();
    // the cloud saw the four-member unit before n4 joined
    book.saw(&Arc::new(names(&four)));
    let got = verdicts(&voters, &mut book, VoteRule::default());
    assert_eq!(got["n4"], Verdict::Undecided, "nobody who knew n4 cleared it");
    assert_eq!(got["n0"], Verdict::Healthy, "the older views still speak of n0..n3");
    // a cloud that never saw that membership cannot read them at all
    let fresh = verdicts(&voters, &mut ViewBook::default(), VoteRule::default());
    assert_eq!(fresh["n0"], Verdict::Undecided, "only n4's view reads: one voice");
}

#[test]
fn a_view_naming_an_unseen_membership_keeps_the_last_readable_one() {
    let mut book = ViewBook::default();
    let mut voters: Vec<Voter> = FIVE.iter().map(|n| voter(n, Some(view(&FIVE, &[], &[])), false)).collect();
    assert_eq!(verdicts(&voters, &mut book, VoteRule::default())["n0"], Verdict::Healthy);
    // the daemons saw a sixth member the cloud's watch has not delivered yet
    let six = ["n0", "n1", "n2", "n3", "n4", "n5"];
    for v in &mut voters[1..] {
        v.view = Some(view(&six, &[], &[]));
    }
    assert_eq!(verdicts(&voters, &mut book, VoteRule::default())["n0"], Verdict::Healthy, "no flicker");
    // once the cloud sees n5, the new views read
    let mut n5 = voter("n5", None, false);
    n5.view = Some(view(&six, &[], &[]));
    voters.push(n5);
    voters[1].view = Some(view(&six, &["n0"], &[]));
    voters[2].view = Some(view(&six, &["n0"], &[]));
    voters[3].view = Some(view(&six, &["n0"], &[]));
    assert_eq!(verdicts(&voters, &mut book, VoteRule::default())["n0"], Verdict::Unhealthy, "3 of 5");
    // a voter that stops publishing is forgotten, not remembered
    assert_eq!(book.read("n1", None), None);
    assert_eq!(book.read("n1", Some("garbage")), None);
}

#[test]
fn only_the_home_units_members_vote_and_only_units_that_publish_are_judged() {
    // n9 is in units a and b; its home is a (the lowest): b's members' views do not count
    let ab = BTreeSet::from([UnitId::LabelValue("a".into()), UnitId::LabelValue("b".into())]);
    let all = ["a1", "a2", "b1", "b2", "b3", "n9"];
    let a_members = ["a1", "a2", "n9"];
    let b_members = ["b1", "b2", "b3", "n9"];
    let mut voters = vec![
        voter("a1", Some(view(&a_members, &[], &[])), false),
        voter("a2", Some(view(&a_members, &[], &[])), false),
        Voter { name: "n9".into(), units: ab, view: Some(view(&all, &[], &[])), condemned: false, fresh: true },
    ];
    for name in ["b1", "b2", "b3"] {
        voters.push(Voter {
            name: name.into(),
            units: unit("b"),
            view: Some(view(&b_members, &["n9"], &[])),
            condemned: false,
            fresh: true,
        });
    }
    assert_eq!(judge(&voters)["n9"], Verdict::Healthy, "a1 and a2 are its home unit's voters");
    let lone = Voter { name: "lone".into(), units: BTreeSet::new(), view: None, condemned: false, fresh: true };
    assert!(!judge(&[lone]).contains_key("lone"), "a node in no unit has no verdict");
    // a unit whose daemons publish no views (they write verdicts themselves) is left alone
    let silent: Vec<Voter> = FIVE.iter().map(|n| voter(n, None, false)).collect();
    assert_eq!(judge(&silent), BTreeMap::new());
}

#[test]
fn a_unit_of_two_protects_nobody_without_the_opt_in() {
    let pair = ["n0", "n1"];
    let voters = [voter("n0", Some(view(&pair, &[], &[])), false), voter("n1", Some(view(&pair, &["n0"], &[])), false)];
    let got = judge(&voters);
    assert_eq!((got["n0"], got["n1"]), (Verdict::Undecided, Verdict::Undecided));
    let opted = verdicts(&voters, &mut ViewBook::default(), VoteRule { allow_units_of_two: true });
    assert_eq!((opted["n0"], opted["n1"]), (Verdict::Unhealthy, Verdict::Healthy), "each partner decides alone");
}

/// What a member is in a property run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Member {
    /// Alive, and the cloud hears it: its view is current and true.
    Honest,
    /// Alive, its cloud link cut: its view is from before the deaths (everyone healthy).
    Cut,
    /// Publishes whatever the strategy says; `fresh`: the cloud hears it.
    Liar { fresh: bool },
    /// Dead; `condemned`: voted down already (else its last view, from when it lived,
    /// still counts: everyone healthy).
    Dead { condemned: bool },
}

impl Member {
    fn alive_and_honest(self) -> bool {
        matches!(self, Self::Honest | Self::Cut)
    }
}

/// Units of 2 to 9 members, at most one liar, up to n-3 dead (some condemned already),
/// some live members cut from the cloud, and the liar's stance per target.
fn unit_strategy() -> impl Strategy<Value = (Vec<Member>, Vec<u8>)> {
    (2usize..=9)
        .prop_flat_map(|n| {
            let kinds = proptest::collection::vec(0u8..4, n);
            (Just(n), proptest::option::of((0..n, any::<bool>())), 0..=n.saturating_sub(3), kinds)
        })
        .prop_flat_map(|(n, liar, crashes, kinds)| {
            // kinds: 0/1 honest, 2 cut, 3 dead (the first `crashes` of those marked dead
            // die; a liar overrides)
            let mut dead_left = crashes;
            let unit: Vec<Member> = (0..n)
                .map(|i| match (liar, kinds[i]) {
                    (Some((l, fresh)), _) if l == i => Member::Liar { fresh },
                    (_, 3) if dead_left > 0 => {
                        dead_left -= 1;
                        Member::Dead { condemned: i % 2 == 0 }
                    }
                    (_, 2) => Member::Cut,
                    _ => Member::Honest,
                })
                .collect();
            (Just(unit), proptest::collection::vec(0u8..3, n))
        })
}

/// The views: honest members tell the truth; a cut or dead member's view is from before
/// the deaths (everyone healthy); the liar says, per target, 0 clear, 1 accuse,
/// 2 undecided, as the strategy chose (`lies[target]`).
fn cast(unit: &[Member], lies: &[u8]) -> Vec<Voter> {
    let names: Vec<String> = (0..unit.len()).map(|i| format!("n{i}")).collect();
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    let dead: Vec<&str> =
        all.iter().zip(unit).filter(|(_, m)| matches!(m, Member::Dead { .. })).map(|(n, _)| *n).collect();
    let lie = |want: u8| -> Vec<&str> { all.iter().zip(lies).filter(|(_, l)| **l == want).map(|(n, _)| *n).collect() };
    unit.iter()
        .zip(&names)
        .map(|(member, name)| {
            let (view, condemned, fresh) = match member {
                Member::Honest => (view(&all, &dead, &[]), false, true),
                Member::Cut => (view(&all, &[], &[]), false, false),
                Member::Liar { fresh } => (view(&all, &lie(1), &lie(2)), false, *fresh),
                Member::Dead { condemned } => (view(&all, &[], &[]), *condemned, false),
            };
            Voter { fresh, ..voter(name, Some(view), condemned) }
        })
        .collect()
}

proptest! {
    /// One liar never condemns a live member, whatever it publishes, wherever the others
    /// are (heard, cut from the cloud, dead and condemned or not).
    #[test]
    fn one_liar_never_condemns_a_live_member((unit, lies) in unit_strategy()) {
        let got = judge(&cast(&unit, &lies));
        for (i, member) in unit.iter().enumerate() {
            if member.alive_and_honest() {
                prop_assert_ne!(got[&format!("n{i}")], Verdict::Unhealthy, "live n{} condemned in {:?}", i, unit);
            }
        }
    }

    /// One liar never protects a dead member alone: when no stale view clears it (nobody
    /// cut, the other dead condemned), or when two honest members the cloud hears accuse
    /// it, it is not protected (voted Unhealthy in the second case).
    #[test]
    fn one_liar_never_protects_a_dead_member((unit, lies) in unit_strategy()) {
        let got = judge(&cast(&unit, &lies));
        let heard_honest = unit.iter().filter(|m| **m == Member::Honest).count();
        for (i, member) in unit.iter().enumerate() {
            if !matches!(member, Member::Dead { .. }) {
                continue;
            }
            let verdict = got[&format!("n{i}")];
            let stale_clears = unit.iter().enumerate().any(|(j, m)| {
                j != i && matches!(m, Member::Cut | Member::Dead { condemned: false })
            });
            if !stale_clears {
                prop_assert_ne!(verdict, Verdict::Healthy, "dead n{} protected in {:?}", i, unit);
            }
            if heard_honest >= 2 {
                prop_assert_eq!(verdict, Verdict::Unhealthy, "dead n{} not condemned in {:?}", i, unit);
            }
        }
    }

    /// Deaths never unprotect the survivors: every live honest member stays Healthy while
    /// at least two live honest peers remain (with a liar against it: up to n-4 dead; with
    /// a liar that tells the truth, up to n-3), whether the dead are condemned yet or not
    /// and whether the survivors' links are cut or not.
    #[test]
    fn deaths_never_unprotect_the_survivors((unit, lies) in unit_strategy()) {
        let got = judge(&cast(&unit, &lies));
        let truthful = judge(&cast(&unit, &vec![0; unit.len()]));
        let live_honest = unit.iter().filter(|m| m.alive_and_honest()).count();
        let liar = unit.iter().any(|m| matches!(m, Member::Liar { .. }));
        for (i, member) in unit.iter().enumerate() {
            if !member.alive_and_honest() {
                continue;
            }
            let name = format!("n{i}");
            let live_honest_peers = live_honest - 1;
            if live_honest_peers >= 2 {
                prop_assert_eq!(got[&name], Verdict::Healthy, "{} in {:?}", name, unit);
            }
            if live_honest_peers + usize::from(liar) >= 2 {
                prop_assert_eq!(truthful[&name], Verdict::Healthy, "{} with a truthful liar in {:?}", name, unit);
            }
        }
    }
}

fn meta_with(value: Option<&str>, other: bool) -> ObjectMeta {
    let mut annotations: BTreeMap<String, String> = BTreeMap::new();
    if other {
        annotations.insert("other".into(), "x".into());
    }
    if let Some(value) = value {
        annotations.insert(NODE_UNHEALTH_ANNOTATION.into(), value.into());
    }
    ObjectMeta {
        name: Some("n".into()),
        resource_version: Some("7".into()),
        annotations: (other || value.is_some()).then_some(annotations),
        ..Default::default()
    }
}

/// Every (annotation, verdict) pair: the patch applied to the Node gives exactly the
/// annotation the verdict calls for, or there is no patch because it already says so.
#[test]
fn each_patch_applied_makes_the_node_say_its_verdict() {
    let values = [None, Some("yes"), Some("undecided"), Some(""), Some("true")];
    for value in values {
        for other in [false, true] {
            let meta = meta_with(value, other);
            let observed = ObservedNode::from_meta(&meta);
            for verdict in [Verdict::Healthy, Verdict::Unhealthy, Verdict::Undecided] {
                let want = match (verdict, value) {
                    (Verdict::Healthy, _) => None,
                    (Verdict::Unhealthy, Some(v)) if v != "undecided" => Some(v),
                    (Verdict::Unhealthy, _) => Some("yes"),
                    (Verdict::Undecided, None | Some("yes")) => Some("undecided"),
                    (Verdict::Undecided, Some(v)) => Some(v),
                };
                let mut node = serde_json::to_value(k8s_openapi::api::core::v1::Node {
                    metadata: meta.clone(),
                    ..Default::default()
                })
                .unwrap();
                let patch = annotation_patch(&observed, verdict);
                assert_eq!(patch.is_none(), want == value, "{value:?} {verdict:?}: a patch only for a change");
                if let Some(patch) = patch {
                    assert_eq!(patch.verdict, verdict);
                    json_patch::patch(&mut node, &patch.patch).unwrap();
                    let mut stale = node.clone();
                    stale["metadata"]["resourceVersion"] = json!("6");
                    assert!(json_patch::patch(&mut stale, &patch.patch).is_err(), "tests the resourceVersion");
                }
                let got = node["metadata"]["annotations"][NODE_UNHEALTH_ANNOTATION].as_str();
                assert_eq!(got, want, "{value:?} {verdict:?}");
                assert_eq!(node["metadata"]["annotations"]["other"].as_str(), other.then_some("x"), "the rest stays");
            }
        }
    }
}

/// SuperEdge's readers: present, whatever the value, is not protected; only a value other
/// than "undecided" excludes the node from voting.
#[test]
fn the_annotation_reads_by_its_presence() {
    for (value, annotated, condemned) in [
        (None, false, false),
        (Some("yes"), true, true),
        (Some(""), true, true),
        (Some("true"), true, true),
        (Some("undecided"), true, false),
    ] {
        let observed = ObservedNode::from_meta(&meta_with(value, true));
        assert_eq!((observed.annotated_unhealthy(), observed.condemned()), (annotated, condemned), "{value:?}");
    }
}

/// The book keeps the memberships seen most recently: one seen again stays, the oldest
/// unseen one goes once more than `MEMBERSHIPS` are remembered.
#[test]
fn the_book_forgets_the_membership_seen_longest_ago() {
    let set = |i: usize| Arc::new(names(&[&format!("n{i}")]));
    let mut book = ViewBook::default();
    for i in 0..ViewBook::MEMBERSHIPS {
        book.saw(&set(i));
    }
    for _ in 0..10 {
        book.saw(&set(0)); // seen again (every second, as the writer does): one entry, the newest
    }
    assert!(book.read("early", Some(&view(&["n1"], &[], &[]))).is_some(), "repeats evict nobody");
    book.saw(&set(ViewBook::MEMBERSHIPS)); // one more: n1's, the oldest, goes
    let readable = |book: &mut ViewBook, i: usize| {
        let raw = view(&[&format!("n{i}")], &[], &[]);
        book.read(&format!("voter{i}"), Some(&raw)).is_some()
    };
    assert!(readable(&mut book, 0), "seen again, kept");
    assert!(!readable(&mut book, 1), "the oldest, forgotten");
    assert!(readable(&mut book, 2));
    assert!(readable(&mut book, ViewBook::MEMBERSHIPS));
}
