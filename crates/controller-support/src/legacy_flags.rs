//! SuperEdge's command-line flags, accepted as deprecated aliases: an operator who swaps
//! SuperEdge's images for ours keeps SuperEdge's DaemonSets and Deployments, argument lists
//! included. Before clap sees the arguments, [`translate`] rewrites the SuperEdge flags of
//! one binary (its [`LegacyTable`]) into ours, with SuperEdge's meanings, and records one
//! [`Deprecation`] per SuperEdge flag given (twice given, recorded once; as in Go, the last
//! value wins). The runtime logs them once logging is set up
//! ([`crate::runtime::Builder::legacy_flags`]).
//!
//! Go's flag syntax is read: `--name=value`, `--name value` (flags taking a value), and
//! `--name`, `--name=true`, `--name=false` for boolean flags, which never take a separate
//! value (`--insecure false` leaves `false` to clap, which refuses it). A single dash works
//! too (`-v=4`), as Go's `flag` package (SuperEdge's edge-health-admission) and pflag's
//! one-letter `-v` accept it, and `_` and `-` are one separator (`--log_dir`, `--log-dir`),
//! as SuperEdge's cobra binaries normalised them. Everything after `--` is left alone.
//!
//! This module must never change what one of our own flags means, nor take a value
//! SuperEdge would have refused (nor some SuperEdge silently turned into 0): a bad value is
//! an error naming the SuperEdge flag, which [`parse`] turns into a clap error (exit code 2).
//! A flag that is not in a table is clap's to judge, as before. It is pure: no I/O, no
//! environment (the `--v` level applies only when `RUST_LOG` is not set, which the logging
//! set-up decides).
//!
//! The klog flags (`--v`, `--alsologtostderr`, `--logtostderr`, `--stderrthreshold`,
//! `--vmodule`, `--log_dir`, `--log_file`, ...) are every binary's: `--v=N` sets the
//! default log level (0-3 info, 4-5 debug, 6 and more trace: klog's V(2) is steady-state
//! information, V(4) debugging), the others are ignored (we always log to stderr).
//!
//! This is the engine only, with the klog flags ([`KLOG`]): each binary's table, and the
//! resolver of its flags that depend on others, is in that binary's crate, in a `superedge`
//! module beside its flags (`grid_wrapper::cli::superedge::GRID_WRAPPER`,
//! `edge_health::daemon::cli::superedge::EDGE_HEALTH`,
//! `edge_health_admission::cli::superedge::EDGE_HEALTH_ADMISSION`, and grid-controller's
//! binary's `cli::superedge::GRID_CONTROLLER`), built with [`flag`], [`ignore`] and
//! [`rename`], its resolver reading and adding to a [`Resolution`].

use std::ffi::OsString;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::flags::BindAddress;

/// The message of every deprecation line (with `flag` and `replacement`/`note` or
/// `ignored` as fields).
pub const DEPRECATED: &str = "deprecated SuperEdge flag accepted";

/// One line for a binary's `--help` (`after_help`): the legacy flags are not clap's and do
/// not clutter the list.
pub const HELP_NOTE: &str = "SuperEdge's flags of this component are accepted too: each is logged once, as deprecated, \
                             with what replaces it or why it is ignored.";

/// How a flag takes its value, in Go's syntax.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Takes {
    /// `--name` (true), `--name=true`, `--name=false`: never a separate value.
    Bool,
    /// `--name=value` or `--name value`.
    Value,
}

/// What a value must be, checked before it is used or ignored: SuperEdge's Go parser
/// refused the same (or, worse, read a typo as 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    Any,
    /// Go's `strconv.ParseBool`.
    Bool,
    /// A decimal whole number, any sign.
    Int,
    /// A decimal whole number of at least 1.
    Positive,
    /// A finite decimal number.
    Float,
    /// A finite number above 0.
    PositiveFloat,
    /// klog's `--stderrthreshold`: INFO, WARNING, ERROR, FATAL or a number.
    Severity,
    /// `key=bool,key=bool` (`--feature-gates`).
    FeatureGates,
    /// Ours: `host:port` or `:port`.
    BindAddress,
}

