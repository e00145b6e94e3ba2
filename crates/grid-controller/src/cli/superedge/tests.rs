use controller_support::legacy_flags::{Deprecation, KLOG, LegacyFlag, LegacyFlagError, Outcome, Translated, translate};

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

fn ignored(flag: &str, reason: &str) -> Deprecation {
    Deprecation { flag: flag.into(), outcome: Outcome::Ignored { reason: reason.into() } }
}

fn error(table: &LegacyTable, args: &[&str]) -> LegacyFlagError {
    match run(table, args) {
        Ok(translated) => panic!("{args:?} accepted: {:?}", translated.args),
        Err(error) => error,
    }
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
    let table = &GRID_CONTROLLER;
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
    let (table, manifest) = (&GRID_CONTROLLER, &CONTROLLER_MANIFEST[..]);
    let once = run(table, manifest).unwrap();
    let twice = translate(table, once.args.clone()).unwrap();
    assert_eq!(twice.args, once.args, "{}", table.binary);
    assert_eq!(twice.legacy.deprecations(), [], "{}", table.binary);
}
