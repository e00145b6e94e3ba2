use controller_support::legacy_flags::testing::*;

use super::*;

#[test]
fn a_superedge_flag_and_ours_for_the_same_thing_conflict() {
    let conflict = |legacy: &str, ours: &str| LegacyFlagError::Conflict { legacy: legacy.into(), ours: ours.into() };
    assert_eq!(
        error(&EDGE_HEALTH_ADMISSION, &["--kubeconfigpath=/a", "--kubeconfig=/b"]),
        conflict("--kubeconfigpath", "--kubeconfig")
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

#[test]
fn every_flag_is_logged_once_when_given() {
    assert_every_flag_logged_once(&EDGE_HEALTH_ADMISSION, &[]);
}

#[test]
fn translated_arguments_hold_no_superedge_flag() {
    assert_translation_leaves_no_superedge_flag(&EDGE_HEALTH_ADMISSION, &ADMISSION_MANIFEST);
}
