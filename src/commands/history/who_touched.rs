//! `jobwarden history who-touched <path> [--outcome O] [--since WHEN]
//! [--json]`: executions that ran on (`executed_on`) or changed
//! (`affected`) a file, or anything under a folder, newest first, each
//! with the matching paths and their relation; `--outcome` and `--since`
//! keep those that ended so, since then ("has a failing run touched this
//! file in the last week?").
//! A relative argument is made absolute against the current folder; it
//! need not exist (it may have been deleted since). Exit 1 when none did.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;

use super::list::{COLUMNS, ExecutionJson, Table, Window, cells, found, print_json, print_line};
use crate::cli::{GlobalArgs, WhoTouchedArgs};
use jobwarden_ledger::history::{StoredPath, Touch};
use jobwarden_sys::clock::Timestamp;

pub fn run(global: &GlobalArgs, args: &WhoTouchedArgs) -> anyhow::Result<ExitCode> {
    let path = query_path(&args.path)?;
    let outcome = super::list::parse_outcome(args.outcome.as_deref())?;
    let since = Window::parse(args.since.as_deref(), None)?.since_ms;
    let (_, _, ledger) = super::open(global)?;
    let mut touches = ledger.touching(&path)?;
    touches.retain(|t| {
        outcome.is_none_or(|o| t.execution.outcome == o)
            && since.is_none_or(|s| t.execution.finished_at >= s)
    });
    if args.json {
        let view: Vec<TouchJson<'_>> = touches.iter().map(TouchJson::from).collect();
        print_json(&view)?;
    } else if touches.is_empty() {
        print_line(format_args!(
            "no recorded execution ran on or affected {path}"
        ))?;
    } else {
        print_human(&touches).context("writing to stdout")?;
    }
    Ok(found(!touches.is_empty()))
}

/// The argument as the ledger stores paths: absolute, no trailing `/`
/// (except `/` itself). `.` components and doubled slashes are dropped;
/// `..` is kept, as std::path::absolute keeps it (symlinks make removing
/// it a guess). Non-UTF-8 bytes are replaced as the recorder replaces them.
fn query_path(arg: &Path) -> anyhow::Result<String> {
    let abs = std::path::absolute(arg)
        .with_context(|| format!("making path {:?} absolute", arg.display().to_string()))?;
    let text = abs.to_string_lossy();
    let trimmed = text.trim_end_matches('/');
    Ok(if trimmed.is_empty() { "/" } else { trimmed }.to_owned())
}

/// One entry of `who-touched --json` (docs/history-json.md).
#[derive(Serialize)]
struct TouchJson<'a> {
    #[serde(flatten)]
    execution: ExecutionJson<'a>,
    paths: &'a [StoredPath],
}

impl<'a> From<&'a Touch> for TouchJson<'a> {
    fn from(t: &'a Touch) -> Self {
        TouchJson {
            execution: ExecutionJson::from(&t.execution),
            paths: &t.paths,
        }
    }
}

/// The `history list` table, each execution followed by its paths.
fn print_human(touches: &[Touch]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    let now = Timestamp::now().epoch_ms();
    let mut table = Table::new(&COLUMNS);
    for t in touches {
        table.push(cells(&t.execution, now));
    }
    let mut lines = table.lines(crate::commands::output::colour()).into_iter();
    writeln!(out, "{}", lines.next().unwrap_or_default())?;
    for (t, row) in touches.iter().zip(lines) {
        writeln!(out, "{row}")?;
        for p in &t.paths {
            writeln!(out, "    {:<12} {}", p.relation, p.path)?;
        }
    }
    Ok(())
}