/// What becomes of a SuperEdge flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Translation {
    /// Ours too, with the same meaning: not deprecated; only a single-dash spelling is
    /// rewritten (`-always-reachable` to `--always-reachable`), clap reads the rest.
    Same,
    /// Our flag `to` with the same value (an empty value is Go's unset: ignored).
    Rename { to: &'static str, check: Check, note: Option<&'static str> },
    /// Whole seconds (SuperEdge's numbers) as our duration flag `to` (`N` -> `Ns`).
    Seconds { to: &'static str, note: Option<&'static str> },
    /// Checked, then ignored for `reason`.
    Ignore { check: Check, reason: &'static str },
    /// Accepted empty (Go's unset); any other value is refused for `reason`.
    Unsupported { reason: &'static str },
    /// klog's `--v`: the default log level.
    Verbosity,
    /// Depends on other flags: the table's own resolver translates it.
    Custom,
}

/// One SuperEdge flag: its name (with `-` as separator), syntax and fate.
#[derive(Clone, Copy, Debug)]
pub struct LegacyFlag {
    pub name: &'static str,
    pub takes: Takes,
    pub translation: Translation,
}

/// The SuperEdge flags of one binary (the klog flags come with every table).
pub struct LegacyTable {
    pub binary: &'static str,
    pub flags: &'static [LegacyFlag],
    /// Flags given as `key=value,...` whose every occurrence adds to the earlier ones (a
    /// pflag Value whose Set parses each occurrence into one struct): their values are
    /// joined with `,` rather than the last one winning.
    pub accumulated: &'static [&'static str],
    /// Translates the table's [`Translation::Custom`] flags ([`no_custom`] when it has none).
    pub custom: fn(&mut Resolution<'_>) -> Result<(), LegacyFlagError>,
}

impl std::fmt::Debug for LegacyTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LegacyTable").field("binary", &self.binary).field("flags", &self.flags).finish()
    }
}

impl LegacyTable {
    /// The entry for `name` (`_` or `-` as separator): the binary's own, else klog's.
    pub fn lookup(&self, name: &str) -> Option<&'static LegacyFlag> {
        let name = name.replace('_', "-");
        self.flags.iter().chain(KLOG).find(|flag| flag.name == name)
    }
}

/// A SuperEdge flag given, and what it became.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deprecation {
    /// `--name` as the table spells it.
    pub flag: String,
    pub treatment: Treatment,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Treatment {
    /// Read as `by` (our flags with their values, or what else now does its job).
    Replaced {
        by: String,
        note: Option<String>,
    },
    Ignored {
        reason: String,
    },
}

/// What the runtime does with the SuperEdge flags once clap has parsed ours: log the
/// deprecations (once), and take `--v`'s level as the default log filter.
#[derive(Debug, Default)]
pub struct LegacyFlags {
    deprecations: Vec<Deprecation>,
    default_log_filter: Option<&'static str>,
    logged: AtomicBool,
}

impl LegacyFlags {
    pub fn deprecations(&self) -> &[Deprecation] {
        &self.deprecations
    }

    /// The log filter `--v` asks for (`info`, `debug`, `trace`), for when `RUST_LOG` is
    /// not set.
    pub fn default_log_filter(&self) -> Option<&'static str> {
        self.default_log_filter
    }

    /// One warning per SuperEdge flag given; later calls log nothing (the runtime calls
    /// this once logging is set up).
    pub fn log(&self) {
        if self.logged.swap(true, Ordering::SeqCst) {
            return;
        }
        for deprecation in &self.deprecations {
            // `&str` fields: quoted in text logs, plain strings in JSON
            let flag = deprecation.flag.as_str();
            match &deprecation.treatment {
                Treatment::Replaced { by, note: Some(note) } => {
                    tracing::warn!(flag, replacement = by.as_str(), note = note.as_str(), "{DEPRECATED}")
                }
                Treatment::Replaced { by, note: None } => {
                    tracing::warn!(flag, replacement = by.as_str(), "{DEPRECATED}")
                }
                Treatment::Ignored { reason } => tracing::warn!(flag, ignored = reason.as_str(), "{DEPRECATED}"),
            }
        }
    }
}

