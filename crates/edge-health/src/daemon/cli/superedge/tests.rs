use controller_support::legacy_flags::testing::*;

use super::*;

#[test]
fn a_superedge_flag_and_ours_for_the_same_thing_conflict() {
    let conflict = |legacy: &str, ours: &str| LegacyFlagError::Conflict { legacy: legacy.into(), ours: ours.into() };
    assert_eq!(
        error(&EDGE_HEALTH, &["--communicateserverport=1", "--bind-address=:2"]),
        conflict("--communicateserverport", "--bind-address")
    );
    assert_eq!(
        error(&EDGE_HEALTH, &["--healthcheckperiod=5", "--period=5s"]),
        conflict("--healthcheckperiod", "--period")
    );
    // --check is repeatable: SuperEdge's plugins add to ours
    let (out, _) =
        ok(&EDGE_HEALTH, &["--check=kind=tcp,port=1,timeout=1s", "--pingplugin=timeout=1,retrytime=1,weight=1,port=2"]);
    assert_eq!(
        out,
        [
            "--check=kind=tcp,port=1,timeout=1s",
            "--check=kind=tcp,port=2,timeout=1s,retries=0,weight=100",
            "--period=11s"
        ]
    );
}

/// SuperEdge's `deployment/edge-health.yaml`, as shipped.
const EDGE_HEALTH_MANIFEST: [&str; 2] = ["--kubeletauthplugin=timeout=5,retrytime=3,weight=1,port=10250", "--v=2"];

