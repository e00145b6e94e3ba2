use proptest::prelude::*;

use super::*;

fn unit(name: &str) -> BTreeSet<UnitId> {
    BTreeSet::from([UnitId::LabelValue(name.into())])
}

fn voter(name: &str, view: Option<&[&str]>, annotated: bool) -> Voter {
    Voter {
        name: name.into(),
        units: unit("a"),
        view: view.map(|v| v.iter().map(|s| s.to_string()).collect()),
        annotated_unhealthy: annotated,
    }
}

#[test]
fn views_round_trip_through_the_annotation() {
    assert_eq!(format_view(["n3", "n1", "n2", "n1"]), "n1,n2,n3");
    assert_eq!(format_view([]), "");
    assert_eq!(parse_view("n1, n2,,n3 "), BTreeSet::from(["n1".into(), "n2".into(), "n3".into()]));
    assert_eq!(parse_view(""), BTreeSet::new());
}

#[test]
fn a_strict_majority_of_the_eligible_voters_decides() {
    let held = Some(&["n4"][..]);
    let none = Some(&[][..]);
    // 5 members: n4's eligible voters are the other 4; 3 hold it unhealthy
    let voters = [
        voter("n0", held, false),
        voter("n1", held, false),
        voter("n2", held, false),
        voter("n3", none, false),
        voter("n4", none, false),
    ];
    let got = verdicts(&voters);
    assert_eq!(got["n4"], Verdict::Unhealthy);
    assert_eq!(got["n0"], Verdict::Healthy, "4 of 4 publish a view without n0");
    // 2 of 4: a tie decides nothing
    let tie = [
        voter("n0", held, false),
        voter("n1", held, false),
        voter("n2", none, false),
        voter("n3", none, false),
        voter("n4", none, false),
    ];
    assert_eq!(verdicts(&tie)["n4"], Verdict::Undecided);
    // members publishing nothing count as eligible: 2 views of 4 decide nothing
    let quiet = [
        voter("n0", held, false),
        voter("n1", held, false),
        voter("n2", None, false),
        voter("n3", None, false),
        voter("n4", None, false),
    ];
    assert_eq!(verdicts(&quiet)["n4"], Verdict::Undecided);
    assert_eq!(verdicts(&quiet)["n0"], Verdict::Undecided, "1 clearing view of 4");
    // a member annotated unhealthy no longer votes: 2 of the 3 others decide
    let dead = [
        voter("n0", held, false),
        voter("n1", held, false),
        voter("n2", none, false),
        voter("n3", None, true),
        voter("n4", none, false),
    ];
    assert_eq!(verdicts(&dead)["n4"], Verdict::Unhealthy);
}

#[test]
fn only_the_home_units_members_vote() {
    // n9 is in units a and b; its home is a (the lowest): b's members' views do not count
    let mut n9 = voter("n9", Some(&[]), false);
    n9.units = BTreeSet::from([UnitId::LabelValue("a".into()), UnitId::LabelValue("b".into())]);
    let mut others = vec![voter("a1", Some(&[]), false)];
    for name in ["b1", "b2", "b3"] {
        let mut v = voter(name, Some(&["n9"]), false);
        v.units = unit("b");
        others.push(v);
    }
    let mut all = others.clone();
    all.push(n9);
    assert_eq!(verdicts(&all)["n9"], Verdict::Healthy, "a1 alone is its home unit's voter");
    let mut lone = voter("lone", None, false);
    lone.units = BTreeSet::new();
    assert!(!verdicts(&[lone]).contains_key("lone"), "a node in no unit has no verdict");
}

proptest! {
    /// Fewer than half of a target's eligible voters publishing lies (any view) never
    /// moves its verdict away from what the honest ones agree on.
    #[test]
    fn a_minority_of_liars_cannot_move_a_verdict(n in 3usize..12, liars in 0usize..6, dead in any::<bool>(), lies in proptest::collection::vec(any::<bool>(), 12)) {
        let names: Vec<String> = (0..n).map(|i| format!("n{i:02}")).collect();
        let target = &names[0];
        let eligible = n - 1;
        prop_assume!(2 * liars < eligible);
        let voters: Vec<Voter> = names.iter().enumerate().map(|(i, name)| {
            let liar = i >= 1 && i <= liars;
            let truth = dead;
            let holds = if liar { lies[i] } else { truth };
            Voter {
                name: name.clone(),
                units: unit("a"),
                view: Some(if holds { BTreeSet::from([target.clone()]) } else { BTreeSet::new() }),
                annotated_unhealthy: false,
            }
        }).collect();
        let expected = if dead { Verdict::Unhealthy } else { Verdict::Healthy };
        prop_assert_eq!(verdicts(&voters)[target], expected);
    }
}

/// SuperEdge's readers: present, whatever the value, is unhealthy.
#[test]
fn the_annotation_reads_by_its_presence() {
    for (value, want) in
        [(None, false), (Some("yes"), true), (Some(""), true), (Some("no"), true), (Some("true"), true)]
    {
        let meta = ObjectMeta {
            name: Some("n".into()),
            annotations: Some(
                [("other".to_string(), "x".to_string())]
                    .into_iter()
                    .chain(value.map(|v| (NODE_UNHEALTH_ANNOTATION.to_string(), v.to_string())))
                    .collect(),
            ),
            ..Default::default()
        };
        let observed = ObservedNode::from_meta(&meta);
        assert_eq!(observed.annotated_unhealthy(), want, "{value:?}");
        let (mark, clear) =
            (annotation_patch(&observed, Verdict::Unhealthy), annotation_patch(&observed, Verdict::Healthy));
        assert_eq!((mark.is_some(), clear.is_some()), (!want, want), "{value:?}: write only what changes the reading");
    }
}
