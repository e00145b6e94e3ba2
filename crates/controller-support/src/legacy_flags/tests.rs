use std::io::Write;
use std::sync::{Arc, Mutex};

use proptest::prelude::*;

use super::testing::*;
use super::*;

/// A binary's table for the engine's own tests: some of the grid wrapper's flags, whose
/// `--insecure=false` its resolver refuses (the grid wrapper's does without certificate files).
static WRAPPER_LIKE: LegacyTable = LegacyTable {
    binary: "wrapper-like",
    flags: &[
        flag("hostname", Takes::Value, rename("--node-name", Check::Any)),
        flag("notify-channel-size", Takes::Value, rename("--watch-buffer", Check::Positive)),
        flag("insecure", Takes::Bool, Translation::Custom),
        flag("debug", Takes::Bool, ignore(Check::Bool, "no pprof handlers are served")),
        flag("kube-burst", Takes::Value, ignore(Check::Int, NO_CLIENT_RATE_LIMIT)),
    ],
    accumulated: &[],
    custom: insecure,
};

/// Refuses `--insecure=false`; ignores `--insecure`.
fn insecure(r: &mut Resolution<'_>) -> Result<(), LegacyFlagError> {
    let Some(value) = r.value("insecure").map(str::to_string) else { return Ok(()) };
    if value == "false" {
        let reason = "HTTPS needs certificate files".into();
        return Err(LegacyFlagError::Unsupported { flag: "--insecure".into(), value, reason });
    }
    r.ignore("insecure", "plain HTTP is our default too");
    Ok(())
}

/// A binary's table with no flags of its own: klog's only.
static KLOG_ONLY: LegacyTable = LegacyTable { binary: "klog-only", flags: &[], accumulated: &[], custom: no_custom };

const TABLES: [&LegacyTable; 2] = [&WRAPPER_LIKE, &KLOG_ONLY];

#[test]
fn every_go_syntax_of_a_flag_with_a_value() {
    for given in
        [&["--hostname=edge-1"][..], &["--hostname", "edge-1"], &["-hostname=edge-1"], &["-hostname", "edge-1"]]
    {
        let (out, deprecations) = ok(&WRAPPER_LIKE, given);
        assert_eq!(out, ["--node-name=edge-1"], "{given:?}");
        assert_eq!(deprecations, [replaced("--hostname", "--node-name=edge-1", None)], "{given:?}");
    }
    // Go takes the next argument as the value, whatever it looks like
    assert_eq!(args(&WRAPPER_LIKE, &["--hostname", "-x"]), ["--node-name=-x"]);
    // a value may hold `=`
    assert_eq!(args(&WRAPPER_LIKE, &["--hostname=a=b"]), ["--node-name=a=b"]);
    assert_eq!(error(&WRAPPER_LIKE, &["--hostname"]), LegacyFlagError::MissingValue { flag: "--hostname".into() });
    assert_eq!(error(&WRAPPER_LIKE, &["-v"]), LegacyFlagError::MissingValue { flag: "--v".into() });
}

#[test]
fn every_go_syntax_of_a_boolean_flag() {
    let reason = "no pprof handlers are served";
    for given in ["--debug", "-debug", "--debug=true", "--debug=false", "-debug=false"] {
        assert_eq!(ok(&WRAPPER_LIKE, &[given]), (vec![], vec![ignored("--debug", reason)]), "{given}");
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
        let result = run(&WRAPPER_LIKE, &[&given]);
        // insecure=false needs files: the value was read as false
        assert_eq!(result.is_ok(), value, "{given}");
    }
    for text in ["", "yes", "no", "on", "tRUE", " true", "2"] {
        assert!(parse_go_bool(text).is_err(), "{text:?}");
    }
    assert_eq!(
        error(&WRAPPER_LIKE, &["--debug=maybe"]),
        invalid_value("--debug", "maybe", "not a boolean (true or false)")
    );
    // a Go boolean flag never takes a separate value: `false` is left to clap (which
    // refuses a stray argument)
    assert_eq!(ok(&WRAPPER_LIKE, &["--debug", "false"]), (vec!["false".into()], vec![ignored("--debug", reason)]));
}

#[test]
fn a_flag_given_twice_is_read_once_with_its_last_value() {
    let (out, deprecations) = ok(&WRAPPER_LIKE, &["--hostname=a", "--debug", "-hostname", "b", "--debug=false"]);
    assert_eq!(out, ["--node-name=b"]);
    assert_eq!(flags(&deprecations), ["--hostname", "--debug"]);
    let (_, deprecations) = ok(&KLOG_ONLY, &["--v=2", "-v=6", "--v", "4"]);
    assert_eq!(flags(&deprecations), ["--v"]);
    assert_eq!(run(&KLOG_ONLY, &["--v=2", "-v=6", "--v", "4"]).unwrap().legacy.default_log_filter(), Some("debug"));
}