/// The arguments clap is to parse, and what is left for the runtime.
#[derive(Debug)]
pub struct Translated {
    /// The program name, our own arguments in their order, the translations, then `--`
    /// and what followed it.
    pub args: Vec<OsString>,
    pub legacy: LegacyFlags,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LegacyFlagError {
    #[error("invalid value {value:?} for {flag}: {reason}")]
    InvalidValue { flag: String, value: String, reason: String },
    #[error("{flag} needs a value ({flag}=VALUE or {flag} VALUE)")]
    MissingValue { flag: String },
    #[error("{flag} has a value that is not UTF-8")]
    NotUtf8 { flag: String },
    #[error("{legacy} (SuperEdge's flag, read as {ours}) and {ours} are both given: keep one")]
    Conflict { legacy: String, ours: String },
    #[error("{flag}={value} is not supported: {reason}")]
    Unsupported { flag: String, value: String, reason: String },
}

/// Our flags a translation may add even when given already (repeatable).
const REPEATABLE: &[&str] = &["--check"];

/// Translates `args` (the program name first) for `table`.
pub fn translate<I, A>(table: &LegacyTable, args: I) -> Result<Translated, LegacyFlagError>
where
    I: IntoIterator<Item = A>,
    A: Into<OsString>,
{
    let mut args = args.into_iter().map(Into::into);
    let program = args.next();
    let mut ours: Vec<OsString> = Vec::new();
    let mut given: Vec<Given> = Vec::new();
    let mut rest: Vec<OsString> = Vec::new();
    while let Some(arg) = args.next() {
        if arg == "--" {
            rest.push(arg);
            rest.extend(args.by_ref());
            break;
        }
        let Some(token) = arg.to_str().and_then(FlagToken::parse) else {
            ours.push(arg);
            continue;
        };
        let Some(flag) = table.lookup(token.name) else {
            ours.push(arg);
            continue;
        };
        if flag.translation == Translation::Same && token.dashes == 2 {
            ours.push(arg);
            continue;
        }
        let display = format!("--{}", flag.name);
        let value = match (flag.takes, token.value) {
            (Takes::Bool, None) => "true".to_string(),
            (Takes::Bool, Some(value)) => match parse_go_bool(value) {
                Ok(value) => value.to_string(),
                Err(reason) => return Err(invalid(&display, value, reason)),
            },
            (Takes::Value, Some(value)) => value.to_string(),
            (Takes::Value, None) => match args.next() {
                Some(value) => value.into_string().map_err(|_| LegacyFlagError::NotUtf8 { flag: display.clone() })?,
                None => return Err(LegacyFlagError::MissingValue { flag: display }),
            },
        };
        if flag.translation == Translation::Same {
            // ours: only the spelling changes, in place
            ours.push(format!("{display}={value}").into());
            continue;
        }
        match given.iter_mut().find(|g| g.flag.name == flag.name) {
            // a pflag Value whose Set parses each occurrence into one struct: the parts add up
            Some(earlier) if table.accumulated.contains(&flag.name) => {
                earlier.value = format!("{},{value}", earlier.value)
            }
            // Go: the last value wins; the flag keeps its first place in the log
            Some(earlier) => earlier.value = value,
            None => given.push(Given { flag, value }),
        }
    }

    let mut resolution =
        Resolution { given: &given, ours: &ours, added: Vec::new(), deprecations: Vec::new(), level: None };
    for g in &given {
        resolution.generic(g)?;
    }
    (table.custom)(&mut resolution)?;
    let Resolution { mut added, mut deprecations, level, .. } = resolution;

    for (legacy, arg) in &added {
        let name = arg.split_once('=').map_or(arg.as_str(), |(name, _)| name);
        if !REPEATABLE.contains(&name) && our_value(&ours, name).is_some() {
            return Err(LegacyFlagError::Conflict { legacy: legacy.clone(), ours: name.to_string() });
        }
    }
    // in the order the flags were first given (stable: a flag's own arguments keep theirs)
    let place = |flag: &str| given.iter().position(|g| format!("--{}", g.flag.name) == flag).unwrap_or(usize::MAX);
    deprecations.sort_by_key(|d| place(&d.flag));
    added.sort_by_key(|(legacy, _)| place(legacy));

    let mut translated: Vec<OsString> = program.into_iter().collect();
    translated.extend(ours);
    translated.extend(added.into_iter().map(|(_, arg)| OsString::from(arg)));
    translated.extend(rest);
    Ok(Translated {
        args: translated,
        legacy: LegacyFlags { deprecations, default_log_filter: level, logged: AtomicBool::new(false) },
    })
}

/// Parses this process's arguments as `F` after translating `table`'s SuperEdge flags;
/// errors (theirs or clap's) exit as clap's do (code 2; `--help` and `--version` 0).
pub fn parse<F: clap::Parser>(table: &LegacyTable) -> (F, LegacyFlags) {
    try_parse_from(table, std::env::args_os()).unwrap_or_else(|error| error.exit())
}

/// [`parse`] of `args` (the program name first), returning clap's error.
pub fn try_parse_from<F, I, A>(table: &LegacyTable, args: I) -> Result<(F, LegacyFlags), clap::Error>
where
    F: clap::Parser,
    I: IntoIterator<Item = A>,
    A: Into<OsString>,
{
    let Translated { args, legacy } =
        translate(table, args).map_err(|error| F::command().error(clap::error::ErrorKind::ValueValidation, error))?;
    Ok((F::try_parse_from(args)?, legacy))
}

/// Go's `strconv.ParseBool`, for our boolean flags that also take `=true`/`=false`.
pub fn parse_go_bool(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err("not a boolean (true or false)".to_string()),
    }
}

