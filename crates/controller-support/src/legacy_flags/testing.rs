//! What every binary's tests of its SuperEdge flag table use (feature `testing`, for
//! dev-dependencies): translating given arguments, the expected deprecations and errors,
//! and the two checks each table must pass.

use std::collections::BTreeSet;

use super::Check;
pub use super::{
    Deprecation, KLOG, LegacyFlag, LegacyFlagError, LegacyTable, Translated, Translation, Treatment, translate,
};

/// `args` translated as given to a binary called `bin`.
pub fn run(table: &LegacyTable, args: &[&str]) -> Result<Translated, LegacyFlagError> {
    translate(table, std::iter::once("bin").chain(args.iter().copied()))
}

/// The arguments after the program name, and the deprecations (panics on an error).
pub fn ok(table: &LegacyTable, args: &[&str]) -> (Vec<String>, Vec<Deprecation>) {
    let translated = run(table, args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert_eq!(translated.args[0], "bin");
    let out = translated.args[1..].iter().map(|a| a.to_str().expect("utf-8").to_string()).collect();
    (out, translated.legacy.deprecations().to_vec())
}

/// The arguments after the program name.
pub fn args(table: &LegacyTable, given: &[&str]) -> Vec<String> {
    ok(table, given).0
}

/// The SuperEdge flags the deprecations name.
pub fn flags(deprecations: &[Deprecation]) -> Vec<&str> {
    deprecations.iter().map(|d| d.flag.as_str()).collect()
}

pub fn replaced(flag: &str, by: &str, note: Option<&str>) -> Deprecation {
    Deprecation { flag: flag.into(), treatment: Treatment::Replaced { by: by.into(), note: note.map(Into::into) } }
}

pub fn ignored(flag: &str, reason: &str) -> Deprecation {
    Deprecation { flag: flag.into(), treatment: Treatment::Ignored { reason: reason.into() } }
}

/// The error `args` are refused with (panics when they are accepted).
pub fn error(table: &LegacyTable, args: &[&str]) -> LegacyFlagError {
    match run(table, args) {
        Ok(translated) => panic!("{args:?} accepted: {:?}", translated.args),
        Err(error) => error,
    }
}

pub fn invalid_value(flag: &str, value: &str, reason: &str) -> LegacyFlagError {
    LegacyFlagError::InvalidValue { flag: flag.into(), value: value.into(), reason: reason.into() }
}

/// A valid value for `flag`: from `special` (flag name, value) for flags whose resolver
/// reads a value of its own shape, else by what the value must be.
pub fn sample(flag: &LegacyFlag, special: &[(&str, &'static str)]) -> &'static str {
    if let Some((_, value)) = special.iter().find(|(name, _)| *name == flag.name) {
        return value;
    }
    match flag.translation {
        Translation::Custom | Translation::Seconds { .. } | Translation::Verbosity => "2",
        Translation::Unsupported { .. } => "",
        Translation::Rename { check, .. } | Translation::Ignore { check, .. } => match check {
            Check::Any => "x",
            Check::Bool => "true",
            Check::Int | Check::Positive => "3",
            Check::Float | Check::PositiveFloat => "1.5",
            Check::Severity => "INFO",
            Check::FeatureGates => "A=true",
            Check::BindAddress => ":1",
        },
        Translation::Same => "true",
    }
}

/// Every flag of `table` (and klog's) is named once, in lowercase with dashes, found with
/// underscores too, and given twice (with one dash or two, a value from [`sample`]) is
/// logged once.
pub fn assert_every_flag_logged_once(table: &LegacyTable, special: &[(&str, &'static str)]) {
    let mut names = BTreeSet::new();
    for flag in table.flags.iter().chain(KLOG) {
        assert!(names.insert(flag.name), "{}: {} twice", table.binary, flag.name);
        assert!(flag.name.chars().all(|c| c.is_ascii_lowercase() || c == '-'), "{}", flag.name);
        assert!(table.lookup(&flag.name.replace('-', "_")).is_some());
        if flag.translation == Translation::Same {
            continue;
        }
        for dashes in ["-", "--"] {
            let given = format!("{dashes}{}={}", flag.name, sample(flag, special));
            let (_, deprecations) = ok(table, &[&given, &given]);
            assert_eq!(flags(&deprecations), [format!("--{}", flag.name)], "{}: {given}", table.binary);
        }
    }
}

/// `manifest` translated once holds no SuperEdge flag: translating it again changes
/// nothing and deprecates nothing.
pub fn assert_translation_leaves_no_superedge_flag(table: &LegacyTable, manifest: &[&str]) {
    let once = run(table, manifest).unwrap_or_else(|e| panic!("{}: {e}", table.binary));
    let twice = translate(table, once.args.clone()).unwrap_or_else(|e| panic!("{}: {e}", table.binary));
    assert_eq!(twice.args, once.args, "{}", table.binary);
    assert_eq!(twice.legacy.deprecations(), [], "{}", table.binary);
}