#[test]
fn our_flags_keep_their_places_and_translations_come_after_them() {
    let (out, deprecations) = ok(
        &WRAPPER_LIKE,
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
    assert_eq!(ok(&WRAPPER_LIKE, &untouched), (untouched.map(String::from).to_vec(), vec![]));
    // another binary's SuperEdge flags are not this one's
    assert_eq!(args(&KLOG_ONLY, &["--hostname=x"]), ["--hostname=x"]);
    assert_eq!(args(&KLOG_ONLY, &["--notify-channel-size=1"]), ["--notify-channel-size=1"]);
}

#[test]
fn non_utf8_arguments_pass_and_values_must_be_utf8() {
    use std::os::unix::ffi::OsStringExt;
    let odd = OsString::from_vec(vec![b'-', b'-', 0xff]);
    let translated = translate(&WRAPPER_LIKE, [OsString::from("bin"), odd.clone()]).unwrap();
    assert_eq!(translated.args, [OsString::from("bin"), odd.clone()]);
    let value = OsString::from_vec(vec![0xff]);
    let error = translate(&WRAPPER_LIKE, [OsString::from("bin"), "--hostname".into(), value]).unwrap_err();
    assert_eq!(error, LegacyFlagError::NotUtf8 { flag: "--hostname".into() });
}

#[test]
fn a_superedge_flag_and_ours_for_the_same_thing_conflict() {
    let conflict = |legacy: &str, ours: &str| LegacyFlagError::Conflict { legacy: legacy.into(), ours: ours.into() };
    assert_eq!(error(&WRAPPER_LIKE, &["--hostname=a", "--node-name=b"]), conflict("--hostname", "--node-name"));
    assert_eq!(error(&WRAPPER_LIKE, &["--node-name", "b", "--hostname=a"]), conflict("--hostname", "--node-name"));
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
        assert!(deprecations[..12].iter().all(|d| matches!(d.treatment, Treatment::Ignored { .. })));
    }
    // `_` and `-` are one separator: one flag, logged once
    assert_eq!(flags(&ok(&KLOG_ONLY, &["--log_dir=/a", "--log-dir=/b"]).1), ["--log-dir"]);
    for severity in ["INFO", "warning", "Error", "FATAL", "0", "3"] {
        assert!(run(&KLOG_ONLY, &[&format!("--stderrthreshold={severity}")]).is_ok(), "{severity}");
    }
    assert_eq!(
        error(&KLOG_ONLY, &["--stderrthreshold=loud"]),
        invalid_value("--stderrthreshold", "loud", "not a severity (INFO, WARNING, ERROR, FATAL)")
    );
    assert_eq!(
        error(&KLOG_ONLY, &["--log_file_max_size=big"]),
        invalid_value("--log-file-max-size", "big", "not a whole number")
    );
}

#[test]
fn klog_verbosity_sets_the_default_log_filter() {
    let want = ["info", "info", "info", "info", "debug", "debug", "trace", "trace", "trace"];
    for (v, filter) in want.iter().enumerate() {
        for given in [format!("--v={v}"), format!("-v={v}")] {
            let translated = run(&KLOG_ONLY, &[&given]).unwrap();
            assert_eq!(translated.legacy.default_log_filter(), Some(*filter), "{given}");
            let note = format!(
                "klog verbosity {v} is the log filter {filter} (0-3 info, 4-5 debug, 6+ trace), used when RUST_LOG is not set"
            );
            assert_eq!(translated.legacy.deprecations(), [replaced("--v", &format!("RUST_LOG={filter}"), Some(&note))]);
            assert_eq!(translated.args, [OsString::from("bin")], "no argument for clap");
        }
    }
    assert_eq!(run(&WRAPPER_LIKE, &["-v", "4"]).unwrap().legacy.default_log_filter(), Some("debug"));
    assert_eq!(run(&WRAPPER_LIKE, &[]).unwrap().legacy.default_log_filter(), None);
    assert_eq!(error(&WRAPPER_LIKE, &["--v=abc"]), invalid_value("--v", "abc", "not a whole number"));
    assert_eq!(error(&WRAPPER_LIKE, &["-v=-1"]), invalid_value("--v", "-1", "must be at least 0"));
    assert_eq!(error(&WRAPPER_LIKE, &["--v=99999999999"]), invalid_value("--v", "99999999999", "too large"));
    // clap's -V (version) is not klog's -v
    assert_eq!(args(&WRAPPER_LIKE, &["-V"]), ["-V"]);
}

#[test]
fn every_flag_of_every_table_is_logged_once_when_given() {
    for table in TABLES {
        testing::assert_every_flag_logged_once(table, &[("insecure", "true")]);
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
    let translated = run(&WRAPPER_LIKE, &["--hostname=n1", "--debug", "--hostname=n2", "--v=4"]).unwrap();
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
    let (tiny, legacy) = try_parse_from::<Tiny, _, _>(&WRAPPER_LIKE, ["bin", "--hostname=n1"]).unwrap();
    assert_eq!(tiny.node_name.as_deref(), Some("n1"));
    assert_eq!(flags(legacy.deprecations()), ["--hostname"]);
    let bad = try_parse_from::<Tiny, _, _>(&WRAPPER_LIKE, ["bin", "--v=abc"]).unwrap_err();
    assert_eq!(bad.exit_code(), 2);
    assert!(bad.to_string().contains(r#"invalid value "abc" for --v: not a whole number"#), "{bad}");
    let unknown = try_parse_from::<Tiny, _, _>(&WRAPPER_LIKE, ["bin", "--nonsense"]).unwrap_err();
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
        let translated = translate(&WRAPPER_LIKE, argv.clone()).unwrap();
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
        let again = translate(&WRAPPER_LIKE, translated.args.clone()).unwrap();
        prop_assert_eq!(again.args, translated.args);
        prop_assert!(again.legacy.deprecations().is_empty());
    }
}
