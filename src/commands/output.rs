//! Printing shared by the commands: JSON on stdout, and the human forms of
//! durations, ages, prompt names, final states and table cells (80-column
//! tables, rendered by `output/table.rs`), and whether to colour. A reader
//! that closes stdout early (`| head`) ends a command quietly
//! ([`quiet_on_closed_pipe`]). What jobs wrote reaches a terminal only
//! neutralised (`output/visible.rs`).

mod table;
mod visible;

pub use table::{Align, Cell, Column, Table, fit, pad};
pub use visible::{Neutralising, neutralise_str};

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::Context;
use serde::Serialize;

use crate::commands::EXIT_NO;
use jobwarden_model::job::{JobRecord, JobState};
use jobwarden_sys::clock::Timestamp;

/// A `--limit` as a row count: 0 means every row.
pub fn limit_of(given: u32) -> usize {
    match given {
        0 => i64::MAX as usize,
        n => n as usize,
    }
}

/// Say on stderr that `more` rows matched beyond the `limit` shown, and
/// how to see them (stdout keeps to the rows, JSON or not).
pub fn say_more(more: u64, limit: u32) {
    if more > 0 {
        jobwarden_sys::logging::line(format_args!(
            "jobwarden: {more} more not shown (--limit {limit}); --limit N shows more, --limit 0 all"
        ));
    }
}

/// Pretty JSON and a newline on stdout; a closed pipe is an error, not a panic.
pub fn print_json(value: &impl Serialize) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value).context("writing JSON to stdout")?;
    writeln!(out).context("writing to stdout")
}

/// One line on stdout; a closed pipe is an error, not a panic (never
/// `println!`, which panics on it).
pub fn print_line(text: impl std::fmt::Display) -> anyhow::Result<()> {
    writeln!(std::io::stdout().lock(), "{text}").context("writing to stdout")
}

/// Did `e` come from writing to a pipe whose reader has gone (`| head`)?
pub fn is_closed_pipe(e: &anyhow::Error) -> bool {
    use std::io::ErrorKind::BrokenPipe;
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == BrokenPipe)
            || cause
                .downcast_ref::<serde_json::Error>()
                .and_then(serde_json::Error::io_error_kind)
                == Some(BrokenPipe)
    })
}

/// A command's result, except that a closed stdout ends it quietly with
/// status 0: the reader asked for no more, which is not an error.
pub fn quiet_on_closed_pipe(result: anyhow::Result<ExitCode>) -> anyhow::Result<ExitCode> {
    match result {
        Err(e) if is_closed_pipe(&e) => Ok(ExitCode::SUCCESS),
        other => other,
    }
}

/// How a job ended, in one line: `succeeded`, `failed (exit 3): <reason>`,
/// `aborted (SIGTERM): <reason>`. For a job that has not ended, its state.
pub fn final_state(rec: &JobRecord) -> String {
    let mut line = rec.state.to_string();
    // A phase's failure says so; the exit code is the main command's.
    match rec.failure_stage.as_deref() {
        Some(stage @ ("prepare" | "publish")) => line.push_str(&format!(" in {stage}")),
        _ => match (rec.exit_code, rec.signal.as_deref()) {
            // A signal says more than the 128 + n code it gave.
            (_, Some(signal)) => line.push_str(&format!(" ({signal})")),
            (Some(code), None) if !matches!(rec.state, JobState::Succeeded | JobState::Merged) => {
                line.push_str(&format!(" (exit {code})"));
            }
            _ => {}
        },
    }
    if let Some(reason) = rec.state_reason.as_deref().filter(|r| !r.is_empty()) {
        line.push_str(": ");
        line.push_str(reason);
    }
    line
}

/// `project/name`, or `name` for a prompt at the top of the inbox.
pub fn prompt_label(project: &str, name: &str) -> String {
    if project.is_empty() {
        name.to_owned()
    } else {
        // A script's absolute project folder may end with `/` (or be `/`).
        format!("{}/{name}", project.trim_end_matches('/'))
    }
}

/// `text` cut or padded to exactly `width` terminal cells, left-aligned:
/// one column of a line that is not a [`Table`].
pub fn fit_pad(text: &str, width: usize) -> String {
    pad(&fit(text, width), width, Align::Left)
}

/// `text` in lines of at most `width` characters, broken between words
/// (a word longer than `width` gets a line of its own, uncut).
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let fits = line.chars().count() + 1 + word.chars().count() <= width;
        if !line.is_empty() && !fits {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// `850ms`, `12.3s`, `4m05s`, `2h03m`.
pub fn fmt_duration(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{}m{:02}s", ms / 60_000, ms / 1000 % 60),
        _ => format!("{}h{:02}m", ms / 3_600_000, ms / 60_000 % 60),
    }
}

pub use jobwarden_sys::clock::fmt_ago;

/// How long ago, never rounded to "just now": `4.6s ago` under a minute,
/// else as [`fmt_ago`]. For an age that is the point (a stale heartbeat).
pub fn fmt_ago_exact(then_ms: u64, now_ms: u64) -> String {
    let ms = now_ms.saturating_sub(then_ms);
    if ms < 60_000 {
        format!("{:.1}s ago", ms as f64 / 1000.0)
    } else {
        fmt_ago(then_ms, now_ms)
    }
}

