//! Logs on stderr, filtered by `RUST_LOG` (default `info`, or the level of SuperEdge's
//! `--v`): text for people, colours only on a terminal (escape codes garble log
//! collectors), or one JSON object a line.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// `--log-format`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Installs the global subscriber. Fails when one is installed already (a test process
/// may build several runtimes; the first one's logging stays).
pub fn init(format: LogFormat) -> Result<(), crate::Error> {
    init_with_default(format, "info")
}

/// [`init`] with `default_filter` (e.g. `debug`) where `RUST_LOG` is not set (or does not
/// parse).
pub fn init_with_default(format: LogFormat, default_filter: &str) -> Result<(), crate::Error> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => builder.json().with_current_span(true).try_init(),
    };
    installed.map_err(crate::Error::Logging)
}