/// The log filter for klog's verbosity `v`: V(0)-V(3) is what a component says in steady
/// state (info), V(4)-V(5) debugging, V(6) and more tracing.
pub fn verbosity_filter(v: u32) -> &'static str {
    match v {
        0..=3 => "info",
        4..=5 => "debug",
        _ => "trace",
    }
}

/// `-name`, `--name`, `-name=value`, `--name=value`.
struct FlagToken<'a> {
    dashes: usize,
    name: &'a str,
    value: Option<&'a str>,
}

impl<'a> FlagToken<'a> {
    fn parse(arg: &'a str) -> Option<Self> {
        let (dashes, body) = match arg.strip_prefix("--") {
            Some(body) => (2, body),
            None => (1, arg.strip_prefix('-')?),
        };
        // `---x`, `-`, `--=x` are nobody's flags
        if body.is_empty() || body.starts_with(['-', '=']) {
            return None;
        }
        let (name, value) = match body.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (body, None),
        };
        Some(Self { dashes, name, value })
    }
}

/// A SuperEdge flag as given (its last value; a boolean's as `true`/`false`).
#[derive(Debug)]
struct Given {
    flag: &'static LegacyFlag,
    value: String,
}

/// What the translation has found and made so far; the tables' resolvers
/// ([`LegacyTable::custom`]) read the flags given from it and add their translations to it.
pub struct Resolution<'a> {
    given: &'a [Given],
    ours: &'a [OsString],
    /// (the SuperEdge flag, our argument `--name=value`)
    added: Vec<(String, String)>,
    deprecations: Vec<Deprecation>,
    level: Option<&'static str>,
}

