use controller_support::legacy_flags::{Deprecation, KLOG, LegacyFlag, LegacyFlagError, Translated, translate};

use super::*;

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

fn flags(deprecations: &[Deprecation]) -> Vec<&str> {
    deprecations.iter().map(|d| d.flag.as_str()).collect()
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

/// A valid value for each flag, by what it must be.
fn sample(flag: &LegacyFlag) -> &'static str {
    match (flag.name, flag.translation) {
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
fn every_flag_is_logged_once_when_given() {
    let table = &EDGE_HEALTH_ADMISSION;
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

#[test]
fn translated_arguments_hold_no_superedge_flag() {
    let (table, manifest) = (&EDGE_HEALTH_ADMISSION, &ADMISSION_MANIFEST[..]);
    let once = run(table, manifest).unwrap();
    let twice = translate(table, once.args.clone()).unwrap();
    assert_eq!(twice.args, once.args, "{}", table.binary);
    assert_eq!(twice.legacy.deprecations(), [], "{}", table.binary);
}
