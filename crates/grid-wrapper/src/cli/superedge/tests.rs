use controller_support::legacy_flags::testing::*;

use super::*;

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
        matches!(&deprecations[3].treatment, Treatment::Ignored { reason } if reason.contains("RootCAs")),
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
    assert!(
        matches!(&deprecations[0].treatment, Treatment::Replaced { note: Some(n), .. } if n == "the address as given")
    );
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

#[test]
fn every_flag_is_logged_once_when_given() {
    assert_every_flag_logged_once(
        &GRID_WRAPPER,
        &[("insecure", "true"), ("service-autonomy-enhancement", "enabled=true")],
    );
}

#[test]
fn translated_arguments_hold_no_superedge_flag() {
    assert_translation_leaves_no_superedge_flag(&GRID_WRAPPER, &WRAPPER_MANIFEST);
}