#[test]
fn edge_health_manifest() {
    let translated = run(&EDGE_HEALTH, &EDGE_HEALTH_MANIFEST).unwrap();
    let out: Vec<_> = translated.args[1..].iter().map(|a| a.to_str().unwrap()).collect();
    assert_eq!(out, ["--check=kind=kubelet,port=10250,timeout=5s,retries=2,weight=100", "--period=25s"]);
    assert_eq!(flags(translated.legacy.deprecations()), ["--kubeletauthplugin", "--v"]);
    match &translated.legacy.deprecations()[0].treatment {
        Treatment::Replaced { by, note: Some(note) } => {
            assert_eq!(by, "--check=kind=kubelet,port=10250,timeout=5s,retries=2,weight=100");
            assert!(note.contains("retries = retrytime - 1"), "{note}");
            assert!(note.contains("--period=25s"), "the period it implies is said: {note}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(translated.legacy.default_log_filter(), Some("info"));
}

#[test]
fn edge_health_check_plugins() {
    let (out, deprecations) = ok(
        &EDGE_HEALTH,
        &[
            "--pingplugin=timeout=1,retrytime=1,weight=0.5,port=22",
            "--kubeletplugin",
            " timeout = 2 ,retrytime=2,weight=0.25,port=10255",
            "--period=9s",
        ],
    );
    assert_eq!(
        out,
        [
            "--period=9s",
            "--check=kind=tcp,port=22,timeout=1s,retries=0,weight=50",
            "--check=kind=http,port=10255,path=/healthz,timeout=2s,retries=1,weight=25",
        ],
        "our --period stands"
    );
    assert_eq!(flags(&deprecations), ["--pingplugin", "--kubeletplugin"]);
    for (value, why) in [
        ("timeout=1,retrytime=1,weight=1", "port is required"),
        ("retrytime=1,weight=1,port=1", "timeout is required"),
        ("timeout=1,weight=1,port=1", "retrytime is required"),
        ("timeout=1,retrytime=1,port=1", "weight is required"),
        ("timeout=x,retrytime=1,weight=1,port=1", "timeout \"x\" is not a whole number"),
        ("timeout=0,retrytime=1,weight=1,port=1", "timeout 0"),
        ("timeout=1,retrytime=0,weight=1,port=1", "retrytime 0 would never probe"),
        ("timeout=1,retrytime=1,weight=0,port=1", "weight \"0\" is not a number above 0"),
        ("timeout=1,retrytime=1,weight=1,port=70000", "port \"70000\" is not a port number"),
        ("timeout=1,retrytime=1,weight=1,port=0", "is not a port number"),
        ("timeout=1,retrytime=1,weight=1,port=1,colour=red", "unknown key \"colour\""),
        ("timeout", "is not key=value"),
    ] {
        match error(&EDGE_HEALTH, &[&format!("--pingplugin={value}")]) {
            LegacyFlagError::InvalidValue { flag, reason, .. } => {
                assert_eq!(flag, "--pingplugin");
                assert!(reason.contains(why), "{value}: {reason}");
            }
            other => panic!("{value}: {other}"),
        }
    }
}

#[test]
fn edge_health_periods_and_votes() {
    // the period holds SuperEdge's check period plus the longest round of its checks
    assert_eq!(args(&EDGE_HEALTH, &["--healthcheckperiod=5"]), ["--period=5s"]);
    let (out, deprecations) = ok(
        &EDGE_HEALTH,
        &["--healthcheckperiod", "5", "--kubeletauthplugin=timeout=2,retrytime=2,weight=1,port=10250"],
    );
    assert_eq!(out, ["--period=9s", "--check=kind=kubelet,port=10250,timeout=2s,retries=1,weight=100"]);
    assert!(
        matches!(&deprecations[0].treatment, Treatment::Replaced { by, note: Some(note) }
            if by == "--period=9s" && note.contains("(5 s)") && note.contains("up to 4 s")),
        "{deprecations:?}"
    );
    assert!(
        matches!(&deprecations[1].treatment, Treatment::Replaced { note: Some(note), .. } if !note.contains("--period")),
        "the period is said once, with --healthcheckperiod: {deprecations:?}"
    );
    assert_eq!(
        error(&EDGE_HEALTH, &["--healthcheckperiod=0"]),
        invalid_value("--healthcheckperiod", "0", "must be at least 1")
    );
    // vote timeout in periods, rounded up
    for (given, window) in [
        (&["--votetimeout=60"][..], "6"),
        (&["--votetimeout=61"], "7"),
        (&["--votetimeout=1"], "1"),
        (&["--votetimeout=60", "--period=7s"], "9"),
        (&["--votetimeout=60", "--period", "1500ms"], "40"),
        (&["--votetimeout=60", "--healthcheckperiod=20"], "3"),
        (&["--votetimeout=60", "--kubeletauthplugin=timeout=5,retrytime=3,weight=1,port=10250"], "3"),
    ] {
        let out = args(&EDGE_HEALTH, given);
        assert!(out.contains(&format!("--vote-window={window}")), "{given:?}: {out:?}");
    }
    assert_eq!(error(&EDGE_HEALTH, &["--votetimeout=0"]), invalid_value("--votetimeout", "0", "must be at least 1"));
    assert_eq!(
        ok(&EDGE_HEALTH, &["--voteperiod=10"]).1,
        [ignored("--voteperiod", "the votes are counted at every period's end")]
    );
    assert_eq!(error(&EDGE_HEALTH, &["--voteperiod=x"]), invalid_value("--voteperiod", "x", "not a whole number"));
}

#[test]
fn edge_health_communication_and_node() {
    let (out, deprecations) = ok(
        &EDGE_HEALTH,
        &[
            "--communicateperiod=60",
            "--communicatetimetout=2",
            "--communicateretrytime=3",
            "--communicateserverport=51005",
            "--hostname=edge-1",
            "--healthcheckscoreline=75",
            "--masterurl=",
            "--kubeconfig=/k",
        ],
    );
    assert_eq!(
        out,
        [
            "--kubeconfig=/k",
            "--message-timeout=2s",
            "--send-retries=2",
            "--bind-address=:51005",
            "--node-name=edge-1",
            "--healthy-score=75",
        ]
    );
    assert_eq!(
        flags(&deprecations),
        [
            "--communicateperiod",
            "--communicatetimetout",
            "--communicateretrytime",
            "--communicateserverport",
            "--hostname",
            "--healthcheckscoreline",
            "--masterurl",
        ]
    );
    assert_eq!(
        error(&EDGE_HEALTH, &["--communicateretrytime=0"]),
        invalid_value("--communicateretrytime", "0", "0 attempts would never send")
    );
    assert_eq!(
        error(&EDGE_HEALTH, &["--communicateserverport=65536"]),
        invalid_value("--communicateserverport", "65536", "not a port number")
    );
    assert_eq!(
        error(&EDGE_HEALTH, &["--communicatetimetout=1s"]),
        invalid_value("--communicatetimetout", "1s", "not a whole number")
    );
    assert_eq!(
        error(&EDGE_HEALTH, &["--healthcheckscoreline=-1"]),
        invalid_value("--healthcheckscoreline", "-1", "must be a number above 0")
    );
    assert_eq!(
        error(&EDGE_HEALTH, &["--healthcheckscoreline=high"]),
        invalid_value("--healthcheckscoreline", "high", "not a number")
    );
    assert_eq!(
        error(&EDGE_HEALTH, &["--masterurl=https://10.0.0.1:6443"]),
        LegacyFlagError::Unsupported {
            flag: "--masterurl".into(),
            value: "https://10.0.0.1:6443".into(),
            reason: MASTER_URL.into()
        }
    );
}

#[test]
fn every_flag_is_logged_once_when_given() {
    assert_every_flag_logged_once(
        &EDGE_HEALTH,
        &[
            ("kubeletauthplugin", "timeout=1,retrytime=1,weight=1,port=1"),
            ("kubeletplugin", "timeout=1,retrytime=1,weight=1,port=1"),
            ("pingplugin", "timeout=1,retrytime=1,weight=1,port=1"),
            ("communicateserverport", "51005"),
        ],
    );
}

#[test]
fn translated_arguments_hold_no_superedge_flag() {
    assert_translation_leaves_no_superedge_flag(&EDGE_HEALTH, &EDGE_HEALTH_MANIFEST);
}