impl Resolution<'_> {
    /// The value given for SuperEdge's `name`.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.given.iter().find(|g| g.flag.name == name).map(|g| g.value.as_str())
    }

    /// Our flag `name`'s value among our own arguments given (`--name=value`, `--name value`;
    /// a bare `--name` gives ""), the last one given.
    pub fn our_value(&self, name: &str) -> Option<&str> {
        our_value(self.ours, name)
    }

    /// SuperEdge's `name` read as our `args`, said as `by` (with `note`) in its deprecation.
    pub fn replaced(&mut self, name: &str, args: Vec<String>, by: String, note: Option<String>) {
        let flag = format!("--{name}");
        self.added.extend(args.into_iter().map(|arg| (flag.clone(), arg)));
        self.deprecations.push(Deprecation { flag, treatment: Treatment::Replaced { by, note } });
    }

    /// Read as our `args`, said as such.
    pub fn rename(&mut self, name: &str, args: Vec<String>, note: Option<String>) {
        let by = args.join(" ");
        self.replaced(name, args, by, note);
    }

    /// SuperEdge's `name` ignored for `reason`, said in its deprecation.
    pub fn ignore(&mut self, name: &str, reason: impl Into<String>) {
        self.deprecations
            .push(Deprecation { flag: format!("--{name}"), treatment: Treatment::Ignored { reason: reason.into() } });
    }

    fn generic(&mut self, g: &Given) -> Result<(), LegacyFlagError> {
        let name = g.flag.name;
        let display = format!("--{name}");
        let value = g.value.as_str();
        match g.flag.translation {
            Translation::Same | Translation::Custom => {}
            Translation::Rename { to, check, note } => {
                check_value(&display, value, check)?;
                if value.is_empty() {
                    self.ignore(name, format!("empty, which is SuperEdge's default (unset); {to} keeps ours"));
                } else {
                    self.rename(name, vec![format!("{to}={value}")], note.map(str::to_string));
                }
            }
            Translation::Seconds { to, note } => {
                let seconds = whole_number(&display, value, 1)?;
                self.rename(name, vec![format!("{to}={seconds}s")], note.map(str::to_string));
            }
            Translation::Ignore { check, reason } => {
                check_value(&display, value, check)?;
                self.ignore(name, reason);
            }
            Translation::Unsupported { reason } => {
                if !value.is_empty() {
                    let value = value.to_string();
                    return Err(LegacyFlagError::Unsupported { flag: display, value, reason: reason.into() });
                }
                self.ignore(name, "empty, which is SuperEdge's default (unset)");
            }
            Translation::Verbosity => {
                let v = whole_number(&display, value, 0)?;
                let v = u32::try_from(v).map_err(|_| invalid(&display, value, "too large".into()))?;
                let filter = verbosity_filter(v);
                self.level = Some(filter);
                let note = format!(
                    "klog verbosity {v} is the log filter {filter} (0-3 info, 4-5 debug, 6+ trace), used when RUST_LOG is not set"
                );
                self.replaced(name, Vec::new(), format!("RUST_LOG={filter}"), Some(note));
            }
        }
        Ok(())
    }
}

/// Our flag `name`'s value among `ours` (`--name=value`, `--name value`; a bare `--name`
/// gives ""), the last one given.
fn our_value<'a>(ours: &'a [OsString], name: &str) -> Option<&'a str> {
    let mut found = None;
    let mut args = ours.iter().filter_map(|a| a.to_str());
    while let Some(arg) = args.next() {
        if arg == name {
            found = Some(args.clone().next().filter(|next| !next.starts_with('-')).unwrap_or(""));
        } else if let Some(value) = arg.strip_prefix(name).and_then(|tail| tail.strip_prefix('=')) {
            found = Some(value);
        }
    }
    found
}

/// The error for SuperEdge's `flag` given `value`, refused for `reason`.
pub fn invalid(flag: &str, value: &str, reason: String) -> LegacyFlagError {
    LegacyFlagError::InvalidValue { flag: flag.to_string(), value: value.to_string(), reason }
}

/// A decimal whole number of at least `min`.
pub fn whole_number(flag: &str, value: &str, min: i64) -> Result<u64, LegacyFlagError> {
    let number: i64 = value.parse().map_err(|_| invalid(flag, value, "not a whole number".into()))?;
    if number < min {
        return Err(invalid(flag, value, format!("must be at least {min}")));
    }
    u64::try_from(number).map_err(|_| invalid(flag, value, format!("must be at least {min}")))
}

