//! `jobwarden history list [--project] [--name] [--outcome] [--since]
//! [--until] [--grep] [--limit] [--json]`: executions newest first. Exit 1 when nothing
//! matched (`--json` still prints `[]`).
//!
//! This file also owns what the other query commands share: the
//! `--outcome` parser, the JSON shape of one execution
//! ([`ExecutionJson`], documented in `docs/history-json.md`) and the
//! 80-column table. The queries themselves live in `ledger/history.rs`.

use std::process::ExitCode;

use serde::Serialize;

use crate::cli::{GlobalArgs, HistoryListArgs};
pub(super) use crate::commands::args::Window;
pub(super) use crate::commands::output::{
    Cell, Column, Table, fmt_ago, fmt_duration, found, print_json, print_line, prompt_label,
    timestamp,
};
use jobwarden_ledger::history::Filter;
use jobwarden_ledger::{Execution, Outcome, Source};
use jobwarden_sys::clock::Timestamp;

pub fn run(global: &GlobalArgs, args: &HistoryListArgs) -> anyhow::Result<ExitCode> {
    let window = Window::parse(args.since.as_deref(), args.until.as_deref())?;
    let filter = Filter {
        project: args.project.clone(),
        name: args.name.clone(),
        outcome: parse_outcome(args.outcome.as_deref())?,
        since_ms: window.since_ms,
        until_ms: window.until_ms,
        grep: args.grep.clone().filter(|g| !g.is_empty()),
    };
    let (_, _, ledger) = super::open(global)?;
    let limit = if args.limit == 0 {
        u32::MAX
    } else {
        args.limit
    };
    let (rows, total) = ledger.list_counted(&filter, limit)?;
    crate::commands::output::say_more(total.saturating_sub(rows.len() as u64), args.limit);
    if args.json {
        let view: Vec<ExecutionJson<'_>> = rows.iter().map(ExecutionJson::from).collect();
        print_json(&view)?;
    } else if rows.is_empty() {
        print_line("no executions matched")?;
    } else {
        print_table(&rows)?;
    }
    Ok(found(!rows.is_empty()))
}

/// `--outcome`: one of the outcome names; the error lists them all.
pub(super) fn parse_outcome(value: Option<&str>) -> anyhow::Result<Option<Outcome>> {
    value
        .map(|v| v.parse::<Outcome>())
        .transpose()
        .map_err(|m| anyhow::anyhow!("--outcome: {m}"))
}

/// One execution as every `--json` output shows it (docs/history-json.md).
#[derive(Debug, Serialize)]
pub(crate) struct ExecutionJson<'a> {
    id: &'a str,
    project: &'a str,
    name: &'a str,
    attempt: u32,
    retry_of: Option<&'a str>,
    profile: Option<&'a str>,
    outcome: &'static str,
    exit_code: Option<i32>,
    signal: Option<&'a str>,
    failure_stage: Option<&'a str>,
    error_message: Option<&'a str>,
    result_ref: Option<&'a str>,
    host: &'a str,
    started_at: Option<Timestamp>,
    finished_at: Timestamp,
    duration_ms: Option<u64>,
    disposition: Option<&'a str>,
    source: Source,
}

impl<'a> From<&'a Execution> for ExecutionJson<'a> {
    fn from(e: &'a Execution) -> Self {
        ExecutionJson {
            id: &e.id,
            project: &e.project,
            name: &e.name,
            attempt: e.attempt,
            retry_of: e.retry_of.as_deref(),
            profile: e.profile.as_deref(),
            outcome: e.outcome.as_str(),
            exit_code: e.exit_code,
            signal: e.signal.as_deref(),
            failure_stage: e.failure_stage.as_deref(),
            error_message: e.error_message.as_deref(),
            result_ref: e.result_ref.as_deref(),
            host: &e.host,
            started_at: e.started_at.map(timestamp),
            finished_at: timestamp(e.finished_at),
            duration_ms: e.duration_ms,
            disposition: e.disposition.as_deref(),
            source: e.source,
        }
    }
}

/// The table's columns; with the caps a row fits 80 columns.
pub(super) const COLUMNS: [Column; 6] = [
    Column::left("ID", jobwarden_ledger::SHORT_ID_MAX),
    Column::left("PROMPT", 24),
    Column::left("OUTCOME", 12),
    Column::right("ATTEMPT", 7),
    Column::right("DURATION", 8),
    Column::left("FINISHED", 12),
];

/// The header and one line per execution.
pub(super) fn print_table(rows: &[Execution]) -> anyhow::Result<()> {
    crate::commands::output::print_table(&COLUMNS, rows, cells)
}

/// One execution as a table row: short id, prompt, outcome, attempt,
/// duration and how long ago it finished.
pub(super) fn cells(e: &Execution, now_ms: u64) -> Vec<Cell> {
    let duration = e.duration_ms.map_or_else(|| "-".into(), fmt_duration);
    vec![
        jobwarden_ledger::short_id(&e.id).into(),
        prompt_label(&e.project, &e.name).into(),
        Cell::state(e.outcome.as_str()),
        e.attempt.to_string().into(),
        duration.into(),
        fmt_ago(e.finished_at, now_ms).into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_rows_fit_80_columns() {
        let mut e = Execution::new(
            "0190aaaa-bbbb-7ccc-8ddd-eeeeeeeeeeee".into(),
            "a-rather-long-project-name/with/depth",
            "and-a-long-prompt-name",
            Outcome::RateLimited,
            0,
            "h",
            Source::Daemon,
        );
        e.attempt = 12;
        e.started_at = Some(0);
        e.duration_ms = Some(36_000_000);
        let mut table = Table::new(&COLUMNS);
        table.push(cells(&e, 400 * 86_400_000));
        for line in table.lines(false) {
            assert!(
                unicode_width::UnicodeWidthStr::width(line.as_str()) <= 80,
                "{} cells: {line}",
                line.len()
            );
        }
    }

    #[test]
    fn durations_and_ages_read_naturally() {
        assert_eq!(fmt_duration(850), "850ms");
        assert_eq!(fmt_duration(12_345), "12.3s");
        assert_eq!(fmt_duration(245_000), "4m05s");
        assert_eq!(fmt_duration(7_380_000), "2h03m");
        assert_eq!(fmt_ago(0, 180_000), "3m ago");
        assert_eq!(fmt_ago(5_000, 0), "just now");
    }
}
