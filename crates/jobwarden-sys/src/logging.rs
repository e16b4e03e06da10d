//! The daemon's own log (stderr): human lines by default, one JSON object
//! per event with `--log-format json`. Journald-friendly: no colours unless
//! stderr is a terminal (and `NO_COLOR` is unset), and no timestamps of our
//! own when journald is the reader (`JOURNAL_STREAM` set), since it stamps
//! every line itself. `RUST_LOG` filters (default `info`).
//!
//! Monitors log through the daemon's stderr in the same format: the daemon
//! passes its `--log-format` on.
//!
//! A closed or full stderr (a log reader that exited or stalled) never
//! stops or panics anyone: lines go through a bounded queue to one writer
//! thread (`logging/queue.rs`, which says why), are dropped and counted
//! when they cannot be written, and the count is logged once writes work
//! again. The CLI's own messages on stderr take the same way ([`line`]).

mod queue;
pub use queue::dropped_total as log_lines_dropped;

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
        .with_writer(|| QueuedLine(Vec::new()))
        // A line that cannot be written is counted by the queue; the
        // subscriber's own report of it would go to stderr with a panic.
        .log_internal_errors(false);
    match format {
        LogFormat::Json => builder.json().with_current_span(true).init(),
        LogFormat::Text => {
            let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            let builder = builder.with_ansi(ansi);
            if journald {
                let format = tracing_subscriber::fmt::format().without_time();
                builder.event_format(Journald(format)).init();
            } else {
                builder.init();
            }
        }
    }
}

/// Text lines for journald: each starts with its syslog priority (`<4>`
/// for a warning), which journald takes off and keeps as the entry's
/// `PRIORITY`, so that `journalctl -p warning` finds warnings and errors.
struct Journald<F>(F);

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for Journald<F>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        write!(writer, "<{}>", syslog_priority(*event.metadata().level()))?;
        self.0.format_event(ctx, writer, event)
    }
}

/// The syslog priority of a level (journald's `PRIORITY`).
fn syslog_priority(level: tracing::Level) -> u8 {
    match level {
        tracing::Level::ERROR => 3,
        tracing::Level::WARN => 4,
        tracing::Level::INFO => 6,
        tracing::Level::DEBUG | tracing::Level::TRACE => 7,
    }
}

/// One message line for stderr (a newline is added), in order with the
/// log, never blocking and never panicking: see the module doc.
pub fn line(text: impl std::fmt::Display) {
    queue::push(format!("{text}\n").into_bytes());
}

/// Text for stderr as it is, without a newline: a terminal's live status
/// line, redrawn in place with `\r` (see `commands/progress.rs`). Queued
/// in order with [`line`], never blocking and never panicking.
pub fn partial(text: impl std::fmt::Display) {
    queue::push(text.to_string().into_bytes());
}

/// Exit status after a panic: EX_SOFTWARE.
pub const EXIT_PANIC: i32 = 70;

/// Make any panic end this process at once with [`EXIT_PANIC`], after one
/// log line `<who> panicked (<panic>); <then>` (with a backtrace when
/// `RUST_BACKTRACE` asks for one). For the daemon and the monitors.
///
/// Reported through the log queue, not the default hook's direct write to
/// stderr: a full stderr (a log reader that stopped reading) must not keep
/// a panicking process from exiting; [`flush`] gives up on a stuck write.
pub fn exit_on_panic(who: &'static str, then: &'static str) {
    std::panic::set_hook(Box::new(move |info| {
        let backtrace = std::backtrace::Backtrace::capture();
        let backtrace = match backtrace.status() {
            std::backtrace::BacktraceStatus::Captured => format!("\n{backtrace}"),
            _ => String::new(),
        };
        tracing::error!("{who} panicked ({info}); {then}{backtrace}");
        flush();
        std::process::exit(EXIT_PANIC);
    }));
}

/// Waits until what this process queued for stderr is written (or the
/// write is stuck on a reader that stopped reading): before it exits.
pub fn flush() {
    queue::flush();
}

/// One log event as the subscriber formats it, queued whole when the
/// subscriber drops it.
struct QueuedLine(Vec<u8>);

impl std::io::Write for QueuedLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for QueuedLine {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            queue::push(std::mem::take(&mut self.0));
        }
    }
}
