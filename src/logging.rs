//! The daemon's own log (stderr): human lines by default, one JSON object
//! per event with `--log-format json`. Journald-friendly: no colours unless
//! stderr is a terminal (and `NO_COLOR` is unset), and no timestamps of our
//! own when journald is the reader (`JOURNAL_STREAM` set), since it stamps
//! every line itself. `RUST_LOG` filters (default `info`).
//!
//! Monitors log through the daemon's stderr in the same format: the daemon
//! passes its `--log-format` on.

use std::io::IsTerminal;
use std::sync::OnceLock;

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line (fields, spans, level, target).
    Json,
}

impl LogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// The format this process logs in (for its children to use too).
pub fn format() -> LogFormat {
    FORMAT.get().copied().unwrap_or_default()
}

/// Install the global subscriber. Call once, first thing.
pub fn init(format: LogFormat) {
    let _ = FORMAT.set(format);
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let journald = std::env::var_os("JOURNAL_STREAM").is_some();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().with_current_span(true).init(),
        LogFormat::Text => {
            let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            let builder = builder.with_ansi(ansi);
            if journald {
                builder.without_time().init();
            } else {
                builder.init();
            }
        }
    }
}
