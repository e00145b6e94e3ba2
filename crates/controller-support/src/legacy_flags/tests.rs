use std::io::Write;
use std::sync::{Arc, Mutex};

use proptest::prelude::*;

use super::*;

const TABLES: [&LegacyTable; 4] = [&GRID_WRAPPER, &EDGE_HEALTH, &EDGE_HEALTH_ADMISSION, &GRID_CONTROLLER];

fn run(table: &LegacyTable, args: &[&str]) -> Result<Translated, LegacyFlagError> {
    translate(table, std::iter::once("bin").chain(args.iter().copied()))
}

/// The arguments after the program name, and the deprecations.
fn ok(table: &LegacyTable, args: &[&str]) -> (Vec<String>, Vec<Deprecation>) {
    let translated = run(table, args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert_eq!(translated.args[0], "bin");
    let out = translated.args[1..].iter().map(|a| a.to_str().expect("utf-8").to_string()).collect();
    (out, translated.legacy.deprecations().to_vec())
}

fn args(table: &LegacyTable, given: &[&str]) -> Vec<String> {
    ok(table, given).0
}

fn flags(deprecations: &[Deprecation]) -> Vec<&str> {
    deprecations.iter().map(|d| d.flag.as_str()).collect()
}

fn replaced(flag: &str, by: &str, note: Option<&str>) -> Deprecation {
    Deprecation { flag: flag.into(), outcome: Outcome::Replaced { by: by.into(), note: note.map(Into::into) } }
}

fn ignored(flag: &str, reason: &str) -> Deprecation {
    Deprecation { flag: flag.into(), outcome: Outcome::Ignored { reason: reason.into() } }
}

fn error(table: &LegacyTable, args: &[&str]) -> LegacyFlagError {
    match run(table, args) {
        Ok(translated) => panic!("{args:?} accepted: {:?}", translated.args),
        Err(error) => error,
    }
}

fn invalid_value(flag: &str, value: &str, reason: &str) -> LegacyFlagError {
    LegacyFlagError::InvalidValue { flag: flag.into(), value: value.into(), reason: reason.into() }
}

#[test]
fn every_go_syntax_of_a_flag_with_a_value() {
    for given in
        [&["--hostname=edge-1"][..], &["--hostname", "edge-1"], &["-hostname=edge-1"], &["-hostname", "edge-1"]]
    {
        let (out, deprecations) = ok(&GRID_WRAPPER, given);
        assert_eq!(out, ["--node-name=edge-1"], "{given:?}");
        assert_eq!(deprecations, [replaced("--hostname", "--node-name=edge-1", None)], "{given:?}");
    }
    // Go takes the next argument as the value, whatever it looks like
    assert_eq!(args(&GRID_WRAPPER, &["--hostname", "-x"]), ["--node-name=-x"]);
    // a value may hold `=`
    assert_eq!(args(&GRID_WRAPPER, &["--hostname=a=b"]), ["--node-name=a=b"]);
    assert_eq!(error(&GRID_WRAPPER, &["--hostname"]), LegacyFlagError::MissingValue { flag: "--hostname".into() });
    assert_eq!(error(&GRID_WRAPPER, &["-v"]), LegacyFlagError::MissingValue { flag: "--v".into() });
}

#[test]
fn every_go_syntax_of_a_boolean_flag() {
    let reason = "no pprof handlers are served";
    for given in ["--debug", "-debug", "--debug=true", "--debug=false", "-debug=false"] {
        assert_eq!(ok(&GRID_WRAPPER, &[given]), (vec![], vec![ignored("--debug", reason)]), "{given}");
    }
    for (text, value) in [
        ("1", true),
        ("t", true),
        ("T", true),
        ("true", true),
        ("TRUE", true),
        ("True", true),
        ("0", false),
        ("f", false),
        ("F", false),
        ("false", false),
        ("FALSE", false),
        ("False", false),
    ] {
        assert_eq!(parse_go_bool(text), Ok(value), "{text}");
        let given = format!("--insecure={text}");
        let result = run(&GRID_WRAPPER, &[&given]);
        // insecure=false needs files: the value was read as false
        assert_eq!(result.is_ok(), value, "{given}");
    }
    for text in ["", "yes", "no", "on", "tRUE", " true", "2"] {
        assert!(parse_go_bool(text).is_err(), "{text:?}");
    }
    assert_eq!(
        error(&GRID_WRAPPER, &["--debug=maybe"]),
        invalid_value("--debug", "maybe", "not a boolean (true or false)")
    );
    // a Go boolean flag never takes a separate value: `false` is left to clap (which
    // refuses a stray argument)
    assert_eq!(ok(&GRID_WRAPPER, &["--debug", "false"]), (vec!["false".into()], vec![ignored("--debug", reason)]));
}

#[test]
fn a_flag_given_twice_is_read_once_with_its_last_value() {
    let (out, deprecations) = ok(&GRID_WRAPPER, &["--hostname=a", "--debug", "-hostname", "b", "--debug=false"]);
    assert_eq!(out, ["--node-name=b"]);
    assert_eq!(flags(&deprecations), ["--hostname", "--debug"]);
    let (_, deprecations) = ok(&EDGE_HEALTH, &["--v=2", "-v=6", "--v", "4"]);
    assert_eq!(flags(&deprecations), ["--v"]);
    assert_eq!(run(&EDGE_HEALTH, &["--v=2", "-v=6", "--v", "4"]).unwrap().legacy.default_log_filter(), Some("debug"));
}

#[test]
fn our_flags_keep_their_places_and_translations_come_after_them() {
    let (out, deprecations) = ok(
        &GRID_WRAPPER,
        &[
            "--kubeconfig",
            "/k",
            "--debug",
            "--bind-address=127.0.0.1:1",
            "--hostname=n1",
            "--cache-dir",
            "/c",
            "--notify-channel-size=5",
            "--",
            "--hostname=not-a-flag",
        ],
    );
    assert_eq!(
        out,
        [
            "--kubeconfig",
            "/k",
            "--bind-address=127.0.0.1:1",
            "--cache-dir",
            "/c",
            "--node-name=n1",
            "--watch-buffer=5",
            "--",
            "--hostname=not-a-flag",
        ]
    );
    assert_eq!(flags(&deprecations), ["--debug", "--hostname", "--notify-channel-size"], "in the order given");
}

#[test]
fn what_is_no_superedge_flag_is_left_to_clap() {
    let untouched = [
        "--nonsense=1",
        "-x",
        "positional",
        "-",
        "---hostname=x",
        "--=x",
        "-5",
        "--node-name",
        "n1",
        "-V",
        "--help",
        "--wrapper-in-cluster=false",
        "--kubeconfig=/k",
        "--bind-address",
        ":1",
    ];
    assert_eq!(ok(&GRID_WRAPPER, &untouched), (untouched.map(String::from).to_vec(), vec![]));
    // another binary's SuperEdge flags are not this one's
    assert_eq!(args(&GRID_CONTROLLER, &["--hostname=x"]), ["--hostname=x"]);
    assert_eq!(args(&EDGE_HEALTH_ADMISSION, &["--notify-channel-size=1"]), ["--notify-channel-size=1"]);
}

#[test]
fn non_utf8_arguments_pass_and_values_must_be_utf8() {
    use std::os::unix::ffi::OsStringExt;
    let odd = OsString::from_vec(vec![b'-', b'-', 0xff]);
    let translated = translate(&GRID_WRAPPER, [OsString::from("bin"), odd.clone()]).unwrap();
    assert_eq!(translated.args, [OsString::from("bin"), odd.clone()]);
    let value = OsString::from_vec(vec![0xff]);
    let error = translate(&GRID_WRAPPER, [OsString::from("bin"), "--hostname".into(), value]).unwrap_err();
    assert_eq!(error, LegacyFlagError::NotUtf8 { flag: "--hostname".into() });
}

#[test]
fn a_superedge_flag_and_ours_for_the_same_thing_conflict() {
    let conflict = |legacy: &str, ours: &str| LegacyFlagError::Conflict { legacy: legacy.into(), ours: ours.into() };
    assert_eq!(error(&GRID_WRAPPER, &["--hostname=a", "--node-name=b"]), conflict("--hostname", "--node-name"));
    assert_eq!(error(&GRID_WRAPPER, &["--node-name", "b", "--hostname=a"]), conflict("--hostname", "--node-name"));
    assert_eq!(
        error(&EDGE_HEALTH_ADMISSION, &["--kubeconfigpath=/a", "--kubeconfig=/b"]),
        conflict("--kubeconfigpath", "--kubeconfig")
    );
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

#[test]
fn klog_flags_are_every_binarys() {
    for table in TABLES {
        let (out, deprecations) = ok(
            table,
            &[
                "--alsologtostderr",
                "--logtostderr=false",
                "--stderrthreshold=WARNING",
                "--vmodule=server=4",
                "--log_dir=/var/log",
                "--log-file=/var/log/x.log",
                "--log_file_max_size=1800",
                "--one_output=true",
                "--skip_headers",
                "--skip-log-headers",
                "--add_dir_header",
                "--log_backtrace_at=server.go:12",
                "-v=2",
            ],
        );
        assert_eq!(out, Vec::<String>::new(), "{}", table.binary);
        assert_eq!(
            flags(&deprecations),
            [
                "--alsologtostderr",
                "--logtostderr",
                "--stderrthreshold",
                "--vmodule",
                "--log-dir",
                "--log-file",
                "--log-file-max-size",
                "--one-output",
                "--skip-headers",
                "--skip-log-headers",
                "--add-dir-header",
                "--log-backtrace-at",
                "--v",
            ],
            "{}",
            table.binary
        );
        assert!(deprecations[..12].iter().all(|d| matches!(d.outcome, Outcome::Ignored { .. })));
    }
    // `_` and `-` are one separator: one flag, logged once
    assert_eq!(flags(&ok(&GRID_CONTROLLER, &["--log_dir=/a", "--log-dir=/b"]).1), ["--log-dir"]);
    for severity in ["INFO", "warning", "Error", "FATAL", "0", "3"] {
        assert!(run(&GRID_CONTROLLER, &[&format!("--stderrthreshold={severity}")]).is_ok(), "{severity}");
    }
    assert_eq!(
        error(&GRID_CONTROLLER, &["--stderrthreshold=loud"]),
        invalid_value("--stderrthreshold", "loud", "not a severity (INFO, WARNING, ERROR, FATAL)")
    );
    assert_eq!(
        error(&GRID_CONTROLLER, &["--log_file_max_size=big"]),
        invalid_value("--log-file-max-size", "big", "not a whole number")
    );
}

#[test]
fn klog_verbosity_sets_the_default_log_filter() {
    let want = ["info", "info", "info", "info", "debug", "debug", "trace", "trace", "trace"];
    for (v, filter) in want.iter().enumerate() {
        for given in [format!("--v={v}"), format!("-v={v}")] {
            let translated = run(&EDGE_HEALTH_ADMISSION, &[&given]).unwrap();
            assert_eq!(translated.legacy.default_log_filter(), Some(*filter), "{given}");
            let note = format!(
                "klog verbosity {v} is the log filter {filter} (0-3 info, 4-5 debug, 6+ trace), used when RUST_LOG is not set"
            );
            assert_eq!(translated.legacy.deprecations(), [replaced("--v", &format!("RUST_LOG={filter}"), Some(&note))]);
            assert_eq!(translated.args, [OsString::from("bin")], "no argument for clap");
        }
    }
    assert_eq!(run(&GRID_WRAPPER, &["-v", "4"]).unwrap().legacy.default_log_filter(), Some("debug"));
    assert_eq!(run(&GRID_WRAPPER, &[]).unwrap().legacy.default_log_filter(), None);
    assert_eq!(error(&GRID_WRAPPER, &["--v=abc"]), invalid_value("--v", "abc", "not a whole number"));
    assert_eq!(error(&GRID_WRAPPER, &["-v=-1"]), invalid_value("--v", "-1", "must be at least 0"));
    assert_eq!(error(&GRID_WRAPPER, &["--v=99999999999"]), invalid_value("--v", "99999999999", "too large"));
    // clap's -V (version) is not klog's -v
    assert_eq!(args(&GRID_WRAPPER, &["-V"]), ["-V"]);
}

/// SuperEdge's `deployment/application-grid-wrapper.yaml`, as shipped.
const WRAPPER_MANIFEST: [&str; 5] = [
    "--kubeconfig=/var/lib/application-grid-wrapper/kubeconfig.conf",
    "--bind-address=127.0.0.1:51006",
    "--hostname=edge-1",
    "--notify-channel-size=10000",
    "--support-endpointslice=true",
];

#[test]
fn grid_wrapper_manifest() {
    let (out, deprecations) = ok(&GRID_WRAPPER, &WRAPPER_MANIFEST);
    assert_eq!(
        out,
        [
            "--kubeconfig=/var/lib/application-grid-wrapper/kubeconfig.conf",
            "--bind-address=127.0.0.1:51006",
            "--node-name=edge-1",
            "--watch-buffer=10000",
        ]
    );
    let note = "events buffered per watcher; a watcher further behind gets 410 and relists (SuperEdge dropped events)";
    assert_eq!(
        deprecations,
        [
            replaced("--hostname", "--node-name=edge-1", None),
            replaced("--notify-channel-size", "--watch-buffer=10000", Some(note)),
            ignored("--support-endpointslice", "Endpoints and EndpointSlices are always both served"),
        ]
    );
    assert_eq!(
        error(&GRID_WRAPPER, &["--notify-channel-size=x"]),
        invalid_value("--notify-channel-size", "x", "not a whole number")
    );
    assert_eq!(
        error(&GRID_WRAPPER, &["--notify-channel-size=0"]),
        invalid_value("--notify-channel-size", "0", "must be at least 1")
    );
    // Go's empty string is unset
    assert_eq!(
        ok(&GRID_WRAPPER, &["--hostname="]),
        (vec![], vec![ignored("--hostname", "empty, which is SuperEdge's default (unset); --node-name keeps ours")])
    );
    for (given, reason) in [("--kube-qps=50.5", NO_CLIENT_RATE_LIMIT), ("--kube-burst=100", NO_CLIENT_RATE_LIMIT)] {
        assert_eq!(ok(&GRID_WRAPPER, &[given]).1, [ignored(&given[..given.find('=').unwrap()], reason)]);
    }
    assert_eq!(error(&GRID_WRAPPER, &["--kube-qps=fast"]), invalid_value("--kube-qps", "fast", "not a number"));
    assert_eq!(error(&GRID_WRAPPER, &["--kube-burst=1.5"]), invalid_value("--kube-burst", "1.5", "not a whole number"));
}

#[test]
fn grid_wrapper_serves_https_only_with_insecure_false() {
    let never_read = "SuperEdge served plain HTTP with --insecure (its default, true) and never read it";
    let files = ["--cert-file=/c", "--key-file=/k", "--ca-file=/ca"];
    // insecure, SuperEdge's default: the files are ignored
    for insecure in [&[][..], &["--insecure"], &["--insecure=true"]] {
        let given = [insecure, &files[..]].concat();
        let (out, deprecations) = ok(&GRID_WRAPPER, &given);
        assert_eq!(out, Vec::<String>::new(), "{given:?}");
        let mut want = vec![
            ignored("--cert-file", never_read),
            ignored("--key-file", never_read),
            ignored("--ca-file", never_read),
        ];
        if !insecure.is_empty() {
            let reason = "plain HTTP is our default too (HTTPS with --tls-cert-file and --tls-private-key-file)";
            want.insert(0, ignored("--insecure", reason));
        }
        assert_eq!(deprecations, want, "{given:?}");
    }
    let (out, deprecations) =
        ok(&GRID_WRAPPER, &["--insecure=false", "--cert-file=/c", "--key-file", "/k", "--ca-file=/ca"]);
    assert_eq!(out, ["--tls-cert-file=/c", "--tls-private-key-file=/k"]);
    assert_eq!(flags(&deprecations), ["--insecure", "--cert-file", "--key-file", "--ca-file"]);
    assert_eq!(deprecations[1], replaced("--cert-file", "--tls-cert-file=/c", None));
    assert_eq!(deprecations[2], replaced("--key-file", "--tls-private-key-file=/k", None));
    assert!(
        matches!(&deprecations[3].outcome, Outcome::Ignored { reason } if reason.contains("RootCAs")),
        "SuperEdge never asked clients for certificates: {deprecations:?}"
    );
    for given in [
        &["--insecure=false"][..],
        &["--insecure=false", "--cert-file=/c"],
        &["--insecure=false", "--cert-file=/c", "--key-file="],
    ] {
        assert!(
            matches!(error(&GRID_WRAPPER, given), LegacyFlagError::Unsupported { flag, .. } if flag == "--insecure"),
            "{given:?}"
        );
    }
    assert_eq!(
        error(&GRID_WRAPPER, &["--insecure=false", "--cert-file=/c", "--key-file=/k", "--tls-cert-file=/d"]),
        LegacyFlagError::Conflict { legacy: "--cert-file".into(), ours: "--tls-cert-file".into() }
    );
}

#[test]
fn grid_wrapper_service_autonomy() {
    let verdicts =
        "our edge-health serves its verdicts on /verdicts (SuperEdge's /localinfo), same scheme, host and port";
    let (out, deprecations) = ok(
        &GRID_WRAPPER,
        &["--service-autonomy-enhancement=enabled=true,address=http://localhost:51005/localinfo,interval=30"],
    );
    assert_eq!(out, ["--edge-health-url=http://localhost:51005/verdicts", "--edge-health-poll-interval=30s"]);
    assert_eq!(
        deprecations,
        [replaced(
            "--service-autonomy-enhancement",
            "--edge-health-url=http://localhost:51005/verdicts --edge-health-poll-interval=30s",
            Some(verdicts)
        )]
    );
    // each occurrence adds to the same settings, as SuperEdge's Set did; later keys win
    assert_eq!(
        args(
            &GRID_WRAPPER,
            &[
                "--service-autonomy-enhancement=enabled=true,interval=3",
                "--service-autonomy-enhancement=interval=7",
                "--service-autonomy-enhancement=address=http://127.0.0.1:9/localinfo",
            ]
        ),
        ["--edge-health-url=http://127.0.0.1:9/verdicts", "--edge-health-poll-interval=7s"]
    );
    // SuperEdge's defaults for what is not given
    assert_eq!(
        args(&GRID_WRAPPER, &["--service-autonomy-enhancement", "enabled=true"]),
        ["--edge-health-url=http://localhost:51005/verdicts", "--edge-health-poll-interval=30s"]
    );
    assert_eq!(
        args(
            &GRID_WRAPPER,
            &[
                "--service-autonomy-enhancement= enabled = 1 , interval=5,address=https://10.0.0.1:9/localinfo?fullmesh=1"
            ]
        ),
        ["--edge-health-url=https://10.0.0.1:9/verdicts", "--edge-health-poll-interval=5s"]
    );
    let (out, deprecations) =
        ok(&GRID_WRAPPER, &["--service-autonomy-enhancement=enabled=true,address=http://127.0.0.1:51005/verdicts"]);
    assert_eq!(out[0], "--edge-health-url=http://127.0.0.1:51005/verdicts");
    assert!(matches!(&deprecations[0].outcome, Outcome::Replaced { note: Some(n), .. } if n == "the address as given"));
    for off in ["enabled=false,interval=10", "", "address=http://x:1/localinfo"] {
        let given = format!("--service-autonomy-enhancement={off}");
        assert_eq!(
            ok(&GRID_WRAPPER, &[&given]),
            (
                vec![],
                vec![ignored(
                    "--service-autonomy-enhancement",
                    "enabled=false: service autonomy stays off (no --edge-health-url)"
                )]
            ),
            "{off}"
        );
    }
    for (bad, why) in [
        ("enabled=yes", "enabled: not a boolean"),
        ("enabled=true,interval=0", "interval \"0\" is not a whole number of seconds above 0"),
        ("enabled=true,interval=x", "is not a whole number"),
        ("enabled=true,colour=red", "unknown key \"colour\""),
        ("enabled", "is not key=value"),
        ("enabled=true,address=localhost:51005", "not an http:// or https:// URL"),
        ("enabled=true,address=ftp://h/localinfo", "not an http:// or https:// URL"),
        ("enabled=true,address=http://a b", "is not a URL"),
    ] {
        match error(&GRID_WRAPPER, &[&format!("--service-autonomy-enhancement={bad}")]) {
            LegacyFlagError::InvalidValue { flag, reason, .. } => {
                assert_eq!(flag, "--service-autonomy-enhancement");
                assert!(reason.contains(why), "{bad}: {reason}");
            }
            other => panic!("{bad}: {other}"),
        }
    }
}

/// SuperEdge's `deployment/edge-health.yaml`, as shipped.
const EDGE_HEALTH_MANIFEST: [&str; 2] = ["--kubeletauthplugin=timeout=5,retrytime=3,weight=1,port=10250", "--v=2"];

#[test]
fn edge_health_manifest() {
    let translated = run(&EDGE_HEALTH, &EDGE_HEALTH_MANIFEST).unwrap();
    let out: Vec<_> = translated.args[1..].iter().map(|a| a.to_str().unwrap()).collect();
    assert_eq!(out, ["--check=kind=kubelet,port=10250,timeout=5s,retries=2,weight=100", "--period=25s"]);
    assert_eq!(flags(translated.legacy.deprecations()), ["--kubeletauthplugin", "--v"]);
    match &translated.legacy.deprecations()[0].outcome {
        Outcome::Replaced { by, note: Some(note) } => {
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
        matches!(&deprecations[0].outcome, Outcome::Replaced { by, note: Some(note) }
            if by == "--period=9s" && note.contains("(5 s)") && note.contains("up to 4 s")),
        "{deprecations:?}"
    );
    assert!(
        matches!(&deprecations[1].outcome, Outcome::Replaced { note: Some(note), .. } if !note.contains("--period")),
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

/// SuperEdge's `deployment/edge-health-admission.yaml`, as shipped.
const ADMISSION_MANIFEST: [&str; 4] = [
    "--alsologtostderr",
    "--v=4",
    "--admission-control-server-cert=/etc/edge-health-admission/certs/server.crt",
    "--admission-control-server-key=/etc/edge-health-admission/certs/server.key",
];

#[test]
fn edge_health_admission_manifest_and_single_dashes() {
    let translated = run(&EDGE_HEALTH_ADMISSION, &ADMISSION_MANIFEST).unwrap();
    assert_eq!(
        translated.args[1..],
        [
            "--tls-cert-file=/etc/edge-health-admission/certs/server.crt",
            "--tls-private-key-file=/etc/edge-health-admission/certs/server.key"
        ]
    );
    assert_eq!(
        flags(translated.legacy.deprecations()),
        ["--alsologtostderr", "--v", "--admission-control-server-cert", "--admission-control-server-key"]
    );
    assert_eq!(translated.legacy.default_log_filter(), Some("debug"));
    // Go's flag package: one dash as well as two
    let (out, deprecations) = ok(
        &EDGE_HEALTH_ADMISSION,
        &[
            "-alsologtostderr",
            "-v=4",
            "-admission-control-server-cert",
            "/c",
            "-admission-control-server-key=/k",
            "-adminssion-control-listen-addr=:9443",
            "-kubeconfigpath=/kc",
            "-always-reachable",
        ],
    );
    assert_eq!(
        out,
        [
            "--always-reachable=true",
            "--tls-cert-file=/c",
            "--tls-private-key-file=/k",
            "--bind-address=:9443",
            "--kubeconfig=/kc"
        ]
    );
    assert_eq!(deprecations.len(), 6, "--always-reachable is ours too: not deprecated");
    // ours, same meaning: untouched with two dashes, in place with one
    for (given, want) in [
        ("--always-reachable", "--always-reachable"),
        ("--always-reachable=false", "--always-reachable=false"),
        ("-always-reachable=false", "--always-reachable=false"),
        ("-always-reachable=0", "--always-reachable=false"),
    ] {
        assert_eq!(
            ok(&EDGE_HEALTH_ADMISSION, &["--x", given, "--y"]),
            (vec!["--x".into(), want.into(), "--y".into()], vec![])
        );
    }
    assert_eq!(
        error(&EDGE_HEALTH_ADMISSION, &["-always-reachable=sometimes"]),
        invalid_value("--always-reachable", "sometimes", "not a boolean (true or false)")
    );
    assert!(matches!(
        error(&EDGE_HEALTH_ADMISSION, &["--adminssion-control-listen-addr=localhost:8443"]),
        LegacyFlagError::InvalidValue { flag, .. } if flag == "--adminssion-control-listen-addr"
    ));
}

/// SuperEdge's `deployment/application-grid-controller.yaml`, as shipped.
const CONTROLLER_MANIFEST: [&str; 1] = ["--feature-gates=EndpointSlice=true"];

#[test]
fn grid_controller_manifest_and_flags() {
    let gates = "SuperEdge's controller registered its EndpointSlice gate and never read it; grids need no gate";
    assert_eq!(ok(&GRID_CONTROLLER, &CONTROLLER_MANIFEST), (vec![], vec![ignored("--feature-gates", gates)]));
    let ours = [
        "--kubeconfig=/k",
        "--leader-elect=true",
        "--leader-elect-lease-duration=15s",
        "--leader-elect-renew-deadline=10s",
        "--leader-elect-retry-period=2s",
        "--leader-elect-resource-name=application-grid-controller",
        "--leader-elect-resource-namespace=edge-system",
    ];
    let (out, deprecations) = ok(
        &GRID_CONTROLLER,
        &[&ours[..], &["--leader-elect-resource-lock=endpoints", "--sync-period=30", "--worker=4", "--master="]]
            .concat(),
    );
    assert_eq!(out, ours, "the same names and meanings as ours");
    assert_eq!(flags(&deprecations), ["--leader-elect-resource-lock", "--sync-period", "--worker", "--master"]);
    for bad in ["--feature-gates=EndpointSlice", "--feature-gates=EndpointSlice=yes", "--worker=0", "--sync-period=x"] {
        assert!(matches!(error(&GRID_CONTROLLER, &[bad]), LegacyFlagError::InvalidValue { .. }), "{bad}");
    }
    assert!(run(&GRID_CONTROLLER, &["--feature-gates="]).is_ok(), "no gates");
    assert!(run(&GRID_CONTROLLER, &["--feature-gates=A=true, B=false"]).is_ok());
    assert!(matches!(error(&GRID_CONTROLLER, &["--master=https://x"]), LegacyFlagError::Unsupported { .. }));
}

/// A valid value for each flag, by what it must be.
fn sample(flag: &LegacyFlag) -> &'static str {
    match (flag.name, flag.translation) {
        ("insecure", _) => "true",
        ("service-autonomy-enhancement", _) => "enabled=true",
        ("kubeletauthplugin" | "kubeletplugin" | "pingplugin", _) => "timeout=1,retrytime=1,weight=1,port=1",
        ("communicateserverport", _) => "51005",
        (_, Translation::Custom | Translation::Seconds { .. } | Translation::Verbosity) => "2",
        (_, Translation::Unsupported { .. }) => "",
        (_, Translation::Rename { check, .. } | Translation::Ignore { check, .. }) => match check {
            Check::Any => "x",
            Check::Bool => "true",
            Check::Int | Check::Positive => "3",
            Check::Float | Check::PositiveFloat => "1.5",
            Check::Severity => "INFO",
            Check::FeatureGates => "A=true",
            Check::BindAddress => ":1",
        },
        (_, Translation::Same) => "true",
    }
}

#[test]
fn every_flag_of_every_table_is_logged_once_when_given() {
    for table in TABLES {
        let mut names = std::collections::BTreeSet::new();
        for flag in table.flags.iter().chain(KLOG) {
            assert!(names.insert(flag.name), "{}: {} twice", table.binary, flag.name);
            assert!(flag.name.chars().all(|c| c.is_ascii_lowercase() || c == '-'), "{}", flag.name);
            assert!(table.lookup(&flag.name.replace('-', "_")).is_some());
            if flag.translation == Translation::Same {
                continue;
            }
            for dashes in ["-", "--"] {
                let given = format!("{dashes}{}={}", flag.name, sample(flag));
                let (_, deprecations) = ok(table, &[&given, &given]);
                assert_eq!(flags(&deprecations), [format!("--{}", flag.name)], "{}: {given}", table.binary);
            }
        }
    }
}

#[test]
fn translated_arguments_hold_no_superedge_flag() {
    for (table, manifest) in [
        (&GRID_WRAPPER, &WRAPPER_MANIFEST[..]),
        (&EDGE_HEALTH, &EDGE_HEALTH_MANIFEST),
        (&EDGE_HEALTH_ADMISSION, &ADMISSION_MANIFEST),
        (&GRID_CONTROLLER, &CONTROLLER_MANIFEST),
    ] {
        let once = run(table, manifest).unwrap();
        let twice = translate(table, once.args.clone()).unwrap();
        assert_eq!(twice.args, once.args, "{}", table.binary);
        assert_eq!(twice.legacy.deprecations(), [], "{}", table.binary);
    }
}

/// Captures what is logged while `f` runs.
fn logged(f: impl FnOnce()) -> String {
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt().with_ansi(false).with_writer(move || writer.clone()).finish();
    tracing::subscriber::with_default(subscriber, f);
    let bytes = buffer.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
    String::from_utf8(bytes).unwrap()
}

#[test]
fn deprecations_are_logged_once_with_their_fields() {
    let translated = run(&GRID_WRAPPER, &["--hostname=n1", "--debug", "--hostname=n2", "--v=4"]).unwrap();
    let text = logged(|| {
        translated.legacy.log();
        translated.legacy.log();
    });
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines.iter().all(|l| l.contains(" WARN ") && l.contains(DEPRECATED)), "{text}");
    assert!(lines[0].ends_with(r#"flag="--hostname" replacement="--node-name=n2""#), "{text}");
    assert!(lines[1].ends_with(r#"flag="--debug" ignored="no pprof handlers are served""#), "{text}");
    assert!(lines[2].contains(r#"flag="--v" replacement="RUST_LOG=debug" note="klog verbosity 4"#), "{text}");
    assert_eq!(logged(|| LegacyFlags::default().log()), "", "nothing given, nothing logged");
}

#[derive(clap::Parser, Debug)]
struct Tiny {
    #[arg(long)]
    node_name: Option<String>,
}

#[test]
fn parse_errors_are_clap_errors_with_exit_code_2() {
    let (tiny, legacy) = try_parse_from::<Tiny, _, _>(&GRID_WRAPPER, ["bin", "--hostname=n1"]).unwrap();
    assert_eq!(tiny.node_name.as_deref(), Some("n1"));
    assert_eq!(flags(legacy.deprecations()), ["--hostname"]);
    let bad = try_parse_from::<Tiny, _, _>(&GRID_WRAPPER, ["bin", "--v=abc"]).unwrap_err();
    assert_eq!(bad.exit_code(), 2);
    assert!(bad.to_string().contains(r#"invalid value "abc" for --v: not a whole number"#), "{bad}");
    let unknown = try_parse_from::<Tiny, _, _>(&GRID_WRAPPER, ["bin", "--nonsense"]).unwrap_err();
    assert_eq!((unknown.kind(), unknown.exit_code()), (clap::error::ErrorKind::UnknownArgument, 2));
}

/// A token of a generated command line: ours, a SuperEdge flag in one of Go's spellings,
/// or an unknown flag (clap's).
#[derive(Clone, Debug)]
enum Token {
    Ours(&'static str),
    Legacy { name: &'static str, dashes: usize, separate: bool, value: u8 },
    Unknown,
}

fn token() -> impl Strategy<Value = Token> {
    let legacy = (
        prop::sample::select(vec!["hostname", "notify-channel-size", "debug", "v", "kube-burst", "log_dir"]),
        1..=2usize,
        any::<bool>(),
        1..50u8,
    )
        .prop_map(|(name, dashes, separate, value)| Token::Legacy { name, dashes, separate, value });
    prop_oneof![
        prop::sample::select(vec!["--cache-dir=/c", "--history-size=5", "--wrapper-in-cluster=false", "-V"])
            .prop_map(Token::Ours),
        legacy,
        Just(Token::Unknown),
    ]
}

proptest! {
    /// Whatever the mix: our arguments come through in their order, every SuperEdge flag
    /// given is logged exactly once (in the order first given), its last value is the one
    /// used, and nothing SuperEdge's is left for clap.
    #[test]
    fn mixed_command_lines(tokens in prop::collection::vec(token(), 0..12)) {
        let mut argv = vec!["bin".to_string()];
        let mut ours = Vec::new();
        let mut first_given: Vec<String> = Vec::new();
        let mut last_hostname = None;
        for token in &tokens {
            match token {
                Token::Ours(arg) => { argv.push(arg.to_string()); ours.push(arg.to_string()); }
                Token::Unknown => { argv.push("--unknown".into()); ours.push("--unknown".into()); }
                Token::Legacy { name, dashes, separate, value } => {
                    let canonical = name.replace('_', "-");
                    if !first_given.contains(&canonical) {
                        first_given.push(canonical);
                    }
                    let value = if *name == "debug" { if value % 2 == 0 { "true".to_string() } else { "false".to_string() } } else { value.to_string() };
                    if *name == "hostname" { last_hostname = Some(value.clone()); }
                    let flag = format!("{}{name}", "-".repeat(*dashes));
                    if *separate && *name != "debug" { argv.push(flag); argv.push(value); } else { argv.push(format!("{flag}={value}")); }
                }
            }
        }
        let translated = translate(&GRID_WRAPPER, argv.clone()).unwrap();
        let out: Vec<String> = translated.args.iter().map(|a| a.to_str().unwrap().to_string()).collect();
        prop_assert_eq!(&out[1..=ours.len()], &ours[..]);
        let logged: Vec<String> = translated.legacy.deprecations().iter().map(|d| d.flag.clone()).collect();
        let want: Vec<String> = first_given.iter().map(|f| format!("--{f}")).collect();
        prop_assert_eq!(logged, want);
        let node_names: Vec<String> = out.iter().filter(|a| a.starts_with("--node-name")).cloned().collect();
        match last_hostname {
            Some(host) => prop_assert_eq!(node_names, vec![format!("--node-name={host}")]),
            None => prop_assert!(node_names.is_empty()),
        }
        let again = translate(&GRID_WRAPPER, translated.args.clone()).unwrap();
        prop_assert_eq!(again.args, translated.args);
        prop_assert!(again.legacy.deprecations().is_empty());
    }
}