fn check_value(flag: &str, value: &str, check: Check) -> Result<(), LegacyFlagError> {
    let fail = |reason: &str| Err(invalid(flag, value, reason.to_string()));
    match check {
        Check::Any => Ok(()),
        Check::Bool => parse_go_bool(value).map(drop).map_err(|reason| invalid(flag, value, reason)),
        Check::Int => match value.parse::<i64>() {
            Ok(_) => Ok(()),
            Err(_) => fail("not a whole number"),
        },
        Check::Positive => whole_number(flag, value, 1).map(drop),
        Check::Float | Check::PositiveFloat => match value.parse::<f64>() {
            Ok(number) if number.is_finite() && (check == Check::Float || number > 0.0) => Ok(()),
            Ok(_) if check == Check::PositiveFloat => fail("must be a number above 0"),
            _ => fail("not a number"),
        },
        Check::Severity => {
            let named = ["INFO", "WARNING", "ERROR", "FATAL"].contains(&value.to_ascii_uppercase().as_str());
            match named || value.parse::<i32>().is_ok() {
                true => Ok(()),
                false => fail("not a severity (INFO, WARNING, ERROR, FATAL)"),
            }
        }
        Check::FeatureGates => {
            for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let Some((_, enabled)) = pair.split_once('=') else { return fail("not key=true|false pairs") };
                if parse_go_bool(enabled.trim()).is_err() {
                    return fail("not key=true|false pairs");
                }
            }
            Ok(())
        }
        Check::BindAddress => value.parse::<BindAddress>().map(drop).map_err(|reason| invalid(flag, value, reason)),
    }
}

/// A table's entry: SuperEdge's flag `name` (with `-` as separator), its syntax and fate.
pub const fn flag(name: &'static str, takes: Takes, translation: Translation) -> LegacyFlag {
    LegacyFlag { name, takes, translation }
}

/// A flag's value checked, then ignored for `reason`.
pub const fn ignore(check: Check, reason: &'static str) -> Translation {
    Translation::Ignore { check, reason }
}

/// A flag read as our flag `to`, its value checked, with no note.
pub const fn rename(to: &'static str, check: Check) -> Translation {
    Translation::Rename { to, check, note: None }
}

const STDERR_ONLY: &str = "we always log to stderr, where the container runtime keeps the log";
/// Why SuperEdge's client rate limits (`--kube-qps`, `--kube-burst`) are ignored.
pub const NO_CLIENT_RATE_LIMIT: &str =
    "our API client has no client-side rate limit (the API server's priority and fairness applies)";
/// Why SuperEdge's API server URL flags (`--master`, `--masterurl`) take only an empty value.
pub const MASTER_URL: &str =
    "name the API server in the kubeconfig's cluster server (--kubeconfig); an empty value is accepted";

/// klog's flags, which every SuperEdge binary took: every table's, after its own
/// ([`LegacyTable::lookup`]).
pub const KLOG: &[LegacyFlag] = &[
    flag("v", Takes::Value, Translation::Verbosity),
    flag(
        "vmodule",
        Takes::Value,
        ignore(Check::Any, "per-file verbosity has no equivalent: RUST_LOG takes per-module directives"),
    ),
    flag("alsologtostderr", Takes::Bool, ignore(Check::Bool, STDERR_ONLY)),
    flag("logtostderr", Takes::Bool, ignore(Check::Bool, STDERR_ONLY)),
    flag("stderrthreshold", Takes::Value, ignore(Check::Severity, STDERR_ONLY)),
    flag("log-dir", Takes::Value, ignore(Check::Any, STDERR_ONLY)),
    flag("log-file", Takes::Value, ignore(Check::Any, STDERR_ONLY)),
    flag("log-file-max-size", Takes::Value, ignore(Check::Int, STDERR_ONLY)),
    flag("one-output", Takes::Bool, ignore(Check::Bool, STDERR_ONLY)),
    flag("skip-headers", Takes::Bool, ignore(Check::Bool, "every line carries its time, level and target")),
    flag("skip-log-headers", Takes::Bool, ignore(Check::Bool, STDERR_ONLY)),
    flag("add-dir-header", Takes::Bool, ignore(Check::Bool, "lines name the module, not the source file")),
    flag("log-backtrace-at", Takes::Value, ignore(Check::Any, "no stack traces are logged on a line")),
];

/// The resolver of a table without [`Translation::Custom`] flags.
pub fn no_custom(_: &mut Resolution<'_>) -> Result<(), LegacyFlagError> {
    Ok(())
}

#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(test)]
mod tests;