/// `512 B`, `8.0 MiB`, `228.5 GiB`.
pub fn fmt_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Exit 0 when something was found, 1 (a clean "no") when not.
pub fn found(any: bool) -> ExitCode {
    if any {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_NO)
    }
}

/// The wall-clock time of an epoch-ms value.
pub fn timestamp(ms: u64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_millis(ms))
}

/// `now`, `in 42s`, `in 3m`, `in 5h`, `in 2d`.
pub fn fmt_in(then_ms: u64, now_ms: u64) -> String {
    let s = then_ms.saturating_sub(now_ms) / 1000;
    match s {
        0 => "now".into(),
        1..60 => format!("in {s}s"),
        60..3600 => format!("in {}m", s / 60),
        3600..86_400 => format!("in {}h", s / 3600),
        _ => format!("in {}d", s / 86_400),
    }
}

/// Colour is used only when stdout is a terminal and `NO_COLOR` is unset
/// (or empty), so pipes and scripts always get plain text.
pub fn colour() -> bool {
    use std::io::IsTerminal;
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        wants_colour(
            std::io::stdout().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
        )
    })
}

/// The decision behind [`colour`]: a terminal, and no `NO_COLOR` with a
/// value (<https://no-color.org>: an empty one does not count).
pub fn wants_colour(stdout_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stdout_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// The SGR colour of a job state or ledger outcome: green succeeded, red
/// failed / timed out / rejected / setup failed (and their outcomes), yellow aborted /
/// interrupted / cancelled / rate limited, cyan live (and waiting in the
/// inbox). `None` for anything else.
pub fn state_colour(state: &str) -> Option<&'static str> {
    match state {
        "succeeded" | "success" => Some("32"),
        "failed" | "failure" | "timed_out" | "timeout" | "rejected" | "setup_failed" => Some("31"),
        "aborted" | "interrupted" | "cancelled" | "rate_limited" => Some("33"),
        "waiting" | "deferred" | "queued" | "preparing" | "running" | "publishing" => Some("36"),
        _ => None,
    }
}

/// `text` in bold red when colouring (for warnings like `STALE`).
pub fn alarm(text: &str) -> String {
    if colour() {
        format!("\x1b[1;31m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

/// A table on stdout: the header, then one row per item as `cells`
/// renders it (given the current time in epoch ms, for relative times),
/// coloured when [`colour`] says so.
pub fn print_table<T>(
    columns: &[Column],
    rows: &[T],
    cells: impl Fn(&T, u64) -> Vec<Cell>,
) -> anyhow::Result<()> {
    let now = Timestamp::now().epoch_ms();
    let mut table = Table::new(columns);
    for row in rows {
        table.push(cells(row, now));
    }
    print_lines(&table.lines(colour()))
}

/// Lines on stdout, in one locked write.
pub fn print_lines(lines: &[String]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    for line in lines {
        writeln!(out, "{line}").context("writing to stdout")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn wrap_breaks_between_words_and_never_cuts_one() {
        let lines = wrap("program `x` not found on PATH (/a:/b); install it", 20);
        assert_eq!(
            lines,
            ["program `x` not", "found on PATH", "(/a:/b); install it"]
        );
        assert_eq!(
            wrap("averyveryverylongword x", 5),
            ["averyveryverylongword", "x"]
        );
        assert!(wrap("  ", 5).is_empty());
    }

    use super::*;

    #[test]
    fn an_exact_age_is_never_just_now() {
        assert_eq!(fmt_ago(1_000, 5_600), "just now");
        assert_eq!(fmt_ago_exact(1_000, 5_600), "4.6s ago");
        assert_eq!(fmt_ago_exact(0, 125_000), "2m ago");
    }

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(fmt_bytes(0), "0 B");
        assert_eq!(fmt_bytes(1023), "1023 B");
        assert_eq!(fmt_bytes(8 * 1024 * 1024), "8.0 MiB");
        assert_eq!(fmt_bytes(245_384_572_928), "228.5 GiB");
    }

    #[test]
    fn a_closed_pipe_is_recognised_through_context() {
        let io = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        let e = anyhow::Error::from(io).context("writing to stdout");
        assert!(is_closed_pipe(&e));
        let other = anyhow::anyhow!("disk full").context("writing to stdout");
        assert!(!is_closed_pipe(&other));
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(wants_colour(true, None));
        assert!(
            wants_colour(true, Some(OsStr::new(""))),
            "empty NO_COLOR counts as unset"
        );
        assert!(!wants_colour(true, Some(OsStr::new("1"))));
        assert!(!wants_colour(false, None), "never into a pipe or file");
    }

    #[test]
    fn ages_and_durations_are_short() {
        assert_eq!(fmt_ago(0, 5_000), "just now");
        assert_eq!(fmt_ago(0, 180_000), "3m ago");
        assert_eq!(fmt_duration(850), "850ms");
        assert_eq!(fmt_duration(245_000), "4m05s");
    }
}
